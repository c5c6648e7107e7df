"""Evaluation: summaries worked out by hand, bootstrap intervals, per-env success predicates, an evaluation interrupted
mid-way and resumed giving exactly the uninterrupted result (real nano model, real BabyAI), the CLI on a real
training checkpoint, and the paper's numbers as data (checked against the paper's own sub-task sizes)."""
import json
import math
import os
import random

import pytest
import torch

from agentgym_nb import envs
from agentgym_nb.envs import EnvError
from agentgym_nb.envs.babyai import BabyAI
from agentgym_nb.evaluate import bootstrap_ci, evaluate, load_paper_results, load_results, summarize
from agentgym_nb.evaluate_cli import main, parse_items
from agentgym_nb.rollout.engine import SamplingParams
from agentgym_nb.train.checkpoint import checkpoint_model_dir
from harness import needs

pytestmark = pytest.mark.timeout(240)
ITEMS = list(range(100_000, 100_006))
SAMPLED = SamplingParams(temperature=1.0, max_tokens=24, seed=3)


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)   # the machine is shared
    yield
    torch.set_num_threads(before)


def episode(position, reward, success, category="a", failed=None):
    return {"position": position, "category": category, "reward": reward, "success": success, "failed": failed,
            "num_rounds": 2, "truncated": False}


def test_summary_by_hand():
    # n = 4. Item 0 (SciWorld-like partial credit): scores 50, 30, 0, 0, never a success. Item 1: 2 of 4. Item 2 (b):
    # 4 of 4. Item 3: one env failure, 1 of the 3 others: counted in success, left out of pass@k (not all n).
    records = ([episode(0, r, False) for r in (50, 30, 0, 0)] +
               [episode(1, r, r == 100) for r in (100, 0, 100, 0)] +
               [episode(2, 100, True, "b") for _ in range(4)] +
               [episode(3, 100, True), episode(3, 0, False), episode(3, 0, False), episode(3, 0, False, failed="x")])
    s = summarize(records, n=4, ks=[1, 2, 4], resamples=500)
    assert (s["items"], s["episodes"], s["failed"], s["pass_items"]) == (4, 15, 1, 3)
    assert s["success"] == pytest.approx(7 / 15)
    # pass@2 = mean(0, 1 - C(2,2)/C(4,2) = 5/6, 1); pass^2 = mean(0, C(2,2)/C(4,2) = 1/6, 1)
    assert s["pass@1"] == pytest.approx((0 + 0.5 + 1) / 3)
    assert s["pass@2"] == pytest.approx((0 + 5 / 6 + 1) / 3)
    assert s["pass^2"] == pytest.approx((0 + 1 / 6 + 1) / 3)
    assert s["pass@4"] == pytest.approx(2 / 3) and s["pass^4"] == pytest.approx(1 / 3)
    assert s["agentgym_pass@4"] == 1.0   # "best score > 0" counts item 0, which never succeeded
    assert s["avg@4"] == pytest.approx((80 + 200 + 400 + 100) / 15)
    a, b = s["by_category"]["a"], s["by_category"]["b"]
    assert (a["items"], a["episodes"], a["failed"], a["success"]) == (3, 11, 1, pytest.approx(3 / 11))
    assert (b["items"], b["success"], b["pass@2"], b["success_ci_bootstrap"]) == (1, 1.0, 1.0, [1.0, 1.0])
    for key in ("success_ci_bootstrap", "pass@2_ci", "pass^4_ci"):
        lo, hi = s[key]
        assert lo <= s[key[:-3] if key.endswith("_ci") else "success"] <= hi
    shuffled = records[:]
    random.Random(0).shuffle(shuffled)
    assert summarize(shuffled, n=4, ks=[1, 2, 4], resamples=500) == s   # order of arrival does not matter
    with pytest.raises(ValueError, match="k <= n|1 <= k"):
        summarize(records, n=4, ks=[5])
    with pytest.raises(RuntimeError, match="every evaluation episode failed"):
        summarize([episode(0, 0, False, failed="server gone")], n=1)


