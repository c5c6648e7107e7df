"""Run by tests/test_parallel.py under `accelerate launch` (two gloo processes): each strategy of train/parallel.py on
its own, built from an Accelerator without a Trainer, on a tiny model and a loss of known sum.

Rank 0 holds two micro-batches of the mini-batch and rank 1 one, so the processes' shares are uneven. With the DDP
config the worker checks `DDP` (no filler passes; the gradients summed at `step`) and `ZeRO` on a stand-in for
DeepSpeed's engine (filler passes, the loss times the world size, the boundary on the last pass); with the FSDP config,
`FSDP` (filler passes, or the processes' gathers would wait on each other for ever). Every rank writes what it saw."""
import copy
import json
import os
import sys

import torch

from agentgym_nb.train.parallel import make_parallel, ZeRO

ROWS = {0: [[0, 1], [2]], 1: [[3, 4]]}   # each rank's micro-batches (row indices of the one shared batch)
LR, CLIP = 0.1, 0.5


def tiny_model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))


def batch() -> torch.Tensor:
    return torch.randn(5, 4, generator=torch.Generator().manual_seed(1))


def loss_of(model, x: torch.Tensor):
    """The loss of rows of the batch: its share of one global sum over all 5 rows."""
    return lambda rows: ((model(x[rows]) ** 2).sum() / len(x), {"rows": len(rows)})


def reference(x: torch.Tensor) -> dict[str, torch.Tensor]:
    """One process's update on all the rows: the weights every process must end with."""
    model = tiny_model()
    optimizer = torch.optim.AdamW(model.parameters(), lr=LR)
    loss_of(model, x)(list(range(len(x))))[0].backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP)
    optimizer.step()
    return {k: v.detach() for k, v in model.state_dict().items()}


def train(par, x: torch.Tensor) -> tuple[dict, list]:
    model, optimizer, _, _, _ = par.place(tiny_model(), None, None, lr=LR, critic_lr=LR, weight_decay=0.01,
                                          grad_clip=CLIP, lora=False)
    optimizer.zero_grad()
    seen = [rows for rows, _ in par.backward_passes(ROWS[par.rank], loss_of(model, x), learn=True, model=model)]
    par.step(CLIP, (model, optimizer), (None, None))
    return par.engine_weights(model), seen


def gap(a: dict, b: dict) -> float:
    return max(float((a[k] - b[k]).abs().max()) for k in b)


class EngineStandIn(torch.nn.Module):
    """What ZeRO's strategy asks of DeepSpeed's engine, on a plain model: the boundary and the loss of each backward
    pass, and a step."""

    def __init__(self):
        super().__init__()
        self.module, self.calls = tiny_model(), []

    def forward(self, x):
        return self.module(x)

    def set_gradient_accumulation_boundary(self, last: bool) -> None:
        self.calls.append(["boundary", last])

    def backward(self, loss: torch.Tensor) -> None:
        self.calls.append(["backward", float(loss.detach())])
        loss.backward()

    def step(self) -> None:
        self.calls.append(["step"])

    def get_global_grad_norm(self) -> float:
        return 1.5


def main(out_dir: str) -> None:
    from accelerate import Accelerator
    par = make_parallel(Accelerator(cpu=True))
    x = batch()
    result = {"kind": par.kind, "rank": par.rank, "world": par.world, "sum": par.sum(par.rank + 1, 10),
              "max": par.max(par.rank + 3), "sum_tensor": par.sum_tensor(torch.tensor([1.0, par.rank])).tolist(),
              "mean_metrics": par.mean_metrics({"step": 7, "loss": float(par.rank), "episodes": 2}, ("episodes",)),
              "passes": list(par.passes(ROWS[par.rank]))}
    weights, result["seen"] = train(par, x)
    result["gap"] = gap(weights, reference(x))
    result["moved"] = gap(weights, tiny_model().state_dict())
    if par.kind == "fsdp":
        model, optimizer = torch.nn.Linear(2, 2), None
        result["sharded_state"] = list(par.sharded_state({"policy": (model, optimizer), "critic": (None, None)}))
    if par.kind == "ddp":   # ZeRO's passes and backward, over the same two processes
        zero, engine = ZeRO(par.accelerator), EngineStandIn()
        passes = list(zero.backward_passes(ROWS[par.rank], loss_of(engine, x), learn=True, model=engine))
        result["zero"] = {"seen": [rows for rows, _ in passes], "calls": engine.calls,
                          "grad_norm": zero.step(CLIP, (engine, None), (None, None)), "last": engine.calls[-1]}
    with open(os.path.join(out_dir, f"{par.kind}_rank{par.rank}.json"), "w") as f:
        json.dump(result, f)
    torch.distributed.barrier()
    # left to the interpreter's exit, the process group's threads can abort a rank after its work is done
    # ("terminate called without an active exception", SIGABRT)
    torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1])
