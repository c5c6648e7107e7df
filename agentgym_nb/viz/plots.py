"""Figures of runs: training curves (one run, or several labelled runs with 95% bands across seeds), held-out
success with intervals, pass@k / pass^k over k, and the paper's numbers beside ours."""
from __future__ import annotations

import math
import textwrap
from collections.abc import Sequence

import matplotlib.pyplot as plt
import numpy as np


PANELS = [("reward", "mean episode reward"), ("success", "success rate (train episodes)"),
          ("max_rounds", "horizon H (max turns)"), ("turns", "turns per episode"), ("kl", "KL to reference (k3)"),
          ("cut_by_horizon", "share cut by the horizon")]
LABELS = dict(PANELS) | {
    "zero_adv_groups": "share of all-equal groups (no signal)", "entropy": "entropy of sampled tokens (nats)",
    "clip_frac": "PPO clip fraction", "grad_norm": "gradient norm (before clipping)",
    "policy_tokens": "policy tokens per episode", "cut_by_token_budget": "share cut by the token budget",
    "step_seconds": "seconds per step", "explained_variance": "critic explained variance"}
X_AXES = {"step": "training step", "episodes": "episodes played (cumulative)",
          "tokens": "policy tokens sampled (cumulative)"}
# metrics that are shares of episodes, groups or tokens: their intervals stay within [0, 1]
RATES = {"success", "done", "cut_by_horizon", "cut_by_token_budget", "zero_adv_groups", "clip_frac"}
# two-sided 95% quantiles of Student's t with 1..30 degrees of freedom (beyond: 1.96)
T975 = [12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
        2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042]


def plot_training(history: list[dict], path: str | None = None, title: str = "", baseline: dict | None = None):
    """One panel per metric against the training step; `baseline` ({'success': x, ...}) draws dashed lines."""
    steps = [m["step"] for m in history]
    fig, axes = plt.subplots(2, 3, figsize=(13, 6.5), constrained_layout=True)
    for ax, (key, label) in zip(axes.flat, PANELS):
        ax.plot(steps, [m.get(key, float("nan")) for m in history], marker="o", ms=3)
        if baseline and key in baseline:
            ax.axhline(baseline[key], ls="--", c="grey", lw=1, label="before training (held-out)")
            ax.legend(fontsize=8)
        ax.set_xlabel("training step")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    if title:
        fig.suptitle(title)
    if path:
        fig.savefig(path, dpi=110)
    return fig


# ------------------------------------------------------------------------------------- several runs, several seeds

def seeds_label(n: int) -> str:
    """"1 seed", "4 seeds": how many seeds a mean is over, for legends and annotations."""
    return f"{n} seed{'s' * (n != 1)}"


def t_interval(values: Sequence[float], bounds: tuple[float, float] | None = None) -> tuple[float, float, float]:
    """(mean, lo, hi): mean +- t_{0.975, n-1} * s / sqrt(n) over seeds, s the unbiased standard deviation, clipped to
    `bounds` when the quantity has them (a rate: (0, 1); with two seeds t = 12.7 reaches far past them).
    One value has no spread to measure: lo = hi = mean. NaNs (a seed without that value) are left out."""
    v = np.asarray([x for x in values if x is not None and not math.isnan(x)], dtype=float)
    if len(v) == 0:
        return float("nan"), float("nan"), float("nan")
    mean = float(v.mean())
    if len(v) == 1:
        return mean, mean, mean
    half = (T975[len(v) - 2] if len(v) - 1 <= len(T975) else 1.96) * float(v.std(ddof=1)) / math.sqrt(len(v))
    lo, hi = mean - half, mean + half
    if bounds is not None:
        lo, hi = max(lo, float(bounds[0])), min(hi, float(bounds[1]))
    return mean, lo, hi


def established(lo: float, hi: float, seeds: int) -> int:
    """+1 or -1 when a paired difference is established above or below 0, else 0: its 95% interval over seeds
    [lo, hi] excludes 0 (touching it is not excluding it), over at least two seeds. One seed has no interval over
    seeds (`t_interval` returns the point itself), so it establishes nothing however far from 0 it lies."""
    if seeds < 2:
        return 0
    return 1 if lo > 0 else -1 if hi < 0 else 0


