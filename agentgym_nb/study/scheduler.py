"""The scheduler: every (arm, seed) of a study as processes of the study's command line (`COMMAND --one ARM SEED
JOB`), `jobs` at a time, on CPU cores or sharing one GPU."""
from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import time

from ..host import start_job
from .report import recorded_block, recorded_runs, refuse_other_start, write_report
from .runs import run_state
from .settings import ARMS, COMMAND, CUT_ARMS, LONG, Study, resolve_start


def run_study(study: Study, out: str, arms: list[str], seeds: list[int], jobs: int, tokens_arms: list[str],
              report_only: bool = False, start_dir: str | None = None, rebuild_start: bool = False) -> dict:
    """One call of the study: run every (arm, seed) job that `out` (the report) does not hold yet, rewriting the report
    after each, and return the study's block of it. `report_only`: run nothing, only read the runs and write the
    report; a record's own start digest is enough then (no weights needed). The start is the preset's committed
    model, `start_dir`, or with `rebuild_start` the track's nano built here; a record made from other weights stops
    the call."""
    if study.device == "cpu":
        os.environ["CUDA_VISIBLE_DEVICES"] = ""   # the runs this starts train on the CPU whatever the machine has
    t0, load_before = time.time(), os.getloadavg()
    block = recorded_block(study, out)
    if report_only and block and block.get("start_model"):   # reading a record needs no weights, only its digest
        start = {**block["start_model"], "dir": None}
    else:
        start = resolve_start(study.preset, start_dir, rebuild_start)
        refuse_other_start(study, out, block, start)
    study = dataclasses.replace(study, start_dir=start["dir"], start_sha256=start["sha256"])
    print(f"start model: {start['name']}, weights sha256 {start['sha256'][:16]}..."
          + (f" ({start['dir']})" if start["dir"] else " (from the record)"), flush=True)
    recorded = recorded_runs(study, out)
    reported = sorted(set(seeds) | set(range(8)))   # the GPU target's 8 seeds stay reported whichever a call runs

    def write() -> dict:
        return write_report(study, out, reported, recorded, start, None if report_only else (t0, load_before))

    if not report_only:   # the report is rewritten after every finished job: it is what survives the machine
        schedule(study, arms, seeds, jobs, tokens_arms, recorded, surfaces=study.surface_items > 0, finished=write)
    return write()


def equal_tokens_arms(arms: list[str], requested: list[str] | None = None, no_tokens: bool = False) -> list[str]:
    """The arms trained on to fixed long's policy tokens: `requested` (--tokens-arms), none with `no_tokens`, or by
    default every arm of `arms` but fixed long and its cut-episode variants."""
    tokens_arms = [] if no_tokens else [a for a in arms if a not in LONG.values() and a not in CUT_ARMS] \
        if requested is None else requested
    no_phase = [a for a in tokens_arms if a in LONG.values() or a in CUT_ARMS or a not in arms]
    if no_phase:
        raise SystemExit(f"--tokens-arms {' '.join(no_phase)}: the equal-tokens phase is for arms of --arms other than "
                         f"fixed long ({', '.join(LONG.values())}, whose tokens are the budget) and its cut variants")
    return tokens_arms


