"""Reference answers of notebooks/04_fixed_horizon.ipynb (used only under AGENTGYM_NB_SOLUTIONS=1)."""

__all__ = ["my_zero_adv_share"]


def my_zero_adv_share(episodes):
    """The share of the step's groups whose episodes all got the same reward (all failed, or all succeeded alike):
    their group-relative advantage is 0."""
    rewards = {}
    for e in episodes:
        rewards.setdefault(e["group"], set()).add(e["reward"])
    return sum(len(r) == 1 for r in rewards.values()) / len(rewards)