def seeds_to_establish(mean: float, sd: float) -> float:
    """The fewest seeds n >= 2 whose 95% t-interval would exclude 0 if the per-seed differences kept this mean and
    unbiased standard deviation: the smallest n with t_{0.975, n-1} * sd / sqrt(n) < |mean| (`t_interval`'s
    quantiles; past 31 seeds 1.96, so n = floor((1.96 sd / |mean|)^2) + 1). A mean of 0 never is: math.inf."""
    if mean == 0:
        return math.inf
    for n in range(2, len(T975) + 2):
        if T975[n - 2] * sd / math.sqrt(n) < abs(mean):
            return n
    return max(len(T975) + 2, math.floor((1.96 * sd / abs(mean)) ** 2) + 1)


def seeds_for_half_width(sd: float, half_width: float) -> float:
    """The fewest seeds n >= 2 whose 95% t-interval over seeds would be at most `half_width` either side of the mean
    if the per-seed values kept this unbiased standard deviation: the smallest n with t_{0.975, n-1} sd / sqrt(n)
    <= half_width (past 31 seeds 1.96: n = ceil((1.96 sd / half_width)^2))."""
    for n in range(2, len(T975) + 2):
        if T975[n - 2] * sd / math.sqrt(n) <= half_width:
            return n
    return max(len(T975) + 2, math.ceil((1.96 * sd / half_width) ** 2))


ESTABLISHED_COLORS = {1: "C2", -1: "C3", 0: "C7"}   # green: established above 0; red: below; grey: not established


def smooth(values: Sequence[float], window: int = 1) -> np.ndarray:
    """Trailing moving average: out[i] = mean(values[max(0, i - window + 1) : i + 1])."""
    v = np.asarray(values, dtype=float)
    if window <= 1:
        return v
    c = np.cumsum(np.insert(v, 0, 0.0))
    lo = np.maximum(np.arange(len(v)) - window + 1, 0)
    return (c[1:] - c[lo]) / (np.arange(len(v)) + 1 - lo)


def x_values(history: list[dict], x: str = "step") -> np.ndarray:
    """The x coordinate of each step: its number, or the episodes / policy tokens played up to and including it
    (the same number of steps is not the same compute when episodes differ in length)."""
    if x == "step":
        return np.array([m["step"] for m in history], dtype=float)
    if x == "episodes":
        return np.cumsum([m.get("episodes", 0) for m in history], dtype=float)
    if x == "tokens":
        return np.cumsum([m.get("policy_tokens", 0.0) * m.get("episodes", 0) for m in history], dtype=float)
    raise ValueError(f"unknown x {x!r}; valid: {', '.join(X_AXES)}")


def curve_band(histories: list[list[dict]], key: str, *, x: str = "step", window: int = 1):
    """(x, mean, lo, hi) of metric `key` over the seeds' histories (each smoothed first), on the steps every seed
    has; x is averaged over seeds (it only differs between seeds for x = episodes / tokens). The band of a rate
    (RATES) is clipped to [0, 1]."""
    n = min(len(h) for h in histories)
    ys = np.array([smooth([m.get(key, float("nan")) for m in h[:n]], window) for h in histories])
    xs = np.array([x_values(h[:n], x) for h in histories]).mean(0)
    bounds = (0.0, 1.0) if key in RATES else None
    stats = np.array([t_interval(ys[:, i], bounds) for i in range(n)]).reshape(n, 3)
    return xs, stats[:, 0], stats[:, 1], stats[:, 2]


LABEL_WIDTH = 44   # characters per line of an interval chart's row label
TITLE_WIDTH = 80   # characters per line of a single-panel title
YLABEL_WIDTH = 30   # characters per line of a panel's y label, so that it stays beside its own panel
LINE_STYLES = ("-", "--", ":", "-.")


def wrap(text: str, width: int) -> str:
    """`text` with each of its lines wrapped at `width` characters (its own line breaks kept)."""
    return "\n".join(textwrap.fill(line, width, break_on_hyphens=False) for line in text.split("\n"))


