"""Each strategy of train/parallel.py on its own, built from an Accelerator without a Trainer.

`Single` runs here; `DDP`, `ZeRO` (on a stand-in for DeepSpeed's engine) and `FSDP` in two gloo processes launched by
accelerate with the repository's CPU configs (tests/parallel_worker.py), whose shares of the mini-batch are uneven
(two micro-batches and one). Every strategy must end with the weights of one process's update on all the rows."""
import json

import pytest
from harness import accelerate_launch
import torch

from parallel_worker import LR, CLIP, ROWS, EngineStandIn, batch, loss_of, reference, tiny_model, train

from agentgym_nb.train.parallel import STRATEGIES, Single, ZeRO, make_parallel


@pytest.fixture(scope="module")
def accelerator():
    from accelerate import Accelerator
    return Accelerator(cpu=True)


def test_one_process_is_single_and_its_numbers_are_its_own(accelerator):
    par = make_parallel(accelerator)
    assert type(par) is Single and par.kind == "none" and (par.rank, par.world) == (0, 1)
    assert par.sum(3, 4) == [3, 4] and par.max(5) == 5
    metrics = {"step": 1, "loss": 0.5}
    assert par.mean_metrics(metrics, ("loss",)) is metrics
    assert list(par.passes([[0, 1], [2]])) == [([0, 1], False), ([2], False)]   # no filler passes
    assert par.sharded_state({"policy": (torch.nn.Linear(1, 1), None)}) is None
    assert sorted(STRATEGIES) == ["ddp", "deepspeed", "fsdp", "none"]


def test_single_makes_the_update_on_all_rows_in_micro_batches(accelerator):
    par, x = make_parallel(accelerator), batch()
    rows = ROWS[0] + ROWS[1]   # every micro-batch of the mini-batch is this process's
    model, optimizer, _, _, _ = par.place(tiny_model(), None, None, lr=LR, critic_lr=LR, weight_decay=0.01,
                                          grad_clip=CLIP, lora=False)
    optimizer.zero_grad()
    seen = [(r, parts) for r, parts in par.backward_passes(rows, loss_of(model, x), learn=True, model=model)]
    assert seen == [(r, {"rows": len(r)}) for r in rows]
    par.step(CLIP, (model, optimizer), (None, None))
    expected = reference(x)
    weights = par.engine_weights(model)
    assert max(float((weights[k] - v).abs().max()) for k, v in expected.items()) < 1e-6


def test_without_learning_the_passes_measure_and_leave_no_gradient(accelerator):
    par, x, model = make_parallel(accelerator), batch(), tiny_model()
    seen = list(par.backward_passes([[0], [1, 2]], loss_of(model, x), learn=False, model=model))
    assert [r for r, _ in seen] == [[0], [1, 2]] and all(p.grad is None for p in model.parameters())


def test_zero_on_one_process_scales_nothing_and_marks_the_last_pass(accelerator):
    zero, engine, x = ZeRO(accelerator), EngineStandIn(), batch()
    list(zero.backward_passes([[0], [1, 2]], loss_of(engine, x), learn=True, model=engine))
    losses = [float(loss_of(tiny_model(), x)(rows)[0]) for rows in ([0], [1, 2])]
    assert engine.calls == [["boundary", False], ["backward", pytest.approx(losses[0])], ["boundary", True],
                            ["backward", pytest.approx(losses[1])]]   # one process: the loss as it is
    assert zero.step(CLIP, (engine, None), (None, None)) == 1.5 and engine.calls[-1] == ["step"]


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.parametrize("config, kinds", [("ddp_cpu_2proc", "ddp"), ("fsdp_cpu_2proc", "fsdp")])
def test_two_processes_make_the_update_on_the_union(tmp_path, config, kinds):
    accelerate_launch(config, "parallel_worker", tmp_path, timeout=850)
    ranks = [json.load(open(tmp_path / f"{kinds}_rank{r}.json")) for r in (0, 1)]
    assert [r["kind"] for r in ranks] == [kinds, kinds] and [r["world"] for r in ranks] == [2, 2]
    assert [r["sum"] for r in ranks] == [[3, 20]] * 2 and [r["max"] for r in ranks] == [4, 4]
    assert [r["sum_tensor"] for r in ranks] == [[2.0, 1.0]] * 2
    assert [r["mean_metrics"] for r in ranks] == [{"step": 7, "loss": 0.5, "episodes": 4.0}] * 2
    assert [r["seen"] for r in ranks] == [ROWS[0], ROWS[1]]   # each process trained on its own rows, once
    for r in ranks:
        assert r["moved"] > 1e-2 and r["gap"] < 1e-6, r   # the update on all rows, on both processes
    if kinds == "fsdp":   # the busier process's turn: rank 1 repeats its micro-batch, weighted 0
        assert [r["passes"] for r in ranks] == [[[[0, 1], False], [[2], False]], [[[3, 4], False], [[3, 4], True]]]
        assert ranks[0]["sharded_state"] == ["policy"]
    else:
        assert [r["passes"] for r in ranks] == [[[[0, 1], False], [[2], False]], [[[3, 4], False]]]
        zero = [r["zero"] for r in ranks]
        assert [z["seen"] for z in zero] == [ROWS[0], ROWS[1]] and [z["grad_norm"] for z in zero] == [1.5, 1.5]
        boundaries = [[c[1] for c in z["calls"] if c[0] == "boundary"] for z in zero]
        assert boundaries == [[False, True], [False, True]]   # both make two passes, the last the boundary
        backward = [[c[1] for c in z["calls"] if c[0] == "backward"] for z in zero]
        loss = loss_of(tiny_model(), batch())
        expected = [[2 * float(loss(rows)[0]) for rows in ROWS[0]], [2 * float(loss(ROWS[1][0])[0]), 0.0]]
        assert backward == [pytest.approx(e) for e in expected]   # the loss times the world size; the filler's 0
        assert [z["last"] for z in zero] == [["step"], ["step"]]
