"""What a run is: one `RunConfig` dataclass, three presets, and AgentGym-RL's dotted keys mapped onto it.

    cfg = make_config(env="babyai", preset="cpu", overrides=["algorithm.rounds_ctrl.rounds=[2,4,6]"])

Precedence: dataclass defaults < preset (per env) < keyword arguments < overrides. Every name is checked: an
unknown field, preset, env or dotted key is an error that names the closest valid one.
"""
from __future__ import annotations

import dataclasses
import difflib
import json
import os
from dataclasses import dataclass, field
from typing import Any

from . import envs
from .algos.advantages import ESTIMATORS, GIGPO_MODES
from .algos.losses import AGG_MODES, KL_KINDS
from .algos.schedule import ALIASES, SCHEDULES, check_fields
from .paths import default_outputs_dir
from .rollout.engine import ENGINE_KINDS

PRESETS = ("smoke", "cpu", "gpu", "paper")


@dataclass
class RunConfig:
    # what
    name: str = "run"
    env: str = "babyai"
    track: str | None = None             # a named item set of the env (its `tracks`): the cpu and smoke presets' episode
                                         # shape and levels; None: the env's first track (the paper preset: "all")
    model: str = "nano"                  # "nano", "smollm2-135m", an HF id or a local path
    preset: str = "cpu"
    engine: str = "auto"                 # "vllm", "hf" or "auto" (vllm when importable)
    env_url: str | list[str] | None = None   # an AgentGym-protocol server instead of an in-process env; with a list
                                         # ("http://a,http://b" as text), new envs go to each URL in turn
    seed: int = 0
    # data: item ids. None = the env's shipped list (agentgym_nb/data/items/<env>_<split>.json); or [start, stop)
    train_items: tuple[int, int] | None = None
    test_items: tuple[int, int] | None = None
    levels: list[int] | None = None      # keep only items of these levels (what a level is: the env's `levels`,
                                         # e.g. BabyAI's level index); set by the track, None: every item
    # rollout
    prompts_per_step: int = 8            # data.train_batch_size: distinct items per training step
    samples_per_prompt: int = 4          # actor_rollout_ref.rollout.n: episodes per item (one GRPO group)
    oversample: int = 1                  # roll out prompts_per_step x oversample items per step ...
    filter_groups: bool = False          # ... and train on at most prompts_per_step groups whose scores differ
    max_tokens: int = 48                 # per assistant turn
    max_total_tokens: int = 2048         # whole trajectory budget (prompt + all turns); beyond it: truncated
    temperature: float = 1.0
    top_p: float = 1.0
    env_timeout: float = 60.0            # seconds per env call
    max_envs: int = 64                   # live envs (episodes in flight) at once; SciWorld: one JVM each
    # horizon schedule (ScalingInter-RL)
    schedule: str = "stepwise"           # a name of algos.schedule.SCHEDULES: fixed, stepwise, adaptive
    rounds: list[int] = field(default_factory=lambda: [6, 13, 20])
    rounds_every: int = 100              # steps_scaling_inter
    # adaptive: the next horizon once the mean of adaptive_metric over the last adaptive_patience steps is
    # >= adaptive_threshold, after at least max(adaptive_min_steps, adaptive_patience) steps at the current one
    adaptive_metric: str = "success"     # one of ADAPTIVE_METRICS; "cut_by_horizon": the horizon is the bottleneck
    adaptive_threshold: float = 0.5
    adaptive_patience: int = 5
    adaptive_min_steps: int = 10
    # learning
    algorithm: str = "grpo"
    steps: int = 300
    lr: float = 1e-6
    weight_decay: float = 0.01
    grad_clip: float = 1.0
    clip_ratio: float = 0.2              # PPO's epsilon (the lower one when clip_ratio_high is set)
    clip_ratio_high: float | None = None  # upper epsilon (DAPO's clip-higher); None = clip_ratio
    clip_ratio_c: float | None = None    # dual clip bound c > 1 for negative advantages (Ye et al. 2020); None = off
    kl_coef: float = 0.001               # KL to the frozen reference (0 disables the reference)
    kl_type: str = "low_var_kl"          # k1, k2 (mse), k3 (low_var_kl), abs
    kl_in_reward: bool = False           # KL as a per-token reward penalty (REINFORCE++, GAE) instead of a loss term
    tis_cap: float | None = None         # truncated importance sampling: weight each policy token's loss by
                                         # min(pi_trainer / pi_engine, tis_cap), correcting for an engine that samples
                                         # from slightly other numbers (bf16 vLLM beside an fp32 trainer); None = off
    gamma: float = 1.0                   # discount per trainable token (REINFORCE++, GAE), per turn (GiGPO)
    lam: float = 1.0                     # GAE's lambda
    gigpo_step_weight: float = 1.0       # GiGPO: weight omega of the step-level advantage
    gigpo_mode: str = "mean_std_norm"    # GiGPO: "mean_std_norm" (divide by the std) or "mean_norm" (centre only)
    # Episodes cut by the horizon (neither done nor out of tokens) scored 0 without failing: with cut_out_of_baseline
    # a group baseline (grpo, rloo, gigpo) is made of the group's other episodes only, so a cut does not lower the
    # bar the finished ones are measured against; cut episodes are still trained on, against that baseline, where
    # their group has a finished episode. Where most finished episodes are successes (BabyAI), the baseline is then
    # the successes' own mean: a lone success gets 0 and every cut episode of its group a negative advantage, so
    # such a group only pushes down (docs/results.md measures what that does). cut_turn_discount d < 1 scales turn
    # k's advantage of a cut episode by d^(k-1): its last turns, which the horizon stopped, carry less of the blame
    # than the turns that spent it.
    cut_out_of_baseline: bool = False
    cut_turn_discount: float = 1.0
    critic_lr: float = 1e-5              # GAE's critic (verl's and AgentGym-RL's critic.optim.lr)
    value_clip: float = 0.5
    entropy_coef: float = 0.0
    loss_agg: str = "token-mean"
    ppo_epochs: int = 1
    mini_batches: int = 1                # optimizer steps per epoch over one rollout batch
    micro_batch_tokens: int = 8192       # gradient accumulation unit (tokens, padded)
    lora_rank: int = 0                   # 0 = full fine-tuning
    bf16: bool = False                   # bf16 autocast for the trainer's forward/backward (GPUs, large models; on an
                                         # AVX2-only CPU bf16 is emulated: ~12x slower than fp32)
    gradient_checkpointing: bool = False  # recompute each block's activations in the backward pass (less memory)
    save_every: int = 10
    # evaluation
    eval_items: int = 200                # held-out items evaluated before and after training
    eval_samples: int = 1
    eval_rounds: int = 20
    eval_temperature: float = 1.0
    # run health: a step past one of these stops the run with a message saying which and why (None: not checked).
    # The metrics are logged at every step whatever these are (Trainer.train_step).
    sync_tolerance: float | None = 0.1   # mean |engine - trainer| log-prob on a probe sequence after a weight sync
                                         # (fp32 engines agree to ~1e-6, bf16 ones to ~1e-2): else the sync did not take
    max_mismatch_kl: float | None = 0.05  # KL(engine || trainer) per sampled token, estimated on the step's episodes
    max_env_errors: float | None = 0.5   # share of a step's episodes that failed in the env, three steps in a row
    # experiment tracking through Accelerate's trackers, beside metrics.jsonl (the record): None = TensorBoard when it
    # is installed; or names such as ["tensorboard", "wandb", "mlflow"] (W&B offline: WANDB_MODE=offline); [] = none
    trackers: list[str] | None = None
    # machine
    threads: int = 0                     # torch threads; 0 = $OMP_NUM_THREADS if set, else all cores
    rollout_tp: int = 1                  # devices each vLLM engine is split over (tensor parallel); one engine per
                                         # trainer process, so > 1 only with one process (see train/rl.py)
    kv_cache_gib: float = 1.0            # vLLM's KV cache per engine
    launch_config: str | None = None     # the `accelerate launch --config_file` the run is planned for: a name in
                                         # configs/accelerate ("fsdp_8gpu") or a path; the dry run checks it
    out_dir: str = field(default_factory=default_outputs_dir)

    @property
    def run_dir(self) -> str:
        return os.path.join(self.out_dir, "runs", self.name)

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), indent=2)


