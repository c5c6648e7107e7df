"""How many of the study's runs share one GPU well, measured before a study is sized to a call: for N runs on the card
(a ladder, 4 and 16 by default) it starts N fixed-20 trainers as the scheduler starts runs (processes, each with
cores // N threads on cores of its own), lets them load, then trains them side by side for a few steps in a time box
and evaluates each once; and it does it again under CUDA MPS where the machine lets it start the MPS daemon. Per N: the
median seconds of a training step (each run's first step left out: it warms the card up), the steps per second of all
runs together, and whether fixed 20's whole chain of jobs fits one call, by the arithmetic `chain_seconds` states.

A worker is `python -m agentgym_nb.study.pilot SPEC` (SPEC: JSON) in the repository; its run folder is a temporary
one, so a pilot never touches a study's runs. On the CPU (`--device cpu`, smoke preset) it is a test of this code.
"""
from __future__ import annotations

import dataclasses
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from ..host import commit, machine, versions
from .report import recorded_block
from .runs import evaluation
from .scheduler import start_run, threads_per_run
from .settings import RESULT, ROOT, Study, write_json

PILOT_RESULT = os.path.join(ROOT, "bench", "results", "horizon_pilot.json")
LADDER = (4, 16)            # two rungs keep a pilot near a minute a mode; --pilot-runs gives others
MAX_STEPS = 3                # each run's training steps: the first warms up, the others are measured
EVAL_ITEMS = 32              # held-out items each run evaluates once (scaled to the study's by item count)
CALL_SECONDS = 530           # bench/horizon_gpu.sh's timeout: a 9-minute call less the machine's start and installs
BARRIER_SECONDS = 240        # how long a loaded run waits for the others to load before it gives up


def worker(spec: dict) -> None:
    """One run of a rung: load, wait until all `runs` of the rung have loaded, train up to MAX_STEPS steps (no new
    one after `seconds`), evaluate once at the study's horizon, write what it measured to <dir>/run<slot>.json."""
    import torch

    from ..train.rl import Trainer
    study, slot, folder = Study(**spec["study"]), spec["slot"], spec["dir"]
    t0 = time.time()
    cfg = dataclasses.replace(study.config("fixed20", slot), out_dir=os.path.join(folder, f"out{slot}"),
                              save_every=10**6)
    trainer = Trainer(cfg, log=lambda *a: None)
    load_seconds = time.time() - t0
    open(os.path.join(folder, f"ready-{slot}"), "w").close()
    while sum(name.startswith("ready-") for name in os.listdir(folder)) < spec["runs"]:
        if time.time() - t0 > BARRIER_SECONDS:
            raise SystemExit(f"the other runs of the rung did not load within {BARRIER_SECONDS} s")
        time.sleep(0.2)
    started, steps = time.time(), []
    while len(steps) < MAX_STEPS and (len(steps) < 2 or time.time() - started < spec["seconds"]):
        steps.append(trainer.train_step()["step_seconds"])
    t1 = time.time()
    evaluation(trainer, study, trainer.step, study.eval_horizon)
    eval_seconds = time.time() - t1
    trainer.close()
    gpu = torch.cuda.get_device_name() if study.device == "cuda" else None
    write_json(os.path.join(folder, f"run{slot}.json"),
               {"load_seconds": load_seconds, "step_seconds": steps, "eval_seconds": eval_seconds,
                "eval_items": study.eval_items, "gpu": gpu})


def rung(study: Study, runs: int, seconds: float, work: str) -> dict:
    """N = `runs` workers side by side: what each measured, and their medians."""
    path = os.path.join(work, f"runs{runs}-{time.time_ns()}")
    os.makedirs(path)
    threads = threads_per_run(study.device, runs)
    spec = {"study": dataclasses.asdict(dataclasses.replace(study, threads=threads)), "runs": runs,
            "seconds": seconds, "dir": path}
    t0, procs = time.time(), []
    for slot in range(runs):
        cmd = [sys.executable, "-m", "agentgym_nb.study.pilot", json.dumps({**spec, "slot": slot})]
        with open(os.path.join(path, f"run{slot}.log"), "w") as log:
            procs.append(start_run(cmd, slot, dataclasses.replace(study, threads=threads), runs, cwd=ROOT,
                                   stdout=log, stderr=subprocess.STDOUT))
    limit = BARRIER_SECONDS + 10 * seconds + 120   # a hang guard: loads, the barrier, the steps, one evaluation
    # one run that fails (out of memory, no MPS server) leaves the others waiting at the barrier: stop them at once
    while any(p.poll() is None for p in procs) and not any(p.returncode for p in procs) and time.time() - t0 < limit:
        time.sleep(0.5)
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    wall = time.time() - t0
    failed = [slot for slot, proc in enumerate(procs) if proc.returncode]
    if failed:
        first = next((slot for slot in failed if procs[slot].returncode > 0), failed[0])   # not one stopped here
        tail = open(os.path.join(path, f"run{first}.log")).read()[-1500:]
        return {"runs": runs, "threads": threads, "failed": failed, "wall_seconds": wall, "log_tail": tail}
    measured = [json.load(open(os.path.join(path, f"run{slot}.json"))) for slot in range(runs)]
    warm = [s for m in measured for s in m["step_seconds"][1:]]
    step = statistics.median(warm)
    return {"runs": runs, "threads": threads, "step_seconds": step, "steps_measured": len(warm),
            "steps_per_second": runs / step, "load_seconds": statistics.median(m["load_seconds"] for m in measured),
            "eval_seconds": statistics.median(m["eval_seconds"] for m in measured),
            "eval_items": measured[0]["eval_items"], "wall_seconds": wall,
            "per_run": measured}


