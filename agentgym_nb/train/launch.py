"""Launching a run: how the `accelerate launch` config splits the model over processes, checks of a launch config
against the run, the memory a GPU needs, and the plan `--dry-run` prints before anything is built."""
from __future__ import annotations

import json
import os

from accelerate.commands.config.config_args import load_config_from_file
from accelerate.commands.launch import launch_command_parser
from accelerate.utils import DistributedType, FullyShardedDataParallelPlugin

from .. import models
from ..config import RunConfig, item_pool, round_schedule

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LAUNCH_CONFIGS = os.path.join(REPO, "configs", "accelerate")


def sharding_of(accelerator) -> str:
    """How the `accelerate launch` config splits the model over processes: "deepspeed" (ZeRO), "fsdp" (FSDP2),
    "ddp" (a whole replica per process) or "none" (one process). Accelerate turns an FSDP config into DDP when there
    is no GPU, but FSDP2 itself runs on gloo: the launcher's request (ACCELERATE_USE_FSDP) is honoured on CPUs too."""
    if accelerator.distributed_type == DistributedType.DEEPSPEED:
        return "deepspeed"
    if accelerator.distributed_type == DistributedType.FSDP or (
            accelerator.num_processes > 1 and os.environ.get("ACCELERATE_USE_FSDP", "").lower() == "true"):
        return "fsdp"
    return "ddp" if accelerator.num_processes > 1 else "none"


def fsdp_settings(accelerator) -> dict:
    """`shard`'s options from the launch config's fsdp_config (accelerate's own reading of it)."""
    plugin = getattr(accelerator.state, "fsdp_plugin", None) or FullyShardedDataParallelPlugin()
    if plugin.fsdp_version != 2:
        raise ValueError(f"fsdp_version {plugin.fsdp_version}: the trainer shards with FSDP2 (fully_shard); set "
                         "fsdp_version: 2 in the accelerate config")
    if plugin.activation_checkpointing:
        raise ValueError("fsdp_activation_checkpointing: set gradient_checkpointing=True in the run config instead "
                         "(it applies under every launch config) and fsdp_activation_checkpointing: false")
    return dict(reshard_after_forward=plugin.reshard_after_forward, offload_policy=plugin.cpu_offload)


def check_rollout_tp(tp: int, processes: int, gpus: int | None) -> None:
    """Every trainer process owns one engine on its own device, so a tensor-parallel engine (tp devices) needs a
    one-process launch, and tp must divide the GPUs the process sees (None: unknown or CPU)."""
    if tp == 1:
        return
    if processes > 1:
        raise ValueError(f"rollout_tp={tp} with {processes} trainer processes: each process owns one engine on its "
                         f"own GPU. Use rollout_tp=1 (as the paper's scripts do) or a one-process launch")
    if gpus is not None and gpus % tp:
        raise ValueError(f"rollout_tp={tp} must divide the number of GPUs ({gpus})")


def launch_config_path(name: str) -> str:
    """A launch config by path, or by name in configs/accelerate ("fsdp_8gpu")."""
    if os.path.isfile(name):
        return name
    path = os.path.join(LAUNCH_CONFIGS, name if name.endswith(".yaml") else name + ".yaml")
    if os.path.isfile(path):
        return path
    names = sorted(f[:-5] for f in os.listdir(LAUNCH_CONFIGS) if f.endswith(".yaml")) \
        if os.path.isdir(LAUNCH_CONFIGS) else []
    raise ValueError(f"launch_config {name!r} is neither a file nor one of {names} in {LAUNCH_CONFIGS}")