# AgentGym-RL (verl) dotted keys -> our fields. Values are parsed as JSON when they can be ("[6,13,20]", "true", "1e-6").
DOTTED_KEYS = {
    "algorithm.adv_estimator": "algorithm",
    "algorithm.rounds_ctrl.type": "schedule",
    "algorithm.rounds_ctrl.rounds": "rounds",
    "algorithm.rounds_ctrl.steps_scaling_inter": "rounds_every",
    "algorithm.kl_ctrl.kl_coef": "kl_coef",
    "algorithm.kl_penalty": "kl_type",
    "algorithm.use_kl_in_reward": "kl_in_reward",
    "algorithm.rollout_correction.rollout_is_threshold": "tis_cap",   # verl's token-level rollout correction
    "algorithm.gamma": "gamma",
    "algorithm.lam": "lam",
    "algorithm.gigpo.step_advantage_w": "gigpo_step_weight",
    "algorithm.gigpo.mode": "gigpo_mode",
    "critic.optim.lr": "critic_lr",
    "critic.cliprange_value": "value_clip",
    "actor_rollout_ref.actor.loss_agg_mode": "loss_agg",
    "actor_rollout_ref.model.lora_rank": "lora_rank",
    "actor_rollout_ref.model.path": "model",
    "actor_rollout_ref.rollout.n": "samples_per_prompt",
    "actor_rollout_ref.rollout.max_tokens": "max_tokens",
    "actor_rollout_ref.rollout.temperature": "temperature",
    "actor_rollout_ref.rollout.top_p": "top_p",
    "actor_rollout_ref.rollout.name": "engine",
    "actor_rollout_ref.rollout.tensor_model_parallel_size": "rollout_tp",
    "actor_rollout_ref.model.enable_gradient_checkpointing": "gradient_checkpointing",
    "actor_rollout_ref.actor.optim.lr": "lr",
    "actor_rollout_ref.actor.kl_loss_coef": "kl_coef",
    "actor_rollout_ref.actor.kl_loss_type": "kl_type",
    "actor_rollout_ref.actor.clip_ratio": "clip_ratio",
    "actor_rollout_ref.actor.clip_ratio_low": "clip_ratio",
    "actor_rollout_ref.actor.clip_ratio_high": "clip_ratio_high",
    "actor_rollout_ref.actor.clip_ratio_c": "clip_ratio_c",
    "actor_rollout_ref.actor.entropy_coeff": "entropy_coef",
    "actor_rollout_ref.actor.ppo_epochs": "ppo_epochs",
    "actor_rollout_ref.actor.grad_clip": "grad_clip",
    "data.train_batch_size": "prompts_per_step",
    "algorithm.filter_groups.enable": "filter_groups",
    "data.max_prompt_length": "max_prompt_length",       # special: the two parts of max_total_tokens, see _apply
    "data.max_response_length": "max_response_length",
    "trainer.total_training_steps": "steps",
    "trainer.save_freq": "save_every",
    "trainer.experiment_name": "name",
    "agentgym.task_name": "env",
    "agentgym.env_addr": "env_url",
    "agentgym.max_rounds": "eval_rounds",
}
# Per-step training metrics (metrics.jsonl) the adaptive schedule can watch: means over the step's episodes.
# "success_in_reach": success over the episodes whose item the env's expert solves within the current horizon (the
# share of what this horizon allows that the policy achieves; envs.expert_turns).
ADAPTIVE_METRICS = ("success", "success_in_reach", "reward", "done", "turns", "cut_by_horizon",
                    "cut_by_token_budget")


