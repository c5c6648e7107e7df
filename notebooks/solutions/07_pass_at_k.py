"""Reference answers of notebooks/07_pass_at_k.ipynb (used only under AGENTGYM_NB_SOLUTIONS=1)."""
import math

__all__ = ["my_pass_hat_k"]


def my_pass_hat_k(n, c, k):
    """C(c, k) / C(n, k): the share of k-subsets of the n samples that hold only successes."""
    if not 0 < k <= n:
        raise ValueError(f"pass^k needs 1 <= k <= n, got k={k}, n={n}")
    return math.comb(c, k) / math.comb(n, k)   # math.comb is 0 when k > c: pass^k = 0
