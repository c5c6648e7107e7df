"""train/rl.py imports the resumable evaluation from here; it is agentgym_nb.evaluate.run."""
from ..evaluate.run import evaluate, load_results  # noqa: F401