# The paper preset: AgentGym-RL's ScalingInter-RL training scripts (its examples/train/ScalingInter-RL/<env>_train.sh),
# all on Qwen2.5-7B-Instruct with GRPO, lr 1e-6 constant, KL loss low_var_kl
# 0.001, clip 0.2, entropy 0.001, grad clip 1.0, temperature 1, save every 25 steps, 8 GPUs (our FSDP config),
# vLLM tensor parallel 1 (rollout.tensor_model_parallel_size), gradient checkpointing on (the yaml default).
# batch = prompts per step (data.train_batch_size), n = episodes per prompt, mini_batch = prompts per optimizer
# step, prompt/response = data.max_prompt_length/max_response_length, tokens_per_turn = rollout.max_tokens.
# ppo_epochs is 1: the scripts set 2 for some envs, but the released trainer ignores it (section 4).
# steps: (train items // batch) x epochs - 1 where the script's train list size is known (BabyAI 810,
# TextCraft 374, SciWorld 2,120); otherwise the three horizon stages.
PAPER_SCRIPTS = {
    "babyai":    dict(rounds=[6, 13, 20], every=100, eval_rounds=20, batch=32, n=4, mini_batch=8, prompt=512,
                      response=8192, tokens_per_turn=512, epochs=20, steps=499),
    "sciworld":  dict(rounds=[10, 20, 30], every=100, eval_rounds=30, batch=16, n=8, mini_batch=8, prompt=1024,
                      response=8192, tokens_per_turn=200, epochs=10, steps=1319),
    "searchqa":  dict(rounds=[5, 8, 10], every=100, eval_rounds=30, batch=32, n=4, mini_batch=8, prompt=1024,
                      response=8192, tokens_per_turn=512, epochs=20, steps=300),
    "textcraft": dict(rounds=[10, 20, 30], every=100, eval_rounds=30, batch=32, n=8, mini_batch=8, prompt=512,
                      response=10240, tokens_per_turn=512, epochs=30, steps=329),
    "webarena":  dict(rounds=[8, 12, 15], every=80, eval_rounds=15, batch=32, n=4, mini_batch=4, prompt=750,
                      response=14098, tokens_per_turn=512, epochs=25, steps=240),
}


