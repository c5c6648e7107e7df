"""Behaviour cloning: maximise log pi(expert reply | history) on the policy tokens of expert trajectories.

    L = - sum_{b,t} loss_mask[b,t] * log pi(x[b,t] | x[b,<t]) / sum_{b,t} loss_mask[b,t]

The expert trajectories are built with the same `Trajectory` as RL rollouts, so the masks are identical: the model
learns to produce exactly what RL will later ask it to produce, in the same token layout.
"""
from __future__ import annotations

import random
import time

import torch

from ..rollout.trajectory import ChatFormat, Trajectory, collate
from .common import token_logprobs


def behaviour_cloning(model, demos: list[Trajectory], chat: ChatFormat, *, env_name: str, max_steps: int,
                      engine=None,
                      batch_tokens: int = 12288, lr: float = 2e-3, check_every: int = 100, val_items: list[int] = (),
                      target_success: float = 1.1, max_rounds: int = 6, max_total_tokens: int = 2048,
                      bf16: bool = True, seed: int = 0, log=print) -> list[dict]:
    """Clone `demos`; every `check_every` steps sample (T=1) episodes on `val_items` with `engine` (after syncing
    the current weights into it; default: an HFEngine on the model itself) and stop once the success rate reaches
    `target_success`. Returns the history of checks."""
    from .. import envs
    from ..evaluate import evaluate
    from ..rollout.engine import HFEngine, SamplingParams
    if engine is None:
        engine = HFEngine(model=model, tokenizer=chat.tokenizer, seed=seed)
    rng = random.Random(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 20))
    pad = chat.tokenizer.pad_token_id
    history, t0, losses = [], time.time(), []
    for step in range(1, max_steps + 1):
        model.train()
        batch = collate(_similar_lengths(demos, batch_tokens, rng), pad)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            logp = token_logprobs(model, batch["input_ids"], batch["attention_mask"])
        mask = batch["loss_mask"].float()
        loss = -(logp * mask).sum() / mask.sum().clamp(min=1)
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        losses.append(loss.item())
        if step % check_every == 0 or step == max_steps:
            model.eval()
            engine.load_weights(model.state_dict().items())
            result = evaluate(engine, lambda: envs.make(env_name), list(val_items), chat, max_rounds=max_rounds,
                              params=SamplingParams(temperature=1.0, max_tokens=48, seed=seed),
                              max_total_tokens=max_total_tokens)
            record = {"step": step, "loss": sum(losses) / len(losses), "val_success": result["success"],
                      "seconds": round(time.time() - t0, 1)}
            history.append(record)
            losses = []
            log(f"bc step {step}: loss {record['loss']:.3f}, validation success {record['val_success']:.2f} "
                f"({record['seconds']:.0f}s)")
            if result["success"] >= target_success:
                break
    model.eval()
    return history


def _similar_lengths(demos: list[Trajectory], batch_tokens: int, rng: random.Random) -> list[Trajectory]:
    """A random batch of similar lengths filling `batch_tokens` (rows x longest row): sample 64 demos, sort them by
    length, and take a contiguous run from a random start. Padding is compute spent on nothing."""
    pool = sorted(rng.sample(demos, min(64, len(demos))), key=lambda t: len(t.input_ids))
    start = rng.randrange(len(pool))
    batch = [pool[start]]
    for t in pool[start + 1:]:
        if (len(batch) + 1) * len(t.input_ids) > batch_tokens:
            break
        batch.append(t)
    return batch
