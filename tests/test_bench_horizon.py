"""The horizon study (agentgym_nb/study/, its command line bench/horizon.py): the verdict rules on hand-made curves,
the README's table of a report, the committed start model and its refusals, and the study end to end at the smoke
preset: real training runs in their own processes from a committed copy of a smoke build, the equal-steps and
equal-tokens points, the evaluations and pass@(k, T) surfaces, the report carried to a machine without the run
folders, a run stopped mid-way that resumes from its checkpoint, and the GPU pilot's path on the CPU."""
import json
import os
import subprocess
import sys

import pytest

from agentgym_nb.study.report import _pack, _unpack, arm_surface, cost, decided_by, readme_table, report
from agentgym_nb.study.runs import surface_horizons
from agentgym_nb.study.scheduler import planned, start_run
from agentgym_nb.study.settings import (ARMS, CUT_ARMS, MAIN_ARMS, RULES, START_DIRS, Study, commit_start, read_start,
                                        track_nano)
from agentgym_nb.study.verdicts import (fixed_long_unstable, fixed_short_plateaus, paired, stepwise_fewer_tokens,
                                        verdicts)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

SCRIPT = os.path.join(ROOT, "bench", "horizon.py")
KEY = "smoke-lr0.0003-steps2-n4"


def _evaluation(success_by_item: list[float]) -> dict:
    return {"success": sum(success_by_item) / len(success_by_item),
            "items": {str(i): y for i, y in enumerate(success_by_item)}}


def _items(y: float, m: int = 10) -> list[float]:
    """m items of which the first round(y * m) succeed."""
    return [float(i < round(y * m)) for i in range(m)]


def _run(curve: list[float], every: int = 10, tokens: int = 1000, end: int | None = None) -> dict:
    """A run whose held-out curve (H = 20) is `curve` at steps 0, every, 2 every, ... on 10 items, `tokens` policy
    tokens per point; its equal-steps point is its last point (or step `end`)."""
    steps = [every * i for i in range(len(curve))]
    end = steps[-1] if end is None else end
    return {"eval_horizon": 20, "steps": [{"kl": 0.01}], "points": {"steps": {"step": end}},
            "curve_h20": [(s, tokens * i, y) for i, (s, y) in enumerate(zip(steps, curve))],
            "evals": {f"{s}/20": {"step": s, "success": y, "items": {str(i): v for i, v in enumerate(_items(y))}}
                      for s, y in zip(steps, curve)}}


def _pair(lo: float, hi: float, seeds: int = 3) -> dict:
    return {"seeds": list(range(seeds)), "mean": (lo + hi) / 2, "ci95_seeds": [lo, hi], "ci95_items": [lo, hi]}


def test_one_seed_or_two_tied_seeds_establish_no_difference():
    """A single seed's t-interval is the point itself, and two seeds that tie give a zero-width interval: neither
    says anything, so a verdict needs RULES["min_seeds"] = 3."""
    better, worse = _evaluation([1, 1, 0, 0, 0]), _evaluation([1, 0, 0, 0, 0])
    one = paired({0: better}, {0: worse}, [0])
    assert one["ci95_seeds"] == [0.2, 0.2]
    judged = verdicts({"fixed20 - fixed20-rpp @ steps": one}, {}, 60)
    assert judged["grpo_at_or_above_reinforce_pp_fixed20"]["verdict"] == "inconclusive"
    two = paired({s: better for s in range(2)}, {s: worse for s in range(2)}, [0, 1])
    assert two["ci95_seeds"] == [0.2, 0.2]
    assert verdicts({"fixed20 - fixed20-rpp @ steps": two}, {}, 60)[
        "grpo_at_or_above_reinforce_pp_fixed20"]["verdict"] == "inconclusive"
    # three seeds: per-seed differences 0.2, 0.4, 0.2 -> mean 0.267, t(2) = 4.303, s = 0.115, half width 4.303 *
    # 0.115 / sqrt(3) = 0.287: the interval [-0.02, 0.55] covers 0 ...
    best = _evaluation([1, 1, 1, 0, 0])
    three = paired({0: better, 1: best, 2: better}, {0: worse, 1: worse, 2: worse}, [0, 1, 2])
    assert three["ci95_seeds"][0] == pytest.approx(0.2667 - 0.2868, abs=1e-3) and three["ci95_seeds"][0] < 0
    assert verdicts({"fixed20 - fixed20-rpp @ steps": three}, {}, 60)[
        "grpo_at_or_above_reinforce_pp_fixed20"]["verdict"] == "inconclusive"
    # ... three equal differences of 0.2 do establish it (an interval of zero width over three seeds is no tie)
    equal = paired({s: better for s in range(3)}, {s: worse for s in range(3)}, [0, 1, 2])
    assert verdicts({"fixed20 - fixed20-rpp @ steps": equal}, {}, 60)[
        "grpo_at_or_above_reinforce_pp_fixed20"]["verdict"] == "reproduced"