def preset_values(env: str, preset: str, track: str | None = None) -> dict[str, Any]:
    """Per-env, per-preset settings. `paper` follows AgentGym-RL's ScalingInter-RL example scripts (PAPER_SCRIPTS);
    `cpu` and `smoke` take their items and episode shape from the env's track (`Env.tracks`)."""
    _check_choice("env", env, envs.ENV_NAMES)
    _check_choice("preset", preset, PRESETS)
    spec = envs.env_class(env)
    track = track or ("all" if preset in ("gpu", "paper") and "all" in spec.tracks else next(iter(spec.tracks)))
    _check_choice(f"track of {env}", track, tuple(spec.tracks))
    chosen = spec.tracks[track]
    items = dict(track=track, levels=list(chosen.levels) if chosen.levels is not None else None)
    if preset == "paper":
        if env not in PAPER_SCRIPTS:
            raise ValueError(f"the paper preset reproduces the paper's training scripts, which cover "
                             f"{', '.join(PAPER_SCRIPTS)}; {env!r} has none (use preset cpu, or give the settings)")
        script = PAPER_SCRIPTS[env]
        return dict(**items, model="Qwen/Qwen2.5-7B-Instruct", engine="vllm", prompts_per_step=script["batch"],
                    samples_per_prompt=script["n"], mini_batches=script["batch"] // script["mini_batch"],
                    max_tokens=script["tokens_per_turn"], max_total_tokens=script["prompt"] + script["response"],
                    schedule="stepwise", rounds=script["rounds"], rounds_every=script["every"],
                    steps=script["steps"], eval_rounds=script["eval_rounds"], lr=1e-6, kl_coef=0.001,
                    kl_type="low_var_kl", entropy_coef=0.001, clip_ratio=0.2, grad_clip=1.0, temperature=1.0,
                    ppo_epochs=1, bf16=True, save_every=25, eval_items=100, micro_batch_tokens=4096,
                    gradient_checkpointing=True, rollout_tp=1, launch_config="fsdp_8gpu",
                    # AgentGym-RL takes a per-micro-batch token mean with micro-batches of one trajectory, then
                    # averages over the micro-batches: every trajectory weighs the same, whatever its length
                    loss_agg="seq-mean-token-mean",
                    kv_cache_gib=20)   # a process's episodes at full length: TextCraft's 32 x 10,752 tokens
                                       # x 56 KiB (Qwen2.5-7B: 28 layers x K, V x 512 x 2 bytes) = 18.4 GiB
    if preset == "gpu":
        if env not in PAPER_SCRIPTS:
            raise ValueError(f"the gpu preset scales the paper's scripts down to one GPU; they cover "
                             f"{', '.join(PAPER_SCRIPTS)}, not {env!r} (use preset cpu, or give the settings)")
        script = PAPER_SCRIPTS[env]
        # One GPU: a Colab/Kaggle T4 or L4 (16-24 GB) or one A100/H100 (80 GB). Qwen2.5-0.5B-Instruct, the paper's
        # family at a size one card trains beside a colocated vLLM engine; LoRA (rank 32) so that it fits 16 GB
        # (full fine-tuning, and the 1.5B model, fit 80 GB: `--dry-run` plans both cards). The paper's horizons and
        # trajectory budget for the env, a quarter of its prompts per step, 60 steps in three stages.
        return dict(**items, model="Qwen/Qwen2.5-0.5B-Instruct", engine="vllm", prompts_per_step=8,
                    samples_per_prompt=script["n"], mini_batches=2, max_tokens=min(script["tokens_per_turn"], 256),
                    max_total_tokens=script["prompt"] + script["response"], schedule="stepwise",
                    rounds=script["rounds"], rounds_every=20, steps=60, eval_rounds=script["eval_rounds"],
                    lora_rank=32, lr=1e-5, kl_coef=0.001, kl_type="low_var_kl", entropy_coef=0.001, clip_ratio=0.2,
                    grad_clip=1.0, temperature=1.0, bf16=True, save_every=10, eval_items=100,
                    micro_batch_tokens=2048, gradient_checkpointing=True, loss_agg="seq-mean-token-mean",
                    kv_cache_gib=4)
    if preset == "cpu":
        # A 1M-parameter nano learns at a far larger lr than a 7B model, but not without limit (docs/results.md has
        # the lr at which it collapses); twice the prompts are played and only groups with a reward spread are
        # trained (DAPO's dynamic sampling), since most groups of a weak start policy carry no signal.
        return dict(**items, **_episodes(chosen.cpu), model="nano", prompts_per_step=8, samples_per_prompt=8,
                    oversample=2, filter_groups=True, schedule="stepwise", rounds_every=12, steps=40, lr=3e-4,
                    kl_coef=0.001, mini_batches=2, save_every=5, eval_items=100,
                    critic_lr=3e-4,   # the nano's critic learns at the policy's rate (the estimator study's setting)
                    bf16=False) | chosen.budget   # fp32: models.build_nano
    return dict(**items, **_episodes(spec.smoke), model="nano", prompts_per_step=2, samples_per_prompt=2,
                schedule="stepwise", rounds_every=1, steps=2, lr=1e-5, save_every=1, eval_items=4,
                micro_batch_tokens=2048)


