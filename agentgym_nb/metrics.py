"""bench/horizon.py imports the numbers of an evaluation from here; they are agentgym_nb.evaluate.metrics."""
from .evaluate.metrics import *  # noqa: F401,F403