def test_fixed_long_is_unstable_when_it_falls_ten_points_beyond_the_noise_of_a_peak():
    def judged(curves):
        return fixed_long_unstable({("fixed20", s): _run(c) for s, c in enumerate(curves)})

    fell = judged([[0.1, 0.4, 0.1]] * 3)   # peak 0.4 at step 10, final 0.1: a fall of 0.3 in every seed
    assert fell["verdict"] == "reproduced"
    assert fell["fixed20_peak_minus_final"]["ci95_seeds"] == pytest.approx([0.3, 0.3])
    assert [s["peak_step"] for s in fell["per_seed"]] == [10, 10, 10]
    flat = judged([[0.1, 0.2, 0.2]] * 3)   # the earliest of tied peaks: step 10, a fall of 0
    assert flat["verdict"] == "not reproduced" and flat["fixed20_peak_minus_final"]["mean"] == 0
    # falls 0.3, 0, 0: mean 0.1, s = 0.173, half width 4.303 * 0.173 / sqrt(3) = 0.43: [-0.33, +0.53]
    mixed = judged([[0.1, 0.4, 0.1], [0.1, 0.2, 0.2], [0.1, 0.2, 0.2]])
    assert mixed["verdict"] == "inconclusive"
    assert mixed["fixed20_peak_minus_final"]["ci95_seeds"] == pytest.approx([0.1 - 0.4303, 0.1 + 0.4303], abs=1e-3)
    assert judged([[0.1, 0.4, 0.1]] * 2)["verdict"] == "inconclusive"   # two seeds
    assert "10 points" in fell["rule"] and "5 points" in fell["rule"]   # the rule in words, with its numbers


def test_fixed_short_plateaus_when_its_second_half_gains_nothing_and_fixed_long_ends_above_it():
    above, level = _pair(0.05, 0.10), _pair(-0.02, 0.10)

    def judged(curve, long_minus_short):
        runs = {("fixed6", s): _run(curve) for s in range(3)}   # 20 steps: the middle is step 10
        return fixed_short_plateaus(runs, {"fixed20 - fixed6 @ steps": long_minus_short}, 20)["verdict"]

    assert judged([0.1, 0.2, 0.2], above) == "reproduced"        # gain 0 from step 10 to 20 in every seed
    assert judged([0.1, 0.2, 0.2], level) == "inconclusive"      # a plateau, but not below fixed 20
    assert judged([0.1, 0.2, 0.3], above) == "not reproduced"    # still rising: +0.1 in every seed
    assert judged([0.1, 0.2, 0.2], _pair(-0.10, -0.05)) == "not reproduced"   # fixed 6 ends above fixed 20
    assert fixed_short_plateaus({}, {}, 20)["verdict"] == "inconclusive"


def test_stepwise_needs_fewer_tokens_by_the_ratio_of_tokens_to_a_target():
    fixed20 = [0.1, 0.2, 0.3]   # tokens 0, 1000, 2000
    stepwise = [0.1, 0.3, 0.3]  # tokens 0, 500, 1000
    runs = {}
    for s in range(3):
        runs["fixed20", s] = _run(fixed20)
        runs["stepwise", s] = _run(stepwise, tokens=500)
    v = stepwise_fewer_tokens(runs, resamples=300)
    # target 0.8 x 0.3 = 0.24; fixed 20 reaches it at 1000 + 1000 x 0.04 / 0.1 = 1400 tokens, stepwise at
    # 500 x 0.14 / 0.2 = 350: ratio 0.25 in every seed
    assert v["target_success"] == pytest.approx(0.24)
    assert [(x["stepwise_tokens"], x["fixed20_tokens"]) for x in v["per_seed"]] == [pytest.approx((350, 1400))] * 3
    assert v["tokens_ratio_stepwise_over_fixed20"] == pytest.approx([0.25] * 3)
    assert v["verdict"] == "reproduced"
    lo, hi = v["ci95_items_of_the_tokens_ratio"]
    assert lo <= 0.25 <= hi and hi < 1
    runs["fixed20", 3], runs["stepwise", 3] = _run(fixed20), _run([0.1, 0.1, 0.1], tokens=500)
    stuck = stepwise_fewer_tokens(runs, resamples=300)   # seed 3's stepwise never reaches the target
    assert stuck["stepwise_stayed_below_target"] == [3] and stuck["verdict"] == "inconclusive"


def test_stepwise_at_or_above_both_needs_both_pairs_at_its_budget():
    pairs = {"stepwise - fixed6 @ steps": _pair(0.01, 0.05), "stepwise - fixed20 @ steps": _pair(0.01, 0.03),
             "stepwise - fixed20 @ tokens": _pair(0.01, 0.03)}
    v = verdicts(pairs, {}, 60)
    assert v["stepwise_at_or_above_both_steps"]["verdict"] == "reproduced"
    tokens = v["stepwise_at_or_above_both_tokens"]
    assert tokens["verdict"] == "inconclusive" and tokens["missing_pairs"] == ["stepwise - fixed6 @ tokens"]
    pairs["stepwise - fixed20 @ steps"] = _pair(-0.05, -0.01)
    assert verdicts(pairs, {}, 60)["stepwise_at_or_above_both_steps"]["verdict"] == "not reproduced"
    assert all(v["claim"] and v["rule"] and v["verdict"] for v in v.values())   # each states its claim and rule


