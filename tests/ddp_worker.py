"""Run by tests/test_ddp.py under `accelerate launch` (two gloo processes). Two parts, each with its own run:

1. `ddp` (GRPO): one real training step of the smoke config, then every rank writes a fingerprint of its weights
   (and of the initial ones) next to the run.
2. `union` (REINFORCE++): every rank plays its share of the items, re-scored so the shares differ in mean (rank 1
   scores one higher), and makes one update; every rank writes its episodes and its weights afterwards, for the test
   to compare with one process's update on the union of the episodes.
3. `skip` (GRPO, filter_groups): an update where only rank 1's groups carry a signal (rank 0's all score 0.9), then
   one where no rank's do; every rank writes its optimizer steps and weight fingerprints.
4. `filtered` (GRPO, filter_groups): every group of the step carries a signal, more of them than prompts_per_step;
   every rank chooses its groups to train, updates, and writes its episodes, its choice and its weights, for the test
   to compare with one process's choice and update on the union.
"""
import dataclasses
import json
import os
import sys

import torch

from agentgym_nb.config import make_config
from agentgym_nb.rollout.engine import SamplingParams
from agentgym_nb.rollout.runner import run_episodes
from agentgym_nb.rollout.trajectory import TrajectoryGroup
from agentgym_nb.train.rl import Trainer


def fingerprint(model) -> list[float]:
    return [float(v.double().sum()) for _, v in sorted(model.state_dict().items())]


def union_config(out_dir: str):
    """REINFORCE++ with discounting (returns vary within an episode), two mini-batches, no entropy bonus: the update
    is driven by the whitened returns alone."""
    return make_config(preset="smoke", name="union", overrides={
        "out_dir": out_dir, "engine": "hf", "algorithm": "reinforce_plus_plus", "gamma": 0.9, "lr": 1e-2,
        "entropy_coef": 0.0, "prompts_per_step": 4, "samples_per_prompt": 2, "mini_batches": 2, "threads": 1})


def rescored_episodes(trainer, rank: int, world: int) -> list:
    cfg = trainer.cfg
    items = trainer.items_for_step(1)
    mine = list(range(rank, len(items), world))   # the step's group numbers this process plays, as in train_step
    trajs = run_episodes(trainer.engine, trainer.env_factory, [items[g] for g in mine], trainer.chat,
                         n=cfg.samples_per_prompt, max_rounds=2, max_total_tokens=cfg.max_total_tokens, group_ids=mine,
                         params=SamplingParams(temperature=1.0, max_tokens=cfg.max_tokens, seed=5),
                         first_episode=rank * 1_000_000)
    for i, t in enumerate(trajs):
        t.reward = float(i % 2 + rank)
    return [t for t in trajs if t.num_policy_tokens > 0]


def grpo_step(out_dir: str) -> None:
    # entropy_coef: every episode contributes a gradient, so unsynchronised ranks would drift apart
    cfg = make_config(preset="smoke", name="ddp", overrides={"out_dir": out_dir, "engine": "hf", "lr": 1e-2,
                                                             "entropy_coef": 0.1, "prompts_per_step": 4,
                                                             "mini_batches": 2, "threads": 1})
    trainer = Trainer(cfg, log=lambda *a: None)
    model = trainer.accelerator.unwrap_model(trainer.model)
    before = fingerprint(model)
    metrics = trainer.train_step()
    rank = trainer.accelerator.process_index
    with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as f:
        json.dump({"rank": rank, "world": trainer.accelerator.num_processes, "before": before,
                   "after": fingerprint(model), "items": trainer.items_for_step(1)[rank::2],
                   "episodes": metrics["episodes"], "optimizer_steps": metrics["optimizer_steps"]}, f)
    trainer.close()