def test_bootstrap_interval():
    # Two items scoring 0 and 1: resampled means are 0, .5, 1 with chances 1/4, 1/2, 1/4 -> 95% interval [0, 1].
    assert bootstrap_ci([0.0, 1.0]) == (0.0, 1.0)
    assert bootstrap_ci([0.4] * 7) == pytest.approx((0.4, 0.4))
    # 400 items, 120 successes: close to p +- 1.96 sqrt(p (1 - p) / m) = .3 +- .0449
    lo, hi = bootstrap_ci([1.0] * 120 + [0.0] * 280, seed=1)
    assert lo == pytest.approx(0.3 - 0.0449, abs=0.008) and hi == pytest.approx(0.3 + 0.0449, abs=0.008)
    assert bootstrap_ci([1.0] * 120 + [0.0] * 280, seed=1) == (lo, hi)   # seeded


EXPECTED_SUCCESS = {   # the definitions, on rewards each env can produce
    "babyai": [(0.37, True), (1.0, True), (0.0, False)],
    "textcraft": [(1.0, True), (0.0, False)],
    "sciworld": [(100.0, True), (99.0, False), (50.0, False), (0.0, False)],
    "searchqa": [(1.0, True), (0.0, False)],
    "webarena": [(1.0, True), (0.0, False)],
    "miniwob": [(1.0, True), (0.3, True), (0.0, False), (-1.0, False)],   # reward > 0; some tasks give partial credit
}


@pytest.mark.parametrize("name", [pytest.param(name, marks=needs(envs=(name,))) for name in sorted(EXPECTED_SUCCESS)])
def test_each_env_defines_success(name):
    cls = envs.env_class(name)
    env = cls.__new__(cls)   # success is a predicate on the reward: no world needed
    assert [env.success(r) for r, _ in EXPECTED_SUCCESS[name]] == [ok for _, ok in EXPECTED_SUCCESS[name]]


class Interrupt(BaseException):
    """Like Ctrl-C: not an env error, so the runner does not turn it into a failed episode."""


class FailsOnItem3(BabyAI):
    def reset(self, item_id):
        if item_id == ITEMS[3]:
            raise EnvError("babyai server at 127.0.0.1:1 went away")
        return super().reset(item_id)


def counting_factory(raise_at=None):
    calls = []

    def factory():
        calls.append(1)
        if raise_at is not None and len(calls) == raise_at:
            raise Interrupt
        return envs.make("babyai")
    return factory, calls


def run(engine, chat, path, factory, **kw):
    args = dict(n=2, max_rounds=2, params=SAMPLED, max_total_tokens=768, chunk_items=2, resamples=300)
    args.update(kw)
    return evaluate(engine, factory, ITEMS, chat, results_path=path,
                    summary_path=path and path.replace(".jsonl", ".summary.json"), **args)