def _recorded(arm: str, seed: int, curve: list[float], tokens: int, tokens_point: int | None = None) -> dict:
    """A run as a committed report records it (held-out at H = 20 every 10 steps, `tokens` policy tokens per point),
    with its equal-tokens point at its last step having sampled `tokens_point` tokens."""
    run = _run(curve, tokens=tokens)
    end = run["points"]["steps"]["step"]

    def point(sampled):
        return {"step": end, "trained_horizon": 20, "sampled_tokens": sampled, "train_seconds": 60.0}
    run["points"] = {"steps": point(tokens * (len(curve) - 1))}
    if tokens_point:
        run["points"]["tokens"] = point(tokens_point)
    for e in run["evals"].values():
        e.update(horizon=20, seconds=1.0)
    return {**run, "arm": arm, "seed": seed, "run": f"{arm}-s{seed}", "algorithm": "grpo",
            "made": [{"device": "cpu", "wall_seconds": 90.0}]}


def test_the_readme_table_is_the_reports_numbers_arm_by_budget_with_its_pairs_and_verdicts(tmp_path, monkeypatch):
    """A report block made by report() from recorded runs (3 seeds, each seed alike, so every interval over seeds has
    zero width): the table's rows are its numbers, and the same after a trip through JSON (the README's table is
    made from the committed JSON)."""
    monkeypatch.setenv("AGENTGYM_NB_OUTPUTS", str(tmp_path))   # no run folder: every run comes from the record
    study = Study(steps=20, start_sha256="ab" * 32)
    recorded = {}
    for seed in range(3):
        recorded["fixed6", seed] = _recorded("fixed6", seed, [0.1, 0.2, 0.2], tokens=300)
        recorded["fixed20", seed] = _recorded("fixed20", seed, [0.1, 0.2, 0.3], tokens=1000)
        recorded["stepwise", seed] = _recorded("stepwise", seed, [0.1, 0.3, 0.3], tokens=500, tokens_point=2000)
    block = report(study, list(ARMS), list(range(8)), recorded, {"name": "test", "sha256": "ab" * 32})
    table = readme_table(block)
    lines = table.splitlines()
    assert lines[0].startswith("9 runs from start weights sha256 abababababab..., lr 0.0003, 20 steps")
    assert "held-out success on 10 items at H = 20" in lines[0]
    rows = lines[4:lines.index("", 4)]   # below the caption, a blank line, the header and its rule
    assert rows == ["| fixed6 | equal steps | 20.0% [20.0, 20.0] | 3 | 600 |",
                    "| fixed20 | equal steps | 30.0% [30.0, 30.0] | 3 | 2,000 |",
                    "| fixed20 | equal tokens (its equal-steps point) | 30.0% [30.0, 30.0] | 3 | 2,000 |",
                    "| stepwise | equal steps | 30.0% [30.0, 30.0] | 3 | 1,000 |",
                    "| stepwise | equal tokens | 30.0% [30.0, 30.0] | 3 | 2,000 |"]
    pairs = [line for line in lines if line.startswith("| stepwise - ")]
    assert [line.split(" | ")[:3] for line in pairs] == [
        ["| stepwise - fixed6", "equal steps", "+10.0 [+10.0, +10.0]"],   # fixed 6 has no equal-tokens point
        ["| stepwise - fixed20", "equal steps", "+0.0 [+0.0, +0.0]"],
        ["| stepwise - fixed20", "equal tokens", "+0.0 [+0.0, +0.0]"]]
    items = block["pairs"]["stepwise - fixed6 @ steps"]["ci95_items"]
    # every seed alike: no spread, so two seeds would give a +/- 3-point interval
    assert pairs[0].endswith(f"| [{100 * items[0]:+.1f}, {100 * items[1]:+.1f}] | 3 | 2 |")
    verdict_lines = [line for line in lines if line.startswith("- ")]
    assert len(verdict_lines) == len(block["verdicts"])
    assert "stepwise ends at or above both fixed horizons, equal steps: **inconclusive** (stepwise minus fixed6 " \
           "+10.0 [+10.0, +10.0] points over 3 seeds; stepwise minus fixed20 +0.0 [+0.0, +0.0] points over 3 " \
           "seeds)" in verdict_lines[3]
    # target 0.8 x 0.3: fixed 20 reaches it at 1,400 tokens, stepwise at 350
    assert verdict_lines[2].endswith("**reproduced** (tokens stepwise / fixed20 to reach 24.0% held-out: 0.25 "
                                     "[0.25, 0.25] over 3 seeds)")
    assert readme_table(json.loads(json.dumps(block))) == table


