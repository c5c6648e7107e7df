"""DPO: AgentGym's pair construction on hand-made records, the loss against numbers worked out by hand, the masks
of chosen/rejected continuations, and training on real pairs (expert episode vs the smoke model's own failed
rollout of the same item) where the chosen-minus-rejected margin grows from exactly 0."""
import math

import pytest
import torch

from agentgym_nb import envs, models
from agentgym_nb.rollout.engine import SamplingParams
from agentgym_nb.rollout.runner import run_episodes, write_rollout_log
from agentgym_nb.train.common import add_lora
from agentgym_nb.train.dpo import dpo, dpo_loss, make_dpo_pairs, pair_trajectories
from agentgym_nb.train.sft import load_records, trajectory_record

pytestmark = pytest.mark.timeout(120)
torch.set_num_threads(1)


def conv(tag: str, turns: int = 2):
    out = [{"from": "human", "loss": None, "value": "instruction"}, {"from": "gpt", "loss": False, "value": "OK"},
           {"from": "human", "loss": None, "value": f"goal {tag}"}]
    for k in range(turns):
        out += [{"from": "gpt", "loss": True, "value": f"{tag} action {k}"},
                {"from": "human", "loss": None, "value": f"{tag} observation {k}"}]
    return out


def rec(item, tag, reward=None):
    r = {"item_id": item, "conversations": conv(tag)}
    return r if reward is None else {**r, "reward": reward}


def test_pairs_follow_agentgym_construction():
    expert = [rec("babyai_1", "e1"), rec("babyai_2", "e2", 0.9), rec("babyai_2", "e2-worse", 0.8),
              rec("babyai_3", "e3", 0.75), rec("babyai_4", "e4", 0.5), rec("babyai_5", "e5", 1.0),
              rec("babyai_9", "only-expert", 1.0)]
    experience = [rec(1, "x1", 0.0), rec(1, "x1-better", 0.5),       # our rollout logs: integer ids
                  rec("babyai_2", "x2", 0.795),                        # gap 0.005 < 0.01 to the kept 0.8: dropped
                  rec("babyai_3", "x3", 0.9),                          # the experience wins
                  rec("babyai_4", "x4", 0.6),                          # winner 0.6 < 0.7: dropped
                  rec("babyai_5", "x5", 0.99)]                         # gap exactly 0.01: kept
    pairs = make_dpo_pairs(expert, experience)
    assert [p["id"] for p in pairs] == [1, 3, 5]
    one, three, five = pairs
    assert one["prompt"] == conv("e1")[:3]                            # expert without reward counts as 1.0
    assert one["chosen"] == conv("e1")[3:] and one["rejected"] == conv("x1")[3:]   # lowest-reward duplicate
    assert three["prompt"] == conv("x3")[:3] and three["chosen"] == conv("x3")[3:]
    assert three["rejected"] == conv("e3")[3:]
    assert five["chosen"] == conv("e5")[3:] and five["rejected"] == conv("x5")[3:]
    with pytest.raises(ValueError, match="experience record 0 .*missing field 'reward'"):
        make_dpo_pairs(expert, [rec(1, "x")])


def test_dpo_loss_by_hand():
    # pair 0: log-ratios chosen -1 - (-2) = 1, rejected -3 - (-2) = -1 -> beta * (1 - -1) = 0.5 * 2 = 1
    #         loss = -log sigmoid(1) = log(1 + e^-1) = 0.313262; rewards 0.5 and -0.5
    # pair 1: chosen -4 - (-3) = -1, rejected -2 - (-2) = 0 -> 0.5 * (-1 - 0) = -0.5
    #         loss = log(1 + e^0.5) = 0.974077; rewards -0.5 and 0
    losses, r_c, r_r = dpo_loss(torch.tensor([-1.0, -4.0]), torch.tensor([-3.0, -2.0]),
                                torch.tensor([-2.0, -3.0]), torch.tensor([-2.0, -2.0]), beta=0.5)
    assert losses.tolist() == pytest.approx([math.log(1 + math.exp(-1)), math.log(1 + math.exp(0.5))])
    assert losses.tolist() == pytest.approx([0.313262, 0.974077], abs=1e-6)
    assert r_c.tolist() == [0.5, -0.5] and r_r.tolist() == [-0.5, 0.0]
    # policy == reference: no preference yet, loss log 2 whatever beta
    equal = dpo_loss(torch.tensor([-7.0]), torch.tensor([-1.0]), torch.tensor([-7.0]), torch.tensor([-1.0]), 3.0)
    assert equal[0].item() == pytest.approx(math.log(2))


def test_chosen_and_rejected_masks_cover_only_their_assistant_turns(chat):
    pair = {"id": 4, "prompt": conv("p")[:3], "chosen": conv("c")[3:], "rejected": conv("r", turns=1)[3:]}
    chosen, rejected = pair_trajectories(chat, pair)
    trained = [chat.decode([i for i, m in zip(t.input_ids, t.loss_mask) if m]) for t in (chosen, rejected)]
    assert trained == ["c action 0<|im_end|>c action 1<|im_end|>", "r action 0<|im_end|>"]
    n = len(chat.encode(chat.head + "instruction" + chat.user_to_assistant))
    assert chosen.input_ids[:n] == rejected.input_ids[:n]   # one shared prompt
    with pytest.raises(ValueError, match="pair: rejected has no trained assistant turn"):
        pair_trajectories(chat, {**pair, "rejected": [{"from": "gpt", "loss": False, "value": "x"}]})


@pytest.mark.parametrize("lora", [False, True])
def test_dpo_training_grows_the_margin_on_real_pairs(chat, nano_dir, hf_nano, tmp_path, lora):
    from transformers import AutoModelForCausalLM
    items = [2, 162, 202, 242]
    expert = [trajectory_record(t, "babyai")
              for t in models.demo_trajectories(chat, models.expert_conversations("babyai", items))]
    rollouts = run_episodes(hf_nano, lambda: envs.make("babyai"), items, chat, n=1, max_rounds=2,
                            params=SamplingParams(temperature=1.0, max_tokens=32, seed=0), max_total_tokens=1024)
    assert all(t.reward == 0 for t in rollouts)   # the smoke model fails: the expert must win every pair
    log_path = str(tmp_path / "rollouts.jsonl")
    write_rollout_log(log_path, rollouts)
    pairs = make_dpo_pairs(expert, load_records(log_path))
    assert [p["id"] for p in pairs] == items

    model = AutoModelForCausalLM.from_pretrained(nano_dir, dtype=torch.float32)
    base = {k: v.clone() for k, v in model.state_dict().items()}
    if lora:   # the reference is then the base weights, which LoRA leaves untouched
        model = add_lora(model, r=4, alpha=8)
    history = dpo(model, pairs, chat, beta=0.5, epochs=6, batch_pairs=4, lr=2e-3 if lora else 2e-4,
                  log=lambda *a: None)
    first, last = history[0], history[-1]
    assert first["loss"] == pytest.approx(math.log(2), abs=1e-5) and first["margin"] == pytest.approx(0, abs=1e-5)
    assert all(b["margin"] > a["margin"] for a, b in zip(history, history[1:]))   # grows step by step
    assert last["margin"] > 1.0 and last["accuracy"] == 1.0 and last["loss"] < 0.4
    if lora:
        weights = {k.replace(".base_layer.", "."): v for k, v in model.get_base_model().state_dict().items()
                   if "lora_" not in k}
        assert weights.keys() == base.keys() and all(torch.equal(weights[k], v) for k, v in base.items())