def test_an_interrupted_evaluation_resumes_exactly(tmp_path, hf_nano, chat):
    straight_path = str(tmp_path / "straight.jsonl")
    straight = run(hf_nano, chat, straight_path, counting_factory()[0])
    assert straight["items"] == 6 and straight["episodes"] == 12 and straight["failed"] == 0
    _, straight_records = load_results(straight_path)
    texts = {json.dumps(r["conversations"]) for r in straight_records}
    assert len(texts) > 6, "sampling at temperature 1 should not replay one episode per item"
    assert set(straight["by_category"]) == {envs.make("babyai").category(i) for i in ITEMS}
    assert sum(c["episodes"] for c in straight["by_category"].values()) == 12

    # Interrupted during the second chunk: the category probe is call 1, chunk 0 makes calls 2-5.
    path = str(tmp_path / "resumed.jsonl")
    factory, _ = counting_factory(raise_at=7)
    with pytest.raises(Interrupt):
        run(hf_nano, chat, path, factory)
    header, records = load_results(path)
    assert header["n"] == 2 and sorted({r["chunk"] for r in records}) == [0] and len(records) == 4
    with open(path, "a") as f:
        f.write('{"kind": "episode", "chunk": 1, "posi')   # a crash in the middle of a write
    factory, calls = counting_factory()
    resumed = run(hf_nano, chat, path, factory)
    assert len(calls) == 1 + 8, "only chunks 1 and 2 are played again"
    assert resumed == straight
    assert load_results(path)[1] == straight_records
    with open(path.replace(".jsonl", ".summary.json")) as f:
        assert json.load(f) == json.loads(json.dumps(straight))

    # Chunking changes nothing: seeds depend on the episode's position in the whole list only.
    assert run(hf_nano, chat, None, counting_factory()[0], chunk_items=4) == straight
    # A finished file is read, not replayed.
    factory, calls = counting_factory()
    assert run(hf_nano, chat, path, factory) == straight and calls == []
    with pytest.raises(ValueError, match="differs in: n"):
        run(hf_nano, chat, path, factory, n=1, ks=[1])

    # An env failure is not a zero reward: reported, left out, and its chunk is played again on the next call.
    path = str(tmp_path / "env_failed.jsonl")
    broken = run(hf_nano, chat, path, FailsOnItem3)
    assert (broken["failed"], broken["episodes"], broken["items"]) == (2, 10, 5)
    factory, calls = counting_factory()
    assert run(hf_nano, chat, path, factory) == straight and len(calls) == 1 + 4


def test_greedy_and_bad_arguments(tmp_path, hf_nano, chat):
    greedy = SamplingParams(temperature=0, max_tokens=24)
    a = run(hf_nano, chat, None, counting_factory()[0], n=1, params=greedy, chunk_items=1)
    b = run(hf_nano, chat, None, counting_factory()[0], n=1, params=greedy, chunk_items=6)
    assert a == b and a["n"] == 1 and a["temperature"] == 0 and "pass@1" in a and "pass@2" not in a
    with pytest.raises(ValueError, match="greedy"):
        run(hf_nano, chat, None, counting_factory()[0], n=2, params=greedy)
    with pytest.raises(ValueError, match="k=3"):
        run(hf_nano, chat, None, counting_factory()[0], ks=[1, 3])


@pytest.mark.parametrize("argv, message", [
    (["--env", "babyai", "--model", "nano", "--n", "4", "--k", "1,8"], "every k must be in [1, n=4]"),
    (["--env", "babyia", "--model", "nano"], "did you mean 'babyai'"),
    (["--env", "babyai", "--model", "no-such-model"], "unknown model 'no-such-model'"),
    (["--env", "babyai", "--model", "nano", "--n", "2", "--temperature", "0"], "greedy"),
    (["--env", "babyai", "--model", "nano", "--items", "5:2"], "need 0 <= a < b"),
])
def test_cli_errors(argv, message, capsys):
    with pytest.raises(SystemExit):
        main(argv + ["--preset", "smoke"])
    assert message in capsys.readouterr().err


@needs(envs=("sciworld",))
def test_cli_items_are_the_presets_items():
    """--items test/train are the items a run of the config plays (its levels only), a:b any ids."""
    from agentgym_nb.config import make_config
    sciworld = make_config(preset="cpu", env="sciworld")   # the 10 short tasks: 88 of the 201 shipped test items
    assert len(parse_items("test", sciworld)) == 88 and len(envs.item_ids("sciworld", "test")) == 201
    level_3 = parse_items("train", make_config(preset="cpu", overrides=["levels=[3]"]))
    assert level_3 and all(i % 40 == 3 for i in level_3)
    assert parse_items("test", make_config(preset="cpu", env="searchqa")) == envs.item_ids("searchqa", "test")
    assert parse_items("0:3", sciworld) == [0, 1, 2]   # boil: a task outside the preset's levels


