"""Reference answers of notebooks/00b_rl_in_one_page.ipynb (used only under AGENTGYM_NB_SOLUTIONS=1)."""
import torch

__all__ = ["my_rloo"]


def my_rloo(scores, group, loss_mask):
    """Each episode's score minus the mean score of the OTHER members of its group, on its trainable tokens; 0 for a
    group of one (no other member)."""
    adv = torch.zeros(len(scores))
    for g in group.unique():
        members = group == g
        n = int(members.sum())
        if n > 1:
            s = scores[members]
            adv[members] = s - (s.sum() - s) / (n - 1)
    return adv[:, None] * loss_mask