def check_launch(path: str, cfg: RunConfig) -> dict:
    """Read an accelerate launch config as `accelerate launch` does and check it against the run. Every key must be
    one accelerate knows (the launcher silently ignores a misspelt fsdp_config or deepspeed_config key); FSDP must
    be version 2; a DeepSpeed JSON must clip at grad_clip and leave the accumulation boundary to the trainer; every
    process needs a prompt per step. Returns processes, sharding and what the plan shows of it."""
    launch = load_config_from_file(path)   # raises on an unknown top-level key
    options = {action.dest for action in launch_command_parser()._actions}
    for section, prefix in (("fsdp_config", "fsdp_"), ("deepspeed_config", "")):
        for key in getattr(launch, section, None) or {}:
            if (key if key.startswith(prefix) else prefix + key) not in options:
                raise ValueError(f"{path}: {section}.{key} is not an accelerate option (see `accelerate launch "
                                 "--help`)")
    processes = launch.num_processes   # accelerate counts every process of every machine here
    kind = getattr(launch.distributed_type, "value", str(launch.distributed_type))
    sharding = {"FSDP": "fsdp", "DEEPSPEED": "deepspeed"}.get(kind, "ddp" if processes > 1 else "none")
    out = dict(processes=processes, sharding=sharding, detail="")
    if sharding == "fsdp":
        fsdp = {k if k.startswith("fsdp_") else "fsdp_" + k: v for k, v in launch.fsdp_config.items()}
        if int(fsdp.get("fsdp_version", 1)) != 2:
            raise ValueError(f"{path}: fsdp_version must be 2 (the trainer shards with FSDP2's fully_shard)")
        if fsdp.get("fsdp_activation_checkpointing"):
            raise ValueError(f"{path}: fsdp_activation_checkpointing must be false: the run config's "
                             "gradient_checkpointing does it under every launch config")
        offload = " + parameters offloaded to the CPU" if fsdp.get("fsdp_offload_params") else ""
        out["detail"] = f"FSDP2 full shard{offload} (policy, its gradients and Adam state; the reference)"
    if sharding == "deepspeed":
        ds_file = (launch.deepspeed_config or {}).get("deepspeed_config_file")
        if not ds_file:
            raise ValueError(f"{path}: the trainer needs a deepspeed_config_file (it sets "
                             "train_micro_batch_size_per_gpu, which accelerate cannot infer without a dataloader)")
        with open(ds_file if os.path.isfile(ds_file) else os.path.join(REPO, ds_file)) as f:   # launched from REPO
            ds = json.load(f)
        if ds.get("gradient_clipping") != cfg.grad_clip:
            raise ValueError(f"{ds_file}: gradient_clipping {ds.get('gradient_clipping')} != grad_clip "
                             f"{cfg.grad_clip} of the run (DeepSpeed clips inside its engine)")
        if ds.get("gradient_accumulation_steps") not in (1, "auto"):
            raise ValueError(f"{ds_file}: gradient_accumulation_steps must be 1 or auto: the trainer marks the last "
                             "micro-batch of each mini-batch as the boundary itself")
        if not isinstance(ds.get("train_micro_batch_size_per_gpu"), int):
            raise ValueError(f"{ds_file}: train_micro_batch_size_per_gpu must be an integer")
        if ds.get("bf16", {}).get("enabled") not in ("auto", cfg.bf16):
            raise ValueError(f"{ds_file}: bf16.enabled must be 'auto' or {cfg.bf16} (the run's bf16)")
        zero = ds.get("zero_optimization", {})
        out["detail"] = (f"DeepSpeed ZeRO-{zero.get('stage', 0)} (policy, its gradients and Adam state); the "
                         f"reference a bf16 copy per GPU")
    if sharding == "ddp":
        out["detail"] = "DDP (a whole replica per process, gradients summed once per mini-batch)"
    if cfg.prompts_per_step * cfg.oversample < processes:
        raise ValueError(f"{processes} processes but {cfg.prompts_per_step * cfg.oversample} prompts per step: "
                         "every process plays its share of the prompts and needs at least one")
    check_rollout_tp(cfg.rollout_tp, processes, None)
    return out


# The paper's family, from the models' config.json, so a run can be planned without the weights.
KNOWN_SHAPES = {
    "Qwen/Qwen2.5-0.5B-Instruct": dict(params=0.494e9, embeddings=151936 * 896, vocab=151936, hidden=896,
                                       layers=24, kv_dim=2 * 64),
    "Qwen/Qwen2.5-1.5B-Instruct": dict(params=1.54e9, embeddings=151936 * 1536, vocab=151936, hidden=1536,
                                       layers=28, kv_dim=2 * 128),
    "Qwen/Qwen2.5-7B-Instruct": dict(params=7.62e9, embeddings=2 * 152064 * 3584, vocab=152064, hidden=3584,
                                     layers=28, kv_dim=4 * 128),
    "Qwen/Qwen2.5-3B-Instruct": dict(params=3.09e9, embeddings=151936 * 2048, vocab=151936, hidden=2048,
                                     layers=36, kv_dim=2 * 128),
}
# the cards a plan is checked against: a Colab/Kaggle T4 (16 GB), an L4 (24 GB), an A100/H100 (80 GB, the GPUs of
# an 8-GPU AgentGym-RL run)
CARDS_GB = {"gpu": (16, 24, 80), "paper": (80,)}


def memory_per_gpu(cfg: RunConfig, shape: dict, processes: int, sharding: str) -> dict[str, float]:
    """Estimated GB (1e9 bytes) one process needs on its GPU, P parameters, t = micro_batch_tokens:
        policy       16 P: fp32 weights, gradients and Adam's two moments (/ processes under fsdp and deepspeed);
                     with LoRA 4 P of frozen fp32 weights (the adapters' own share is negligible)
        reference    4 P fp32 (/ processes under fsdp); 2 P under deepspeed (a bf16 copy); 0 without KL
        gathered     the units in flight, two blocks and the root (embeddings and head): fp32 under fsdp, bf16
                     under deepspeed
        activations  with gradient checkpointing each block's bf16 input, 2 t h per block, plus one block's
                     internals, ~34 t h (Korthikanti et al. 2022, flash attention); without, 34 t h per block
        logits       14 t V: bf16 logits, their fp32 copy, the entropy's softmax and the fp32 gradient
        vllm         2 P / rollout_tp with bf16 (4 P in fp32: the engine's weights follow the run's bf16), and its
                     KV cache kv_cache_gib"""
    P, t, h, layers = shape["params"], cfg.micro_batch_tokens, shape["hidden"], shape["layers"]
    split = processes if sharding in ("fsdp", "deepspeed") else 1
    reference = 0 if cfg.kl_coef == 0 else 2 * P if sharding == "deepspeed" else 4 * P / (
        processes if sharding == "fsdp" else 1)
    block = (P - shape["embeddings"]) / layers
    act = 2 * t * h * layers + 34 * t * h if cfg.gradient_checkpointing else 34 * t * h * layers
    parts = {"policy": 4 * P if cfg.lora_rank else 16 * P / split, "reference": reference,
             "gathered": {"fsdp": 4, "deepspeed": 2}.get(sharding, 0) * (2 * block + shape["embeddings"]),
             "activations": act, "logits": 14 * t * shape["vocab"],
             "vLLM weights": (2 if cfg.bf16 else 4) * P / cfg.rollout_tp, "KV cache": cfg.kv_cache_gib * 2**30}
    return {k: v / 1e9 for k, v in parts.items() if v}


