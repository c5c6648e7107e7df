"""The HF engine keeps each episode's keys and values between its turns (`sessions`) and prefills only the tokens that
are new: the same tokens and log-probs as prefilling every prompt whole, with the fallbacks counted."""
import os

import numpy as np
import pytest
import torch

from agentgym_nb import envs, models
from agentgym_nb.config import item_pool, make_config
from agentgym_nb.rollout.engine import HFEngine, SamplingParams
from agentgym_nb.rollout.runner import RolloutStats, run_episodes
from agentgym_nb.rollout.trajectory import ChatFormat

LONG_NANO = os.path.join(os.path.dirname(os.path.dirname(__file__)), "models", "nano-babyai-long")


@pytest.fixture(scope="module", autouse=True)
def one_torch_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


class WholePrompts:
    """The engine without sessions: every prompt prefilled whole (what the engine did before it kept episodes)."""

    def __init__(self, engine):
        self.engine = engine

    def generate(self, prompts, params, seeds=None, *, sessions=None):
        return self.engine.generate(prompts, params, seeds)

    def release(self, sessions):
        pass


class SyncEveryCall(WholePrompts):
    """Loads the same weights again after every call, as a weight sync does: kept keys and values are stale."""

    def generate(self, prompts, params, seeds=None, *, sessions=None):
        out = self.engine.generate(prompts, params, seeds, sessions=sessions)
        self.engine.load_weights(self.engine.model.state_dict().items())
        return out


def play(engine, chat, items, rounds, stats=None):
    return run_episodes(engine, lambda: envs.make("babyai"), items, chat, n=2, max_rounds=rounds,
                        params=SamplingParams(max_tokens=48, seed=11), max_total_tokens=7168, stats=stats)


def test_long_track_episodes_at_h20_sample_what_whole_prefills_sample():
    """The committed long-track nano on two held-out long-track tasks, two episodes each, at H = 20: the same tokens
    turn by turn; log-probs agree to fp32's rounding (the whole-prompt engine itself differs by up to ~3e-5 from one
    forward pass over the finished episode, the trainer's view)."""
    from transformers import AutoModelForCausalLM
    tokenizer = models.load_tokenizer(LONG_NANO)
    chat = ChatFormat(tokenizer)
    model = AutoModelForCausalLM.from_pretrained(LONG_NANO).eval()
    items = item_pool(make_config(preset="cpu", env="babyai", track="long"), "test")[:2]
    engine = HFEngine(model=model, tokenizer=tokenizer)
    kept, whole = RolloutStats(), RolloutStats()
    got = play(engine, chat, items, 20, kept)
    want = play(WholePrompts(HFEngine(model=model, tokenizer=tokenizer)), chat, items, 20, whole)
    assert max(t.num_rounds for t in got) == 20 and min(len(t.input_ids) for t in got) > 1000   # long episodes
    assert [t.input_ids for t in got] == [t.input_ids for t in want]
    diffs = np.abs(np.concatenate([np.subtract(a.sampled_logprobs, b.sampled_logprobs) for a, b in zip(got, want)]))
    assert diffs.max() < 1e-4 and np.quantile(diffs, 0.99) < 1e-5, (diffs.max(), np.quantile(diffs, 0.99))
    # every later turn read its past from the cache: only the new tokens were prefilled
    later_turns = sum(t.num_rounds - 1 for t in got)
    assert kept.cache_fallbacks == 0 and kept.cached_tokens > 0.8 * kept.prompt_tokens
    assert whole.cached_tokens == 0 and whole.prompt_tokens == kept.prompt_tokens and later_turns > 30
    assert engine.kept == {}   # every ended episode released its cache


def test_a_weight_change_falls_back_to_whole_prefills_and_is_counted(hf_nano, chat):
    stats = RolloutStats()
    got = play(SyncEveryCall(hf_nano), chat, [0, 1], 4, stats)
    want = play(WholePrompts(hf_nano), chat, [0, 1], 4)
    assert [t.input_ids for t in got] == [t.input_ids for t in want]
    assert stats.cached_tokens == 0 and stats.cache_fallbacks == sum(t.num_rounds - 1 for t in got) > 0


def test_a_prompt_that_does_not_extend_the_kept_tokens_is_prefilled_whole(hf_nano, chat):
    params = SamplingParams(max_tokens=8, seed=3)
    prompt = chat.encode("a prompt of a few tokens to begin with")
    first = hf_nano.generate([prompt], params, sessions=["s"])[0]
    assert first.cached_tokens == 0 and hf_nano.kept["s"].token_ids == prompt + first.token_ids[:-1]
    extended = prompt + first.token_ids + chat.encode(" and more")
    reused = hf_nano.generate([extended], params, sessions=["s"])[0]
    assert reused.cached_tokens == len(prompt) + len(first.token_ids) - 1
    fresh = hf_nano.generate([extended], params)[0]
    assert reused.token_ids == fresh.token_ids
    assert reused.logprobs == pytest.approx(fresh.logprobs, abs=1e-5)
    edited = [prompt[0] + 1] + extended[1:]   # a re-encoded turn: its first token differs
    assert hf_nano.generate([edited], params, sessions=["s"])[0].cached_tokens == 0
    hf_nano.release(["s"])
    assert "s" not in hf_nano.kept


def test_an_optimizer_step_on_a_shared_model_makes_the_kept_tokens_stale(nano_dir, chat):
    """The trainer's policy is the engine's model: a step changes the weights in place, with no load_weights."""
    from transformers import AutoModelForCausalLM
    model = AutoModelForCausalLM.from_pretrained(nano_dir)
    engine = HFEngine(model=model)
    params = SamplingParams(max_tokens=8, seed=3)
    prompt = chat.encode("go to the red ball")
    first = engine.generate([prompt], params, sessions=[0])[0]
    with torch.no_grad():
        next(model.parameters()).add_(0.01)
    again = engine.generate([prompt + first.token_ids + [5]], params, sessions=[0])[0]
    assert again.cached_tokens == 0


def test_sessions_must_match_the_prompts(hf_nano):
    with pytest.raises(ValueError, match="2 sessions for 1 prompts"):
        hf_nano.generate([[5, 6, 7]], SamplingParams(max_tokens=2), sessions=[0, 1])
