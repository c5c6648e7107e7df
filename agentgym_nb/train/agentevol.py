"""AgentEvol (AgentGym, Xi et al. 2024): self-evolution by exploring and learning from what worked.

    data_0 = original (expert) trajectories
    for k = 0 .. iterations-1:
        train    pi_k = SFT of the base model on data_k                    (always from the base: no drift)
        explore  n episodes per exploration item with pi_k
        keep     episodes whose reward is above the env's threshold, one per item (the first)
        merge    data_{k+1} = kept_k + original

Thresholds and the keep-first dedupe are AgentGym's `agentevol_filter.py` (`reward > threshold`: babyai 0,
sciworld 99 (its 0-100 scale), 0.99 for the others). Merging with the original data, not the previous iteration's
file, follows the paper's D_m = D_m^s U D_s (the released shell script feeds the previous file back instead, so
its data set grows with every iteration).
"""
from __future__ import annotations

import os
import time
from typing import Callable

import torch

from .. import envs
from ..evaluate import evaluate
from ..models import load_tokenizer
from ..pretrained import load_pretrained
from ..rollout.engine import Engine, SamplingParams, make_engine
from ..rollout.runner import run_episodes
from ..rollout.trajectory import ChatFormat
from ..seeds import mix_seed
from .common import add_lora, merged_state_dict
from .sft import check_record, item_index, load_records, sft, to_trajectory, trajectory_record, write_records

REWARD_THRESHOLDS = {"babyai": 0.0, "sciworld": 99.0}
DEFAULT_THRESHOLD = 0.99


def reward_threshold(env: str) -> float:
    """An explored episode is kept when its reward is strictly above this."""
    return REWARD_THRESHOLDS.get(env, DEFAULT_THRESHOLD)


def keep_successes(records: list[dict], env: str) -> list[dict]:
    """The records with reward > reward_threshold(env), the first one of each item only, in their order."""
    threshold, seen, kept = reward_threshold(env), set(), []
    for r in records:
        key = item_index(r["item_id"])
        if r["reward"] > threshold and key not in seen:
            seen.add(key)
            kept.append(r)
    return kept


def agentevol(model_dir: str, data: list[dict] | str, *, env: str, explore_items: list[int], out_dir: str,
              iterations: int = 4, samples_per_item: int = 3, max_rounds: int = 20, temperature: float = 1.0,
              max_tokens: int = 256, max_total_tokens: int = 4096, engine: Engine | None = None,
              env_factory: Callable | None = None, lora_r: int = 0, lora_alpha: int = 16, epochs: int = 1,
              batch_size: int = 32, micro_batch_tokens: int = 8192, lr: float = 1e-5, bf16: bool | None = None,
              eval_items: list[int] = (), seed: int = 0, log=print):
    """Run AgentEvol from the model in `model_dir` on `data` (records or a .json/.jsonl file in AgentGym's or our
    rollout-log format). Each iteration trains a fresh copy of the base model (LoRA of rank `lora_r`, or full
    fine-tuning when 0), loads its merged weights into `engine` (default: `make_engine("auto", model_dir)`, closed
    at the end; a passed engine keeps the last iteration's weights), optionally evaluates greedily on
    `eval_items`, explores `samples_per_item` episodes of each of `explore_items`, and filters them.

    Writes `out_dir/iter_<k>/{train,explored,kept}.jsonl` (the data trained on, every explored episode, the kept
    ones; AgentGym's inference-output records). Returns (the last trained model, one summary dict per iteration).
    """
    from transformers import AutoModelForCausalLM   # a model class: importing it takes seconds
    original = load_records(data) if isinstance(data, str) else [check_record(r, f"data record {i}")
                                                                 for i, r in enumerate(data)]
    if not explore_items:
        raise ValueError("agentevol needs exploration items (explore_items)")
    env_factory = env_factory or (lambda: envs.make(env))
    chat = ChatFormat(load_tokenizer(model_dir))
    own_engine = engine is None
    if own_engine:
        engine = make_engine("auto", model_dir, max_model_len=max_total_tokens + max_tokens, seed=seed,
                             tokenizer=chat.tokenizer)
    history, current, model = [], original, None
    try:
        for k in range(iterations):
            t0 = time.time()
            folder = os.path.join(out_dir, f"iter_{k}")
            write_records(os.path.join(folder, "train.jsonl"), current)
            model = load_pretrained(AutoModelForCausalLM, model_dir, dtype=torch.float32)
            if lora_r:
                model = add_lora(model, r=lora_r, alpha=lora_alpha)
            losses = sft(model, [to_trajectory(chat, r) for r in current], chat, epochs=epochs, batch_size=batch_size,
                         micro_batch_tokens=micro_batch_tokens, lr=lr, bf16=bf16, seed=seed + k, log=log)
            engine.load_weights(merged_state_dict(model).items())
            summary = {"iteration": k, "train_records": len(current), "first_loss": losses[0]["loss"],
                       "last_loss": losses[-1]["loss"], "sft_steps": len(losses)}
            if eval_items:
                result = evaluate(engine, env_factory, list(eval_items), chat, max_rounds=max_rounds,
                                  params=SamplingParams(temperature=0.0, max_tokens=max_tokens),
                                  max_total_tokens=max_total_tokens)
                summary["eval_success"] = result["success"]
            params = SamplingParams(temperature=temperature, max_tokens=max_tokens, seed=mix_seed(seed, k))
            trajs = run_episodes(engine, env_factory, list(explore_items), chat, n=samples_per_item,
                                 max_rounds=max_rounds, params=params, max_total_tokens=max_total_tokens)
            explored = [trajectory_record(t, env) for t in trajs if not t.failed]
            kept = keep_successes(explored, env)
            write_records(os.path.join(folder, "explored.jsonl"), explored)
            write_records(os.path.join(folder, "kept.jsonl"), kept)
            summary.update(explored=len(explored), failed=len(trajs) - len(explored), kept=len(kept),
                           explore_success=sum(t.success for t in trajs) / len(trajs),
                           seconds=round(time.time() - t0, 1))
            history.append(summary)
            log(f"agentevol iteration {k}: trained on {len(current)} records (loss {summary['first_loss']:.3f} -> "
                f"{summary['last_loss']:.3f}), kept {len(kept)} of {len(explored)} explored episodes")
            current = kept + original
    finally:
        if own_engine:
            engine.close()
    return model, history