def test_an_arms_surface_is_the_mean_over_seeds_at_horizons_relative_to_the_trained_one():
    def surface(trained, horizons, rows, ci=None):
        return {"trained_horizon": trained, "horizons": horizons, "k": [1, 2], "n": 16, "items": 5, "pass@k": rows,
                "ci": ci or [[[0, 1]] * 2] * len(rows)}

    long = arm_surface([surface(20, [10, 20, 40], [[.1, .2], [.2, .3], [.3, .4]]),
                                surface(20, [10, 20, 40], [[.3, .4], [.4, .5], [.5, .6]])], 20)
    assert long["horizons"] == ["0.5x", "1x", "2x"] and long["T"] == {"0.5x": [10], "1x": [20], "2x": [40]}
    assert [r == pytest.approx(w) for r, w in zip(long["pass@k"], [[.2, .3], [.3, .4], [.4, .5]])] == [True] * 3
    assert long["seeds"] == 2
    # two seeds 0.2 apart: half width t(1) x s / sqrt(2) = 12.706 x 0.1414 / 1.414 = 1.27, clipped to [0, 1]
    assert long["ci"][0][0] == [0, 1]
    short = arm_surface([surface(6, surface_horizons(6, 20), [[.1, .1]] * 4)] * 3, 20)
    assert short["horizons"] == ["0.5x", "1x", "2x", "H = 20"] and short["T"]["H = 20"] == [20]
    assert short["ci"][3][1] == pytest.approx([.1, .1])   # three equal seeds: a zero-width interval
    assert short["interval"] == "over seeds"
    # one seed has no spread over seeds: the band is its own bootstrap interval over items
    one = arm_surface([surface(20, [10, 20, 40], [[.1, .2], [.2, .3], [.3, .4]],
                               ci=[[[.0, .2], [.1, .3]], [[.1, .3], [.2, .4]], [[.2, .4], [.3, .5]]])], 20)
    assert one["pass@k"] == [[.1, .2], [.2, .3], [.3, .4]] and one["ci"][2] == [[.2, .4], [.3, .5]]
    assert (one["seeds"], one["interval"]) == (1, "over items (one seed)")
    assert arm_surface([], 20) is None


def test_the_cut_episode_arms_are_fixed_long_with_one_option_each_at_equal_steps_only():
    study = Study(preset="smoke", start_sha256="ab" * 32)
    base, left_out, discounted = (study.config(a, 0) for a in ("fixed20", *CUT_ARMS))
    assert (base.cut_out_of_baseline, base.cut_turn_discount) == (False, 1.0)
    assert (left_out.cut_out_of_baseline, left_out.cut_turn_discount) == (True, 1.0)
    assert (discounted.cut_out_of_baseline, discounted.cut_turn_discount) == (False, 0.9)
    assert len({base.run_dir, left_out.run_dir, discounted.run_dir}) == 3
    for arm, setting in ((left_out, "cut_out_of_baseline"), (discounted, "cut_turn_discount")):   # all else: fixed 20's
        assert {k: v for k, v in vars(arm).items() if k not in ("name", "run_dir", setting)} == \
               {k: v for k, v in vars(base).items() if k not in ("name", "run_dir", setting)}
    jobs = planned(["fixed20", *CUT_ARMS, "stepwise"], [0, 1], ["stepwise"], surfaces=True)
    assert jobs[:4] == [("fixed20", 0, "steps"), ("stepwise", 0, "steps"), ("fixed20-cut-baseline", 0, "steps"),
                        ("fixed20-cut-discount", 0, "steps")]
    assert [j for j in jobs if j[2] == "tokens"] == [("stepwise", 0, "tokens"), ("stepwise", 1, "tokens")]
    assert jobs.index(("stepwise", 0, "tokens")) < jobs.index(("fixed20", 1, "steps"))   # whole seeds first
    assert jobs[-8:] == [(a, s, "surface") for s in (0, 1) for a in ("fixed20", "stepwise", *CUT_ARMS)]
    assert not set(CUT_ARMS) & set(MAIN_ARMS)   # the main study does not run them by default


def test_a_runs_name_carries_its_start_weights_and_its_engine_not_its_threads():
    study = Study(start_sha256="ab" * 32, start_dir="/somewhere/nano")
    cfg = study.config("stepwise", 0)
    assert cfg.model == "/somewhere/nano" and cfg.threads == 1
    other_weights = Study(start_sha256="cd" * 32, start_dir="/somewhere/nano").config("stepwise", 0)
    elsewhere = Study(start_sha256="ab" * 32, start_dir="/elsewhere/nano").config("stepwise", 0)
    assert other_weights.name != cfg.name and elsewhere.name == cfg.name
    on_gpu = Study(start_sha256="ab" * 32, device="cuda", threads=4).config("stepwise", 0)
    assert on_gpu.engine == "hf" and on_gpu.threads == 4 and on_gpu.name != cfg.name
    assert {k: v for k, v in vars(on_gpu).items() if k not in ("name", "engine", "threads", "model")} == \
           {k: v for k, v in vars(cfg).items() if k not in ("name", "engine", "threads", "model")}
    assert Study().settings() == {"lr": 3e-4, "steps": 60, "eval_every": 10, "eval_items": 300,
                                          "max_steps": 240, "samples_per_prompt": 4, "preset": "cpu"}


def test_cuda_runs_get_cores_of_their_own_and_cpu_runs_see_no_gpu(tmp_path):
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs two cores")
    probe = [sys.executable, "-c", "import os; print(sorted(os.sched_getaffinity(0)), os.environ['OMP_NUM_THREADS'])"]
    second = start_run(probe, 1, Study(device="cuda", threads=1), 2, stdout=subprocess.PIPE, text=True)
    cores = sorted(os.sched_getaffinity(0))
    assert second.communicate(timeout=60)[0].split() == [f"[{cores[1]}]", "1"]
    refused = subprocess.run([sys.executable, SCRIPT, "--device", "cuda", "--preset", "smoke"],
                             env={**os.environ, "CUDA_VISIBLE_DEVICES": ""}, capture_output=True, text=True,
                             timeout=120)
    assert refused.returncode != 0 and "torch sees no CUDA device" in refused.stderr


