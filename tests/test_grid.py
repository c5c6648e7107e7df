"""Notebook 06b's grid (agentgym_nb.train.grid) and the run helpers notebooks 06b and 07 read (train.runs): the cells'
configs by hand, the result JSON of a run, a result of another config left out, the papermill commands; a policy
run named, found or refused; make demo's run recognised only at its own preset."""
import dataclasses
import functools
import json
import os

import pytest

from agentgym_nb.config import make_config
from agentgym_nb.train import grid, runs


@pytest.fixture
def cpu(tmp_path):
    base = dataclasses.replace(make_config(preset="cpu", env="babyai"), out_dir=str(tmp_path))
    run_config = functools.partial(runs.run_config, preset="cpu", env="babyai", out_dir=str(tmp_path))
    return base, run_config


def test_cells_differ_only_in_estimator_schedule_and_seed(cpu):
    base, run_config = cpu
    assert (base.rounds, base.rounds_every, base.steps) == ([2, 4, 6], 12, 40)
    cells = grid.grid_configs(base, ["grpo", "rloo"], ["fixed", "stepwise", "adaptive"], [0, 1], 20, run_config)
    assert list(cells)[:4] == ["grpo/fixed/0", "grpo/fixed/1", "grpo/stepwise/0", "grpo/stepwise/1"]
    assert len(cells) == 12
    fixed, stepwise, adaptive = cells["rloo/fixed/1"], cells["rloo/stepwise/1"], cells["rloo/adaptive/1"]
    assert (fixed.rounds, fixed.rounds_every) == ([6], 20)          # the last stage at every one of the 20 steps
    assert (stepwise.rounds, stepwise.rounds_every) == ([2, 4, 6], 6)   # 12 of 40 steps -> round(12 * 20 / 40) = 6
    assert adaptive.schedule == "adaptive" and adaptive.adaptive_threshold == 0.15
    assert all((c.algorithm, c.seed, c.steps) == ("rloo", 1, 20) for c in (fixed, stepwise, adaptive))
    assert len({c.name for c in cells.values()}) == 12               # one run, one name (its config's hash)
    assert grid.horizon_text("stepwise", stepwise) == "stepwise [2, 4, 6] every 6 steps"
    assert grid.horizon_text("fixed", fixed) == "fixed H=6"


@pytest.mark.parametrize("estimators, schedules, seeds, message", [
    (["ppo"], ["fixed"], [0], "estimators: \\['ppo'\\] not valid"),
    (["grpo"], ["growing"], [0], "schedules: \\['growing'\\] not valid"),
    (["grpo"], [], [0], "schedules: empty not valid"),
    (["grpo"], ["fixed"], ["0"], "seeds must be a non-empty list of integers"),
])
def test_a_bad_grid_is_named(cpu, estimators, schedules, seeds, message):
    base, run_config = cpu
    with pytest.raises(ValueError, match=message):
        grid.grid_configs(base, estimators, schedules, seeds, 20, run_config)


def test_the_preset_grids():
    assert grid.default_grid("smoke", 2) == dict(estimators=["grpo"], schedules=["fixed", "stepwise"], seeds=[0],
                                                 steps=1)
    assert grid.default_grid("cpu", 40)["steps"] == 10 and grid.default_grid("cpu", 40)["seeds"] == [0, 1]
    assert grid.default_grid("paper", 200)["estimators"] == ["grpo", "rloo", "reinforce_plus_plus", "gae", "gigpo"]


def _run(cfg, successes):
    history = [{"step": k + 1, "success": s, "reward": s, "step_seconds": 2.0, "kl": 0.01, "not_kept": 1}
               for k, s in enumerate(successes)]
    return {"name": cfg.name, "cfg": cfg, "history": history, "start": {"success": 0.1, "items": 100},
            "final": {"success": 0.3, "items": 100, "success_ci": [0.22, 0.39]}}


