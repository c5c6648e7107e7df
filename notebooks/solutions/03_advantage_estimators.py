"""Reference answers of notebooks/03_advantage_estimators.ipynb (used only under AGENTGYM_NB_SOLUTIONS=1)."""
import torch

__all__ = ["my_grpo"]


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
