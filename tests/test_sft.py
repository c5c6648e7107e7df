"""SFT on trajectories: AgentGym's ShareGPT records and our rollout logs become token ids through the chat template
with the loss mask exactly on the trained assistant turns; the loss is a token mean over the whole step whatever the
micro-batch split; training lowers it on expert trajectories, fully or through LoRA, and LoRA's merged weights
loaded into vLLM sample exactly what the merged transformers model samples."""
import copy
import json

import pytest
import torch

from agentgym_nb import envs, models
from agentgym_nb.algos.losses import sft_loss
from agentgym_nb.rollout.engine import HFEngine, SamplingParams
from agentgym_nb.rollout.runner import run_episodes, write_rollout_log
from agentgym_nb.rollout.trajectory import POLICY, PROMPT, Trajectory, collate
from agentgym_nb.train.common import add_lora, merged_state_dict
from agentgym_nb.train.sft import _sft_step, check_record, load_records, sft, to_trajectory, trajectory_record
from harness import needs

pytestmark = pytest.mark.timeout(120)
torch.set_num_threads(1)
ONE_STEP_ITEMS = [2, 162, 202, 242, 282, 362]   # GoToRedBallNoDists seeds the expert solves in one reply


def expert_records(chat, items):
    """Expert episodes as AgentGym ShareGPT records (what AgentTraj-L holds)."""
    convs = models.expert_conversations("babyai", items)
    return [trajectory_record(t, "babyai") for t in models.demo_trajectories(chat, convs)]


def trained_text(chat, traj) -> str:
    return chat.decode([i for i, m in zip(traj.input_ids, traj.loss_mask) if m])


def test_sharegpt_record_follows_the_chat_template_and_masks_exactly_the_trained_turns(chat, tokenizer):
    record = {"item_id": "babyai_7", "conversations": [
        {"from": "human", "loss": None, "value": "You are an agent. Act."},
        {"from": "gpt", "loss": False, "value": "OK."},
        {"from": "human", "loss": None, "value": "Your goal: go to the red ball"},
        {"from": "gpt", "loss": True, "value": "Thought:\nfirst\n\nAction:\nturn left"},
        {"from": "human", "loss": None, "value": "You turned left."},
        {"from": "gpt", "loss": False, "value": "Thought:\nnot taught\n\nAction:\nturn right"},
        {"from": "human", "loss": None, "value": "You turned right."},
        {"from": "gpt", "loss": None, "value": "Thought:\nnull counts\n\nAction:\ngo to red ball 1"},
        {"from": "human", "loss": None, "value": "The task is completed."}]}
    traj = to_trajectory(chat, check_record(record))
    assert traj.item_id == 7
    messages = [{"role": "user" if t["from"] == "human" else "assistant", "content": t["value"]}
                for t in record["conversations"][:-1]]   # the trailing observation teaches nothing and is dropped
    assert chat.decode(traj.input_ids) + "\n" == tokenizer.apply_chat_template(messages, tokenize=False)
    assert trained_text(chat, traj) == ("Thought:\nfirst\n\nAction:\nturn left<|im_end|>"
                                        "Thought:\nnull counts\n\nAction:\ngo to red ball 1<|im_end|>")
    untrained = chat.decode([i for i, k in zip(traj.input_ids, traj.kinds) if k == PROMPT])
    assert untrained == "You are an agent. Act.OK.Thought:\nnot taught\n\nAction:\nturn right<|im_end|>"
    assert traj.kinds.count(POLICY) == traj.num_policy_tokens == sum(traj.loss_mask)


