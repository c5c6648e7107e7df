"""Figures of the horizon study (`bench/horizon.py`; its reports `bench/results/horizon.json`, the study of
2026-11-25/26, and `bench/results/horizon_study.json`, the study from the committed start weights): held-out success
over training with 95% bands across seeds per arm, a forest plot of the paired differences, success against the
evaluation horizon, and pass@(k, T) surfaces. Each figure has a pure function beside it that computes what it draws,
so the numbers can be checked.

    block = load_study(path=default_report())  # the main study of the newest report that holds runs
    verdict_rows(block)                        # each of the paper's claims: its verdict, its rule, its numbers
    plot_heldout_curves(block, ARM_GROUPS["horizon schedules, GRPO"])   # success at H = 20 over steps (or tokens)
    plot_forest(block, point="steps")          # arm minus arm, paired by seed and by item
    plot_eval_horizons(block, point="steps")   # success at 0.5x, 1x and 2x the horizon each arm trained at
    plot_lr_sweep(load_studies())              # the collapse regime: the same arms and seed at each learning rate
    plot_pass_at_k_surface(surface)            # pass@k against k, one line per evaluation horizon T (any policy:
                                               # agentgym_nb.evaluate.horizon_surface; a study arm: study_surfaces)
"""
from __future__ import annotations

import json
import os

import matplotlib.pyplot as plt
import numpy as np

from .plots import ESTABLISHED_COLORS, established, finish, seeds_label, smooth, t_interval

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))   # the repository
RESULT = os.path.join(ROOT, "bench", "results", "horizon.json")
ARM_LABELS = {"fixed6": "fixed H = 6", "fixed20": "fixed H = 20", "stepwise": "stepwise 6 -> 13 -> 20",
              "adaptive": "adaptive 6 -> 13 -> 20", "fixed20-rpp": "fixed H = 20, REINFORCE++",
              "stepwise-rpp": "stepwise, REINFORCE++", "fixed20-cut-baseline": "fixed H = 20, cut out of baseline",
              "fixed20-cut-discount": "fixed H = 20, cut turns discounted"}
ARM_COLORS = {"fixed6": "C0", "fixed20": "C3", "stepwise": "C2", "adaptive": "C4", "fixed20-rpp": "C1",
              "stepwise-rpp": "C8", "fixed20-cut-baseline": "C5", "fixed20-cut-discount": "C6"}
# The study's comparisons, one panel each (six arms with 95% bands in one panel cannot be read): the horizon
# schedules under GRPO, GRPO against REINFORCE++ at the two schedules both ran, and the handling of horizon cuts.
ARM_GROUPS = {"horizon schedules, GRPO": ["fixed6", "fixed20", "stepwise", "adaptive"],
              "GRPO against REINFORCE++": ["fixed20", "fixed20-rpp", "stepwise", "stepwise-rpp"],
              "episodes cut by the horizon, fixed H = 20": ["fixed20", "fixed20-cut-baseline", "fixed20-cut-discount"]}
MAIN_STUDY = "cpu-lr0.0003-steps60-n4"
STUDY_RESULT = os.path.join(os.path.dirname(RESULT), "horizon_study.json")   # the runs from the committed start
MIN_SEEDS = 3   # the study's rules' min_seeds: fewer seeds establish nothing


def load_studies(path: str = RESULT) -> dict[str, dict]:
    """Every study block of the horizon study's report by its key (preset-lr-steps-samples): the main study and the
    learning-rate sweep's."""
    if not os.path.exists(path):
        raise FileNotFoundError(f"{path} does not exist: run `python bench/horizon.py --jobs 2` (hours on 2 cores)")
    return json.load(open(path))["studies"]


def load_study(key: str = MAIN_STUDY, path: str = RESULT) -> dict:
    """One study block of the report, by its key."""
    studies = load_studies(path)
    if key not in studies:
        raise KeyError(f"no study {key!r} in {path}; it has {sorted(studies)}")
    return studies[key]


