"""Data parallel training on CPU: two gloo processes launched by accelerate with the repository's config, each
playing its own items. After one GRPO update both hold the same weights (and not the initial ones); a REINFORCE++
update, whose advantages are whitened over the trainable tokens of the whole batch, gives the weights one process
gets from the same update on the union of the two shares. One launch runs both (see tests/ddp_worker.py)."""
import json
import os

import pytest
from harness import accelerate_launch
import torch

from agentgym_nb.rollout.trajectory import Trajectory, TrajectoryGroup

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
pytestmark = [pytest.mark.timeout(900), pytest.mark.slow]


@pytest.fixture(scope="module")
def ddp_out(tmp_path_factory, nano_dir):
    out = tmp_path_factory.mktemp("ddp")
    accelerate_launch("ddp_cpu_2proc", "ddp_worker", out, timeout=850)
    return out


def test_two_process_ddp_update_keeps_ranks_identical(ddp_out):
    ranks = [json.load(open(ddp_out / f"rank{r}.json")) for r in (0, 1)]
    assert [r["world"] for r in ranks] == [2, 2]
    assert set(ranks[0]["items"]).isdisjoint(ranks[1]["items"])       # each process played its own items
    assert ranks[0]["before"] == ranks[1]["before"]
    assert ranks[0]["after"] != ranks[0]["before"]                    # the update moved the weights ...
    assert ranks[0]["after"] == pytest.approx(ranks[1]["after"], rel=0, abs=0)   # ... identically on both
    assert ranks[0]["optimizer_steps"] == ranks[1]["optimizer_steps"] == 2
    metrics = [json.loads(x) for x in open(ddp_out / "runs" / "ddp" / "metrics.jsonl")]
    assert len(metrics) == 1 and metrics[0]["step"] == 1               # written once, by the main process


def test_two_process_reinforce_pp_update_is_the_update_on_the_union(ddp_out, tmp_path):
    from ddp_worker import union_config

    from agentgym_nb.train.rl import Trainer
    shares = [json.load(open(ddp_out / f"union_rank{r}.json")) for r in (0, 1)]
    after = [torch.load(ddp_out / f"union_rank{r}.pt") for r in (0, 1)]
    assert all(torch.equal(after[0][k], after[1][k]) for k in after[0])   # the ranks agree exactly
    # the shares differ in mean score (rank 0: 0/1, rank 1: 1/2), so whitening each on its own is another update
    scores = [[t["reward"] for t in s["episodes"]] for s in shares]
    assert min(scores[1]) > min(scores[0]) and max(scores[1]) > max(scores[0])

    # one process, the same config and starting weights, the same update on the union of the episodes (group ids
    # are the step's: each mini-batch holds the same groups as in the two-process update)
    single = Trainer(union_config(str(tmp_path)), log=lambda *a: None)
    model = single.accelerator.unwrap_model(single.model)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    out = single.update(TrajectoryGroup.of([Trajectory(**t) for s in shares for t in s["episodes"]]), 1)
    single.close()
    assert out["optimizer_steps"] == shares[0]["optimizer_steps"] == 2
    union = model.state_dict()
    moved = max(float((after[0][k] - before[k]).abs().max()) for k in before)
    assert moved > 5e-3, moved   # Adam moves a weight by up to about lr = 1e-2 per step
    # the two updates agree up to float summation order (measured: 2e-6 of the update; whitening each share on its
    # own instead: 0.8). Relative over all weights, since Adam turns a gradient near 0 into a step of either sign.
    gap = _norm({k: after[0][k] - union[k] for k in before}) / _norm({k: union[k] - before[k] for k in before})
    assert gap < 1e-3, f"the two-process update is not the update on the union: they differ by {gap:.1e} of it"


def test_two_process_skip_is_decided_over_both_processes(ddp_out):
    """filter_groups, GRPO: rank 0's groups all score 0.9 (every advantage 0), rank 1's score 0 and 1. Both ranks
    step (rank 1 has a signal) and stay identical; then with no signal on either rank, neither steps."""
    ranks = [json.load(open(ddp_out / f"skip_rank{r}.json")) for r in (0, 1)]
    assert [r["one_rank_steps"] for r in ranks] == [2, 2]
    assert ranks[0]["after_one"] != ranks[0]["before"]
    assert ranks[0]["after_one"] == pytest.approx(ranks[1]["after_one"], rel=0, abs=0)
    assert [r["no_rank_steps"] for r in ranks] == [0, 0]
    assert [r["after_none"] for r in ranks] == [ranks[0]["after_one"]] * 2


def test_two_process_dynamic_sampling_trains_the_groups_one_process_would(ddp_out, tmp_path):
    """filter_groups, GRPO: all 4 groups of the step carry a signal, 2 are to be trained. The cap is applied over
    both processes (the step's first two groups: rank 0's group 0 and rank 1's group 0), not per process (which
    would train all four), and the update equals one process's on the union of the episodes."""
    from ddp_worker import filtered_config

    from agentgym_nb.train.rl import Trainer
    shares = [json.load(open(ddp_out / f"filtered_rank{r}.json")) for r in (0, 1)]
    after = [torch.load(ddp_out / f"filtered_rank{r}.pt") for r in (0, 1)]
    assert [s["chosen"] for s in shares] == [[0], [1]]
    assert all(torch.equal(after[0][k], after[1][k]) for k in after[0])
    union = [Trajectory(**t) for share in shares for t in share["episodes"]]
    single = Trainer(filtered_config(str(tmp_path)), log=lambda *a: None)
    model = single.accelerator.unwrap_model(single.model)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    chosen = single.groups_to_train(TrajectoryGroup.of(union))
    assert sorted(g.id for g in chosen) == [0, 1]
    out = single.update(chosen, 1)
    single.close()
    assert out["optimizer_steps"] == shares[0]["optimizer_steps"] == 1
    state = model.state_dict()
    gap = _norm({k: after[0][k] - state[k] for k in before}) / _norm({k: state[k] - before[k] for k in before})
    assert gap < 1e-3, f"the two-process update is not the update on the union: they differ by {gap:.1e} of it"


def _norm(tensors: dict) -> float:
    return sum(float(v.double().norm()) ** 2 for v in tensors.values()) ** 0.5
