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
    """Play `n` episodes of every item at each horizon in `horizons` (`evaluate`, the same sampling seeds at every
    horizon) and return their `pass_at_k_surface`, with "item_ids" (the items it kept) and "episodes" added. With
    `results_dir`, each horizon's episodes are kept in <results_dir>/h<T>.jsonl and an interrupted call continues
    where it stopped."""
    if not horizons or any(int(T) < 1 for T in horizons):
        raise ValueError(f"horizons must be turn limits >= 1, got {list(horizons)}")
    outcomes: dict[int, dict[int, list[float]]] = {}
    with tempfile.TemporaryDirectory() as scratch:
        for T in sorted({int(T) for T in horizons}):
            path = os.path.join(results_dir or scratch, f"h{T}.jsonl")
            evaluate(engine, env_factory, item_ids, chat, n=n, max_rounds=T, params=params,
                     max_total_tokens=max_total_tokens, env_timeout=env_timeout, max_concurrency=max_concurrency,
                     results_path=path, chunk_items=chunk_items, resamples=resamples, meta={"horizon": T},
                     desc=desc and f"{desc}, T = {T}")
            outcomes[T] = {}
            for r in load_results(path)[1]:
                if not r["failed"]:
                    outcomes[T].setdefault(r["position"], []).append(float(r["success"]))
    surface = pass_at_k_surface(outcomes, ks, resamples=resamples)
    kept = set.intersection(*[{p for p, v in o.items() if len(v) == surface["n"]} for o in outcomes.values()])
    return surface | {"item_ids": [int(item_ids[p]) for p in sorted(kept)],
                      "episodes": sum(len(v) for o in outcomes.values() for v in o.values())}
