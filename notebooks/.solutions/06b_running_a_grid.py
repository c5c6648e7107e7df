"""Reference answers of notebooks/06b_running_a_grid.ipynb (used only under AGENTGYM_NB_SOLUTIONS=1)."""
import math

from agentgym_nb.viz.plots import T975

__all__ = ["my_seeds_needed"]


def my_seeds_needed(mean, sd):
    """The smallest n >= 2 with t_{0.975, n-1} * sd / sqrt(n) < |mean|: Student's t up to 31 seeds, 1.96 beyond, where
    the inequality solves to n > (1.96 sd / |mean|)^2."""
    if mean == 0:
        return math.inf
    for n in range(2, len(T975) + 2):
        if T975[n - 2] * sd / math.sqrt(n) < abs(mean):
            return n
    return max(len(T975) + 2, math.floor((1.96 * sd / abs(mean)) ** 2) + 1)
