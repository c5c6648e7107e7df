"""The horizon study's figures compute what they draw from the report's study block (hand-made here)."""
import json

import matplotlib
import pytest

matplotlib.use("Agg")

from agentgym_nb.viz import study  # noqa: E402
from agentgym_nb.viz.plots import established  # noqa: E402


def block():
    def run(arm, seed, curve):
        return {"arm": arm, "seed": seed, "eval_horizon": 20, "curve_h20": curve}
    return {
        "settings": {"steps": 10},
        "runs": {"fixed20/s0": run("fixed20", 0, [(0, 0, 0.1), (10, 100, 0.2)]),
                 "fixed20/s1": run("fixed20", 1, [(0, 0, 0.1), (10, 120, 0.3), (20, 150, 0.3)]),
                 "fixed6/s0": run("fixed6", 0, [(0, 0, 0.1), (10, 40, 0.15)])},
        "pairs": {"fixed20 - fixed6 @ steps": {"mean": 0.05, "seeds": [0], "ci95_seeds": [0.05, 0.05],
                                               "ci95_items": [-0.01, 0.11]},
                  "stepwise - fixed6 @ tokens": {"mean": -0.1, "seeds": [0, 1], "ci95_seeds": [-0.3, 0.1],
                                                 "ci95_items": [-0.2, 0.0]}},
        "arms": {"fixed20": {"steps": {"trained_horizon": [20], "success_at_trained_horizon": {
            "0.5x": [0.1, 0.05, 0.15], "1x": [0.25, 0.2, 0.3], "2x": [0.3, 0.2, 0.4]}}}},
    }


def test_heldout_curve_averages_the_steps_every_seed_has():
    xs, mean, lo, hi = study.heldout_curve(block(), "fixed20")
    assert xs.tolist() == [0, 10]                      # step 20 only seed 1 has
    assert mean.tolist() == pytest.approx([0.1, 0.25])
    # two seeds, 0.2 and 0.3: s = 0.0707, t(1) = 12.706, half width 0.635, clipped to [0, 1]
    assert lo[1] == 0.0 and hi[1] == pytest.approx(0.25 + 12.706 * 0.070711 / 2 ** 0.5, abs=1e-4)
    tokens, _, _, _ = study.heldout_curve(block(), "fixed20", x="tokens")
    assert tokens.tolist() == [0, 110]
    with pytest.raises(KeyError, match="no run of arm 'stepwise'"):
        study.heldout_curve(block(), "stepwise")


def test_forest_rows_keep_one_budget():
    rows = study.forest_rows(block(), "tokens")
    assert [r["label"] for r in rows] == ["stepwise - fixed6"] and rows[0]["seeds"] == 2
    assert rows[0]["ci_seeds"] == [-0.3, 0.1]


def test_figures_draw_their_numbers(tmp_path):
    fig = study.plot_heldout_curves(block(), path=str(tmp_path / "curves.png"))
    lines = {line.get_label(): list(line.get_ydata()) for line in fig.axes[0].lines}
    assert lines["fixed H = 20 (2 seeds)"] == pytest.approx([0.1, 0.25])
    assert (tmp_path / "curves.png").exists()
    fig = study.plot_forest(block(), "steps")
    assert [t.get_text() for t in fig.axes[0].get_yticklabels()] == ["fixed20 - fixed6"]
    fig = study.plot_eval_horizons(block())
    assert list(fig.axes[0].lines[0].get_ydata()) == pytest.approx([0.1, 0.25, 0.3])


def test_a_pair_is_coloured_as_established_only_over_two_or_more_seeds():
    one_seed = {"seeds": 1, "ci_seeds": [0.063, 0.063]}      # a point, not an interval: it misses 0 by accident
    assert study.forest_color(one_seed) == "C7"
    assert study.forest_color({"seeds": 3, "ci_seeds": [0.01, 0.11]}) == "C2"
    assert study.forest_color({"seeds": 3, "ci_seeds": [-0.09, -0.02]}) == "C3"
    assert study.forest_color({"seeds": 3, "ci_seeds": [-0.02, 0.07]}) == "C7"
    assert study.forest_color({"seeds": 2, "ci_seeds": [0.0, 0.07]}) == "C7"   # touching 0 is not missing it


def test_a_missing_report_says_how_to_make_it(tmp_path):
    with pytest.raises(FileNotFoundError, match="bench/horizon.py --jobs 2"):
        study.load_study(path=str(tmp_path / "horizon.json"))


def test_arms_that_have_not_finished_a_run_are_left_out_of_the_curves():
    fig = study.plot_heldout_curves(block(), ["fixed6", "stepwise", "fixed20"])   # no stepwise run yet
    assert [line.get_label() for line in fig.axes[0].lines if not line.get_label().startswith("_")] == [
        "fixed H = 6 (1 seed)", "fixed H = 20 (2 seeds)"]