def chain(study: Study, report_path: str = RESULT) -> dict:
    """What the longest chain of one call's jobs holds, in the study's own numbers: fixed 20 trains `steps` steps,
    evaluating at H = 20 every `eval_every` steps from step 0 and at its equal-steps point also at 0.5x and 2x its
    horizon (1x is H = 20); then its seed's stepwise trains on to fixed 20's policy tokens: the steps stepwise's
    equal-tokens point took in the report (else a third of the equal-steps phase, GPU_TARGET's estimate), evaluating
    every 2 x eval_every steps and at its point at H = 20, 0.5x and 2x. An evaluation at H is counted as H / 20 of
    one at 20 (a failing episode plays to the horizon); each job loads its model once."""
    block = recorded_block(study, report_path) or {}
    tokens = block.get("arms", {}).get("stepwise", {}).get("tokens")
    extra = round(tokens["steps"][0]) - study.steps if tokens else study.steps // 3
    return {"steps": study.steps + extra, "tokens_phase_steps": extra,
            "tokens_phase_from": (f"stepwise's mean equal-tokens point in {os.path.relpath(report_path, ROOT)}"
                                  if tokens else "a third of the equal-steps phase (no stepwise equal-tokens point "
                                                 "in the report yet)"),
            "evaluations": study.steps // study.eval_every + 1 + 2.5 + extra / (2 * study.eval_every) + 1 + 2.5,
            "loads": 2}


def chain_seconds(measured: dict, chain_of: dict, study: Study) -> float:
    """loads x load seconds + steps x step seconds + evaluations x the seconds of one evaluation of the study's
    items (the measured one scaled by item count: an upper bound, as a larger evaluation batches more episodes)."""
    evaluation_seconds = measured["eval_seconds"] * study.eval_items / measured["eval_items"]
    return (chain_of["loads"] * measured["load_seconds"] + chain_of["steps"] * measured["step_seconds"]
            + chain_of["evaluations"] * evaluation_seconds)


def ladder(small: Study, study: Study, runs: list[int], seconds: float, work: str, chain_of: dict,
           mode: str, save=lambda mode, partial: None) -> dict:
    """Every rung of the ladder, smallest first, its runs evaluating `small`'s items; a rung that fails (out of
    memory, say) ends the ladder. `save(mode, ladder so far)` after every rung: a pilot cut short keeps its rungs."""
    rungs = []
    for n in runs:
        r = rung(small, n, seconds, work)
        if "failed" not in r:
            r["chain_seconds"] = chain_seconds(r, chain_of, study)
            r["fits_a_call"] = r["chain_seconds"] <= CALL_SECONDS
        rungs.append(r)
        print(f"{mode}: {line(r)}", flush=True)
        save(mode, {"rungs": rungs, "most_runs_that_fit": None, "complete": False})
        if "failed" in r:
            break
    fit = [r["runs"] for r in rungs if r.get("fits_a_call")]
    return {"rungs": rungs, "most_runs_that_fit": max(fit) if fit else None}


def line(r: dict) -> str:
    if "failed" in r:
        last = (r["log_tail"].strip().splitlines() or [""])[-1]
        return f"{r['runs']} runs: run(s) {r['failed']} failed after {r['wall_seconds']:.0f} s: {last}"
    return (f"{r['runs']} runs on the card: a fixed-20 step {r['step_seconds']:.2f} s (median of {r['steps_measured']} "
            f"warm steps), {r['steps_per_second']:.2f} steps/s in all, load {r['load_seconds']:.0f} s, an evaluation "
            f"of {r['eval_items']} items {r['eval_seconds']:.1f} s; fixed 20's chain {r['chain_seconds']:.0f} s "
            f"({'fits' if r['fits_a_call'] else 'does not fit'} a {CALL_SECONDS} s call)")


