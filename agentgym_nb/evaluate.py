"""Evaluation metrics: unbiased pass@k, pass^k, and confidence intervals.

For one test item sampled n times with c successes (an env-specific success predicate, not "score > 0"):
pass@k is the chance that at least one of k samples drawn without replacement succeeds, pass^k the chance that all
k do. Average them over items for the reported number.
"""
from __future__ import annotations

import math
from typing import Sequence


def pass_at_k(n: int, c: int, k: int) -> float:
    """pass@k = 1 - C(n - c, k) / C(n, k) (unbiased, Chen et al. 2021).

    Computed as 1 - prod_{i = n-c+1}^{n} (1 - k / i), which avoids huge binomials; 1 when n - c < k.
    """
    _check_counts(n, c, k)
    if n - c < k:
        return 1.0
    return 1.0 - math.prod(1.0 - k / i for i in range(n - c + 1, n + 1))


def pass_hat_k(n: int, c: int, k: int) -> float:
    """pass^k = C(c, k) / C(n, k) = prod_{i=0}^{k-1} (c - i) / (n - i): the chance that k samples all succeed."""
    _check_counts(n, c, k)
    return math.prod((c - i) / (n - i) for i in range(k))


def wilson_interval(successes: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """Wilson score interval for a success rate p = successes / n:

    (p + z^2 / 2n +- z * sqrt(p (1 - p) / n + z^2 / 4n^2)) / (1 + z^2 / n). Unlike p +- z*se it stays inside [0, 1]
    and is not empty at p = 0 or 1.
    """
    if n < 1 or not 0 <= successes <= n:
        raise ValueError(f"need n >= 1 and 0 <= successes <= n, got successes={successes}, n={n}")
    p = successes / n
    denom = 1 + z * z / n
    center = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return max(0.0, center - half), min(1.0, center + half)


def mean_ci(values: Sequence[float], z: float = 1.96) -> tuple[float, float]:
    """Normal-approximation interval for a mean: mean +- z * s / sqrt(n), s the unbiased standard deviation."""
    values = [float(v) for v in values]
    n = len(values)
    if n < 2:
        raise ValueError(f"mean_ci needs at least 2 values, got {n}")
    mean = sum(values) / n
    s = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    return mean - z * s / math.sqrt(n), mean + z * s / math.sqrt(n)


def _check_counts(n: int, c: int, k: int) -> None:
    if not 1 <= k <= n:
        raise ValueError(f"need 1 <= k <= n (k samples drawn from n), got n={n}, k={k}")
    if not 0 <= c <= n:
        raise ValueError(f"need 0 <= c <= n (c successes among n samples), got n={n}, c={c}")


def avg_at_k(scores: Sequence[float]) -> float:
    """avg@k: the mean score over the k samples of an item (AgentGym-RL's Avg@K, averaged over items by the caller)."""
    if not scores:
        raise ValueError("avg_at_k needs at least one score")
    return sum(scores) / len(scores)


def evaluate(engine, env_factory, item_ids: list[int], chat, *, n: int = 1, max_rounds: int = 20, params=None,
             max_total_tokens: int = 4096, env_timeout: float = 60.0, trajectories_out: list | None = None) -> dict:
    """Play `n` episodes per item and summarise: success rate (env-specific predicate) with a 95% Wilson interval,
    mean reward, mean turns, and pass@k / pass^k for k = 1..n.

    Episodes whose env failed are excluded and counted under `failed`: an env error is not a zero reward. The
    interval treats episodes as independent, which is exact for n = 1 (the default).
    """
    from .rollout.runner import run_episodes
    if not item_ids:
        raise ValueError("evaluate needs at least one item id")
    trajs = run_episodes(engine, env_factory, list(item_ids), chat, n=n, max_rounds=max_rounds, params=params,
                         max_total_tokens=max_total_tokens, env_timeout=env_timeout)
    if trajectories_out is not None:
        trajectories_out.extend(trajs)
    ok = [t for t in trajs if not t.failed]
    if not ok:
        raise RuntimeError(f"every evaluation episode failed in the env; first error: {trajs[0].failed}")
    wins = sum(t.success for t in ok)
    per_item: dict[int, list] = {}
    for t in ok:
        per_item.setdefault(t.item_id, []).append(t)
    out = {"items": len(per_item), "episodes": len(ok), "failed": len(trajs) - len(ok),
           "success": wins / len(ok), "success_ci": list(wilson_interval(wins, len(ok))),
           "mean_reward": sum(t.reward for t in ok) / len(ok),
           "mean_turns": sum(t.num_rounds for t in ok) / len(ok),
           "truncated": sum(t.truncated for t in ok) / len(ok), "max_rounds": max_rounds}
    full = [eps for eps in per_item.values() if len(eps) == n]
    for k in range(1, n + 1):
        if full:
            out[f"pass@{k}"] = sum(pass_at_k(n, sum(e.success for e in eps), k) for eps in full) / len(full)
            out[f"pass^{k}"] = sum(pass_hat_k(n, sum(e.success for e in eps), k) for eps in full) / len(full)
    return out
