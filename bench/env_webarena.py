"""WebArena env cost on real Chromium: steps/s, memory per live browser context, and memory over many episodes.

    .venv/bin/python bench/env_webarena.py [--episodes 1000] [--contexts 8] [--tasks 20] [--out FILE]
    .venv/bin/python bench/env_webarena.py --expert-check [--tasks N]   # the expert over every generated task
                                                                        # (20-50 min), or over the first N

1. speed: the expert's replies of `--tasks` offline tasks replayed in one env (reset, then every step).
2. memory per live context: Chromium's proportional set size (PSS, shared pages split fairly) with `--contexts` envs
   holding a loaded page each, minus the same with none, divided by `--contexts`.
3. flatness: `--episodes` episodes the way a rollout runs them (a new env per episode, three alive at a time,
   reset + scroll + stop, closed); every 10% the RSS of this process, Chromium's RSS/PSS, its live processes and its
   zombies are sampled.
Writes bench/results/env_webarena.json (or --out) and prints a summary. Timings on a shared machine are rough.

`--expert-check` instead plays the scripted expert through one env over every generated training task (ids from
1000), checks that doing nothing (`stop []` at once) earns 0 on the navigation and content-changing ones, and notes
string answers that are not in the final observation; writes bench/results/env_webarena_expert.json (or --out).
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import statistics
import sys
import time

import psutil
from _common import commit, machine  # bench/_common.py

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

MIB = 2 ** 20


def chromium() -> list[psutil.Process]:
    found = []
    for process in psutil.Process().children(recursive=True):
        try:
            if "chrom" in process.name().lower():
                found.append(process)
        except psutil.NoSuchProcess:
            pass
    return found


def memory() -> dict:
    """This process's RSS and Chromium's summed RSS and PSS (MiB), live process count and zombies."""
    rss = pss = 0
    live = zombies = 0
    for process in chromium():
        try:
            if process.status() == psutil.STATUS_ZOMBIE:
                zombies += 1
                continue
            info = process.memory_full_info()
            rss, pss, live = rss + info.rss, pss + info.pss, live + 1
        except psutil.NoSuchProcess:
            pass
    return {"python_rss_mib": psutil.Process().memory_info().rss / MIB, "chromium_rss_mib": rss / MIB,
            "chromium_pss_mib": pss / MIB, "chromium_processes": live, "chromium_zombies": zombies}


def settle() -> dict:
    """memory() once the Chromium process count has been steady for half a second (exiting renderers)."""
    last = None
    for _ in range(50):
        sample = memory()
        if last is not None and (sample["chromium_processes"], sample["chromium_zombies"]) == (
                last["chromium_processes"], last["chromium_zombies"]):
            return sample
        last = sample
        time.sleep(0.5)
    return last


def reply(action: str) -> str:
    return f"Let's think step-by-step. In summary, the next action I will perform is ```{action}```"


def main() -> None:
    from agentgym_nb.envs import item_ids, make, web, webarena
    from agentgym_nb.envs.web.tasks import TASKS

    parser = argparse.ArgumentParser()
    parser.add_argument("--episodes", type=int, default=1000)
    parser.add_argument("--contexts", type=int, default=8)
    parser.add_argument("--tasks", type=int, default=None,
                        help="tasks replayed for the speed (default 20); with --expert-check: only the first N")
    parser.add_argument("--expert-check", action="store_true", help="only: the expert over every generated task")
    parser.add_argument("--out", default=None, help="default: bench/results/env_webarena.json, or with "
                                                    "--expert-check env_webarena_expert.json")
    args = parser.parse_args()
    results = os.path.join(ROOT, "bench", "results")
    if args.expert_check:
        return expert_check(args.tasks, args.out or os.path.join(results, "env_webarena_expert.json"))
    args.tasks = args.tasks or 20
    args.out = args.out or os.path.join(results, "env_webarena.json")

    # 1. speed
    items = item_ids("webarena", "train")[:args.tasks]
    env = make("webarena")
    replies = {item: env.expert(item) for item in items}
    env.reset(items[0])  # warm: browser, sites, context
    step_times, reset_times, rewards = [], [], []
    for item in items:
        t0 = time.perf_counter()
        env.reset(item)
        reset_times.append(time.perf_counter() - t0)
        for text in replies[item]:
            t0 = time.perf_counter()
            step = env.step(text)
            step_times.append(time.perf_counter() - t0)
        rewards.append(step.reward)
    env.close()
    speed = {"tasks": len(items), "steps": len(step_times),
             "expert_success": sum(r >= 1 for r in rewards) / len(rewards),
             "steps_per_s": len(step_times) / sum(step_times), "median_step_s": statistics.median(step_times),
             "median_reset_s": statistics.median(reset_times),
             "episode_s_with_resets": (sum(step_times) + sum(reset_times)) / len(items)}

    # 2. memory per live context
    webarena.POOL.run(_drop_idle(webarena.POOL), 60)
    empty = settle()
    envs = [make("webarena") for _ in range(args.contexts)]
    for k, e in enumerate(envs):
        e.reset(items[k % len(items)])
    loaded = settle()
    for e in envs:
        e.close()
    per_context = {"contexts": args.contexts, "empty": empty, "loaded": loaded,
                   "pss_mib_per_context": (loaded["chromium_pss_mib"] - empty["chromium_pss_mib"]) / args.contexts,
                   "rss_mib_per_context": (loaded["chromium_rss_mib"] - empty["chromium_rss_mib"]) / args.contexts,
                   "processes_per_context":
                       (loaded["chromium_processes"] - empty["chromium_processes"]) / args.contexts}

    # 3. flatness over many episodes (a new env per episode, three alive at a time, as the rollout runner does)
    samples, alive, t0 = [], [], time.perf_counter()
    every = max(1, args.episodes // 10)
    for episode in range(args.episodes):
        e = make("webarena")
        e.reset(episode % len(TASKS))
        e.step(reply("scroll [down]"))
        e.step(reply("stop [x]"))
        alive.append(e)
        if len(alive) == 3:
            alive.pop(0).close()
        if (episode + 1) % every == 0:
            samples.append({"episodes": episode + 1, "seconds": time.perf_counter() - t0, **memory()})
            print(f"{episode + 1} episodes, {samples[-1]['seconds']:.0f} s, chromium PSS "
                  f"{samples[-1]['chromium_pss_mib']:.0f} MiB", file=sys.stderr, flush=True)
    for e in alive:
        e.close()
    final = settle()
    first, warm, last = samples[0], samples[min(1, len(samples) - 1)], samples[-1]
    flat = {"episodes": args.episodes, "episodes_per_s": args.episodes / (time.perf_counter() - t0),
            "samples": samples, "after_closing_all": final,
            "python_rss_growth_mib": last["python_rss_mib"] - first["python_rss_mib"],
            "chromium_pss_growth_mib": last["chromium_pss_mib"] - first["chromium_pss_mib"],
            "chromium_pss_growth_after_warmup_mib": last["chromium_pss_mib"] - warm["chromium_pss_mib"],
            "max_chromium_processes": max(s["chromium_processes"] for s in samples),
            "max_zombies_sampled": max(s["chromium_zombies"] for s in samples),
            "site_episode_states_left": len(web.STORE)}

    webarena.shutdown_browser()
    web.stop()
    left = len([p for p in chromium() if p.is_running() and p.status() != psutil.STATUS_ZOMBIE])
    out = {"benchmark": "env_webarena", "date": time.strftime("%Y-%m-%d"), "commit": commit(),
           "machine": {**machine(), "load_average_1min": os.getloadavg()[0]},
           "versions": {"playwright": _version("playwright"), "chromium": _chromium_version()},
           "params": vars(args), "speed": speed, "memory_per_context": per_context, "flatness": flat,
           "chromium_processes_after_shutdown": left}
    path = args.out
    with open(path, "w") as f:
        json.dump(out, f, indent=2)
    print(f"steps/s {speed['steps_per_s']:.1f} (median step {speed['median_step_s'] * 1000:.0f} ms, reset "
          f"{speed['median_reset_s'] * 1000:.0f} ms); per live context "
          f"{per_context['pss_mib_per_context']:.0f} MiB PSS "
          f"({per_context['rss_mib_per_context']:.0f} MiB RSS); {args.episodes} episodes: python RSS "
          f"{first['python_rss_mib']:.0f}->{last['python_rss_mib']:.0f} MiB, chromium PSS "
          f"{first['chromium_pss_mib']:.0f}->{warm['chromium_pss_mib']:.0f}->{last['chromium_pss_mib']:.0f} MiB "
          f"(samples {first['episodes']}, {warm['episodes']}, {last['episodes']}), max zombies sampled "
          f"{flat['max_zombies_sampled']}, chromium processes after shutdown {left} -> {path}")


def expert_check(limit: int | None, path: str) -> None:
    from agentgym_nb.envs import make
    from agentgym_nb.envs.web import tasks
    from agentgym_nb.envs.webarena.expert import play

    env, t0 = make("webarena"), time.perf_counter()
    rows, failures = [], []
    for item in tasks.generated_ids()[:limit]:
        task, config = tasks.task(item), tasks.config(item)
        kind = config["eval"]["eval_types"][0]
        row = {"item": item, "template": task.template_id, "sites": "+".join(task.sites), "kind": kind}
        try:
            if kind != "string_match":  # an empty answer cannot pass string_match; the start page might pass these
                env.reset(item)
                row["noop_reward"] = env.step(reply("stop []")).reward
            row["actions"] = len(play(env, item)[1])  # RuntimeError unless the plan earns reward 1
            if kind == "string_match":
                answers = config["eval"]["reference_answers"]
                wanted = answers.get("must_include") or [answers.get("exact_match")]
                row["answer_in_view"] = all(a.lower() in env.tree.lower() for a in wanted)
        except Exception as error:  # noqa: BLE001  (report every failing task, not just the first)
            row["error"] = f"{error.__class__.__name__}: {error}"
            failures.append(row)
        rows.append(row)
        if len(rows) % 50 == 0:
            print(f"{len(rows)} tasks, {time.perf_counter() - t0:.0f} s, {len(failures)} failures", file=sys.stderr,
                  flush=True)
    env.close()
    seconds = time.perf_counter() - t0
    solved = [r for r in rows if "error" not in r]
    per_template = {}
    for r in rows:
        entry = per_template.setdefault(r["template"], {"tasks": 0, "solved": 0, "actions": [], "sites": r["sites"]})
        entry["tasks"] += 1
        if "error" not in r:
            entry["solved"] += 1
            entry["actions"].append(r["actions"])
    for entry in per_template.values():
        actions = entry.pop("actions")
        entry["actions_min_median_max"] = [min(actions), statistics.median(actions), max(actions)] if actions else []
    out = {"benchmark": "env_webarena_expert", "date": time.strftime("%Y-%m-%d"), "commit": commit(),
           "machine": {**machine(), "load_average_1min": os.getloadavg()[0]},
           "tasks": len(rows), "solved": len(solved), "seconds": round(seconds, 1),
           "per_site": dict(sorted(collections.Counter(r["sites"] for r in rows).items())),
           "per_kind": dict(sorted(collections.Counter(r["kind"] for r in rows).items())),
           "actions_histogram": dict(sorted(collections.Counter(r["actions"] for r in solved).items())),
           "per_template": dict(sorted(per_template.items())),
           "noop_passes": [r["item"] for r in rows if r.get("noop_reward", 0) > 0],
           "answer_not_in_view": [(r["item"], r["template"]) for r in rows if r.get("answer_in_view") is False],
           "failures": failures}
    with open(path, "w") as f:
        json.dump(out, f, indent=1)
    print(f"expert solved {len(solved)}/{len(rows)} generated tasks in {seconds:.0f} s; stop-at-once passes "
          f"{len(out['noop_passes'])}; string answers not in view {len(out['answer_not_in_view'])} -> {path}")


async def _drop_idle(pool) -> None:
    """Close the pool's idle contexts, so that 'no live context' means no renderer at all."""
    idle, pool.idle = pool.idle, []
    for context in idle:
        await context.close()


def _version(package: str) -> str:
    from importlib.metadata import version

    return version(package)


def _chromium_version() -> str:
    import subprocess

    from agentgym_nb.envs.webarena import chromium_path

    return subprocess.run([chromium_path(), "--version"], capture_output=True, text=True, timeout=30).stdout.strip()


if __name__ == "__main__":
    main()