def union_update(out_dir: str) -> None:
    trainer = Trainer(union_config(out_dir), log=lambda *a: None)
    rank, world = trainer.accelerator.process_index, trainer.accelerator.num_processes
    trajs = rescored_episodes(trainer, rank, world)
    out = trainer.update(TrajectoryGroup.of(trajs), 1)
    with open(os.path.join(out_dir, f"union_rank{rank}.json"), "w") as f:
        json.dump({"episodes": [dataclasses.asdict(t) for t in trajs], "optimizer_steps": out["optimizer_steps"]}, f)
    torch.save(trainer.accelerator.unwrap_model(trainer.model).state_dict(),
               os.path.join(out_dir, f"union_rank{rank}.pt"))
    trainer.close()


def filtered_config(out_dir: str):
    """GRPO with dynamic sampling: 4 groups played (2 per process), 2 trained; one mini-batch, no entropy bonus."""
    return make_config(preset="smoke", name="filtered", overrides={
        "out_dir": out_dir, "engine": "hf", "lr": 1e-2, "entropy_coef": 0.0, "filter_groups": True,
        "prompts_per_step": 2, "oversample": 2, "samples_per_prompt": 2, "mini_batches": 1, "threads": 1})


def filtered_update(out_dir: str) -> None:
    trainer = Trainer(filtered_config(out_dir), log=lambda *a: None)
    rank, world = trainer.accelerator.process_index, trainer.accelerator.num_processes
    trajs = rescored_episodes(trainer, rank, world)
    for i, t in enumerate(trajs):
        t.reward = float(i % 2)   # 0 and 1 in every group: each one is informative
    chosen = trainer.groups_to_train(TrajectoryGroup.of(trajs))
    out = trainer.update(chosen, 1)
    with open(os.path.join(out_dir, f"filtered_rank{rank}.json"), "w") as f:
        json.dump({"episodes": [dataclasses.asdict(t) for t in trajs], "chosen": sorted(g.id for g in chosen),
                   "optimizer_steps": out["optimizer_steps"]}, f)
    torch.save(trainer.accelerator.unwrap_model(trainer.model).state_dict(),
               os.path.join(out_dir, f"filtered_rank{rank}.pt"))
    trainer.close()


def skip_decision(out_dir: str) -> None:
    """The skip is decided over all processes: a rank whose own advantages are all 0 must still take its part in
    the backward passes and optimizer steps when another rank has a signal (or the ranks would part ways)."""
    cfg = make_config(preset="smoke", name="skip", overrides={
        "out_dir": out_dir, "engine": "hf", "lr": 1e-2, "filter_groups": True, "prompts_per_step": 4,
        "samples_per_prompt": 2, "mini_batches": 2, "threads": 1})
    trainer = Trainer(cfg, log=lambda *a: None)
    rank, world = trainer.accelerator.process_index, trainer.accelerator.num_processes
    model = trainer.accelerator.unwrap_model(trainer.model)
    trajs = rescored_episodes(trainer, rank, world)
    record = {"before": fingerprint(model)}
    for t in trajs:
        t.reward = 0.9 if rank == 0 else t.reward - rank   # rank 0: constant groups; rank 1: 0/1 in each group
    record["one_rank_steps"] = trainer.update(TrajectoryGroup.of(trajs), 1)["optimizer_steps"]
    record["after_one"] = fingerprint(model)
    for t in trajs:
        t.reward = 0.9
    record["no_rank_steps"] = trainer.update(TrajectoryGroup.of(trajs), 2)["optimizer_steps"]
    record["after_none"] = fingerprint(model)
    with open(os.path.join(out_dir, f"skip_rank{rank}.json"), "w") as f:
        json.dump(record, f)
    trainer.close()


if __name__ == "__main__":
    grpo_step(sys.argv[1])
    union_update(sys.argv[1])
    skip_decision(sys.argv[1])
    filtered_update(sys.argv[1])
    torch.distributed.barrier()
    # left to the interpreter's exit, the process group's threads can abort a rank after its work is done
    # ("terminate called without an active exception", SIGABRT)
    torch.distributed.destroy_process_group()
