"""Every bench/ script run at a tiny setting, the way a user runs it (its own process, its command line), writing its
JSON where the test says and never over the committed bench/results/; then the shape of that JSON: its keys, types,
lengths and the relations its numbers must keep. bench/horizon.py and bench/algorithms.py have tests of their own
(test_bench_horizon.py, test_bench_algorithms.py); engine_speed.py and train_speed.py run at smoke sizes inside
scripts/gpu_check.py's own test (test_gpu_check.py), which reads their JSON."""
import ast
import datetime
import inspect
import json
import math
import os
import re
import statistics
import subprocess
import sys

import pytest

from harness import needs

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BENCH = os.path.join(ROOT, "bench")
RESULTS = os.path.join(BENCH, "results")


def run_bench(script: str, args: list[str], out, committed: str, timeout: float = 600):
    """Run bench/`script` with `args` + `--out out`; return its JSON. The committed bench/results/`committed` it would
    write by default must be left as it was."""
    kept = os.path.join(RESULTS, committed)
    before = os.stat(kept).st_mtime_ns if os.path.exists(kept) else None
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, os.path.join(BENCH, script), *args, "--out", str(out)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    assert (os.stat(kept).st_mtime_ns if os.path.exists(kept) else None) == before, f"{script} wrote {kept}"
    return json.loads(out.read_text())


def check_where(report: dict) -> None:
    """What every report records about where and when it ran (bench/_common.py)."""
    m = report["machine"]
    assert m["cpus"] >= 1 and m["ram_gib"] > 0 and isinstance(m["cpu_model"], str)
    assert set(m["cpu_flags"]) <= {"avx512f", "avx512_bf16", "amx_bf16"}
    age = datetime.date.today() - datetime.date.fromisoformat(report["date"])
    assert datetime.timedelta(0) <= age <= datetime.timedelta(days=1)   # today's (yesterday's past midnight)
    assert re.fullmatch(r"[0-9a-f]{7,}|unknown", report["commit"])


def share(x) -> bool:
    return isinstance(x, float) and 0.0 <= x <= 1.0


# ------------------------------------------------------------------------------------------------ rollouts, training
@pytest.mark.slow
def test_rollout_lockstep_plays_the_runners_episodes_in_lockstep(nano_dir, tmp_path):
    """The lockstep baseline folds env replies and completions with the runner's own steps: no episode fails in any
    mode (the script stops with the env's error otherwise), both schedules sample the same tokens, and each mode's
    figures agree with its counts."""
    r = run_bench("rollout_lockstep.py", ["--preset", "smoke", "--envs", "babyai-slow", "--items", "1", "--rounds", "2",
                                          "--repeats", "1", "--engine", "hf", "--delay-ms", "5"],
                  tmp_path / "lockstep.json", "rollout_lockstep.json")
    check_where(r)
    assert r["params"]["preset"] == "smoke" and r["loadavg_before"] and r["loadavg_after"]
    assert r["priority"]["nice"] == os.nice(0) and r["priority"]["autogroup_nice"] in (None, *range(-20, 20))
    slow = r["results"]["babyai-slow"]
    assert list(r["results"]) == ["babyai-slow"] and slow["episodes"] == 4 == len(slow["items"]) * slow["setting"]["n"]
    assert slow["setting"]["max_rounds"] == 2 and slow["setting"]["model_dir"] == nano_dir
    for mode in ("ours", "lockstep", "ours-nolinger"):
        [run] = slow["runs"][mode]
        assert run["seconds"] > 0 and math.isclose(run["episodes_per_s"], 4 / run["seconds"])
        assert run["policy_tokens"] > 0 and run["env_steps"] >= 4 and share(run["success"])
        assert 1 <= run["mean_batch"] <= 4 and run["generate_calls"] * run["mean_batch"] >= run["env_steps"]
        assert 0 < run["generate_share"] <= 1 and slow[mode]["median_seconds"] == run["seconds"]
    lockstep = slow["runs"]["lockstep"][0]
    assert lockstep["generate_calls"] <= 2   # one generate call per round, at most the horizon's 2 rounds
    assert math.isclose(slow["speedup_episodes_per_s"], slow["ours"]["median_episodes_per_s"]
                        / slow["lockstep"]["median_episodes_per_s"])
    # same seeds per (episode, turn), same bookkeeping: the same tokens (fp32; a batch's make-up moves logits ~1e-7)
    assert slow["same_episodes"] == [1.0]


