"""pass@(k, T): how often a policy succeeds with k samples per task when it is given T turns, measured at several
horizons (`horizon_surface`) and computed by `metrics.pass_at_k_surface`. A policy trained at horizon H, evaluated
at 0.5 H, H and 2 H, shows whether what it learnt short carries to long episodes, and how much of that a few more
samples buy.

    surface = horizon_surface(engine, lambda: envs.make("babyai"), items, chat, horizons=[3, 6, 12], n=16)
    surface["pass@k"][t][j]    # pass@(k = surface["k"][j]) at T = surface["horizons"][t], over surface["items"] items
"""
from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Sequence

from .metrics import pass_at_k_surface
from .run import evaluate, load_results


def horizon_surface(engine, env_factory: Callable, item_ids: list[int], chat, *, horizons: Sequence[int], n: int = 16,
                    ks: Sequence[int] | None = None, params=None, max_total_tokens: int = 4096,
                    env_timeout: float = 60.0, max_concurrency: int = 64, results_dir: str | None = None,
                    chunk_items: int | None = None, resamples: int = 2000, desc: str | None = None) -> dict:
    """Play `n` episodes of every item once, at the longest of `horizons` (`evaluate`), and read every horizon T off
    them: an episode succeeds within T turns when it succeeded after at most T replies. That is the episode the policy
    plays when it is given T turns: nothing it sees depends on the horizon (the prompt does not name it, the env is
    not told it) and an episode's sampling seed is its position and turn, so its first T turns are the same tokens
    (tests/test_pass_at_k_surface.py plays both ways and compares). One play costs the longest horizon's turns, not
    the sum over horizons, and the cells are paired episode by episode (pass@k cannot fall as T grows). `at_horizon`
    reads one episode at a shorter horizon.

    Returns the `pass_at_k_surface` with "item_ids" (the items it kept) and "episodes" (those played). With
    `results_dir`, the episodes are kept in <results_dir>/h<longest>.jsonl and an interrupted call continues where it
    stopped."""
    if not horizons or any(int(T) < 1 for T in horizons):
        raise ValueError(f"horizons must be turn limits >= 1, got {list(horizons)}")
    horizons = sorted({int(T) for T in horizons})
    longest = horizons[-1]
    with tempfile.TemporaryDirectory() as scratch:
        path = os.path.join(results_dir or scratch, f"h{longest}.jsonl")
        evaluate(engine, env_factory, item_ids, chat, n=n, max_rounds=longest, params=params,
                 max_total_tokens=max_total_tokens, env_timeout=env_timeout, max_concurrency=max_concurrency,
                 results_path=path, chunk_items=chunk_items, resamples=resamples, meta={"horizon": longest},
                 desc=desc and f"{desc}, T = {longest}")
        played = [r for r in load_results(path)[1] if not r["failed"]]
    outcomes = {T: {} for T in horizons}
    for r in played:
        for T in horizons:
            outcomes[T].setdefault(r["position"], []).append(float(at_horizon(r, T)["success"]))
    surface = pass_at_k_surface(outcomes, ks, resamples=resamples)
    kept = sorted(p for p, v in outcomes[longest].items() if len(v) == surface["n"])
    return surface | {"item_ids": [int(item_ids[p]) for p in kept], "episodes": len(played)}


def at_horizon(record: dict, T: int) -> dict:
    """An episode's record (`evaluate`'s results) as the horizon T would have ended it: unchanged when it ended within
    T turns, else cut after turn T: not done, not truncated, no success, T turns (its reward after turn T is not
    recorded: None)."""
    if record["num_rounds"] <= T:
        return record
    return record | {"num_rounds": T, "success": False, "done": False, "truncated": False, "reward": None}