def _episodes(shape: envs.Episodes) -> dict[str, Any]:
    return dict(rounds=list(shape.rounds), eval_rounds=shape.eval_rounds, max_tokens=shape.max_tokens,
                max_total_tokens=shape.max_total_tokens, max_envs=shape.max_envs)


def make_config(preset: str | None = None, overrides: list[str] | dict | None = None, **kwargs) -> RunConfig:
    """Build a RunConfig: defaults < preset < kwargs < overrides ("key=value" strings or a dict).

    `preset` defaults to $AGENTGYM_NB_PRESET, else "cpu". kwargs whose value is None are ignored, so a notebook's
    parameters cell can pass every parameter and leave the unset ones to the preset.
    """
    preset = preset or os.environ.get("AGENTGYM_NB_PRESET") or "cpu"
    kwargs = {k: v for k, v in kwargs.items() if v is not None}
    overrides = parse_overrides(overrides)
    # the env and its track decide the preset's values, wherever they are given
    chosen = {DOTTED_KEYS.get(k, k): v for k, v in {**kwargs, **overrides}.items()}
    env, track = chosen.get("env", "babyai"), chosen.get("track")
    values: dict[str, Any] = {"preset": preset, **preset_values(env, preset, track)}
    if preset == "cpu" and chosen.get("model", "nano") != "nano":
        # 8,192 tokens of a pretrained vocabulary's logits (SmolLM2: 49,152) are 1.6 GB a forward pass, and the
        # backward pass holds several copies: a full SmolLM2 step reached 17 GB and was killed on a 24 GB machine
        values["micro_batch_tokens"] = 2048
    values.update(kwargs)
    cfg = RunConfig()
    _apply(cfg, values)
    _apply(cfg, overrides)
    validate(cfg)
    return cfg


def parse_overrides(overrides: list[str] | dict | None) -> dict[str, Any]:
    """["a.b=1", "rounds=[2,4]"] -> {"a.b": 1, "rounds": [2, 4]}; a dict passes through."""
    if not overrides:
        return {}
    if isinstance(overrides, dict):
        return dict(overrides)
    if isinstance(overrides, str):   # papermill -p overrides '["a=1","b=2"]' passes the list as text
        overrides = parse_list(overrides, "overrides") if overrides.lstrip().startswith("[") else [overrides]
    out = {}
    for item in overrides:
        if "=" not in item:
            raise ValueError(f"malformed override {item!r}: expected key=value, e.g. "
                             "'algorithm.rounds_ctrl.rounds=[6,13,20]'")
        key, raw = item.split("=", 1)
        out[key.strip()] = _parse_value(raw.strip())
    return out


