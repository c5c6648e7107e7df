"""Run health: what every training step measures about its episodes, the checks it makes on the data it is about to
train on, and the error that stops a run when one fails (RunConfig.sync_tolerance, max_mismatch_kl, max_env_errors)."""
from __future__ import annotations

import torch

from ..config import RunConfig

SYNC_PROBE_TOKENS = 256   # tokens of the step's first episode that the sync check scores
ENV_ERROR_STEPS = 3       # max_env_errors must be exceeded this many steps in a row: one bad step is a blip


class RunHealthError(RuntimeError):
    """A training step crossed one of the run's health thresholds (RunConfig.sync_tolerance, max_mismatch_kl,
    max_env_errors): carrying on would train on data the run cannot vouch for."""


def episode_metrics(played: list, groups: list) -> dict:
    """What a step's rollout did: means over its usable episodes (the episodes of `groups`: neither failed in the env
    nor without a policy token) and counts over every episode `played`."""
    usable = [t for g in groups for t in g.episodes]
    failed = [t for t in played if t.failed]

    def mean(values) -> float:
        values = list(values)
        return float(sum(values) / len(values)) if values else 0.0
    return {
        "reward": mean(t.reward for t in usable), "success": mean(float(t.success) for t in usable),
        "turns": mean(t.num_rounds for t in usable), "done": mean(float(t.done) for t in usable),
        "cut_by_token_budget": mean(float(t.truncated) for t in usable),
        "cut_by_horizon": mean(float(not t.done and not t.truncated) for t in usable),
        "replies_cut_by_max_tokens": mean(t.replies_cut_by_max_tokens for t in usable),
        "failed": len(failed), "episodes": len(usable), "env_error_rate": len(failed) / len(played),
        "invalid_action_rate": sum(t.invalid_actions for t in usable) / max(1, sum(t.num_rounds for t in usable)),
        "zero_adv_groups": mean(float(not g.informative) for g in groups),
        "policy_tokens": mean(t.num_policy_tokens for t in usable),
        "sampled_tokens": sum(t.num_policy_tokens for t in played),   # every episode played, kept or not
    }


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
