"""The numbers of an evaluation: unbiased pass@k and pass^k, confidence intervals, and the summary of episode
records overall and per category. Pure functions of counts and scores (numpy only).

For one test item sampled n times with c successes (the env's own predicate `env.success(reward)`: BabyAI reward > 0,
TextCraft reward 1, SciWorld score 100, SearchQA exact match, WebArena evaluator 1; never "score > 0"):
pass@k is the chance that at least one of k samples drawn without replacement succeeds, pass^k the chance that all
k do. Averaged over items they are the reported numbers. AgentGym-RL's own "Pass@K" (share of items whose best score
is above 0) is kept as `agentgym_pass@n` to show how far it is from both.
"""
from __future__ import annotations

import math
from collections.abc import Hashable, Mapping, Sequence

import numpy as np


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
    if c < k:
        return 0.0   # the product would pass through a negative factor and give -0.0
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
    # the interval always holds p; at p = 0 or 1 the bound equals p only up to rounding (0/27: lo = 6.9e-18)
    return min(p, max(0.0, center - half)), max(p, min(1.0, center + half))


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


def bootstrap_weights(m: int, *, resamples: int = 2000, seed: int = 0) -> np.ndarray:
    """W[r, i] = how often item i is drawn in resample r (m draws with replacement): a [resamples, m] count matrix.
    A statistic over a resample is then a weighted one over the original items (no copies of the data)."""
    if m < 1 or resamples < 1:
        raise ValueError(f"bootstrap needs m >= 1 items and resamples >= 1, got m={m}, resamples={resamples}")
    return np.random.default_rng(seed).multinomial(m, np.full(m, 1.0 / m), size=resamples)