@pytest.mark.slow
def test_rollout_speed(nano_dir, tmp_path):
    r = run_bench("rollout_speed.py", ["--preset", "smoke", "--engines", "hf", "--repeats", "2", "--threads", "1"],
                  tmp_path / "rollout_speed.json", "rollout_speed.json")
    check_where(r)
    assert r["params"]["model"] == nano_dir and r["params"]["episodes"] == 4 and list(r["results"]) == ["hf"]
    hf = r["results"]["hf"]
    assert hf["init_seconds"] > 0 and len(hf["runs"]) == 2
    for run in hf["runs"]:
        assert run["tokens_per_s"] > 0 and run["env_steps_per_s"] > 0 and 0 < run["generate_share"] <= 1
        assert math.isclose(run["episodes_per_s"], 4 / run["seconds"])
    assert math.isclose(hf["median_seconds"], statistics.mean(run["seconds"] for run in hf["runs"]))   # of two


@pytest.mark.slow
@pytest.mark.parametrize("engine, name", [("hf", "HFEngine"), ("vllm", "VLLMEngine")])
def test_horizon_profile_splits_a_step_and_an_evaluation_into_phases(tmp_path, engine, name):
    r = run_bench("horizon_profile.py", ["--preset", "smoke", "--steps", "1", "--eval-items", "2", "--engine", engine,
                                         "--set", "micro_batch_tokens=1024", "--eval-chunk", "1"],
                  tmp_path / "profile.json", "horizon_profile.json")
    run = r["runs"]["now"]
    check_where(run)
    assert run["engine"] == name and run["changed"] == ["micro_batch_tokens=1024", "eval_chunk=1"]
    (step,) = run["steps"]
    assert step["prefill_seconds"] > 0 and step["decode_seconds"] > 0 and step["env_seconds_in_threads"] > 0
    assert step["prefill_seconds"] + step["decode_seconds"] < step["rollout_seconds"] < step["step_seconds"]
    assert step["forward_passes"]["prefill"] >= 1 and step["forward_passes"]["env"] >= step["episodes"]
    assert step["logprob_seconds"] > 0 and step["update_seconds"] > 0 and step["cache_fallbacks"] == 0
    assert set(step["gflop"]) == {"prefill", "decode", "logprob", "update"} and min(step["gflop"].values()) > 0
    assert set(run["linear_gflop_per_s"]) == {"float32", "float32_onednn", "bfloat16_autocast"}
    assert min(run["linear_gflop_per_s"].values()) > 0
    evaluation = run["evaluation"]
    assert evaluation["items"] == 2 and evaluation["decode_seconds"] > 0 and share(float(evaluation["success"]))
    assert set(evaluation["gflop"]) == {"prefill", "decode"} and min(evaluation["gflop"].values()) > 0
    # one episode at a time (--eval-chunk 1): a prefill for every turn of each, not one per turn of the batch
    assert evaluation["forward_passes"]["prefill"] == round(2 * evaluation["mean_turns"])


