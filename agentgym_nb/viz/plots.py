"""Training curves from metrics.jsonl records."""
from __future__ import annotations

import matplotlib.pyplot as plt

PANELS = [("reward", "mean episode reward"), ("success", "success rate (train episodes)"),
          ("max_rounds", "horizon H (max turns)"), ("turns", "turns per episode"), ("kl", "KL to reference (k3)"),
          ("cut_by_horizon", "share cut by the horizon")]


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
