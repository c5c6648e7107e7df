"""Figures of credit assignment on a real batch (lesson 03): per-token advantages side by side, returns over an
episode's tokens, GiGPO's anchor states as a tree of turns, and credit as heatmaps over trained tokens."""
from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import torch

from ..rollout.trajectory import ENV


def plot_token_advantages(advantages: dict[str, torch.Tensor], loss_mask: torch.Tensor, scores: torch.Tensor,
                          rows: list[int], *, title: str = "", path: str | None = None):
    """One panel per estimator: the advantage of each trained token of the episodes `rows`, in order."""
    fig, axes = plt.subplots(1, len(advantages), figsize=(4 * len(advantages), 3.6), constrained_layout=True,
                             squeeze=False)
    for ax, (label, a) in zip(axes[0], advantages.items()):
        for b in rows:
            pos = loss_mask[b].nonzero()[:, 0]
            ax.plot(range(len(pos)), a[b, pos].numpy(), ".", ms=3, label=f"episode {b}: score {scores[b]:.2f}")
        ax.set_title(label)
        ax.set_xlabel("trained token number in the episode")
        ax.axhline(0, c="k", lw=0.5)
    axes[0, 0].set_ylabel("advantage $A_t$")
    axes[0, 0].legend(fontsize=7)
    fig.suptitle(title)
    if path:
        fig.savefig(path, dpi=110)
    return fig


def plot_returns(curves: dict[str, torch.Tensor], loss_mask: torch.Tensor, kinds: torch.Tensor, *, title: str = "",
                 path: str | None = None):
    """Returns G_t of one episode (several recursions, one curve each) on its trained tokens, against the token
    position; the environment's observations are shaded green."""
    pos = loss_mask.nonzero()[:, 0].numpy()
    fig, ax = plt.subplots(figsize=(12, 3.4), constrained_layout=True)
    env_tokens = (kinds == ENV).numpy().astype(int)
    edges = np.flatnonzero(np.diff(np.r_[0, env_tokens, 0]))
    for lo, hi in zip(edges[::2], edges[1::2]):
        ax.axvspan(lo, hi, color="#9bd68a", alpha=0.3, lw=0)
    styles = [dict(marker="o", ms=6, mfc="none"), dict(marker="s", ms=2), dict(marker="x", ms=3)]
    for i, (label, g) in enumerate(curves.items()):
        ax.plot(pos, g[pos].numpy(), ls="none", label=label, **styles[i % len(styles)])
    ax.set_xlabel("token position (green: environment observations)")
    ax.set_ylabel("return $G_t$ on trained tokens")
    ax.set_title(title)
    ax.legend(fontsize=8)
    if path:
        fig.savefig(path, dpi=110)
    return fig


def plot_anchor_tree(anchors: list[list[str]], replies: list[list[str]], scores: list[float], labels: list[str], *,
                     title: str = "", path: str | None = None):
    """The turns of one group's episodes as rows of nodes: node k of a row is the state turn k acted in (GiGPO's
    anchor state). A state that more than one turn of the group acted in gets a letter and a colour (one step group);
    white nodes are states no other turn acted in. The action of each turn is written beside its node."""
    counts: dict[str, int] = {}
    for states in anchors:
        for state in states:
            counts[state] = counts.get(state, 0) + 1
    names: dict[str, str] = {}
    for states in anchors:
        for state in states:
            if counts[state] > 1:
                names.setdefault(state, chr(ord("A") + len(names) % 26))
    longest = max((len(a) for a in anchors), default=1)
    fig, ax = plt.subplots(figsize=(2.2 * longest + 3, 0.7 * len(anchors) + 1.4), constrained_layout=True)
    colours = plt.cm.tab10.colors
    for y, (states, said, score) in enumerate(zip(anchors, replies, scores)):
        ax.plot(range(1, len(states) + 1), [y] * len(states), c="0.7", lw=1, zorder=1)
        for k, state in enumerate(states, start=1):
            name = names.get(state)
            ax.scatter(k, y, s=260, zorder=2, c=[colours[(ord(name) - 65) % 10]] if name else "white", edgecolors="k")
            ax.text(k, y, name or "", ha="center", va="center", fontsize=8, zorder=3)
            action = said[k - 1].split("Action:")[-1].strip()[:22] if k <= len(said) else ""
            action = "".join(c for c in action if c.isprintable())   # an untrained model's reply may hold \x07
            ax.text(k + 0.12, y - 0.3, action, fontsize=6.5, color="0.3")   # above the node (y runs down)
        ax.text(len(states) + 0.45, y, f"score {score:.2f}", va="center", fontsize=8)
    ax.set_yticks(range(len(anchors)), labels)
    ax.set_xticks(range(1, longest + 1))
    ax.set_xlabel("turn k (the node is the state the turn acted in; equal letters = one anchor state)")
    ax.set_xlim(0.5, longest + 1.4)
    ax.invert_yaxis()
    ax.set_title(title)
    if path:
        fig.savefig(path, dpi=110)
    return fig


def plot_credit_heatmaps(panels: dict[str, torch.Tensor], loss_mask: torch.Tensor, rows: list[int],
                         labels: list[str], *, path: str | None = None):
    """Side by side, one heatmap per panel: rows are the episodes `rows`, columns their trained tokens in order,
    colour the advantage (one shared symmetric scale; white: no trained token)."""
    width = max(int(loss_mask[b].sum()) for b in rows)

    def heat(a):
        out = np.full((len(rows), width), np.nan)
        for y, b in enumerate(rows):
            pos = loss_mask[b].nonzero()[:, 0]
            out[y, :len(pos)] = a[b, pos].numpy()
        return out

    heats = {label: heat(a) for label, a in panels.items()}
    limit = max([np.nanmax(np.abs(h)) for h in heats.values()] + [1e-6])
    fig, axes = plt.subplots(1, len(heats), figsize=(7 * len(heats), 0.4 * len(rows) + 1.6), constrained_layout=True,
                             sharey=True, squeeze=False)
    for ax, (label, h) in zip(axes[0], heats.items()):
        image = ax.imshow(h, aspect="auto", cmap="RdBu", vmin=-limit, vmax=limit, interpolation="nearest")
        ax.set_title(label)
        ax.set_xlabel("trained token")
    axes[0, 0].set_yticks(range(len(rows)), labels)
    fig.colorbar(image, ax=axes[0].tolist(), label="advantage")
    if path:
        fig.savefig(path, dpi=110)
    return fig