def save_trainer_checkpoint(run_dir: str, model_dir: str, step: int) -> dict:
    """What Trainer.save_checkpoint writes (accelerate's save_state of the policy and its optimizer, plus
    trainer_state.json), for a policy whose weights were moved away from the base model's. Returns those weights."""
    from accelerate import Accelerator
    from transformers import AutoModelForCausalLM
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    with torch.no_grad():
        for i, p in enumerate(model.parameters()):
            p.add_(0.01 * (i + 1))
    accelerator = Accelerator(cpu=True)
    model, optimizer = accelerator.prepare(model, torch.optim.AdamW(model.parameters()))
    path = os.path.join(run_dir, "ckpt", f"step_{step:05d}")
    accelerator.save_state(path)
    with open(os.path.join(path, "trainer_state.json"), "w") as f:
        json.dump({"step": step}, f)
    return {k: v.clone() for k, v in accelerator.unwrap_model(model).state_dict().items()}


def test_cli_on_a_run_directory(tmp_path, nano_dir, capsys):
    from transformers import AutoModelForCausalLM

    from agentgym_nb.config import make_config
    cfg = make_config(preset="smoke", name="run", overrides={"out_dir": str(tmp_path), "engine": "hf"})
    os.makedirs(cfg.run_dir)
    with open(os.path.join(cfg.run_dir, "config.json"), "w") as f:
        f.write(cfg.to_json())
    with pytest.raises(SystemExit):
        main(["--model", cfg.run_dir])
    assert "has no checkpoint" in capsys.readouterr().err

    save_trainer_checkpoint(cfg.run_dir, nano_dir, 1)
    trained = save_trainer_checkpoint(cfg.run_dir, nano_dir, 2)
    os.makedirs(os.path.join(cfg.run_dir, "ckpt", "step_00003.tmp"))   # a save that never finished
    checkpoint = os.path.join(cfg.run_dir, "ckpt", "step_00002")
    out = str(tmp_path / "eval")
    argv = ["--model", cfg.run_dir, "--items", "100000:100003", "--n", "2", "--k", "1,2", "--max-rounds", "2",
            "--out", out]
    summary = main(argv)
    assert summary["meta"]["checkpoint"] == os.path.abspath(checkpoint) and summary["meta"]["env"] == "babyai"
    hf_dir = checkpoint_model_dir(checkpoint, nano_dir)   # built by the CLI, cached next to the checkpoint
    assert hf_dir == os.path.join(checkpoint, "hf") and summary["meta"]["model_dir"] == os.path.abspath(hf_dir)
    loaded = AutoModelForCausalLM.from_pretrained(hf_dir).state_dict()
    assert set(loaded) == set(trained) and all(torch.equal(loaded[k], trained[k]) for k in trained)
    assert torch.equal(loaded["lm_head.weight"], loaded["model.embed_tokens.weight"])   # the tie survives
    with open(os.path.join(out, "summary.json")) as f:
        assert json.load(f) == json.loads(json.dumps(summary))
    assert summary["items"] == 3 and summary["episodes"] == 6 and summary["k"] == [1, 2]
    assert main(argv) == summary   # a finished evaluation is read back: nothing replayed, same numbers


