"""Seeing the masks: a trajectory as a strip of coloured tokens (one colour per kind), and a batch as heatmaps.

The colour of a token is its kind (trajectory.py): what the policy sampled (trained), what the environment said,
the fixed instruction, the chat template's scaffolding, padding. Underlined tokens have loss_mask = 1, so a mask
that disagrees with the kinds (AgentGym-RL trains the closing <|im_end|> of every turn, sampled or not) shows at a
glance. The strip is plain HTML (it renders in a papermill output); the heatmaps are a matplotlib figure / PNG.
"""
from __future__ import annotations

import html

import matplotlib.pyplot as plt
import numpy as np
import torch
from matplotlib.colors import BoundaryNorm, ListedColormap

from ..rollout.trajectory import ENV, PAD, POLICY, PROMPT, TEMPLATE, Trajectory

KIND_NAMES = {PAD: "padding", TEMPLATE: "template", PROMPT: "instruction", ENV: "environment",
              POLICY: "policy (sampled)"}
KIND_COLOURS = {PAD: "#ffffff", TEMPLATE: "#c8c8c8", PROMPT: "#f5d76e", ENV: "#9bd68a", POLICY: "#7fb3ee"}
HEATMAP_FIELDS = ("kinds", "attention_mask", "loss_mask", "position_ids", "turn_ids")
_FIELD_LABELS = {"kinds": "token kind", "attention_mask": "attention_mask", "loss_mask": "loss_mask (trained = 1)",
                 "position_ids": "position_ids", "turn_ids": "turn_ids (agent turn; -1 = padding)"}


def _as_row(x) -> dict[str, list]:
    """A Trajectory, or one sequence's tensors (Trajectory.to_tensors() or a row of collate), as lists."""
    if isinstance(x, Trajectory):
        x = x.to_tensors()
    if "input_ids" not in x or "kinds" not in x:
        raise ValueError(f"need a Trajectory or a dict with input_ids and kinds (got keys {sorted(x)})")
    row = {k: (v.tolist() if isinstance(v, torch.Tensor) else list(v)) for k, v in x.items()}
    if any(isinstance(v[0], list) for v in row.values() if v):
        raise ValueError("pass one sequence: a Trajectory, Trajectory.to_tensors(), or {k: batch[k][b]}")
    return row


def kind_legend_html() -> str:
    swatches = "".join(f'<span style="background:{KIND_COLOURS[k]};padding:1px 6px;margin-right:6px;'
                       f'border:1px solid #999">{KIND_NAMES[k]}</span>' for k in (POLICY, ENV, PROMPT, TEMPLATE, PAD))
    return (f'<div style="font-size:12px;margin:4px 0">{swatches}'
            '<span style="text-decoration:underline;font-weight:bold">underlined</span> = loss_mask 1</div>')


def token_strip_html(x, tokenizer, *, start: int = 0, stop: int | None = None, loss_mask=None,
                     title: str = "", legend: bool = True) -> str:
    """Tokens start..stop of one sequence as coloured boxes; hover a token for its position, id, kind, turn and
    masks. `loss_mask` overrides the sequence's own mask (to show someone else's, e.g. AgentGym-RL's).

    Each token is a <span data-kind=NAME data-pos=P> whose background is KIND_COLOURS[kind]; a newline shows as
    an arrow before the line break, so whitespace tokens stay visible.
    """
    row = _as_row(x)
    ids, kinds = row["input_ids"], row["kinds"]
    mask = list(loss_mask) if loss_mask is not None else row.get("loss_mask", [int(k == POLICY) for k in kinds])
    if len(mask) != len(ids):
        raise ValueError(f"loss_mask has {len(mask)} entries for {len(ids)} tokens")
    stop = len(ids) if stop is None else min(stop, len(ids))
    spans = []
    for t in range(start, stop):
        text = tokenizer.decode([ids[t]], skip_special_tokens=False)
        shown = html.escape(text).replace("\n", "↵\n") if text else "∅"
        tip = (f"pos {row.get('position_ids', range(len(ids)))[t]} · id {ids[t]} · {KIND_NAMES[kinds[t]]}"
               f" · turn {row['turn_ids'][t] if 'turn_ids' in row else '?'} · loss_mask {mask[t]}"
               f" · attention {row['attention_mask'][t] if 'attention_mask' in row else 1}")
        style = (f"background:{KIND_COLOURS[kinds[t]]};border:1px solid #fff;border-radius:2px;padding:0 1px"
                 + (";text-decoration:underline;font-weight:bold" if mask[t] else "")
                 + (";border:1px dashed #bbb" if kinds[t] == PAD else ""))
        spans.append(f'<span class="tok" data-kind="{KIND_NAMES[kinds[t]]}" data-pos="{t}" '
                     f'title="{html.escape(tip)}" style="{style}">{shown}</span>')
    head = f'<div style="font-weight:bold;margin:4px 0">{html.escape(title)}</div>' if title else ""
    return (f'<div style="max-width:1000px">{head}{kind_legend_html() if legend else ""}'
            f'<div style="font-family:monospace;font-size:12px;line-height:1.9;white-space:pre-wrap">'
            f'{"".join(spans)}</div></div>')


