"""The environment interface shared by in-process envs and the HTTP client.

An episode is `reset(item_id)` -> first observation, then `step(reply)` until `done`. `step` takes the model's
whole reply and extracts the action itself, exactly as AgentGym's clients do, so a rollout loop never parses text.
"""
from __future__ import annotations

import abc
import numbers
from collections.abc import Hashable
import re
from dataclasses import dataclass, field
from pathlib import Path

ACKNOWLEDGEMENT = "OK. I'll follow your instructions and try my best to solve the task."
MULTIPLE_ACTIONS = "Error: Only one 'Action' is allowed per response. Please adjust your response."
# A model's reply is a few thousand characters (4,096 tokens, AgentGym's longest setting, is ~20k); far longer input
# is a client bug, refused before it reaches a parser, a retriever or a simulator's JVM.
MAX_ACTION_CHARS = 65_536


@dataclass
class Step:
    observation: str
    reward: float  # what AgentGym's client reports: the cumulative score of the episode so far
    done: bool
    info: dict = field(default_factory=dict)  # at least {"score", "step_reward" (this step's own reward), "action",
                                              # "valid"}


@dataclass(frozen=True)
class Levels:
    """What an env's items are graded by (`Env.level(item_id)`), so a run can keep some of them (RunConfig.levels)."""
    meaning: str            # e.g. "recipe depth of the goal"
    values: range


@dataclass(frozen=True)
class Episodes:
    """The shape of an env's episodes at a preset: the stepwise horizon ladder (its last stage is also the
    evaluation horizon), tokens per reply and per trajectory, and envs alive at once (SciWorld: one JVM each)."""
    rounds: tuple[int, ...]
    max_tokens: int
    max_total_tokens: int
    max_envs: int = 64

    @property
    def eval_rounds(self) -> int:
        return self.rounds[-1]


@dataclass(frozen=True)
class Track:
    """A named item set of an env and the episode shape the cpu preset trains and evaluates it at.

    `levels` None keeps every item. `budget` overrides the cpu preset's training budget (RunConfig fields) where a
    step of this env costs far more than the common one. `nano` overrides the cpu nano model's build recipe
    (models.NanoSpec fields): the nano of a track is cloned on its items, at its episode shape."""
    about: str
    levels: tuple[int, ...] | None
    cpu: Episodes
    budget: dict = field(default_factory=dict)
    nano: dict = field(default_factory=dict)


class EnvError(RuntimeError):
    """The environment itself failed (server died, timed out, returned an error). Never a bad action."""


class EnvStateError(RuntimeError):
    """The caller used an episode out of order: step() before reset(), after done, or after close()."""


class NoExpert(ValueError):
    """The env's expert does not cover this item (MiniWoB: a task without a solver; WebArena: a live site)."""


class ActionTooLong(ValueError):
    """An action longer than MAX_ACTION_CHARS. No model writes one, so it is an error, not an invalid action."""


def check_action_length(env_name: str, action: str) -> str:
    """`action`, or ActionTooLong naming the env and both lengths."""
    if len(action) > MAX_ACTION_CHARS:
        raise ActionTooLong(f"{env_name}: the action has {len(action):,} characters; at most {MAX_ACTION_CHARS:,} "
                            "are accepted (a model reply is a few thousand)")
    return action


class InvalidAction(Exception):
    """A reply whose action cannot even be extracted; `observation` is what the agent is told instead."""

    def __init__(self, observation: str):
        super().__init__(observation)
        self.observation = observation


def react_action(text: str) -> str:
    """AgentGym's ReAct extraction (BabyAI, TextCraft clients): the text after `Action:` up to the end of its line.

    More than one `Action:` -> InvalidAction; none -> "". Then every character outside [A-Za-z0-9, ] is deleted and
    whitespace is collapsed.
    """
    matches = re.findall(r"Action:\s*(.*?)(?=\n|$)", text, re.DOTALL)
    if len(matches) > 1:
        raise InvalidAction(MULTIPLE_ACTIONS)
    action = matches[-1] if matches else ""
    return " ".join(re.sub(r"[^A-Za-z0-9, ]+", "", action).split())


def check_item_id(item_id, what: str) -> int:
    """Item ids are non-negative integers (bools are rejected); `what` describes the valid range in the error."""
    if isinstance(item_id, bool) or not isinstance(item_id, numbers.Integral) or item_id < 0:
        raise ValueError(f"item_id must be an integer >= 0 ({what}), got {item_id!r}")
    return int(item_id)


