"""Evaluation a reviewer can trust: unbiased pass@k and pass^k, bootstrap intervals over items, per-category results,
resumable runs, and the paper's reported numbers as data.

For one test item sampled n times with c successes (the env's own predicate `env.success(reward)`: BabyAI reward > 0,
TextCraft reward 1, SciWorld score 100, SearchQA exact match, WebArena evaluator 1; never "score > 0"):
pass@k is the chance that at least one of k samples drawn without replacement succeeds, pass^k the chance that all
k do. Averaged over items they are the reported numbers. AgentGym-RL's own "Pass@K" (share of items whose best score
is above 0) is kept as `agentgym_pass@n` to show how far it is from both.

    python -m agentgym_nb.evaluate --env babyai --model outputs/runs/<name> --n 16 --k 1,2,4,8,16
"""
from __future__ import annotations

import dataclasses
import json
import math
import os
import shutil
from collections.abc import Callable, Sequence

import numpy as np

REPO_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PAPERS_DIR = os.path.join(REPO_DIR, "papers")
RESULTS_VERSION = 1


# ---------------------------------------------------------------------------------------------------- estimators

def pass_at_k(n: int, c: int, k: int) -> float:
    """pass@k = 1 - C(n - c, k) / C(n, k) (unbiased, Chen et al. 2021).

    Computed as 1 - prod_{i = n-c+1}^{n} (1 - k / i), which avoids huge binomials; 1 when n - c < k.
    """
    _check_counts(n, c, k)
    if n - c < k:
        return 1.0
    return 1.0 - math.prod(1.0 - k / i for i in range(n - c + 1, n + 1))


def pass_hat_k(n: int, c: int, k: int) -> float:
    """pass^k = C(c, k) / C(n, k) = prod_{i=0}^{k-1} (c - i) / (n - i): the chance that k samples all succeed."""
    _check_counts(n, c, k)
    return math.prod((c - i) / (n - i) for i in range(k))