def plot_runs(runs: dict[str, list[list[dict]]], keys: Sequence[str] = ("reward", "success", "max_rounds", "turns",
              "kl", "cut_by_horizon"), *, x: str = "step", window: int = 1, path: str | None = None, title: str = "",
              ncols: int = 3, colors: dict | None = None):
    """Training curves of several labelled runs: runs = {label: [history of seed 0, history of seed 1, ...]}.

    One panel per metric in `keys`; each label is its mean over seeds (smoothed by a trailing mean of `window`
    steps) with a shaded 95% t-interval across seeds (no band with a single seed)."""
    nrows = math.ceil(len(keys) / ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(4.4 * ncols, 3.2 * nrows), constrained_layout=True,
                             squeeze=False)
    for ax, key in zip(axes.flat, keys):
        for i, (label, histories) in enumerate(runs.items()):
            if not histories or not all(histories):
                continue
            color = (colors or {}).get(label, f"C{i}")
            # the horizon is a schedule, not a noisy measurement: a smoothed one ramps where it jumps
            xs, mean, lo, hi = curve_band(histories, key, x=x, window=1 if key == "max_rounds" else window)
            seeds = len(histories)
            # a line style per run too: runs with the same seed and horizon draw the same curve, one over the other
            ax.plot(xs, mean, marker="o", ms=2.5, color=color, ls=LINE_STYLES[i % len(LINE_STYLES)],
                    label=f"{label} ({seeds_label(seeds)})")
            if seeds > 1:
                ax.fill_between(xs, lo, hi, color=color, alpha=0.2, lw=0)
        ax.set_xlabel(X_AXES[x])
        ax.set_ylabel(wrap(LABELS.get(key, key) + (f" ({window}-step mean)" if window > 1 and key != "max_rounds"
                                                   else ""), YLABEL_WIDTH))
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(keys):]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=8)
    if title:
        fig.suptitle(title)
    if path:
        fig.savefig(path, dpi=110)
    return fig


def plot_intervals(rows: list[dict], *, ax=None, xlabel: str = "held-out success rate", title: str = "",
                   path: str | None = None, fmt: str = "{:.2f}", reference: float | None = None):
    """Horizontal point-and-interval chart: rows of {"label", "value", "lo", "hi"} (+ optional "points": the
    single seeds' values, drawn as dots, and "color"). Top row first. `reference`: a vertical line there (0 for
    paired differences). Long labels and titles are wrapped so that they leave the plot its width."""
    labels = [wrap(r["label"], LABEL_WIDTH) for r in rows]
    own = ax is None
    if own:
        lines = sum(label.count("\n") + 1 for label in labels)
        fig, ax = plt.subplots(figsize=(9, 0.3 * lines + 0.25 * len(rows) + 1.4), constrained_layout=True)
    ys = np.arange(len(rows))[::-1]
    for y, r in zip(ys, rows):
        color = r.get("color", "C0")
        ax.errorbar(r["value"], y, xerr=[[r["value"] - r["lo"]], [r["hi"] - r["value"]]], fmt="o", color=color,
                    capsize=4, ms=6)
        for p in r.get("points", []):
            ax.plot(p, y, "x", color=color, alpha=0.7, ms=5)
        ax.annotate(fmt.format(r["value"]), (r["value"], y), textcoords="offset points", xytext=(0, 7), ha="center",
                    fontsize=8)
    if reference is not None:
        ax.axvline(reference, c="black", lw=0.8)
    ax.set_yticks(ys, labels)
    ax.set_ylim(-0.6, len(rows) - 0.4)
    ax.xaxis.set_major_locator(plt.MaxNLocator(6))
    ax.set_xlabel(xlabel)
    ax.grid(alpha=0.3, axis="x")
    if title:
        ax.set_title(wrap(title, TITLE_WIDTH), fontsize=10)
    if own and path:
        ax.figure.savefig(path, dpi=110)
    return ax.figure


# ----------------------------------------------------------------------------------------------------- pass@k

def pass_curve(summary: dict, metric: str = "pass@") -> tuple[list[int], list[float], list[float], list[float]]:
    """(k, value, lo, hi) of `pass@k` or `pass^k` from an evaluate() summary (its bootstrap `_ci` over items)."""
    ks = [k for k in summary["k"] if f"{metric}{k}" in summary]
    vals = [summary[f"{metric}{k}"] for k in ks]
    lo = [summary.get(f"{metric}{k}_ci", [v, v])[0] for k, v in zip(ks, vals)]
    hi = [summary.get(f"{metric}{k}_ci", [v, v])[1] for k, v in zip(ks, vals)]
    return ks, vals, lo, hi


