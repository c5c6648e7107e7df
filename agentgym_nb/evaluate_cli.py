"""The evaluation command line: a model name, an HF folder or a training run, evaluated on an env's items.

    python -m agentgym_nb.evaluate_cli --env babyai --model outputs/runs/<name> --n 16 --k 1,2,4,8,16

It stands above the rooms it joins: evaluate/ measures, models.py builds a model, train/checkpoint.py reads a run's
weights.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os

from . import envs, models
from .config import RunConfig, item_pool, make_config, parse_list
from .evaluate import evaluate
from .paths import default_outputs_dir
from .rollout.engine import SamplingParams, make_engine
from .rollout.trajectory import ChatFormat
from .train.checkpoint import checkpoint_model_dir, is_run_dir, latest_checkpoint


def parse_ks(text: str, n: int) -> list[int]:
    """"1,2,4" (or "[1, 2, 4]") -> [1, 2, 4]; every k must be in [1, n]."""
    ks = [k for k in parse_list(text, "--k") if k != ""]
    if not all(isinstance(k, int) and not isinstance(k, bool) for k in ks):
        raise ValueError(f"--k must be comma-separated integers such as 1,2,4,8,16, got {text!r}")
    ks = sorted(set(ks))
    bad = [k for k in ks if not 1 <= k <= n]
    if not ks or bad:
        raise ValueError(f"--k {text}: every k must be in [1, n={n}] (pass@k needs k <= n samples per item)")
    return ks


def parse_items(text: str, cfg) -> list[int]:
    """"test" / "train": the items a run of `cfg` evaluates or trains on (`config.item_pool`: only `cfg.levels`);
    "a:b": item ids a..b-1, whatever their level."""
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
    p = argparse.ArgumentParser(prog="python -m agentgym_nb.evaluate_cli",
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
    model = os.path.basename(os.path.normpath(args.model))
    return os.path.join(default_outputs_dir(), "eval", f"{cfg.env}_{model}_{cfg.preset}_{tag}")


if __name__ == "__main__":   # a spawned worker process re-imports this module under another name
    main()
