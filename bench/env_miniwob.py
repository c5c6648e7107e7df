"""MiniWoB env: browser start, reset time, env steps/s, expert success, browser memory over many episodes.

    .venv/bin/python bench/env_miniwob.py [--episodes 1000] [--seeds 2] [--tasks N] [--out FILE]

One env (one headless Chromium) plays the expert on `--seeds` seeds of every task the expert covers (or the first
`--tasks` of them; the expert's replies are computed first, by a second env in its own browser, closed before the
timing, and not timed), then runs `--episodes` short episodes (reset + one click) round-robin over all tasks,
sampling the browser's memory (PSS and RSS summed over chromedriver, chromium and its children) and process count
as it goes. Writes bench/results/env_miniwob.json (or --out) and prints a summary.
Timings on a shared 2-core machine are rough.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

from _common import commit, machine  # bench/_common.py

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def browser_memory(env) -> dict:
    """MiB of the env's browser processes: PSS (shared pages split fairly) and RSS (shared pages counted twice)."""
    pss = rss = 0
    processes = env.browser_processes()
    for process in processes:
        info = process.memory_full_info()
        pss, rss = pss + info.pss, rss + info.rss
    return {"processes": len(processes), "pss_mib": round(pss / 2**20, 1), "rss_mib": round(rss / 2**20, 1)}


def main() -> None:
    from agentgym_nb.envs.miniwob import EXPERT_TASKS, TASKS, MiniWoB

    p = argparse.ArgumentParser()
    p.add_argument("--episodes", type=int, default=1000)
    p.add_argument("--seeds", type=int, default=2)
    p.add_argument("--tasks", type=int, default=None, help="only the first N tasks the expert covers (quick runs)")
    p.add_argument("--out", default=os.path.join(ROOT, "bench", "results", "env_miniwob.json"))
    args = p.parse_args()

    env = MiniWoB()
    start = time.perf_counter()
    env.reset(0)
    first_reset = time.perf_counter() - start

    items = [TASKS.index(task) + seed * len(TASKS) for seed in range(args.seeds) for task in EXPERT_TASKS[:args.tasks]]
    planner = MiniWoB()   # the solvers read the pages they act on: played in a browser of their own, then closed
    plans = {item: [text for text, _ in planner.expert_episode(item)[1]] for item in items}
    planner.close()
    resets, steps, solved, step_seconds = [], 0, 0, 0.0
    for item in items:
        start = time.perf_counter()
        env.reset(item)
        resets.append(time.perf_counter() - start)
        start = time.perf_counter()
        for text in plans[item]:
            step = env.step(text)
            steps += 1
        step_seconds += time.perf_counter() - start
        solved += bool(step.done and env.success(step.reward))

    samples, start = [], time.perf_counter()
    for episode in range(args.episodes):
        observation = env.reset(episode % (len(TASKS) * 5))
        first_id = observation.split("[", 2)[1].split("]")[0]
        env.step(f"```click [{first_id}]```")
        if episode % max(1, args.episodes // 10) == 0 or episode == args.episodes - 1:
            samples.append({"episode": episode + 1, **browser_memory(env)})
    churn_seconds = time.perf_counter() - start
    env.close()

    result = {
        "benchmark": "env_miniwob", "date": time.strftime("%Y-%m-%d"), "commit": commit(), "machine": machine(),
        "tasks": len(TASKS),
        "expert_tasks": len(EXPERT_TASKS),
        "first_reset_seconds_with_browser_start": round(first_reset, 2),
        "reset_seconds": {"median": round(statistics.median(resets), 3), "max": round(max(resets), 3),
                          "resets": len(resets)},
        "expert": {"items": len(items), "solved": solved, "success_rate": round(solved / len(items), 4),
                   "steps": steps, "mean_replies": round(steps / len(items), 2)},
        "in_process_steps": {"steps": steps, "seconds": round(step_seconds, 2),
                             "steps_per_s": round(steps / step_seconds, 1)},
        "episodes_reset_plus_click": {"episodes": args.episodes, "seconds": round(churn_seconds, 1),
                                      "episodes_per_s": round(args.episodes / churn_seconds, 2)},
        "browser_memory_over_episodes": samples,
    }
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as out:
        json.dump(result, out, indent=2)
    first, last = samples[0], samples[-1]
    print(f"miniwob: first reset {first_reset:.1f}s, reset {result['reset_seconds']['median'] * 1000:.0f} ms, "
          f"{result['in_process_steps']['steps_per_s']} steps/s, expert {solved}/{len(items)}, browser PSS "
          f"{first['pss_mib']} -> {last['pss_mib']} MiB over {args.episodes} episodes "
          f"({first['processes']} -> {last['processes']} processes)")


if __name__ == "__main__":
    main()
