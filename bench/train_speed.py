"""Training throughput: tokens/s, seconds per update and peak memory for nano and smollm2-135m, fp32 vs bf16 autocast,
and the share of the CPU's peak matmul rate that training reaches; on a GPU, a Qwen2.5-0.5B-shape model's update in
full fine-tuning and under LoRA, and its MFU against the card's bf16 peak.

    .venv/bin/python bench/train_speed.py [--models nano smollm2-135m] [--repeats 3] [--steps 3] [--skip smollm2-135m/bf16]
    .venv/bin/python bench/train_speed.py --device cuda --models qwen2.5-0.5b --precisions bf16 --modes full lora

One update = the trainer's work on one micro-batch of B x T tokens (full fine-tuning): forward under autocast (or
not), per-token log-probs and entropies (`algos.losses.token_logprobs`), a policy-gradient loss, backward, gradient
clipping, an AdamW step. Each (model, precision) runs in a fresh process (so its peak RSS is its own): one warm-up
update, then --steps timed updates; then, in the same process, the peak matmul rate of that precision (the best of
three timings of a large square matmul, --matmul-n, with the same threads).

    training FLOPs per token = 6 * P_matmul + 12 * L * T * d   (PaLM's convention, appendix B)
where P_matmul = weights of every linear layer (the output head included), L layers, T the sequence length, d the
attention width. share of peak = tokens/s * FLOPs per token / peak matmul FLOP/s of the same precision.
On a GPU (--device cuda) the model is a Qwen2.5-0.5B shape with random weights (no checkpoint travels there) and each
update is 4 x 2048 tokens; mfu = model FLOPs per second (train.launch.train_flops_per_token: 6 (N + 2 L h T), 4 (...)
under LoRA, whose frozen base needs no weight gradients) over the card's dense bf16 peak from its name
(train.launch.peak_flops). Full fine-tuning keeps fp32 master weights under bf16 autocast, as the trainer does; LoRA
(r = 32, every linear layer) holds the frozen base in bf16.
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
from _common import commit, machine, versions  # bench/_common.py

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

SHAPES = {"nano": (16, 512), "smollm2-135m": (4, 512), "qwen2.5-0.5b": (4, 2048)}   # (sequences, tokens) an update
PRECISIONS = ("fp32", "bf16")
MODES = ("full", "lora")


def model_dir(name: str) -> str | None:
    """The model folder of `name` (None for a shape built with random weights in the run's own process)."""
    from agentgym_nb import models
    from agentgym_nb.config import make_config
    if name == "nano":
        return models.resolve_config(make_config(env="babyai"))   # $AGENTGYM_NB_PRESET's (main sets it)
    if name == "qwen2.5-0.5b":
        return None
    return models.resolve(name)


def load_model(name: str, dtype):
    import torch
    from transformers import AutoModelForCausalLM, Qwen2Config
    torch.manual_seed(0)
    if name == "qwen2.5-0.5b":
        from engine_speed import QWEN_05B   # bench/engine_speed.py: the shape's numbers in one place
        return AutoModelForCausalLM.from_config(Qwen2Config(**QWEN_05B), dtype=dtype)
    return AutoModelForCausalLM.from_pretrained(model_dir(name), dtype=dtype)


def flops_per_token(model, seq: int) -> float:
    import torch
    cfg = model.config
    p_matmul = sum(m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Linear))
    width = cfg.num_attention_heads * getattr(cfg, "head_dim", None) if getattr(cfg, "head_dim", None) \
        else cfg.hidden_size
    return 6 * p_matmul + 12 * cfg.num_hidden_layers * seq * width


def peak_matmul(dtype, n: int, device: str = "cpu") -> float:
    """FLOP/s of an n x n x n matmul in `dtype` on `device` (best of three timings of 5 products)."""
    import torch
    a, b = torch.randn(n, n, device=device).to(dtype), torch.randn(n, n, device=device).to(dtype)
    a @ b
    best = float("inf")
    for _ in range(3):
        if device == "cuda":
            torch.cuda.synchronize()
        t = time.perf_counter()
        for _ in range(5):
            a @ b
        if device == "cuda":
            torch.cuda.synchronize()
        best = min(best, time.perf_counter() - t)
    return 5 * 2 * n**3 / best