def default_report() -> str:
    """The report a lesson reads: `STUDY_RESULT` (the runs from the committed start weights) once its main study
    holds a paired difference over MIN_SEEDS seeds (what a verdict, an interval over seeds and the lessons' exercises
    need), else `RESULT` (the study of 2026-11-25/26, re-judged by today's rules)."""
    if os.path.exists(STUDY_RESULT):
        with open(STUDY_RESULT) as f:
            block = json.load(f).get("studies", {}).get(MAIN_STUDY, {})
        if any(len(pair.get("seeds", [])) >= MIN_SEEDS for pair in block.get("pairs", {}).values()):
            return STUDY_RESULT
    return RESULT


def drawn_groups(block: dict) -> dict[str, list[str]]:
    """The ARM_GROUPS a report can draw: the schedules once two of them have runs; every other comparison once an arm
    of its own (one that is not a GRPO schedule) has runs, since without one it would only draw the schedules again."""
    (first, schedules), *others = ARM_GROUPS.items()
    drawn = {first: schedules} if sum(bool(seeds_of(block, arm)) for arm in schedules) >= 2 else {}
    return drawn | {title: arms for title, arms in others
                    if any(seeds_of(block, arm) for arm in arms if arm not in schedules)}


def seeds_of(block: dict, arm: str) -> list[int]:
    return sorted(r["seed"] for r in block["runs"].values() if r["arm"] == arm)


