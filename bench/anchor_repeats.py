"""How often GiGPO's anchor states repeat within a group, per env, at the cpu preset. Without repeats GiGPO's step
level is empty and it is GRPO.

    .venv/bin/python bench/anchor_repeats.py [--envs babyai textcraft] [--steps 2] [--babyai-tracks one-room long]
    .venv/bin/python bench/anchor_repeats.py --preset smoke --out <file> ...   (a test of the script itself)

For each env (and BabyAI track) the cpu preset's nano model (built if missing) plays the training groups of the
first `--steps` training steps (the preset's prompts x oversampling x samples per prompt, at the preset's longest
horizon, T = 1), as training would. Over all turns:
  * shared: the share of turns whose anchor state (`Env.state_key`) is also the state of another turn of its group;
  * shared past turn 1: the same among turns k >= 2 (a group's first turns always share the item's start state);
  * step credit: the share of turns whose GiGPO step advantage is not 0 (a shared state whose turns' discounted
    returns differ, gamma 0.95), i.e. where GiGPO gives credit that GRPO does not;
  * the mean size of a step group with more than one turn.
Writes bench/results/anchor_repeats.json (or --out): a row per env (and track), with the date and commit it was
measured at; the rows of envs not measured again stay. The file is read again before each write, so one process
per env can run beside another.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

from _common import commit, machine, versions  # bench/_common.py

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def measure(env: str, track: str | None, steps: int, threads: int | None = None, preset: str = "cpu",
            engine: str | None = None) -> dict:
    import torch

    from agentgym_nb.algos.advantages import gigpo
    from agentgym_nb.config import make_config
    from agentgym_nb.rollout.engine import SamplingParams
    from agentgym_nb.rollout.runner import run_episodes
    from agentgym_nb.rollout.trajectory import collate
    from agentgym_nb.seeds import mix_seed
    from agentgym_nb.train.rl import Trainer
    run_dir = tempfile.TemporaryDirectory(prefix="anchor_repeats_")   # the Trainer's run folder: nothing is kept
    cfg = make_config(preset=preset, env=env, track=track, name=f"anchor-repeats-{env}-{track or 'default'}",
                      out_dir=run_dir.name, **({"threads": threads} if threads else {}),
                      **({"engine": engine} if engine else {}))
    trainer = Trainer(cfg, log=lambda *a: print(*a, flush=True))   # a missing nano is built first: minutes
    horizon = max(cfg.rounds)
    counts = {"turns": 0, "shared": 0, "later_turns": 0, "later_shared": 0, "step_credit": 0, "episodes": 0}
    sizes = []
    t0 = time.time()
    try:
        for step in range(1, steps + 1):
            params = SamplingParams(temperature=cfg.temperature, top_p=cfg.top_p, max_tokens=cfg.max_tokens,
                                    seed=mix_seed(cfg.seed, step))
            trajs = run_episodes(trainer.engine, trainer.env_factory, trainer.items_for_step(step), trainer.chat,
                                 n=cfg.samples_per_prompt, max_rounds=horizon, params=params,
                                 max_total_tokens=cfg.max_total_tokens, env_timeout=cfg.env_timeout,
                                 max_concurrency=cfg.max_envs)
            trajs = [t for t in trajs if not t.failed and t.num_policy_tokens > 0]
            batch = collate(trajs, pad_id=trainer.tokenizer.pad_token_id)
            scores = torch.tensor([t.reward for t in trajs])
            group = torch.tensor([t.group for t in trajs])
            anchors = [t.anchors for t in trajs]
            args = (scores, group, batch["loss_mask"], batch["turn_ids"], anchors)
            step_part = gigpo(*args, gamma=0.95, step_weight=1.0) - gigpo(*args, gamma=0.95, step_weight=0.0)
            members: dict[tuple, int] = {}
            for b, states in enumerate(anchors):
                for state in states:
                    members[int(group[b]), state] = members.get((int(group[b]), state), 0) + 1
            sizes += [n for n in members.values() if n > 1]
            counts["episodes"] += len(trajs)
            for b, states in enumerate(anchors):
                for k, state in enumerate(states, start=1):
                    shared = members[int(group[b]), state] > 1
                    on_turn = batch["turn_ids"][b] == k
                    counts["turns"] += 1
                    counts["shared"] += shared
                    counts["step_credit"] += bool(step_part[b][on_turn].abs().max() > 1e-9) if on_turn.any() else 0
                    if k > 1:
                        counts["later_turns"] += 1
                        counts["later_shared"] += shared
    finally:
        trainer.close()
        run_dir.cleanup()
    share = lambda a, b: counts[a] / counts[b] if counts[b] else None   # noqa: E731
    return {"env": env, "track": cfg.track, "preset": preset, "horizon": horizon,
            "groups_per_step": cfg.prompts_per_step * cfg.oversample,
            "samples_per_prompt": cfg.samples_per_prompt, "steps": steps, **counts,
            "shared_share": share("shared", "turns"), "shared_past_turn_1_share": share("later_shared", "later_turns"),
            "step_credit_share": share("step_credit", "turns"),
            "mean_step_group_size": sum(sizes) / len(sizes) if sizes else None, "seconds": round(time.time() - t0, 1),
            "threads": cfg.threads, "engine": cfg.engine}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--envs", nargs="+", default=["babyai", "textcraft", "sciworld", "searchqa", "webarena"])
    ap.add_argument("--babyai-tracks", nargs="+", default=["one-room", "long"])
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--threads", type=int, help="torch threads (default: the preset's); 1 beside another job")
    ap.add_argument("--preset", default="cpu", choices=("cpu", "smoke"), help="smoke: a test of this script")
    ap.add_argument("--engine", choices=("vllm", "hf"), help="default: the preset's")
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results", "anchor_repeats.json"))
    args = ap.parse_args()
    path = args.out
    for env in args.envs:
        for track in (args.babyai_tracks if env == "babyai" else [None]):
            row = {**measure(env, track, args.steps, args.threads, args.preset, args.engine),
                   "date": time.strftime("%Y-%m-%d"),
                   "commit": commit()}
            # read just before writing: two processes (one env each, one core each) may finish in any order
            result = json.load(open(path)) if os.path.exists(path) else {"rows": {}}
            result["rows"][f"{env}/{row['track']}"] = row
            print(json.dumps(row), flush=True)
            result.update(date=time.strftime("%Y-%m-%d"), machine=machine(), versions=versions("torch", "vllm"),
                          commit=commit())
            with open(path, "w") as f:
                json.dump(result, f, indent=2)


if __name__ == "__main__":
    main()