def test_rollout_logs_load_with_every_assistant_reply_trained(chat, hf_nano, tmp_path):
    trajs = run_episodes(hf_nano, lambda: envs.make("babyai"), [0, 41], chat, n=1, max_rounds=2,
                         params=SamplingParams(temperature=1.0, max_tokens=24, seed=3), max_total_tokens=1024)
    path = str(tmp_path / "step_00001.jsonl")
    write_rollout_log(path, trajs, step=1)
    records = load_records(path)
    assert [r["item_id"] for r in records] == [0, 41] and records[0]["step"] == 1
    for traj, record in zip(trajs, records):
        conv = record["conversations"]
        assert [t["loss"] for t in conv[:4]] == [None, False, None, True]
        rebuilt = to_trajectory(chat, record)
        replies = [m["content"] for m in traj.messages[3:] if m["role"] == "assistant"]
        assert len(replies) == 2 and rebuilt.num_rounds == 2
        assert trained_text(chat, rebuilt) == "".join(r + "<|im_end|>" for r in replies)
        assert rebuilt.reward == traj.reward
    # the same records as a .json list (AgentGym's layout) load identically
    as_json = tmp_path / "records.json"
    as_json.write_text(json.dumps([json.loads(line) for line in open(path)]))
    assert load_records(str(as_json)) == records


GOOD = {"item_id": "babyai_1", "conversations": [{"from": "human", "loss": None, "value": "instruction"},
                                                  {"from": "gpt", "loss": False, "value": "OK"},
                                                  {"from": "human", "loss": None, "value": "observation"},
                                                  {"from": "gpt", "loss": True, "value": "Action: turn left"}]}


def _with_turn(j, **change):
    bad = copy.deepcopy(GOOD)
    bad["conversations"][j].update(change)
    return bad


@pytest.mark.parametrize("bad, names", [
    ({"conversations": GOOD["conversations"]}, "missing field 'item_id'"),
    ({"item_id": 3}, "missing field 'conversations'"),
    ({**GOOD, "conversations": GOOD["conversations"][:2]}, "at least 3 turns"),
    ({**GOOD, "item_id": 1.5}, "item_id must be"),
    ({**GOOD, "reward": "high"}, "reward must be a number"),
    (_with_turn(3, **{"from": "system"}), "conversations[3].from is 'system'; valid: 'human', 'gpt'"),
    (_with_turn(3, loss="yes"), "conversations[3].loss is 'yes'"),
    (_with_turn(2, value=None), "conversations[2].value must be a string"),
    (_with_turn(2, **{"from": "gpt"}), "conversations[2] is a 'gpt' turn where a 'human' turn belongs"),
    ({**GOOD, "conversations": [*GOOD["conversations"][:3], {"role": "tool", "content": "x"}]},
     "conversations[3].role is 'tool'; valid: 'user', 'assistant'"),
    ({**GOOD, "conversations": [*GOOD["conversations"][:3], {"text": "x"}]}, "has neither 'from'"),
])
def test_malformed_records_name_the_record_and_the_field(tmp_path, bad, names):
    path = tmp_path / "data.jsonl"
    path.write_text(json.dumps(GOOD) + "\n" + json.dumps(bad) + "\n")
    with pytest.raises(ValueError) as err:
        load_records(str(path))
    assert "data.jsonl record 1" in str(err.value) and names in str(err.value)


def test_sft_loss_is_a_token_mean_over_the_whole_step():
    logp = torch.tensor([[0.0, -1.0, -2.0], [0.0, -0.5, -9.0]])
    mask = torch.tensor([[0, 1, 1], [0, 1, 0]])
    assert sft_loss(logp, mask, 3).item() == pytest.approx((1 + 2 + 0.5) / 3)
    assert sft_loss(logp, mask, 6).item() == pytest.approx(3.5 / 6)   # a micro-batch of a 6-token step


def test_cloning_learning_rate_warms_up_or_decays_to_zero():
    assert [models.cloning_lr_factor(s, 600, False) for s in (0, 9, 19, 599)] == [0.05, 0.5, 1.0, 1.0]
    assert [models.cloning_lr_factor(s, 600, True) for s in (0, 150, 300, 599)] == [1.0, 0.75, 0.5,
                                                                                     pytest.approx(1 / 600)]


