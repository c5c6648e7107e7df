"""Pieces every trainer shares: bf16 autocast, micro-batches, LoRA and its merged weights, the Accelerator a run
makes and the critic of PPO/GAE. (How processes split the models is parallel.py's.)"""
from __future__ import annotations

import dataclasses
import os

import torch

from ..algos.losses import causal_attention_mask
from ..pretrained import load_pretrained


def native_bf16(device_type: str | None = None) -> bool:
    """Whether bf16 autocast pays on `device_type` ("cuda" or "cpu"; default: the GPU when there is one, else the
    CPU): a CUDA GPU with bf16, or a CPU whose oneDNN has bf16 kernels (AVX-512 and up). Elsewhere bf16 is emulated:
    on an AVX2-only CPU a nano training step is an order of magnitude slower than in fp32. Asked per device, so a
    model trained on the CPU of a machine that also has a GPU is judged by its CPU."""
    device_type = device_type or ("cuda" if torch.cuda.is_available() else "cpu")
    if device_type == "cuda":
        return torch.cuda.is_available() and torch.cuda.is_bf16_supported()
    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        return False


def autocast(device_type: str, bf16: bool | None = None):
    """bf16 autocast when `bf16` is True, fp32 when False; None: bf16 where `device_type` has it (`native_bf16`)."""
    return torch.autocast(device_type, dtype=torch.bfloat16, enabled=native_bf16(device_type) if bf16 is None else bf16)


def micro_batches(lengths: list[int], max_tokens: int) -> list[list[int]]:
    """Group row indices so that rows * longest row <= max_tokens (a single long row still gets its own group)."""
    groups, current, longest = [], [], 0
    for i, n in enumerate(lengths):
        if current and max(longest, n) * (len(current) + 1) > max_tokens:
            groups.append(current)
            current, longest = [], 0
        current.append(i)
        longest = max(longest, n)
    if current:
        groups.append(current)
    return groups


def pack_by_length(lengths: list[int], max_tokens: int) -> list[list[int]]:
    """`micro_batches` over the rows sorted longest first: rows of similar length share a micro-batch, so little of
    the token budget goes to padding and a batch takes fewer passes. Each micro-batch lists its rows in order."""
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    return [sorted(order[j] for j in group) for group in micro_batches([lengths[i] for i in order], max_tokens)]


def trim(batch: dict[str, torch.Tensor], rows: list[int]) -> dict[str, torch.Tensor]:
    """Select rows and cut the right padding they do not need."""
    idx = torch.tensor(rows)
    T = int(batch["attention_mask"][idx].sum(-1).max())
    return {k: v[idx, :T] for k, v in batch.items()}


def set_threads(n: int = 0) -> int:
    """Torch threads: n; when n == 0, $OMP_NUM_THREADS if set, else all cores. Returns the number set."""
    n = n or int(os.environ.get("OMP_NUM_THREADS") or 0) or os.cpu_count() or 1
    torch.set_num_threads(n)
    return n


def add_lora(model, r: int = 8, alpha: int | None = None, target_modules="all-linear", dropout: float = 0.0):
    """Wrap `model` (in place) with LoRA adapters through peft: W x + (alpha / r) * B A x on every targeted linear
    layer, A random and B zero, so the wrapped model starts out computing exactly what `model` did. Only A and B
    train. "all-linear" targets every linear layer except the output head. alpha defaults to 2 r (the RL trainer's
    LoRA, which the evaluation CLI rebuilds from a checkpoint's adapter shapes)."""
    from peft import LoraConfig, get_peft_model   # importing peft takes seconds; only LoRA runs need it
    config = LoraConfig(r=r, lora_alpha=2 * r if alpha is None else alpha, target_modules=target_modules,
                        lora_dropout=dropout, task_type="CAUSAL_LM")
    return get_peft_model(model, config)