def plot_pass_at_k(summaries: dict[str, dict], *, path: str | None = None, title: str = "", colors: dict | None = None):
    """pass@k (at least one of k samples succeeds) and pass^k (all k succeed) against k, one line per policy,
    with 95% bootstrap bands over items. Both are unbiased estimates from n >= k samples per item."""
    fig, axes = plt.subplots(1, 2, figsize=(12, 4), constrained_layout=True, sharey=True)
    for ax, metric, name in ((axes[0], "pass@", "pass@k: any of k succeeds"),
                             (axes[1], "pass^", "pass^k: all k succeed")):
        for i, (label, s) in enumerate(summaries.items()):
            color = (colors or {}).get(label, f"C{i}")
            ks, vals, lo, hi = pass_curve(s, metric)
            ax.plot(ks, vals, marker="o", color=color, label=f"{label} ({s['items']} items x {s['n']})")
            ax.fill_between(ks, lo, hi, color=color, alpha=0.2, lw=0)
        ax.set_xscale("log", base=2)
        ks_all = sorted({k for s in summaries.values() for k in pass_curve(s, metric)[0]})
        ax.set_xticks(ks_all, [str(k) for k in ks_all])
        ax.minorticks_off()
        ax.set_xlabel("k (samples per task)")
        ax.set_title(name)
        ax.grid(alpha=0.3)
        ax.set_ylim(-0.02, 1.02)
    axes[0].set_ylabel("share of held-out tasks")
    axes[0].legend(fontsize=8)
    if title:
        fig.suptitle(title)
    if path:
        fig.savefig(path, dpi=110)
    return fig


def plot_paper_beside_ours(paper_rows: list[dict], our_rows: list[dict], *, path: str | None = None,
                           title: str = "", paper_note: str = "", our_note: str = ""):
    """Two panels that share nothing but the unit (success in %): the paper's reported numbers (rows of
    {"label", "value"}) and ours (rows of {"label", "value", "lo", "hi"} in %), each captioned with its model size
    and compute, so a nano CPU run is never read as a 7B GPU result."""
    fig, axes = plt.subplots(1, 2, figsize=(13, 0.5 * max(len(paper_rows), len(our_rows)) + 2),
                             constrained_layout=True)
    ys = np.arange(len(paper_rows))[::-1]
    axes[0].barh(ys, [r["value"] for r in paper_rows], color="#9aa7b8")
    for y, r in zip(ys, paper_rows):
        axes[0].annotate(f"{r['value']:.1f}", (r["value"], y), xytext=(3, -3), textcoords="offset points", fontsize=8)
    axes[0].set_yticks(ys, [r["label"] for r in paper_rows])
    axes[0].set_title("paper (reported)" + (f"\n{textwrap.fill(paper_note, 70)}" if paper_note else ""), fontsize=9)
    plot_intervals([{**r, "color": r.get("color", "C0")} for r in our_rows], ax=axes[1], xlabel="success (%)",
                   fmt="{:.1f}")
    axes[1].set_title("ours (measured here, 95% CI)" + (f"\n{textwrap.fill(our_note, 70)}" if our_note else ""),
                      fontsize=9)
    for ax in axes:
        ax.set_xlim(0, 105)
        ax.set_xlabel("success (%)")
        ax.grid(alpha=0.3, axis="x")
    if title:
        fig.suptitle(title)
    if path:
        fig.savefig(path, dpi=110)
    return fig


def plot_schedules(schedules: dict, steps: int, *, ax=None, path: str | None = None, title: str = ""):
    """The horizon H each schedule gives every training step 1..steps, as step lines: {label: schedule} with
    schedules from agentgym_nb.algos.schedule (one that reads the run's metrics, such as adaptive, is drawn as it
    would run if it never advanced: its stages depend on those metrics)."""
    own = ax is None
    if own:
        fig, ax = plt.subplots(figsize=(7, 2.8), constrained_layout=True)
    xs = list(range(1, steps + 1))
    for i, (label, schedule) in enumerate(schedules.items()):
        from_metrics = bool(schedule.reads)
        ys = [schedule.rounds[0] if from_metrics else schedule.rounds_at(k) for k in xs]
        ax.step(xs, ys, where="post", lw=2, ls=["-", "--", ":", "-."][i % 4],
                label=label + (" (until its metric says: grow)" if from_metrics else ""))
    ax.set_xlabel("training step")
    ax.set_ylabel("horizon H (max turns)")
    return finish(ax, title=title, path=path if own else None)


def finish(ax, *, title: str = "", path: str | None = None, legend: bool = True):
    """The last touches every single-panel figure gets: a grid, the legend, the title; saved to `path` if given."""
    ax.grid(alpha=0.3)
    if legend:
        ax.legend(fontsize=8)
    if title:
        ax.set_title(wrap(title, TITLE_WIDTH), fontsize=10)
    if path:
        ax.figure.savefig(path, dpi=110)
    return ax.figure