def test_horizon_profile_counts_a_passes_arithmetic_by_hand():
    """One layer, hidden 8, 2 query heads and 1 KV head of 4 dims, MLP 16, vocab 10. Linear weights: q 64, k 32,
    v 32, o 64, gate, up and down 128 each: 576, so 1,152 FLOPs a token, and the (tied) head 80: 160 a logit; a
    query-key pair 4 x 2 heads x 4 dims = 32. Three new tokens after two cached ones: new token i attends to the 2
    cached, to the new ones before it and to itself, 3 + 4 + 5 = 12 pairs; an engine computes one row's logits."""
    from transformers import Qwen2Config, Qwen2ForCausalLM
    sys.path[:0] = [BENCH]
    try:
        import horizon_profile
    finally:
        sys.path.remove(BENCH)
    model = Qwen2ForCausalLM(Qwen2Config(vocab_size=10, hidden_size=8, num_hidden_layers=1, num_attention_heads=2,
                                         num_key_value_heads=1, intermediate_size=16, tie_word_embeddings=True))
    work = horizon_profile.Work(model)
    assert (work.per_token, work.per_logit, work.per_pair) == (1152, 160, 32)
    work.add_rows("prefill", [3], [2], last_logits_only=True)
    work.add_rows("update", [2], [0], factor=3)   # 2 tokens and their logits, 1 + 2 pairs, forward and backward
    assert work.take() == pytest.approx({"prefill": (3 * 1152 + 160 + 12 * 32) / 1e9,
                                         "update": 3 * (2 * (1152 + 160) + 3 * 32) / 1e9})
    assert work.take() == {}


def test_rl_step_splits_each_step_into_its_phases(nano_dir, tmp_path):
    r = run_bench("rl_step.py", ["--preset", "smoke", "--steps", "2", "--repeats", "1", "--engine", "hf",
                                 "--precisions", "fp32", "bf16"], tmp_path / "rl_step.json", "rl_step.json")
    check_where(r)
    assert r["params"]["preset"] == "smoke" and r["params"]["model"] == nano_dir
    assert [(run["precision"], run["seed"]) for run in r["runs"]] == [("fp32", 0), ("bf16", 0)]
    for run in r["runs"]:
        assert [s["step"] for s in run["steps"]] == [1, 2]
        for s in run["steps"]:
            # the estimator ran through the registry's timer, and the phases add up to the step
            assert s["advantage_seconds"] > 0 and s["logprob_seconds"] > 0 and s["update_seconds"] > 0
            assert math.isclose(s["logprob_seconds"] + s["advantage_seconds"], s["trainer_logprob_seconds"])
            phases = ("rollout", "logprob", "advantage", "update", "sync", "other")
            assert math.isclose(sum(s[f"{k}_seconds"] for k in phases), s["step_seconds"])
            assert share(s["success"]) and s["policy_tokens"] > 0
    assert set(r["phases"]) == {"fp32", "bf16"} and set(r["bf16_speedup"]) == {"rollout", "logprob", "advantage",
                                                                                "update", "sync", "other", "step"}
    curves = r["curves"]
    assert [len(v) for v in curves["reward"].values()] == [2, 2] and len(curves["step1_same_reward"]) == 1
    assert isinstance(curves["within_noise"], bool)


@pytest.mark.slow
@pytest.mark.long   # SmolLM2 on vLLM end to end, minutes: tests/test_pretrained_rl.py checks the step in make test
def test_pretrained_rl(tmp_path):
    r = run_bench("pretrained_rl.py", ["--preset", "smoke", "--steps", "1", "--eval-items", "2", "--lora-rank", "8"],
                  tmp_path / "pretrained_rl.json", "pretrained_rl.json", timeout=900)
    check_where(r)
    p = r["params"]
    assert (p["preset"], p["model"], p["episodes_per_step"], p["horizon"], p["eval_items"]) == (
        "smoke", "smollm2-135m", 2, 1, 2)
    [step] = r["steps"]
    assert step["step"] == 1 and step["policy_tokens"] > 0
    assert step["mismatch_kl"] < 1e-3 and step["sync_error"] < 1e-3   # engine and trainer hold the same weights
    assert set(r["median_phase_seconds"]) == {"rollout_seconds", "logprob_seconds", "update_seconds", "sync_seconds",
                                              "step_seconds"}
    assert share(r["success_before"]) and share(r["success_after"])
    lift = r["paired_lift"]
    assert lift["ci95"][0] <= lift["mean"] <= lift["ci95"][1]
    assert math.isclose(lift["mean"], r["success_after"] - r["success_before"], abs_tol=1e-9)


