"""Run health: every step logs the train-inference mismatch, the weight-sync check, the env error and invalid-action
rates; a step past a threshold stops the run with a message that says what went wrong. The alarms are seen on real
runs with a planted fault: a sync that does nothing, an env that fails."""
import itertools
import math
import os

import pytest
import torch

from agentgym_nb import envs
from agentgym_nb.config import make_config
from agentgym_nb.envs.base import EnvError
from agentgym_nb.train.rl import RunHealthError, Trainer, health_problem, train_inference_mismatch


def smoke_config(tmp_path, name, **kw):
    return make_config(preset="smoke", name=name, overrides={"out_dir": str(tmp_path), **kw})


def test_mismatch_by_hand():
    # two rows; policy tokens where mask is 1; row 0's second engine log-prob unknown (nan) is left out
    old = torch.tensor([[0.0, -1.0, -2.0, 0.0], [0.0, 0.0, -0.5, -1.5]])
    mask = torch.tensor([[0, 1, 1, 0], [0, 0, 1, 1]])
    sampled = [[-1.5, float("nan")], [-0.5, -1.0]]
    m = train_inference_mismatch(sampled, old, mask)
    # d = trainer - engine over the known tokens: 0.5, 0.0, -0.5
    assert m["mismatch_mean_abs"] == pytest.approx(1 / 3)
    assert m["mismatch_max_abs"] == pytest.approx(0.5)
    k3 = [math.exp(d) - 1 - d for d in (0.5, 0.0, -0.5)]   # 0.14872, 0, 0.10653
    assert m["mismatch_kl"] == pytest.approx(sum(k3) / 3)
    with pytest.raises(ValueError, match="2 engine log-probs for 1 policy tokens"):
        train_inference_mismatch([[-1.0, -2.0]], old[:1], torch.tensor([[0, 1, 0, 0]]))


def _step(**kw):
    return {"sync_error": 1e-6, "mismatch_kl": 1e-6, "mismatch_max_abs": 1e-3, "env_error_rate": 0.0, **kw}


def test_each_threshold_names_its_problem():
    cfg = make_config(preset="smoke")
    assert health_problem(cfg, [_step()]) is None
    assert "weight sync did not take" in health_problem(cfg, [_step(sync_error=0.3)])
    assert "disagree: KL 0.2" in health_problem(cfg, [_step(mismatch_kl=0.2)])
    # one or two bad steps are blips; three in a row is an env that keeps failing
    bad = _step(env_error_rate=0.75)
    assert health_problem(cfg, [_step(), bad, bad]) is None
    assert "env keeps failing: 75%, 75%, 75%" in health_problem(cfg, [bad, bad, bad])
    # None turns a check off (as an override: keyword arguments set to None mean "the preset's value")
    off = make_config(preset="smoke", overrides={"sync_tolerance": None, "max_mismatch_kl": None, "max_env_errors": None})
    assert health_problem(off, [_step(sync_error=9.0, mismatch_kl=9.0, env_error_rate=1.0)] * 3) is None
    with pytest.raises(ValueError, match="sync_tolerance must be a positive number, or None"):
        make_config(preset="smoke", sync_tolerance=0)


@pytest.mark.slow
@pytest.mark.parametrize("engine", ["hf", "vllm"])
def test_a_healthy_step_logs_the_health_metrics_near_zero(tmp_path, nano_dir, engine):
    trainer = Trainer(smoke_config(tmp_path, f"healthy-{engine}", engine=engine, lr=1e-3), log=lambda *a: None)
    try:
        m = trainer.train_step()
    finally:
        trainer.close()
    assert m["optimizer_steps"] >= 1
    assert m["sync_error"] < 1e-4                      # fp32 engine and trainer compute the same log-probs
    assert m["mismatch_kl"] < 1e-6 and m["mismatch_max_abs"] < 1e-3
    assert m["env_error_rate"] == 0.0 and 0.0 <= m["invalid_action_rate"] <= 1.0


@pytest.mark.slow
def test_a_sync_that_does_not_take_stops_the_run(tmp_path, nano_dir):
    """An engine with its own copy of the weights (vLLM's, or an HF engine beside a sharded policy) whose sync
    silently does nothing: its log-probs drift from the trainer's and the step stops the run."""
    from agentgym_nb.rollout.engine import HFEngine
    trainer = Trainer(smoke_config(tmp_path, "broken-sync", engine="hf", lr=5e-2, sync_tolerance=1e-3),
                      log=lambda *a: None)
    trainer.engine = HFEngine(trainer.model_dir, tokenizer=trainer.tokenizer)   # its own copy, not the policy
    trainer.engine.load_weights = lambda named_tensors: None   # the planted fault: the engine keeps its weights
    try:
        with pytest.raises(RunHealthError, match="weight sync did not take"):
            trainer.train_step()
    finally:
        trainer.close()


class FailingBabyAI(envs.make("babyai").__class__):
    """BabyAI whose steps fail in three episodes of every four, as a server that keeps dying would."""
    created = itertools.count()

    def reset(self, item_id):
        self.doomed = next(self.created) % 4 != 0
        return super().reset(item_id)

    def act(self, action):
        if self.doomed:
            raise EnvError("the env server went away (planted)")
        return super().act(action)


@pytest.mark.slow
def test_an_env_that_keeps_failing_stops_the_run_after_three_steps(tmp_path, nano_dir):
    trainer = Trainer(smoke_config(tmp_path, "failing-env", engine="hf", prompts_per_step=8), log=lambda *a: None)
    trainer.env_factory = FailingBabyAI
    try:
        with pytest.raises(RunHealthError, match="env keeps failing") as alarm:
            trainer.fit(steps=5)
    finally:
        trainer.close()
    assert trainer.step == 3 and "max_env_errors=0.5" in str(alarm.value)
    assert all(m["env_error_rate"] > 0.5 for m in trainer.history)


@pytest.mark.slow
def test_metrics_reach_tensorboard_as_they_reach_metrics_jsonl(tmp_path, nano_dir):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    cfg = smoke_config(tmp_path, "tracked", engine="hf", steps=2)
    trainer = Trainer(cfg, log=lambda *a: None)
    try:
        trainer.fit()
    finally:
        trainer.close()
    events = EventAccumulator(os.path.join(cfg.run_dir, cfg.name))
    events.Reload()
    for key in ("reward", "kl", "mismatch_kl", "sync_error", "env_error_rate"):
        logged = [(e.step, e.value) for e in events.Scalars(key)]
        assert logged == [(m["step"], pytest.approx(m[key], rel=1e-6, abs=1e-9)) for m in trainer.history], key


def test_a_tracker_that_is_not_known_or_not_installed_is_an_error(tmp_path):
    with pytest.raises(ValueError, match="unknown tracker 'tensorbord'. Did you mean 'tensorboard'"):
        make_config(preset="smoke", trackers=["tensorbord"])
    assert make_config(preset="smoke", overrides=["trackers=wandb"]).trackers == ["wandb"]


@pytest.mark.slow
def test_a_tracker_asked_for_but_not_installed_stops_the_trainer_at_once(tmp_path, nano_dir):
    pytest.importorskip("tensorboard")   # the installed one; wandb is not installed here
    if __import__("importlib").util.find_spec("wandb") is not None:
        pytest.skip("wandb is installed here")
    with pytest.raises(ValueError, match=r"trackers \['wandb'\] were asked for but are not installed"):
        Trainer(smoke_config(tmp_path, "no-wandb", engine="hf", trackers=["wandb"]), log=lambda *a: None)
