"""Launching a run: checks of an `accelerate launch` config against the run, the memory a GPU needs, and the plan
`--dry-run` prints before anything is built."""
from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass

from accelerate.commands.config.config_args import load_config_from_file
from accelerate.commands.launch import launch_command_parser

from .. import models
from ..config import RunConfig, item_pool, round_schedule
from ..rollout.engine import engine_kind

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LAUNCH_CONFIGS = os.path.join(REPO, "configs", "accelerate")
SHARDED = ("fsdp", "deepspeed")   # the launch kinds that split the policy over processes


@dataclass(frozen=True)
class RolloutEngine:
    """The engine a run samples with: `kind` "vllm" or "hf"; `shares_policy` when it is the HF engine sampling with
    the trainer's own model (an unsharded policy, on its device), so it holds no copy and a weight sync copies
    nothing."""
    kind: str
    shares_policy: bool

    @property
    def label(self) -> str:
        if self.kind == "vllm":
            return "vLLM in sleep mode during the update"
        return "HF engine sampling with the policy" if self.shares_policy else "HF engine with its own copy"


def rollout_engine(cfg: RunConfig, sharding: str) -> RolloutEngine:
    """The run's engine under the launch kind `sharding` (cfg.engine "auto": vLLM where it is installed): the one
    decision the trainer builds from and the plan describes."""
    kind = engine_kind(cfg.engine)
    return RolloutEngine(kind, shares_policy=kind == "hf" and sharding not in SHARDED)


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


# Dense bf16 tensor-core peaks in TFLOP/s (no sparsity), from NVIDIA's datasheets, by a part of the name torch
# reports for the card (torch.cuda.get_device_name): the first match wins. The T4 has no bf16: its fp16 peak.
PEAK_TFLOPS = (("H100 PCIe", 756), ("H100 NVL", 835), ("GH200", 989), ("H100", 989), ("H200", 989),
               ("B200", 2250), ("A100", 312), ("L40S", 362), ("L4", 121), ("T4", 65))


def peak_flops(device_name: str) -> float | None:
    """The card's dense bf16 peak in FLOP/s, or None for a device the table does not know (a CPU)."""
    for part, tflops in PEAK_TFLOPS:
        if part in device_name:
            return tflops * 1e12
    return None


def train_flops_per_token(params: int, layers: int, hidden: int, seq_len: float, lora: bool) -> float:
    """Model FLOPs of one trained token (PaLM, Chowdhery et al. 2022, appendix B): the forward pass is
    2 (N + 2 L h T) with N the parameters its matmuls use (the output head's, not the input embedding's) and T the
    sequence length (attention); the backward pass is twice that for full fine-tuning (input and weight gradients)
    and once for LoRA (input gradients only: the frozen base's weight gradients are never computed). Recomputation
    under gradient checkpointing is not counted: MFU, not hardware FLOPs utilisation."""
    return (4 if lora else 6) * (params + 2 * layers * hidden * seq_len)


def update_mfu(model, tokens: int, sequences: int, seconds: float, lora: bool, device) -> float | None:
    """Model FLOPs utilisation of an update that trained `tokens` tokens of `sequences` sequences in `seconds` on
    `device`: train_flops_per_token x tokens / seconds over the card's bf16 peak (None for a card peak_flops does
    not know)."""
    import torch
    peak = peak_flops(torch.cuda.get_device_name(device))
    if not peak:
        return None
    per_token = train_flops_per_token(matmul_params(model), model.config.num_hidden_layers, model.config.hidden_size,
                                      tokens / max(sequences, 1), lora=lora)
    return tokens * per_token / max(seconds, 1e-9) / peak


def matmul_params(model) -> int:
    """The parameters a forward pass multiplies with: all but the input embedding, whose rows are only looked up
    (counted back when the output head shares its weights)."""
    embedding = model.get_input_embeddings().weight
    head = model.get_output_embeddings()
    total = sum(p.numel() for p in model.parameters())
    return total - embedding.numel() + (embedding.numel() if head is not None and head.weight is embedding else 0)


HF_ENGINE_BATCH = 64       # sequences the HF engine samples at once (HFEngine's batch_size)
VLLM_OVERHEAD_GIB = 2.0    # what a vLLM engine holds beside its weights and KV cache: activations of its largest
                           # batch, the sampler's buffers, the CUDA context's share


