"""Looking at runs: training curves and a trajectory replay that renders as static HTML (papermill, GitHub)."""
from .plots import plot_training
from .replay import load_rollouts, replay_html

__all__ = ["plot_training", "load_rollouts", "replay_html"]
