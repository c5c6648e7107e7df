"""One run of the study: the jobs its process does (`train_one`: train to a budget point with its held-out
evaluations, or measure a pass@(k, T) surface), and what a run has measured so far (`run_state`)."""
from __future__ import annotations

import dataclasses
import json
import os
import time

from ..host import commit, machine
from .settings import CUDA_EPISODES, SURFACE_SAMPLES, Study, write_json


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

    from ..evaluate import evaluate, load_results
    from ..rollout.engine import SamplingParams
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
    items, k = 1..SURFACE_SAMPLES (resumable: surface-<step>/h<longest T>.jsonl)."""
    from ..evaluate import horizon_surface
    from ..rollout.engine import SamplingParams
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
    from ..rollout.engine import engine_kind
    from ..train.rl import Trainer
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
    write_json(out_path, done)

    def measure(step: int, horizon: int) -> None:
        key = f"{step}/{horizon}"
        if key not in done["evals"]:
            t0 = time.time()
            done["evals"][key] = {**evaluation(trainer, study, step, horizon), "seconds": time.time() - t0}
            print(f"{cfg.name}: step {step} H={horizon} held-out {done['evals'][key]['success']:.3f}", flush=True)
            write_json(out_path, done)

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
        write_json(out_path, done)

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
        write_json(out_path, done)
        trainer.close()


def run_state(study: Study, arm: str, seed: int, recorded: dict | None = None) -> dict:
    """What a run has measured: its folder's horizon.json, else (the folder is gone: another machine) what the
    report recorded of it, else nothing."""
    path = os.path.join(study.config(arm, seed).run_dir, "horizon.json")
    if os.path.exists(path):
        return json.load(open(path))
    if recorded and (arm, seed) in recorded:
        return {k: recorded[arm, seed].get(k, {}) for k in ("evals", "points", "surface")}
    return {"evals": {}, "points": {}}