def one_config(name: str, precision: str, batch: int, seq: int, steps: int, threads: int, matmul_n: int,
               device: str = "cpu", mode: str = "full") -> dict:
    """Runs in its own process: warm-up + `steps` timed updates, then the peak matmul rate; returns the figures."""
    import torch

    from agentgym_nb.algos.losses import token_logprobs
    from agentgym_nb.train.common import add_lora
    from agentgym_nb.train.launch import matmul_params, peak_flops, train_flops_per_token
    torch.set_num_threads(threads)
    lora = mode == "lora"
    bf16 = precision == "bf16"
    model = load_model(name, torch.bfloat16 if lora and bf16 else torch.float32)
    if lora:
        torch.manual_seed(0)
        model = add_lora(model, r=32)
    model = model.to(device).train()
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-6,
                                  fused=device == "cuda" or None)   # as the trainer's (train.parallel)
    vocab = model.config.vocab_size
    ids = torch.randint(3, vocab, (batch, seq), device=device)
    mask = torch.ones_like(ids)
    adv = torch.randn(batch, seq, device=device)
    rss_loaded = _rss_mib()
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()

    def update() -> float:
        t = time.perf_counter()
        with torch.autocast(device, dtype=torch.bfloat16, enabled=bf16):
            logp, entropy = token_logprobs(model, ids, mask, with_entropy=True)
        loss = -(logp * adv).mean() - 0.001 * entropy.mean()
        loss.backward()
        torch.nn.utils.clip_grad_norm_([p for p in model.parameters() if p.requires_grad], 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if device == "cuda":
            torch.cuda.synchronize()
        return time.perf_counter() - t

    warmup = update()
    seconds = [update() for _ in range(steps)]
    per_update = statistics.median(seconds)
    tokens_per_s = batch * seq / per_update
    fpt = flops_per_token(model, seq) * (4 / 6 if lora else 1)   # LoRA: no weight gradients for the frozen base
    peak = peak_matmul(torch.bfloat16 if bf16 else torch.float32, matmul_n, device)
    out = {"seconds_per_update": per_update, "update_seconds": seconds, "warmup_seconds": warmup,
           "tokens_per_s": tokens_per_s, "train_gflops": tokens_per_s * fpt / 1e9, "peak_matmul_gflops": peak / 1e9,
           "share_of_peak": tokens_per_s * fpt / peak, "flops_per_token": fpt,
           "params": sum(p.numel() for p in model.parameters()), "rss_loaded_mib": rss_loaded,
           "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}
    if device == "cuda":
        card = peak_flops(torch.cuda.get_device_name())
        model_flops = tokens_per_s * train_flops_per_token(matmul_params(model), model.config.num_hidden_layers,
                                                           model.config.hidden_size, seq, lora=lora)
        out.update(gpu=torch.cuda.get_device_name(), card_peak_tflops=card / 1e12 if card else None,
                   mfu=model_flops / card if card else None, model_tflops=model_flops / 1e12,
                   peak_memory_gb=torch.cuda.max_memory_allocated() / 1e9)
    return out


def _rss_mib() -> float:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:")) / 1024


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    p.add_argument("--models", nargs="+", default=None, choices=list(SHAPES),
                   help="default: nano and smollm2-135m on a CPU, qwen2.5-0.5b on a GPU")
    p.add_argument("--precisions", nargs="+", default=None, choices=PRECISIONS, help="default: both on a CPU, bf16 on "
                                                                                      "a GPU")
    p.add_argument("--modes", nargs="+", default=["full"], choices=MODES, help="full fine-tuning and/or LoRA r=32")
    p.add_argument("--preset", default="cpu", help="the nano of this preset (smoke: a test of the script)")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--steps", type=int, default=3, help="timed updates per run (after one warm-up update)")
    p.add_argument("--skip", nargs="*", default=[], metavar="MODEL/PRECISION",
                   help="leave these configurations out (e.g. smollm2-135m/bf16 where the CPU has no bf16 kernels and "
                        "PyTorch emulates it: tens of times slower)")
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--matmul-n", type=int, default=None, help="default: 2048 on a CPU, 8192 on a GPU")
    p.add_argument("--shape", nargs=2, type=int, default=None, metavar=("B", "T"),
                   help="sequences and tokens per update for every model (default: per model, see SHAPES)")
    p.add_argument("--child", nargs=3, default=None, metavar=("MODEL", "PRECISION", "MODE"), help=argparse.SUPPRESS)
    p.add_argument("--out", default=os.path.join(ROOT, "bench", "results", "train_speed.json"))
    args = p.parse_args(argv)
    gpu = args.device == "cuda"
    models = args.models or (["qwen2.5-0.5b"] if gpu else ["nano", "smollm2-135m"])
    precisions = args.precisions or (["bf16"] if gpu else list(PRECISIONS))
    matmul_n = args.matmul_n or (8192 if gpu else 2048)
    os.environ["AGENTGYM_NB_PRESET"] = args.preset   # model_dir's nano, also in the child processes
    if args.child:   # one (model, precision, mode) run, in its own process
        name, precision, mode = args.child
        batch, seq = args.shape or SHAPES[name]
        print(json.dumps(one_config(name, precision, batch, seq, args.steps, args.threads, matmul_n, args.device,
                                    mode)))
        return {}
    load_before = os.getloadavg()
    configs = [(m, pr, mode) for m in models for pr in precisions for mode in args.modes]
    key = {c: f"{c[0]}/{c[1]}" + ("/lora" if c[2] == "lora" else "") for c in configs}
    unknown = [x for x in args.skip if x not in key.values()]
    if unknown:
        p.error(f"--skip {unknown}: not a configuration of this run; valid: {sorted(key.values())}")
    configs = [c for c in configs if key[c] not in args.skip]
    for m in models:
        model_dir(m)   # build or unpack once, outside the timed processes
    runs = {key[c]: [] for c in configs}
    for r in range(args.repeats):
        for c in configs[r % len(configs):] + configs[:r % len(configs)]:
            cmd = [sys.executable, os.path.abspath(__file__), "--child", *c, "--steps", str(args.steps),
                   "--threads", str(args.threads), "--matmul-n", str(matmul_n), "--device", args.device,
                   "--preset", args.preset]
            if args.shape:
                cmd += ["--shape", *map(str, args.shape)]
            done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True,
                                  env={**os.environ, "OMP_NUM_THREADS": str(args.threads)})
            if done.returncode != 0:
                raise RuntimeError(f"{key[c]} failed:\n{done.stderr[-3000:]}")
            result = json.loads(next(line for line in reversed(done.stdout.splitlines()) if line.startswith("{")))
            runs[key[c]].append(result)
            print(f"  repeat {r} {key[c]:18s}: {result['seconds_per_update']:.2f} s/update, "
                  f"{result['tokens_per_s']:.0f} tok/s, {100 * result['share_of_peak']:.0f}% of "
                  f"{result['peak_matmul_gflops']:.0f} GFLOP/s"
                  + (f", MFU {100 * result['mfu']:.1f}%" if result.get("mfu") is not None else "")
                  + f", peak RSS {result['peak_rss_mib']:.0f} MiB", flush=True)
    keys = ("seconds_per_update", "tokens_per_s", "train_gflops", "peak_matmul_gflops", "share_of_peak",
            "rss_loaded_mib", "peak_rss_mib") + (("mfu", "model_tflops", "peak_memory_gb") if gpu else ())
    medians = {k: {f"median_{key_}": statistics.median(x[key_] for x in rs if x.get(key_) is not None)
                   for key_ in keys if any(x.get(key_) is not None for x in rs)} for k, rs in runs.items()}
    speedups = {m: medians[f"{m}/fp32"]["median_seconds_per_update"] / medians[f"{m}/bf16"]["median_seconds_per_update"]
                for m in models if f"{m}/fp32" in medians and f"{m}/bf16" in medians}
    out = {"benchmark": "train_speed", "date": time.strftime("%Y-%m-%d"), "commit": commit(), "machine": machine(),
           "versions": versions("torch", "transformers", "peft"), "device": args.device,
           "gpu": runs[key[configs[0]]][0].get("gpu") if configs and runs[key[configs[0]]] else None,
           "loadavg_before": load_before, "loadavg_after": os.getloadavg(),
           "params": {"shapes": {m: args.shape or SHAPES[m] for m in models}, "steps": args.steps,
                      "repeats": args.repeats, "threads": args.threads, "matmul_n": matmul_n, "modes": args.modes,
                      "skipped": args.skip, "preset": args.preset,
                      "update": "token_logprobs with entropy, PG loss, clip 1.0, AdamW; full: fp32 master weights "
                                "(bf16 autocast with bf16), LoRA r=32 all-linear on a bf16 base"},
           "results": medians, "bf16_speedup": speedups, "runs": runs}
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(out, f, indent=2)
    print("train_speed: " + "; ".join(
        f"{k}: {v['median_tokens_per_s']:.0f} tok/s, {v['median_seconds_per_update']:.2f} s/update, "
        f"{100 * v['median_share_of_peak']:.0f}% of peak"
        + (f", MFU {100 * v['median_mfu']:.1f}%" if "median_mfu" in v else "")
        for k, v in medians.items()) + f" (load {load_before[0]:.1f}) -> {args.out}")
    return out


if __name__ == "__main__":
    main()