def wilson_interval(successes: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """Wilson score interval for a success rate p = successes / n:

    (p + z^2 / 2n +- z * sqrt(p (1 - p) / n + z^2 / 4n^2)) / (1 + z^2 / n). Unlike p +- z*se it stays inside [0, 1]
    and is not empty at p = 0 or 1.
    """
    if n < 1 or not 0 <= successes <= n:
        raise ValueError(f"need n >= 1 and 0 <= successes <= n, got successes={successes}, n={n}")
    p = successes / n
    denom = 1 + z * z / n
    center = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    # the interval always holds p; at p = 0 or 1 the bound equals p only up to rounding (0/27: lo = 6.9e-18)
    return min(p, max(0.0, center - half)), max(p, min(1.0, center + half))


def mean_ci(values: Sequence[float], z: float = 1.96) -> tuple[float, float]:
    """Normal-approximation interval for a mean: mean +- z * s / sqrt(n), s the unbiased standard deviation."""
    values = [float(v) for v in values]
    n = len(values)
    if n < 2:
        raise ValueError(f"mean_ci needs at least 2 values, got {n}")
    mean = sum(values) / n
    s = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    return mean - z * s / math.sqrt(n), mean + z * s / math.sqrt(n)


def _check_counts(n: int, c: int, k: int) -> None:
    if not 1 <= k <= n:
        raise ValueError(f"need 1 <= k <= n (k samples drawn from n), got n={n}, k={k}")
    if not 0 <= c <= n:
        raise ValueError(f"need 0 <= c <= n (c successes among n samples), got n={n}, c={c}")


def avg_at_k(scores: Sequence[float]) -> float:
    """avg@k: the mean score over the k samples of an item (AgentGym-RL's Avg@K, averaged over items by the caller)."""
    if not scores:
        raise ValueError("avg_at_k needs at least one score")
    return sum(scores) / len(scores)


def bootstrap_weights(m: int, *, resamples: int = 2000, seed: int = 0) -> np.ndarray:
    """W[r, i] = how often item i is drawn in resample r (m draws with replacement): a [resamples, m] count matrix.
    A statistic over a resample is then a weighted one over the original items (no copies of the data)."""
    if m < 1 or resamples < 1:
        raise ValueError(f"bootstrap needs m >= 1 items and resamples >= 1, got m={m}, resamples={resamples}")
    return np.random.default_rng(seed).multinomial(m, np.full(m, 1.0 / m), size=resamples)


def bootstrap_ci(values: Sequence[float], *, resamples: int = 2000, seed: int = 0,
                 level: float = 0.95) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean over items: resample the items with replacement `resamples` times
    and take the (1 - level)/2 and (1 + level)/2 quantiles of the resampled means. Items, not episodes, are the unit:
    the n samples of one item are not independent draws of the population."""
    v = np.asarray(values, dtype=float)
    w = bootstrap_weights(len(v), resamples=resamples, seed=seed)
    return _quantiles(w @ v / len(v), level)


def _quantiles(stats: np.ndarray, level: float) -> tuple[float, float]:
    lo, hi = np.nanquantile(stats, [(1 - level) / 2, (1 + level) / 2])
    return float(lo), float(hi)


# ----------------------------------------------------------------------------------------------------- summaries

def summarize(records: list[dict], *, n: int, ks: Sequence[int] | None = None, max_rounds: int | None = None,
              resamples: int = 2000, seed: int = 0, level: float = 0.95) -> dict:
    """Summary of episode records (dicts with position, category, reward, success, failed, num_rounds, truncated),
    overall and per category. Deterministic: the same records give the same summary, whatever order they came in.

    items          items with at least one episode the env did not fail (`failed` counts the failed episodes)
    success        successful episodes / episodes, with a Wilson interval (`success_ci`, treats episodes as
                   independent: exact for n = 1) and a bootstrap interval over items (`success_ci_bootstrap`)
    pass@k, pass^k averaged over the items that have all n episodes (env failures excluded), bootstrap `_ci`
    avg@n          mean score over items and samples (AgentGym-RL's Avg@K; SciWorld: 0-100)
    agentgym_pass@n share of items whose best score is > 0 (AgentGym-RL's Pass@K: biased, not a success rate)
    """
    ks = list(range(1, n + 1)) if ks is None else list(ks)
    for k in ks:
        _check_counts(n, 0, k)
    if not records:
        raise ValueError("summarize needs at least one episode record")
    ok = [r for r in records if not r["failed"]]
    if not ok:
        raise RuntimeError(f"every evaluation episode failed in the env; first error: {records[0]['failed']}")
    out = _block(records, n=n, ks=ks, resamples=resamples, seed=seed, level=level)
    out.update(n=n, k=ks, max_rounds=max_rounds, bootstrap={"resamples": resamples, "seed": seed, "level": level})
    categories = sorted({r["category"] for r in records})
    out["by_category"] = {cat: _block([r for r in records if r["category"] == cat], n=n, ks=ks,
                                      resamples=resamples, seed=seed, level=level) for cat in categories}
    return out


def _block(records: list[dict], *, n: int, ks: list[int], resamples: int, seed: int, level: float) -> dict:
    items: dict[int, list[dict]] = {}
    for r in records:
        items.setdefault(r["position"], [])
        if not r["failed"]:
            items[r["position"]].append(r)
    failed = sum(1 for r in records if r["failed"])
    eps = [e for _, group in sorted(items.items()) for e in group]
    if not eps:
        return {"items": 0, "episodes": 0, "failed": failed}
    rows = [group for _, group in sorted(items.items()) if group]
    wins = np.array([sum(e["success"] for e in g) for g in rows], dtype=float)
    tries = np.array([len(g) for g in rows], dtype=float)
    weights = bootstrap_weights(len(rows), resamples=resamples, seed=seed)   # one set of resamples for every number
    out = {"items": len(rows), "episodes": len(eps), "failed": failed,
           "success": float(wins.sum() / tries.sum()),
           "success_ci": list(wilson_interval(int(wins.sum()), int(tries.sum()))),
           "success_ci_bootstrap": list(_quantiles((weights @ wins) / (weights @ tries), level)),
           "mean_reward": _mean(e["reward"] for e in eps), f"avg@{n}": _mean(e["reward"] for e in eps),
           "mean_turns": _mean(e["num_rounds"] for e in eps), "truncated": _mean(e["truncated"] for e in eps)}
    full = np.array([len(g) == n for g in rows])
    out["pass_items"] = int(full.sum())
    if not full.any():
        return out
    w_full = weights[:, full]
    counts = [int(c) for c, f in zip(wins, full) if f]
    best_above_zero = [float(max(e["reward"] for e in g) > 0) for g, f in zip(rows, full) if f]
    columns = {f"pass@{k}": [pass_at_k(n, c, k) for c in counts] for k in ks}
    columns.update({f"pass^{k}": [pass_hat_k(n, c, k) for c in counts] for k in ks})
    columns[f"agentgym_pass@{n}"] = best_above_zero
    with np.errstate(invalid="ignore", divide="ignore"):   # a resample without any full item gives nan, dropped
        for name, values in columns.items():
            v = np.asarray(values)
            out[name] = float(v.mean())
            if not name.startswith("agentgym"):
                out[f"{name}_ci"] = list(_quantiles((w_full @ v) / w_full.sum(1), level))
    return out


def _mean(xs) -> float:
    xs = [float(x) for x in xs]
    return math.fsum(xs) / len(xs)   # exactly rounded, so the order records arrive in cannot change a digit


# ---------------------------------------------------------------------------------------------------- evaluation

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
    from .rollout.engine import SamplingParams
    from .rollout.runner import run_episodes
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
        from tqdm.auto import tqdm
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


# ------------------------------------------------------------------------------------------------- checkpoints

def is_run_dir(path: str) -> bool:
    """A training run directory (outputs/runs/<name>): its config.json is a RunConfig, not an HF model config."""
    cfg = os.path.join(path, "config.json")
    if not os.path.isfile(cfg):
        return False
    with open(cfg) as f:
        keys = set(json.load(f))
    return {"model", "preset", "env", "algorithm"} <= keys and "model_type" not in keys


def latest_checkpoint(run_dir: str) -> str:
    """The newest complete checkpoint of a run (ckpt/step_00040 and so on; half-written .tmp folders are ignored)."""
    root = os.path.join(run_dir, "ckpt")
    steps = sorted(d for d in os.listdir(root) if d.startswith("step_") and not d.endswith(".tmp")) \
        if os.path.isdir(root) else []
    if not steps:
        raise ValueError(f"run {run_dir} has no checkpoint under {root}: train it until a save (save_every) or "
                         "evaluate its starting model by name instead")
    return os.path.join(root, steps[-1])


def checkpoint_model_dir(checkpoint: str, base_dir: str) -> str:
    """An HF folder (config, tokenizer, weights) holding a trainer checkpoint's policy, built once next to it
    (<checkpoint>/hf) so every engine can load it. The checkpoint's model.safetensors is accelerate's save of the
    policy; a tied lm_head is absent there and comes back through the tie. A LoRA run's policy is saved under peft's
    names (base_model.model.<name>, base_layer, lora_A/lora_B): the trainer's LoRA (`add_lora`, its rank read from
    the adapter shapes) is rebuilt around the base model, loaded, and merged into plain weights, W + (alpha / r) B A."""
    import torch
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM
    out = os.path.join(checkpoint, "hf")
    if os.path.exists(os.path.join(out, "config.json")):
        return out
    weights = os.path.join(checkpoint, "model.safetensors")
    if not os.path.exists(weights):
        raise ValueError(f"checkpoint {checkpoint} has no model.safetensors (expected accelerate's save_state)")
    state = load_file(weights)
    model = AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32)
    ranks = {v.shape[0] for k, v in state.items() if ".lora_A." in k}
    if len(ranks) > 1:
        raise ValueError(f"checkpoint {checkpoint} has LoRA adapters of several ranks {sorted(ranks)}; the trainer "
                         "uses one rank (lora_rank)")
    if ranks:
        from .train.common import add_lora
        model = add_lora(model, r=ranks.pop())
        _check_fit(model.load_state_dict(state, strict=False), model, checkpoint, base_dir)
        model = model.merge_and_unload()
    else:
        _check_fit(model.load_state_dict(state, strict=False), model, checkpoint, base_dir)
    model.tie_weights()
    tmp = out + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp)
    for name in os.listdir(base_dir):   # tokenizer and generation files travel with the weights
        if name.startswith(("tokenizer", "special_tokens", "vocab", "merges", "added_tokens", "generation_config",
                            "chat_template")):
            shutil.copy(os.path.join(base_dir, name), tmp)
    shutil.rmtree(out, ignore_errors=True)
    os.replace(tmp, out)
    return out


def _check_fit(result, model, checkpoint: str, base_dir: str) -> None:
    tied = "lm_head.weight" if model.config.tie_word_embeddings else None
    missing = sorted(k for k in result.missing_keys if not (tied and k.endswith(tied)))
    unexpected = sorted(result.unexpected_keys)
    if missing or unexpected:
        raise ValueError(f"checkpoint {checkpoint} does not fit the model in {base_dir}: missing {missing[:5]}, "
                         f"unexpected {unexpected[:5]}")


# ---------------------------------------------------------------------------------------------- paper numbers

def load_paper_results(table: str | None = None):
    """The paper's reported numbers (papers/<table>.csv) as one long pandas DataFrame, a `table` column added.
    Every row names its source (`source`: arXiv version or the talk slides; `source_ref`: table or slide) and the
    model size and compute behind it, so a plot can label "paper, 7B on GPUs" apart from "ours, nano on a CPU"."""
    import glob

    import pandas as pd
    files = {os.path.splitext(os.path.basename(p))[0]: p for p in glob.glob(os.path.join(PAPERS_DIR, "*.csv"))}
    if not files:
        raise FileNotFoundError(f"no paper results in {PAPERS_DIR} (they ship with the repository, not the package)")
    if table is not None and table not in files:
        raise ValueError(f"unknown paper table {table!r}; available: {', '.join(sorted(files))}")
    names = sorted(files) if table is None else [table]
    frames = [pd.read_csv(files[name]).assign(table=name) for name in names]
    return pd.concat(frames, ignore_index=True)


# ------------------------------------------------------------------------------------------------------- the CLI

def parse_ks(text: str, n: int) -> list[int]:
    """"1,2,4" -> [1, 2, 4]; every k must be in [1, n]."""
    try:
        ks = sorted({int(k) for k in text.split(",") if k.strip()})
    except ValueError:
        raise ValueError(f"--k must be comma-separated integers such as 1,2,4,8,16, got {text!r}") from None
    bad = [k for k in ks if not 1 <= k <= n]
    if not ks or bad:
        raise ValueError(f"--k {text}: every k must be in [1, n={n}] (pass@k needs k <= n samples per item)")
    return ks


def parse_items(text: str, cfg) -> list[int]:
    """"test" / "train": the items a run of `cfg` evaluates or trains on (`config.item_pool`: only `cfg.levels`);
    "a:b": item ids a..b-1, whatever their level."""
    from .config import item_pool
    if ":" in text:
        try:
            lo, hi = (int(x) for x in text.split(":"))
        except ValueError:
            raise ValueError(f"--items must be test, train or a:b with integers, got {text!r}") from None
        if not 0 <= lo < hi:
            raise ValueError(f"--items {text}: need 0 <= a < b")
        return list(range(lo, hi))
    if text not in ("test", "train"):
        raise ValueError(f"--items must be test, train or a:b, got {text!r}")
    return item_pool(cfg, text)


def resolve_model(spec: str, *, env: str | None, preset: str | None, log=print) -> tuple[str, object, str | None]:
    """(model folder, RunConfig, checkpoint or None) for --model: a model name or path, or a run directory (its
    config.json's model with the latest checkpoint's weights)."""
    from . import models
    from .config import RunConfig, make_config
    if os.path.isdir(spec) and is_run_dir(spec):
        with open(os.path.join(spec, "config.json")) as f:
            saved = json.load(f)
        try:
            cfg = RunConfig(**saved)
        except TypeError as e:
            raise ValueError(f"{spec}/config.json is not a RunConfig of this version: {e}") from None
        cfg.train_items, cfg.test_items = (None if x is None else tuple(x) for x in (cfg.train_items, cfg.test_items))
        checkpoint = latest_checkpoint(spec)
        base = models.resolve_config(cfg, log=log)
        return checkpoint_model_dir(checkpoint, base), dataclasses.replace(cfg, env=env or cfg.env), checkpoint
    if env is None:
        raise ValueError("--env is required unless --model is a run directory")
    cfg = make_config(preset=preset, env=env, model=spec)
    return models.resolve_config(cfg, log=log), cfg, None


def main(argv=None) -> dict:
    import argparse
    p = argparse.ArgumentParser(prog="python -m agentgym_nb.evaluate",
                                description="Evaluate a model or a training run on an env: pass@k, pass^k, success "
                                            "with bootstrap intervals, per category. Resumable.")
    p.add_argument("--env", help="babyai, textcraft, sciworld, searchqa, webarena (default: the run's env)")
    p.add_argument("--model", required=True, help="nano, smollm2-135m, an HF folder or id, or outputs/runs/<name>")
    p.add_argument("--n", type=int, default=1, help="samples per item")
    p.add_argument("--k", default=None, help="comma-separated k for pass@k / pass^k (default: powers of 2 and n)")
    p.add_argument("--temperature", type=float, default=1.0, help="0 = greedy (then n must be 1)")
    p.add_argument("--max-rounds", type=int, default=None, help="horizon (default: the config's eval_rounds)")
    p.add_argument("--items", default="test", help="test or train (the preset's items: its levels only), or a:b "
                                                   "(item ids a..b-1)")
    p.add_argument("--out", default=None, help="output folder for results.jsonl and summary.json")
    p.add_argument("--engine", default=None, choices=["vllm", "hf", "auto"], help="default: the config's engine")
    p.add_argument("--preset", default=None, help="smoke, cpu or paper: settings and nano build (default: cpu)")
    p.add_argument("--seed", type=int, default=None, help="sampling seed (default: the config's seed)")
    args = p.parse_args(argv)
    try:
        from . import envs
        if args.env is not None:
            envs.env_class(args.env)
        if args.n < 1:
            raise ValueError(f"--n must be >= 1, got {args.n}")
        default_ks = sorted({k for k in (2 ** i for i in range(args.n.bit_length())) if k <= args.n} | {args.n})
        ks = parse_ks(args.k, args.n) if args.k else default_ks
        if args.temperature == 0 and args.n > 1:
            raise ValueError(f"--temperature 0 is greedy: every sample is the same episode, use --n 1 (got {args.n})")
        model_dir, cfg, checkpoint = resolve_model(args.model, env=args.env, preset=args.preset)
        items = parse_items(args.items, cfg)
    except (ValueError, KeyError) as e:
        p.error(str(e))
    return run_cli(args, cfg, model_dir, checkpoint, items, ks)


def run_cli(args, cfg, model_dir: str, checkpoint: str | None, items: list[int], ks: list[int]) -> dict:
    from . import envs, models
    from .rollout.engine import SamplingParams, make_engine
    from .rollout.trajectory import ChatFormat
    max_rounds = args.max_rounds or cfg.eval_rounds
    seed = cfg.seed if args.seed is None else args.seed
    engine_kind = args.engine or cfg.engine
    out = args.out or _default_out(args, cfg, checkpoint, max_rounds)
    tokenizer = models.load_tokenizer(model_dir)
    chat = ChatFormat(tokenizer)
    params = SamplingParams(temperature=args.temperature, top_p=cfg.top_p, max_tokens=cfg.max_tokens, seed=seed)
    meta = {"env": cfg.env, "model": args.model, "model_dir": os.path.abspath(model_dir),
            "checkpoint": checkpoint and os.path.abspath(checkpoint), "engine": engine_kind, "preset": cfg.preset,
            "items": args.items}
    engine = make_engine(engine_kind, model_dir, max_model_len=cfg.max_total_tokens + cfg.max_tokens, seed=seed,
                         tokenizer=tokenizer)
    try:
        summary = evaluate(engine, lambda: envs.make(cfg.env), items, chat, n=args.n, max_rounds=max_rounds,
                           params=params, max_total_tokens=cfg.max_total_tokens, env_timeout=cfg.env_timeout,
                           max_concurrency=cfg.max_envs, ks=ks,
                           results_path=os.path.join(out, "results.jsonl"),
                           summary_path=os.path.join(out, "summary.json"), meta=meta)
    finally:
        engine.close()
    line = ", ".join(f"pass@{k} {summary[f'pass@{k}']:.3f}" for k in ks if f"pass@{k}" in summary)
    print(f"{cfg.env} {args.model}: success {summary['success']:.3f} "
          f"[{summary['success_ci_bootstrap'][0]:.3f}, {summary['success_ci_bootstrap'][1]:.3f}] over "
          f"{summary['items']} items x {args.n}; {line}\n-> {out}")
    return summary


def _default_out(args, cfg, checkpoint: str | None, max_rounds: int) -> str:
    tag = f"{args.items.replace(':', '-')}_n{args.n}_T{args.temperature:g}_r{max_rounds}"
    if checkpoint:
        return os.path.join(os.path.dirname(os.path.dirname(checkpoint)), "eval",
                            f"{cfg.env}_{os.path.basename(checkpoint)}_{tag}")
    from .config import default_outputs_dir
    model = os.path.basename(os.path.normpath(args.model))
    return os.path.join(default_outputs_dir(), "eval", f"{cfg.env}_{model}_{cfg.preset}_{tag}")


if __name__ == "__main__":
    main()
