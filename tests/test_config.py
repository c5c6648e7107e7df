"""RunConfig: presets, AgentGym-RL dotted keys, and clear errors for bad input."""
import dataclasses
import re

import pytest

from agentgym_nb.config import make_config, parse_overrides
from harness import ENV_PACKAGES, needs


def test_precedence_defaults_preset_kwargs_overrides():
    cfg = make_config(preset="cpu", steps=7, overrides=["steps=9"])
    assert cfg.preset == "cpu" and cfg.model == "nano"
    assert cfg.steps == 9                       # overrides beat keyword arguments
    assert make_config(preset="cpu", steps=7).steps == 7


def test_none_kwargs_leave_the_preset_alone():
    cfg = make_config(preset="smoke", steps=None, rounds=None)
    assert cfg.steps == make_config(preset="smoke").steps


@needs(envs=("webarena",))
def test_cpu_preset_gives_webarena_a_smaller_budget_in_three_equal_stages():
    babyai, web = make_config(preset="cpu", env="babyai"), make_config(preset="cpu", env="webarena")
    assert (babyai.prompts_per_step, babyai.steps, babyai.rounds_every) == (8, 40, 12)
    assert (web.prompts_per_step, web.steps, web.rounds_every, web.rounds) == (4, 24, 8, [4, 8, 12])
    assert web.samples_per_prompt == babyai.samples_per_prompt == 8 and web.lr == babyai.lr
    assert make_config(preset="cpu", env="webarena", steps=30, prompts_per_step=8).prompts_per_step == 8


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
    clip = make_config(preset="cpu", overrides=["actor_rollout_ref.actor.clip_ratio_low=0.2",
                                                "actor_rollout_ref.actor.clip_ratio_high=0.28",
                                                "actor_rollout_ref.actor.clip_ratio_c=3.0"])
    assert (clip.clip_ratio, clip.clip_ratio_high, clip.clip_ratio_c) == (0.2, 0.28, 3.0)


@needs(envs=("webarena",))
def test_paper_preset_follows_the_scalinginter_scripts():
    cfg = make_config(preset="paper", env="babyai")
    assert cfg.model == "Qwen/Qwen2.5-7B-Instruct"
    assert (cfg.rounds, cfg.rounds_every, cfg.lr, cfg.kl_type, cfg.kl_coef) == ([6, 13, 20], 100, 1e-6, "low_var_kl", 0.001)
    assert make_config(preset="paper", env="webarena").rounds_every == 80
    # AgentGym-RL's micro-batches of one trajectory: a per-trajectory token mean, averaged; verl's critic lr
    assert cfg.loss_agg == "seq-mean-token-mean" and cfg.critic_lr == 1e-5


@needs(envs=("textcraft",))
def test_prompt_and_response_lengths_map_as_in_agentgym_rl_scripts():
    """AgentGym-RL cuts a trajectory at data.max_prompt_length + data.max_response_length tokens; the paper preset's
    split is its script's (BabyAI 512 + 8192), elsewhere the prompt part is 1024."""
    assert make_config(preset="paper", env="babyai").max_total_tokens == 512 + 8192
    both = make_config(preset="paper", env="babyai", overrides=["data.max_prompt_length=1024",
                                                                "data.max_response_length=4096"])
    assert both.max_total_tokens == 1024 + 4096
    # one of the two keeps the script's other part, in either order
    assert make_config(preset="paper", env="babyai", overrides=["data.max_response_length=4096"]).max_total_tokens \
        == 512 + 4096
    assert make_config(preset="paper", env="textcraft", overrides=["data.max_prompt_length=1024"]).max_total_tokens \
        == 1024 + 10240
    assert make_config(preset="cpu", overrides=["data.max_prompt_length=256", "data.max_response_length=2048"]
                       ).max_total_tokens == 256 + 2048
    with pytest.raises(ValueError, match="data.max_response_length must be a positive number of tokens"):
        make_config(preset="cpu", overrides=["data.max_response_length=-1"])


