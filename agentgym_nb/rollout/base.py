"""The engine interface every rollout engine implements (`Engine`): token ids in, sampled token ids and their
log-probs out, with the sampling settings (`SamplingParams`) and the checks every engine makes of its input."""
from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Hashable, Iterable
from dataclasses import dataclass, field

import torch


@dataclass
class SamplingParams:
    temperature: float = 1.0  # 0 = greedy
    top_p: float = 1.0
    top_k: int = -1  # -1 = no top-k filter
    max_tokens: int = 64
    stop_token_ids: list[int] = field(default_factory=list)  # a sampled stop id ends the turn and is kept
    seed: int | None = None  # same seed, same prompts -> same completions

    def __post_init__(self):
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0 (0 = greedy), got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.top_k != -1 and self.top_k < 1:
            raise ValueError(f"top_k must be -1 (off) or >= 1, got {self.top_k}")
        if self.max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1, got {self.max_tokens}")


@dataclass
class Completion:
    token_ids: list[int]  # exactly the sampled ids, the stop id included when one ended the turn
    logprobs: list[float]  # log-prob of each sampled id under the distribution it was sampled from
    finish_reason: str  # "stop" (a stop id or the model's eos was sampled) or "length" (max_tokens reached)
    cached_tokens: int | None = None  # prompt tokens read from its episode's KV cache instead of prefilled again
                                      # (None: the engine keeps no per-episode cache)


class Engine(ABC):
    @abstractmethod
    def generate(self, prompts: list[list[int]], params: SamplingParams, seeds: list[int] | None = None, *,
                 sessions: list[Hashable] | None = None) -> list[Completion]:
        """One completion per prompt, in prompt order. `seeds[i]` seeds prompt i's draws, so its completion depends
        only on its prompt, its seed and the weights, not on the rest of the batch; without `seeds`, prompt i is
        seeded `params.seed + i` (or not at all when params.seed is None).

        `sessions[i]` names the episode prompt i belongs to. Each prompt of an episode extends the last one and its
        reply, so an engine may keep an episode's keys and values between calls and compute only the new tokens
        (`HFEngine`); the same tokens come out either way. `release` ends a session."""

    def release(self, sessions: Iterable[Hashable]) -> None:
        """Forget what is kept for these sessions (their episodes ended). A no-op for engines that keep nothing."""

    @abstractmethod
    def load_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Sample from these weights (HF parameter names, e.g. `model.state_dict().items()`) from now on."""

    @abstractmethod
    def prompt_logprobs(self, token_ids: list[int]) -> list[float]:
        """log p(token_ids[t] | token_ids[:t]) for t = 1 .. len - 1 under the engine's weights (temperature 1, no
        filtering): what the trainer's `token_logprobs` gives for the same ids, so the two can be held side by side
        (the trainer's check that a weight sync took)."""

    def sleep(self) -> None:
        """Give back the device memory the engine holds between rollouts (its KV cache, its own copy of the weights),
        so a colocated trainer can use it; the next `load_weights` or `generate` takes it again. A no-op for engines
        that hold nothing between calls."""

    def close(self) -> None:
        """Free the engine's memory; the engine is unusable afterwards."""


def eos_token_ids(generation_config, tokenizer=None) -> list[int]:
    """The ids that end generation by themselves: generation_config.eos_token_id (int or list) + tokenizer's eos."""
    ids = getattr(generation_config, "eos_token_id", None)
    ids = [] if ids is None else [ids] if isinstance(ids, int) else list(ids)
    if tokenizer is not None and tokenizer.eos_token_id is not None:
        ids.append(tokenizer.eos_token_id)
    return sorted(set(ids))


def check_prompts(prompts: list[list[int]]) -> None:
    for i, p in enumerate(prompts):
        if len(p) == 0:
            raise ValueError(f"prompt {i} is empty; every prompt needs at least one token id")


def check_seeds(seeds: list[int] | None, prompts: list[list[int]]) -> None:
    if seeds is not None and len(seeds) != len(prompts):
        raise ValueError(f"got {len(seeds)} seeds for {len(prompts)} prompts; give one seed per prompt or none")
