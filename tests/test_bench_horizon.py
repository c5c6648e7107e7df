"""bench/horizon.py end to end at the smoke preset: real training runs in their own processes, the equal-steps and
equal-tokens points, the evaluations, and the report's paired comparisons and verdicts."""
import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
import horizon  # noqa: E402  (bench/ is scripts, not a package)


def _evaluation(success_by_item: list[float]) -> dict:
    return {"success": sum(success_by_item) / len(success_by_item),
            "items": {str(i): y for i, y in enumerate(success_by_item)}}


def _run(curve: list[float]) -> dict:
    """A fixed-long run's held-out curve (step, tokens, success) every 10 steps."""
    return {"curve_h20": [(10 * i, 1000 * i, y) for i, y in enumerate(curve)], "steps": [{"kl": 0.01}],
            "points": {"steps": {"step": 10 * (len(curve) - 1)}}, "eval_horizon": 20,
            "evals": {f"{10 * (len(curve) - 1)}/20": {"success": curve[-1]}}}


def test_one_seed_establishes_no_difference():
    """A single seed's t-interval is the point itself: +20 points on one seed is no verdict."""
    better, worse = _evaluation([1, 1, 0, 0, 0]), _evaluation([1, 0, 0, 0, 0])
    one = horizon.paired({0: better}, {0: worse}, [0])
    assert one["ci95_seeds"] == [0.2, 0.2]
    verdict = horizon.verdicts({"pairs": {"fixed20 - fixed20-rpp @ steps": one}}, {})
    assert verdict["grpo_at_or_above_reinforce_pp_fixed20"]["verdict"] == "inconclusive"
    # three seeds that agree do establish it: per-seed differences 0.2, 0.4, 0.2 -> mean 0.267, t(2) = 4.303,
    # s = 0.115, half width 4.303 * 0.115 / sqrt(3) = 0.287: the interval [-0.02, 0.55] still covers 0 ...
    best = _evaluation([1, 1, 1, 0, 0])
    three = horizon.paired({0: better, 1: best, 2: better}, {0: worse, 1: worse, 2: worse}, [0, 1, 2])
    assert three["ci95_seeds"][0] < 0 < three["ci95_seeds"][1]
    assert horizon.verdicts({"pairs": {"fixed20 - fixed20-rpp @ steps": three}}, {})[
        "grpo_at_or_above_reinforce_pp_fixed20"]["verdict"] == "inconclusive"
    # ... four equal differences of 0.2 give a zero-width interval at 0.2: reproduced
    four = horizon.paired({s: better for s in range(4)}, {s: worse for s in range(4)}, [0, 1, 2, 3])
    assert horizon.verdicts({"pairs": {"fixed20 - fixed20-rpp @ steps": four}}, {})[
        "grpo_at_or_above_reinforce_pp_fixed20"]["verdict"] == "reproduced"


def test_instability_needs_two_fixed_long_runs_and_the_short_arm():
    stable = {("fixed20", 0): _run([0.12, 0.15, 0.16])}
    assert horizon.verdicts({"pairs": {}}, stable)["fixed_long_unstable_fixed_short_plateaus"]["verdict"] == \
        "inconclusive"
    up = horizon.paired({s: _evaluation([1, 1, 0, 0]) for s in range(2)}, {s: _evaluation([1, 0, 0, 0]) for s in range(2)},
                        [0, 1])
    one = horizon.verdicts({"pairs": {"stepwise - fixed6 @ steps": up}}, {("fixed20", 0): _run([0.12, 0.30, 0.05])})
    assert one["fixed_long_unstable_fixed_short_plateaus"]["verdict"] == "inconclusive"   # one fall is no rule
    collapsed = {("fixed20", s): _run([0.12, 0.30, 0.05]) for s in range(2)}   # peak - final = 0.25 each
    no_short = horizon.verdicts({"pairs": {}}, collapsed)["fixed_long_unstable_fixed_short_plateaus"]
    assert no_short["verdict"] == "inconclusive" and no_short["fixed20_runs_that_fell_10_points"] == 2
    both = horizon.verdicts({"pairs": {"stepwise - fixed6 @ steps": up}}, collapsed)
    assert both["fixed_long_unstable_fixed_short_plateaus"]["verdict"] == "reproduced"
    assert all(v["claim"] and v["rule"] for v in both.values())   # the report states each claim and its rule


