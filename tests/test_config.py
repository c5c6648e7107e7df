"""RunConfig: presets, AgentGym-RL dotted keys, and clear errors for bad input."""
import pytest

from agentgym_nb.config import make_config, parse_overrides


def test_precedence_defaults_preset_kwargs_overrides():
    cfg = make_config(preset="cpu", steps=7, overrides=["steps=9"])
    assert cfg.preset == "cpu" and cfg.model == "nano"
    assert cfg.steps == 9                       # overrides beat keyword arguments
    assert make_config(preset="cpu", steps=7).steps == 7


def test_none_kwargs_leave_the_preset_alone():
    cfg = make_config(preset="smoke", steps=None, rounds=None)
    assert cfg.steps == make_config(preset="smoke").steps


def test_preset_from_environment(monkeypatch):
    monkeypatch.setenv("AGENTGYM_NB_PRESET", "smoke")
    assert make_config().preset == "smoke"


def test_agentgym_rl_keys_map_onto_fields():
    cfg = make_config(preset="cpu", overrides=[
        "algorithm.rounds_ctrl.type=scaling_inter_stepwise", "algorithm.rounds_ctrl.rounds=[6,13,20]",
        "algorithm.rounds_ctrl.steps_scaling_inter=100", "actor_rollout_ref.rollout.max_tokens=200",
        "data.max_response_length=4096", "actor_rollout_ref.actor.optim.lr=1e-6", "actor_rollout_ref.rollout.n=8"])
    assert (cfg.schedule, cfg.rounds, cfg.rounds_every) == ("stepwise", [6, 13, 20], 100)
    assert cfg.max_tokens == 200 and cfg.lr == 1e-6 and cfg.samples_per_prompt == 8
    assert cfg.max_total_tokens == 1024 + 4096


def test_paper_preset_follows_the_scalinginter_scripts():
    cfg = make_config(preset="paper", env="babyai")
    assert cfg.model == "Qwen/Qwen2.5-7B-Instruct"
    assert (cfg.rounds, cfg.rounds_every, cfg.lr, cfg.kl_type, cfg.kl_coef) == ([6, 13, 20], 100, 1e-6, "low_var_kl", 0.001)
    assert make_config(preset="paper", env="webarena").rounds_every == 80


@pytest.mark.parametrize("kwargs, message", [
    (dict(env="babya"), "Did you mean 'babyai'"),
    (dict(preset="gpu"), "Valid: smoke, cpu, paper"),
    (dict(overrides=["algorithm.rounds_ctrl.roundz=[1]"]), "did you mean 'algorithm.rounds_ctrl.rounds'"),
    (dict(overrides=["rounds"]), "expected key=value"),
    (dict(overrides=["steps=0"]), "steps must be a positive integer"),
    (dict(overrides=["rounds=[3,-1]"]), "positive integers"),
    (dict(algorithm="ppo2"), "unknown algorithm"),
    (dict(overrides=["test_items=[0,10]"]), "overlap"),
])
def test_bad_input_names_what_is_wrong(kwargs, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace("[", r"\[")):
        make_config(**{"preset": "cpu", **kwargs})


def test_override_values_are_parsed_as_json_when_possible():
    assert parse_overrides(["a=[1,2]", "b=true", "c=1e-6", "d=hello", "e=True"]) == {
        "a": [1, 2], "b": True, "c": 1e-6, "d": "hello", "e": True}


@pytest.mark.parametrize("env,batch,n,mini,total_tokens,rounds,every,tokens", [
    ("babyai", 32, 4, 4, 512 + 8192, [6, 13, 20], 100, 512),
    ("sciworld", 16, 8, 2, 1024 + 8192, [10, 20, 30], 100, 200),
    ("searchqa", 32, 4, 4, 1024 + 8192, [5, 8, 10], 100, 512),
    ("textcraft", 32, 8, 4, 512 + 10240, [10, 20, 30], 100, 512),
    ("webarena", 32, 4, 8, 750 + 14098, [8, 12, 15], 80, 512)])
def test_paper_preset_is_the_scalinginter_scripts(env, batch, n, mini, total_tokens, rounds, every, tokens):
    """reference/agentgym_rl.md section 7: train batch, rollout.n, mini-batch (prompts), prompt + response length,
    rounds schedule, tokens per turn; GRPO, lr 1e-6, low_var_kl 0.001 for every env."""
    cfg = make_config(preset="paper", env=env)
    assert (cfg.prompts_per_step, cfg.samples_per_prompt, cfg.mini_batches) == (batch, n, mini)
    assert (cfg.max_total_tokens, cfg.rounds, cfg.rounds_every, cfg.max_tokens) == (total_tokens, rounds, every, tokens)
    assert (cfg.algorithm, cfg.lr, cfg.kl_type, cfg.kl_coef, cfg.model) == (
        "grpo", 1e-6, "low_var_kl", 0.001, "Qwen/Qwen2.5-7B-Instruct")


def test_dry_run_prints_the_plan_without_a_gpu_or_the_model(capsys):
    from agentgym_nb.train.rl import main
    main(["--env", "webarena", "--preset", "paper", "--dry-run", "trainer.total_training_steps=160"])
    out = capsys.readouterr().out
    assert "Qwen/Qwen2.5-7B-Instruct" in out and "NOT available offline" in out
    assert "steps 1-80: H=8; steps 81-160: H=12" in out and "32 prompts x 4 episodes = 128 episodes" in out
    with pytest.raises(SystemExit):
        main(["--env", "webarena", "--preset", "paper", "--dry-run", "algorithm.rounds_ctrl.typ=fixed"])
    assert "did you mean 'algorithm.rounds_ctrl.type'" in capsys.readouterr().err


def test_fixed_schedule_and_papermill_list_text():
    from agentgym_nb.algos.schedule import make_schedule
    cfg = make_config(preset="smoke", schedule="fixed", rounds=6)
    assert cfg.rounds == [6] and make_schedule(cfg.schedule, cfg.rounds, every=cfg.rounds_every).rounds_at(50) == 6
    assert make_config(preset="smoke", rounds="[2, 4, 8]").rounds == [2, 4, 8]   # what papermill -p passes
    with pytest.raises(ValueError, match="one horizon"):
        make_config(preset="smoke", schedule="fixed", rounds=[2, 4])
