"""The paper's claims, each judged on its own by RULES, and the statistics they read: paired differences (by seed
and by (seed, item)) and the policy tokens a held-out curve took to reach a success."""
from __future__ import annotations

import math

import numpy as np

from .settings import RULES


def paired(a: dict, b: dict, seeds: list[int]) -> dict:
    """a minus b, two evaluations per seed ({seed: evaluation}) on the same items: paired by seed (t-interval over
    seeds) and by (seed, item) (percentile bootstrap resampling items within each seed, 2,000 resamples)."""
    from ..viz.plots import t_interval
    seeds = [s for s in seeds if s in a and s in b]
    if not seeds:
        return {}
    per_seed = [a[s]["success"] - b[s]["success"] for s in seeds]
    mean, lo, hi = t_interval(per_seed)
    diffs = [np.array([a[s]["items"][i] - b[s]["items"][i] for i in sorted(a[s]["items"]) if i in b[s]["items"]])
             for s in seeds]
    rng = np.random.default_rng(0)
    boot = np.mean([[d[rng.integers(0, len(d), len(d))].mean() for d in diffs] for _ in range(2000)], axis=1)
    blo, bhi = np.quantile(boot, [0.025, 0.975])
    return {"seeds": seeds, "per_seed": per_seed, "mean": mean, "ci95_seeds": [lo, hi],
            "ci95_items": [float(blo), float(bhi)], "pairs": int(sum(len(d) for d in diffs))}


def reach(tokens, ys, target: float) -> float | None:
    """Policy tokens sampled when a curve (tokens[i], ys[i]) first reached `target`, linearly interpolated between
    its points; None if it never did."""
    if len(ys) and ys[0] >= target:
        return float(tokens[0])
    for t0, t1, y0, y1 in zip(tokens, tokens[1:], ys, ys[1:]):
        if y1 >= target:
            return float(t0 + (t1 - t0) * (target - y0) / (y1 - y0))
    return None


def tokens_to_reach(run: dict, target: float) -> float | None:
    """Policy tokens sampled when the run's held-out curve (H = 20) first reached `target` (`reach`)."""
    return reach([c[1] for c in run["curve_h20"]], [c[2] for c in run["curve_h20"]], target)


def point_eval(run: dict, point: str) -> dict | None:
    """The held-out evaluation (at the study's evaluation horizon) of `run` at budget point `point`."""
    p = run["points"].get(point)
    return None if p is None else run["evals"].get(f"{p['step']}/{run['eval_horizon']}")


def _sign(d: dict | None) -> int:
    """+1 / -1 where a paired difference is established above / below 0 by RULES, else 0."""
    from ..viz.plots import established
    if not d or len(d["seeds"]) < RULES["min_seeds"]:
        return 0
    return established(*d["ci95_seeds"], len(d["seeds"]))


def _judged(claim: str, rule: str, verdict: str, **numbers) -> dict:
    return {"claim": claim, "rule": rule, "verdict": verdict, **numbers}


def fixed_long_unstable(runs: dict) -> dict:
    """Claim 1: fixed 20 falls from its peak. Per seed, its peak (the highest held-out point up to the equal-steps
    point, the earliest of ties) minus its equal-steps point, paired on the same items."""
    peaks, finals, per_seed = {}, {}, []
    for (arm, seed), r in sorted(runs.items()):
        if arm != "fixed20" or "steps" not in r["points"]:
            continue
        end, h = r["points"]["steps"]["step"], r["eval_horizon"]
        step, y = max(((s, y) for s, _, y in r["curve_h20"] if s <= end), key=lambda c: c[1])
        peaks[seed], finals[seed] = r["evals"][f"{step}/{h}"], r["evals"][f"{end}/{h}"]
        per_seed.append({"seed": seed, "peak_step": step, "peak": y, "final": finals[seed]["success"],
                         "max_kl": max(m.get("kl", 0) for m in r["steps"])})
    fall = paired(peaks, finals, sorted(peaks))
    n, (lo, hi) = len(fall.get("seeds", [])), fall.get("ci95_seeds", (math.nan, math.nan))
    verdict = ("inconclusive" if n < RULES["min_seeds"]
               else "reproduced" if fall["mean"] >= RULES["fall"] and lo > RULES["fall_noise"]
               else "not reproduced" if hi < RULES["fall"] else "inconclusive")
    fall_points, noise_points = round(100 * RULES["fall"]), round(100 * RULES["fall_noise"])
    return _judged(
        "fixed long (H = 20) is unstable: it falls from its peak by the end of training",
        f"the fall is fixed 20's highest held-out success (H = 20) up to the equal-steps point minus its success at "
        f"that point, per seed, paired on the same items; reproduced when the mean fall is at least {fall_points} "
        f"points and its interval over seeds lies above {noise_points} points (the highest of ~7 noisy points sits "
        f"a few points above a flat curve); not reproduced when the interval lies below {fall_points} points (a fall "
        f"that large is excluded)", verdict, fixed20_peak_minus_final=fall or None, per_seed=per_seed)