@pytest.mark.slow
def test_anchor_repeats_adds_its_row_and_keeps_the_others(nano_dir, tmp_path):
    out = tmp_path / "anchor_repeats.json"
    other = {"env": "textcraft", "track": None, "shared_share": 0.25}
    out.write_text(json.dumps({"rows": {"textcraft/None": other}}))
    r = run_bench("anchor_repeats.py", ["--preset", "smoke", "--envs", "babyai", "--babyai-tracks", "one-room",
                                        "--steps", "1", "--engine", "hf"], out, "anchor_repeats.json")
    check_where(r)
    assert r["rows"]["textcraft/None"] == other   # a row not measured again stays
    row = r["rows"]["babyai/one-room"]
    assert (row["preset"], row["horizon"], row["steps"]) == ("smoke", 2, 1)
    assert row["episodes"] == row["groups_per_step"] * row["samples_per_prompt"]
    assert row["episodes"] <= row["turns"] <= row["episodes"] * row["horizon"]
    # a group's samples all start in their item's state: every first turn shares its anchor
    assert row["shared"] >= row["episodes"] and row["later_turns"] == row["turns"] - row["episodes"]
    assert row["later_shared"] <= row["later_turns"] and row["step_credit"] <= row["turns"]
    assert row["shared_share"] == row["shared"] / row["turns"] and share(row["step_credit_share"])
    assert row["mean_step_group_size"] >= 2


@pytest.mark.slow
def test_babyai_tracks(nano_dir, tmp_path):
    from agentgym_nb.config import make_config
    r = run_bench("babyai_tracks.py", ["--preset", "smoke", "--track", "one-room", "--items-per-level", "1",
                                       "--horizons", "1", "2", "--eval-items", "2", "--engine", "hf"],
                  tmp_path / "babyai_tracks.json", "babyai_tracks.json")
    check_where(r)
    assert r["settings"]["preset"] == "smoke"
    assert sorted(int(level) for level in r["levels"]) == list(range(40))
    for row in r["levels"].values():
        assert row["gym_id"].startswith("BabyAI-")
        for turns in (row["expert"], row[f"hesitating_{r['settings']['hesitation']:g}"]):
            assert turns["solved"] in (0.0, 1.0)   # one item per level
            assert turns["solved"] == 0.0 or 1 <= turns["median"] == turns["p90"] == turns["max"]
    assert sum(row["expert"]["solved"] for row in r["levels"].values()) >= 30   # the bot solves BabyAI's levels
    start = r["start"]
    assert start["levels"] == make_config(preset="smoke", env="babyai", track="one-room").levels
    assert start["items"] == 2 and sorted(start["by_horizon"]) == ["1", "2"]
    for horizon, h in start["by_horizon"].items():
        assert share(h["success"]) and h["policy_tokens"] > 0 and 1 <= h["mean_turns"] <= int(horizon)
        assert {int(level) for level in h["by_level"]} <= set(start["levels"])


# ---------------------------------------------------------------------------------------------- env servers and envs
@pytest.mark.slow
def test_env_server_measures_every_server_at_every_load(tmp_path):
    r = run_bench("env_server.py", ["--clients", "4", "--seconds", "2", "--warmup", "1", "--repeats", "1",
                                    "--items", "8"], tmp_path / "env_server.json", "env_server.json")
    check_where(r)
    assert r["params"]["clients"] == [4] and r["loadavg_before"] and r["loadavg_after"]
    servers = ("agentgym", "agentgym-nogc", "ours", "ours-2w")
    assert tuple(r["results"]) == servers and set(r["ratio_vs_agentgym"]) == set(servers[1:])
    for server in servers:
        m = r["results"][server]["4"]
        assert m["median_requests"] > 0 and m["median_requests_per_s"] == m["median_requests"] / 2.0
        assert 0 < m["median_p50_ms"] <= m["median_p99_ms"] and m["median_step_p50_ms"] <= m["median_step_p99_ms"]
        assert m["median_server_cpu_ms_per_request"] > 0 and len(r["runs"][server]["4"]) == 1
        if server != "agentgym":
            assert math.isclose(r["ratio_vs_agentgym"][server]["4"]["requests_per_s"], m["median_requests_per_s"]
                                / r["results"]["agentgym"]["4"]["median_requests_per_s"])


