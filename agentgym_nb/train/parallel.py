"""How the processes of one launch share a training step: one small strategy per kind, so the trainer's loop reads as
the algorithm and every collective call is made here.

Every process plays its own share of the step's items. Each micro-batch's loss is divided by the token count of the
mini-batch of ALL processes, so the SUM of all processes' gradients is the gradient one process would get on the
union of the batches. Where that sum is taken depends on how the launch config splits the model (`sharding_of`):
    Single  one process ("none"): nothing to add up.
    DDP     a whole replica per process ("ddp"); no communication during the micro-batches (`accumulate`), one
            all_reduce(sum) per mini-batch (`step`), so every process makes the same collective calls however its
            episodes are split into micro-batches.
    FSDP    FSDP2 ("fsdp"): each backward reduce-scatters every gradient into its owner's shard, as a sum (`shard`
            sets the divide factor to 1), so full-size gradients never accumulate on one device.
    ZeRO    DeepSpeed ("deepspeed"): ZeRO reduce-scatters the MEAN over processes, so the loss is multiplied by the
            world size. The last micro-batch of a mini-batch is marked as the accumulation boundary, where the
            engine clips and steps.
Under FSDP and ZeRO every forward and backward also gathers parameters from all processes, so every process makes as
many passes as the busiest one (`passes`): the extra ones repeat a micro-batch with weight 0.
"""
from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator

import torch
from accelerate.utils import DistributedType, FullyShardedDataParallelPlugin

from .common import merged_state_dict

class Single:
    """One process: the models on its device, every sum its own number."""
    kind = "none"
    lockstep = False        # whether every process makes as many passes as the busiest (each one gathers weights)
    sync_at_start = False   # whether an engine must take the trainer's weights before the first rollout

    def __init__(self, accelerator):
        self.accelerator = accelerator

    @property
    def rank(self) -> int:
        return self.accelerator.process_index

    @property
    def world(self) -> int:
        return self.accelerator.num_processes

    @property
    def device(self) -> torch.device:
        return self.accelerator.device

    # -------------------------------------------------------------------------------------------- placement
    def place(self, model, ref, critic, *, lr: float, critic_lr: float, weight_decay: float, grad_clip: float,
              lora: bool):
        """The models on this process's device, split as the launch config says, and their AdamW optimizers:
        (model, optimizer, ref, critic, critic_optimizer)."""
        acc = self.accelerator
        if ref is not None:
            ref = ref.to(acc.device)
        model, optimizer = acc.prepare(model, self.adamw(model, lr, weight_decay))
        if critic is None:
            return model, optimizer, ref, None, None
        critic, critic_optimizer = acc.prepare(critic, self.adamw(critic, critic_lr, weight_decay))
        return model, optimizer, ref, critic, critic_optimizer

    def adamw(self, module, rate: float, weight_decay: float):
        # one fused kernel per step on a GPU instead of several per parameter
        return torch.optim.AdamW([p for p in module.parameters() if p.requires_grad], lr=rate,
                                 weight_decay=weight_decay, fused=self.device.type == "cuda" or None)

    def engine_weights(self, model) -> dict[str, torch.Tensor]:
        """The whole policy under its plain HF names, for this process's rollout engine (merged from LoRA adapters
        where there are some)."""
        return merged_state_dict(self.accelerator.unwrap_model(model))

    def sharded_state(self, pairs: dict) -> dict | None:
        """{name: (model, optimizer)} of what accelerate's save_state cannot save itself (checkpoint.py), or None."""
        return None

    # --------------------------------------------------------------------------------------------- numbers
    def sum(self, *counts: int) -> list[int]:
        """Each count summed over processes."""
        if self.world == 1:
            return list(counts)
        counts = torch.tensor(counts, dtype=torch.float64, device=self.device)
        return [int(x) for x in self.accelerator.reduce(counts, "sum")]

    def max(self, count: int) -> int:
        """The largest of the processes' counts."""
        if self.world == 1:
            return count
        most = torch.tensor([count], device=self.device)
        torch.distributed.all_reduce(most, op=torch.distributed.ReduceOp.MAX)
        return int(most)

    def sum_tensor(self, x: torch.Tensor) -> torch.Tensor:
        """x summed over processes, on x's device (e.g. the moments the batch's advantages are whitened by)."""
        if self.world == 1:
            return x
        return self.accelerator.reduce(x.to(self.device), "sum").to(x.device)

    def mean_metrics(self, metrics: dict, summed: tuple[str, ...]) -> dict:
        """The mean over processes of every number, except the keys in `summed`, which are added up (a process's loss
        terms are its share of the global mini-batch's; its counts are its own part)."""
        if self.world == 1:
            return metrics
        keys = sorted(k for k, v in metrics.items() if isinstance(v, (int, float)) and k != "step")
        sums = self.accelerator.reduce(torch.tensor([float(metrics[k]) for k in keys], dtype=torch.float64,
                                                    device=self.device), "sum")
        return {**metrics, **{k: v if k in summed else v / self.world for k, v in zip(keys, sums.tolist())}}

    # ------------------------------------------------------------------------------------- a mini-batch
    def passes(self, micro_batches: list[list[int]]) -> Iterator[tuple[list[int], bool]]:
        """(rows, filler) of each forward pass this process makes over its micro-batches (lists of row indices): its
        own, then, where every process must make as many passes as the busiest one, fillers that repeat its last
        micro-batch (or row 0, when it has none) and count for nothing."""
        n = self.max(len(micro_batches)) if self.lockstep else len(micro_batches)
        for j in range(n):
            yield (micro_batches[j] if j < len(micro_batches) else micro_batches[-1] if micro_batches else [0],
                   j >= len(micro_batches))

    def backward_passes(self, micro_batches: list[list[int]], loss_of: Callable, *, learn: bool, model,
                        critic=None) -> Iterator[tuple[list[int], dict]]:
        """The losses of one mini-batch's micro-batches, `loss_of(rows) -> (loss, parts)`, each followed by its
        backward pass when `learn` (the gradients add up until `step`); yields (rows, parts) of this process's own
        micro-batches, not of the fillers (whose backward passes count 0)."""
        passes = list(self.passes(micro_batches))
        for j, (rows, filler) in enumerate(passes):
            with self.accumulate(model, critic), torch.set_grad_enabled(learn):
                loss, parts = loss_of(rows)
                if learn:
                    self.backward(model, loss * 0.0 if filler else loss, last=j == len(passes) - 1)
            if not filler:
                yield rows, parts

    def accumulate(self, *modules):
        """Backward passes inside add to the gradients; `step` applies them."""
        return contextlib.nullcontext()

    def backward(self, model, loss: torch.Tensor, *, last: bool) -> None:
        self.accelerator.backward(loss)

    def step(self, grad_clip: float, *pairs) -> float:
        """Clip each model's gradients at grad_clip and step its optimizer, for each (model, optimizer) pair (the
        policy's first; None pairs are skipped). Returns the policy's gradient norm before clipping."""
        norms = []
        for model, optimizer in [(m, o) for m, o in pairs if m is not None]:
            self.reduce_gradients(model)
            norms.append(float(self.clip(model, grad_clip)))
            optimizer.step()
        return norms[0]

    def reduce_gradients(self, model) -> None:
        """Sum the gradients over processes where no backward pass did."""

    def clip(self, model, grad_clip: float) -> torch.Tensor:
        return self.accelerator.clip_grad_norm_(model.parameters(), grad_clip)