def test_micro_batch_split_does_not_change_the_update(chat, nano_dir):
    from transformers import AutoModelForCausalLM
    batch = collate([to_trajectory(chat, r) for r in expert_records(chat, [2, 42, 82])], chat.tokenizer.pad_token_id)
    after = []
    for micro_batch_tokens in (10**6, 1):   # one micro-batch, or one row per micro-batch
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_pretrained(nano_dir, dtype=torch.float32)
        params = list(model.parameters())
        opt = torch.optim.SGD(params, lr=1.0)
        loss, _ = _sft_step(model, params, opt, batch, micro_batch_tokens, grad_clip=1e9, bf16=False)
        after.append((loss, torch.cat([p.detach().flatten() for p in params])))
    assert after[0][0] == pytest.approx(after[1][0], rel=1e-5)
    assert torch.allclose(after[0][1], after[1][1], atol=1e-5)


def test_full_sft_lowers_the_loss_on_expert_trajectories(chat, nano_dir, tmp_path):
    from transformers import AutoModelForCausalLM
    path = tmp_path / "babyai_train.json"   # an AgentTraj-L style file
    path.write_text(json.dumps(expert_records(chat, ONE_STEP_ITEMS)))
    trajs = [to_trajectory(chat, r) for r in load_records(str(path))]
    model = AutoModelForCausalLM.from_pretrained(nano_dir, dtype=torch.float32)
    history = sft(model, trajs, chat, epochs=12, batch_size=8, lr=3e-3, log=lambda *a: None)
    assert len(history) == 12 and all(h["tokens"] == sum(t.num_policy_tokens for t in trajs) for h in history)
    assert history[-1]["loss"] < 0.6 * history[0]["loss"]


@needs("vllm")
def test_lora_sft_trains_only_the_adapters_and_its_merged_weights_drive_vllm(chat, nano_dir, vllm_nano):
    from transformers import AutoModelForCausalLM
    base = AutoModelForCausalLM.from_pretrained(nano_dir, dtype=torch.float32)
    base_weights = {k: v.clone() for k, v in base.state_dict().items()}
    model = add_lora(base, r=4, alpha=8)
    assert {k: torch.equal(v, base_weights[k]) for k, v in merged_state_dict(model).items()} == \
        dict.fromkeys(base_weights, True)   # B = 0: a fresh adapter changes nothing, names are the plain HF ones
    trajs = [to_trajectory(chat, r) for r in expert_records(chat, ONE_STEP_ITEMS)]
    history = sft(model, trajs, chat, epochs=10, batch_size=8, lr=1e-2, log=lambda *a: None)
    assert history[-1]["loss"] < history[0]["loss"] - 0.05   # rank 4 on a 64-wide model learns slowly, but does
    assert all(torch.equal(p, base_weights[k.replace(".base_layer.", ".").removeprefix("base_model.model.")])
               for k, p in model.named_parameters() if "lora_" not in k), "LoRA training touched a base weight"

    merged = merged_state_dict(model)
    reference = copy.deepcopy(model).merge_and_unload().state_dict()   # peft's own merge
    assert merged.keys() == reference.keys() == base_weights.keys()
    assert all(torch.allclose(merged[k], reference[k], atol=1e-6) for k in merged)
    assert not torch.equal(merged["model.layers.0.self_attn.q_proj.weight"],
                           base_weights["model.layers.0.self_attn.q_proj.weight"])

    hf = AutoModelForCausalLM.from_pretrained(nano_dir, dtype=torch.float32)
    hf.load_state_dict(merged)
    env = envs.make("babyai")
    prompts = [Trajectory.start(chat, env.instruction, env.reset(i), i).input_ids for i in (482, 722, 3)]
    greedy = SamplingParams(temperature=0, max_tokens=24, stop_token_ids=chat.stop_token_ids)
    before = vllm_nano.generate(prompts, greedy)
    try:
        vllm_nano.load_weights(merged.items())
        synced = vllm_nano.generate(prompts, greedy)
        expected = HFEngine(model=hf, tokenizer=chat.tokenizer).generate(prompts, greedy)
        for v, h in zip(synced, expected):
            assert v.token_ids == h.token_ids
            assert max(abs(a - b) for a, b in zip(v.logprobs, h.logprobs)) < 1e-3
        assert any(b.logprobs != s.logprobs for b, s in zip(before, synced)), "vLLM still has the base weights"
    finally:   # the engine is shared by the whole session: give it back its base weights
        vllm_nano.load_weights(base_weights.items())