@pytest.mark.parametrize("kwargs, message", [
    (dict(env="babya"), "Did you mean 'babyai'"),
    (dict(preset="gpus"), "Did you mean .gpu.. Valid: smoke, cpu, gpu, paper"),
    (dict(overrides=["algorithm.rounds_ctrl.roundz=[1]"]), "did you mean 'algorithm.rounds_ctrl.rounds'"),
    (dict(overrides=["rounds"]), "expected key=value"),
    (dict(overrides=["steps=0"]), "steps must be a positive integer"),
    (dict(overrides=["rounds_every=0"]), "rounds_every must be a positive integer"),
    (dict(overrides=["adaptive_patience=0"]), "adaptive_patience must be a positive integer"),   # while stepwise
    (dict(overrides=["schedule=linear"]), "unknown schedule 'linear'. Valid: fixed, stepwise, adaptive"),
    (dict(overrides=["rounds=[3,-1]"]), "positive integers"),
    (dict(algorithm="ppo2"), "unknown algorithm"),
    (dict(overrides=["test_items=[0,10]"]), "overlap"),
    (dict(overrides=["actor_rollout_ref.actor.clip_ratio_c=0.5"]), "the dual clip bound"),
    (dict(overrides=["clip_ratio=1.5"]), "0 < clip_ratio < 1"),
    (dict(overrides=["temperature=0"]), "temperature .training rollouts. must be > 0"),
    (dict(overrides=["actor_rollout_ref.rollout.temperature=-1"]), "greedy decoding is for evaluation"),
    (dict(overrides=["levels=[40]"]), "levels of babyai are the level index"),
    pytest.param(dict(env="textcraft", overrides=["levels=[0]"]),
                 "levels of textcraft are the recipe depth of the goal", marks=needs(envs=("textcraft",))),
    pytest.param(dict(env="searchqa", overrides=["levels=[1]"]), "env 'searchqa' has none",
                 marks=needs(envs=tuple(ENV_PACKAGES))),   # the message lists the envs that have levels
    pytest.param(dict(env="textcraft", overrides=["levels=[true]"]),
                 "the recipe depth of the goal, integers in .1, 5.; got .True.", marks=needs(envs=("textcraft",))),
])
def test_bad_input_names_what_is_wrong(kwargs, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace("[", r"\[")):
        make_config(**{"preset": "cpu", **kwargs})


def test_greedy_evaluation_stays_allowed():
    assert make_config(preset="cpu", overrides=["eval_temperature=0"]).eval_temperature == 0


@needs(envs=("textcraft",))
def test_levels_select_items_by_level():
    """BabyAI levels are item_id % 40; TextCraft's are the goal's recipe depth, and the cpu preset keeps depths 1-2
    (train and test pools stay disjoint, the test pool holds the shipped test list's depth-1 and -2 items)."""
    from agentgym_nb import envs
    from agentgym_nb.config import item_pool
    babyai = make_config(preset="cpu", overrides=["levels=3"])   # one level, as papermill -p passes it
    assert item_pool(babyai, "train") and all(i % 40 == 3 for i in item_pool(babyai, "train"))
    textcraft = make_config(preset="cpu", env="textcraft")
    assert textcraft.levels == [1, 2]
    train, test = item_pool(textcraft, "train"), item_pool(textcraft, "test")
    assert {envs.env_class("textcraft").level(i) for i in train + test} == {1, 2}
    assert len(test) == 23 + 53 and not set(train) & set(test)     # the shipped test list: 23 at depth 1, 53 at 2
    assert envs.env_class("textcraft").level(0) == 1 and envs.env_class("textcraft").level(543) == 4


