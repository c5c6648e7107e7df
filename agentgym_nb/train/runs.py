"""Named training runs that notebooks and benchmarks share.

A run's name carries a hash of the settings that change what it learns, so notebooks 04-07 and `bench/` agree on
one folder per experiment: a run one of them trained is read back by the others instead of being trained again.

    cfg = run_config("stepwise", [2, 4, 6], env="babyai", algorithm="rloo", seed=1, steps=40)
    run = train_or_load(cfg)     # {"name", "cfg", "history", "start", "final"}
    run_dir = policy_run(None, cfg, "my_run")   # a finished run like cfg, whatever its name, or cfg trained here
"""
from __future__ import annotations

import dataclasses
import glob
import hashlib
import json
import os
import shutil

from tqdm.auto import tqdm

from ..algos.schedule import SCHEDULES
from ..config import RunConfig, make_config, parse_list
from .checkpoint import checkpoint_dir, saved_checkpoints
from .rl import Trainer

NOT_LEARNING = ("name", "out_dir", "threads")   # settings that do not change what a run learns
# The adaptive arm of notebook 05 and the horizon study: the next horizon once, over its last 5 steps, the policy
# solves 15% of the training episodes the current horizon can solve at all (items whose expert needs at most H
# turns): a threshold relative to what the horizon allows, which a short horizon can reach. 15% is three times what
# the long track's nano solves of them at H = 6 before training (5.3% of 151 in-reach train items), fixed before
# any training run (docs/results.md, horizon study); 50% would never be reached at this scale.
ADAPTIVE_IN_REACH = dict(adaptive_metric="success_in_reach", adaptive_threshold=0.15, adaptive_patience=5,
                         adaptive_min_steps=5)


def default_track(env: str, preset: str | None, track: str | None, log=print) -> str | None:
    """The track a notebook trains on. A track that is given is kept (its model's build, however long, was asked
    for); another env than BabyAI gets None (its first track). BabyAI gets its long track (rooms, doors, keys and
    mazes: where the horizon matters) when that track's model is built already or cheap (smoke, or a model that is
    not nano); otherwise its one-room track, and `log` says what the long track's nano costs and how to start it."""
    if track is not None or env != "babyai":
        return track
    from ..models import nano_dir
    cfg = make_config(preset=preset, env=env, track="long")
    if cfg.preset == "smoke" or cfg.model != "nano" or os.path.exists(os.path.join(nano_dir(cfg), "build.json")):
        return "long"
    log("This run uses BabyAI's one-room track (experts need at most 6 turns), where a horizon of 6 caps nothing. The "
        "long track (where the horizon matters) trains from the horizon study's committed start with -p track long "
        "-p model ../models/nano-babyai-long, or from a nano of its own built here (about 2 hours on 2 cores: "
        "`make model TRACK=long`, or -p track long alone).")
    return "one-room"


def listed(value, what: str) -> list:
    """A list parameter as papermill may pass it (`config.parse_list`: a list, "[0, 1]", "0,1", or one value), with
    at least one value; blank items ("0, 1,") are dropped."""
    value = [v for v in parse_list(value, what) if v != ""]
    if not value:
        raise ValueError(f"{what} must name at least one value, e.g. {what}=[0, 1]")
    return value


def horizon(schedule: str, rounds: list[int], steps: int) -> dict:
    """Config fields of a horizon schedule. `fixed` trains at rounds[0] at every step; it is written as a one-stage
    ladder (stepwise [H] for all `steps`), which is the same schedule: rounds_at(step) = H."""
    if schedule not in SCHEDULES:
        raise ValueError(f"unknown schedule {schedule!r}: use {', '.join(SCHEDULES)}")
    if schedule == "fixed":
        return dict(schedule="stepwise", rounds=[rounds[0]], rounds_every=steps)
    return dict(schedule=schedule, rounds=list(rounds))


def schedule_label(schedule: str, rounds: list[int]) -> str:
    return f"{schedule}{'-'.join(map(str, rounds[:1] if schedule == 'fixed' else rounds))}"


def learning_settings(config: dict) -> dict:
    """The settings of a config (a dict, as in config.json) that change what a run learns and differ from
    RunConfig's defaults, JSON-normalised (tuples become lists)."""
    defaults = json.loads(json.dumps(dataclasses.asdict(RunConfig())))
    config = json.loads(json.dumps(config))
    return {k: v for k, v in config.items() if k not in NOT_LEARNING and k in defaults and v != defaults[k]}


def named(cfg: RunConfig, label: str) -> RunConfig:
    """cfg with the name <env>-<preset>-<algorithm>-<label>-s<seed>-<hash of the settings that change learning>.
    Only settings that differ from RunConfig's defaults enter the hash: a new config field keeps old names valid."""
    settings = json.dumps(learning_settings(dataclasses.asdict(cfg)), sort_keys=True)
    digest = hashlib.sha1(settings.encode()).hexdigest()[:6]
    return dataclasses.replace(cfg, name=f"{cfg.env}-{cfg.preset}-{cfg.algorithm}-{label}-s{cfg.seed}-{digest}")


def run_config(schedule: str, rounds: list[int], *, algorithm: str, seed: int, steps: int, preset: str | None = None,
               env: str = "babyai", model: str | None = None, engine: str | None = None, threads: int = 0,
               **kw) -> RunConfig:
    """The named config of one training run: the preset's settings for `env`, this horizon schedule, estimator,
    seed and budget, and any other RunConfig field in `kw`. `threads` 0: $OMP_NUM_THREADS if set, else all cores."""
    cfg = make_config(preset=preset, env=env, model=model, engine=engine, algorithm=algorithm, seed=seed, steps=steps,
                      threads=threads, **{**kw, **horizon(schedule, rounds, steps)})
    return named(cfg, schedule_label(schedule, rounds))