def bootstrap_ci(values: Sequence[float], *, resamples: int = 2000, seed: int = 0,
                 level: float = 0.95) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean over items: resample the items with replacement `resamples` times
    and take the (1 - level)/2 and (1 + level)/2 quantiles of the resampled means. Items, not episodes, are the unit:
    the n samples of one item are not independent draws of the population."""
    v = np.asarray(values, dtype=float)
    w = bootstrap_weights(len(v), resamples=resamples, seed=seed)
    return _quantiles(w @ v / len(v), level)


def _quantiles(stats: np.ndarray, level: float) -> tuple[float, float]:
    lo, hi = np.nanquantile(stats, [(1 - level) / 2, (1 + level) / 2])
    return float(lo), float(hi)


def summarize(records: list[dict], *, n: int, ks: Sequence[int] | None = None, max_rounds: int | None = None,
              resamples: int = 2000, seed: int = 0, level: float = 0.95) -> dict:
    """Summary of episode records (dicts with position, category, reward, success, failed, num_rounds, truncated),
    overall and per category. Deterministic: the same records give the same summary, whatever order they came in.

    items          items with at least one episode the env did not fail (`failed` counts the failed episodes)
    success        successful episodes / episodes, with a Wilson interval (`success_ci`, treats episodes as
                   independent: exact for n = 1) and a bootstrap interval over items (`success_ci_bootstrap`)
    pass@k, pass^k averaged over the items that have all n episodes (env failures excluded), bootstrap `_ci`
    avg@n          mean score over items and samples (AgentGym-RL's Avg@K; SciWorld: 0-100)
    agentgym_pass@n share of items whose best score is > 0 (AgentGym-RL's Pass@K: biased, not a success rate)
    """
    ks = list(range(1, n + 1)) if ks is None else list(ks)
    for k in ks:
        _check_counts(n, 0, k)
    if not records:
        raise ValueError("summarize needs at least one episode record")
    ok = [r for r in records if not r["failed"]]
    if not ok:
        raise RuntimeError(f"every evaluation episode failed in the env; first error: {records[0]['failed']}")
    out = _block(records, n=n, ks=ks, resamples=resamples, seed=seed, level=level)
    out.update(n=n, k=ks, max_rounds=max_rounds, bootstrap={"resamples": resamples, "seed": seed, "level": level})
    categories = sorted({r["category"] for r in records})
    out["by_category"] = {cat: _block([r for r in records if r["category"] == cat], n=n, ks=ks,
                                      resamples=resamples, seed=seed, level=level) for cat in categories}
    return out


def _block(records: list[dict], *, n: int, ks: list[int], resamples: int, seed: int, level: float) -> dict:
    items: dict[int, list[dict]] = {}
    for r in records:
        items.setdefault(r["position"], [])
        if not r["failed"]:
            items[r["position"]].append(r)
    failed = sum(1 for r in records if r["failed"])
    eps = [e for _, group in sorted(items.items()) for e in group]
    if not eps:
        return {"items": 0, "episodes": 0, "failed": failed}
    rows = [group for _, group in sorted(items.items()) if group]
    wins = np.array([sum(e["success"] for e in g) for g in rows], dtype=float)
    tries = np.array([len(g) for g in rows], dtype=float)
    weights = bootstrap_weights(len(rows), resamples=resamples, seed=seed)   # one set of resamples for every number
    out = {"items": len(rows), "episodes": len(eps), "failed": failed,
           "success": float(wins.sum() / tries.sum()),
           "success_ci": list(wilson_interval(int(wins.sum()), int(tries.sum()))),
           "success_ci_bootstrap": list(_quantiles((weights @ wins) / (weights @ tries), level)),
           "mean_reward": _mean(e["reward"] for e in eps), f"avg@{n}": _mean(e["reward"] for e in eps),
           "mean_turns": _mean(e["num_rounds"] for e in eps), "truncated": _mean(e["truncated"] for e in eps)}
    full = np.array([len(g) == n for g in rows])
    out["pass_items"] = int(full.sum())
    if not full.any():
        return out
    w_full = weights[:, full]
    counts = [int(c) for c, f in zip(wins, full) if f]
    best_above_zero = [float(max(e["reward"] for e in g) > 0) for g, f in zip(rows, full) if f]
    columns = {f"pass@{k}": [pass_at_k(n, c, k) for c in counts] for k in ks}
    columns.update({f"pass^{k}": [pass_hat_k(n, c, k) for c in counts] for k in ks})
    columns[f"agentgym_pass@{n}"] = best_above_zero
    with np.errstate(invalid="ignore", divide="ignore"):   # a resample without any full item gives nan, dropped
        for name, values in columns.items():
            v = np.asarray(values)
            out[name] = float(v.mean())
            if not name.startswith("agentgym"):
                out[f"{name}_ci"] = list(_quantiles((w_full @ v) / w_full.sum(1), level))
    return out


def _mean(xs) -> float:
    xs = [float(x) for x in xs]
    return math.fsum(xs) / len(xs)   # exactly rounded, so the order records arrive in cannot change a digit


def pass_at_k_surface(outcomes: Mapping[int, Mapping[Hashable, Sequence[float]]], ks: Sequence[int] | None = None,
                      *, resamples: int = 2000, seed: int = 0, level: float = 0.95) -> dict:
    """pass@k as a function of samples k and evaluation horizon T: outcomes[T][item] holds the success (0 or 1) of
    each of the item's n samples played with at most T turns.

    cell (T, k) = mean over items of pass_at_k(n, c[T][item], k), c the item's successes at T. Its interval is the
    percentile bootstrap over items, with the same resampled items in every cell, so cells compare as paired. Items
    are those with all n samples at every horizon (an item whose episode failed in the env is left out: `dropped`).
    Returns {"horizons", "k", "n", "items", "dropped", "pass@k": [[cell per k] per T], "ci": [[[lo, hi] per k] per
    T], "level"}."""
    horizons = sorted(outcomes)
    if not horizons:
        raise ValueError("pass_at_k_surface needs outcomes at one horizon at least: {T: {item: [successes]}}")
    if any(x not in (0, 1) for T in horizons for v in outcomes[T].values() for x in v):
        raise ValueError("pass_at_k_surface: outcomes are per-sample successes, 0 or 1 (use env.success(reward))")
    sizes = {len(v) for T in horizons for v in outcomes[T].values()}
    n = max(sizes, default=0)
    if n < 1:
        raise ValueError("pass_at_k_surface: no item has a sample")
    every = set.intersection(*[{i for i, v in outcomes[T].items() if len(v) == n} for T in horizons])
    items = sorted(every)
    if not items:
        raise ValueError(f"no item has all n = {n} samples at every horizon {horizons}")
    ks = list(range(1, n + 1)) if ks is None else sorted(set(ks))
    for k in ks:
        _check_counts(n, 0, k)
    dropped = len(set().union(*[set(outcomes[T]) for T in horizons])) - len(items)
    weights = bootstrap_weights(len(items), resamples=resamples, seed=seed)
    table, intervals = [], []
    for T in horizons:
        counts = [int(sum(outcomes[T][i])) for i in items]
        rows = np.array([[pass_at_k(n, c, k) for c in counts] for k in ks])   # [k, item]
        table.append([float(r.mean()) for r in rows])
        intervals.append([list(_quantiles(weights @ r / len(items), level)) for r in rows])
    return {"horizons": horizons, "k": ks, "n": n, "items": len(items), "dropped": dropped, "pass@k": table,
            "ci": intervals, "level": level}


# ------------------------------------------------------------------------------------- comparing and reading runs

def per_item(records: list[dict], key: str = "success") -> dict[int, float]:
    """{item_id: mean of `key` over the item's episodes} from episode records (rollout logs, evaluation results);
    episodes that failed in the env are left out."""
    out: dict[int, list[float]] = {}
    for r in records:
        if not r.get("failed"):
            out.setdefault(r["item_id"], []).append(float(r[key]))
    return {i: float(np.mean(v)) for i, v in out.items()}


def paired_difference(after: dict, before: dict, *, resamples: int = 2000, seed: int = 0) -> dict:
    """after minus before on the items both have ({item: value}): the mean difference and its percentile bootstrap
    95% interval over items. Pairing by item removes the item-to-item spread that two separate intervals carry."""
    items = sorted(set(after) & set(before))
    if not items:
        raise ValueError("the two evaluations share no item: a paired difference needs the same held-out items")
    diffs = [after[i] - before[i] for i in items]
    lo, hi = bootstrap_ci(diffs, resamples=resamples, seed=seed)
    return {"mean": float(np.mean(diffs)), "ci95": [lo, hi], "items": len(items)}


def late_slope(values: Sequence[float]) -> tuple[float, float, float]:
    """(slope, lo, hi) per 10 steps of the least-squares line through the second half of a per-step curve, with a
    95% normal interval from the residuals (`trend` reads it). NaNs when fewer than 3 points."""
    y = np.asarray(values[len(values) // 2:], dtype=float)
    if len(y) < 3:
        return float("nan"), float("nan"), float("nan")
    x = np.arange(len(y), dtype=float)
    b, a = np.polyfit(x, y, 1)
    resid = y - (a + b * x)
    se = math.sqrt(resid.var(ddof=2) / ((x - x.mean()) ** 2).sum())
    return 10 * b, 10 * (b - 1.96 * se), 10 * (b + 1.96 * se)


def trend(slope: tuple[float, float, float], flat: float = 0.02) -> str:
    """What a `late_slope` (slope, lo, hi) per 10 steps can say: "rising" (the interval lies above 0), "falling"
    (below 0), "plateau" (it lies within +-`flat`: whatever the change, it is under 2 points of success per 10 steps
    by default), else "no measurable trend": an interval that holds 0 but is wider than that cannot tell a plateau
    from a slow rise or fall (too few steps, too much noise). "unknown" when the curve was too short for a slope."""
    _, lo, hi = slope
    if math.isnan(lo):
        return "unknown"
    if lo > 0:
        return "rising"
    if hi < 0:
        return "falling"
    return "plateau" if -flat <= lo and hi <= flat else "no measurable trend"


def drop_from_peak(values: Sequence[float], window: int) -> dict:
    """The fall of a per-step curve, smoothed by a trailing mean of `window` steps, from its peak to its end, and
    whether it is a collapse: the drop exceeds twice the noise of a smoothed value (the residual std over
    sqrt(window)) and gives back at least half of what the run had gained from its start to its peak."""
    v = np.asarray(values, dtype=float)
    s = np.array([v[max(0, i - window + 1): i + 1].mean() for i in range(len(v))])
    noise = float(np.std(v - s, ddof=1)) / math.sqrt(window) if len(v) > 2 else float("nan")
    drop, gained = float(s.max() - s[-1]), float(s.max() - s[0])
    collapse = None if math.isnan(noise) else bool(drop > 2 * noise and drop >= 0.5 * gained and drop > 0)
    return {"drop": drop, "threshold": 2 * noise, "peak_step": int(np.argmax(s)) + 1, "start": float(s[0]),
            "end": float(s[-1]), "collapse": collapse}
