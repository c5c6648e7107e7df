"""Reference answers of notebooks/05_scalinginter.ipynb (used only under AGENTGYM_NB_SOLUTIONS=1)."""

__all__ = ["my_cut_share"]


def my_cut_share(episodes):
    """Cut by the horizon: the turns ran out before the episode ended (not done) and the token budget did not stop
    it first (not truncated)."""
    return sum(not e["done"] and not e["truncated"] for e in episodes) / len(episodes)
