"""Evaluation a reviewer can trust: unbiased pass@k and pass^k, bootstrap intervals over items, per-category results
and the comparison of runs (`metrics`: pure functions of counts and scores), resumable runs (`run`: the trainer and
the nano build use them too), pass@k against the evaluation horizon (`surface`) and the paper's reported numbers as
data (`paper`). Its command line, which also reads models and training runs, is agentgym_nb/evaluate_cli.py."""
from .metrics import (avg_at_k, bootstrap_ci, bootstrap_weights, mean_ci, pass_at_k, pass_at_k_surface, pass_hat_k,
                      summarize, wilson_interval)
from .paper import load_paper_results
from .run import evaluate, load_results
from .surface import at_horizon, horizon_surface

__all__ = ["at_horizon", "avg_at_k", "bootstrap_ci", "bootstrap_weights", "evaluate", "horizon_surface",
           "load_paper_results", "load_results", "mean_ci", "pass_at_k", "pass_at_k_surface", "pass_hat_k", "summarize",
           "wilson_interval"]