def _parse_value(raw: str) -> Any:
    try:
        return json.loads(raw)
    except json.JSONDecodeError:
        return {"True": True, "False": False, "None": None}.get(raw, raw)


def parse_list(value: Any, what: str) -> list:
    """A list as papermill -p, a key=value override or a command line gives it: a list or tuple; JSON text
    ("[2, 4]", '["a", "b"]'); comma-separated text ("2,4", "a, b"), each item read as one value ("2" -> 2,
    "a" -> "a"); or one value ("2" -> [2], 2 -> [2])."""
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("["):
            try:
                value = json.loads(text)
            except json.JSONDecodeError as e:
                raise ValueError(f"{what} {value!r} starts with '[' but is not a JSON list ({e.msg}): write e.g. "
                                 '[2, 4] or ["a", "b"], or 2,4 without brackets') from None
        else:
            value = [_parse_value(item.strip()) for item in text.split(",")]
    return list(value) if isinstance(value, (list, tuple)) else [value]


def prompt_tokens(cfg: RunConfig) -> int:
    """The part of cfg.max_total_tokens that AgentGym-RL's scripts call data.max_prompt_length: the script's value
    for the env at the paper and gpu presets, else 1024. AgentGym-RL cuts a trajectory at prompt + response tokens
    (`max_model_len = min(rollout.max_model_len, max_prompt_length + max_response_length)`); we budget that total."""
    script = PAPER_SCRIPTS.get(cfg.env) if cfg.preset in ("gpu", "paper") else None
    return script["prompt"] if script else 1024


def _apply(cfg: RunConfig, values: dict[str, Any]) -> None:
    fields = {f.name: f for f in dataclasses.fields(cfg)}
    prompt = None   # data.max_prompt_length as this call has set it
    for key, value in values.items():
        name = DOTTED_KEYS.get(key, key)
        if name in ("max_prompt_length", "max_response_length"):   # the total is prompt + response
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{key} must be a positive number of tokens, got {value!r}")
            prompt = prompt if prompt is not None else prompt_tokens(cfg)
            response = cfg.max_total_tokens - prompt
            prompt, response = (value, response) if name == "max_prompt_length" else (prompt, value)
            cfg.max_total_tokens = prompt + response
            continue
        if name == "schedule":   # AgentGym-RL's scaling_inter_stepwise is our stepwise
            value = ALIASES.get(value, value)
        if name not in fields:
            valid = sorted(fields) + sorted(DOTTED_KEYS)
            near = difflib.get_close_matches(key, valid, n=1, cutoff=0.5)
            hint = f"; did you mean {near[0]!r}?" if near else ""
            raise ValueError(f"unknown config key {key!r}{hint} (valid: RunConfig fields or AgentGym-RL keys such as "
                             "'algorithm.rounds_ctrl.rounds')")
        if name in ("rounds", "levels", "train_items", "test_items", "trackers") and value is not None:
            value = parse_list(value, key)   # papermill -p passes lists as text: "[2, 4, 8]"; one value: "3"
        if name in ("train_items", "test_items") and value is not None:
            value = tuple(value)
        if name == "env_url" and isinstance(value, str):
            value = _parse_urls(value)
        if name == "env_url" and isinstance(value, tuple):
            value = list(value)
        setattr(cfg, name, value)


def _parse_urls(text: str) -> str | list[str]:
    """env_url as text (papermill -p, key=value): "http://a" stays one URL; "http://a,http://b" and
    '["http://a", "http://b"]' become a list."""
    urls = parse_list(text, "env_url")
    return urls if len(urls) > 1 or text.strip().startswith("[") else urls[0]


def round_schedule(cfg: RunConfig):
    """The run's horizon schedule: `SCHEDULES[cfg.schedule]` (agentgym_nb.algos.schedule) made from the RunConfig
    fields that schedule names."""
    _check_choice("schedule", cfg.schedule, tuple(SCHEDULES))
    kind = SCHEDULES[cfg.schedule]
    return kind.make(**{param: getattr(cfg, name) for param, name in kind.fields.items()})


def item_pool(cfg: RunConfig, split: str) -> list[int]:
    """The item ids of `split` ("train" or "test"): the range `cfg.<split>_items` when set, else the env's shipped
    list; only items whose level (the env's `levels` say what a level is) is in `cfg.levels`."""
    lo_hi = cfg.train_items if split == "train" else cfg.test_items
    pool = list(range(*lo_hi)) if lo_hi is not None else envs.item_ids(cfg.env, split)
    return envs.select_levels(cfg.env, pool, cfg.levels)