@pytest.mark.timeout(300)
def test_cli_merges_the_adapters_of_a_lora_run(tmp_path, nano_dir):
    """A real 2-step LoRA run of the smoke config, played on two BabyAI servers (env_url given as papermill-style
    text) with an adaptive schedule told to grow after every step; then the CLI evaluates the run directory: its HF
    folder holds the merged weights W + (alpha / r) B A the trainer's engine was sampling from."""
    from transformers import AutoModelForCausalLM

    from agentgym_nb.config import ADAPTIVE_METRICS, make_config
    from agentgym_nb.envs.http import make_app
    from agentgym_nb.train.common import merged_state_dict
    from agentgym_nb.train.rl import Trainer
    from harness import loopback_server
    with loopback_server(make_app("babyai")) as url_a, loopback_server(make_app("babyai")) as url_b:
        cfg = make_config(preset="smoke", name="lora", overrides=[
            f"out_dir={tmp_path}", "engine=hf", "lora_rank=4", "lr=5e-3", "threads=1", f"env_url={url_a},{url_b}",
            "entropy_coef=0.1",   # a gradient from every episode (the smoke model rarely scores at H <= 2)
            "schedule=adaptive", "adaptive_metric=success", "adaptive_threshold=0", "adaptive_patience=1",
            "adaptive_min_steps=1"])
        trainer = Trainer(cfg, log=lambda *a: None)
        history = trainer.fit()
        placed = [trainer.env_factory() for _ in range(2)]
        assert sorted(env.url for env in placed) == sorted([url_a, url_b])   # new envs go to each server in turn
        for env in placed:
            env.close()
        merged = {k: v.cpu() for k, v in merged_state_dict(trainer.accelerator.unwrap_model(trainer.model)).items()}
        trainer.close()
    # with the adaptive defaults (at least 10 steps per horizon) step 2 would still play H=1
    assert [m["max_rounds"] for m in history] == [1, 2]
    assert all(m["failed"] == 0 and m["episodes"] > 0 for m in history)   # played over HTTP
    # every metric the config accepts is logged, but success_in_reach, which plays the env's expert on each item
    # and is measured only for an adaptive schedule that watches it
    assert set(ADAPTIVE_METRICS) - {"success_in_reach"} <= set(history[0])
    base = AutoModelForCausalLM.from_pretrained(nano_dir).state_dict()
    assert set(merged) == set(base)
    assert any(not torch.equal(merged[k], base[k]) for k in base)   # the adapters trained: merging them matters

    summary = main(["--model", cfg.run_dir, "--items", "100000:100002", "--max-rounds", "1",
                    "--out", str(tmp_path / "eval")])
    checkpoint = os.path.join(cfg.run_dir, "ckpt", "step_00002")
    assert summary["meta"]["checkpoint"] == os.path.abspath(checkpoint) and summary["episodes"] == 2
    loaded = AutoModelForCausalLM.from_pretrained(os.path.join(checkpoint, "hf")).state_dict()
    assert set(loaded) == set(merged)
    assert max(float((loaded[k] - merged[k]).abs().max()) for k in merged) < 1e-6


# Sub-task sizes printed in (or implied by) the paper: the overall is their weighted mean.
SIZES = {"webarena": {"Shopping": 15, "CMS": 15, "Maps": 10, "GitLab & Reddit": 10},
         "babyai": {"GoTo": 55, "Pickup": 15, "ActionObjDoor": 5, "FindObjS7": 5, "OneRoomS20": 5, "SynthLoc": 5},
         "textcraft": {"Depth 1": 31, "Depth 2": 41, "Depth 3": 25, "Depth 4": 3},
         "sciworld": {"Measure": 53, "Test-Cond.": 83, "Find": 44, "Chem-Mix": 5, "Lifespan": 15},
         "searchqa": {"NQ": 50, "TriviaQA": 50, "PopQA": 50, "HotpotQA": 50, "2Wiki": 50, "Musique": 100,
                      "Bamboogle": 50}}
PRINTED_INCONSISTENT = {("searchqa", "GPT-4o"), ("searchqa", "Qwen-Max"), ("searchqa", "DeepSeek-V3-0324"),
                        ("webarena", "Qwen2.5-7B-Instruct")}   # as printed in arXiv v1; see papers/README.md


