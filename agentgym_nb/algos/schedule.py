"""Round schedulers: the interaction horizon (max env rounds per episode) as a pure function of the training step.

Steps are 1-based (the first training step is 1). ``rounds_at(step, history)`` depends only on its arguments, never on
hidden counters, so a resumed run gets exactly the horizons of an uninterrupted one (AgentGym-RL's
``StepRoundsScheduler`` kept a counter that was off by one after ``_load_checkpoint``). Fixed and stepwise schedules
ignore ``history``; the adaptive one replays it.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping, Sequence

SCHEDULE_TYPES = ("fixed", "stepwise", "scaling_inter_stepwise", "adaptive")


@dataclass(frozen=True)
class FixedSchedule:
    """Always ``rounds``."""
    rounds: int

    def __post_init__(self):
        _check_rounds([self.rounds])

    @property
    def max_rounds(self) -> int:
        return self.rounds

    def rounds_at(self, step: int, history: Sequence[Mapping] | None = None) -> int:
        _check_step(step)
        return self.rounds


@dataclass(frozen=True)
class StepwiseSchedule:
    """ScalingInter-RL: training step k uses rounds[min((k - 1) // every, len(rounds) - 1)].

    With rounds = (6, 13, 20) and every = 100: steps 1-100 -> 6, 101-200 -> 13, 201 onwards -> 20.
    """
    rounds: tuple[int, ...]
    every: int

    def __post_init__(self):
        _check_rounds(self.rounds, ladder=True)
        if not _is_int(self.every) or self.every < 1:
            raise ValueError(f"every (steps per stage) must be an int >= 1, got {self.every!r}")

    @property
    def max_rounds(self) -> int:
        return self.rounds[-1]

    def rounds_at(self, step: int, history: Sequence[Mapping] | None = None) -> int:
        _check_step(step)
        return self.rounds[min((step - 1) // self.every, len(self.rounds) - 1)]


@dataclass(frozen=True)
class AdaptiveSchedule:
    """Grow to the next horizon once the agent is ready at the current one; never shrink.

    Replays ``history`` (one dict per finished step, as in metrics.jsonl; ``history[j]`` is step j + 1): the horizon
    starts at rounds[0]; after each finished step at the current horizon, it moves to the next one when at least
    ``max(min_steps, patience)`` steps were spent at the current horizon and the mean of ``history[...][metric]`` over
    the last ``patience`` of them is >= ``threshold``. Use a success rate (the agent masters the short horizon) or the
    share of episodes truncated by the horizon (the horizon, not the agent, is the bottleneck) as ``metric``.
    """
    rounds: tuple[int, ...]
    metric: str = "success"
    threshold: float = 0.5
    patience: int = 5
    min_steps: int = 10

    def __post_init__(self):
        _check_rounds(self.rounds, ladder=True)
        if not isinstance(self.metric, str) or not self.metric:
            raise ValueError(f"metric must name a per-step metric of metrics.jsonl, e.g. 'success' or "
                             f"'cut_by_horizon', got {self.metric!r}")
        if isinstance(self.threshold, bool) or not isinstance(self.threshold, (int, float)) \
                or not math.isfinite(self.threshold):
            raise ValueError(f"threshold must be a finite number (the level the metric must reach), "
                             f"got {self.threshold!r}")
        if not _is_int(self.patience) or self.patience < 1:
            raise ValueError(f"patience must be an int >= 1, got {self.patience!r}")
        if not _is_int(self.min_steps) or self.min_steps < 0:
            raise ValueError(f"min_steps must be an int >= 0, got {self.min_steps!r}")

    @property
    def max_rounds(self) -> int:
        return self.rounds[-1]

    def rounds_at(self, step: int, history: Sequence[Mapping] | None = None) -> int:
        _check_step(step)
        history = history or []
        if len(history) < step - 1:
            raise ValueError(f"adaptive schedule at step {step} needs the metrics of steps 1..{step - 1}, "
                             f"got {len(history)} records")
        stage, window = 0, []  # window: metric values of the steps run at the current stage
        for j, record in enumerate(history[:step - 1]):
            if self.metric not in record:
                raise KeyError(f"metrics of step {j + 1} have no {self.metric!r} (the adaptive schedule's metric); "
                               f"keys: {sorted(record)}")
            window.append(float(record[self.metric]))
            recent = window[-self.patience:]
            ready = len(window) >= max(self.min_steps, self.patience) and sum(recent) / len(recent) >= self.threshold
            if ready and stage < len(self.rounds) - 1:
                stage, window = stage + 1, []
        return self.rounds[stage]


Schedule = FixedSchedule | StepwiseSchedule | AdaptiveSchedule


def fixed(rounds: int) -> FixedSchedule:
    return FixedSchedule(rounds)


def stepwise(rounds: Sequence[int], every: int) -> StepwiseSchedule:
    return StepwiseSchedule(tuple(rounds), every)


def adaptive(rounds: Sequence[int], metric: str = "success", threshold: float = 0.5, patience: int = 5,
             min_steps: int = 10) -> AdaptiveSchedule:
    return AdaptiveSchedule(tuple(rounds), metric, threshold, patience, min_steps)


def make_schedule(type: str, rounds: int | Sequence[int], every: int | None = None, **kw) -> Schedule:
    """Build a schedule by name: ``fixed`` (rounds: int or [int]), ``stepwise`` or AgentGym-RL's ``scaling_inter_stepwise``
    (rounds: list, every: steps per stage), ``adaptive`` (rounds: list, keyword options of ``adaptive``).
    ``every`` is ignored by fixed and adaptive, since AgentGym-RL configs always carry ``steps_scaling_inter``."""
    if type == "fixed":
        if kw:
            raise ValueError(f"fixed schedule takes no options, got {sorted(kw)}")
        if not _is_int(rounds):   # a config's rounds list: [H]
            if isinstance(rounds, (str, bytes)) or len(rounds) != 1:
                raise ValueError(f"a fixed schedule has one horizon, e.g. rounds=[6], got {rounds!r}")
            rounds = rounds[0]
        return fixed(rounds)
    if type in ("stepwise", "scaling_inter_stepwise"):
        if every is None:
            raise ValueError(f"{type} schedule needs every (steps per stage, steps_scaling_inter)")
        if kw:
            raise ValueError(f"{type} schedule takes only rounds and every, got {sorted(kw)}")
        return stepwise(_as_list(rounds, type), every)
    if type == "adaptive":
        return adaptive(_as_list(rounds, type), **kw)
    raise ValueError(f"unknown round schedule type {type!r}; valid: {', '.join(SCHEDULE_TYPES)}")


def _as_list(rounds, type: str) -> list[int]:
    if _is_int(rounds) or isinstance(rounds, (str, bytes)):
        raise ValueError(f"{type} schedule needs a list of horizons for rounds, e.g. [6, 13, 20], got {rounds!r}")
    return list(rounds)


def _is_int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _check_rounds(rounds: Sequence, ladder: bool = False) -> None:
    if not rounds:
        raise ValueError("rounds must be a non-empty list of horizons")
    if not all(_is_int(r) and r >= 1 for r in rounds):
        raise ValueError(f"rounds must be positive ints, got {list(rounds)!r}")
    if ladder and any(b < a for a, b in zip(rounds, rounds[1:])):
        raise ValueError(f"rounds must be non-decreasing (the horizon never shrinks), got {list(rounds)}")


def _check_step(step: int) -> None:
    if not _is_int(step) or step < 1:
        raise ValueError(f"step must be an int >= 1 (training steps are 1-based), got {step!r}")