@needs(envs=("sciworld",))
def test_sciworld_levels_are_task_indices_and_the_cpu_preset_keeps_the_short_tasks():
    from agentgym_nb import envs
    from agentgym_nb.config import item_pool
    from agentgym_nb.envs.sciworld import item_id_of
    # AgentGym's flat list: boil's 30 variations are ids 0-29; the last id, 4638, is identify-life-stages-2's
    assert envs.env_class("sciworld").level(0) == envs.env_class("sciworld").level(29) == 0
    assert envs.env_class("sciworld").level(30) == 1 and envs.env_class("sciworld").level(4638) == 22
    assert envs.env_class("sciworld").level(item_id_of("find-plant", 0)) == 13
    sciworld = make_config(preset="cpu", env="sciworld")
    assert sciworld.levels == [7, 11, 12, 13, 14, 16, 18, 19, 20, 22]
    train, test = item_pool(sciworld, "train"), item_pool(sciworld, "test")
    assert len(train) == 818 and len(test) == 88 and not set(train) & set(test)
    assert {envs.env_class("sciworld").level(i) for i in test} == set(sciworld.levels)
    with pytest.raises(ValueError, match=r"task index in AgentGym's task list .*integers in \[0, 23\)"):
        make_config(preset="cpu", env="sciworld", overrides=["levels=[23]"])


def test_override_values_are_parsed_as_json_when_possible():
    assert parse_overrides(["a=[1,2]", "b=true", "c=1e-6", "d=hello", "e=True"]) == {
        "a": [1, 2], "b": True, "c": 1e-6, "d": "hello", "e": True}


SCRIPTS = [
    ("babyai", 32, 4, 4, 512 + 8192, [6, 13, 20], 100, 512),
    ("sciworld", 16, 8, 2, 1024 + 8192, [10, 20, 30], 100, 200),
    ("searchqa", 32, 4, 4, 1024 + 8192, [5, 8, 10], 100, 512),
    ("textcraft", 32, 8, 4, 512 + 10240, [10, 20, 30], 100, 512),
    ("webarena", 32, 4, 8, 750 + 14098, [8, 12, 15], 80, 512)]


@pytest.mark.parametrize("env,batch,n,mini,total_tokens,rounds,every,tokens",
                         [pytest.param(*script, marks=needs(envs=script[:1])) for script in SCRIPTS])
def test_paper_preset_is_the_scalinginter_scripts(env, batch, n, mini, total_tokens, rounds, every, tokens):
    """AgentGym-RL's ScalingInter-RL scripts (examples/train/ScalingInter-RL/<env>_train.sh): train batch, rollout.n,
    mini-batch (prompts), prompt + response length, rounds schedule, tokens per turn; GRPO, lr 1e-6, low_var_kl 0.001
    for every env."""
    cfg = make_config(preset="paper", env=env)
    assert (cfg.prompts_per_step, cfg.samples_per_prompt, cfg.mini_batches) == (batch, n, mini)
    assert (cfg.max_total_tokens, cfg.rounds, cfg.rounds_every, cfg.max_tokens) == (total_tokens, rounds, every, tokens)
    assert (cfg.algorithm, cfg.lr, cfg.kl_type, cfg.kl_coef, cfg.model) == (
        "grpo", 1e-6, "low_var_kl", 0.001, "Qwen/Qwen2.5-7B-Instruct")


@needs(envs=("webarena",))
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


def test_adaptive_schedule_options_from_the_config():
    from agentgym_nb.algos.schedule import adaptive
    from agentgym_nb.config import round_schedule
    # the defaults are adaptive()'s, so runs named by their non-default settings keep their names
    assert round_schedule(make_config(preset="smoke", schedule="adaptive", rounds=[2, 4])) == adaptive([2, 4])
    cfg = make_config(preset="smoke", overrides=["algorithm.rounds_ctrl.type=adaptive", "rounds=[2,4,6]",
                                                  "adaptive_metric=cut_by_horizon", "adaptive_threshold=0.8",
                                                  "adaptive_patience=2", "adaptive_min_steps=3"])
    schedule = round_schedule(cfg)
    assert schedule == adaptive([2, 4, 6], metric="cut_by_horizon", threshold=0.8, patience=2, min_steps=3)
    # after 3 steps at H=2 with the last two cut by the horizon at (.7 + .9)/2 = .8 >= .8: step 4 plays H=4
    history = [{"cut_by_horizon": v, "success": 1.0} for v in (0.1, 0.7, 0.9)]
    assert [schedule.rounds_at(k, history) for k in (1, 2, 3, 4)] == [2, 2, 2, 4]
    assert round_schedule(dataclasses.replace(cfg, adaptive_threshold=0.9)).rounds_at(4, history) == 2