@needs(envs=("textcraft",))
def test_env_textcraft(tmp_path):
    r = run_bench("env_textcraft.py", ["--cycles", "20", "--goals", "3"], tmp_path / "env_textcraft.json",
                  "env_textcraft.json")
    check_where(r)
    assert len(r["tree_build_seconds_fresh_process_after_import"]["runs"]) == 3
    e = r["expert"]
    assert e["test_items"] == 3 and e["test_solved"] == 3 and r["goals"] == 3 and e["all_goals_solved"] == 3
    assert r["http"]["test_solved"] == e["test_solved"]   # the same expert over HTTP
    assert r["in_process"]["steps"] > 0 and r["http"]["steps_per_s"] > 0
    mem = r["server_memory"]
    assert mem["cycles"] == mem["warmup_cycles"] == 20 and mem["rss_mib_after_cycles"] > 0
    assert mem["env_ids_issued"] == 1 + 20 + 20   # the expert's env, the warm-up's and the cycles' (ids from 0)


@pytest.mark.slow
def test_env_searchqa(tmp_path):
    r = run_bench("env_searchqa.py", ["--cycles", "10", "--items", "20"], tmp_path / "env_searchqa.json",
                  "env_searchqa.json")
    check_where(r)
    kb = r["knowledge_base"]
    assert kb["passages"] > 0 and kb["questions"]["test"] + kb["questions"]["train"] > 20
    q = r["query_ms"]
    assert q["queries"] == 40 and 0 < q["median"] <= q["p95"] <= q["max"]
    assert r["expert"]["test_items"] == r["expert"]["all_items"] == 20
    assert r["expert"]["test_solved"] == 20 == r["http"]["test_solved"]   # the oracle, in-process and over HTTP
    mem = r["server_memory"]
    assert mem["cycles"] == 10 and [c for c, _ in mem["rss_mib_by_cycle"]] == [0, 10]


@pytest.mark.slow
@pytest.mark.jvm
@needs(envs=("sciworld",))
def test_env_sciworld(tmp_path):
    r = run_bench("env_sciworld.py", ["--limit", "1", "--cycles", "2"], tmp_path / "env_sciworld.json",
                  "env_sciworld.json")
    check_where(r)
    e = r["expert"]
    assert e["items"] == 1 and share(e["success_rate"]) and e["steps"] > 0 and e["lean_steps_per_s"] > 0
    assert r["in_process_package_step"]["package_steps_per_s"] > 0
    http = r["http"]
    assert http["cycles"] == 2 and 1 <= http["steps"] <= 2 and [c for c, _ in http["rss_mb_by_cycles"]] == [1, 2]
    assert http["server_rss_mb_at_end"]["jvm_count"] >= 1 and http["server_rss_mb_at_end"]["jvms"] > 0


@pytest.mark.slow
@pytest.mark.browser
@needs(envs=("miniwob",))
def test_env_miniwob(tmp_path):
    r = run_bench("env_miniwob.py", ["--seeds", "1", "--tasks", "2", "--episodes", "4"], tmp_path / "env_miniwob.json",
                  "env_miniwob.json")
    check_where(r)
    assert r["expert"]["items"] == 2 and r["expert"]["solved"] == 2   # each solver solves its own task
    assert r["reset_seconds"]["resets"] == 2 and r["in_process_steps"]["steps"] == r["expert"]["steps"] > 0
    samples = r["browser_memory_over_episodes"]
    assert [s["episode"] for s in samples] == [1, 2, 3, 4]
    assert all(s["processes"] > 0 and 0 < s["pss_mib"] <= s["rss_mib"] for s in samples)


