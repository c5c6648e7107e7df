"""Reference answers of notebooks/03b_update_step.ipynb (used only under AGENTGYM_NB_SOLUTIONS=1)."""
import torch

__all__ = ["my_ppo_loss", "my_k3", "my_k3_grad", "my_tis_weights", "my_aggregate"]


def my_ppo_loss(logp, old_logp, advantages, loss_mask, clip_ratio):
    """Per token max(-A rho, -A clip(rho, 1 - eps, 1 + eps)) with rho = exp(logp - old_logp), averaged over the
    trainable tokens (token-mean)."""
    ratio = torch.exp(logp - old_logp)
    per_token = torch.maximum(-advantages * ratio, -advantages * ratio.clamp(1 - clip_ratio, 1 + clip_ratio))
    return (per_token * loss_mask).sum() / loss_mask.sum()


def my_k3(logp, ref_logp):
    """exp(-d) + d - 1 with d = logp - ref_logp, clamped at 10 (a torch expression of logp: it has a gradient)."""
    d = logp - ref_logp
    return (torch.exp(-d) + d - 1).clamp(max=10)


def my_k3_grad(logp, ref_logp):
    """d/dlogp (exp(-d) + d - 1) = 1 - exp(-d); 0 where the clamp at 10 binds (k3 is a constant there)."""
    d = logp - ref_logp
    return torch.where(torch.exp(-d) + d - 1 >= 10, 0.0, 1 - torch.exp(-d))


def my_tis_weights(trainer_logp, engine_logp, cap):
    """min(pi_trainer / pi_engine, cap) per token: only large weights are cut."""
    return torch.exp(trainer_logp - engine_logp).clamp(max=cap)


def my_aggregate(loss, loss_mask, mode):
    """token-mean: every trained token weighs the same; seq-mean-token-mean: each row's trained tokens are averaged,
    then the rows that have one."""
    m = loss_mask.float()
    if mode == "token-mean":
        return (loss * m).sum() / m.sum()
    rows = m.sum(-1) > 0
    per_row = (loss * m).sum(-1)[rows] / m.sum(-1)[rows]
    return per_row.mean()