def test_a_comparison_is_drawn_once_an_arm_of_its_own_has_runs():
    """fixed 6 and fixed 20 make the schedules' panel; the REINFORCE++ panel would draw the same GRPO runs again until
    an REINFORCE++ run exists."""
    b = block()
    assert list(study.drawn_groups(b)) == ["horizon schedules, GRPO"]
    b["runs"]["fixed20-rpp/s0"] = {"arm": "fixed20-rpp", "seed": 0, "eval_horizon": 20, "curve_h20": [(0, 0, 0.1)]}
    assert list(study.drawn_groups(b)) == ["horizon schedules, GRPO", "GRPO against REINFORCE++"]
    del b["runs"]["fixed6/s0"], b["runs"]["fixed20/s1"]   # one schedule left: nothing to compare it with
    assert list(study.drawn_groups(b)) == ["GRPO against REINFORCE++"]


def test_established_needs_an_interval_over_two_seeds_that_misses_0():
    assert established(0.01, 0.11, seeds=3) == 1
    assert established(-0.09, -0.02, seeds=3) == -1
    assert established(-0.02, 0.07, seeds=3) == 0
    assert established(0.0, 0.07, seeds=2) == 0        # touching 0 is not missing it
    assert established(0.063, 0.063, seeds=1) == 0     # one seed: t_interval's point, not an interval


def test_the_equal_tokens_end_is_read_at_each_seeds_own_step():
    """Seeds reach the token budget at different steps (here 70 and 80): the common-step curve stops at 60, and
    budget_end reads each seed's own end point."""
    def run(seed, curve, end_step):
        return {"arm": "fixed6", "seed": seed, "eval_horizon": 20, "curve_h20": curve,
                "points": {"steps": {"step": 60}, "tokens": {"step": end_step}}}
    b = {"settings": {"steps": 60}, "pairs": {}, "arms": {},
         "runs": {"fixed6/s0": run(0, [(0, 0, 0.1), (60, 300, 0.2), (70, 360, 0.3)], 70),
                  "fixed6/s1": run(1, [(0, 0, 0.1), (60, 320, 0.2), (80, 400, 0.5)], 80)}}
    assert study.heldout_curve(b, "fixed6")[0].tolist() == [0, 60]
    step, mean, lo, hi = study.budget_end(b, "fixed6")
    assert (step, mean) == pytest.approx((75, 0.4))
    # 0.3 and 0.5: s = 0.1414, t(1) = 12.706, half width 1.27, clipped to [0, 1]
    assert (lo, hi) == (0.0, 1.0)
    assert study.budget_end(b, "fixed6", x="tokens")[0] == pytest.approx(380)
    assert study.budget_end(b, "fixed6", "none") is None and study.budget_end(block(), "fixed20") is None
    fig = study.plot_heldout_curves(b, x="tokens")
    diamonds = [line for line in fig.axes[0].lines if line.get_marker() == "D"]
    assert len(diamonds) == 1 and list(diamonds[0].get_xdata()) == [380] and list(diamonds[0].get_ydata()) == [0.4]


def sweep_studies():
    def study_block(lr, runs, steps=60):
        return {"lr": lr, "settings": {"lr": lr, "steps": steps, "preset": "cpu"}, "runs": runs}

    def run(arm, heldout, rounds, kl):
        return {"arm": arm, "seed": 0, "eval_horizon": 20, "curve_h20": [(s, 0, y) for s, y in heldout],
                "steps": [{"step": i + 1, "max_rounds": h, "kl": k, "cut_by_horizon": 0.5}
                          for i, (h, k) in enumerate(zip(rounds, kl))]}
    studies = {
        study.MAIN_STUDY: study_block(3e-4, {"fixed20/s0": run("fixed20", [(0, 0.06), (10, 0.12)], [20] * 3,
                                                                [0.0, 0.01, 0.02])}),
        "cpu-lr0.001-steps60-n4": study_block(1e-3, {
            "fixed20/s0": run("fixed20", [(0, 0.06), (10, 0.01)], [20] * 3, [0.0, 0.5, 2.0]),
            "stepwise/s0": run("stepwise", [(0, 0.06), (10, 0.03)], [6, 13, 13], [0.0, 0.1, 0.4]),
            "stepwise/s1": run("stepwise", [(0, 0.09)], [6], [0.0])}),
        "cpu-lr0.001-steps30-n4": study_block(1e-3, {"fixed20/s0": run("fixed20", [(0, 0.5)], [20], [0.0])},
                                              steps=30),   # another budget: not part of the sweep
    }
    return studies