def test_paper_results():
    df = load_paper_results()
    assert set(df["table"]) == {"main_results", "webarena", "rl_algorithms", "scalinginter_algorithms"}
    assert df[["env", "category", "model", "source", "source_ref", "compute", "metric", "value"]].notna().all().all()
    assert df.loc[df.group == "ours (RL)", "params_b"].isin([3, 7]).all()
    rl = load_paper_results("rl_algorithms")
    pick = rl[(rl.env == "textcraft") & (rl.model == "AgentGym-RL-7B") & (rl.algorithm == "grpo")]
    assert dict(zip(pick.source_ref, pick.value)) == {
        "Table 6": 83.0, "slide 'Evaluation results of different RL algorithms'": 89.0}
    si = load_paper_results("scalinginter_algorithms")
    assert si[(si.env == "sciworld") & (si.model == "ScalingInter-7B") & (si.algorithm == "ppo")].value.item() == 25.69
    web = load_paper_results("webarena")
    assert web[(web.model == "ScalingInter-7B") & (web.category == "overall")].value.item() == 26.0
    with pytest.raises(ValueError, match="unknown paper table 'nope'; available: main_results"):
        load_paper_results("nope")

    wide = pd_pivot(pd_concat(load_paper_results("main_results"), web))
    off = set()
    for (env, model), row in wide.iterrows():
        sizes = SIZES[env]
        weighted = sum(sizes[c] * row[c] for c in sizes) / sum(sizes.values())
        if abs(weighted - row["overall"]) > 0.06:
            off.add((env, model))
    assert off == PRINTED_INCONSISTENT
    assert len(wide) == 20 + 22 + 20 + 20 + 20


def pd_concat(*frames):
    import pandas as pd
    return pd.concat(frames, ignore_index=True)


def pd_pivot(df):
    return df.pivot_table(index=["env", "model"], columns="category", values="value", aggfunc="first")


def test_per_item_and_paired_difference_by_hand():
    from agentgym_nb.evaluate.metrics import paired_difference, per_item
    records = [{"item_id": 1, "success": True}, {"item_id": 1, "success": False}, {"item_id": 2, "success": True},
               {"item_id": 3, "success": True, "failed": "env died"}]
    assert per_item(records) == {1: 0.5, 2: 1.0}   # the failed episode says nothing
    d = paired_difference({1: 1.0, 2: 1.0, 4: 0.0}, {1: 0.0, 2: 1.0, 3: 1.0})
    assert d["items"] == 2 and d["mean"] == 0.5   # items 1 and 2: differences 1 and 0
    assert 0.0 <= d["ci95"][0] <= 0.5 <= d["ci95"][1] <= 1.0
    with pytest.raises(ValueError, match="share no item"):
        paired_difference({1: 1.0}, {2: 0.0})


def test_late_slope_and_drop_from_peak_by_hand():
    from agentgym_nb.evaluate.metrics import drop_from_peak, late_slope
    # second half 0.2, 0.3, 0.4: slope 0.1 per step = 1.0 per 10 steps, residuals 0, so the interval is the point
    assert late_slope([0.0, 0.1, 0.2, 0.3, 0.4][:2] + [0.2, 0.3, 0.4]) == pytest.approx((1.0, 1.0, 1.0))
    assert all(math.isnan(x) for x in late_slope([0.1, 0.2]))
    # up from 0 to 0.6 and back to 0.1 (window 1: no smoothing): drops 0.5 of the 0.6 gained -> a collapse
    curve = [0.0, 0.3, 0.6, 0.4, 0.1]
    d = drop_from_peak(curve, 1)
    assert d["drop"] == pytest.approx(0.5) and d["peak_step"] == 3 and d["collapse"] is True
    assert drop_from_peak([0.0, 0.3, 0.6, 0.6, 0.55], 1)["collapse"] is False   # kept most of its gain


def test_trend_tells_a_plateau_from_too_few_steps_to_tell():
    from agentgym_nb.evaluate.metrics import trend
    assert trend((0.06, 0.01, 0.11)) == "rising" and trend((-0.05, -0.08, -0.01)) == "falling"
    assert trend((0.005, -0.01, 0.015)) == "plateau"              # any change is under 2 points per 10 steps
    assert trend((0.06, -0.04, 0.17)) == "no measurable trend"    # holds 0, but a rise of 17 points is as likely
    assert trend((0.0, -0.03, 0.03), flat=0.05) == "plateau"
    assert trend((float("nan"),) * 3) == "unknown"