def test_a_committed_start_is_a_copy_with_its_digest_and_changed_weights_are_refused(tmp_path, nano_dir):
    from agentgym_nb import models
    record = commit_start(nano_dir, str(tmp_path / "start"))
    assert record["sha256"] == models.weights_digest(nano_dir) and record["recipe"] == os.path.basename(nano_dir)
    files = sorted(os.listdir(tmp_path / "start"))
    assert "model.safetensors" in files and "build.json" in files and "tokenizer.json" in files
    assert not [f for f in files if f.endswith(".lock")]
    start = read_start(str(tmp_path / "start"))
    assert start["sha256"] == record["sha256"] and start["name"] == os.path.basename(nano_dir)
    assert commit_start(nano_dir, str(tmp_path / "start"))["sha256"] == record["sha256"]   # the same again
    with open(tmp_path / "start" / "model.safetensors", "r+b") as f:   # one byte of the weights changed
        f.seek(-1, os.SEEK_END)
        last = f.read(1)
        f.seek(-1, os.SEEK_END)
        f.write(bytes([last[0] ^ 1]))
    with pytest.raises(SystemExit, match="were changed after it was committed"):
        read_start(str(tmp_path / "start"))
    os.remove(tmp_path / "start" / "start.json")   # now a model folder with other weights than nano_dir's ...
    commit_start(nano_dir, str(tmp_path / "committed"))
    with pytest.raises(SystemExit, match="already holds start weights"):   # ... which may not replace a start
        commit_start(str(tmp_path / "start"), str(tmp_path / "committed"))
    with pytest.raises(SystemExit, match="no build.json"):
        read_start(str(tmp_path))


@pytest.fixture(scope="module")
def committed_smoke_start(tmp_path_factory):
    """The long track's smoke nano (built once under outputs/models) copied to a folder as a committed start."""
    built = track_nano("smoke")
    path = str(tmp_path_factory.mktemp("repo") / "models" / "nano-babyai-long-smoke")
    done = subprocess.run([sys.executable, SCRIPT, "--preset", "smoke", "--commit-start", built, "--start", path],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return path


def _study(tmp_path, start, *extra, check=True):
    env = {**os.environ, "AGENTGYM_NB_OUTPUTS": str(tmp_path), "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, SCRIPT, "--preset", "smoke", "--steps", "2", "--eval-every", "1", "--eval-items", "4",
           "--max-steps", "6", "--seeds", "0", "--arms", "fixed20", "stepwise", "--start", start,
           "--out", str(tmp_path / "horizon.json"), *extra]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=2400)
    if check:
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    return done


