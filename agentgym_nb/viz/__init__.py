"""Looking at runs: training curves, the coloured token-mask view and mask heatmaps, and a trajectory replay
(an ipywidgets viewer that also renders as static HTML for papermill outputs and GitHub)."""
from .masks import KIND_COLOURS, KIND_NAMES, kind_legend_html, plot_masks, token_strip_html
from .plots import plot_training
from .replay import Replay, load_rollouts, num_turns, replay_html

__all__ = ["plot_training", "load_rollouts", "replay_html", "num_turns", "Replay", "token_strip_html",
           "kind_legend_html", "plot_masks", "KIND_COLOURS", "KIND_NAMES"]
