"""Run health: the checks every training step makes on the data it is about to train on, and the error that stops a
run when one fails (RunConfig.sync_tolerance, max_mismatch_kl, max_env_errors)."""
from __future__ import annotations

import torch

from ..config import RunConfig

SYNC_PROBE_TOKENS = 256   # tokens of the step's first episode that the sync check scores
ENV_ERROR_STEPS = 3       # max_env_errors must be exceeded this many steps in a row: one bad step is a blip


class RunHealthError(RuntimeError):
    """A training step crossed one of the run's health thresholds (RunConfig.sync_tolerance, max_mismatch_kl,
    max_env_errors): carrying on would train on data the run cannot vouch for."""


def train_inference_mismatch(sampled: list[list[float]], old_logp: torch.Tensor, mask: torch.Tensor) -> dict:
    """How far the engine's log-probs of the sampled tokens (`sampled[b]`, one per policy token of row b) are from
    the trainer's (`old_logp[b]` where `mask[b]` is 1), over every token of the batch whose engine log-prob is known:
    mean and max |d| and k3 = mean(exp(d) - 1 - d) with d = trainer - engine, an unbiased estimate of
    KL(engine || trainer) per token from samples of the engine."""
    diffs = []
    for b, engine in enumerate(sampled):
        trainer = old_logp[b][mask[b].bool()].double()
        engine = torch.tensor(engine, dtype=torch.float64)
        if len(engine) != len(trainer):
            raise ValueError(f"row {b}: {len(engine)} engine log-probs for {len(trainer)} policy tokens")
        known = ~engine.isnan()
        diffs.append(trainer[known] - engine[known])
    d = torch.cat(diffs) if diffs else torch.zeros(0, dtype=torch.float64)
    if not len(d):
        return {"mismatch_mean_abs": 0.0, "mismatch_max_abs": 0.0, "mismatch_kl": 0.0}
    return {"mismatch_mean_abs": float(d.abs().mean()), "mismatch_max_abs": float(d.abs().max()),
            "mismatch_kl": float((d.exp() - 1 - d).mean())}


def health_problem(cfg: RunConfig, history: list[dict]) -> str | None:
    """What is wrong with the run after its last step (`history[-1]`), judged by the config's thresholds, or None."""
    last = history[-1]
    if cfg.sync_tolerance is not None and last["sync_error"] > cfg.sync_tolerance:
        return (f"the weight sync did not take: after it, the engine's log-probs differ from the trainer's by "
                f"{last['sync_error']:.3g} on average (sync_tolerance={cfg.sync_tolerance}); the engine would sample "
                "from other weights than the ones being trained")
    if cfg.max_mismatch_kl is not None and last.get("mismatch_kl", 0.0) > cfg.max_mismatch_kl:
        return (f"the engine's and the trainer's log-probs of the sampled tokens disagree: KL {last['mismatch_kl']:.3g}"
                f" per token (max_mismatch_kl={cfg.max_mismatch_kl}; largest |difference| "
                f"{last['mismatch_max_abs']:.3g}); the PPO ratio would correct for a policy that did not sample them")
    recent = [m.get("env_error_rate", 0.0) for m in history[-ENV_ERROR_STEPS:]]
    if cfg.max_env_errors is not None and len(recent) == ENV_ERROR_STEPS and min(recent) > cfg.max_env_errors:
        return (f"the env keeps failing: {', '.join(f'{r:.0%}' for r in recent)} of the episodes of the last "
                f"{ENV_ERROR_STEPS} steps failed in the env (max_env_errors={cfg.max_env_errors}); check the env "
                "server (its log, its memory, its timeout: env_timeout)")
    return None
