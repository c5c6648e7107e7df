"""bench/algorithms.py end to end at the smoke preset: real training runs in their own processes, and a report from
which every paired comparison can be recomputed once the run folders are gone."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from agentgym_nb.evaluate import bootstrap_ci

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.slow
@pytest.mark.long   # an end-to-end study, minutes: CI runs it after make test
def test_estimator_study_records_per_task_outcomes_that_reproduce_its_pairs(nano_dir, tmp_path):
    out = tmp_path / "algorithms.json"
    (tmp_path / "models").symlink_to(os.path.dirname(nano_dir))   # the runs are new, the smoke nano is the suite's
    env = {**os.environ, "AGENTGYM_NB_OUTPUTS": str(tmp_path), "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, os.path.join(ROOT, "bench", "algorithms.py"), "--preset", "smoke", "--seeds", "0", "1",
           "--estimators", "grpo", "gigpo", "--out", str(out)]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report["settings"]["preset"] == "smoke" and report["commit"] and report["date"]
    grpo, gigpo = report["estimators"]["grpo"], report["estimators"]["gigpo"]
    for row in (grpo, gigpo):
        assert sorted(row["runs"]) == ["0", "1"]
        for run in row["runs"].values():
            for tag in ("start", "final"):
                per_task = run[f"per_task_{tag}"]
                assert len(per_task) == report["settings"]["heldout_items"]   # smoke: 4 held-out tasks
                # one episode per task at T = 1: the run's success is the mean of its per-task outcomes
                assert np.mean(list(per_task.values())) == run[f"success_{tag}"]
            assert len(run["curve"]) == report["settings"]["steps"]
    # the pair GiGPO - GRPO from the recorded outcomes alone: by seed, and by (seed, task)
    diff = gigpo["minus_grpo"]
    by_seed = [gigpo["runs"][s]["success_final"] - grpo["runs"][s]["success_final"] for s in ("0", "1")]
    assert diff["per_seed"] == by_seed and diff["mean"] == np.mean(by_seed)
    by_task = [gigpo["runs"][s]["per_task_final"][i] - grpo["runs"][s]["per_task_final"][i]
               for s in ("0", "1") for i in gigpo["runs"][s]["per_task_final"]]
    assert diff["pairs"] == len(by_task) == 8
    assert diff["ci95_bootstrap_tasks"] == pytest.approx(list(bootstrap_ci(by_task)))   # seeded: the same resamples
    assert "minus_grpo" not in grpo and "paper_agreement" not in report   # REINFORCE++ did not run
    from agentgym_nb.models import weights_digest
    assert report["start_weights_sha256"] == weights_digest(nano_dir)   # what every run started from
    # a report recorded from other start weights is refused, not overwritten with runs of another start
    out.write_text(json.dumps({**report, "start_weights_sha256": "0" * 64}))
    refused = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
    assert refused.returncode != 0 and "runs of two start models cannot be compared" in refused.stderr


def test_a_treatment_of_cut_episodes_is_a_grpo_run_of_its_own_with_its_setting(monkeypatch, tmp_path):
    monkeypatch.setenv("AGENTGYM_NB_OUTPUTS", str(tmp_path))
    monkeypatch.syspath_prepend(os.path.join(ROOT, "bench"))
    import algorithms
    grpo = algorithms.config("babyai", "stepwise", "grpo", 0, "smoke")
    cut = algorithms.config("babyai", "stepwise", "grpo-cut-baseline", 0, "smoke")
    discount = algorithms.config("babyai", "stepwise", "grpo-cut-discount", 0, "smoke")
    assert grpo.algorithm == cut.algorithm == discount.algorithm == "grpo"
    assert (grpo.cut_out_of_baseline, grpo.cut_turn_discount) == (False, 1.0)
    assert (cut.cut_out_of_baseline, cut.cut_turn_discount) == (True, 1.0)
    assert (discount.cut_out_of_baseline, discount.cut_turn_discount) == (False, 0.7)
    assert len({grpo.name, cut.name, discount.name}) == 3   # three run folders, none read back for another
    # everything else, seeds included, is GRPO's: the pairs differ in the treatment only
    for arm, setting in ((cut, "cut_out_of_baseline"), (discount, "cut_turn_discount")):
        assert {k: v for k, v in vars(arm).items() if k not in ("name", setting)} == \
               {k: v for k, v in vars(grpo).items() if k not in ("name", setting)}