def memory_per_gpu(cfg: RunConfig, shape: dict, processes: int, sharding: str,
                   engine: RolloutEngine | None = None) -> dict[str, float]:
    """Estimated GB (1e9 bytes) on one process's GPU, by part. Parts named "rollout: ..." exist only while the engine
    samples and parts named "update: ..." only during the forward and backward passes; the two phases take turns, so
    the peak (`peak_gb`) is the rest plus the larger phase. P parameters, E of them the input embedding's (the output
    head's when tied), t = micro_batch_tokens, h hidden, L layers, V vocabulary, T = max_total_tokens, kv the width
    of a layer's keys (KV heads x head size); bf16 = 2 bytes, fp32 = 4:
        weights        the policy, fp32 4 P (/ processes under fsdp and deepspeed); under LoRA the frozen base, in
                       bf16 with bf16 (2 P), else fp32
        Adam           two fp32 moments, 8 P (/ processes); under LoRA the adapters' (negligible)
        reference      4 P fp32 (/ processes under fsdp), 2 P under deepspeed (a bf16 copy); none under LoRA (the base
                       with the adapters off) or without a KL
        engine weights an engine's own copy, 2 P / rollout_tp in bf16 (4 P in fp32): vLLM's (a rollout part: in sleep
                       mode it is given back during the update) or the HF engine's where the policy is sharded; the
                       HF engine on an unsharded policy samples with it and holds no copy
        rollout: KV cache      vLLM's kv_cache_gib (+ VLLM_OVERHEAD_GIB); the HF engine's cache of a batch of S
                               sequences of T tokens, S x T x L x 2 kv x (2 or 4) bytes, S = the process's episodes
                               of a step, at most HF_ENGINE_BATCH
        rollout: sampling      S x V x 24 bytes: logits, log-softmax, Gumbel noise (HF engine)
        rollout: sync copy     under LoRA, the merged weights an engine with its own copy gets, 4 (P - E)
        update: gradients      4 P (/ processes); under LoRA the adapters' (negligible)
        update: gathered       FSDP's or DeepSpeed's units in flight, two blocks and the root, fp32 or bf16
        update: activations    with gradient checkpointing each block's bf16 input, 2 t h per block, plus one block's
                               internals, ~34 t h (Korthikanti et al. 2022, flash attention); without, 34 t h per block
        update: logits         a sharded policy's whole micro-batch, 14 t V (bf16 logits, their fp32 copy, the
                               softmax and the fp32 gradient); else chunks of LOGITS_CHUNK_ELEMENTS, 16 bytes each
                               (token_logprobs)
    `engine`: the run's (`rollout_engine`, by default decided here)."""
    from ..algos.losses import LOGITS_CHUNK_ELEMENTS
    engine = engine or rollout_engine(cfg, sharding)
    P, E, t, h, L, V = (shape[k] for k in ("params", "embeddings", "micro_batch", "hidden", "layers", "vocab")) \
        if "micro_batch" in shape else (shape["params"], shape["embeddings"], cfg.micro_batch_tokens, shape["hidden"],
                                        shape["layers"], shape["vocab"])
    split = processes if sharding in SHARDED else 1
    lora = bool(cfg.lora_rank)
    width = 2 if cfg.bf16 else 4
    parts = {
        "weights": (width if lora else 4) * P / (1 if lora else split),
        "Adam": 0 if lora else 8 * P / split,
        "reference": 0 if cfg.kl_coef == 0 or lora else 2 * P if sharding == "deepspeed" else 4 * P / (
            processes if sharding == "fsdp" else 1),
    }
    if engine.kind == "hf":
        if not engine.shares_policy:
            parts["engine weights"] = width * P
        sequences = min(HF_ENGINE_BATCH, math.ceil(cfg.prompts_per_step * cfg.oversample * cfg.samples_per_prompt
                                                   / processes))
        parts["rollout: KV cache"] = sequences * (cfg.max_total_tokens + cfg.max_tokens) * L * 2 * shape["kv_dim"] * \
            width
        parts["rollout: sampling"] = sequences * V * 24
    else:
        parts["rollout: engine weights"] = width * P / cfg.rollout_tp
        parts["rollout: KV cache"] = (cfg.kv_cache_gib + VLLM_OVERHEAD_GIB) * 2**30
    if lora and not engine.shares_policy:
        parts["rollout: sync copy"] = 4 * (P - E)
    parts["update: gradients"] = 0 if lora else 4 * P / split
    block = (P - E) / L
    parts["update: gathered"] = {"fsdp": 4, "deepspeed": 2}.get(sharding, 0) * (2 * block + E)
    parts["update: activations"] = 2 * t * h * L + 34 * t * h if cfg.gradient_checkpointing else 34 * t * h * L
    parts["update: logits"] = 14 * t * V if split > 1 else min(16 * LOGITS_CHUNK_ELEMENTS, 14 * t * V)
    return {k: v / 1e9 for k, v in parts.items() if v}


def peak_gb(parts: dict[str, float]) -> float:
    """The plan's peak: what stays all run, plus the larger of the rollout and the update phase."""
    phase = {p: sum(v for k, v in parts.items() if k.startswith(p + ": ")) for p in ("rollout", "update")}
    return sum(v for k, v in parts.items() if ": " not in k) + max(phase.values())