@pytest.mark.parametrize("override, message", [
    ("adaptive_metric=sucess", "unknown adaptive_metric 'sucess'. Did you mean 'success'"),
    ("adaptive_threshold=high", "adaptive_threshold must be a finite number"),
    ("adaptive_threshold=true", "adaptive_threshold must be a finite number"),
    ("adaptive_patience=0", "adaptive_patience must be a positive integer"),
    ("adaptive_patience=1.5", "adaptive_patience must be a positive integer"),
    ("adaptive_min_steps=-1", "adaptive_min_steps must be an integer >= 0"),
    ("rounds=[6,3]", "non-decreasing"),
])
def test_bad_adaptive_options_are_named(override, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace("[", r"\[")):
        make_config(preset="smoke", overrides=["schedule=adaptive", override])


def test_dry_run_of_an_adaptive_schedule_states_its_rule(capsys):
    from agentgym_nb.train.rl import main
    main(["--env", "babyai", "--preset", "smoke", "--dry-run", "schedule=adaptive", "rounds=[2,4,6]",
          "adaptive_metric=cut_by_horizon", "adaptive_threshold=0.8", "adaptive_patience=3", "adaptive_min_steps=4",
          "env_url=http://127.0.0.1:36002,http://127.0.0.1:36003"])
    out = capsys.readouterr().out
    assert ("horizon (adaptive): H=2 -> 4 -> 6, the next one once the mean cut_by_horizon of the last 3 steps is "
            ">= 0.8, after at least 4 steps at the current one") in out
    assert "env: http://127.0.0.1:36002, http://127.0.0.1:36003" in out


@pytest.mark.parametrize("given, parsed", [
    ("http://127.0.0.1:36002", "http://127.0.0.1:36002"),
    ("http://127.0.0.1:36002,http://127.0.0.1:36003", ["http://127.0.0.1:36002", "http://127.0.0.1:36003"]),
    ("http://a:1, https://b:2", ["http://a:1", "https://b:2"]),
    ('["http://a:1", "http://b:2"]', ["http://a:1", "http://b:2"]),   # papermill -p env_url '[...]'
    (["http://a:1", "http://b:2"], ["http://a:1", "http://b:2"]),
    (("http://a:1",), ["http://a:1"]),
])
def test_env_url_takes_one_url_or_a_list(given, parsed):
    assert make_config(preset="smoke", env_url=given).env_url == parsed   # a notebook's parameter
    if isinstance(given, str):
        assert make_config(preset="smoke", overrides=[f"env_url={given}"]).env_url == parsed
        assert make_config(preset="smoke", overrides=[f"agentgym.env_addr={given}"]).env_url == parsed


@pytest.mark.parametrize("given", ["127.0.0.1:36002", "ftp://a:1", "http://a:1,", "http://", "", [], ["http://a", 3]])
def test_bad_env_url_is_named(given):
    with pytest.raises(ValueError, match="env_url must be an http:// or https:// URL"):
        make_config(preset="smoke", overrides={"env_url": given})
    with pytest.raises(ValueError, match="env_url '.http://a:1.' starts with '.' but is not a JSON list"):
        make_config(preset="smoke", overrides={"env_url": "[http://a:1]"})   # JSON strings need quotes


