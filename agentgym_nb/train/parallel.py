"""How the processes of one launch share a training step: one object, so the trainer's loop reads as the algorithm.

Every process plays its own share of the step's items. Each micro-batch's loss is divided by the token count of the
mini-batch of ALL processes, so the SUM of all processes' gradients is the gradient one process would get on the
union of the batches. Where that sum is taken depends on how the launch config splits the model (`sharding_of`):
    none       one process: nothing to add up.
    ddp        a whole replica per process; no communication during the micro-batches (`accumulate`), one
               all_reduce(sum) per mini-batch (`step`), so every process makes the same collective calls however its
               episodes are split into micro-batches.
    fsdp       FSDP2: each backward reduce-scatters every gradient into its owner's shard, as a sum (`shard` sets the
               divide factor to 1), so full-size gradients never accumulate on one device.
    deepspeed  ZeRO reduce-scatters the MEAN over processes: the loss is multiplied by the world size. The last
               micro-batch of a mini-batch is marked as the accumulation boundary, where the engine clips and steps.
Under fsdp and deepspeed every forward and backward also gathers parameters from all processes, so every process
makes as many passes as the busiest one (`passes`): the extra ones repeat a micro-batch with weight 0.
"""
from __future__ import annotations

import contextlib

import torch

from .common import full_state_dict, merged_state_dict, shard
from .launch import fsdp_settings, sharding_of


class Parallel:
    def __init__(self, accelerator):
        self.accelerator = accelerator
        self.kind = sharding_of(accelerator)   # "none", "ddp", "fsdp" or "deepspeed"

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
        (model, optimizer, ref, critic, critic_optimizer). Under FSDP the optimizers are built over the shards, so
        each process keeps only its part of Adam's state, and the frozen reference is sharded too. DeepSpeed shards
        only the model it drives: the reference is a bf16 copy."""
        acc = self.accelerator
        if self.kind in ("fsdp", "deepspeed") and lora:
            raise ValueError(f"LoRA with {self.kind} sharding is not supported: the adapters are small and the frozen "
                             "base fits on each GPU; launch with a DDP config (ddp_cpu_2proc.yaml, or distributed_type "
                             "MULTI_GPU), or use lora_rank=0")
        if self.kind == "deepspeed" and critic is not None:
            raise ValueError("algorithm gae trains a second model (the critic); accelerate drives one DeepSpeed "
                             "engine per Accelerator: launch with configs/accelerate/fsdp_8gpu.yaml instead")

        def adamw(module, rate):   # one fused kernel per step on a GPU instead of several per parameter
            return torch.optim.AdamW([p for p in module.parameters() if p.requires_grad], lr=rate,
                                     weight_decay=weight_decay, fused=acc.device.type == "cuda" or None)

        if self.kind == "fsdp":
            settings = fsdp_settings(acc)
            model = shard(model, **settings)
            ref = shard(ref, **settings) if ref is not None else None
            critic = shard(critic, **settings) if critic is not None else None
            return (model, adamw(model, lr), ref, critic,
                    adamw(critic, critic_lr) if critic is not None else None)
        if ref is not None:
            ref = ref.to(acc.device)
            if self.kind == "deepspeed":
                ref = ref.to(torch.bfloat16)
        model, optimizer = acc.prepare(model, adamw(model, lr))
        if self.kind == "deepspeed" and model.gradient_clipping() != grad_clip:
            raise ValueError(f"the DeepSpeed config clips gradients at {model.gradient_clipping()}, the run config "
                             f"at grad_clip={grad_clip}: set gradient_clipping to {grad_clip} in its JSON")
        if critic is None:
            return model, optimizer, ref, None, None
        critic, critic_optimizer = acc.prepare(critic, adamw(critic, critic_lr))
        return model, optimizer, ref, critic, critic_optimizer

    def engine_weights(self, model) -> dict[str, torch.Tensor]:
        """The whole policy under its plain HF names, for this process's rollout engine: gathered from the shards
        (fsdp, deepspeed: a collective, every process must call it) or merged from LoRA adapters."""
        model = self.accelerator.unwrap_model(model)
        if self.kind in ("fsdp", "deepspeed"):
            return full_state_dict(model)
        return merged_state_dict(model)

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
    def passes(self, n: int) -> int:
        """How many forward (and backward) passes this process makes for its n micro-batches."""
        return self.max(n) if self.kind in ("fsdp", "deepspeed") else n

    @contextlib.contextmanager
    def accumulate(self, *modules):
        """Backward passes inside add to the gradients without communication (DDP); `step` sums them once."""
        with contextlib.ExitStack() as stack:
            if self.kind == "ddp":
                for module in modules:
                    if module is not None:
                        stack.enter_context(self.accelerator.no_sync(module))
            yield

    def backward(self, model, loss: torch.Tensor, *, last: bool) -> None:
        if self.kind == "deepspeed":
            model.set_gradient_accumulation_boundary(last)
            model.backward(loss * self.world)
        else:
            self.accelerator.backward(loss)

    def step(self, grad_clip: float, *pairs) -> float:
        """Sum the gradients over processes where no backward did (ddp), clip each model's at grad_clip and step its
        optimizer, for each (model, optimizer) pair (the policy's first; None pairs are skipped). Returns the
        policy's gradient norm before clipping. DeepSpeed's engine clips (at its config's gradient_clipping) and
        steps by itself."""
        pairs = [(m, o) for m, o in pairs if m is not None]
        if self.kind == "deepspeed":
            model, _ = pairs[0]
            model.step()
            return float(model.get_global_grad_norm())
        norms = []
        for model, optimizer in pairs:
            if self.kind == "ddp":
                for p in model.parameters():
                    if p.requires_grad:
                        if p.grad is None:
                            p.grad = torch.zeros_like(p)
                        torch.distributed.all_reduce(p.grad)
            if self.kind == "fsdp":   # DTensor gradients: torch's clip takes the norm over all shards
                norm = torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip).full_tensor()
            else:
                norm = self.accelerator.clip_grad_norm_(model.parameters(), grad_clip)
            norms.append(float(norm))
            optimizer.step()
        return norms[0]