def validate(cfg: RunConfig) -> None:
    """Refuse a config that cannot run, naming the field and what would be valid: its choices, its values, its
    items, its launch."""
    _check_choices(cfg)
    _check_values(cfg)
    _check_items(cfg)
    _check_launch(cfg)


def _check_choices(cfg: RunConfig) -> None:
    """Every named choice among the valid ones, and the options that only some estimators read set only for them."""
    _check_choice("env", cfg.env, envs.ENV_NAMES)
    _check_choice("preset", cfg.preset, PRESETS)
    _check_choice("engine", cfg.engine, ENGINE_KINDS)
    _check_choice("schedule", cfg.schedule, tuple(SCHEDULES))
    _check_choice("algorithm", cfg.algorithm, tuple(ESTIMATORS))
    _check_choice("loss_agg", cfg.loss_agg, AGG_MODES)
    _check_choice("kl_type", cfg.kl_type, tuple(KL_KINDS))
    if cfg.kl_in_reward and not ESTIMATORS[cfg.algorithm].token_level:
        token_level = [name for name, e in ESTIMATORS.items() if e.token_level]
        raise ValueError(f"kl_in_reward puts the KL into per-token rewards, which only {' and '.join(token_level)} "
                         f"use; {cfg.algorithm} scores whole episodes (use the KL loss: kl_in_reward=False)")
    _check_choice("gigpo_mode", cfg.gigpo_mode, GIGPO_MODES)
    if cfg.cut_out_of_baseline and not ESTIMATORS[cfg.algorithm].group_baseline:
        grouped = [name for name, e in ESTIMATORS.items() if e.group_baseline]
        raise ValueError(f"cut_out_of_baseline changes a group baseline, which only {', '.join(grouped)} have; "
                         f"{cfg.algorithm} has none (set cut_out_of_baseline=False)")


def _check_values(cfg: RunConfig) -> None:
    """Numbers in their ranges, counts positive integers, the trackers known, the schedule's own fields."""
    if not (isinstance(cfg.cut_turn_discount, (int, float)) and 0 < cfg.cut_turn_discount <= 1):
        raise ValueError(f"cut_turn_discount must be in (0, 1] (1: no discount), got {cfg.cut_turn_discount!r}")
    if cfg.tis_cap is not None and (isinstance(cfg.tis_cap, bool) or not isinstance(cfg.tis_cap, (int, float))
                                    or not cfg.tis_cap >= 1):
        raise ValueError(f"tis_cap (the truncation of the importance weights pi_trainer / pi_engine) must be a "
                         f"number >= 1, e.g. 2.0 (verl's default), or None to turn the correction off; "
                         f"got {cfg.tis_cap!r}")
    if isinstance(cfg.temperature, bool) or not isinstance(cfg.temperature, (int, float)) or not cfg.temperature > 0:
        raise ValueError(f"temperature (training rollouts) must be > 0: the policy's log-probs divide the logits by it, "
                         f"and PPO's ratio needs a sampling distribution; got {cfg.temperature!r} (greedy decoding "
                         "is for evaluation: eval_temperature=0)")
    if cfg.trackers is not None:
        from accelerate.tracking import LOGGER_TYPE_TO_CLASS   # the trackers Accelerate knows
        if isinstance(cfg.trackers, str) or not all(isinstance(t, str) for t in cfg.trackers):
            raise ValueError(f"trackers must be a list of tracker names, e.g. ['tensorboard'], got {cfg.trackers!r}")
        for tracker in cfg.trackers:
            _check_choice("tracker", tracker, tuple(LOGGER_TYPE_TO_CLASS))
    for name in ("sync_tolerance", "max_mismatch_kl", "max_env_errors"):
        value = getattr(cfg, name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0):
            raise ValueError(f"{name} must be a positive number, or None to turn that health check off; got {value!r}")
    if not 0 < cfg.clip_ratio < 1 or (cfg.clip_ratio_high is not None and cfg.clip_ratio_high <= 0):
        raise ValueError(f"PPO clipping needs 0 < clip_ratio < 1 and clip_ratio_high > 0 (or None), got "
                         f"clip_ratio={cfg.clip_ratio!r}, clip_ratio_high={cfg.clip_ratio_high!r}")
    if cfg.clip_ratio_c is not None and not cfg.clip_ratio_c > 1:
        raise ValueError(f"clip_ratio_c (the dual clip bound) must be > 1, e.g. 3.0, or None to turn it off; "
                         f"got {cfg.clip_ratio_c!r}")
    for name in ("prompts_per_step", "samples_per_prompt", "oversample", "max_envs", "max_tokens", "steps",
                 "eval_items", "eval_samples", "eval_rounds", "ppo_epochs", "mini_batches", "save_every"):
        value = getattr(cfg, name)
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    check_fields(cfg)   # rounds_every and the adaptive_* options, whichever schedule is chosen
    _check_choice("adaptive_metric", cfg.adaptive_metric, ADAPTIVE_METRICS)
    round_schedule(cfg)   # the chosen schedule's checks of rounds: positive, one when fixed, never shrinking