@pytest.mark.slow
@pytest.mark.long   # an end-to-end study, minutes: CI runs it after make test
@pytest.mark.timeout(5400)   # a hang guard: minutes alone, its runs yield the CPU to everything else
def test_horizon_study_runs_from_a_committed_start_and_goes_on_from_its_report(tmp_path, committed_smoke_start):
    from agentgym_nb import models
    out = tmp_path / "horizon.json"
    # 1. the equal-steps phase only
    _study(tmp_path, committed_smoke_start, "--no-tokens")
    first = json.loads(out.read_text())["studies"][KEY]
    recipe = json.load(open(os.path.join(committed_smoke_start, "start.json")))["recipe"]
    assert first["start_model"] == {"name": recipe, "sha256": models.weights_digest(committed_smoke_start)}
    fixed = first["runs"]["fixed20/s0"]
    assert fixed["points"]["steps"]["step"] == 2 and "tokens" not in first["runs"]["stepwise/s0"]["points"]
    made = fixed["made"][-1]
    assert (made["device"], made["threads"], made["job"], made["from_step"]) == ("cpu", 1, "steps", 0)
    assert made["wall_seconds"] > fixed["points"]["steps"]["train_seconds"] > 0
    assert [c[0] for c in fixed["curve_h20"]] == [0, 1, 2]   # held-out every step at H = 2 (smoke), the start shared
    assert fixed["curve_h20"][0][2] == first["runs"]["stepwise/s0"]["curve_h20"][0][2]
    assert first["rules"] == RULES and set(first["verdicts"]) >= {
        "fixed_long_unstable", "fixed_short_plateaus", "stepwise_fewer_tokens", "stepwise_at_or_above_both_steps"}
    assert all(v["verdict"] == "inconclusive" for v in first["verdicts"].values())   # one seed decides nothing
    pair = first["pairs"]["stepwise - fixed20 @ steps"]
    assert pair["seeds"] == [0] and pair["pairs"] == 4 and len(pair["ci95_items"]) == 2

    # 2. on a machine without the run folders: the record carries the study on; only stepwise's equal-tokens phase
    # runs, from its own beginning, to the recorded fixed 20's tokens; its last policy gets a pass@(k, T) surface,
    # fixed 20's cannot (its weights stayed on the first machine)
    os.rename(tmp_path / "runs", tmp_path / "runs-first-machine")
    second = _study(tmp_path, committed_smoke_start, "--surface-items", "2")
    assert second.stdout.count("slot 0:") == 2 and "stepwise seed 0 to " in second.stdout   # tokens, then surface
    study = json.loads(out.read_text())["studies"][KEY]
    assert study["runs"]["fixed20/s0"] == fixed and "surface" not in study["runs"]["fixed20/s0"]
    stepwise = study["runs"]["stepwise/s0"]
    budget = fixed["points"]["steps"]["sampled_tokens"]
    tokens = stepwise["points"]["tokens"]
    assert tokens["sampled_tokens"] >= budget or tokens["step"] == 6
    assert sum(m["sampled_tokens"] for m in stepwise["steps"][:tokens["step"]]) == tokens["sampled_tokens"]
    assert [(m["job"], m["from_step"]) for m in stepwise["made"]] == [("tokens", 0), ("surface", tokens["step"])]
    trained = tokens["trained_horizon"]   # 0.5x, 1x and 2x the trained horizon at each point
    assert {f"{tokens['step']}/{h}" for h in (max(1, trained // 2), trained, 2 * trained)} <= set(stepwise["evals"])
    surface = stepwise["surface"]
    assert (surface["point"], surface["step"], surface["n"], surface["items"]) == ("tokens", tokens["step"], 16, 2)
    assert surface["horizons"] == surface_horizons(trained, 2) and surface["k"] == list(range(1, 17))
    arm = study["arms"]["stepwise"]["surface"]
    assert arm["seeds"] == 1 and arm["pass@k"][arm["horizons"].index("1x")] == \
        surface["pass@k"][surface["horizons"].index(trained)]
    assert study["cost"]["runs"] == 2 and study["cost"]["surface_hours"] >= 0

    # 3. the committed report alone (run folders gone again) gives the same report and needs no run
    os.rename(tmp_path / "runs", tmp_path / "runs-second-machine")
    again = _study(tmp_path, committed_smoke_start, "--surface-items", "2")
    assert "slot 0:" not in again.stdout   # nothing was scheduled
    reread = json.loads(out.read_text())["studies"][KEY]
    for key in ("runs", "pairs", "verdicts", "arms", "eval_item_ids", "start_model", "cost", "rules"):
        assert reread[key] == study[key], key
    table = readme_table(reread)   # the README's table of it: both arms, stepwise at both budgets
    assert "| fixed20 | equal steps |" in table and "| stepwise | equal tokens |" in table
    assert "| stepwise - fixed20 | equal tokens |" in table

    # 4. a record made from other start weights is neither continued nor replaced; --report re-judges the record
    # alone (its start is the record's digest: no weights needed, no run folder of other weights read)
    record = json.loads(out.read_text())
    record["studies"][KEY]["start_model"]["sha256"] = "0" * 64
    out.write_text(json.dumps(record))
    refused = _study(tmp_path, committed_smoke_start, check=False)
    assert refused.returncode != 0 and "records 2 runs" in refused.stderr and "other weights" in refused.stderr
    assert json.loads(out.read_text()) == record
    reported = _study(tmp_path, committed_smoke_start, "--report")
    assert "from the record" in reported.stdout and "slot 0:" not in reported.stdout
    rejudged = json.loads(out.read_text())
    assert rejudged["studies"][KEY]["runs"] == record["studies"][KEY]["runs"]
    assert rejudged["machine"] == record["machine"] and rejudged["reported"]["commit"]


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
@pytest.mark.timeout(900)
def test_a_ctrl_c_stops_the_runs_and_a_stopped_run_resumes_from_its_checkpoint(tmp_path, committed_smoke_start):
    """Runs start in sessions of their own (to lower their own priority), so a Ctrl-C at the terminal reaches only
    the scheduler; it must stop them rather than leave them training unseen. Started again, the run goes on from its
    last checkpoint (every 5 steps), not from its beginning."""
    import signal
    import time

    import psutil

    from agentgym_nb.train.checkpoint import saved_checkpoints
    env = {**os.environ, "AGENTGYM_NB_OUTPUTS": str(tmp_path), "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, SCRIPT, "--preset", "smoke", "--steps", "40", "--eval-every", "40", "--eval-items", "4",
           "--seeds", "0", "--arms", "fixed20", "--no-tokens", "--start", committed_smoke_start,
           "--out", str(tmp_path / "h.json")]
    sha = read_start(committed_smoke_start)["sha256"]
    name = Study(preset="smoke", steps=40, eval_every=40, eval_items=4, start_sha256=sha).config(
        "fixed20", 0).name
    run_dir = str(tmp_path / "runs" / name)   # the study's outputs are tmp_path's, not this process's
    log = tmp_path / "runs" / "horizon-logs-lr0.0003" / "fixed20-s0.log"

    def stopped_once(until) -> dict:
        """Start the study, wait until `until()` holds, Ctrl-C it; its runs must be gone. Returns the run's record."""
        # a suite started in the background of a non-interactive shell inherits SIGINT ignored, and Python then
        # installs no Ctrl-C handler at all: give the study the terminal's default, which is what this test is about
        study = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                 preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        for line in study.stdout:
            if "slot 0:" in line:
                break
        deadline = time.time() + 400
        while not until() and time.time() < deadline:
            time.sleep(1)
        assert until(), "the run did not get there within 400 s"
        runs = psutil.Process(study.pid).children()
        assert runs and all(os.getsid(r.pid) == r.pid for r in runs)   # each run leads a session of its own
        study.send_signal(signal.SIGINT)
        study.wait(timeout=60)
        gone, alive = psutil.wait_procs(runs, timeout=60)
        assert not alive, f"runs still alive after the study stopped: {[p.pid for p in alive]}"
        return json.load(open(os.path.join(run_dir, "horizon.json")))

    first = stopped_once(lambda: saved_checkpoints(run_dir))
    assert first["made"][0]["from_step"] == 0
    again = stopped_once(lambda: "resumed " in log.read_text())
    resumed = next(line for line in log.read_text().splitlines() if line.startswith("resumed "))
    assert resumed.startswith(f"resumed {os.path.basename(run_dir)} from step ")
    assert int(resumed.split(" from step ")[1].split()[0]) >= 5 and again["made"][-1]["from_step"] >= 5


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_a_cuda_run_samples_with_the_hf_engine_and_evaluates_in_one_chunk(tmp_path, committed_smoke_start):
    """One run as the scheduler starts it with --device cuda (here with no GPU visible, so on the CPU): the HF engine,
    the threads it was given, and each held-out evaluation played as one chunk of every item."""
    sha = read_start(committed_smoke_start)["sha256"]
    cmd = [sys.executable, SCRIPT, "--one", "fixed20", "0", "steps", "--preset", "smoke", "--steps", "1",
           "--eval-every", "1", "--eval-items", "4", "--start", committed_smoke_start, "--start-sha256", sha,
           "--device", "cuda", "--threads", "2", "--jobs", "8"]
    env = {**os.environ, "AGENTGYM_NB_OUTPUTS": str(tmp_path), "CUDA_VISIBLE_DEVICES": ""}
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1500)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    study = Study(preset="smoke", steps=1, eval_every=1, eval_items=4, start_sha256=sha, device="cuda",
                          threads=2)
    run_dir = tmp_path / "runs" / study.config("fixed20", 0).name
    record = json.loads((run_dir / "horizon.json").read_text())
    made = record["made"][-1]
    assert (made["device"], made["threads"], made["jobs"], made["engine"], made["gpu"]) == ("cuda", 2, 8, "hf", None)
    assert record["points"]["steps"]["step"] == 1 and json.loads((run_dir / "config.json").read_text())["threads"] == 2
    from agentgym_nb.evaluate import load_results
    header, records = load_results(str(run_dir / "evals" / "step00001-h2.jsonl"))
    assert header["chunk_items"] == 4 and {r["chunk"] for r in records} == {0} and len(records) == 4


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_the_gpu_pilot_measures_each_rung_of_runs_side_by_side_here_on_the_cpu(tmp_path, committed_smoke_start):
    """bench/horizon.py --pilot at the smoke preset on the CPU: a ladder of 1 and 2 runs side by side, each training
    two steps (a time box of 0 s) and evaluating once; per rung the median warm step, the throughput, and fixed 20's
    chain by the study's own numbers against a call; MPS is a GPU's, so not measured here, and said why."""
    from agentgym_nb.study import pilot
    out = tmp_path / "pilot.json"
    env = {**os.environ, "AGENTGYM_NB_OUTPUTS": str(tmp_path), "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, SCRIPT, "--pilot", "--preset", "smoke", "--steps", "2", "--eval-items", "4",
                           "--pilot-runs", "1", "2", "--pilot-seconds", "0", "--start", committed_smoke_start,
                           "--out", str(out)], env=env, capture_output=True, text=True, timeout=1100)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    record = json.loads(out.read_text())
    study = Study(**record["settings"])
    chain = record["chain"]   # no smoke study in the committed report: stepwise's phase is a third of 2 steps
    assert (chain["steps"], chain["tokens_phase_steps"], chain["loads"]) == (2, 0, 2)
    assert chain["evaluations"] == 0 + 1 + 2.5 + 0 + 1 + 2.5   # H = 2 at step 0, then the points' H, 0.5x and 2x
    rungs = record["modes"]["plain"]["rungs"]
    assert [r["runs"] for r in rungs] == [1, 2] and all(r["eval_items"] == 4 for r in rungs)
    for r in rungs:
        assert r["steps_measured"] == r["runs"] and all(len(m["step_seconds"]) == 2 for m in r["per_run"])
        assert r["steps_per_second"] == pytest.approx(r["runs"] / r["step_seconds"])
        assert r["chain_seconds"] == pytest.approx(2 * r["load_seconds"] + 2 * r["step_seconds"]
                                                   + 7 * r["eval_seconds"] * study.eval_items / 4)
        assert r["fits_a_call"] == (r["chain_seconds"] <= pilot.CALL_SECONDS)
        assert f"{r['runs']} runs on the card" in done.stdout
    assert record["modes"]["mps"] == {"measured": False, "why": "--device cpu: MPS shares a GPU"}
    assert record["modes"]["plain"]["most_runs_that_fit"] in (None, 1, 2) and "fits a call" in record["arithmetic"]


def test_a_pilot_saves_its_ladder_after_every_rung_so_a_call_cut_short_keeps_what_ran(monkeypatch):
    """A GPU call may end mid-pilot: each rung, once measured, is handed to `save` with the rungs before it; a rung
    that fails ends the ladder after it is saved."""
    from agentgym_nb.study import pilot
    measured = {4: {"runs": 4, "eval_seconds": 1.0, "eval_items": 32, "load_seconds": 5.0, "step_seconds": 2.0,
                    "steps_measured": 8, "steps_per_second": 2.0},
                8: {"runs": 8, "failed": [3], "wall_seconds": 9.0, "log_tail": "CUDA out of memory"},
                16: {"runs": 16}}
    monkeypatch.setattr(pilot, "rung", lambda small, n, seconds, work: dict(measured[n]))
    study = Study(preset="smoke", steps=2, eval_items=64)
    saved = []
    result = pilot.ladder(study, study, [4, 8, 16], 10.0, "", {"loads": 2, "steps": 2, "evaluations": 7}, "plain",
                          save=lambda mode, partial: saved.append((mode, [r["runs"] for r in partial["rungs"]])))
    assert saved == [("plain", [4]), ("plain", [4, 8])]
    assert result["rungs"][0]["chain_seconds"] == 2 * 5.0 + 2 * 2.0 + 7 * 1.0 * 64 / 32
    assert result["most_runs_that_fit"] == 4 and len(result["rungs"]) == 2


def test_the_study_cost_counts_each_run_to_its_furthest_budget_point_and_every_evaluation():
    runs = {("stepwise", 0): {"points": {"steps": {"train_seconds": 3600.0}, "tokens": {"train_seconds": 5400.0}},
                              "evals": {"0/20": {"seconds": 900.0}, "60/20": {"seconds": 900.0}},
                              "surface": {"seconds": 1800.0},
                              "made": [{"device": "cpu", "wall_seconds": 3600.0},
                                       {"device": "cuda", "wall_seconds": 360.0}]},
            ("fixed20", 0): {"points": {"steps": {"train_seconds": 1800.0}}, "evals": {"60/40": {"seconds": 1800.0}}}}
    assert cost(runs) == {"runs": 2, "train_hours": 2.0, "eval_hours": 1.0, "surface_hours": 0.5,
                                  "job_wall_hours": 1.1, "runs_by_device": {"cuda": 1, "cpu": 1}}


def test_per_item_outcomes_pack_into_a_string_and_back():
    ids = ["3", "40", "7"]
    packed = _pack({"3": 1.0, "40": 0.0, "7": 1.0}, ids)
    assert packed == "101"
    assert _unpack(packed, ids) == {"3": 1.0, "40": 0.0, "7": 1.0}
    partial = {"3": 0.5, "40": 0.0, "7": 1.0}   # a fractional outcome (several samples per item) stays a dict
    assert _pack(partial, ids) == partial and _unpack(partial, ids) == partial


def test_every_study_arm_has_a_label_and_a_colour_in_the_figures():
    from agentgym_nb.viz import study
    assert set(study.ARM_LABELS) == set(ARMS) == set(study.ARM_COLORS)
    assert {arm for arms in study.ARM_GROUPS.values() for arm in arms} == set(ARMS)   # every arm is drawn


def test_the_cpu_study_starts_from_the_committed_long_track_nano_its_report_names():
    """models/nano-babyai-long/ holds the study's start (a few MB, in git), its weights are the digest start.json and
    the report record, and bench/horizon.py reads it as the cpu preset's start."""
    from agentgym_nb import models
    start = START_DIRS["cpu"]
    with open(os.path.join(start, "start.json")) as f:
        recorded = json.load(f)
    with open(os.path.join(ROOT, "bench", "results", "horizon_study.json")) as f:
        studies = json.load(f)["studies"]
    assert models.weights_digest(start) == recorded["sha256"]
    assert {s["start_model"]["sha256"] for s in studies.values()} == {recorded["sha256"]}
    assert read_start(start)["sha256"] == recorded["sha256"]


def test_a_tokens_verdict_without_a_ratio_says_why():
    """Both of seed 0's runs started above the target (it is 80% of fixed 20's final success): the tokens to reach it
    are 0 for both, no ratio exists, and the README's line says so instead of that nothing finished."""
    verdict = {"claim": "c", "rule": "r", "verdict": "inconclusive", "target_success": 0.048,
               "per_seed": [{"seed": 0, "stepwise_tokens": 0.0, "fixed20_tokens": 0.0, "log_ratio": None}],
               "tokens_ratio_stepwise_over_fixed20": None, "stepwise_stayed_below_target": []}
    assert decided_by(verdict) == ("no seed has a tokens ratio to reach 4.8% held-out: in seed 0 a run was at the "
                                   "target from its start")
    assert decided_by({"claim": "c", "rule": "r", "verdict": "inconclusive", "per_seed": []}) == \
        "no finished run of the arms it reads"