def test_a_cell_result_by_hand_and_a_result_of_another_config_left_out(cpu, tmp_path):
    base, run_config = cpu
    cells = grid.grid_configs(base, ["grpo"], ["fixed", "stepwise"], [0], 20, run_config)
    successes = [0.0, 0.2, 0.4, 0.2, 0.6, 0.4, 0.6, 0.8]
    result = grid.cell_result("grpo/stepwise/0", _run(cells["grpo/stepwise/0"], successes))
    assert result["auc"] == pytest.approx(3.2 / 8)                         # the mean of training success over steps
    assert result["train_success_last_quarter"] == pytest.approx(0.7)      # the last 8 // 4 = 2 steps: 0.6, 0.8
    assert result["train_seconds"] == 16.0
    assert (result["estimator"], result["schedule"], result["seed"]) == ("grpo", "stepwise", 0)
    assert result["history"][0] == {"step": 1, "success": 0.0, "reward": 0.0, "kl": 0.01, "step_seconds": 2.0}
    grid_dir = str(tmp_path / "grid")
    assert not grid.cell_done(grid_dir, "grpo/stepwise/0", cells["grpo/stepwise/0"])
    os.makedirs(os.path.join(grid_dir, "cells"))
    json.dump(result, open(grid.cell_path(grid_dir, "grpo/stepwise/0"), "w"))
    assert grid.cell_path(grid_dir, "grpo/stepwise/0").endswith("cells/grpo-stepwise-0.json")
    assert list(grid.collect(grid_dir, cells)) == ["grpo/stepwise/0"]
    assert [r["result"] for r in grid.plan(grid_dir, cells)] == ["to run", "done"]
    assert [r["result"] for r in grid.plan(grid_dir, cells, fresh=True)] == ["to run", "to run"]
    other = grid.grid_configs(base, ["grpo"], ["stepwise"], [0], 10, run_config)   # another budget, another name
    assert grid.collect(grid_dir, other) == {}
    with pytest.raises(ValueError, match="cell 'grpo/stepwise/3' is not in this grid; .*grpo/fixed/0, grpo/stepwise/0"):
        grid.check_cell("grpo/stepwise/3", cells)
    grid.check_cell("grpo/fixed/0", cells)


def test_papermill_commands_one_job_per_cell_then_one_that_collects(cpu):
    base, run_config = cpu
    cells = grid.grid_configs(base, ["grpo"], ["fixed"], [0, 1], 20, run_config)
    assert grid.papermill_commands("outputs/runs/g", cells) == [
        "papermill notebooks/06b_running_a_grid.ipynb outputs/runs/g/notebooks/grpo-fixed-0.ipynb -p cell grpo/fixed/0",
        "papermill notebooks/06b_running_a_grid.ipynb outputs/runs/g/notebooks/grpo-fixed-1.ipynb -p cell grpo/fixed/1",
        "papermill notebooks/06b_running_a_grid.ipynb outputs/runs/g/06b_running_a_grid.ipynb -p run_grid False"]


def _finished_run(run_dir, **config):
    os.makedirs(os.path.join(run_dir, "ckpt", "step_00060"))
    json.dump(config, open(os.path.join(run_dir, "config.json"), "w"))


def test_a_policy_run_is_named_found_or_refused(cpu, tmp_path):
    base, run_config = cpu
    cfg = run_config("fixed", [6], algorithm="grpo", seed=0, steps=40)
    with pytest.raises(ValueError, match="fixed_run='nowhere': .* has no checkpoint; name a run under outputs/runs"):
        runs.policy_run("nowhere", cfg, "fixed_run")
    with pytest.raises(ValueError, match=f"outputs/runs holds no finished run like {cfg.name}: set fixed_run"):
        runs.policy_run(None, cfg, "fixed_run", train_missing=False)
    named = tmp_path / "runs" / "mine"
    _finished_run(str(named))
    assert runs.policy_run("mine", cfg, "fixed_run") == str(named)
    # a run with the same learning settings under another name is found (checkpoint at the config's last step)
    found = tmp_path / "runs" / "same-settings"
    os.makedirs(found / "ckpt" / "step_00040")
    json.dump(dataclasses.asdict(cfg) | {"name": "same-settings"}, open(found / "config.json", "w"))
    assert runs.policy_run(None, cfg, "fixed_run", train_missing=False) == str(found)


def test_make_demos_run_is_read_only_at_its_own_preset(tmp_path):
    cpu = dataclasses.replace(make_config(preset="cpu", env="babyai"), out_dir=str(tmp_path))
    demo = tmp_path / "runs" / "demo-babyai"
    assert runs.demo_run(cpu) is None
    _finished_run(str(demo), preset="cpu", env="babyai", track="one-room", model="nano")
    assert runs.demo_run(cpu) is None                  # no summary.json: the demo has not finished
    (demo / "summary.json").write_text("{}")
    assert runs.demo_run(cpu) == str(demo)
    smoke = dataclasses.replace(make_config(preset="smoke", env="babyai"), out_dir=str(tmp_path))
    assert runs.demo_run(smoke) is None                # made at the cpu preset


def test_describe_run():
    assert runs.describe_run({"schedule": "stepwise", "rounds": [6], "algorithm": "grpo"}) == "fixed H=6 (grpo)"
    assert runs.describe_run({"schedule": "stepwise", "rounds": [2, 4, 6], "algorithm": "grpo"}) == \
        "ScalingInter 2->4->6 (grpo)"
    assert runs.describe_run({"schedule": "adaptive", "rounds": [2, 4, 6], "algorithm": "rloo"}) == \
        "adaptive 2->4->6 (rloo)"
