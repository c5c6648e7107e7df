"""Reference answers of notebooks/03b_update_step.ipynb (used only under AGENTGYM_NB_SOLUTIONS=1)."""
import torch

__all__ = ["my_ppo_loss"]


def my_ppo_loss(logp, old_logp, advantages, loss_mask, clip_ratio):
    """Per token max(-A rho, -A clip(rho, 1 - eps, 1 + eps)) with rho = exp(logp - old_logp), averaged over the
    trainable tokens (token-mean)."""
    ratio = torch.exp(logp - old_logp)
    per_token = torch.maximum(-advantages * ratio, -advantages * ratio.clamp(1 - clip_ratio, 1 + clip_ratio))
    return (per_token * loss_mask).sum() / loss_mask.sum()
