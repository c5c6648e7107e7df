"""Run by tests/test_fsdp.py under `accelerate launch --config_file configs/accelerate/fsdp_cpu_2proc.yaml` (two
gloo processes, FSDP2). Three prompts per step, so rank 0 plays two items and rank 1 one: the ranks have different
numbers of micro-batches (one episode each) and rank 1 has an empty mini-batch, yet every forward and backward is a
collective. Two parts, each with its own run:

1. `fsdp`: one real training step (rollout, update, weight sync, sharded checkpoint), then a second Trainer resumed
   from that checkpoint. Every rank writes what it holds: its shard sizes, the gathered weights, its engine's
   weights, and the resumed trainer's weights and Adam state.
2. `union`: every rank plays its share, re-scored so the shares differ in mean, and makes one update (two epochs of
   one mini-batch: two optimizer steps); the gathered weights and the gradient norm go to the test, which makes the
   same update in one process on the union of the episodes.
"""
import dataclasses
import json
import os
import sys

import torch
from safetensors.torch import load_file

from agentgym_nb.config import make_config
from agentgym_nb.rollout.trajectory import TrajectoryGroup
from agentgym_nb.train.parallel import full_state_dict
from agentgym_nb.train.rl import Trainer
from ddp_worker import rescored_episodes  # noqa: E402  (tests/ is the script's own folder)


def step_config(out_dir: str):
    return make_config(preset="smoke", name="fsdp", overrides={
        "out_dir": out_dir, "engine": "hf", "lr": 1e-2, "entropy_coef": 0.1, "prompts_per_step": 3,
        "mini_batches": 2, "micro_batch_tokens": 1, "gradient_checkpointing": True, "threads": 1})


def union_config(out_dir: str):
    """REINFORCE++ (advantages whitened over all processes' tokens), entropy bonus and KL loss, two epochs of one
    mini-batch: the two-process update must equal one process's update on the union, term by term."""
    return make_config(preset="smoke", name="union", overrides={
        "out_dir": out_dir, "engine": "hf", "algorithm": "reinforce_plus_plus", "gamma": 0.9, "lr": 1e-2,
        "entropy_coef": 0.1, "prompts_per_step": 3, "samples_per_prompt": 2, "mini_batches": 1, "ppo_epochs": 2,
        "micro_batch_tokens": 1, "threads": 1})


def adam_state(trainer) -> dict[str, torch.Tensor]:
    """exp_avg_sq of every parameter, whole (gathered from the shards), by parameter name."""
    names = {id(p): n for n, p in trainer.model.named_parameters()}
    out = {}
    for group in trainer.optimizer.param_groups:
        for p in group["params"]:
            v = trainer.optimizer.state[p]["exp_avg_sq"]
            out[names[id(p)]] = v.full_tensor() if hasattr(v, "full_tensor") else v
    return out


def step_and_resume(out_dir: str) -> None:
    trainer = Trainer(step_config(out_dir), log=lambda *a: None)
    rank = trainer.accelerator.process_index
    local = {n: p.to_local().numel() for n, p in trainer.model.named_parameters()}
    # the launcher's fsdp_cpu_ram_efficient_loading: transformers reads the weights on rank 0 only (zeros elsewhere)
    saved = load_file(os.path.join(trainer.model_dir, "model.safetensors"))
    initial = full_state_dict(trainer.model)
    initial_ref = full_state_dict(trainer.ref)
    metrics = trainer.train_step()
    weights = full_state_dict(trainer.model)
    engine = trainer.engine.model.state_dict()
    adam = adam_state(trainer)
    trainer.close()
    resumed = Trainer(step_config(out_dir), log=lambda *a: None)   # finds the checkpoint of step 1
    result = {
        "initial_gap": max(float((initial[k] - v).abs().max()) for k, v in saved.items()),
        "initial_ref_gap": max(float((initial_ref[k] - v).abs().max()) for k, v in saved.items()),
        "rotary": float(trainer.model.model.rotary_emb.inv_freq.sum()),
        "rank": rank, "sharding": trainer.parallel.kind, "world": trainer.accelerator.num_processes,
        "items": trainer.items_for_step(1)[rank::2], "episodes": metrics["episodes"],
        "optimizer_steps": metrics["optimizer_steps"], "grad_norm": metrics["grad_norm"],
        "local_numel": sum(local.values()), "full_numel": sum(v.numel() for k, v in weights.items()
                                                             if k != "lm_head.weight"),
        "engine_gap": max(float((engine[k] - v).abs().max()) for k, v in weights.items()),
        "resumed_step": resumed.step,
        "resumed_gap": max(float((v - weights[k]).abs().max()) for k, v in full_state_dict(resumed.model).items()),
        "resumed_adam_gap": max(float((v - adam[k]).abs().max()) for k, v in adam_state(resumed).items()),
        "resumed_engine_gap": max(float((resumed.engine.model.state_dict()[k] - v).abs().max())
                                  for k, v in weights.items()),
    }
    resumed.close()
    with open(os.path.join(out_dir, f"fsdp_rank{rank}.json"), "w") as f:
        json.dump(result, f)
    torch.save({k: float(v.double().sum()) for k, v in weights.items()}, os.path.join(out_dir, f"sums{rank}.pt"))


def union_update(out_dir: str) -> None:
    trainer = Trainer(union_config(out_dir), log=lambda *a: None)
    rank, world = trainer.accelerator.process_index, trainer.accelerator.num_processes
    trajs = rescored_episodes(trainer, rank, world)
    out = trainer.update(TrajectoryGroup.of(trajs), 1)
    weights = full_state_dict(trainer.model)
    with open(os.path.join(out_dir, f"union_rank{rank}.json"), "w") as f:
        json.dump({"episodes": [dataclasses.asdict(t) for t in trajs], "optimizer_steps": out["optimizer_steps"],
                   "grad_norm": out["grad_norm"], "kl": out["kl"], "entropy": out["entropy"]}, f)
    torch.save(weights, os.path.join(out_dir, f"union_rank{rank}.pt"))
    trainer.close()


if __name__ == "__main__":
    step_and_resume(sys.argv[1])
    union_update(sys.argv[1])
    torch.distributed.barrier()
    # left to the interpreter's exit, the process group's threads can abort a rank after its work is done
    # ("terminate called without an active exception", SIGABRT)
    torch.distributed.destroy_process_group()