def model_shape(model_dir: str) -> dict:
    """`KNOWN_SHAPES`' numbers for a local model folder, from its config (the model is built on the meta device:
    names and sizes only, no memory)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM   # seconds to import
    config = AutoConfig.from_pretrained(model_dir)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    text = config.get_text_config()
    heads = text.num_attention_heads
    head_dim = getattr(text, "head_dim", None) or text.hidden_size // heads
    embeddings = model.get_input_embeddings().weight.numel()
    tied = model.get_output_embeddings() is not None and model.get_output_embeddings().weight is \
        model.get_input_embeddings().weight
    return dict(params=sum(p.numel() for p in model.parameters()), embeddings=embeddings * (1 if tied else 2),
                vocab=text.vocab_size, hidden=text.hidden_size, layers=text.num_hidden_layers,
                kv_dim=getattr(text, "num_key_value_heads", heads) * head_dim)


def check_card(cfg: RunConfig, shape: dict, card_bytes: int, card_name: str, processes: int = 1,
               sharding: str = "none", engine: RolloutEngine | None = None) -> float:
    """Refuse a run whose plan does not fit the card, before anything is loaded onto it, naming what to lower.
    Returns the plan's peak in GB."""
    parts = memory_per_gpu(cfg, shape, processes, sharding, engine)
    peak = peak_gb(parts)
    if peak * 1e9 > card_bytes:
        biggest = sorted(parts.items(), key=lambda kv: -kv[1])[:3]
        raise ValueError(
            f"the run needs about {peak:.1f} GB on each GPU and {card_name} has {card_bytes / 1e9:.1f} GB (largest "
            f"parts: {', '.join(f'{k} {v:.1f}' for k, v in biggest)}): lower micro_batch_tokens (now "
            f"{cfg.micro_batch_tokens}), kv_cache_gib (now {cfg.kv_cache_gib:g}) or max_total_tokens (now "
            f"{cfg.max_total_tokens}), use LoRA (lora_rank), or shard over more GPUs (launch_config)")
    return peak


def vllm_options(cfg: RunConfig, params: int, card_bytes: int | None) -> dict:
    """What a colocated vLLM engine is given (`make_engine`'s keyword arguments) beyond the model folder. On a GPU:
    gpu_memory_utilization is the share of the card the engine will hold, (weights + KV cache + VLLM_OVERHEAD_GIB)
    / card, rounded up to a hundredth (vLLM refuses to start unless that much is free, and its default, 0.9, never is
    beside a trainer), and sleep mode, so the engine gives its memory back during the update. On a CPU, neither."""
    options = dict(max_model_len=cfg.max_total_tokens + cfg.max_tokens, kv_cache_gib=cfg.kv_cache_gib,
                   tensor_parallel_size=cfg.rollout_tp, dtype="bfloat16" if cfg.bf16 else "float32")
    if card_bytes:
        held = (2 if cfg.bf16 else 4) * params / cfg.rollout_tp + (cfg.kv_cache_gib + VLLM_OVERHEAD_GIB) * 2**30
        options.update(gpu_memory_utilization=math.ceil(100 * held / card_bytes) / 100, sleep_mode=True)
    return options


def check_engine_fits(options: dict, free_bytes: int, card_bytes: int) -> None:
    """vLLM's own start-up check, made before it starts and with a message that says what to lower."""
    wanted = options["gpu_memory_utilization"] * card_bytes
    if wanted > free_bytes:
        raise ValueError(f"the colocated vLLM engine needs {wanted / 2**30:.1f} GiB (gpu_memory_utilization "
                         f"{options['gpu_memory_utilization']}: its weights, a KV cache of kv_cache_gib="
                         f"{options['kv_cache_gib']:g} GiB and {VLLM_OVERHEAD_GIB:g} GiB of its own) but only "
                         f"{free_bytes / 2**30:.1f} GiB of the card are free after the trainer's models: lower "
                         "kv_cache_gib, use LoRA (lora_rank) or bf16, or a larger card")


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
        engine = rollout_engine(cfg, sharding)
        parts = memory_per_gpu(cfg, shape, processes, sharding, engine)
        total = peak_gb(parts)
        cards = CARDS_GB.get(cfg.preset, (80,))
        fits = [f"{'fits' if total <= gb else 'does NOT fit'} {'an' if gb == 80 else 'a'} {gb} GB card" for gb in cards]
        phases = {"all run": {k: v for k, v in parts.items() if ": " not in k}}
        for phase in ("rollout", "update"):
            phases[phase] = {k[len(phase) + 2:]: v for k, v in parts.items() if k.startswith(phase + ": ")}
        listed = "; ".join(f"{name}: " + " + ".join(f"{k} {v:.1f}" for k, v in items.items())
                           for name, items in phases.items() if items)
        lines.append(f"  memory per GPU (estimate, GB, {'LoRA r=%d' % cfg.lora_rank if cfg.lora_rank else 'full'}, "
                     f"{engine.label}): {listed}; peak {total:.1f}: " + ", ".join(fits)
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
