"""The estimator x schedule x seed grid of notebook 06b: one named training run per cell (`runs.run_config`: its name
ends in a hash of what it learns), one small result JSON per cell that the analysis reads, and the papermill commands
that run the cells as separate jobs (on other machines too: copy their cells/ folders together).

    grid = grid_configs(base, ["grpo", "rloo"], ["fixed", "stepwise"], [0, 1], steps=20, run_config=run_config)
    for key in grid:                        # "grpo/fixed/0", ...
        run_cell(grid_dir, key, grid[key])  # trains (or reads back) the run, writes cells/grpo-fixed-0.json
    results = collect(grid_dir, grid)       # {key: result} of the cells whose result is of exactly this config
"""
from __future__ import annotations

import json
import os
from collections.abc import Callable

import numpy as np

from ..algos.advantages import ESTIMATORS
from ..algos.schedule import SCHEDULES
from ..config import RunConfig
from .runs import ADAPTIVE_IN_REACH, train_or_load

# What a cell's result keeps of each training step (the curves the notebook draws).
CURVE_KEYS = ("step", "success", "reward", "max_rounds", "kl", "entropy", "zero_adv_groups", "grad_norm",
              "policy_tokens", "episodes", "step_seconds", "explained_variance")
NOTEBOOK = "notebooks/06b_running_a_grid.ipynb"