class DDP(Single):
    """A whole replica per process; the gradients are summed once per mini-batch, at `step`."""
    kind = "ddp"

    @contextlib.contextmanager
    def accumulate(self, *modules):
        """Backward passes inside add to the gradients without communication; `step` sums them once."""
        with contextlib.ExitStack() as stack:
            for module in modules:
                if module is not None:
                    stack.enter_context(self.accelerator.no_sync(module))
            yield

    def reduce_gradients(self, model) -> None:
        for p in model.parameters():
            if p.requires_grad:
                if p.grad is None:
                    p.grad = torch.zeros_like(p)
                torch.distributed.all_reduce(p.grad)


class FSDP(Single):
    """FSDP2: every model (the frozen reference and the critic too) split into per-process shards, the optimizers
    built over the shards, so each process keeps only its part of Adam's state."""
    kind = "fsdp"
    lockstep = True
    # under FSDP's cpu-RAM-efficient loading transformers gives every process but the first zeros, which the trainer's
    # model gets broadcast over; an engine's own copy would keep them and sample from them
    sync_at_start = True

    def place(self, model, ref, critic, *, lr: float, critic_lr: float, weight_decay: float, grad_clip: float,
              lora: bool):
        _refuse_lora(self.kind, lora)
        settings = fsdp_settings(self.accelerator)
        model = shard(model, **settings)
        ref = shard(ref, **settings) if ref is not None else None
        critic = shard(critic, **settings) if critic is not None else None
        return (model, self.adamw(model, lr, weight_decay), ref, critic,
                self.adamw(critic, critic_lr, weight_decay) if critic is not None else None)

    def engine_weights(self, model) -> dict[str, torch.Tensor]:
        """The policy gathered from the shards (a collective: every process must call it)."""
        return full_state_dict(self.accelerator.unwrap_model(model))

    def sharded_state(self, pairs: dict) -> dict | None:
        return {name: pair for name, pair in pairs.items() if pair[0] is not None}

    def clip(self, model, grad_clip: float) -> torch.Tensor:
        # DTensor gradients: torch's clip takes the norm over all shards
        return torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip).full_tensor()


