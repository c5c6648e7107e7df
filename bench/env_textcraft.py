"""TextCraft env: tree build time, expert success, env steps/s (in-process and over HTTP), server RSS over cycles.

    .venv/bin/python bench/env_textcraft.py [--cycles 10000] [--goals N] [--out FILE]

The server is the CLI (`python -m agentgym_nb.envs serve textcraft`) in its own process, so its RSS (VmRSS from
/proc) is the server's alone. Writes bench/results/env_textcraft.json (or --out) and prints a summary. Timings on a
shared 2-core machine are rough.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

import requests
from _common import commit, machine  # bench/_common.py

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from agentgym_nb.envs.http import start_server  # noqa: E402

BUILD = ("import time; from agentgym_nb.envs.textcraft import crafting_tree; t = time.perf_counter(); "
         "crafting_tree(); print(time.perf_counter() - t)")


def rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as status:
        kib = next(int(line.split()[1]) for line in status if line.startswith("VmRSS:"))
    return kib / 1024


def run_experts(make_env, items, expert) -> tuple[int, int, float]:
    """(solved, steps, seconds) replaying the expert on `items`."""
    solved = steps = 0
    env = make_env()
    start = time.perf_counter()
    for item in items:
        env.reset(item)
        for text in expert(item):
            step = env.step(text)
            steps += 1
        solved += bool(step.done and env.success(step.reward))
    seconds = time.perf_counter() - start
    env.close()
    return solved, steps, seconds


def cycles(url: str, n: int) -> float:
    """n x (/create, /reset, /step, /close) with one HTTP session; returns the seconds taken."""
    session = requests.Session()
    start = time.perf_counter()
    for k in range(n):
        env_id = session.post(f"{url}/create", json={}, timeout=30).json()["id"]
        session.post(f"{url}/reset", json={"id": env_id, "data_idx": k}, timeout=30).raise_for_status()
        answer = session.post(f"{url}/step", json={"id": env_id, "action": "inventory"}, timeout=30).json()
        assert answer["observation"].startswith("Inventory: "), answer
        assert session.post(f"{url}/close", json={"id": env_id}, timeout=30).json() is True
    return time.perf_counter() - start


def main() -> None:
    from agentgym_nb import envs
    from agentgym_nb.envs.textcraft import crafting_tree, expert_replies

    parser = argparse.ArgumentParser()
    parser.add_argument("--cycles", type=int, default=10_000)
    parser.add_argument("--goals", type=int, default=None, help="only the first N goals and test items (quick runs)")
    parser.add_argument("--out", default=os.path.join(ROOT, "bench", "results", "env_textcraft.json"))
    args = parser.parse_args()

    builds = [float(subprocess.run([sys.executable, "-c", BUILD], capture_output=True, text=True, check=True,
                                   cwd=ROOT).stdout) for _ in range(3)]
    test = envs.item_ids("textcraft", "test")[:args.goals]
    goals = range(len(crafting_tree().goals))[:args.goals]
    lengths = [len(expert_replies(i)) for i in test]
    solved_test, steps, seconds = run_experts(lambda: envs.make("textcraft"), test, expert_replies)
    solved_all, all_steps, all_seconds = run_experts(lambda: envs.make("textcraft"), goals, expert_replies)

    process, url = start_server("textcraft")
    try:
        http_solved, http_steps, http_seconds = run_experts(lambda: envs.connect("textcraft", url), test,
                                                            expert_replies)
        rss_start = rss_mib(process.pid)
        warm_seconds = cycles(url, min(500, args.cycles))
        rss_warm = rss_mib(process.pid)
        cycle_seconds = cycles(url, args.cycles)
        rss_end = rss_mib(process.pid)
        open_envs = requests.post(f"{url}/create", json={}, timeout=30).json()["id"]
    finally:
        process.terminate()
        process.wait(timeout=30)

    out = {
        "benchmark": "env_textcraft", "date": time.strftime("%Y-%m-%d"), "commit": commit(), "machine": machine(),
        "tree_build_seconds_fresh_process_after_import": {"runs": builds, "min": min(builds)},
        "goals": len(goals),
        "expert": {"test_items": len(test), "test_solved": solved_test, "test_success_rate": solved_test / len(test),
                   "all_goals_solved": solved_all, "all_goals_success_rate": solved_all / len(goals),
                   "test_mean_replies": sum(lengths) / len(lengths), "test_max_replies": max(lengths),
                   "test_items_within_30_rounds": sum(n <= 30 for n in lengths)},
        "in_process": {"steps": all_steps, "seconds": all_seconds, "steps_per_s": all_steps / all_seconds},
        "http": {"client": "envs.connect (one session, sequential)", "steps": http_steps, "seconds": http_seconds,
                 "steps_per_s": http_steps / http_seconds, "test_solved": http_solved},
        "server_memory": {"cycle": "/create, /reset, /step inventory, /close", "cycles": args.cycles,
                          "rss_mib_after_start_and_expert_run": rss_start,
                          "warmup_cycles": min(500, args.cycles), "rss_mib_after_warmup": rss_warm,
                          "rss_mib_after_cycles": rss_end, "growth_mib_over_cycles": rss_end - rss_warm,
                          "cycles_per_s": args.cycles / cycle_seconds, "warmup_seconds": warm_seconds,
                          "env_ids_issued": open_envs},
    }
    path = args.out
    with open(path, "w") as f:
        json.dump(out, f, indent=2)
        f.write("\n")
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