@pytest.mark.slow
@pytest.mark.browser
@needs(envs=("webarena",))
def test_env_webarena(tmp_path):
    r = run_bench("env_webarena.py", ["--episodes", "3", "--contexts", "2", "--tasks", "2"],
                  tmp_path / "env_webarena.json", "env_webarena.json")
    check_where(r)
    assert r["speed"]["tasks"] == 2 and r["speed"]["expert_success"] == 1.0 and r["speed"]["steps_per_s"] > 0
    assert r["memory_per_context"]["contexts"] == 2 and r["memory_per_context"]["loaded"]["chromium_processes"] > 0
    flat = r["flatness"]
    assert [s["episodes"] for s in flat["samples"]] == [1, 2, 3] and flat["max_chromium_processes"] > 0
    assert r["chromium_processes_after_shutdown"] == 0   # every browser process ended with the env
    check = run_bench("env_webarena.py", ["--expert-check", "--tasks", "2"], tmp_path / "expert.json",
                      "env_webarena_expert.json")
    check_where(check)
    assert check["tasks"] == 2 and check["solved"] == 2 and check["failures"] == []
    assert sum(check["per_kind"].values()) == 2 and sum(check["actions_histogram"].values()) == 2


# ---------------------------------------------------------------------------------------------- a fresh clone's demo
def test_demo_from_clone_is_valid_and_reads_what_make_demo_writes():
    """A dry check (the real run takes ~20 minutes): the script parses, its Python parses, the make targets it runs
    exist, and the keys it reads from the demo run's summary.json are the ones notebook 05 writes."""
    script = os.path.join(BENCH, "demo_from_clone.sh")
    assert subprocess.run(["bash", "-n", script], capture_output=True).returncode == 0
    text = open(script).read()
    python = text.split("<<'PY'\n", 1)[1].rsplit("\nPY", 1)[0]
    compile(python, "demo_from_clone.sh (python)", "exec")
    dry = subprocess.run(["make", "-n", "install", "model", "demo"], cwd=ROOT, capture_output=True, text=True)
    assert dry.returncode == 0, dry.stderr
    assert "outputs/runs/demo-babyai/" in dry.stdout and "outputs/runs/demo-babyai/summary.json" in text
    notebook = json.load(open(os.path.join(ROOT, "notebooks", "05_scalinginter.ipynb")))
    source = "".join("".join(cell["source"]) for cell in notebook["cells"])
    for key in re.findall(r"s\['(\w+)'\]", python):
        assert f'"{key}":' in source, f"notebook 05's summary.json has no {key!r}"
    sys.path.insert(0, os.path.join(ROOT, "scripts"))
    import book
    assert list(inspect.signature(book.record_figure).parameters) == ["path", "name", "about", "preset", "commit"]


# ------------------------------------------------------------------------------------------------ public names only
def test_bench_code_uses_the_packages_public_names():
    """No bench script imports a private name of the package or reads a private attribute of anything but itself: a
    private helper may change its input unnoticed (the lockstep baseline broke so)."""
    found = []
    for name in sorted(os.listdir(BENCH)):
        if not name.endswith(".py"):
            continue
        tree = ast.parse(open(os.path.join(BENCH, name)).read())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("agentgym_nb"):
                found += [f"{name}:{node.lineno} imports {a.name}" for a in node.names if a.name.startswith("_")]
            if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
                root = node.value
                while isinstance(root, ast.Attribute):
                    root = root.value
                if not (isinstance(root, ast.Name) and root.id == "self"):
                    found.append(f"{name}:{node.lineno} reads .{node.attr}")
    assert not found, found
