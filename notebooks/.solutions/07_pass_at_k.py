"""Reference answers of notebooks/07_pass_at_k.ipynb (used only under AGENTGYM_NB_SOLUTIONS=1)."""
import math

__all__ = ["my_pass_at_k"]


def my_pass_at_k(n, c, k):
    """1 - C(n - c, k) / C(n, k): one minus the share of k-subsets of the n samples that hold no success."""
    if not 0 < k <= n:
        raise ValueError(f"pass@k needs 1 <= k <= n, got k={k}, n={n}")
    return 1 - math.comb(n - c, k) / math.comb(n, k)   # math.comb is 0 when k > n - c: pass@k = 1
