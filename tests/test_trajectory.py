"""The RolloutHandler contract (DESIGN): loss_mask = 1 exactly on sampled ids; every prompt the engine saw is a
prefix of the final input_ids; the score sits on the last trainable token. Checked on real rollouts of the nano
model through both engines, plus the exact-log-prob property that makes the PPO ratio honest."""
import pytest
import torch

from agentgym_nb import envs
from agentgym_nb.algos.losses import token_logprobs
from agentgym_nb.rollout.engine import SamplingParams
from agentgym_nb.rollout.runner import run_episodes
from agentgym_nb.rollout.trajectory import ENV, POLICY, PROMPT, TEMPLATE, Trajectory, collate


class Recording:
    """Passes every call to a real engine and keeps what it was given and what it sampled."""

    def __init__(self, engine):
        self.engine, self.calls = engine, []

    def generate(self, prompts, params, seeds=None):
        out = self.engine.generate(prompts, params, seeds)
        self.calls += [(list(p), c) for p, c in zip(prompts, out)]
        return out


def test_pieces_reproduce_the_chat_template(chat, tokenizer):
    env = envs.make("babyai")
    obs = env.reset(3)
    t = Trajectory.start(chat, env.instruction, obs, item_id=3)
    reply = "Thought:\nI go.\n\nAction:\nturn left"
    t.add_reply(chat, chat.encode(reply) + [chat.end_of_turn_id])
    t.add_observation(chat, "next observation")
    messages = [*env.instruction, {"role": "user", "content": obs}, {"role": "assistant", "content": reply},
                {"role": "user", "content": "next observation"}]
    assert chat.decode(t.input_ids) == tokenizer.apply_chat_template(messages, add_generation_prompt=True,
                                                                      tokenize=False)
    kinds = set(t.kinds)
    assert kinds == {TEMPLATE, PROMPT, ENV, POLICY}
    assert chat.decode([i for i, k in zip(t.input_ids, t.kinds) if k == POLICY]) == reply + "<|im_end|>"


def test_a_reply_cut_by_max_tokens_is_closed_but_not_trained(chat):
    t = Trajectory.start(chat, [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "ok"}], "obs", 0)
    cut = chat.encode("Thought:\nI")
    t.add_reply(chat, cut)
    assert t.replies_cut_by_max_tokens == 1
    assert t.input_ids[-1] == chat.end_of_turn_id and t.kinds[-1] == TEMPLATE   # closed, loss 0
    assert [i for i, k in zip(t.input_ids, t.kinds) if k == POLICY] == cut


@pytest.mark.parametrize("engine_name", ["hf_nano", pytest.param("vllm_nano", marks=pytest.mark.slow)])
def test_real_rollouts_keep_the_contract(engine_name, request, chat, nano_dir):
    from transformers import AutoModelForCausalLM
    engine = Recording(request.getfixturevalue(engine_name))
    trajs = run_episodes(engine, lambda: envs.make("babyai"), [0, 41, 82, 5], chat, n=2, max_rounds=3,
                         params=SamplingParams(temperature=1.0, max_tokens=24, seed=3), max_total_tokens=1500)
    assert len(trajs) == 8 and all(t.failed is None for t in trajs)
    assert [t.group for t in trajs] == [0, 0, 1, 1, 2, 2, 3, 3]
    model = AutoModelForCausalLM.from_pretrained(nano_dir)
    for t in trajs:
        # the engine calls that produced this episode: prompt = a prefix, completion = what follows it
        # (episodes of one group may share a prompt and a sample, so key by prompt length)
        mine = {len(p): c.token_ids for p, c in engine.calls if len(p) < len(t.input_ids)
                and t.input_ids[:len(p)] == p and t.input_ids[len(p):len(p) + len(c.token_ids)] == c.token_ids}
        assert len(mine) == t.num_rounds >= 1               # every turn's prompt is a prefix of the final sequence
        sampled = [i for n in sorted(mine) for i in mine[n]]
        x = t.to_tensors()
        trained = x["input_ids"][x["loss_mask"] == 1].tolist()
        if not t.truncated:
            assert trained == sampled                       # trained ids == the ids the engine sampled, in order
        assert x["rewards"].nonzero().numel() <= 1
        last = x["loss_mask"].nonzero()[-1, 0]
        assert x["rewards"][last] == t.reward and x["rewards"].sum() == t.reward
        assert (x["kinds"][x["loss_mask"] == 0] != POLICY).all()
        # the trainer's log-probs of the trained tokens equal the engine's sampling log-probs (T = 1, no filtering)
        with torch.no_grad():
            lp = token_logprobs(model, x["input_ids"][None], x["attention_mask"][None])[0]
        engine_lp = torch.tensor(t.sampled_logprobs)
        assert torch.allclose(lp[x["loss_mask"] == 1], engine_lp, atol=2e-3), (lp[x["loss_mask"] == 1] - engine_lp).abs().max()


def test_collate_pads_right_with_nothing_trainable(chat, hf_nano):
    trajs = run_episodes(hf_nano, lambda: envs.make("babyai"), [1, 2, 3], chat, n=1, max_rounds=2,
                         params=SamplingParams(max_tokens=16, seed=0), max_total_tokens=1500)
    batch = collate(trajs, pad_id=chat.tokenizer.pad_token_id)
    lengths = [len(t.input_ids) for t in trajs]
    assert batch["input_ids"].shape == (3, max(lengths))
    for b, n in enumerate(lengths):
        assert batch["attention_mask"][b].sum() == n
        assert (batch["loss_mask"][b, n:] == 0).all() and (batch["turn_ids"][b, n:] == -1).all()
        assert batch["loss_mask"][b].sum() == trajs[b].num_policy_tokens


def test_token_budget_truncates_and_is_recorded(chat, hf_nano):
    env = envs.make("babyai")
    prompt_len = len(Trajectory.start(chat, env.instruction, env.reset(7), 7).input_ids)
    budget = prompt_len + 30
    trajs = run_episodes(hf_nano, lambda: envs.make("babyai"), [7], chat, n=2, max_rounds=10,
                         params=SamplingParams(max_tokens=24, seed=1), max_total_tokens=budget)
    for t in trajs:
        assert len(t.input_ids) <= budget
        assert t.truncated or t.done
