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

    def generate(self, prompts, params, seeds=None, *, sessions=None):
        out = self.engine.generate(prompts, params, seeds, sessions=sessions)
        self.calls += [(list(p), c) for p, c in zip(prompts, out)]
        return out

    def release(self, sessions):
        self.engine.release(sessions)


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


def test_a_reply_closed_by_another_stop_token_gets_the_templates_end_of_turn(tokenizer):
    """A model whose EOS is not the template's end-of-turn token may end a reply with EOS: the turn is over (not cut),
    and the template's end-of-turn token follows as untrained scaffolding, so the sequence stays the chat template's."""
    import copy
    from agentgym_nb.rollout.trajectory import ChatFormat
    other = copy.deepcopy(tokenizer)
    other.add_special_tokens({"eos_token": "<|endoftext|>", "additional_special_tokens": ["<|im_end|>", "<|im_start|>"]})
    chat = ChatFormat(other)
    assert other.eos_token_id != chat.end_of_turn_id and other.eos_token_id in chat.stop_token_ids
    t = Trajectory.start(chat, [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "ok"}], "obs", 0)
    reply = chat.encode("Action: go forward") + [other.eos_token_id]
    t.add_reply(chat, reply)
    assert t.replies_cut_by_max_tokens == 0
    assert t.input_ids[-2:] == [other.eos_token_id, chat.end_of_turn_id]
    assert t.kinds[-2:] == [POLICY, TEMPLATE]


class _ExactBudgetEngine:
    """Replies that end with the end-of-turn token and are `extra` tokens longer than the room left under the
    budget (0: exactly as long)."""

    def __init__(self, inner, chat, budget: int, extra: int = 0):
        self.inner, self.chat, self.budget, self.extra = inner, chat, budget, extra

    def generate(self, prompts, params, seeds=None, *, sessions=None):
        out = self.inner.generate(prompts, params, seeds)
        for prompt, c in zip(prompts, out):
            length = self.budget - len(prompt) + self.extra
            words = self.chat.encode("Action: turn left")
            c.token_ids = (words * length)[:length - 1] + [self.chat.end_of_turn_id]
            c.logprobs = [0.0] * length
        return out

    def release(self, sessions):
        self.inner.release(sessions)


def test_a_reply_that_closes_itself_exactly_at_the_budget_is_played(chat, hf_nano):
    """The room kept for a closing token is not needed by a reply that sampled it: such a reply fills the budget
    exactly, is not marked truncated, and its action reaches the env."""
    env = envs.make("babyai")
    prompt_len = len(Trajectory.start(chat, env.instruction, env.reset(7), 7).input_ids)
    env.close()
    budget = prompt_len + 12
    trajs = run_episodes(_ExactBudgetEngine(hf_nano, chat, budget), lambda: envs.make("babyai"), [7], chat, n=1,
                         max_rounds=3, params=SamplingParams(max_tokens=24, seed=1), max_total_tokens=budget)
    t = trajs[0]
    assert len(t.input_ids) == budget and t.input_ids[-1] == chat.end_of_turn_id
    # the reply was played: the env's answer is in the conversation, and it, not the reply, is what did not fit
    assert t.num_rounds == 1 and [m["role"] for m in t.messages[-2:]] == ["assistant", "user"] and t.truncated


def test_a_closed_reply_too_long_for_the_budget_is_cut_within_it(chat, hf_nano):
    """Cut, it no longer ends with its own end-of-turn token, so the one the template adds must still fit."""
    env = envs.make("babyai")
    prompt_len = len(Trajectory.start(chat, env.instruction, env.reset(7), 7).input_ids)
    env.close()
    budget = prompt_len + 12
    trajs = run_episodes(_ExactBudgetEngine(hf_nano, chat, budget, extra=3), lambda: envs.make("babyai"), [7], chat, n=1,
                         max_rounds=3, params=SamplingParams(max_tokens=24, seed=1), max_total_tokens=budget)
    t = trajs[0]
    assert t.truncated and t.num_rounds == 1
    assert len(t.input_ids) == budget and t.input_ids[-1] == chat.end_of_turn_id and t.kinds[-1] == TEMPLATE


class _SlowStartBabyAI(envs.env_class("babyai")):
    """BabyAI whose resets take different times, so episodes of one group finish out of their order."""
    delays = iter([0.4, 0.0, 0.3, 0.1, 0.2, 0.05] * 10)

    def reset(self, item_id):
        import time
        time.sleep(next(self.delays))
        return super().reset(item_id)


def test_episodes_come_back_in_the_order_played_not_finished(hf_nano, chat):
    trajs = run_episodes(hf_nano, _SlowStartBabyAI, [7, 8], chat, n=3, max_rounds=1,
                         params=SamplingParams(max_tokens=16, seed=3), max_total_tokens=2048)
    assert [t.episode for t in trajs] == list(range(6))
    assert [t.group for t in trajs] == [0, 0, 0, 1, 1, 1]


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


def test_trajectory_groups_know_their_id_item_prompt_and_episodes(chat):
    """TrajectoryGroup.of gathers episodes by group id in order of first appearance; a group is one item."""
    from agentgym_nb.rollout.trajectory import TrajectoryGroup
    env = envs.make("babyai")
    first = env.reset(3)
    episodes = []
    for group, item, reward in [(4, 3, 1.0), (7, 9, 0.0), (4, 3, 0.0), (7, 9, 0.0)]:
        t = Trajectory.start(chat, env.instruction, first if item == 3 else "another view", item, group)
        t.add_reply(chat, chat.encode("turn left") + [chat.end_of_turn_id])
        t.reward = reward
        episodes.append(t)
    env.close()
    groups = TrajectoryGroup.of(episodes)
    assert [(g.id, g.item_id, len(g.episodes)) for g in groups] == [(4, 3, 2), (7, 9, 2)]
    assert groups[0].episodes == [episodes[0], episodes[2]]
    assert groups[0].informative and not groups[1].informative and groups[0].scores == [1.0, 0.0]
    prompt = Trajectory.start(chat, envs.make("babyai").instruction, first, 3).input_ids
    assert groups[0].prompt_ids == prompt   # what the engine got before the first reply
    episodes[3].item_id = 10
    with pytest.raises(ValueError, match="group 7 holds episodes of items 9 and 10"):
        TrajectoryGroup.of(episodes)