@pytest.mark.parametrize("given, parsed", [
    ([2, 4], [2, 4]), ((2, 4), [2, 4]), ("[2, 4]", [2, 4]), ("2,4", [2, 4]), (" 2, 4 ", [2, 4]), ("2", [2]), (2, [2]),
    ('["a", "b"]', ["a", "b"]), ("a, b", ["a", "b"]), ("fixed20", ["fixed20"]), ("1e-3,true", [1e-3, True]),
])
def test_one_list_parser_for_papermill_and_the_command_line(given, parsed):
    from agentgym_nb.config import parse_list
    from agentgym_nb.train.runs import listed
    assert parse_list(given, "x") == parsed
    assert listed(given, "x") == parsed


def test_the_parser_behind_evaluation_ks_and_config_lists():
    from agentgym_nb.evaluate_cli import parse_ks
    assert parse_ks("4,1,2,", 4) == parse_ks("[1, 2, 4]", 4) == [1, 2, 4]
    with pytest.raises(ValueError, match="--k must be comma-separated integers"):
        parse_ks("1,two", 4)
    with pytest.raises(ValueError, match=re.escape("rounds '[2, 4' starts with '[' but is not a JSON list")):
        make_config(preset="smoke", overrides={"rounds": "[2, 4"})
    assert make_config(preset="smoke", overrides=["rounds=2,4"]).rounds == [2, 4]


def test_a_pretrained_model_at_the_cpu_preset_gets_micro_batches_its_vocabulary_fits():
    assert make_config(preset="cpu", model="smollm2-135m").micro_batch_tokens == 2048
    assert make_config(preset="cpu").micro_batch_tokens == 8192   # the nano's 1,024-token vocabulary
    assert make_config(preset="cpu", model="smollm2-135m", micro_batch_tokens=4096).micro_batch_tokens == 4096


@pytest.mark.parametrize("overrides, message", [
    (["algorithm=gae", "cut_out_of_baseline=True"],
     "cut_out_of_baseline changes a group baseline, which only grpo, rloo, gigpo have; gae has none"),
    (["algorithm=reinforce_plus_plus", "cut_out_of_baseline=True"], "reinforce_plus_plus has none"),
    (["cut_turn_discount=0"], "cut_turn_discount must be in (0, 1] (1: no discount), got 0"),
    (["cut_turn_discount=1.5"], "cut_turn_discount must be in (0, 1] (1: no discount), got 1.5"),
])
def test_bad_horizon_cut_options_are_named(overrides, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        make_config(preset="smoke", overrides=overrides)
    for algorithm in ("grpo", "rloo", "gigpo"):   # the estimators with a group baseline take both
        make_config(preset="smoke", overrides=[f"algorithm={algorithm}", "cut_out_of_baseline=True",
                                               "cut_turn_discount=0.5"])


def test_validation_accepts_exactly_what_the_owners_list():
    """The names validation accepts are the owners' lists (losses, engine, advantages), not copies of them."""
    from agentgym_nb.algos.advantages import ESTIMATORS, GIGPO_MODES
    from agentgym_nb.algos.losses import AGG_MODES, KL_KINDS
    from agentgym_nb.rollout.engine import ENGINE_KINDS
    for field, names in (("loss_agg", AGG_MODES), ("kl_type", tuple(KL_KINDS)), ("engine", ENGINE_KINDS),
                         ("gigpo_mode", GIGPO_MODES), ("algorithm", tuple(ESTIMATORS))):
        for name in names:
            assert getattr(make_config(preset="smoke", **{field: name}), field) == name
        with pytest.raises(ValueError, match=re.escape(f"unknown {field} 'nope'. Valid: {', '.join(names)}")):
            make_config(preset="smoke", **{field: "nope"})


def test_truncated_importance_sampling_is_off_by_default_and_takes_verls_key():
    assert make_config(preset="smoke").tis_cap is None
    cfg = make_config(preset="smoke", overrides=["algorithm.rollout_correction.rollout_is_threshold=2.0"])
    assert cfg.tis_cap == 2.0
    for bad in (0.5, True, "two"):
        with pytest.raises(ValueError, match="tis_cap .* must be a number >= 1"):
            make_config(preset="smoke", overrides={"tis_cap": bad})