@torch.no_grad()
def merged_state_dict(model) -> dict[str, torch.Tensor]:
    """The weights a rollout engine needs, under the plain HF names: for a peft model, W + (alpha / r) * B A for
    every LoRA layer, without the peft prefixes or the adapter tensors; for any other model, its state dict.

    The model is not modified (no merge/unmerge round trip, whose float rounding would drift the base weights a
    little at every sync)."""
    from peft import PeftModel   # importing peft takes seconds: paid at the first weight sync, not at import
    from peft.tuners.lora import LoraLayer
    if not isinstance(model, PeftModel):
        return {k: v.detach() for k, v in model.state_dict().items()}
    base = model.get_base_model()
    out = {name.replace(".base_layer.", "."): t.detach() for name, t in base.state_dict().items()
           if "lora_" not in name}
    for name, module in base.named_modules():
        if isinstance(module, LoraLayer) and not module.merged and not module.disable_adapters:
            for adapter in module.active_adapters:
                if adapter in module.lora_A:
                    out[f"{name}.weight"] = out[f"{name}.weight"] + module.get_delta_weight(adapter)
    return out


class Critic(torch.nn.Module):
    """V(state before token t) for every position t: the policy's transformer body (a copy, trained separately)
    under a linear head that starts at zero. Aligned like token_logprobs: values[:, t] is read from the hidden state
    at t - 1, the state in which token t was sampled."""

    def __init__(self, model_dir: str):
        super().__init__()
        from transformers import AutoModel   # a model class: importing it takes seconds
        self.body = load_pretrained(AutoModel, model_dir, dtype=torch.float32)
        self.head = torch.nn.Linear(self.body.config.hidden_size, 1)
        torch.nn.init.zeros_(self.head.weight)
        torch.nn.init.zeros_(self.head.bias)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        hidden = self.body(input_ids=input_ids, attention_mask=causal_attention_mask(attention_mask))
        values = self.head(hidden.last_hidden_state).squeeze(-1).float()
        return torch.nn.functional.pad(values[:, :-1], (1, 0))


def make_accelerator(cfg, log=print):
    """The run's Accelerator: on the GPU when there is one, with the run's mixed precision and trackers
    (`trackers_of`), which get the config."""
    from accelerate import Accelerator   # seconds to import; only trainers need it
    trackers = trackers_of(cfg)
    mixed_precision = "bf16" if cfg.bf16 else "no"
    _forget_other_precision(mixed_precision)
    accelerator = Accelerator(cpu=not torch.cuda.is_available(), mixed_precision=mixed_precision,
                              log_with=trackers or None, project_dir=cfg.run_dir)
    if trackers:
        accelerator.init_trackers(cfg.name, config={k: v if isinstance(v, (int, float, str, bool)) else str(v)
                                                    for k, v in dataclasses.asdict(cfg).items()})
    if cfg.bf16 and not native_bf16():
        log("warning: bf16=True on hardware without bf16 kernels: autocast emulates it, several times slower than "
            "fp32 (bf16=False is faster here)")
    return accelerator


def _forget_other_precision(mixed_precision: str) -> None:
    """Accelerate keeps one mixed-precision setting per process and refuses a second Accelerator with another, so a
    notebook that trains an fp32 run and then a bf16 one would fail. The setting is per run here: an earlier run's is
    dropped (the process group, in PartialState, stays)."""
    from accelerate.state import AcceleratorState
    earlier = AcceleratorState._shared_state.get("_mixed_precision")
    if earlier is not None and earlier != mixed_precision:
        AcceleratorState._reset_state(reset_partial_state=False)


def trackers_of(cfg) -> list[str]:
    """The Accelerate trackers a run logs to: cfg.trackers, or TensorBoard when it is installed."""
    import accelerate.utils
    if cfg.trackers is None:
        return ["tensorboard"] if accelerate.utils.is_tensorboard_available() else []
    missing = [t for t in cfg.trackers if not getattr(accelerate.utils, f"is_{t}_available")()]
    if missing:   # (Accelerate would drop them with a warning: a run would go untracked unnoticed)
        raise ValueError(f"trackers {missing} were asked for but are not installed (pip install {' '.join(missing)}), "
                         "or use trackers=[] for metrics.jsonl alone")
    return list(cfg.trackers)