def launch_plan(cfg: RunConfig) -> list[str]:
    """The plan's lines about processes, sharding, rollout engines and memory per GPU."""
    engines = (f"vLLM {'bf16' if cfg.bf16 else 'fp32'}, tensor parallel {cfg.rollout_tp}, KV cache "
               f"{cfg.kv_cache_gib:g} GiB")
    if cfg.launch_config is None:
        lines = [f"launch: one process (python -m agentgym_nb.train.rl), or any configs/accelerate/*.yaml ({engines})"]
        processes, sharding = 1, "none"
    else:
        path = launch_config_path(cfg.launch_config)
        launch = check_launch(path, cfg)
        processes, sharding = launch["processes"], launch["sharding"]
        share = cfg.prompts_per_step * cfg.oversample / processes
        lines = [f"launch: accelerate launch --config_file {os.path.relpath(path)} -m agentgym_nb.train.rl --env "
                 f"{cfg.env} --preset {cfg.preset}",
                 f"  {processes} process{'es' if processes > 1 else ''}: {launch['detail'] or 'no sharding'}; each "
                 f"plays ~{share:g} prompts a step and runs its own engine ({engines})"]
    shape = KNOWN_SHAPES.get(cfg.model)
    if shape:
        parts = memory_per_gpu(cfg, shape, processes, sharding)
        total = sum(parts.values())
        cards = CARDS_GB.get(cfg.preset, (80,))
        fits = [f"{'fits' if total <= gb else 'does NOT fit'} {'an' if gb == 80 else 'a'} {gb} GB card" for gb in cards]
        lines.append(f"  memory per GPU (estimate, GB, {'LoRA r=%d' % cfg.lora_rank if cfg.lora_rank else 'full'}): "
                     + " + ".join(f"{k} {v:.1f}" for k, v in parts.items()) + f" = {total:.1f}: " + ", ".join(fits)
                     + ("" if all(total <= gb for gb in cards) else
                        " (shard, use LoRA, or lower micro_batch_tokens or kv_cache_gib)"))
    return lines


def plan(cfg: RunConfig) -> str:
    """What a run of `cfg` will do, without building anything (what `--dry-run` prints)."""
    train, test = item_pool(cfg, "train"), item_pool(cfg, "test")
    episodes = cfg.prompts_per_step * cfg.oversample * cfg.samples_per_prompt
    urls = [cfg.env_url] if isinstance(cfg.env_url, str) else cfg.env_url or []
    local = models.is_available(cfg.model)
    lines = [
        f"run {cfg.name!r}: {cfg.algorithm} on {cfg.env} with {cfg.model} ({cfg.preset} preset) -> {cfg.run_dir}",
        f"model: {'found locally' if local else 'NOT available offline: put it in the HF cache or pass a path'}",
        f"items: {len(train)} train, {len(test)} test (eval on {min(cfg.eval_items, len(test))}, H={cfg.eval_rounds})",
        f"each step: {cfg.prompts_per_step * cfg.oversample} prompts x {cfg.samples_per_prompt} episodes = "
        f"{episodes} episodes, <= {cfg.max_tokens} tokens per reply, <= {cfg.max_total_tokens} per trajectory",
        f"update: {cfg.ppo_epochs} epoch(s) x {cfg.mini_batches} mini-batches, lr {cfg.lr:g}, clip {cfg.clip_ratio}, "
        f"KL {cfg.kl_type} x {cfg.kl_coef:g} ({'in the reward' if cfg.kl_in_reward else 'loss'}), "
        f"entropy x {cfg.entropy_coef:g}, {'LoRA r=%d' % cfg.lora_rank if cfg.lora_rank else 'full fine-tuning'}, "
        f"{'bf16 autocast' if cfg.bf16 else 'fp32'}",
        f"horizon ({cfg.schedule}): {round_schedule(cfg).describe(cfg.steps)}",
        f"total: {cfg.steps} steps, {cfg.steps * episodes:,} episodes, checkpoint every {cfg.save_every} steps",
        f"engine: {cfg.engine}; env: {', '.join(urls) or 'in-process'}",
        *launch_plan(cfg),
    ]
    return "\n".join(lines)
