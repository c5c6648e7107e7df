"""SciWorld: expert success on the shipped test items, steps/s in-process and over HTTP, server memory over many cycles.

    .venv/bin/python bench/env_sciworld.py [--cycles 10000] [--steps-per-cycle 1] [--limit N] [--out FILE]

1. Expert: for every test item, scienceworld's gold actions as replies after reset(); success = score 100 (within
   scienceworld's 100-move limit; also counted within 30 replies, AgentGym-RL's SciWorld eval horizon).
2. In-process steps/s: the env's lean step, against scienceworld's own ScienceWorldEnv.step (which lists all valid
   actions) on the same actions of one episode.
3. HTTP: a server started by the CLI (`python -m agentgym_nb.envs serve sciworld`), driven like AgentGym's client
   for --cycles create / reset / step(s) / close cycles; steps/s, and the resident memory of the server process plus
   its JVMs after the first cycle, every 500 cycles and at the end (a JVM's heap grows up to -Xmx before it levels).
Writes bench/results/env_sciworld.json (or --out) and prints a summary. Timings on a shared 2-core machine are rough.
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import time

import psutil
import requests
from _common import commit, machine  # bench/_common.py

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from agentgym_nb.envs.http import free_ports  # noqa: E402


def rss_mb(pid: int) -> dict:
    """Resident memory of the server process and of its JVMs, in MB."""
    process = psutil.Process(pid)
    jvms = [p for p in process.children(recursive=True) if p.name() == "java"]
    python, java = process.memory_info().rss / 2**20, sum(p.memory_info().rss for p in jvms) / 2**20
    return {"python": round(python, 1), "jvms": round(java, 1), "total": round(python + java, 1),
            "jvm_count": len(jvms)}


def expert_run(items: list[int]) -> tuple[dict, dict[int, list[str]]]:
    from agentgym_nb.envs import make

    env = make("sciworld")
    rows, actions, step_seconds, steps = [], {}, 0.0, 0
    try:
        for item in items:
            t0 = time.perf_counter()
            replies = env.expert(item)
            gold_s = time.perf_counter() - t0
            env.reset(item)
            step, within_30 = None, False
            for turn, reply in enumerate(replies, 1):
                t1 = time.perf_counter()
                step = env.step(reply)
                step_seconds += time.perf_counter() - t1
                steps += 1
                if step.done:
                    within_30 = turn <= 30 and env.success(step.reward)
                    break
            actions[item] = [env.parse_action(r) for r in replies]
            rows.append({"item": item, "task": env.category(item), "score": step.info["score"] if step else 0,
                         "success": bool(step and env.success(step.reward)), "success_within_30_rounds": within_30,
                         "replies": len(replies),
                         "moves": env.moves, "gold_seconds": round(gold_s, 3)})
            print(f"expert {item} {rows[-1]['task']}: {rows[-1]['score']}", flush=True)
    finally:
        env.close()
    by_task = collections.defaultdict(list)
    for row in rows:
        by_task[row["task"]].append(row["success"])
    result = {"items": len(rows), "success_rate": sum(r["success"] for r in rows) / len(rows),
              "success_rate_within_30_rounds": sum(r["success_within_30_rounds"] for r in rows) / len(rows),
              "mean_score": sum(r["score"] for r in rows) / len(rows),
              "per_task_success": {t: sum(s) / len(s) for t, s in by_task.items()},
              "failures": [r for r in rows if not r["success"]],
              "steps": steps, "lean_steps_per_s": steps / step_seconds}
    return result, actions


def package_step_speed(item: int, actions: list[str]) -> dict:
    """Steps/s of scienceworld's own ScienceWorldEnv.step vs ours on the same episode (same JVM options aside)."""
    from scienceworld import ScienceWorldEnv

    from agentgym_nb.envs.sciworld import game

    task, variation = game(item)
    env = ScienceWorldEnv()
    try:
        env.load(task, variation)
        env.step("look around")
        t0 = time.perf_counter()
        for action in actions:
            env.step(action)
        seconds = time.perf_counter() - t0
    finally:
        env.close()
    return {"item": item, "steps": len(actions), "package_steps_per_s": len(actions) / seconds}


def agentgym_action(reply: str) -> str:
    """AgentGym's SciworldEnvClient.step parsing (ReAct): text after the last "Action:", stripped."""
    parts = reply.rsplit("Action:", 1)
    return parts[1].strip() if len(parts) == 2 else ""


