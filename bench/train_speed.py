"""Training throughput: tokens/s, seconds per update and peak memory for nano and smollm2-135m, fp32 vs bf16 autocast,
and the share of the CPU's peak matmul rate that training reaches.

    .venv/bin/python bench/train_speed.py [--models nano smollm2-135m] [--repeats 3] [--steps 3] [--skip smollm2-135m/bf16]

One update = the trainer's work on one micro-batch of B x T tokens (full fine-tuning): forward under autocast (or
not), per-token log-probs and entropies (`algos.losses.token_logprobs`), a policy-gradient loss, backward, gradient
clipping, an AdamW step. Each (model, precision) runs in a fresh process (so its peak RSS is its own): one warm-up
update, then --steps timed updates; then, in the same process, the peak matmul rate of that precision (the best of
three timings of a large square matmul, --matmul-n, with the same threads).

    training FLOPs per token = 6 * P_matmul + 12 * L * T * d   (PaLM's convention, appendix B)
where P_matmul = weights of every linear layer (the output head included), L layers, T the sequence length, d the
attention width. share of peak = tokens/s * FLOPs per token / peak matmul FLOP/s of the same precision.
The (model, precision) runs are repeated --repeats times in rotating order; the JSON holds every run and the medians.
Writes bench/results/train_speed.json (with os.getloadavg()) and prints one line.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from _common import machine, versions  # bench/_common.py

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

SHAPES = {"nano": (16, 512), "smollm2-135m": (4, 512)}   # (sequences, tokens per sequence) of one update
PRECISIONS = ("fp32", "bf16")


def model_dir(name: str) -> str:
    from agentgym_nb import models
    from agentgym_nb.config import make_config
    if name == "nano":
        return models.resolve_config(make_config(preset="cpu", env="babyai"))
    return models.resolve(name)


def flops_per_token(model, seq: int) -> float:
    import torch
    cfg = model.config
    p_matmul = sum(m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Linear))
    width = cfg.num_attention_heads * getattr(cfg, "head_dim", None) if getattr(cfg, "head_dim", None) \
        else cfg.hidden_size
    return 6 * p_matmul + 12 * cfg.num_hidden_layers * seq * width


def peak_matmul(dtype, n: int) -> float:
    """FLOP/s of an n x n x n matmul in `dtype` (best of three timings of 5 products)."""
    import torch
    a, b = torch.randn(n, n).to(dtype), torch.randn(n, n).to(dtype)
    a @ b
    best = float("inf")
    for _ in range(3):
        t = time.perf_counter()
        for _ in range(5):
            a @ b
        best = min(best, time.perf_counter() - t)
    return 5 * 2 * n**3 / best


def one_config(name: str, precision: str, batch: int, seq: int, steps: int, threads: int, matmul_n: int) -> dict:
    """Runs in its own process: warm-up + `steps` timed updates, then the peak matmul rate; returns the figures."""
    import torch
    from transformers import AutoModelForCausalLM

    from agentgym_nb.algos.losses import token_logprobs
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(model_dir(name), dtype=torch.float32).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-6)
    vocab = model.config.vocab_size
    ids = torch.randint(3, vocab, (batch, seq))
    mask = torch.ones_like(ids)
    adv = torch.randn(batch, seq)
    rss_loaded = _rss_mib()

    def update() -> float:
        t = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16"):
            logp, entropy = token_logprobs(model, ids, mask, with_entropy=True)
        loss = -(logp * adv).mean() - 0.001 * entropy.mean()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return time.perf_counter() - t

    warmup = update()
    seconds = [update() for _ in range(steps)]
    per_update = statistics.median(seconds)
    tokens_per_s = batch * seq / per_update
    fpt = flops_per_token(model, seq)
    peak = peak_matmul(torch.bfloat16 if precision == "bf16" else torch.float32, matmul_n)
    return {"seconds_per_update": per_update, "update_seconds": seconds, "warmup_seconds": warmup,
            "tokens_per_s": tokens_per_s, "train_gflops": tokens_per_s * fpt / 1e9, "peak_matmul_gflops": peak / 1e9,
            "share_of_peak": tokens_per_s * fpt / peak, "flops_per_token": fpt,
            "params": sum(p.numel() for p in model.parameters()), "rss_loaded_mib": rss_loaded,
            "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def _rss_mib() -> float:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:")) / 1024


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", nargs="+", default=list(SHAPES), choices=list(SHAPES))
    p.add_argument("--precisions", nargs="+", default=list(PRECISIONS), choices=PRECISIONS)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--steps", type=int, default=3, help="timed updates per run (after one warm-up update)")
    p.add_argument("--skip", nargs="*", default=[], metavar="MODEL/PRECISION",
                   help="leave these configurations out (e.g. smollm2-135m/bf16 where the CPU has no bf16 kernels and "
                        "PyTorch emulates it: tens of times slower)")
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--matmul-n", type=int, default=2048)
    p.add_argument("--shape", nargs=2, type=int, default=None, metavar=("B", "T"),
                   help="sequences and tokens per update for every model (default: per model, see SHAPES)")
    p.add_argument("--child", nargs=2, default=None, metavar=("MODEL", "PRECISION"), help=argparse.SUPPRESS)
    p.add_argument("--out", default=os.path.join(ROOT, "bench", "results", "train_speed.json"))
    args = p.parse_args()
    if args.child:   # one (model, precision) run, in its own process
        name, precision = args.child
        batch, seq = args.shape or SHAPES[name]
        print(json.dumps(one_config(name, precision, batch, seq, args.steps, args.threads, args.matmul_n)))
        return
    load_before = os.getloadavg()
    every = [f"{m}/{pr}" for m in args.models for pr in args.precisions]
    unknown = [x for x in args.skip if x not in every]
    if unknown:
        p.error(f"--skip {unknown}: not a configuration of this run; valid: {every}")
    configs = [(m, pr) for m in args.models for pr in args.precisions if f"{m}/{pr}" not in args.skip]
    for m in args.models:
        model_dir(m)   # build or unpack once, outside the timed processes
    runs = {f"{m}/{pr}": [] for m, pr in configs}
    for r in range(args.repeats):
        for m, pr in configs[r % len(configs):] + configs[:r % len(configs)]:
            cmd = [sys.executable, os.path.abspath(__file__), "--child", m, pr, "--steps", str(args.steps),
                   "--threads", str(args.threads), "--matmul-n", str(args.matmul_n)]
            if args.shape:
                cmd += ["--shape", *map(str, args.shape)]
            done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True,
                                  env={**os.environ, "OMP_NUM_THREADS": str(args.threads)})
            if done.returncode != 0:
                raise RuntimeError(f"{m} {pr} failed:\n{done.stderr[-3000:]}")
            result = json.loads(next(line for line in reversed(done.stdout.splitlines()) if line.startswith("{")))
            runs[f"{m}/{pr}"].append(result)
            print(f"  repeat {r} {m:13s} {pr}: {result['seconds_per_update']:.2f} s/update, "
                  f"{result['tokens_per_s']:.0f} tok/s, {100 * result['share_of_peak']:.0f}% of "
                  f"{result['peak_matmul_gflops']:.0f} GFLOP/s, peak RSS {result['peak_rss_mib']:.0f} MiB", flush=True)
    keys = ("seconds_per_update", "tokens_per_s", "train_gflops", "peak_matmul_gflops", "share_of_peak",
            "rss_loaded_mib", "peak_rss_mib")
    medians = {k: {f"median_{key}": statistics.median(x[key] for x in rs) for key in keys} for k, rs in runs.items()}
    speedups = {m: medians[f"{m}/fp32"]["median_seconds_per_update"] / medians[f"{m}/bf16"]["median_seconds_per_update"]
                for m in args.models if f"{m}/fp32" in medians and f"{m}/bf16" in medians}
    out = {"benchmark": "train_speed", "machine": machine(), "versions": versions("torch", "transformers"),
           "loadavg_before": load_before, "loadavg_after": os.getloadavg(),
           "params": {"shapes": {m: args.shape or SHAPES[m] for m in args.models}, "steps": args.steps,
                      "repeats": args.repeats, "threads": args.threads, "matmul_n": args.matmul_n,
                      "skipped": args.skip,
                      "update": "full fine-tuning, token_logprobs with entropy, PG loss, clip 1.0, AdamW"},
           "results": medians, "bf16_speedup": speedups, "runs": runs}
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(out, f, indent=2)
    print("train_speed: " + "; ".join(
        f"{k}: {v['median_tokens_per_s']:.0f} tok/s, {v['median_seconds_per_update']:.2f} s/update, "
        f"{100 * v['median_share_of_peak']:.0f}% of peak, {v['median_peak_rss_mib']:.0f} MiB"
        for k, v in medians.items()) + f" (load {load_before[0]:.1f}) -> {args.out}")










if __name__ == "__main__":
    main()
