"""The sha256 of the weights a few short smoke-preset runs end with: a refactor of the trainer must leave every
digest bit for bit as it was.

    .venv/bin/python scripts/weights_digest.py                  # every configuration, one line each
    .venv/bin/python scripts/weights_digest.py grpo lora ddp    # some of them

Each run trains `steps` steps of the smoke preset with the HF engine on one thread, from the nano the tests use,
and hashes every tensor of the final policy (and of the critic, for GAE) in name order; the optimizer steps of
each training step are printed too, so a configuration that stopped learning shows. `ddp` and `fsdp` are two
gloo processes started by `accelerate launch` with the repository's CPU configs; their fsdp share is uneven (3
prompts over 2 processes, one-row micro-batches), so the filler passes of the busier process's turn are in it.
"""
from __future__ import annotations

import hashlib
import json
import os
import socket
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

BASE = {"engine": "hf", "threads": 1, "steps": 2, "lr": 1e-3}
CONFIGS = {   # name -> overrides of the smoke preset
    "grpo": dict(ppo_epochs=2, mini_batches=2, micro_batch_tokens=256, entropy_coef=0.01, tis_cap=1.5),
    "gae": dict(algorithm="gae", critic_lr=1e-3, samples_per_prompt=3),
    "reinforce_pp": dict(algorithm="reinforce_plus_plus", kl_coef=0.1, kl_in_reward=True, gamma=0.9),
    "lora": dict(lora_rank=4, lr=5e-3, kl_coef=0.1),
    # the committed long-track nano: the smoke nano never succeeds, and dynamic sampling needs groups with a spread
    "filter_groups": dict(filter_groups=True, oversample=3, samples_per_prompt=4, kl_coef=0.05, schedule="fixed",
                          rounds=[8], max_total_tokens=2048, model=os.path.join(ROOT, "models", "nano-babyai-long")),
}
LAUNCHED = {   # name -> (accelerate config, overrides)
    "ddp": ("ddp_cpu_2proc", dict(prompts_per_step=4, mini_batches=2, entropy_coef=0.1)),
    "fsdp": ("fsdp_cpu_2proc", dict(prompts_per_step=3, mini_batches=2, micro_batch_tokens=1, kl_coef=0.05)),
}


def digest(state: dict) -> str:
    import torch
    h = hashlib.sha256()
    for name in sorted(state):
        t = state[name].detach().cpu().contiguous()
        h.update(name.encode())
        h.update(str(t.dtype).encode())
        h.update(t.view(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def whole(model, sharded: bool) -> dict:
    """Every tensor of `model`, gathered from the shards under FSDP (a collective: every process calls it)."""
    if not sharded:
        return model.state_dict()
    from torch.distributed.tensor import DTensor
    return {k: v.full_tensor() if isinstance(v, DTensor) else v for k, v in model.state_dict().items()}


def train(name: str, overrides: dict, out_dir: str) -> dict:
    from agentgym_nb.config import make_config
    from agentgym_nb.train.rl import Trainer
    cfg = make_config(preset="smoke", name=name, overrides={"out_dir": out_dir, **BASE, **overrides})
    trainer = Trainer(cfg, log=lambda *a: None)
    history = trainer.fit()
    sharded = trainer.accelerator.num_processes > 1 and os.environ.get("ACCELERATE_USE_FSDP", "").lower() == "true"
    out = {"optimizer_steps": [m["optimizer_steps"] for m in history],
           "policy": digest(whole(trainer.accelerator.unwrap_model(trainer.model), sharded))}
    if trainer.critic is not None:
        out["critic"] = digest(whole(trainer.accelerator.unwrap_model(trainer.critic), sharded))
    trainer.close()
    return out


def launched(name: str) -> dict:
    config, _ = LAUNCHED[name]
    with tempfile.TemporaryDirectory() as out, socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = str(s.getsockname()[1])
        s.close()
        accelerate = os.path.join(os.path.dirname(sys.executable), "accelerate")
        done = subprocess.run([accelerate, "launch", "--main_process_port", port, "--config_file",
                               os.path.join(ROOT, "configs", "accelerate", f"{config}.yaml"), __file__, "--worker",
                               name, out], env={**os.environ, "OMP_NUM_THREADS": "1"}, capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"{name}: {done.stderr[-3000:]}")
        ranks = [json.load(open(os.path.join(out, f"rank{r}.json"))) for r in (0, 1)]
    if ranks[0] != ranks[1]:
        raise RuntimeError(f"{name}: the processes ended with different weights: {ranks}")
    return ranks[0]


def worker(name: str, out_dir: str) -> None:
    import torch
    result = train(name, LAUNCHED[name][1], out_dir)
    with open(os.path.join(out_dir, f"rank{torch.distributed.get_rank()}.json"), "w") as f:
        json.dump(result, f)
    torch.distributed.barrier()


def main(names: list[str]) -> None:
    for name in names or [*CONFIGS, *LAUNCHED]:
        if name in CONFIGS:
            with tempfile.TemporaryDirectory() as out:
                result = train(name, CONFIGS[name], out)
        else:
            result = launched(name)
        print(name, " ".join(f"{k} {v}" for k, v in result.items()), flush=True)


if __name__ == "__main__":
    # the smoke preset's nano and a fixed hash seed, as the tests have them
    os.environ.update(AGENTGYM_NB_PRESET="smoke", OMP_NUM_THREADS="1")
    if os.environ.get("PYTHONHASHSEED") != "0":
        os.environ["PYTHONHASHSEED"] = "0"
        os.execv(sys.executable, [sys.executable, *sys.argv])
    if sys.argv[1:2] == ["--worker"]:
        worker(sys.argv[2], sys.argv[3])
    else:
        main(sys.argv[1:])