def test_the_cut_episode_arms_are_fixed_long_with_one_option_each_at_equal_steps_only():
    study = horizon.Study(preset="smoke")
    base, left_out, discounted = (study.config(a, 0) for a in ("fixed20", *horizon.CUT_ARMS))
    assert (base.cut_out_of_baseline, base.cut_turn_discount) == (False, 1.0)
    assert (left_out.cut_out_of_baseline, left_out.cut_turn_discount) == (True, 1.0)
    assert (discounted.cut_out_of_baseline, discounted.cut_turn_discount) == (False, 0.9)
    assert len({base.run_dir, left_out.run_dir, discounted.run_dir}) == 3
    for arm, setting in ((left_out, "cut_out_of_baseline"), (discounted, "cut_turn_discount")):   # all else: fixed 20's
        assert {k: v for k, v in vars(arm).items() if k not in ("name", "run_dir", setting)} == \
               {k: v for k, v in vars(base).items() if k not in ("name", "run_dir", setting)}
    jobs = horizon.planned(["fixed20", *horizon.CUT_ARMS, "stepwise"], [0, 1], tokens=True)
    assert jobs[:4] == [("fixed20", 0, "steps"), ("stepwise", 0, "steps"), ("fixed20-cut-baseline", 0, "steps"),
                        ("fixed20-cut-discount", 0, "steps")]
    assert [j for j in jobs if j[2] == "tokens"] == [("stepwise", 0, "tokens"), ("stepwise", 1, "tokens")]
    assert not set(horizon.CUT_ARMS) & set(horizon.MAIN_ARMS)   # the main study does not run them by default


@pytest.mark.slow
@pytest.mark.timeout(1800)   # a hang guard: 5.5 min alone, three times that beside two builds
def test_horizon_study_runs_both_budgets_and_reports(tmp_path):
    out = tmp_path / "horizon.json"
    env = {**os.environ, "AGENTGYM_NB_OUTPUTS": str(tmp_path), "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, os.path.join(ROOT, "bench", "horizon.py"), "--preset", "smoke", "--steps", "2",
           "--eval-every", "1", "--eval-items", "4", "--max-steps", "6", "--seeds", "0", "--arms", "fixed20",
           "stepwise", "--out", str(out)]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1200)
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
    assert study["cost"]["runs"] == 2
    # the committed report alone (run folders gone, as on a new machine) gives the same report and needs no run
    os.rename(tmp_path / "runs", tmp_path / "runs-elsewhere")
    again = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1200)
    assert again.returncode == 0, again.stdout[-2000:] + again.stderr[-3000:]
    assert "core 0:" not in again.stdout   # nothing was scheduled
    reread = json.loads(out.read_text())["studies"]["smoke-lr0.0003-steps2-n4"]
    for key in ("runs", "pairs", "verdicts", "arms", "eval_item_ids", "start_model", "cost"):
        assert reread[key] == study[key], key
    # a record made from other start weights (a nano rebuilt elsewhere) is neither continued nor replaced
    record = json.loads(out.read_text())
    record["studies"]["smoke-lr0.0003-steps2-n4"]["start_model"]["sha256"] = "0" * 64
    out.write_text(json.dumps(record))
    for extra in ([], ["--report"]):
        refused = subprocess.run(cmd + extra, env=env, capture_output=True, text=True, timeout=1200)
        assert refused.returncode != 0 and "records 2 runs" in refused.stderr and "other weights" in refused.stderr
        assert json.loads(out.read_text()) == record
    # on a fresh machine the start model is built before the record is read, and said so before the build
    os.rename(tmp_path / "models", tmp_path / "models-elsewhere")
    fresh = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1200)
    assert fresh.returncode != 0 and "other weights" in fresh.stderr, fresh.stdout[-2000:] + fresh.stderr[-3000:]
    assert "records 2 runs started from nano-babyai-smoke-" in fresh.stdout and "building it first" in fresh.stdout
    assert (tmp_path / "models" / record["studies"]["smoke-lr0.0003-steps2-n4"]["start_model"]["name"]
            / "build.json").exists()
    assert json.loads(out.read_text()) == record and not (tmp_path / "runs").exists()