def fixed_short_plateaus(runs: dict, pairs: dict, steps: int) -> dict:
    """Claim 2: fixed 6 stops improving, below where fixed 20 gets. Its gain over the second half of training
    (the equal-steps point minus the last evaluation at or before steps // 2), and fixed 20 minus fixed 6."""
    mids, finals = {}, {}
    for (arm, seed), r in sorted(runs.items()):
        if arm != "fixed6" or "steps" not in r["points"]:
            continue
        end, h = r["points"]["steps"]["step"], r["eval_horizon"]
        mid = max(s for s, _, _ in r["curve_h20"] if s <= steps // 2)
        mids[seed], finals[seed] = r["evals"][f"{mid}/{h}"], r["evals"][f"{end}/{h}"]
    gain = paired(finals, mids, sorted(finals))
    long_minus_short = pairs.get("fixed20 - fixed6 @ steps")
    enough = all(d and len(d["seeds"]) >= RULES["min_seeds"] for d in (gain, long_minus_short))
    plateau = enough and gain["ci95_seeds"][1] < RULES["plateau"]
    rising = enough and gain["ci95_seeds"][0] > 0 and not plateau
    verdict = ("inconclusive" if not enough
               else "reproduced" if plateau and _sign(long_minus_short) > 0
               else "not reproduced" if rising or _sign(long_minus_short) < 0 else "inconclusive")
    plateau_points = round(100 * RULES["plateau"])
    return _judged(
        "fixed short (H = 6) plateaus: it stops improving, below where fixed long gets",
        f"fixed 6's gain is its held-out success at the equal-steps point minus at the middle of training; "
        f"reproduced when the gain's interval over seeds lies below +{plateau_points} points (a plateau) and fixed "
        f"20 - fixed 6 at equal steps is established above 0; not reproduced when the gain is established above 0 "
        f"and reaches +{plateau_points} points (still rising), or fixed 20 - fixed 6 is established below 0",
        verdict, fixed6_second_half_gain=gain or None, fixed20_minus_fixed6=long_minus_short)


def stepwise_fewer_tokens(runs: dict, resamples: int = 2000) -> dict:
    """Claim 3: per seed, the policy tokens stepwise sampled until its held-out curve reached the target over those
    fixed 20 sampled; the target is RULES["tokens_target"] of fixed 20's mean success at the equal-steps point. The
    interval over seeds is a t-interval of the log ratios; the one over (seed, item) pairs resamples each seed's items
    (one resample for every point of both curves of the seed, and the target moves with it) and takes the
    geometric mean of the ratios over seeds."""
    from ..viz.plots import t_interval
    claim = "stepwise reaches a given success with fewer policy tokens than fixed 20"
    rule = (f"the target is {RULES['tokens_target']:.0%} of fixed 20's mean held-out success at the equal-steps "
            "point; reproduced when the tokens stepwise needed to reach it over those fixed 20 needed (a ratio per "
            "seed) has an interval over seeds below 1 and no stepwise run stayed below the target where its fixed 20 "
            "run reached it; not reproduced when the interval lies above 1. A seed where either run never reached "
            "the target has no ratio")
    fixed = {s: r for (a, s), r in runs.items() if a == "fixed20" and "steps" in r["points"]}
    stepwise = {s: r for (a, s), r in runs.items() if a == "stepwise" and s in fixed}
    if not fixed:
        return _judged(claim, rule, "inconclusive", per_seed=[], tokens_ratio_stepwise_over_fixed20=None)
    target = RULES["tokens_target"] * float(np.mean([point_eval(r, "steps")["success"] for r in fixed.values()]))
    per_seed = []
    for seed in sorted(stepwise):
        ts, tl = tokens_to_reach(stepwise[seed], target), tokens_to_reach(fixed[seed], target)
        per_seed.append({"seed": seed, "stepwise_tokens": ts, "fixed20_tokens": tl,
                         "log_ratio": math.log(ts / tl) if ts and tl else None})
    logs = [x["log_ratio"] for x in per_seed if x["log_ratio"] is not None]
    m, lo, hi = t_interval(logs) if logs else (math.nan,) * 3
    stayed_below = [x["seed"] for x in per_seed if x["stepwise_tokens"] is None and x["fixed20_tokens"] is not None]
    verdict = ("inconclusive" if len(logs) < RULES["min_seeds"]
               else "reproduced" if hi < 0 and not stayed_below else "not reproduced" if lo > 0 else "inconclusive")
    return _judged(claim, rule, verdict, target_success=target, per_seed=per_seed,
                   tokens_ratio_stepwise_over_fixed20=[math.exp(x) for x in (m, lo, hi)] if logs else None,
                   ci95_items_of_the_tokens_ratio=(tokens_ratio_items_ci(fixed, stepwise, resamples)
                                                   if len(logs) > 1 else None),
                   stepwise_stayed_below_target=stayed_below)


def resampled_curve(run: dict, weights: np.ndarray, ids: list[str]) -> tuple[list[float], np.ndarray]:
    """A run's held-out curve under item resamples: (tokens per point, success [resample, point])."""
    h = run["eval_horizon"]
    outcomes = np.array([[run["evals"][f"{s}/{h}"]["items"][i] for i in ids] for s, _, _ in run["curve_h20"]])
    return [c[1] for c in run["curve_h20"]], weights @ outcomes.T / len(ids)


def tokens_ratio_items_ci(fixed: dict, stepwise: dict, resamples: int) -> list[float] | None:
    """The (seed, item) interval of claim 3's ratio: each seed's items resampled (`bootstrap_weights`, seeded by
    the seed), the target recomputed from fixed 20's resampled finals, the ratio per seed where both curves reach it,
    their geometric mean over seeds; the 2.5% and 97.5% quantiles over resamples (those where no seed has a ratio
    are left out)."""
    from ..evaluate import bootstrap_weights
    curves, finals = {}, []
    for seed, run in fixed.items():
        ids = sorted(point_eval(run, "steps")["items"])
        w = bootstrap_weights(len(ids), resamples=resamples, seed=seed)
        tokens, ys = resampled_curve(run, w, ids)
        finals.append(ys[:, [c[0] for c in run["curve_h20"]].index(run["points"]["steps"]["step"])])
        if seed in stepwise:
            curves[seed] = ((tokens, ys), resampled_curve(stepwise[seed], w, ids))
    targets = RULES["tokens_target"] * np.mean(finals, axis=0)
    ratios = []
    for r, target in enumerate(targets):
        logs = []
        for (ft, fy), (st, sy) in curves.values():
            ts, tl = reach(st, sy[r], target), reach(ft, fy[r], target)
            if ts and tl:
                logs.append(math.log(ts / tl))
        ratios.append(math.exp(np.mean(logs)) if logs else math.nan)
    if np.all(np.isnan(ratios)):
        return None
    return [float(q) for q in np.nanquantile(ratios, [0.025, 0.975])]


def stepwise_at_or_above_both(pairs: dict, point: str) -> dict:
    """Claim 4, at one budget: stepwise minus fixed 6 and minus fixed 20."""
    a, b = pairs.get(f"stepwise - fixed6 @ {point}"), pairs.get(f"stepwise - fixed20 @ {point}")
    s = (_sign(a), _sign(b))
    missing = [f"stepwise - {name} @ {point}" for name, d in (("fixed6", a), ("fixed20", b)) if not d]
    verdict = "inconclusive" if missing else "reproduced" if s == (1, 1) else "not reproduced" if -1 in s else \
        "inconclusive"
    return _judged(f"stepwise ends at or above both fixed horizons, equal {point}",
                   "reproduced when stepwise - fixed 6 and stepwise - fixed 20 are both established above 0; not "
                   "reproduced when either is established below 0" + (
                       " (fixed 20's equal-tokens point is its equal-steps point)" if point == "tokens" else ""),
                   verdict, stepwise_minus_fixed6=a, stepwise_minus_fixed20=b, missing_pairs=missing)


def verdicts(pairs: dict, runs: dict, steps: int) -> dict:
    """The paper's claims, each judged on its own: the claim and its rule in words, "reproduced", "not reproduced"
    or "inconclusive" (RULES), and the numbers it read. A claim whose arms have not run is inconclusive."""
    v = {"fixed_long_unstable": fixed_long_unstable(runs),
         "fixed_short_plateaus": fixed_short_plateaus(runs, pairs, steps),
         "stepwise_fewer_tokens": stepwise_fewer_tokens(runs),
         "stepwise_at_or_above_both_steps": stepwise_at_or_above_both(pairs, "steps"),
         "stepwise_at_or_above_both_tokens": stepwise_at_or_above_both(pairs, "tokens")}
    for arm in ("stepwise", "fixed20"):
        d = pairs.get(f"{arm} - {arm}-rpp @ steps")
        if d:
            v[f"grpo_at_or_above_reinforce_pp_{arm}"] = _judged(
                f"GRPO ends at or above REINFORCE++, {'stepwise' if arm == 'stepwise' else 'fixed H = 20'}",
                "reproduced when GRPO - REINFORCE++ is established above 0; not reproduced when established below 0",
                "reproduced" if _sign(d) > 0 else "not reproduced" if _sign(d) < 0 else "inconclusive",
                grpo_minus_reinforce_pp=d)
    return v
