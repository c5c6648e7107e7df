"""Adding an env is its module, its item files and its tests: a small env registered here gets presets, tracks,
levels, item pools, a server over AgentGym's protocol and rollouts, with no table elsewhere to edit."""
import json
import re

import pytest

from agentgym_nb import envs
from agentgym_nb.config import item_pool, make_config
from agentgym_nb.envs import registry as env_registry
from agentgym_nb.envs.base import Env, Episodes, Levels, Step, Track
from harness import loopback_server


class Countdown(Env):
    """Say the numbers from n down to 1, one per turn; item i asks for n = i % 5 + 1 (its level)."""

    name, title = "countdown", "Countdown"
    task_instruction = "Count down to 1, one number per reply, as 'Action:\\n<number>'."
    levels = Levels("the number to count down from, minus 1", range(5))
    tracks = {"short": Track("start at 1-3", (0, 1, 2), Episodes(rounds=(2, 3), max_tokens=8, max_total_tokens=512)),
              "all": Track("start at 1-5", None, Episodes(rounds=(3, 5), max_tokens=8, max_total_tokens=768))}
    smoke = Episodes(rounds=(1, 2), max_tokens=8, max_total_tokens=256)
    success_score = 1.0

    @classmethod
    def level(cls, item_id: int) -> int:
        return item_id % 5

    def reset(self, item_id: int) -> str:
        self.phase, self.score, self.next = "running", 0.0, self.level(item_id) + 1
        return self.observe()

    def observe(self) -> str:
        return f"Say {self.next}."

    def act(self, action: str) -> Step:
        if action != str(self.next):
            return Step(f"Wrong: say {self.next}.", 0.0, False, {"score": 0.0, "action": action, "valid": False})
        self.next -= 1
        done = self.next == 0
        self.score = 1.0 if done else 0.0
        self.phase = "over" if done else "running"
        return Step("Done." if done else self.observe(), self.score, done,
                    {"score": self.score, "action": action, "valid": True})

    def expert(self, item_id: int) -> list[str]:
        return [f"Thought:\nCount.\n\nAction:\n{n}" for n in range(self.level(item_id) + 1, 0, -1)]


@pytest.fixture
def countdown(tmp_path, monkeypatch):
    for split, ids in (("train", range(0, 40)), ("test", range(1000, 1010))):
        (tmp_path / f"countdown_{split}.json").write_text(json.dumps([{"item_id": f"countdown_{i}"} for i in ids]))
    monkeypatch.setattr(Countdown, "items_dir", str(tmp_path))
    registry = dict(env_registry._REGISTRY)
    envs.register("countdown", Countdown)
    yield Countdown
    env_registry._REGISTRY.clear()
    env_registry._REGISTRY.update(registry)
    env_registry.ENV_NAMES = tuple(registry)


def test_a_registered_env_gets_presets_tracks_and_levels(countdown):
    cpu = make_config(preset="cpu", env="countdown")
    assert (cpu.track, cpu.levels, cpu.rounds, cpu.eval_rounds, cpu.max_total_tokens) == ("short", [0, 1, 2], [2, 3], 3, 512)
    assert item_pool(cpu, "train") == [i for i in range(40) if i % 5 < 3]
    assert item_pool(cpu, "test") == [1000, 1001, 1002, 1005, 1006, 1007]
    every = make_config(preset="cpu", env="countdown", track="all")
    assert every.levels is None and every.rounds == [3, 5] and len(item_pool(every, "train")) == 40
    smoke = make_config(preset="smoke", env="countdown")
    assert (smoke.rounds, smoke.max_total_tokens, smoke.levels) == ([1, 2], 256, [0, 1, 2])
    with pytest.raises(ValueError, match=re.escape("levels of countdown are the the number to count down from")):
        make_config(preset="cpu", env="countdown", levels=[7])
    with pytest.raises(ValueError, match="unknown track of countdown 'al'. Did you mean 'all'"):
        make_config(preset="cpu", env="countdown", track="al")
    with pytest.raises(ValueError, match="paper preset reproduces the paper's training scripts"):
        make_config(preset="paper", env="countdown")


def test_a_registered_env_is_served_and_played_over_http(countdown):
    """AgentGym's protocol server and our client, on loopback, with the env's own success score."""
    from agentgym_nb.envs.http import make_app
    with loopback_server(make_app("countdown")) as url:
        env = envs.connect("countdown", url)
        try:
            assert env.reset(1002) == "Say 3."
            steps = [env.step(reply) for reply in Countdown().expert(1002)]
            assert [s.done for s in steps] == [False, False, True] and env.success(steps[-1].reward)
            assert not env.success(0.5)
        finally:
            env.close()


def test_a_registered_env_rolls_out(countdown, hf_nano, chat):
    """The runner needs nothing but the env: the (BabyAI) smoke nano acts in it, every episode ends or is cut."""
    from agentgym_nb.rollout.engine import SamplingParams
    from agentgym_nb.rollout.runner import run_episodes
    trajs = run_episodes(hf_nano, lambda: envs.make("countdown"), [0, 1], chat, n=2, max_rounds=2,
                         params=SamplingParams(temperature=1.0, max_tokens=8, seed=0), max_total_tokens=1024)
    assert len(trajs) == 4 and all(t.failed is None and 1 <= t.num_rounds <= 2 for t in trajs)