def test_the_lr_sweep_reads_each_learning_rate_of_the_same_study():
    studies = sweep_studies()
    rows = study.lr_sweep_runs(studies)
    assert [(r["lr"], r["arm"]) for r in rows] == [(3e-4, "fixed20"), (1e-3, "fixed20"), (1e-3, "stepwise")]
    assert rows[1]["heldout"] == [(0, 0.06), (10, 0.01)] and rows[1]["kl"][-1] == (3, 2.0)
    assert rows[2]["horizon_grows_at"] == [2] and rows[1]["horizon_grows_at"] == []
    fig = study.plot_lr_sweep(studies, smooth_window=2)
    kl = {line.get_label(): list(line.get_ydata()) for line in fig.axes[1].lines if not line.get_label().startswith("_")}
    # the first step's KL (0) is left out, then a trailing mean of 2 steps: 0.5, (0.5 + 2.0) / 2
    assert kl["fixed H = 20, lr 0.001"] == pytest.approx([0.5, 1.25])
    with pytest.raises(KeyError, match="no run of fixed20 with seed 5"):
        study.plot_lr_sweep(studies, arms=("fixed20",), seed=5)


def test_the_lr_sweep_table_by_hand():
    rows = study.lr_sweep_table(sweep_studies())
    assert [(r["arm"], r["lr"]) for r in rows] == [("fixed H = 20", "0.0003"), ("fixed H = 20", "0.001"),
                                                   ("stepwise 6 -> 13 -> 20", "0.001")]
    # steps 1-3 of a 60-step study all fall in its first third: (step - 1) * 3 // 60 = 0
    assert rows[1] == {"arm": "fixed H = 20", "lr": "0.001", "steps": 10,
                       "held-out: start -> peak -> end": "0.060 -> 0.060 -> 0.010",
                       "mean KL, each third of training": "0.83 / - / -", "largest KL": 2.0}


def test_each_verdict_with_its_rule_and_numbers():
    diff = {"seeds": [0, 1, 2], "mean": 0.02, "ci95_seeds": [-0.011, 0.051], "ci95_items": [0.004, 0.036]}
    b = {"verdicts": {
        "fixed_long_unstable": {"claim": "fixed long is unstable", "rule": "a fall of 10 points", "verdict":
                                "not reproduced", "fixed20_peak_minus_final": diff, "per_seed": [{"seed": 0}]},
        "stepwise_fewer_tokens": {"claim": "fewer tokens", "rule": "a ratio below 1", "verdict": "inconclusive",
                                  "target_success": 0.10666, "tokens_ratio_stepwise_over_fixed20": [0.72, 0.2, 2.54],
                                  "ci95_items_of_the_tokens_ratio": [0.32, 1.53], "stepwise_stayed_below_target": [],
                                  "missing_pairs": ["stepwise - fixed6 @ tokens"]}}}
    rows = study.verdict_rows(b)
    assert [r["name"] for r in rows] == ["fixed_long_unstable", "stepwise_fewer_tokens"]
    assert rows[0] == {"name": "fixed_long_unstable", "claim": "fixed long is unstable", "verdict": "not reproduced",
                       "rule": "a fall of 10 points", "numbers": "fixed20 peak minus final: +0.020 [-0.011, +0.051] "
                                                                 "over 3 seeds, [+0.004, +0.036] over items"}
    assert rows[1]["numbers"] == ("target success: 0.107; tokens ratio stepwise over fixed20: 0.72 [0.20, 2.54]; ci95 "
                                  "items of the tokens ratio: [0.32, 1.53]; missing pairs: stepwise - fixed6 @ tokens")
    assert [r["name"] for r in study.verdict_rows(b, ["stepwise_fewer_tokens"])] == ["stepwise_fewer_tokens"]
    with pytest.raises(KeyError, match="judges no claim \\['fixed_long_unstable_fixed_short_plateaus'\\]"):
        study.verdict_rows(b, ["fixed_long_unstable_fixed_short_plateaus"])


def test_the_committed_report_judges_the_two_fixed_horizon_claims_apart():
    rows = study.verdict_rows(study.load_study(path=study.RESULT), ["fixed_long_unstable", "fixed_short_plateaus"])
    assert all(r["verdict"] in ("reproduced", "not reproduced", "inconclusive") and r["rule"] and r["numbers"]
               for r in rows)


def test_the_default_report_is_the_study_from_the_committed_start_once_it_pairs_three_seeds(tmp_path, monkeypatch):
    path = tmp_path / "horizon_study.json"
    monkeypatch.setattr(study, "STUDY_RESULT", str(path))
    assert study.default_report() == study.RESULT                  # not there yet
    path.write_text(json.dumps({"studies": {study.MAIN_STUDY: {"runs": {"fixed6/s0": {}}, "pairs": {}}}}))
    assert study.default_report() == study.RESULT                  # a run, but nothing paired: no interval to read
    two = {"stepwise - fixed6 @ steps": {"seeds": [0, 1]}}
    path.write_text(json.dumps({"studies": {study.MAIN_STUDY: {"runs": {"fixed6/s0": {}}, "pairs": two}}}))
    assert study.default_report() == study.RESULT                  # two seeds: fewer than the rules' min_seeds
    three = {"stepwise - fixed6 @ steps": {"seeds": [0, 1, 2]}}
    path.write_text(json.dumps({"studies": {study.MAIN_STUDY: {"runs": {"fixed6/s0": {}}, "pairs": three}}}))
    assert study.default_report() == str(path)
