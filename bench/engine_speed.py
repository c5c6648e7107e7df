"""Sampling speed of the HF engine on a device (a GPU, or the CPU), against the same engine on the CPU and against
an earlier commit's engine side by side; optionally vLLM's start and weight-reload times.

    .venv/bin/python bench/engine_speed.py                                  # the CPU: nano rollout, generate
    .venv/bin/python bench/engine_speed.py --baseline a948ca3               # ... and the engine of a948ca3 beside it
    .venv/bin/python bench/engine_speed.py --device cuda --shapes nano qwen2.5-0.5b   # a GPU (make gpu-check)

Three measurements, each after a warm-up call, the best of --repeats:
  rollout   the cpu preset's rollout of the nano (BabyAI's one-room levels, 16 tasks x 4 episodes = 64 episodes at
            H = 6, T = 1, a fixed seed) through the real runner and envs: policy tokens/s and seconds, on --device and
            on this machine's CPU (the speedup is the GPU's worth for the rollout);
  long      the horizon study's rollout: the committed long-track nano (models/nano-babyai-long) on --long-tasks
            held-out long-track tasks x 4 episodes at H = 20 (episodes of ~2,500 tokens), the best of
            --long-repeats; with --baseline, whether both engines sampled the same tokens (`same_tokens`);
  generate  a model of a given shape with random weights (nano: the built nano's config; qwen2.5-0.5b: hidden 896,
            24 layers, 14 heads, 2 KV heads, FFN 4864, vocabulary 151,936, tied embeddings; bf16 on a GPU) sampling
            --batch sequences of --new-tokens tokens (no stop token) from prompts of --prompt-tokens: tokens/s; on a
            GPU also with the static cache (HFEngine(static_cache=True): compiled, CUDA graphs), whose first call
            compiles (the warm-up, untimed).
With --baseline REV the engine module of commit REV (git show REV:agentgym_nb/rollout/engine.py) runs the same
measurements on the CPU, side by side with today's. Writes --out (default bench/results/engine_speed.json).
"""
from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time

from _common import commit, machine, versions  # bench/_common.py

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

QWEN_05B = dict(hidden_size=896, num_hidden_layers=24, num_attention_heads=14, num_key_value_heads=2,
                intermediate_size=4864, vocab_size=151936, tie_word_embeddings=True, max_position_embeddings=32768)
QWEN_7B = dict(hidden_size=3584, num_hidden_layers=28, num_attention_heads=28, num_key_value_heads=4,
               intermediate_size=18944, vocab_size=152064, tie_word_embeddings=False, max_position_embeddings=32768)


