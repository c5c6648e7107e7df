"""AgentEvol: AgentGym's per-env reward thresholds and keep-first dedupe, and two real iterations on BabyAI with the
smoke model (SFT on expert episodes, exploration through run_episodes, filtering, merging with the original data)."""
import json
import os

import pytest
import torch

from agentgym_nb import models
from agentgym_nb.rollout.engine import HFEngine
from agentgym_nb.train.agentevol import agentevol, keep_successes, reward_threshold
from agentgym_nb.train.sft import item_index, trajectory_record

pytestmark = [pytest.mark.timeout(180), pytest.mark.slow]
torch.set_num_threads(1)


def test_thresholds_are_strict_and_the_first_success_of_an_item_is_kept():
    assert (reward_threshold("babyai"), reward_threshold("sciworld"), reward_threshold("textcraft"),
            reward_threshold("searchqa")) == (0.0, 99.0, 0.99, 0.99)
    records = [{"item_id": "babyai_1", "reward": 0.0, "tag": "zero"},
               {"item_id": "babyai_1", "reward": 0.5, "tag": "first success"},
               {"item_id": "babyai_1", "reward": 0.9, "tag": "better, but a duplicate"},
               {"item_id": 2, "reward": 0.1, "tag": "integer id"},
               {"item_id": "babyai_3", "reward": 0.0, "tag": "failure"}]
    assert [r["tag"] for r in keep_successes(records, "babyai")] == ["first success", "integer id"]
    sci = [{"item_id": "sciworld_1", "reward": 99.0}, {"item_id": "sciworld_2", "reward": 100.0}]
    assert [r["item_id"] for r in keep_successes(sci, "sciworld")] == ["sciworld_2"]
    craft = [{"item_id": "textcraft_1", "reward": 0.99}, {"item_id": "textcraft_2", "reward": 1.0}]
    assert [r["item_id"] for r in keep_successes(craft, "textcraft")] == ["textcraft_2"]


def read(path):
    with open(path) as f:
        return [json.loads(line) for line in f]


def test_two_iterations_on_real_babyai_rollouts(chat, nano_dir, tmp_path):
    train_items = [2, 162, 202, 242, 282, 362]        # GoToRedBallNoDists, solved by the expert in one reply
    explore = [482, 722, 802, 882, 3]                  # unseen seeds of that level, and a GoToObjS6 item
    original = [trajectory_record(t, "babyai")
                for t in models.demo_trajectories(chat, models.expert_conversations("babyai", train_items))]
    data = tmp_path / "babyai_train.json"
    data.write_text(json.dumps(original))
    engine = HFEngine(nano_dir, tokenizer=chat.tokenizer)   # its own engine: the weights get replaced
    out = tmp_path / "evol"
    # 60 epochs: at 30 (token loss ~0.09) the smoke model sampled the demonstrated reply 0-5 times in 15, depending on
    # the CPU's arithmetic (bf16 or not); at 60 (~0.002) it solves the unseen seeds of the trained level reliably
    model, history = agentevol(nano_dir, str(data), env="babyai", explore_items=explore, out_dir=str(out),
                               iterations=2, samples_per_item=3, max_rounds=3, temperature=1.0, max_tokens=48,
                               max_total_tokens=1024, engine=engine, epochs=60, batch_size=16, lr=6e-3,
                               eval_items=[1042], log=lambda *a: None)
    assert [h["iteration"] for h in history] == [0, 1]
    assert all(h["eval_success"] in (0.0, 1.0) for h in history)   # one greedy test episode per iteration
    train = [read(out / f"iter_{k}" / "train.jsonl") for k in (0, 1)]
    explored = [read(out / f"iter_{k}" / "explored.jsonl") for k in (0, 1)]
    kept = [read(out / f"iter_{k}" / "kept.jsonl") for k in (0, 1)]
    assert train[0] == original
    for k in (0, 1):
        assert [item_index(r["item_id"]) for r in explored[k]] == [i for i in explore for _ in range(3)]
        first_success = {}
        for r in explored[k]:
            if r["reward"] > 0:
                first_success.setdefault(r["item_id"], r)
        assert kept[k] == list(first_success.values())   # threshold 0 (strict), one per item, the first
        assert history[k]["kept"] == len(kept[k]) and history[k]["explored"] == 15
    successes = sum(r["reward"] > 0 for r in explored[0])
    assert 1 <= len(kept[0]) < successes, f"need real successes and a duplicate to drop, got {successes}"
    assert all(r["success"] for r in kept[0]) and all(r["conversations"][3]["loss"] is True for r in kept[0])
    assert train[1] == kept[0] + original                # merged with the original data, not the previous file
    assert history[1]["train_records"] == len(kept[0]) + len(original)
    assert history[0]["last_loss"] < 0.5 * history[0]["first_loss"]
    assert os.path.exists(out / "iter_1" / "kept.jsonl") and model is not None
