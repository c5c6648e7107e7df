"""Resumable evaluation: play n episodes of every test item through the rollout runner, keep every finished chunk of
episodes in a JSONL results file, and summarise them (`metrics.summarize`). The trainer and the nano build use it.

    summary = evaluate(engine, lambda: envs.make("babyai"), item_ids, chat, n=16, results_path="results.jsonl")
"""
from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Callable, Sequence

from tqdm.auto import tqdm

from ..rollout.engine import SamplingParams
from ..rollout.runner import run_episodes
from .metrics import summarize

RESULTS_VERSION = 1


def evaluate(engine, env_factory: Callable, item_ids: list[int], chat, *, n: int = 1, max_rounds: int = 20,
             params=None, max_total_tokens: int = 4096, env_timeout: float = 60.0, max_concurrency: int = 64,
             trajectories_out: list | None = None, ks: Sequence[int] | None = None, results_path: str | None = None,
             summary_path: str | None = None, chunk_items: int | None = None, resamples: int = 2000,
             meta: dict | None = None, desc: str | None = None) -> dict:
    """Play `n` episodes of every item through `run_episodes` and summarise them (see `summarize`).

    Items run in fixed chunks of `chunk_items` (default: 64 episodes' worth with `results_path`, else one chunk;
    chunking changes no result, only how much work an interruption loses). With `results_path`, every finished chunk
    is appended to that JSONL file (a header line, one line per episode, then a commit line for the chunk), and a
    later call with the same arguments skips the committed chunks: an interrupted evaluation continues where it
    stopped. Chunks with env failures are run again (an env failure says nothing about the policy). The result is
    exactly that of an uninterrupted run, because the sampling seed of every reply depends only on (seed, the
    episode's position in the full list, turn), never on the chunk or batch it ran in.

    Greedy decoding is temperature 0 (n must be 1); sampled evaluation has params.seed (default 0) fixing the draws.
    `trajectories_out` receives the trajectories played in this call. The summary is also written to `summary_path`.
    With `desc`, a progress bar of that name counts the episodes played.
    """
    if not item_ids:
        raise ValueError("evaluate needs at least one item id")
    if n < 1:
        raise ValueError(f"n (samples per item) must be >= 1, got {n}")
    params = params or SamplingParams()
    if params.temperature == 0 and n > 1:
        raise ValueError(f"greedy decoding (temperature 0) plays the same episode every time: use n=1, got n={n}")
    if params.seed is None:
        params = dataclasses.replace(params, seed=0)
    ks = list(range(1, n + 1)) if ks is None else sorted(set(ks))
    for k in ks:
        if not 1 <= k <= n:
            raise ValueError(f"k={k} is not in [1, n={n}]: pass@k and pass^k need k <= n samples per item")
    item_ids = [int(i) for i in item_ids]
    chunk_items = chunk_items or (max(1, 64 // n) if results_path else len(item_ids))
    chunks = [list(range(s, min(s + chunk_items, len(item_ids)))) for s in range(0, len(item_ids), chunk_items)]
    header = {"kind": "header", "version": RESULTS_VERSION, "items": item_ids, "n": n, "max_rounds": max_rounds,
              "max_total_tokens": max_total_tokens, "sampling": dataclasses.asdict(params),
              "chunk_items": chunk_items, "meta": meta or {}}
    header = json.loads(json.dumps(header))   # compared with the JSON read back from a results file
    done = _open_results(results_path, header) if results_path else {}
    todo = [c for c in range(len(chunks)) if c not in done]
    categories = _categories(env_factory, [item_ids[p] for c in todo for p in chunks[c]]) if todo else {}
    bar = None
    if desc and todo:
        bar = tqdm(total=n * sum(len(chunks[c]) for c in todo), desc=desc, unit="episode")
    for c in todo:
        positions = chunks[c]
        trajs = run_episodes(engine, env_factory, [item_ids[p] for p in positions], chat, n=n, max_rounds=max_rounds,
                             params=params, max_total_tokens=max_total_tokens, env_timeout=env_timeout,
                             max_concurrency=max_concurrency, first_episode=positions[0] * n,
                             on_episode=None if bar is None else (lambda t: bar.update(1)))
        if trajectories_out is not None:
            trajectories_out.extend(trajs)
        records = [_record(t, positions[t.group], c, categories[t.item_id]) for t in trajs]
        done[c] = sorted(records, key=_canonical)
        if results_path:
            _append_chunk(results_path, c, done[c])
    if bar is not None:
        bar.close()
    records = [r for c in sorted(done) for r in done[c]]
    summary = summarize(records, n=n, ks=ks, max_rounds=max_rounds, resamples=resamples)
    summary.update(temperature=params.temperature, seed=params.seed)
    if meta:
        summary["meta"] = meta
    if summary_path:
        _write_json(summary_path, summary)
    return summary


def _categories(env_factory, item_ids: list[int]) -> dict[int, str]:
    env = env_factory()
    try:
        return {i: str(env.category(i)) for i in set(item_ids)}
    finally:
        env.close()


def _record(t, position: int, chunk: int, category: str) -> dict:
    log = t.to_log()
    log.pop("group")
    return {"kind": "episode", "chunk": chunk, "position": position, "category": category, **log}


def _canonical(record: dict) -> tuple:
    """Episodes of a chunk in a fixed order (the runner returns them in finishing order within an item)."""
    return record["position"], json.dumps(record, sort_keys=True)


def _open_results(path: str, header: dict) -> dict[int, list[dict]]:
    """Committed chunks of an existing results file (chunk -> episode records); the file is rewritten to hold just
    those, so that appending continues a clean file. A new file gets the header."""
    if not os.path.exists(path) or os.path.getsize(path) == 0:
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        _write_lines(path, [header])
        return {}
    lines = _read_lines(path)
    if not lines or lines[0].get("kind") != "header":
        raise ValueError(f"{path} is not an evaluation results file (no header line); pass another results path")
    old = lines[0]
    diff = sorted(k for k in set(old) | set(header) if old.get(k) != header.get(k))
    if diff:
        raise ValueError(f"{path} holds a different evaluation (differs in: {', '.join(diff)}); use another results "
                         "path, or delete the file to start over")
    done = {c: chunk for c, chunk in _committed(lines).items() if not any(r["failed"] for r in chunk)}
    tmp = path + ".tmp"
    _write_lines(tmp, [header] + [r for c in sorted(done) for r in done[c] + [_commit(c, done[c])]])
    os.replace(tmp, path)
    return done


def _commit(chunk: int, records: list[dict]) -> dict:
    return {"kind": "chunk", "chunk": chunk, "episodes": len(records)}


def _append_chunk(path: str, chunk: int, records: list[dict]) -> None:
    """One write per chunk, commit line last: a crash mid-write leaves an uncommitted chunk, which is run again."""
    with open(path, "a") as f:
        f.write("".join(json.dumps(r) + "\n" for r in records + [_commit(chunk, records)]))
        f.flush()
        os.fsync(f.fileno())


def _read_lines(path: str) -> list[dict]:
    """JSON lines up to the first unreadable one (a line cut by a crash ends the readable part)."""
    out = []
    with open(path) as f:
        for line in f:
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                break
    return out


def _write_lines(path: str, rows: list[dict]) -> None:
    with open(path, "w") as f:
        f.write("".join(json.dumps(r) + "\n" for r in rows))


def _write_json(path: str, obj: dict) -> None:
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=2)
    os.replace(tmp, path)


def load_results(path: str) -> tuple[dict, list[dict]]:
    """(header, committed episode records) of a results file, e.g. to re-summarise with other k or per category."""
    lines = _read_lines(path)
    if not lines or lines[0].get("kind") != "header":
        raise ValueError(f"{path} is not an evaluation results file (no header line)")
    return lines[0], [r for c, chunk in sorted(_committed(lines).items()) for r in chunk]


def _committed(lines: list[dict]) -> dict[int, list[dict]]:
    """chunk -> its episode records, for the chunks whose commit line follows all their episodes."""
    done, pending = {}, []
    for line in lines[1:]:
        if line.get("kind") == "episode":
            pending.append(line)
        elif line.get("kind") == "chunk":
            chunk = [r for r in pending if r["chunk"] == line["chunk"]]
            if len(chunk) == line["episodes"]:
                done[line["chunk"]] = chunk
            pending = []
    return done