class ZeRO(Single):
    """DeepSpeed ZeRO: shards only the model it drives (the policy); the reference is a bf16 copy per process, and the
    engine clips (at its config's gradient_clipping) and steps by itself."""
    kind = "deepspeed"
    lockstep = True

    def place(self, model, ref, critic, *, lr: float, critic_lr: float, weight_decay: float, grad_clip: float,
              lora: bool):
        _refuse_lora(self.kind, lora)
        if critic is not None:
            raise ValueError("algorithm gae trains a second model (the critic); accelerate drives one DeepSpeed "
                             "engine per Accelerator: launch with configs/accelerate/fsdp_8gpu.yaml instead")
        if ref is not None:
            ref = ref.to(self.device).to(torch.bfloat16)
        model, optimizer = self.accelerator.prepare(model, self.adamw(model, lr, weight_decay))
        if model.gradient_clipping() != grad_clip:
            raise ValueError(f"the DeepSpeed config clips gradients at {model.gradient_clipping()}, the run config "
                             f"at grad_clip={grad_clip}: set gradient_clipping to {grad_clip} in its JSON")
        return model, optimizer, ref, None, None

    def engine_weights(self, model) -> dict[str, torch.Tensor]:
        """The policy gathered from the ZeRO partitions (a collective: every process must call it)."""
        return full_state_dict(self.accelerator.unwrap_model(model))

    def backward(self, model, loss: torch.Tensor, *, last: bool) -> None:
        model.set_gradient_accumulation_boundary(last)
        model.backward(loss * self.world)

    def step(self, grad_clip: float, *pairs) -> float:
        model, _ = pairs[0]
        model.step()
        return float(model.get_global_grad_norm())


STRATEGIES = {cls.kind: cls for cls in (Single, DDP, FSDP, ZeRO)}


def make_parallel(accelerator) -> Single:
    """The strategy of the launch `accelerator` belongs to."""
    return STRATEGIES[sharding_of(accelerator)](accelerator)


def _refuse_lora(kind: str, lora: bool) -> None:
    if lora:
        raise ValueError(f"LoRA with {kind} sharding is not supported: the adapters are small and the frozen "
                         "base fits on each GPU; launch with a DDP config (ddp_cpu_2proc.yaml, or distributed_type "
                         "MULTI_GPU), or use lora_rank=0")


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


def shard(model, *, reshard_after_forward: bool = True, offload_policy=None):
    """FSDP2 (`fully_shard`), in place: each transformer block (the classes HF lists in `_no_split_modules`) is one
    unit whose parameters are gathered just before it runs and freed after; the rest (embeddings, final norm, head)
    is the root unit. Every process holds 1/world of each parameter, of its gradient and of the optimizer state.

    Every process starts from process 0's weights, broadcast into the shards: under accelerate's
    fsdp_cpu_ram_efficient_loading (its launcher's default) transformers reads the checkpoint on process 0 only and
    gives the others zeros. Gradients are SUMMED over processes in the backward's reduce-scatter (FSDP's default is
    their mean): the trainer's losses are already parts of one global sum, each divided by the token count of all
    processes."""
    # torch.distributed's FSDP modules take seconds to import and only sharded runs need them
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict
    from torch.distributed.fsdp import FSDPModule, OffloadPolicy, fully_shard
    first = torch.distributed.get_rank() == 0
    weights = model.state_dict() if first else {}   # holds on to process 0's tensors while the shards are made
    blocks = {name for m in model.modules() for name in (getattr(m, "_no_split_modules", None) or ())}
    kwargs = dict(reshard_after_forward=reshard_after_forward, offload_policy=offload_policy or OffloadPolicy())
    for module in list(model.modules()):
        if type(module).__name__ in blocks:
            fully_shard(module, **kwargs)
    fully_shard(model, **kwargs)
    for module in model.modules():
        if isinstance(module, FSDPModule):
            module.set_gradient_divide_factor(1.0)
            module.set_force_sum_reduction_for_comms(True)   # a plain sum: gloo has no pre-multiplied sum
    set_model_state_dict(model, weights, options=StateDictOptions(full_state_dict=True, broadcast_from_rank0=True))
    return model


@torch.no_grad()
def full_state_dict(model) -> dict[str, torch.Tensor]:
    """model.state_dict() with every sharded tensor whole, on the CPU, on every process: FSDP2's DTensors through
    full_tensor(), DeepSpeed ZeRO-3's partitions through GatheredParameters. One tensor is gathered at a time, so a
    device never holds a second whole copy of the model. Each gather is a collective: every process must call this."""
    from torch.distributed.tensor import DTensor   # seconds to import; only sharded runs get here
    out = {}
    for name, t in model.state_dict(keep_vars=True).items():
        if isinstance(t, DTensor):
            t = t.full_tensor()
        elif hasattr(t, "ds_id"):   # a ZeRO-3 parameter: its data is this process's partition
            import deepspeed   # optional: installed only where ZeRO runs
            with deepspeed.zero.GatheredParameters([t]):
                t = t.data.clone()
        out[name] = t.detach().cpu()
    return out