class Env(abc.ABC):
    """One episode at a time. Subclasses set `name`, `task_instruction`, and implement reset/act/expert.

    The base keeps the episode phase ("new" -> "running" -> "over", any -> "closed") and the cumulative score, so
    every env refuses out-of-order calls with the same EnvStateError.
    """

    name: str
    title: str  # AgentGym's display name ("This is environment BabyAI.")
    task_instruction: str  # AgentGym's conversation_start[0], verbatim
    acknowledgement: str = ACKNOWLEDGEMENT  # ... and conversation_start[1]
    # Wire formats that differ from BabyAI's (see envs/wire.py): a function (app, pool, cls) adding the server's
    # endpoints, and the HTTPEnv subclass that speaks to such a server.
    http_routes = None
    http_client = None
    # Metadata that configs, models and evaluation read (an env declares its own: adding one touches no table):
    levels: Levels | None = None   # what items are graded by; None: no levels
    tracks: dict[str, Track]       # named item sets; the first is the cpu and smoke presets' default
    smoke: Episodes                # the smoke preset's episode shape (its tracks keep their levels)
    smoke_nano: dict = {}          # the smoke nano's build recipe overrides (models.NanoSpec fields)
    content_words: tuple[str, ...] = ()   # words the nano tokenizer keeps whole (goal words the policy copies)
    success_score: float | None = None   # an episode succeeded when its score reaches this; None: any score > 0
    items_dir: str = str(Path(__file__).resolve().parent.parent / "data" / "items")   # <name>_<split>.json lists
    phase: str = "new"
    score: float = 0.0  # cumulative over the episode
    reward: float = 0.0  # of the latest step

    @property
    def instruction(self) -> list[dict]:
        """The two opening turns every conversation starts with (instruction + acknowledgement)."""
        return [{"role": "user", "content": self.task_instruction}, {"role": "assistant", "content": self.acknowledgement}]

    @abc.abstractmethod
    def reset(self, item_id: int) -> str:
        """Start the episode of `item_id`; return its first observation."""

    @abc.abstractmethod
    def act(self, action: str) -> Step:
        """Apply an already extracted action (what AgentGym's clients post to /step)."""

    @abc.abstractmethod
    def observe(self) -> str:
        """The current observation as GET /observation reports it (for BabyAI: with the goal line)."""

    @abc.abstractmethod
    def expert(self, item_id: int) -> list[str]:
        """Replies ("Thought:\\n...\\n\\nAction:\\n...") that solve `item_id` when fed to step() after reset()."""

    def expert_episode(self, item_id: int, **expert_options) -> tuple[str, list[tuple[str, Step]]]:
        """The expert played on this env: reset(item_id)'s observation, then each reply with the Step it got, up to
        done. An expert may fall short (MiniWoB's stops when stuck): check success() of the last Step.
        `expert_options` go to expert() (BabyAI's `hesitation`). The browser envs override this to play their
        solver here, where expert() plays it in a private browser and the replies would then be played twice."""
        # Asked before reset: unless an episode is still running here (one cut by the horizon), SciWorld's expert
        # then runs on this env's JVM rather than a second one.
        replies = self.expert(item_id, **expert_options)
        observation, turns = self.reset(item_id), []
        for reply in replies:
            turns.append((reply, self.step(reply)))
            if turns[-1][1].done:
                break
        return observation, turns

    def step(self, text: str) -> Step:
        """Extract the action from the model's whole reply and apply it; an unextractable reply costs a turn only."""
        self.check_running()
        try:
            action = self.parse_action(text)
        except InvalidAction as bad:
            return Step(bad.observation, 0.0, False, {"score": self.score, "step_reward": 0.0, "action": "", "valid": False})
        return self.act(action)

    def parse_action(self, text: str) -> str:
        return react_action(text)

    def success(self, reward: float) -> bool:
        return reward > 0 if self.success_score is None else reward >= self.success_score

    def state_key(self, observation: str) -> Hashable:
        """What identifies the env's current state, given the observation the agent was just shown: turns that act
        in equal states are compared with each other (GiGPO's anchor states). Envs whose state is cheap to read
        override this; by default it is the observation text."""
        return observation

    @classmethod
    def level(cls, item_id: int) -> int:
        """The level of `item_id` (see `levels`)."""
        raise ValueError(f"env {cls.name!r} has no levels")

    def category(self, item_id: int) -> str:
        """The group `item_id` is reported under in per-category results (BabyAI level, TextCraft depth, ...)."""
        return self.name

    @staticmethod
    def is_valid_action(observation: str, action: str) -> bool:
        """Whether `action` is one the env accepts in the state `observation` shows (logged as info["valid"]).
        Envs that do not list their actions in the observation accept any text here and judge it when stepping."""
        return True

    def close(self) -> None:
        self.phase = "closed"

    def check_running(self) -> None:
        if self.phase == "running":
            return
        problem = {"new": "before reset()", "over": "after the episode is done; call reset() for a new one",
                   "closed": "after close()"}[self.phase]
        raise EnvStateError(f"{self.name}: step() called {problem}")

    def check_open(self) -> None:
        if self.phase == "closed":
            raise EnvStateError(f"{self.name}: reset() called after close()")
