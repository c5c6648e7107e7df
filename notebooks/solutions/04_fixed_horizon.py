"""Reference answers of notebooks/04_fixed_horizon.ipynb (used only under AGENTGYM_NB_SOLUTIONS=1)."""
import numpy as np

__all__ = ["advantages_at_6", "advantage_of_winner_at_20"]

# An all-equal group has no spread: every advantage is 0, however long training runs.
advantages_at_6 = [0.0, 0.0, 0.0, 0.0]
# At H = 20 the winner stands out: (0.55 - 0.1375) / (std([0, 0.55, 0, 0], ddof=1) + 1e-6) = 0.4125 / 0.275 = 1.5
_scores = np.array([0.0, 0.55, 0.0, 0.0])
advantage_of_winner_at_20 = float((_scores[1] - _scores.mean()) / (_scores.std(ddof=1) + 1e-6))