def default_grid(preset: str, preset_steps: int) -> dict:
    """The grid a preset runs when the notebook's parameters leave it open. smoke: one cell of one step (a test);
    cpu: the paper's two ablations (GRPO against REINFORCE++, fixed against stepwise) with two seeds, each run a quarter
    of the preset's steps (8 short runs: a grid `make book` renders in minutes); any other preset: every estimator x
    3 seeds at the preset's steps."""
    if preset == "smoke":
        return dict(estimators=["grpo"], schedules=["fixed", "stepwise"], seeds=[0], steps=1)
    if preset == "cpu":
        return dict(estimators=["grpo", "reinforce_plus_plus"], schedules=["fixed", "stepwise"], seeds=[0, 1],
                    steps=preset_steps // 4)
    return dict(estimators=list(ESTIMATORS), schedules=["fixed", "stepwise"], seeds=[0, 1, 2], steps=preset_steps)


def cell_key(estimator: str, schedule: str, seed: int) -> str:
    return f"{estimator}/{schedule}/{seed}"


def cell_config(base: RunConfig, estimator: str, schedule: str, seed: int, steps: int,
                run_config: Callable[..., RunConfig]) -> RunConfig:
    """One cell's run: everything but the estimator, the schedule and the seed is the preset's (`base`).

    fixed: the last stage's horizon at every step; stepwise: the preset's ladder, its stages scaled to `steps`
    (rounds_every = max(1, round(base.rounds_every * steps / base.steps)): 12 of 40 steps -> 6 of 20); adaptive: the
    same ladder, each stage entered by `ADAPTIVE_IN_REACH`'s rule."""
    rounds = base.rounds[-1:] if schedule == "fixed" else base.rounds
    kw = {}
    if schedule == "stepwise":
        kw = {"rounds_every": max(1, round(base.rounds_every * steps / base.steps))}
    elif schedule == "adaptive":
        kw = ADAPTIVE_IN_REACH
    return run_config(schedule, rounds, algorithm=estimator, seed=seed, steps=steps, **kw)


def grid_configs(base: RunConfig, estimators: list[str], schedules: list[str], seeds: list[int], steps: int,
                 run_config: Callable[..., RunConfig]) -> dict[str, RunConfig]:
    """{cell key: its run's config} for every estimator x schedule x seed, in that order."""
    for what, chosen, valid in (("estimators", estimators, list(ESTIMATORS)), ("schedules", schedules,
                                                                              list(SCHEDULES))):
        bad = [x for x in chosen if x not in valid]
        if bad or not chosen:
            raise ValueError(f"{what}: {bad or 'empty'} not valid; choose from {valid}")
    if not seeds or any(isinstance(s, bool) or not isinstance(s, int) for s in seeds):
        raise ValueError(f"seeds must be a non-empty list of integers, got {seeds!r}")
    if steps < 1:
        raise ValueError(f"steps must be at least 1, got {steps}")
    return {cell_key(e, sch, s): cell_config(base, e, sch, s, steps, run_config)
            for e in estimators for sch in schedules for s in seeds}


def check_cell(cell: str | None, grid: dict[str, RunConfig]) -> None:
    """A cell named by the notebook's `cell` parameter must be one of the grid's."""
    if cell is not None and cell not in grid:
        raise ValueError(f"cell {cell!r} is not in this grid; use estimator/schedule/seed, one of: "
                         f"{', '.join(grid)} (or set estimators, schedules and seeds to include it)")


def cell_path(grid_dir: str, key: str) -> str:
    return os.path.join(grid_dir, "cells", key.replace("/", "-") + ".json")


def cell_done(grid_dir: str, key: str, cfg: RunConfig) -> bool:
    """The cell has a result of exactly this config: its run name (which ends in the config's hash) matches."""
    path = cell_path(grid_dir, key)
    if not os.path.exists(path):
        return False
    with open(path) as f:
        return json.load(f)["run"] == cfg.name


def horizon_text(schedule: str, cfg: RunConfig) -> str:
    if schedule == "fixed":
        return f"fixed H={cfg.rounds[0]}"
    return f"{schedule} {cfg.rounds}" + (f" every {cfg.rounds_every} steps" if schedule == "stepwise" else "")


def plan(grid_dir: str, grid: dict[str, RunConfig], fresh: bool = False) -> list[dict]:
    """One row per cell: its key, horizon schedule, run name (with the config's hash) and whether its result
    exists ("done") or is still "to run"."""
    return [{"cell": key, "horizon": horizon_text(key.split("/")[1], cfg), "run": cfg.name,
             "result": "done" if cell_done(grid_dir, key, cfg) and not fresh else "to run"}
            for key, cfg in grid.items()]


def papermill_commands(grid_dir: str, grid: dict[str, RunConfig], notebook: str = NOTEBOOK) -> list[str]:
    """The grid as one papermill job per cell (each trains its cell and writes its result), then one job that only
    collects the results (`run_grid False`). Parameters other than the cell must be repeated on every command."""
    out = os.path.relpath(grid_dir)
    name = os.path.splitext(os.path.basename(notebook))[0]
    return ([f"papermill {notebook} {out}/notebooks/{key.replace('/', '-')}.ipynb -p cell {key}" for key in grid]
            + [f"papermill {notebook} {out}/{name}.ipynb -p run_grid False"])


def cell_result(key: str, run: dict) -> dict:
    """What the analysis needs of one cell's run (`train_or_load`'s dict): its config's schedule and budget, held-out
    success before and after with the final interval, the area under the training-success curve (its mean over
    steps), training success over the last quarter of steps, seconds of training, and the per-step curves."""
    estimator, schedule, seed = key.split("/")
    c, h = run["cfg"], run["history"]
    quarter = h[-max(1, len(h) // 4):]
    return {"cell": key, "estimator": estimator, "schedule": schedule, "seed": int(seed), "run": c.name,
            "rounds": list(c.rounds), "rounds_every": c.rounds_every, "steps": c.steps, "env": c.env,
            "model": c.model, "preset": c.preset, "heldout_items": run["final"]["items"], "eval_rounds": c.eval_rounds,
            "success_start": run["start"]["success"], "success_final": run["final"]["success"],
            "success_final_ci95": run["final"]["success_ci"],
            "auc": float(np.mean([m["success"] for m in h])),
            "train_success_last_quarter": float(np.mean([m["success"] for m in quarter])),
            "train_seconds": float(sum(m["step_seconds"] for m in h)),
            "history": [{k: m[k] for k in CURVE_KEYS if k in m} for m in h]}


def run_cell(grid_dir: str, key: str, cfg: RunConfig, fresh: bool = False) -> dict:
    """Train the cell's run (or read it back when outputs/runs holds it) and write its result JSON."""
    result = cell_result(key, train_or_load(cfg, fresh=fresh, desc=key))
    os.makedirs(os.path.dirname(cell_path(grid_dir, key)), exist_ok=True)
    with open(cell_path(grid_dir, key), "w") as f:
        json.dump(result, f, indent=1)
    return result


def collect(grid_dir: str, grid: dict[str, RunConfig]) -> dict[str, dict]:
    """{key: result} of the cells whose result JSON is of exactly their config (`cell_done`)."""
    out = {}
    for key, cfg in grid.items():
        if cell_done(grid_dir, key, cfg):
            with open(cell_path(grid_dir, key)) as f:
                out[key] = json.load(f)
    return out
