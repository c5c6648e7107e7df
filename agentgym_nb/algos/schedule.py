"""Round schedulers: the interaction horizon (max env rounds per episode) as a pure function of the training step.

Steps are 1-based (the first training step is 1). ``rounds_at(step, history)`` depends only on its arguments, never on
hidden counters, so a resumed run gets exactly the horizons of an uninterrupted one (AgentGym-RL's
``StepRoundsScheduler`` kept a counter that was off by one after ``_load_checkpoint``). Fixed and stepwise schedules
ignore ``history``; the adaptive one replays it.

``SCHEDULES`` maps the names a config gives (``schedule``, AgentGym-RL's ``algorithm.rounds_ctrl.type``) to how each
is made and which RunConfig field feeds each of its parameters; the config, its validation, the trainer's plan and the
notebooks read it. Adding a schedule is its class, its line there and its test.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence


@dataclass(frozen=True)
class FixedSchedule:
    """Always ``rounds``."""
    rounds: int

    reads = ()   # per-step metrics rounds_at reads from history: none

    def __post_init__(self):
        _check_rounds([self.rounds])

    @property
    def max_rounds(self) -> int:
        return self.rounds

    def rounds_at(self, step: int, history: Sequence[Mapping] | None = None) -> int:
        _check_step(step)
        return self.rounds

    def describe(self, steps: int) -> str:
        return _stages(self, steps)


@dataclass(frozen=True)
class StepwiseSchedule:
    """ScalingInter-RL: training step k uses rounds[min((k - 1) // every, len(rounds) - 1)].

    With rounds = (6, 13, 20) and every = 100: steps 1-100 -> 6, 101-200 -> 13, 201 onwards -> 20.
    """
    rounds: tuple[int, ...]
    every: int
    reads = ()

    def __post_init__(self):
        _check_rounds(self.rounds, ladder=True)
        _check_options({"every": self.every})

    @property
    def max_rounds(self) -> int:
        return self.rounds[-1]

    def rounds_at(self, step: int, history: Sequence[Mapping] | None = None) -> int:
        _check_step(step)
        return self.rounds[min((step - 1) // self.every, len(self.rounds) - 1)]

    def describe(self, steps: int) -> str:
        return _stages(self, steps)


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
        _check_options({"metric": self.metric, "threshold": self.threshold, "patience": self.patience,
                        "min_steps": self.min_steps})

    @property
    def max_rounds(self) -> int:
        return self.rounds[-1]

    @property
    def reads(self) -> tuple[str, ...]:
        return (self.metric,)

    def describe(self, steps: int) -> str:
        return (f"H={' -> '.join(map(str, self.rounds))}, the next one once the mean {self.metric} of the last "
                f"{self.patience} steps is >= {self.threshold:g}, after at least "
                f"{max(self.min_steps, self.patience)} steps at the current one")

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


@dataclass(frozen=True)
class ScheduleKind:
    """A schedule a config can name: ``make(**parameters)`` builds it, ``fields`` names the RunConfig field that
    feeds each parameter (config.round_schedule reads them; validation names those fields in its errors)."""
    make: Callable[..., Schedule]
    fields: dict[str, str] = field(default_factory=dict)


SCHEDULES: dict[str, ScheduleKind] = {
    "fixed": ScheduleKind(lambda rounds: fixed(_one_horizon(rounds)), {"rounds": "rounds"}),
    "stepwise": ScheduleKind(lambda rounds, every: stepwise(_as_list(rounds, "stepwise"), every),
                             {"rounds": "rounds", "every": "rounds_every"}),
    "adaptive": ScheduleKind(lambda rounds, **options: adaptive(_as_list(rounds, "adaptive"), **options),
                             {"rounds": "rounds", "metric": "adaptive_metric", "threshold": "adaptive_threshold",
                              "patience": "adaptive_patience", "min_steps": "adaptive_min_steps"}),
}
ALIASES = {"scaling_inter_stepwise": "stepwise"}   # AgentGym-RL's algorithm.rounds_ctrl.type
SCHEDULE_TYPES = (*SCHEDULES, *ALIASES)


def make_schedule(type: str, rounds: int | Sequence[int], every: int | None = None, **kw) -> Schedule:
    """Build a schedule by name (``SCHEDULE_TYPES``): ``fixed`` (rounds: int or [int]), ``stepwise`` or AgentGym-RL's
    ``scaling_inter_stepwise`` (rounds: list, every: steps per stage), ``adaptive`` (rounds: list, keyword options of
    ``adaptive``). ``every`` is ignored by fixed and adaptive, since AgentGym-RL configs always carry
    ``steps_scaling_inter``."""
    if type not in SCHEDULE_TYPES:
        raise ValueError(f"unknown round schedule type {type!r}; valid: {', '.join(SCHEDULE_TYPES)}")
    kind = SCHEDULES[ALIASES.get(type, type)]
    options = sorted(set(kind.fields) - {"rounds", "every"})
    if set(kw) - set(options):
        takes = f"the options {', '.join(options)}" if options else "no options"
        raise ValueError(f"{type} schedule takes {takes} besides rounds and every, got {sorted(kw)}")
    if "every" in kind.fields:
        if every is None:
            raise ValueError(f"{type} schedule needs every (steps per stage, steps_scaling_inter)")
        kw["every"] = every
    return kind.make(rounds, **kw)


def check_fields(cfg) -> None:
    """Check the RunConfig fields that feed any schedule's parameters (``ScheduleKind.fields``) with the checks each
    schedule runs on its own, naming the field: a bad option is an error even while another schedule is chosen.
    The horizons (``rounds``) are checked by the schedule that is built from them."""
    for kind in SCHEDULES.values():
        for param, name in kind.fields.items():
            if param != "rounds":
                _check_options({param: getattr(cfg, name)}, names={param: name})


def _stages(schedule: Schedule, steps: int) -> str:
    """Contiguous step ranges with the same horizon, e.g. "steps 1-80: H=8; steps 81-160: H=12"."""
    stages, start = [], 1
    for step in range(1, steps + 1):
        if step == steps or schedule.rounds_at(step + 1) != schedule.rounds_at(step):
            stages.append(f"steps {start}-{step}: H={schedule.rounds_at(step)}")
            start = step + 1
    return "; ".join(stages)


def _one_horizon(rounds) -> int:
    if _is_int(rounds):
        return rounds
    if not isinstance(rounds, (list, tuple)) or len(rounds) != 1:   # a config's rounds list: [H]
        raise ValueError(f"a fixed schedule has one horizon: rounds=[H] (or rounds=H), e.g. rounds=[6], "
                         f"got {rounds!r}")
    return rounds[0]


def _as_list(rounds, type: str) -> list[int]:
    if not isinstance(rounds, (list, tuple)):
        raise ValueError(f"{type} schedule needs a list of horizons for rounds, e.g. [6, 13, 20], got {rounds!r}")
    return list(rounds)


def _is_int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


# parameter -> (valid, what a valid value must do); one check per parameter, whichever name the caller knows it by
_OPTIONS = {
    "every": (lambda v: _is_int(v) and v >= 1, "be a positive integer (steps per stage)"),
    "metric": (lambda v: isinstance(v, str) and bool(v),
               "name a per-step metric of metrics.jsonl, e.g. 'success' or 'cut_by_horizon'"),
    "threshold": (lambda v: _is_number(v) and math.isfinite(v),
                  "be a finite number (the level the metric must reach)"),
    "patience": (lambda v: _is_int(v) and v >= 1, "be a positive integer (the steps whose metric is averaged)"),
    "min_steps": (lambda v: _is_int(v) and v >= 0, "be an integer >= 0 (the fewest steps spent at a horizon)"),
}


def _check_options(values: Mapping[str, Any], names: Mapping[str, str] | None = None) -> None:
    for param, value in values.items():
        valid, what = _OPTIONS[param]
        if not valid(value):
            raise ValueError(f"{(names or {}).get(param, param)} must {what}, got {value!r}")


def _is_number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _check_rounds(rounds: Sequence, ladder: bool = False) -> None:
    if not rounds:
        raise ValueError("rounds must be a non-empty list of horizons (positive integers)")
    if not all(_is_int(r) and r >= 1 for r in rounds):
        raise ValueError(f"rounds must be positive integers, got {list(rounds)!r}")
    if ladder and any(b < a for a, b in zip(rounds, rounds[1:])):
        raise ValueError(f"rounds must be non-decreasing (the horizon never shrinks), got {list(rounds)}")


def _check_step(step: int) -> None:
    if not _is_int(step) or step < 1:
        raise ValueError(f"step must be an int >= 1 (training steps are 1-based), got {step!r}")
