"""Reference answers of notebooks/01_rollout_anatomy.ipynb (used only under AGENTGYM_NB_SOLUTIONS=1)."""
from agentgym_nb.rollout.trajectory import POLICY

__all__ = ["count_trained", "first_sampled_of_turn"]


def count_trained(kinds):
    """The trained tokens are exactly the sampled ones: kind POLICY."""
    return sum(kind == POLICY for kind in kinds)


def first_sampled_of_turn(kinds, turn_ids, k):
    """The first POLICY id whose turn is k."""
    return next(i for i, (kind, turn) in enumerate(zip(kinds, turn_ids)) if kind == POLICY and turn == k)