def http_run(actions: dict[int, list[str]], cycles: int, steps_per_cycle: int) -> dict:
    """`cycles` create/reset/step/close cycles over HTTP (AgentGym's client calls), each playing the first
    `steps_per_cycle` expert actions of the next test item; the server's RSS (Python + its JVMs) after the first
    cycle, after every 500 and at the end."""
    port = free_ports()
    url = f"http://127.0.0.1:{port}"
    server = subprocess.Popen([sys.executable, "-m", "agentgym_nb.envs", "serve", "sciworld", "--port", str(port)],
                              cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(600):
            try:
                requests.get(url + "/", timeout=1)
                break
            except requests.ConnectionError:
                time.sleep(0.1)
        session = requests.Session()

        def post(path, body=None):
            answer = session.post(f"{url}/{path}", json=body, timeout=300)
            assert answer.status_code == 200, answer.text
            data = answer.json()
            assert not (isinstance(data, dict) and "error" in data), data
            return data

        items = sorted(actions)
        steps = 0
        memory = []  # (cycles so far, RSS)
        step_seconds = 0.0
        t0 = time.perf_counter()
        for cycle in range(1, cycles + 1):
            item = items[cycle % len(items)]
            env_id = session.post(f"{url}/create", timeout=300).json()["id"]  # AgentGym's client: no body
            post("reset", {"id": env_id, "data_idx": item})
            for action in actions[item][:steps_per_cycle]:
                t1 = time.perf_counter()
                done = post("step", {"id": env_id, "action": action})["done"]
                step_seconds += time.perf_counter() - t1
                steps += 1
                if done:
                    break
            assert post("close", {"id": env_id}) is True
            if cycle == 1 or cycle % 500 == 0 or cycle == cycles:
                memory.append((cycle, rss_mb(server.pid)))
        seconds = time.perf_counter() - t0
        warm = next((m for c, m in memory if c >= 500), memory[0][1])
        return {"cycles": cycles, "steps_per_cycle": steps_per_cycle, "steps": steps, "seconds": seconds,
                "http_steps_per_s": steps / max(step_seconds, 1e-9), "cycles_per_s": cycles / seconds,
                "server_rss_mb_after_first_cycle": memory[0][1], "server_rss_mb_after_500_cycles": warm,
                "server_rss_mb_at_end": memory[-1][1],
                "growth_mb_after_warmup": round(memory[-1][1]["total"] - warm["total"], 1),
                "rss_mb_by_cycles": memory}
    finally:
        server.terminate()
        server.wait(timeout=60)


def main() -> None:
    import scienceworld

    from agentgym_nb.envs import item_ids
    from agentgym_nb.envs.sciworld import JAVA_OPTIONS, JVMS

    p = argparse.ArgumentParser()
    p.add_argument("--cycles", type=int, default=10_000, help="create/reset/step/close cycles over HTTP")
    p.add_argument("--steps-per-cycle", type=int, default=1, help="expert actions played per cycle")
    p.add_argument("--limit", type=int, default=None, help="only the first N test items (quick runs)")
    p.add_argument("--out", default=os.path.join(ROOT, "bench", "results", "env_sciworld.json"))
    args = p.parse_args()
    items = item_ids("sciworld", "test")[: args.limit]
    expert, actions = expert_run(items)
    JVMS.close_idle()
    sample = min(actions, key=lambda i: abs(len(actions[i]) - 20))  # a typical episode for the package comparison
    package = package_step_speed(sample, actions[sample])
    http = http_run(actions, args.cycles, args.steps_per_cycle)
    out = {"benchmark": "env_sciworld", "date": time.strftime("%Y-%m-%d"), "commit": commit(), "machine": machine(),
           "versions": {"scienceworld": scienceworld.__version__, "java_options": list(JAVA_OPTIONS)},
           "note": "shared 2-core machine: timings are rough (+-30% or worse)",
           "expert": expert, "in_process_package_step": package, "http": http}
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(out, f, indent=2)
    print(f"expert success {expert['success_rate']:.3f} on {expert['items']} test items; lean steps/s "
          f"{expert['lean_steps_per_s']:.0f}, package steps/s {package['package_steps_per_s']:.1f}; HTTP steps/s "
          f"{http['http_steps_per_s']:.0f} over {http['steps']} steps / {http['cycles']} cycles; server RSS "
          f"{http['server_rss_mb_after_first_cycle']['total']} -> {http['server_rss_mb_after_500_cycles']['total']} "
          f"(500 cycles) -> {http['server_rss_mb_at_end']['total']} MB")


if __name__ == "__main__":
    main()