def baseline_engine_module(rev: str):
    """agentgym_nb.rollout.engine as it was at commit `rev`, loaded as a module of its own."""
    source = subprocess.run(["git", "show", f"{rev}:agentgym_nb/rollout/engine.py"], cwd=ROOT, capture_output=True,
                            text=True, check=True).stdout
    path = os.path.join(tempfile.mkdtemp(prefix="engine_"), f"engine_{rev}.py")
    with open(path, "w") as f:
        f.write(source)
    # named inside the package, so that its relative imports (.base) resolve to this checkout's modules
    spec = importlib.util.spec_from_file_location(f"agentgym_nb.rollout.engine_{rev}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module   # (its dataclasses look their module up there)
    spec.loader.exec_module(module)
    return module


def random_model(shape: str, nano_dir: str, device: str):
    """A model of `shape` with random weights, on `device` (bf16 on a GPU, fp32 on a CPU)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, Qwen2Config
    config = AutoConfig.from_pretrained(nano_dir) if shape == "nano" else Qwen2Config(**QWEN_05B)
    torch.manual_seed(0)
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    return AutoModelForCausalLM.from_config(config, dtype=dtype).to(device).eval()


def timed(fn, repeats: int) -> float:
    """The best of `repeats` timings of fn() (seconds), after one untimed warm-up call."""
    import torch
    fn()
    best = float("inf")
    for _ in range(repeats):
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        start = time.perf_counter()
        fn()
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        best = min(best, time.perf_counter() - start)
    return best


def generate_speed(engine_module, model, batch: int, prompt_tokens: int, new_tokens: int, repeats: int,
                   **options) -> dict:
    engine = engine_module.HFEngine(model=model, **options)
    engine.eos_token_ids = []   # random weights: every sequence runs its full length
    vocab = model.config.vocab_size
    prompts = [[(7 * i + 13 * b) % (vocab - 10) + 5 for i in range(prompt_tokens)] for b in range(batch)]
    params = engine_module.SamplingParams(temperature=1.0, max_tokens=new_tokens, seed=0)
    seconds = timed(lambda: engine.generate(prompts, params), repeats)
    return {"seconds": seconds, "tokens_per_s": batch * new_tokens / seconds}


class WithoutSessions:
    """An engine of a commit from before `generate` took `sessions` (each prompt prefilled whole), as the runner
    calls engines now."""

    def __init__(self, engine):
        self.engine = engine

    def generate(self, prompts, params, seeds=None, *, sessions=None):
        return self.engine.generate(prompts, params, seeds)

    def release(self, sessions):
        pass


def rollout_speed(engine_module, model, tokenizer, items: list[int], n: int, repeats: int, *, rounds: int = 6,
                  max_tokens: int = 40, max_total_tokens: int = 1536) -> dict:
    import inspect

    from agentgym_nb import envs
    from agentgym_nb.rollout.runner import RolloutStats, run_episodes
    from agentgym_nb.rollout.trajectory import ChatFormat
    engine, chat = engine_module.HFEngine(model=model, tokenizer=tokenizer), ChatFormat(tokenizer)
    if "sessions" not in inspect.signature(engine.generate).parameters:
        engine = WithoutSessions(engine)
    params = engine_module.SamplingParams(temperature=1.0, max_tokens=max_tokens, seed=3)
    played = {}

    def play():
        played["stats"] = RolloutStats()
        played["trajs"] = run_episodes(engine, lambda: envs.make("babyai"), items, chat, n=n, max_rounds=rounds,
                                       params=params, max_total_tokens=max_total_tokens, stats=played["stats"])
    seconds = timed(play, repeats)
    trajs, stats = played["trajs"], played["stats"]
    tokens = sum(t.num_policy_tokens for t in trajs)
    return {"seconds": seconds, "policy_tokens": tokens, "tokens_per_s": tokens / seconds,
            "episodes": len(trajs), "successes": sum(t.success for t in trajs),
            "episode_tokens": sum(len(t.input_ids) for t in trajs), "prompt_tokens": stats.prompt_tokens,
            "cached_tokens": stats.cached_tokens, "cache_fallbacks": stats.cache_fallbacks,
            "tokens_digest": hashlib.sha1(repr([t.input_ids for t in trajs]).encode()).hexdigest()[:16]}


def main(argv=None) -> dict:
    import torch

    from agentgym_nb import models
    from agentgym_nb.config import make_config, item_pool
    from agentgym_nb.rollout import engine as engine_now
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu", choices=("cpu", "cuda"))
    p.add_argument("--preset", default="cpu", help="the nano of this preset (smoke: a test of the script)")
    p.add_argument("--shapes", nargs="+", default=["nano"], choices=("nano", "qwen2.5-0.5b"))
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--prompt-tokens", type=int, default=None, help="default: 300 for the nano, 512 otherwise")
    p.add_argument("--new-tokens", type=int, default=None, help="default: 16 for the nano, 256 otherwise")
    p.add_argument("--rollout-tasks", type=int, default=16, help="tasks of the rollout, 4 episodes each")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--long-tasks", type=int, default=4, help="long-track tasks of the H = 20 rollout (0: none)")
    p.add_argument("--long-repeats", type=int, default=1)
    p.add_argument("--baseline", default=None, metavar="REV", help="also time the engine of this commit (CPU)")
    p.add_argument("--static", action="store_true", help="also time the static-cache path on a CPU (always on a GPU)")
    p.add_argument("--threads", type=int, default=0, help="torch threads (0: $OMP_NUM_THREADS, else all cores)")
    p.add_argument("--out", default=os.path.join(ROOT, "bench", "results", "engine_speed.json"))
    args = p.parse_args(argv)
    from agentgym_nb.train.common import set_threads
    threads = set_threads(args.threads)
    cfg = make_config(preset=args.preset, env="babyai", overrides={"track": "one-room"} if args.preset != "smoke"
                      else {})
    nano_dir = models.resolve_config(cfg)
    tokenizer = models.load_tokenizer(nano_dir)
    engines = {"now": engine_now}
    if args.baseline:
        engines[args.baseline] = baseline_engine_module(args.baseline)
    items = item_pool(cfg, "test")[:args.rollout_tasks]
    results: dict = {"rollout": {}, "long_rollout": {}, "generate": {}}

    from transformers import AutoModelForCausalLM
    for device in dict.fromkeys([args.device, "cpu"]):
        nano = AutoModelForCausalLM.from_pretrained(nano_dir).to(device).eval()
        for name, module in engines.items():
            if name != "now" and device != "cpu":
                continue   # an earlier engine never ran anywhere but on the CPU
            results["rollout"][f"{name}/{device}"] = rollout_speed(module, nano, tokenizer, items, 4, args.repeats)
            print(f"rollout {name:8s} {device}: {results['rollout'][f'{name}/{device}']}", flush=True)
    if args.long_tasks:
        long_nano = os.path.join(ROOT, "models", "nano-babyai-long")
        long_cfg = make_config(preset="cpu", env="babyai", track="long")
        long_items = item_pool(long_cfg, "test")[:args.long_tasks]
        rounds = 20 if args.preset != "smoke" else 2
        for device in dict.fromkeys([args.device, "cpu"]):
            nano = AutoModelForCausalLM.from_pretrained(long_nano).to(device).eval()
            for name, module in engines.items():
                if name != "now" and device != "cpu":
                    continue
                key = f"{name}/{device}"
                results["long_rollout"][key] = rollout_speed(
                    module, nano, models.load_tokenizer(long_nano), long_items, 4, args.long_repeats, rounds=rounds,
                    max_tokens=long_cfg.max_tokens, max_total_tokens=7168)
                print(f"long rollout {name:8s} {device}: {results['long_rollout'][key]}", flush=True)
    for shape in args.shapes:
        prompt = args.prompt_tokens or (300 if shape == "nano" else 512)
        new = args.new_tokens or (16 if shape == "nano" else 256)
        devices = [args.device] + (["cpu"] if shape == "nano" and args.device != "cpu" else [])
        for device in devices:
            model = random_model(shape, nano_dir, device)
            for name, module in engines.items():
                if name != "now" and device != "cpu":
                    continue
                variants = {"": {}}
                if name == "now" and (device == "cuda" or args.static):
                    variants["/static"] = {"static_cache": True}
                for suffix, options in variants.items():
                    key = f"{shape}/{name}/{device}{suffix}"
                    try:
                        speed = generate_speed(module, model, args.batch, prompt, new, args.repeats, **options)
                    except Exception as e:   # (a compile that fails on this machine is a finding, not the end)
                        speed = {"error": f"{type(e).__name__}: {e}"}
                    results["generate"][key] = {"batch": args.batch, "prompt_tokens": prompt, "new_tokens": new,
                                                **speed}
                    print(f"generate {key}: {speed.get('tokens_per_s', speed.get('error'))}", flush=True)
            del model
    rollout = results["rollout"]
    if args.device == "cuda":
        results["rollout_speedup_over_cpu"] = rollout["now/cpu"]["seconds"] / rollout["now/cuda"]["seconds"]
    if args.baseline:
        results["rollout_cpu_now_over_baseline"] = (rollout[f"{args.baseline}/cpu"]["seconds"]
                                                    / rollout["now/cpu"]["seconds"])
        if args.long_tasks:
            now, then = results["long_rollout"]["now/cpu"], results["long_rollout"][f"{args.baseline}/cpu"]
            results["long_rollout_cpu_now_over_baseline"] = then["seconds"] / now["seconds"]
            results["long_rollout_same_tokens"] = now["tokens_digest"] == then["tokens_digest"]
    out = {"benchmark": "engine_speed", "date": time.strftime("%Y-%m-%d"), "commit": commit(),
           "machine": machine(), "versions": versions("torch", "transformers"), "device": args.device,
           "gpu": torch.cuda.get_device_name() if args.device == "cuda" else None, "torch_threads": threads,
           "loadavg": os.getloadavg(), "params": {k: v for k, v in vars(args).items() if k != "out"},
           "results": results}
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(out, f, indent=2)
    print(f"engine_speed -> {args.out}")
    return out


if __name__ == "__main__":
    main()
