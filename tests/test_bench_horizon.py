"""bench/horizon.py end to end at the smoke preset: real training runs in their own processes, the equal-steps and
equal-tokens points, the evaluations, and the report's paired comparisons and verdicts."""
import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.timeout(900)
def test_horizon_study_runs_both_budgets_and_reports(tmp_path):
    out = tmp_path / "horizon.json"
    env = {**os.environ, "AGENTGYM_NB_OUTPUTS": str(tmp_path), "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, os.path.join(ROOT, "bench", "horizon.py"), "--preset", "smoke", "--steps", "2",
           "--eval-every", "1", "--eval-items", "4", "--max-steps", "6", "--seeds", "0", "--arms", "fixed20",
           "stepwise", "--out", str(out)]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    study = json.loads(out.read_text())["studies"]["smoke-lr0.0003-steps2-n4"]
    fixed, stepwise = study["runs"]["fixed20/s0"], study["runs"]["stepwise/s0"]
    # the fixed-long run stops at the equal-steps point; its tokens are the stepwise run's budget
    assert fixed["points"]["steps"]["step"] == 2 and "tokens" not in fixed["points"]
    budget = fixed["points"]["steps"]["sampled_tokens"]
    tokens = stepwise["points"]["tokens"]
    assert tokens["sampled_tokens"] >= budget or tokens["step"] == 6
    assert sum(m["sampled_tokens"] for m in stepwise["steps"][:tokens["step"]]) == tokens["sampled_tokens"]
    # held-out curves every step at the evaluation horizon (H = 2 at smoke), the start shared by both arms
    assert [c[0] for c in fixed["curve_h20"]] == [0, 1, 2]
    assert fixed["curve_h20"][0][2] == stepwise["curve_h20"][0][2]
    # 0.5x, 1x and 2x the trained horizon at each point
    trained = stepwise["points"]["tokens"]["trained_horizon"]
    assert {f"{tokens['step']}/{h}" for h in (max(1, trained // 2), trained, 2 * trained)} <= set(stepwise["evals"])
    pair = study["pairs"]["stepwise - fixed20 @ steps"]
    assert pair["seeds"] == [0] and pair["pairs"] == 4 and len(pair["ci95_items"]) == 2
    # a claim is judged only where its arms ran; one seed cannot establish anything
    verdicts = study["verdicts"]
    assert "scalinginter_at_or_above_both_steps" not in verdicts   # needs fixed short too
    assert verdicts["scalinginter_fewer_tokens"]["verdict"] == "inconclusive"