def heldout_curve(block: dict, arm: str, *, x: str = "step") -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(x, mean, lo, hi): held-out success at the study's evaluation horizon over the arm's seeds, at the
    evaluations every seed has, with a 95% t-interval across seeds; x = "step", or "tokens" (policy tokens sampled
    by then, averaged over seeds)."""
    curves = [r["curve_h20"] for r in block["runs"].values() if r["arm"] == arm]
    if not curves:
        arms = sorted({r["arm"] for r in block["runs"].values()})
        raise KeyError(f"the study has no run of arm {arm!r}; arms: {arms}")
    steps = sorted(set.intersection(*[{c[0] for c in curve} for curve in curves]))
    at = [{c[0]: c for c in curve} for curve in curves]
    column = {"step": 0, "tokens": 1}[x]
    xs = np.array([np.mean([a[s][column] for a in at]) for s in steps])
    stats = np.array([t_interval([a[s][2] for a in at], bounds=(0, 1)) for s in steps]).reshape(len(steps), 3)
    return xs, stats[:, 0], stats[:, 1], stats[:, 2]


def budget_end(block: dict, arm: str, point: str = "tokens", *, x: str = "step") -> tuple | None:
    """(x, mean, lo, hi): held-out success at the study's evaluation horizon at budget `point` over the arm's seeds
    that reached it, with a 95% t-interval across seeds; None if none has. Each seed reaches the equal-tokens budget
    at its own step, so the common steps of `heldout_curve` miss it. x is the mean step, or the mean policy tokens
    sampled by then."""
    ends = []
    for r in block["runs"].values():
        if r["arm"] == arm and point in r.get("points", {}):
            step = r["points"][point]["step"]
            ends.append(next(c for c in r["curve_h20"] if c[0] == step))
    if not ends:
        return None
    column = {"step": 0, "tokens": 1}[x]
    return (float(np.mean([c[column] for c in ends])), *t_interval([c[2] for c in ends], bounds=(0, 1)))


def plot_heldout_curves(block: dict, arms: list[str] | None = None, *, x: str = "step", ax=None,
                        path: str | None = None, title: str = ""):
    """Held-out success (the study's evaluation horizon) against training steps or tokens, one line per arm: the
    mean over seeds and its 95% band. The equal-steps point is a dotted vertical line; an arm's equal-tokens end
    (`budget_end`) is a white diamond with its interval. Arms without a finished run are left out (a study that is
    still running has some)."""
    arms = [a for a in (arms or ARM_LABELS) if seeds_of(block, a)]
    own = ax is None
    if own:
        fig, ax = plt.subplots(figsize=(8, 4.4), constrained_layout=True)
    for arm in arms:
        xs, mean, lo, hi = heldout_curve(block, arm, x=x)
        color = ARM_COLORS.get(arm)
        n = len(seeds_of(block, arm))
        ax.plot(xs, mean, marker="o", ms=3, color=color, label=f"{ARM_LABELS.get(arm, arm)} ({seeds_label(n)})")
        if n > 1:
            ax.fill_between(xs, lo, hi, color=color, alpha=0.15, lw=0)
        end = budget_end(block, arm, x=x)
        if end:
            ex, em, elo, ehi = end
            ax.errorbar([ex], [em], yerr=[[em - elo], [ehi - em]], fmt="D", ms=6, mfc="white", color=color, capsize=3)
    if x == "step":
        ax.axvline(block["settings"]["steps"], ls=":", c="grey", lw=1)
    ax.set_xlabel({"step": "training step", "tokens": "policy tokens sampled"}[x])
    ax.set_ylabel(f"held-out success at H = {_eval_horizon(block)}")
    return finish(ax, title=title, path=path if own else None)


def forest_rows(block: dict, point: str = "steps") -> list[dict]:
    """One row per paired comparison at budget `point` ("steps" or "tokens"): the mean difference in held-out
    success with its 95% interval over seeds (a t-interval of the per-seed differences) and over (seed, item)
    pairs (a bootstrap of items within seeds)."""
    rows = []
    for name, d in block["pairs"].items():
        pair, at = name.rsplit(" @ ", 1)
        if at != point:
            continue
        rows.append({"label": pair, "mean": d["mean"], "seeds": len(d["seeds"]), "ci_seeds": d["ci95_seeds"],
                     "ci_items": d["ci95_items"]})
    return rows


def plot_forest(block: dict, point: str = "steps", *, ax=None, path: str | None = None, title: str = ""):
    """The paired differences of `forest_rows` as a forest plot, in points: thick bar = 95% interval over seeds (what
    a verdict reads), thin bar = over items. A difference is established (green above 0, red below) only where the
    thick bar misses 0 over at least two seeds; one seed has no interval over seeds, so its pair stays grey."""
    rows = forest_rows(block, point)
    own = ax is None
    if own:
        fig, ax = plt.subplots(figsize=(8, 0.5 * len(rows) + 1.4), constrained_layout=True)
    ys = np.arange(len(rows))[::-1]
    for y, r in zip(ys, rows):
        (slo, shi), (ilo, ihi), mean = (100 * np.asarray(r["ci_seeds"]), 100 * np.asarray(r["ci_items"]),
                                        100 * r["mean"])
        color = forest_color(r)
        ax.plot([ilo, ihi], [y, y], color=color, lw=1)
        ax.plot([slo, shi], [y, y], color=color, lw=5, alpha=0.45, solid_capstyle="butt")
        ax.plot(mean, y, "o", color=color)
        ax.annotate(f"{mean:+.1f} pts ({seeds_label(r['seeds'])})", (mean, y),
                    textcoords="offset points", xytext=(0, 7), ha="center", fontsize=8)
    ax.axvline(0, c="black", lw=0.8)
    ax.set_yticks(ys, [r["label"] for r in rows])
    ax.set_xlabel("difference in held-out success, points (thick: 95% CI over seeds; thin: over items)")
    return finish(ax, title=title, path=path if own else None, legend=False)


def forest_color(row: dict) -> str:
    """A forest row's colour by `established` over its interval over seeds."""
    return ESTABLISHED_COLORS[established(*row["ci_seeds"], row["seeds"])]


def eval_horizon_rows(block: dict, point: str = "steps") -> dict[str, dict]:
    """{arm: {"1x": (mean, lo, hi), ...}}: held-out success at 0.5x, 1x and 2x the horizon each arm trained at by
    budget `point`, over seeds (the arm table of the report), and the horizons that means."""
    out = {}
    for arm, row in block["arms"].items():
        if point in row:
            out[arm] = {"trained_horizon": row[point]["trained_horizon"], **row[point]["success_at_trained_horizon"]}
    return out


def plot_eval_horizons(block: dict, point: str = "steps", *, ax=None, path: str | None = None, title: str = ""):
    """Success when evaluated at half, once and twice the horizon an arm trained at (x: the factor), one line per
    arm with 95% intervals over seeds: does a policy trained short use more turns when given them?"""
    rows = eval_horizon_rows(block, point)
    own = ax is None
    if own:
        fig, ax = plt.subplots(figsize=(7, 4), constrained_layout=True)
    factors = ["0.5x", "1x", "2x"]
    for i, (arm, r) in enumerate(rows.items()):
        stats = np.array([r[f] for f in factors], dtype=float)
        offset = (i - len(rows) / 2) * 0.03
        xs = np.array([0.5, 1, 2]) * (1 + offset)
        ax.errorbar(xs, stats[:, 0], yerr=[stats[:, 0] - stats[:, 1], stats[:, 2] - stats[:, 0]], marker="o",
                    capsize=3, color=ARM_COLORS.get(arm),
                    label=f"{ARM_LABELS.get(arm, arm)} (trained at H = {'/'.join(map(str, r['trained_horizon']))})")
    ax.set_xscale("log", base=2)
    ax.set_xticks([0.5, 1, 2], ["0.5x", "1x", "2x"])
    ax.minorticks_off()
    ax.set_xlabel("evaluation horizon / trained horizon")
    ax.set_ylabel("held-out success")
    return finish(ax, title=title, path=path if own else None)


def _eval_horizon(block: dict) -> int:
    return next(iter(block["runs"].values()))["eval_horizon"]


def lr_sweep_runs(studies: dict[str, dict], arms: tuple[str, ...] = ("fixed20", "stepwise"),
                  seed: int = 0) -> list[dict]:
    """The collapse regime: each run of `arms` and `seed` in the study blocks that share the main study's settings
    but its learning rate, in order of learning rate then arm: {lr, arm, heldout: [(step, success at H = 20)],
    kl: [(step, KL)], horizon_grows_at: [step], eval_horizon}."""
    main = {k: v for k, v in studies[MAIN_STUDY]["settings"].items() if k != "lr"}
    rows = []
    for block in sorted(studies.values(), key=lambda b: b["lr"]):
        if {k: v for k, v in block["settings"].items() if k != "lr"} != main:
            continue
        for arm in arms:
            run = block["runs"].get(f"{arm}/s{seed}")
            if run:
                rows.append({"lr": block["lr"], "arm": arm, "eval_horizon": run["eval_horizon"],
                             "heldout": [(c[0], c[2]) for c in run["curve_h20"]],
                             "kl": [(m["step"], m["kl"]) for m in run["steps"]],
                             "horizon_grows_at": [m["step"] for prev, m in zip(run["steps"], run["steps"][1:])
                                                  if m["max_rounds"] > prev["max_rounds"]]})
    return rows


def lr_sweep_table(studies: dict[str, dict], arms: tuple[str, ...] = ("fixed20", "stepwise"),
                   seed: int = 0) -> list[dict]:
    """One row per run of `lr_sweep_runs`: its arm and learning rate, its last step, held-out success at the start,
    peak and end, the mean KL over each third of the main study's steps (stepwise: its three horizons) and its
    largest KL in one step."""
    steps = studies[MAIN_STUDY]["settings"]["steps"]
    rows = []
    for r in lr_sweep_runs(studies, arms, seed):
        success = [y for _, y in r["heldout"]]
        thirds = [[k for step, k in r["kl"] if (step - 1) * 3 // steps == i] for i in range(3)]
        rows.append({"arm": ARM_LABELS.get(r["arm"], r["arm"]), "lr": f"{r['lr']:g}", "steps": r["heldout"][-1][0],
                     "held-out: start -> peak -> end": f"{success[0]:.3f} -> {max(success):.3f} -> {success[-1]:.3f}",
                     "mean KL, each third of training": " / ".join(f"{np.mean(t):.2f}" if t else "-" for t in thirds),
                     "largest KL": round(max(k for _, k in r["kl"]), 2)})
    return rows


def plot_lr_sweep(studies: dict[str, dict], arms: tuple[str, ...] = ("fixed20", "stepwise"), seed: int = 0, *,
                  smooth_window: int = 5, path: str | None = None):
    """Held-out success at H = 20 (left) and the KL to the reference per training step (right, a trailing mean over
    `smooth_window` steps of the steps with KL > 0, log scale) of the same arms and seed at each learning rate: colour
    is the arm, the line style the learning rate. Thin vertical lines mark the steps where a run's horizon grew."""
    rows = lr_sweep_runs(studies, arms, seed)
    if not rows:
        raise KeyError(f"no run of {', '.join(arms)} with seed {seed} in the report's studies ({sorted(studies)})")
    lrs = sorted({r["lr"] for r in rows})
    styles = dict(zip(lrs, ["-", "--", ":", "-."] * len(lrs)))
    fig, (left, right) = plt.subplots(1, 2, figsize=(14, 4.4), constrained_layout=True)
    for r in rows:
        label = f"{ARM_LABELS.get(r['arm'], r['arm'])}, lr {r['lr']:g}"
        style = dict(color=ARM_COLORS.get(r["arm"]), ls=styles[r["lr"]], label=label)
        left.plot(*zip(*r["heldout"]), marker="o", ms=3, **style)
        # the first step's KL is 0 (the policy is the reference): left out, or it would pull the next steps' mean down
        steps, kl = zip(*[(step, k) for step, k in r["kl"] if k > 0])
        right.plot(steps, smooth(kl, smooth_window), **style)
        for step in r["horizon_grows_at"]:
            right.axvline(step, color=style["color"], ls=style["ls"], lw=0.8, alpha=0.5)
    left.set_xlabel("training step")
    left.set_ylabel(f"held-out success at H = {rows[0]['eval_horizon']}")
    right.set_xlabel("training step")
    right.set_ylabel(f"KL to the reference (trailing mean of {smooth_window} steps)")
    right.set_yscale("log")
    finish(left, title=f"held-out success, seed {seed}")
    return finish(right, title=f"KL per training step, seed {seed}", path=path)



# ------------------------------------------------------------------------------------------------- the verdicts

def describe_number(key: str, x) -> str | None:
    """A verdict's number as text: a paired difference with both intervals, a tokens ratio [mean, lo, hi], a list of
    numbers or of names, or a number; None for what a table cell cannot hold (per-seed records, curves)."""
    if isinstance(x, dict) and "mean" in x:
        return (f"{x['mean']:+.3f} [{x['ci95_seeds'][0]:+.3f}, {x['ci95_seeds'][1]:+.3f}] over "
                f"{seeds_label(len(x['seeds']))}, [{x['ci95_items'][0]:+.3f}, {x['ci95_items'][1]:+.3f}] over items")
    if key.startswith(("tokens_ratio", "ci95_items_of_the_tokens_ratio")) and x:
        return f"{x[0]:.2f} [{x[1]:.2f}, {x[2]:.2f}]" if len(x) == 3 else f"[{x[0]:.2f}, {x[1]:.2f}]"
    if isinstance(x, list) and x and all(isinstance(v, (int, float)) for v in x):
        return "[" + ", ".join(f"{v:.3f}" for v in x) + "]"
    if isinstance(x, list) and x and all(isinstance(v, str) for v in x):
        return ", ".join(x)
    if isinstance(x, (int, float, str)) and not isinstance(x, bool):
        return f"{x:.3f}" if isinstance(x, float) else str(x)
    return None


def verdict_rows(block: dict, names: list[str] | None = None) -> list[dict]:
    """One row per claim the report judged (or those in `names`, in that order): {"name", "claim", "verdict", "rule",
    "numbers"}: the rule as the report states it, and its numbers as text ("fixed20 peak minus final: +0.020 [-0.011,
    +0.051] over 4 seeds, ..."). A name the report does not hold is an error that lists those it does."""
    verdicts = block["verdicts"]
    missing = [n for n in names or [] if n not in verdicts]
    if missing:
        raise KeyError(f"the report judges no claim {missing}; it judges {sorted(verdicts)}")
    rows = []
    for name in names or verdicts:
        v = verdicts[name]
        shown = {k: describe_number(k, x) for k, x in v.items() if k not in ("verdict", "claim", "rule")}
        rows.append({"name": name, "claim": v["claim"], "verdict": v["verdict"], "rule": v["rule"],
                     "numbers": "; ".join(f"{k.replace('_', ' ')}: {x}" for k, x in shown.items() if x is not None)})
    return rows


# ------------------------------------------------------------------------------------------------ pass@(k, T)

def surface_lines(surface: dict) -> list[dict]:
    """One line per evaluation horizon of a pass@(k, T) surface (`agentgym_nb.evaluate.horizon_surface`, or a study
    arm's `study_surfaces`): {"horizon": its label, "k", "mean", "lo", "hi"}; an integer horizon reads "T = 10"."""
    return [{"horizon": h if isinstance(h, str) else f"T = {h}", "k": list(surface["k"]), "mean": list(row),
             "lo": [c[0] for c in cis], "hi": [c[1] for c in cis]}
            for h, row, cis in zip(surface["horizons"], surface["pass@k"], surface["ci"])]


def study_surfaces(block: dict, arms: list[str] | None = None) -> dict[str, dict]:
    """{arm label: the arm's pass@(k, T) surface over its seeds} for the arms of a study block that have one (the
    report's `arms[arm]["surface"]`: horizons relative to the one each policy trained at, intervals over seeds)."""
    return {f"{ARM_LABELS.get(arm, arm)} ({seeds_label(row['surface']['seeds'])})": row["surface"]
            for arm, row in block["arms"].items() if "surface" in row and (arms is None or arm in arms)}


def plot_pass_at_k_surface(surfaces: dict, *, path: str | None = None, title: str = ""):
    """pass@k against k (log scale), one line per evaluation horizon T with its 95% band, one panel per policy:
    `surfaces` is one surface or {label: surface}. Reading across the lines at k = 1 gives success against T (does
    a policy trained at H use 2H turns?), along a line what more samples buy at that horizon."""
    if "pass@k" in surfaces:
        surfaces = {"": surfaces}
    if not surfaces:
        raise ValueError("no pass@(k, T) surface to draw: measure one with agentgym_nb.evaluate.horizon_surface, or "
                         "run bench/horizon.py with --surface-items")
    fig, axes = plt.subplots(1, len(surfaces), figsize=(5.2 * len(surfaces), 4), sharey=True, squeeze=False,
                             constrained_layout=True)
    for ax, (label, surface) in zip(axes[0], surfaces.items()):
        lines = surface_lines(surface)
        colors = plt.cm.viridis(np.linspace(0.1, 0.85, len(lines)))
        for line, color in zip(lines, colors):
            ax.plot(line["k"], line["mean"], marker="o", ms=3, color=color, label=line["horizon"])
            ax.fill_between(line["k"], line["lo"], line["hi"], color=color, alpha=0.15, lw=0)
        ax.set_xscale("log", base=2)
        ticks = sorted({k for k in surface["k"] if k & (k - 1) == 0} | {surface["k"][-1]})   # powers of 2, last k
        ax.set_xticks(ticks, [str(k) for k in ticks])
        ax.minorticks_off()
        ax.set_ylim(0, min(1.0, max(0.05, 1.1 * max(max(line["hi"]) for line in lines))))
        ax.set_xlabel("k (samples per task)")
        what = f"{surface['items']} tasks x {surface['n']} samples" + (
            f", 95% band {surface['interval']}" if "interval" in surface else "")
        finish(ax, title=f"{label}\n{what}" if label else what)
    axes[0][0].set_ylabel("pass@k")
    if title:
        fig.suptitle(title)
    if path:
        fig.savefig(path, dpi=110)
    return fig