def threads_per_run(device: str, jobs: int) -> int:
    """cpu: one (each run on a core of its own); cuda: the cores shared out among the `jobs` runs on the card."""
    if device != "cuda":
        return 1
    import torch
    if not torch.cuda.is_available():
        raise SystemExit("--device cuda: torch sees no CUDA device (torch.cuda.is_available() is False); "
                         "use --device cpu")
    return max(1, len(os.sched_getaffinity(0)) // jobs)


def last_point(arm: str, tokens_arms: list[str]) -> str:
    return "tokens" if arm in tokens_arms else "steps"


def schedule(study: Study, arms: list[str], seeds: list[int], jobs: int, tokens_arms: list[str], recorded: dict,
             surfaces: bool = False, finished=lambda: None) -> None:
    """Run every (arm, seed) to its equal-steps point, then (the `tokens_arms`) to its equal-tokens point, then
    (with `surfaces`) its pass@(k, T) surface, `jobs` at a time: seed-major (an interrupted study leaves whole
    seeds), fixed long first (its tokens are the others' budget). What `recorded` (the committed report) already
    holds is not run again; a surface needs the run's last checkpoint, so it is measured only for runs whose last
    point is or will be trained here. `finished()` is called after each job."""
    from .. import envs
    from ..config import item_pool
    if study.preset != "smoke" and any(ARMS[a]["schedule"] == "adaptive" for a in arms):
        envs.expert_turns("babyai", item_pool(study.config(arms[0], seeds[0]), "train"))   # cached for every run

    def measured(job) -> bool:
        arm, seed, point = job
        state = run_state(study, arm, seed, recorded)
        if point == "surface":
            return (state.get("surface") or {}).get("point") == last_point(arm, tokens_arms)
        return point in state["points"]

    def here(arm, seed) -> dict:
        return run_state(study, arm, seed)["points"]

    pending = [job for job in planned(arms, seeds, tokens_arms, surfaces) if not measured(job)]
    # a surface of a run whose last point was trained elsewhere cannot be measured: its weights are not here
    pending = [j for j in pending if j[2] != "surface"
               or last_point(j[0], tokens_arms) in here(j[0], j[1])
               or last_point(j[0], tokens_arms) not in run_state(study, j[0], j[1], recorded)["points"]]
    running: dict[int, tuple[tuple, subprocess.Popen]] = {}   # slot -> (job, process)
    busy = lambda: {job[:2] for job, _ in running.values()}   # noqa: E731  (a run is one process at a time)

    def ready(job) -> bool:
        arm, seed, point = job
        if point == "steps":
            return True
        if point == "surface":
            return last_point(arm, tokens_arms) in here(arm, seed)
        reference = LONG[ARMS[arm].get("algorithm", "grpo")]
        return all("steps" in run_state(study, a, seed, recorded)["points"] for a in (arm, reference))

    try:
        while pending or running:
            for slot in [s for s in range(jobs) if s not in running]:
                job = next((j for j in pending if j[:2] not in busy() and ready(j)), None)
                if job is None:
                    break
                pending.remove(job)
                arm, seed, point = job
                budget = _budget(study, arm, seed, recorded) if point == "tokens" else None
                what = f"to {budget:,} tokens" if budget else f"to step {study.steps}" if point == "steps" else point
                print(f"[{time.strftime('%H:%M:%S')}] slot {slot}: {arm} seed {seed} {what}", flush=True)
                log = open(os.path.join(_log_dir(study), f"{arm}-s{seed}.log"), "a")
                cmd = [sys.executable, COMMAND, "--one", arm, str(seed), point, "--lr", str(study.lr),
                       "--steps", str(study.steps), "--eval-every", str(study.eval_every), "--eval-items",
                       str(study.eval_items), "--max-steps", str(study.max_steps), "--samples",
                       str(study.samples_per_prompt), "--preset", study.preset, "--start", study.start_dir,
                       "--start-sha256", study.start_sha256, "--device", study.device, "--jobs", str(jobs),
                       "--threads", str(study.threads),
                       "--surface-items", str(study.surface_items)]
                cmd += ["--budget", str(budget)] if budget else []
                # a session of its own, so that it can lower its autogroup's priority without lowering this shell's
                running[slot] = (job, start_run(cmd, slot, study, jobs, stdout=log, stderr=subprocess.STDOUT,
                                                start_new_session=True))
            time.sleep(5 if study.preset != "smoke" else 1)
            for slot, (job, proc) in list(running.items()):
                if proc.poll() is not None:
                    del running[slot]
                    if proc.returncode:
                        raise SystemExit(f"{job} failed (exit {proc.returncode}): see "
                                         f"{os.path.join(_log_dir(study), f'{job[0]}-s{job[1]}.log')}")
                    finished()
            if not running and pending and not any(ready(j) for j in pending):
                raise SystemExit(f"nothing can run: {pending} wait for runs that are not scheduled")
    finally:   # the runs have sessions of their own, so a Ctrl-C here does not reach them: stop them (they resume)
        for _, proc in running.values():
            proc.terminate()


def start_run(cmd: list[str], slot: int, study: Study, jobs: int, **kw) -> subprocess.Popen:
    """Start one run's process. cpu: pinned to one core with one thread (`start_job`). cuda: the runs share the GPU
    and each has `study.threads` cores of its own (slot s gets cores s * threads ... (s + 1) * threads - 1)."""
    if study.device == "cpu":
        return start_job(cmd, slot, jobs, **kw)
    cores = sorted(os.sched_getaffinity(0))
    mine = set(cores[slot * study.threads:(slot + 1) * study.threads]) or set(cores)
    env = dict(os.environ, OMP_NUM_THREADS=str(study.threads))
    return subprocess.Popen(cmd, env=env, preexec_fn=lambda: os.sched_setaffinity(0, mine), **kw)


def planned(arms: list[str], seeds: list[int], tokens_arms: list[str],
            surfaces: bool = False) -> list[tuple[str, int, str]]:
    """Every (arm, seed, job) to run, in order: seed-major, so that an interrupted study leaves whole seeds (a seed's
    equal-steps runs, fixed long first, then its equal-tokens runs for the `tokens_arms`), then the surfaces."""
    order = sorted(arms, key=lambda a: (a not in LONG.values(), list(ARMS).index(a)))
    jobs = [(arm, seed, point) for seed in seeds
            for point, point_arms in (("steps", order), ("tokens", [a for a in order if a in tokens_arms]))
            for arm in point_arms]
    if surfaces:
        jobs += [(arm, seed, "surface") for seed in seeds for arm in order]
    return jobs


def _budget(study: Study, arm: str, seed: int, recorded: dict) -> int:
    reference = LONG[ARMS[arm].get("algorithm", "grpo")]
    return run_state(study, reference, seed, recorded)["points"]["steps"]["sampled_tokens"]


def _log_dir(study: Study) -> str:
    path = os.path.join(study.config("fixed20", 0).out_dir, "runs", f"horizon-logs-lr{study.lr:g}")
    os.makedirs(path, exist_ok=True)
    return path
