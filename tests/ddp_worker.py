"""Run by tests/test_ddp.py under `accelerate launch` (two gloo processes): one real training step of the smoke
config, then every rank writes a fingerprint of its weights (and of the initial ones) next to the run."""
import json
import os
import sys

import torch

from agentgym_nb.config import make_config
from agentgym_nb.train.rl import Trainer


def fingerprint(model) -> list[float]:
    return [float(v.double().sum()) for _, v in sorted(model.state_dict().items())]


def main(out_dir: str) -> None:
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
    torch.distributed.barrier()


if __name__ == "__main__":
    main(sys.argv[1])