def finished(cfg: RunConfig) -> bool:
    files = [os.path.join(cfg.run_dir, f) for f in ("eval_start.json", "eval_final.json", "metrics.jsonl")]
    return all(map(os.path.exists, files)) and os.path.isdir(checkpoint_dir(cfg.run_dir, cfg.steps))


def identical_finished_run(cfg: RunConfig) -> str | None:
    """Name of a finished run under outputs/runs with the same learning settings as cfg (whatever its name), or None."""
    want = learning_settings(dataclasses.asdict(cfg))
    for path in sorted(glob.glob(os.path.join(cfg.out_dir, "runs", "*", "config.json"))):
        run_dir = os.path.dirname(path)
        with open(path) as f:
            same = learning_settings(json.load(f)) == want
        if same and os.path.isdir(checkpoint_dir(run_dir, cfg.steps)):
            return os.path.basename(run_dir)
    return None


def train_or_load(cfg: RunConfig, *, fresh: bool = False, desc: str | None = None) -> dict:
    """Evaluate the starting policy, train, evaluate again (held-out items, the config's eval settings); or, when
    outputs/runs/<name> already holds that finished run, just read it. An interrupted run resumes from its last
    checkpoint. Returns {"name", "cfg", "history" (metrics per step), "start" and "final" (evaluation summaries)}."""
    def path(f):
        return os.path.join(cfg.run_dir, f)

    if fresh:
        shutil.rmtree(cfg.run_dir, ignore_errors=True)
    if not finished(cfg):
        trainer = Trainer(cfg, log=tqdm.write)
        try:
            if not os.path.exists(path("eval_start.json")):
                if trainer.step:
                    raise RuntimeError(f"{cfg.run_dir} resumed at step {trainer.step} without the evaluation of its "
                                       "starting policy: set fresh=True to train it again")
                _write_json(path("eval_start.json"), trainer.evaluate(tag="start"))
            bar = tqdm(total=cfg.steps, initial=trainer.step, desc=desc or cfg.name)

            def progress(m):
                bar.update(1)
                bar.set_postfix(H=m["max_rounds"], reward=f"{m['reward']:.3f}", success=f"{m['success']:.2f}")

            trainer.fit(callback=progress)
            bar.close()
            _write_json(path("eval_final.json"), trainer.evaluate(tag="final"))
        finally:
            trainer.close()
    with open(path("metrics.jsonl")) as f:
        history = [m for m in map(json.loads, f) if m["step"] <= cfg.steps]
    with open(path("eval_start.json")) as f, open(path("eval_final.json")) as g:
        start, final = json.load(f), json.load(g)
    return {"name": cfg.name, "cfg": cfg, "history": history, "start": start, "final": final}


def policy_run(given: str | None, cfg: RunConfig, parameter: str, *, fresh: bool = False,
               train_missing: bool = True) -> str:
    """The run folder of a trained policy a notebook evaluates: `given` (a run name under outputs/runs, or a folder)
    when set; else a finished run with cfg's learning settings, whatever its name; else cfg trained here, unless
    `train_missing` is False. `parameter` names the notebook parameter that sets `given`, for the error messages."""
    if given:
        run_dir = given if os.path.isdir(given) else os.path.join(cfg.out_dir, "runs", given)
        if not saved_checkpoints(run_dir):
            raise ValueError(f"{parameter}={given!r}: {run_dir} has no checkpoint; name a run under outputs/runs "
                             f"(e.g. {cfg.name}) or leave {parameter}=None")
        return run_dir
    found = None if fresh else identical_finished_run(cfg)
    if found:
        return os.path.join(cfg.out_dir, "runs", found)
    if not train_missing:
        raise ValueError(f"outputs/runs holds no finished run like {cfg.name}: set {parameter} to a run name, or "
                         "train_missing=True to train it here")
    return train_or_load(cfg, fresh=fresh, desc=parameter)["cfg"].run_dir


def demo_run(cfg: RunConfig) -> str | None:
    """`make demo`'s run folder, outputs/runs/demo-<env>, when it holds a finished run (its summary.json and a
    checkpoint) made at cfg's preset, env, track and model; else None."""
    run_dir = os.path.join(cfg.out_dir, "runs", f"demo-{cfg.env}")
    made = os.path.join(run_dir, "config.json")
    if not (os.path.exists(made) and os.path.exists(os.path.join(run_dir, "summary.json"))
            and saved_checkpoints(run_dir)):
        return None
    with open(made) as f:
        config = json.load(f)
    return run_dir if all(config.get(k) == getattr(cfg, k) for k in ("preset", "env", "track", "model")) else None


def describe_run(config: dict) -> str:
    """A run's horizon schedule and estimator, from its config.json: "fixed H=6 (grpo)", "ScalingInter 2->4->6
    (grpo)", "adaptive 2->4->6 (rloo)". A one-stage ladder is a fixed horizon (`horizon`)."""
    if config["schedule"] == "fixed" or len(config["rounds"]) == 1:
        return f"fixed H={config['rounds'][-1]} ({config['algorithm']})"
    name = "ScalingInter" if config["schedule"] == "stepwise" else config["schedule"]
    return f"{name} {'->'.join(map(str, config['rounds']))} ({config['algorithm']})"


def _write_json(path: str, obj: dict) -> None:
    with open(path, "w") as f:
        json.dump(obj, f, indent=2)
