"""Reference answers of notebooks/03_advantage_estimators.ipynb (used only under AGENTGYM_NB_SOLUTIONS=1)."""
import torch

__all__ = ["my_grpo", "my_gae", "my_step_advantages"]


def my_grpo(scores, group, loss_mask, eps=1e-6):
    """(score - group mean) / (unbiased group std + eps) per episode, on its trainable tokens; 0 for a group of one
    (and, through its zero deviation, for a group whose scores are all equal)."""
    adv = torch.zeros(len(scores))
    for g in group.unique():
        members = group == g
        if members.sum() > 1:
            s = scores[members]
            adv[members] = (s - s.mean()) / (s.std() + eps)
    return adv[:, None] * loss_mask


def my_gae(token_rewards, values, loss_mask, gamma, lam):
    """Backwards over positions, skipping untrainable ones: V_next and A_next are those of the next TRAINABLE token
    (0 after the last), so an observation between two replies costs no discount and adds no TD error."""
    adv = torch.zeros_like(token_rewards)
    for b in range(len(token_rewards)):
        v_next = a_next = 0.0
        for t in reversed(range(token_rewards.shape[1])):
            if loss_mask[b, t]:
                delta = float(token_rewards[b, t]) + gamma * v_next - float(values[b, t])
                a_next = delta + gamma * lam * a_next
                v_next = float(values[b, t])
                adv[b, t] = a_next
    return adv


def my_step_advantages(scores, group, anchors, gamma, eps=1e-6):
    """Turn k of K earns gamma^(K - k) x the score; the turns of one group that acted in one state form a step group,
    and each turn gets its return minus the step group's mean over the unbiased std + eps (0 for a step group of one
    turn or of equal returns)."""
    returns, step_groups = {}, {}
    for b, states in enumerate(anchors):
        for k, state in enumerate(states, start=1):
            returns[b, k] = gamma ** (len(states) - k) * float(scores[b])
            step_groups.setdefault((int(group[b]), state), []).append((b, k))
    out = {}
    for turns in step_groups.values():
        values = torch.tensor([returns[x] for x in turns], dtype=torch.float64)
        if len(turns) > 1 and values.max() > values.min():
            values = (values - values.mean()) / (values.std() + eps)
        else:
            values = torch.zeros_like(values)
        out.update(zip(turns, values.tolist()))
    return [[out[b, k] for k in range(1, len(states) + 1)] for b, states in enumerate(anchors)]