def _check_items(cfg: RunConfig) -> None:
    """The env's address, the train and test item spans, track and levels, and held-out items never trained on."""
    if cfg.env_url is not None:
        urls = [cfg.env_url] if isinstance(cfg.env_url, str) else cfg.env_url
        if not isinstance(urls, list) or not urls or not all(
                isinstance(u, str) and u.startswith(("http://", "https://")) and u.split("://", 1)[1] for u in urls):
            raise ValueError(f"env_url must be an http:// or https:// URL, a list of them, or their comma-separated "
                             f"text (e.g. 'http://127.0.0.1:36002,http://127.0.0.1:36003'), got {cfg.env_url!r}")
    for name in ("train_items", "test_items"):
        if getattr(cfg, name) is None:
            continue
        span = getattr(cfg, name)
        if not (len(span) == 2 and all(isinstance(x, int) for x in span) and 0 <= span[0] < span[1]):
            raise ValueError(f"{name} must be [start, stop) with 0 <= start < stop, got {span!r}")
    spec = envs.env_class(cfg.env)
    if cfg.track is not None:
        _check_choice(f"track of {cfg.env}", cfg.track, tuple(spec.tracks))
    if cfg.levels is not None:
        if spec.levels is None:
            with_levels = [name for name in envs.ENV_NAMES if envs.env_class(name).levels is not None]
            raise ValueError(f"levels selects items by level, which only {', '.join(with_levels)} have; env "
                             f"{cfg.env!r} has none (set levels=None)")
        valid, meaning = spec.levels.values, spec.levels.meaning
        if (not isinstance(cfg.levels, list) or not cfg.levels
                or any(not isinstance(lv, int) or isinstance(lv, bool) or lv not in valid for lv in cfg.levels)):
            raise ValueError(f"levels of {cfg.env} are the {meaning}, integers in [{valid.start}, {valid.stop}); "
                             f"got {cfg.levels!r}")
    shared = set(item_pool(cfg, "train")) & set(item_pool(cfg, "test"))
    if shared:
        raise ValueError(f"train_items {cfg.train_items} and test_items {cfg.test_items} overlap (e.g. item "
                         f"{min(shared)}): held-out items must not be trained on")


def _check_launch(cfg: RunConfig) -> None:
    """What the update and the engine are split into."""
    if cfg.mini_batches > cfg.prompts_per_step:
        raise ValueError(f"mini_batches ({cfg.mini_batches}) cannot exceed prompts_per_step ({cfg.prompts_per_step})")
    if not isinstance(cfg.rollout_tp, int) or isinstance(cfg.rollout_tp, bool) or cfg.rollout_tp < 1:
        raise ValueError(f"rollout_tp (devices per vLLM engine) must be a positive integer, got {cfg.rollout_tp!r}")
    if isinstance(cfg.kv_cache_gib, bool) or not isinstance(cfg.kv_cache_gib, (int, float)) or cfg.kv_cache_gib <= 0:
        raise ValueError(f"kv_cache_gib (vLLM's KV cache, GiB) must be a positive number, got {cfg.kv_cache_gib!r}")
    if cfg.rollout_tp > 1 and cfg.engine == "hf":
        raise ValueError(f"rollout_tp={cfg.rollout_tp} splits a vLLM engine over devices; the hf engine cannot "
                         "(use engine='vllm', or rollout_tp=1)")


def _check_choice(what: str, value: Any, valid: tuple[str, ...]) -> None:
    if value not in valid:
        near = difflib.get_close_matches(str(value), valid, n=1, cutoff=0.4)
        hint = f" Did you mean {near[0]!r}?" if near else ""
        raise ValueError(f"unknown {what} {value!r}.{hint} Valid: {', '.join(valid)}")
