"""Notebook 05 (ScalingInter-RL) at the smoke preset on the other environments: `papermill 05_scalinginter.ipynb
out.ipynb -p env <env>` end to end, with the real env in process (WebArena: Chromium on the embedded offline sites;
SciWorld: the JVM) and that env's smoke nano model, built on first use and cached under outputs/models/ like the
BabyAI one. Run artefacts go to a temporary folder (the `out_dir` override).

Slow but essential: ~1 minute per env once the models are built on an idle 2-core machine; a first build adds up
to a minute (expert demonstrations and a few cloning steps). The comparison section (three more training runs) is
switched off here: it does not depend on the env, and `make test` runs it on BabyAI (nbmake).

Notebook 00 (the set-up check) at the paper preset: every env's check runs on this CPU machine, and the 7B model is
looked up offline, not loaded.
"""
import json
from pathlib import Path

import pytest

from harness import require

require("papermill")   # runs the notebooks

import papermill

from agentgym_nb import envs
from agentgym_nb.config import preset_values

pytestmark = pytest.mark.slow

NOTEBOOK = Path(__file__).resolve().parent.parent / "notebooks" / "05_scalinginter.ipynb"
SETUP_NOTEBOOK = NOTEBOOK.parent / "00_env_setup.ipynb"


def lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.timeout(1800)   # a hang guard: a busy shared machine can take 10x longer
@pytest.mark.parametrize("env", ["webarena", "textcraft", "searchqa", "sciworld"])
def test_notebook_05_runs_on_env(env, tmp_path, monkeypatch):
    monkeypatch.setenv("AGENTGYM_NB_PRESET", "smoke")   # the kernel inherits this process' environment
    papermill.execute_notebook(str(NOTEBOOK), str(tmp_path / "05_scalinginter.ipynb"), progress_bar=False,
                               parameters=dict(env=env, compare=False, overrides=[f"out_dir={tmp_path}"]))
    track = preset_values(env, "smoke")["track"]   # the env's first track, which the notebook names its run after
    run = tmp_path / "runs" / f"scalinginter-{env}-{track}-smoke"
    summary = json.loads((run / "summary.json").read_text())
    assert (summary["env"], summary["preset"], summary["model"]) == (env, "smoke", "nano")
    assert (summary["rounds"], summary["steps"], summary["heldout_items"], summary["eval_rounds"]) == ([1, 2], 2, 4, 2)
    for key in ("success_before", "success_after"):
        assert 0.0 <= summary[key] <= 1.0 and len(summary[f"{key}_ci95"]) == 2

    metrics = lines(run / "metrics.jsonl")
    assert [(m["step"], m["max_rounds"], m["episodes"]) for m in metrics] == [(1, 1, 4), (2, 2, 4)]  # 2 items x 2
    for m in metrics:
        episodes = lines(run / "rollouts" / f"step_{m['step']:05d}.jsonl")
        assert len(episodes) == 4 and max(e["num_rounds"] for e in episodes) <= m["max_rounds"]

    test_items = set(envs.item_ids(env, "test"))
    for tag in ("before", "after"):
        episodes = lines(run / "rollouts" / f"{tag}.jsonl")
        assert len(episodes) == 4 and {e["item_id"] for e in episodes} <= test_items
        for e in episodes:   # the prompt fits the smoke budget: the policy got to act, and the env answered
            assert not e["failed"] and 1 <= e["num_rounds"] <= 2, e
            assert e["num_tokens"] <= envs.env_class(env).smoke.max_total_tokens
            assert [m["role"] for m in e["conversations"][2:4]] == ["user", "assistant"]


@pytest.mark.timeout(1200)
def test_notebook_00_checks_the_paper_preset_without_loading_its_7b_model(tmp_path, monkeypatch):
    """At the paper preset the set-up check runs every env and says whether the 7B model is available offline; it
    neither loads the model nor stops because the local Hugging Face cache lacks it."""
    from agentgym_nb import models
    from agentgym_nb.config import make_config
    monkeypatch.setenv("AGENTGYM_NB_PRESET", "paper")
    record = Path(make_config(preset="paper").out_dir) / "runs" / "env-setup-paper-test" / "summary.json"
    record.unlink(missing_ok=True)   # the record read below is this run's
    papermill.execute_notebook(str(SETUP_NOTEBOOK), str(tmp_path / "00_env_setup.ipynb"), progress_bar=False,
                               parameters=dict(preset="paper", run_name="env-setup-paper-test"))
    model = make_config(preset="paper", env="babyai").model
    summary = json.loads(record.read_text())
    assert summary["preset"] == "paper"
    assert summary["models"]["babyai"] == dict(path=None, model=model, available=models.is_available(model))
    assert set(summary["expert_episodes"]) == {"babyai", "textcraft", "sciworld", "searchqa", "webarena", "miniwob"}
    assert all(r["success"] for r in summary["expert_episodes"].values()), summary["expert_episodes"]
