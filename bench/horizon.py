"""The paper's horizon question on BabyAI's long track: fixed short (H = 6), fixed long (H = 20), stepwise
6 -> 13 -> 20 (ScalingInter-RL) and adaptive horizons, several seeds, at equal training steps and at equal policy
tokens sampled.

    .venv/bin/python bench/horizon.py --jobs 2                          # the main study (lr 3e-4), then the report
    .venv/bin/python bench/horizon.py --device cuda --jobs 16 --seeds 0 1 2 3 --arms fixed6 fixed20 stepwise \
        adaptive --tokens-arms stepwise                                  # on one GPU: runs share the card
    .venv/bin/python bench/horizon.py --jobs 2 --lr 1e-3 --arms fixed20 --seeds 0 --no-tokens   # one sweep point
    .venv/bin/python bench/horizon.py --report                          # read finished runs, write the JSON only
    .venv/bin/python bench/horizon.py --report --out bench/results/horizon.json   # the 2026-11-26 study, re-judged
    .venv/bin/python bench/horizon.py --commit-start outputs/models/nano-babyai-cpu-<hash>   # commit a start model
    python3 bench/horizon.py --pilot --device cuda                       # how many runs share one GPU well (4 and 16 runs)
    .venv/bin/python bench/horizon.py --table [--write README.md]       # the README's table of the report, markdown

Every run starts from one model, the study's start: by default the long track's cpu nano committed at
models/nano-babyai-long/ (weights, tokenizer, build record and start.json with the weights' sha256), so any machine
starts from the same weights without building them; `--start DIR` names another folder, `--rebuild-start` builds the
track's nano from its recipe under outputs/models (hours on one core; a rebuild on another machine or thread count
has other weights). The weights' sha256 is part of every run's name and is recorded with the study.

Every run is the cpu preset on the long track (`track="long"`: BabyAI's multi-room, door, key and maze levels) with
one horizon arm, one estimator, one seed and one learning rate; GRPO throughout, and REINFORCE++ for the stepwise and
fixed-long arms. A run:
  1. trains `--steps` steps (the equal-steps budget), evaluating the policy every `--eval-every` steps at H = 20 on
     the held-out items (the first `--eval-items` of the track's test list; T = 1, the same sampling seed for every
     arm of a seed, so the start is shared), and at step `--steps` also at 0.5x, 1x and 2x its current horizon;
  2. then (the `--tokens-arms`: by default every arm but fixed long) keeps training until it has sampled as many
     policy tokens as the fixed-long run of its seed and estimator did in `--steps` steps (compute-matched: cheaper
     short-horizon steps buy more steps; a schedule past its last stage stays there), with the same evaluations, and
     at the step where the budget is reached the 0.5x / 1x / 2x evaluations again;
  3. with `--surface-items N`, at its last budget point: pass@(k, T) on the first N held-out items, k = 1..16
     samples, T = 0.5x, 1x and 2x the horizon it trained at, and H = 20 (`agentgym_nb.evaluate.horizon_surface`).
Each run trains in its own process: `--device cpu` (default) pins each to one core with one thread and hides any GPU;
`--device cuda` lets `--jobs` runs share one GPU, each with cores // jobs threads on cores of its own (the HF engine,
evaluations batched up to 256 episodes). Runs resume from their last checkpoint and evaluations from their last
finished chunk, so the command can be killed and run again; a run whose folder is gone (another machine) starts again
from its beginning.

The report (`--out`, default bench/results/horizon_study.json; bench/results/horizon.json is the study of
2026-11-25/26, whose start weights are not in the repository) is rewritten as soon as each run finishes a budget
point, and it keeps every finished run whole, so a study is carried forward by committing it and continued from it
on any machine with the same start weights; a record made from other weights is neither continued nor replaced. Per
learning rate it has: the start model's sha256; every run's per-step metrics (KL, entropy, grad norm, clip fraction,
zero-advantage share, cut-by-horizon share, seconds, tokens), evaluations with per-item outcomes, pass@(k, T) surface
and where it ran (device, threads, wall seconds); per arm and budget the mean held-out success over seeds with a 95%
t-interval, tokens and seconds; every pairwise difference paired by seed (t-interval over seeds) and by (seed, item)
(bootstrap over items within seeds); and each of the paper's claims judged on its own by the rules in RULES, which
the report prints.

The study is package code, `agentgym_nb/study/` (settings and rules, one run, the scheduler, the report and its table,
the verdicts, the pilot); this is its command line. The scheduler starts each run's process as `horizon.py --one ARM
SEED JOB`.
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)   # this checkout's package, not an installed one
from agentgym_nb.host import yield_cpu  # noqa: E402
from agentgym_nb.study import pilot, report, runs, scheduler  # noqa: E402
from agentgym_nb.study.settings import (  # noqa: E402
    ARMS, CUT_ARMS, MAIN_ARMS, RESULT, START_DIRS, SURFACE_SAMPLES, Study, commit_start, resolve_start, study_key)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--lr", type=float, default=Study.lr)
    ap.add_argument("--steps", type=int, default=Study.steps)
    ap.add_argument("--eval-every", type=int, default=Study.eval_every)
    ap.add_argument("--eval-items", type=int, default=Study.eval_items)
    ap.add_argument("--max-steps", type=int, default=Study.max_steps)
    ap.add_argument("--samples", type=int, default=Study.samples_per_prompt, help="episodes per task")
    ap.add_argument("--arms", nargs="+", default=MAIN_ARMS, choices=list(ARMS),
                    help=f"default: the horizon arms; the cut-episode arms ({', '.join(CUT_ARMS)}) on request")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3])
    ap.add_argument("--jobs", type=int, default=1, help="runs at once (cpu: one core each)")
    ap.add_argument("--device", default="cpu", choices=("cpu", "cuda"),
                    help="cpu: each run on one core, any GPU hidden; cuda: the runs share the GPU")
    ap.add_argument("--tokens-arms", nargs="*", choices=list(ARMS),
                    help="the arms trained on to fixed long's policy tokens (default: every arm of --arms but fixed "
                         "long and its cut-episode variants)")
    ap.add_argument("--no-tokens", action="store_true", help="only the equal-steps phase (--tokens-arms with none)")
    ap.add_argument("--surface-items", type=int, default=0,
                    help=f"pass@(k, T) surfaces (k = 1..{SURFACE_SAMPLES}) of each run's last policy on this many "
                         "held-out items (0: none)")
    ap.add_argument("--start", help="the start model folder (default: the preset's committed one, "
                                    f"{os.path.relpath(START_DIRS['cpu'], ROOT)} for cpu)")
    ap.add_argument("--rebuild-start", action="store_true",
                    help="start from the long track's nano built here from its recipe (under outputs/models)")
    ap.add_argument("--commit-start", metavar="MODEL_DIR",
                    help="copy this built model into the start folder (--start, or the preset's) with its sha256")
    ap.add_argument("--report", action="store_true", help="only read finished runs and write the JSON")
    ap.add_argument("--table", action="store_true",
                    help="print the README's table of the study in --out (markdown between its markers); runs nothing")
    ap.add_argument("--write", metavar="FILE", help="with --table: put the table between the markers in FILE (the "
                                                    "README), which must hold them")
    ap.add_argument("--pilot", action="store_true",
                    help="on a GPU (--device cuda; on the CPU a test of it): the step time of fixed-20 runs sharing "
                         "the card for each of --pilot-runs, with and without CUDA MPS, and how many fit a 9-minute "
                         "call (-> bench/results/horizon_pilot.json, or --out)")
    ap.add_argument("--pilot-runs", type=int, nargs="+", default=list(pilot.LADDER), help="runs on the card, per rung")
    ap.add_argument("--pilot-seconds", type=float, default=10.0,
                    help="a rung's runs start no training step after this many seconds (each trains 2 to "
                         f"{pilot.MAX_STEPS})")
    ap.add_argument("--preset", default="cpu", choices=("cpu", "smoke"), help="smoke: a test of this script")
    ap.add_argument("--out", help=f"the JSON report (default {os.path.relpath(RESULT, ROOT)}; with --pilot "
                                  f"{os.path.relpath(pilot.PILOT_RESULT, ROOT)})")
    ap.add_argument("--one", nargs=3, metavar=("ARM", "SEED", "JOB"), help=argparse.SUPPRESS)   # a child process
    ap.add_argument("--budget", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--start-sha256", help=argparse.SUPPRESS)
    ap.add_argument("--threads", type=int, default=1, help=argparse.SUPPRESS)
    args = ap.parse_args()
    out = args.out or (pilot.PILOT_RESULT if args.pilot else RESULT)
    tokens_arms = scheduler.equal_tokens_arms(args.arms, args.tokens_arms, args.no_tokens)
    threads = args.threads if args.one or args.pilot else scheduler.threads_per_run(args.device, args.jobs)
    study = Study(lr=args.lr, steps=args.steps, eval_every=args.eval_every, eval_items=args.eval_items,
                  max_steps=args.max_steps, samples_per_prompt=args.samples, preset=args.preset, device=args.device,
                  threads=threads, surface_items=args.surface_items)
    if args.one:
        print(f"CPU priority: {yield_cpu()} (a study run takes the cores nothing else wants)", flush=True)
        study = dataclasses.replace(study, start_dir=args.start, start_sha256=args.start_sha256)
        runs.train_one(study, args.one[0], int(args.one[1]), args.one[2], args.budget, args.jobs)
        return
    if args.commit_start:
        dest = args.start or START_DIRS.get(args.preset)
        if dest is None:
            raise SystemExit(f"--commit-start: the {args.preset} preset has no committed start folder: name one with "
                             "--start DIR")
        record = commit_start(args.commit_start, dest)
        print(f"{dest}: {record['recipe']}, weights sha256 {record['sha256']}, {record['bytes']:,} bytes")
        return
    if args.table:
        block = report.recorded_block(study, out)
        if block is None:
            raise SystemExit(f"{out} records no {study_key(study)} study")
        table = report.readme_table(block)
        if args.write:
            with open(args.write) as f:
                text = report.quote_table(f.read(), table)
            with open(args.write, "w") as f:
                f.write(text)
        print("\n".join([report.TABLE_MARKERS[0], table, report.TABLE_MARKERS[1]]))
        return
    if args.pilot:
        start = resolve_start(args.preset, args.start, args.rebuild_start)
        study = dataclasses.replace(study, start_dir=start["dir"], start_sha256=start["sha256"])
        pilot.pilot(study, args.pilot_runs, args.pilot_seconds, out)
        print(f"-> {out}")
        return
    block = scheduler.run_study(study, out, args.arms, args.seeds, args.jobs, tokens_arms, report_only=args.report,
                                start_dir=args.start, rebuild_start=args.rebuild_start)
    print(report.summary(block))
    print(f"-> {out}")


if __name__ == "__main__":
    main()
