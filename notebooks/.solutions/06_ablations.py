"""Reference answers of notebooks/06_ablations.ipynb (used only under AGENTGYM_NB_SOLUTIONS=1)."""
import math

import numpy as np

from agentgym_nb.viz.plots import T975

__all__ = ["my_t_interval"]


def my_t_interval(differences):
    """mean +- t_{0.975, n-1} * s / sqrt(n), s the unbiased standard deviation of the per-seed differences."""
    d = np.asarray(differences, dtype=float)
    n = len(d)
    half = T975[n - 2] * d.std(ddof=1) / math.sqrt(n)
    return d.mean() - half, d.mean() + half