@pytest.mark.skipif(not os.path.exists("/proc/self/autogroup"), reason="no autogroup scheduling on this kernel")
def test_a_study_run_lowers_its_own_sessions_priority_and_never_the_callers():
    """The study's runs must yield the CPU to a test suite started from another shell, which `nice` alone does not
    do under autogroup scheduling; and a run must not lower the priority of the session that started it."""
    probe = ("import sys; sys.path.insert(0, %r); from _common import yield_cpu; print(yield_cpu()); "
             "print(open('/proc/self/autogroup').read())" % os.path.join(ROOT, "bench"))
    own = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, start_new_session=True,
                         check=True).stdout
    if "autogroup not set" in own:   # e.g. a container whose /proc is read-only: nothing to test there
        pytest.skip(own.splitlines()[0])
    assert own.startswith("nice 19, autogroup nice 19") and own.rstrip().endswith("nice 19")
    mine = open("/proc/self/autogroup").read()
    shared = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert shared.startswith("nice 19 (autogroup left alone")
    assert open("/proc/self/autogroup").read() == mine   # the caller's autogroup priority is unchanged


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_ctrl_c_of_the_study_stops_its_runs_too(tmp_path):
    """Runs start in sessions of their own (to lower their own priority), so a Ctrl-C at the terminal reaches only
    the scheduler; it must stop them rather than leave them training unseen."""
    import signal
    import time

    import psutil
    env = {**os.environ, "AGENTGYM_NB_OUTPUTS": str(tmp_path), "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, os.path.join(ROOT, "bench", "horizon.py"), "--preset", "smoke", "--steps", "40",
           "--eval-items", "4", "--seeds", "0", "--arms", "fixed20", "--no-tokens", "--out", str(tmp_path / "h.json")]
    # a suite started in the background of a non-interactive shell inherits SIGINT ignored, and Python then installs no
    # Ctrl-C handler at all: give the study the terminal's default, which is what this test is about
    study = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                             preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    for line in study.stdout:   # the nano is built first, then the run starts
        if "core 0:" in line:
            break
    time.sleep(2)
    runs = psutil.Process(study.pid).children()
    assert runs and all(os.getsid(r.pid) == r.pid for r in runs)   # each run leads a session of its own
    study.send_signal(signal.SIGINT)
    study.wait(timeout=60)
    gone, alive = psutil.wait_procs(runs, timeout=60)
    assert not alive, f"runs still alive after the study stopped: {[p.pid for p in alive]}"


def test_the_study_cost_counts_each_run_to_its_furthest_budget_point_and_every_evaluation():
    runs = {("stepwise", 0): {"points": {"steps": {"train_seconds": 3600.0}, "tokens": {"train_seconds": 5400.0}},
                              "evals": {"0/20": {"seconds": 900.0}, "60/20": {"seconds": 900.0}}},
            ("fixed20", 0): {"points": {"steps": {"train_seconds": 1800.0}}, "evals": {"60/40": {"seconds": 1800.0}}}}
    assert horizon.cost(runs) == {"runs": 2, "train_core_hours": 2.0, "eval_core_hours": 1.0}


def test_per_item_outcomes_pack_into_a_string_and_back():
    ids = ["3", "40", "7"]
    packed = horizon._pack({"3": 1.0, "40": 0.0, "7": 1.0}, ids)
    assert packed == "101"
    assert horizon._unpack(packed, ids) == {"3": 1.0, "40": 0.0, "7": 1.0}
    partial = {"3": 0.5, "40": 0.0, "7": 1.0}   # a fractional outcome (several samples per item) stays a dict
    assert horizon._pack(partial, ids) == partial and horizon._unpack(partial, ids) == partial


def test_every_study_arm_has_a_label_and_a_colour_in_the_figures():
    from agentgym_nb.viz import study
    assert set(study.ARM_LABELS) == set(horizon.ARMS) == set(study.ARM_COLORS)
    assert {arm for arms in study.ARM_GROUPS.values() for arm in arms} == set(horizon.ARMS)   # every arm is drawn