def plot_masks(batch: dict[str, torch.Tensor], path: str | None = None, *, fields=HEATMAP_FIELDS, title: str = "",
               start: int = 0, stop: int | None = None):
    """One heatmap per field over a collated batch ([B, T]: rows = sequences, columns = token positions
    start..stop). Kinds use the token strip's colours; turn_ids and position_ids are drawn only where
    attention_mask = 1 (padding is white). Saves a PNG at `path` when given; returns the figure.
    """
    missing = [f for f in fields if f not in batch]
    if missing:
        raise ValueError(f"batch lacks {missing}; pass collate(...) output (fields: {sorted(batch)})")
    B, T = batch["input_ids"].shape
    stop = T if stop is None else min(stop, T)
    if not 0 <= start < stop:
        raise ValueError(f"need 0 <= start < stop <= {T} (the batch's length), got start={start}, stop={stop}")
    cols = slice(start, stop)
    attn = batch["attention_mask"][:, cols].numpy().astype(bool) if "attention_mask" in batch \
        else np.ones((B, stop - start), bool)
    extent = (start - 0.5, stop - 0.5, B - 0.5, -0.5)
    panel_height = min(max(1.3, 0.18 * B + 0.7), 3.2)
    fig, axes = plt.subplots(len(fields), 1, figsize=(12, panel_height * len(fields) + 0.4),
                             constrained_layout=True, squeeze=False)
    for ax, name in zip(axes[:, 0], fields):
        data = batch[name][:, cols].numpy()
        if name == "kinds":
            order = sorted(KIND_COLOURS)
            cmap = ListedColormap([KIND_COLOURS[k] for k in order])
            im = ax.imshow(data, aspect="auto", interpolation="nearest", cmap=cmap, extent=extent,
                           norm=BoundaryNorm(np.arange(len(order) + 1) - 0.5, len(order)))
            bar = fig.colorbar(im, ax=ax, ticks=order, pad=0.01)
            bar.ax.set_yticklabels([KIND_NAMES[k] for k in order], fontsize=7)
        elif name in ("attention_mask", "loss_mask"):
            im = ax.imshow(data, aspect="auto", interpolation="nearest", cmap="Greys", vmin=0, vmax=1,
                           extent=extent)
            fig.colorbar(im, ax=ax, ticks=[0, 1], pad=0.01)
        else:
            shown = np.ma.masked_where(~attn, data)
            cmap = plt.get_cmap("viridis").with_extremes(bad="white")
            im = ax.imshow(shown, aspect="auto", interpolation="nearest", cmap=cmap, extent=extent)
            fig.colorbar(im, ax=ax, pad=0.01)
        ax.set_title(_FIELD_LABELS.get(name, name), fontsize=10, loc="left")
        ax.set_ylabel("sequence")
        if B <= 16:
            ax.set_yticks(range(B))
    axes[-1, 0].set_xlabel("token position")
    if title:
        fig.suptitle(title)
    if path:
        fig.savefig(path, dpi=110)
    return fig