def start_mps(work: str) -> tuple[dict | None, str]:
    """Start a CUDA MPS control daemon of this user's own (its pipe and log under `work`): (the environment its
    clients need, "") or (None, why not)."""
    control = shutil.which("nvidia-cuda-mps-control")
    if control is None:
        return None, "nvidia-cuda-mps-control is not on the PATH"
    env = {"CUDA_MPS_PIPE_DIRECTORY": os.path.join(work, "mps-pipe"),
           "CUDA_MPS_LOG_DIRECTORY": os.path.join(work, "mps-log")}
    for path in env.values():
        os.makedirs(path, exist_ok=True)
    try:
        done = subprocess.run([control, "-d"], env={**os.environ, **env}, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        return None, f"nvidia-cuda-mps-control -d: {e}"
    if done.returncode:
        return None, f"nvidia-cuda-mps-control -d exited {done.returncode}: {(done.stderr or done.stdout)[-300:]}"
    return env, ""


def mps_command(env: dict, command: str) -> str:
    done = subprocess.run(["nvidia-cuda-mps-control"], input=command + "\n", env={**os.environ, **env},
                          capture_output=True, text=True, timeout=30)
    return (done.stdout + done.stderr).strip()


def arithmetic(study: Study, chain_of: dict, eval_items: int) -> str:
    return (f"fixed 20's chain = {chain_of['loads']} loads x a run's load seconds + {chain_of['steps']} steps "
            f"({study.steps} to the equal-steps point, then {chain_of['tokens_phase_steps']} of stepwise's "
            f"equal-tokens phase: {chain_of['tokens_phase_from']}) x the median step seconds + "
            f"{chain_of['evaluations']:g} evaluations (an evaluation at H counts as H / 20 of one at 20) x the seconds "
            f"of one on the study's {study.eval_items} items (measured on {eval_items}, scaled by item count: an "
            f"upper bound, as a larger evaluation batches more episodes); it fits a call when it is at most "
            f"{CALL_SECONDS} s (bench/horizon_gpu.sh's timeout). With N runs on the card a call runs N // 4 seeds: the "
            f"4 arms of a seed side by side, its stepwise equal-tokens job after its fixed 20")


def pilot(study: Study, runs: list[int] = LADDER, seconds: float = 10.0, out: str = PILOT_RESULT) -> dict:
    """The pilot (module docstring) of `study` (its start weights set): each rung without MPS, then with it where it
    starts; written to `out` and returned."""
    if study.device == "cpu":
        os.environ["CUDA_VISIBLE_DEVICES"] = ""   # as a study on the CPU: its runs hide any GPU
    t0 = time.time()
    small = dataclasses.replace(study, eval_items=min(study.eval_items, EVAL_ITEMS))   # what each run evaluates
    chain_of = chain(study)
    record = {"bench": "horizon_pilot", "date": time.strftime("%Y-%m-%d"), "commit": commit(), "machine": machine(),
              "versions": versions("torch", "transformers"), "device": study.device,
              "settings": study.settings(), "start_sha256": study.start_sha256, "ladder": list(runs),
              "seconds": seconds, "max_steps": MAX_STEPS, "call_seconds": CALL_SECONDS, "chain": chain_of,
              "arithmetic": arithmetic(study, chain_of, small.eval_items), "modes": {}}
    work = tempfile.mkdtemp(prefix="horizon_pilot_")

    def save(mode: str, partial: dict) -> None:
        record["modes"][mode] = partial
        record["wall_seconds"] = time.time() - t0
        write_json(out, record, indent=1)
    try:
        record["modes"]["plain"] = ladder(small, study, runs, seconds, work, chain_of, "plain", save)
        env, why = start_mps(work) if study.device == "cuda" else (None, "--device cpu: MPS shares a GPU")
        if env is None:
            record["modes"]["mps"] = {"measured": False, "why": why}
        else:
            saved = {k: os.environ.get(k) for k in env}
            os.environ.update(env)   # the runs' processes inherit it and become the daemon's clients
            try:
                record["modes"]["mps"] = ladder(small, study, runs, seconds, work, chain_of, "mps", save)
                record["modes"]["mps"]["servers"] = mps_command(env, "get_server_list")   # empty: no client came
            finally:
                mps_command(env, "quit")
                for k, v in saved.items():
                    if v is None:
                        del os.environ[k]
                    else:
                        os.environ[k] = v
    finally:
        shutil.rmtree(work, ignore_errors=True)
    # the card as a run saw it (this process opens no CUDA context: it would stand beside the MPS server's)
    record["gpu"] = next((m["gpu"] for r in record["modes"]["plain"]["rungs"] for m in r.get("per_run", [])), None)
    record["wall_seconds"] = time.time() - t0
    write_json(out, record, indent=1)
    return record


if __name__ == "__main__":   # one run of a rung
    worker(json.loads(sys.argv[1]))
