"""Env server throughput and latency under 1, 8, 32 and 128 concurrent clients: ours against AgentGym's server design.

    .venv/bin/python bench/env_server.py [--clients 1 8 32 128] [--seconds 10] [--repeats 3]

Servers (BabyAI wire format, same BabyAI env code, loopback, each in its own processes):
- `agentgym`: AgentGym's agentenv-babyai server design, re-implemented here on our BabyAI env (`agentgym_app`):
  one uvicorn process with uvicorn's default logging (their launch.py), `async def create` run on the event loop,
  sync reset/step/close in FastAPI's default threadpool, a threading.Lock around the id counter only (no per-env
  lock), a new env built on every reset, and close = remove from the id list, env.close(), gc.collect(), print.
- `agentgym-nogc`: the same concurrency model without that per-request work (no gc.collect(), prints or access log):
  what the concurrency model alone costs or gains, one process like `ours`.
- `ours`: `python -m agentgym_nb.envs serve babyai` (one process).
- `ours-2w`: `python -m agentgym_nb.envs serve babyai --workers 2` (two processes on two ports; every client keeps to
  one port, clients alternate between them, as `envs.connect(name, [url0, url1])` places envs).

Load: C clients, each with one keep-alive connection (as AgentGym's requests-based clients), playing BabyAI episodes
back to back as AgentGym-RL does: POST /create, /reset, one /step per expert action (the extracted action, as
AgentGym's client posts it; at most 20, AgentGym-RL's BabyAI horizon), /close. Items: the first --items of the
shipped BabyAI train list (all 40 levels). The client is a small asyncio HTTP/1.1 client in this process, so little CPU
goes to it. For each (server, C): requests/s over a --seconds window (after a warm-up of --warmup seconds), p50 and
p99 latency over all requests and over /step alone, and the server processes' CPU milliseconds per request (a figure
that stays meaningful on a busy machine). Servers restart for every repeat; the order of the servers rotates.
Writes bench/results/env_server.json (with os.getloadavg()) and prints one line.
"""
from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import socket
import statistics
import subprocess
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from agentgym_nb.envs.http import free_ports  # noqa: E402
from agentgym_nb.envs.wire import IdBody, ResetBody, StepBody  # noqa: E402  (FastAPI resolves body types by name)
from _common import commit, machine, versions  # bench/_common.py

SERVERS = ("agentgym", "agentgym-nogc", "ours", "ours-2w")


# ------------------------------------------------------------------------------------ AgentGym's design, re-implemented
def agentgym_app(per_request_work: bool = True):
    """agentenv-babyai's server.py + BabyAIEnv (environment.py), on our BabyAI env: same endpoints and answers as
    our server, AgentGym's concurrency model and (with `per_request_work`) its per-request work: gc.collect() and
    prints in /close (a full collection is ~45 ms of CPU in a process holding minigrid, FastAPI and the env)."""
    from fastapi import FastAPI

    from agentgym_nb.envs import make

    app = FastAPI()
    lock = threading.Lock()
    state = {"max_id": 0, "env": {}, "info": {}, "ls": []}

    def check_id(idx: int, is_reset: bool = False) -> None:
        if idx not in state["info"]:
            raise ValueError(f"The id {idx} is not valid.")
        if not is_reset and state["info"][idx]["done"]:
            raise ValueError(f"The task with environment {idx} has finished.")

    @app.get("/")
    def hello():
        return "This is environment BabyAI."

    @app.post("/create")
    async def create():   # async: runs on the event loop
        with lock:
            idx = state["max_id"]
            state["max_id"] += 1
        state["info"][idx] = {"deleted": False, "done": False}
        state["ls"].append(idx)
        return {"id": idx}

    @app.post("/reset")
    def reset(body: ResetBody):
        try:
            check_id(body.id, True)
            env = state["env"][body.id] = make("babyai")   # a new env on every reset, as BabyAIEnv.reset
            observation = env.reset(body.data_idx)
            payload = {"observation": observation, "reward": env.reward, "score": env.score, "deleted": False,
                       "done": env.phase == "over"}
            state["info"][body.id].update(payload)
            return payload
        except Exception as e:  # noqa: BLE001
            return {"error": str(e)}

    @app.post("/step")
    def step(body: StepBody):
        try:
            check_id(body.id)
            env = state["env"][body.id]
            result = env.step(body.action) if "Action:" in body.action else env.act(body.action)
            payload = {"observation": result.observation, "reward": result.info.get("step_reward", 0.0),
                       "score": result.info["score"], "done": result.done}
            state["info"][body.id].update(payload)
            return payload
        except Exception as e:  # noqa: BLE001
            return {"error": str(e)}

    @app.post("/close")
    def close(body: IdBody):
        if per_request_work:
            print("body", body)
        try:
            state["ls"].remove(body.id)
            state["env"][body.id].close()
            del state["info"][body.id]
            del state["env"][body.id]
            if per_request_work:
                gc.collect()
                print(f"-------Env {body.id} closed--------")
            return True
        except (KeyError, ValueError):
            return False

    return app


# ----------------------------------------------------------------------------------------------------- servers
def start(server: str) -> tuple[subprocess.Popen, list[tuple[str, int]]]:
    workers = 2 if server == "ours-2w" else 1
    port = free_ports(workers)
    if server.startswith("agentgym"):
        cmd = [sys.executable, os.path.abspath(__file__), "--serve-baseline", server, str(port)]
    else:
        cmd = [sys.executable, "-m", "agentgym_nb.envs", "serve", "babyai", "--port", str(port),
               "--workers", str(workers)]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    addrs = [("127.0.0.1", port + i) for i in range(workers)]
    deadline = time.monotonic() + 180
    for host, p in addrs:
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"{server} server exited with {proc.returncode}: {' '.join(cmd)}")
            try:
                with socket.create_connection((host, p), timeout=1):
                    break
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{server} server did not listen on {p} within 180 s") from None
                time.sleep(0.2)
    return proc, addrs


def stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def server_cpu_seconds(proc: subprocess.Popen) -> float:
    import psutil
    parent = psutil.Process(proc.pid)
    total = 0.0
    for p in [parent, *parent.children(recursive=True)]:
        try:
            t = p.cpu_times()
            total += t.user + t.system
        except psutil.NoSuchProcess:
            pass
    return total


# ------------------------------------------------------------------------------------------------------ clients
class Connection:
    """One keep-alive HTTP/1.1 connection speaking JSON (just enough of HTTP for these servers)."""

    def __init__(self, host: str, port: int):
        self.host, self.port = host, port

    async def open(self) -> None:
        self.reader, self.writer = await asyncio.open_connection(self.host, self.port)

    async def post(self, path: str, body: dict | None = None):
        data = json.dumps(body).encode() if body is not None else b""
        self.writer.write(f"POST {path} HTTP/1.1\r\nhost: {self.host}:{self.port}\r\ncontent-type: application/json"
                          f"\r\ncontent-length: {len(data)}\r\n\r\n".encode() + data)
        head = await self.reader.readuntil(b"\r\n\r\n")
        status = int(head.split(b" ", 2)[1])
        length = next(int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                      if line.lower().startswith(b"content-length:"))
        answer = json.loads(await self.reader.readexactly(length))
        if status != 200 or (isinstance(answer, dict) and "error" in answer):
            raise RuntimeError(f"POST {path} {body} -> HTTP {status}: {answer}")
        return answer

    def close(self) -> None:
        self.writer.close()


async def play(conn: Connection, episodes: list[tuple[int, list[str]]], first: int, until: float, log: list) -> None:
    """Episodes back to back (create, reset, steps, close) until `until`; log (end time, seconds, endpoint)."""
    k = first
    clock = time.perf_counter
    while clock() < until:
        item, actions = episodes[k % len(episodes)]
        k += 1
        t = clock()
        env_id = (await conn.post("/create"))["id"]
        log.append((clock(), clock() - t, "create"))
        t = clock()
        await conn.post("/reset", {"id": env_id, "data_idx": item})
        log.append((clock(), clock() - t, "reset"))
        for action in actions:
            t = clock()
            done = (await conn.post("/step", {"id": env_id, "action": action}))["done"]
            log.append((clock(), clock() - t, "step"))
            if done:
                break
        t = clock()
        await conn.post("/close", {"id": env_id})
        log.append((clock(), clock() - t, "close"))


async def load(addrs, clients: int, episodes, warmup: float, seconds: float, proc) -> dict:
    conns = [Connection(*addrs[i % len(addrs)]) for i in range(clients)]
    await asyncio.gather(*(c.open() for c in conns))
    log: list = []
    begin = time.perf_counter()
    t0, t1 = begin + warmup, begin + warmup + seconds
    cpu = {}

    async def mark(at: float, key: str) -> None:
        await asyncio.sleep(max(0.0, at - time.perf_counter()))
        cpu[key] = (server_cpu_seconds(proc), time.process_time())

    await asyncio.gather(mark(t0, "t0"), mark(t1, "t1"),
                         *(play(c, episodes, i * 7, t1, log) for i, c in enumerate(conns)))
    for c in conns:
        c.close()
    window = [(lat, kind) for end, lat, kind in log if t0 <= end < t1]
    if not window:
        raise RuntimeError(f"no request to {addrs} finished in the {seconds} s window after a {warmup} s warm-up "
                           f"({clients} clients): lengthen --seconds or --warmup")
    lat = sorted(x for x, _ in window)
    steps = sorted(x for x, kind in window if kind == "step")
    return {"requests_per_s": len(window) / seconds, "p50_ms": 1000 * pct(lat, 50), "p99_ms": 1000 * pct(lat, 99),
            "step_p50_ms": 1000 * pct(steps, 50), "step_p99_ms": 1000 * pct(steps, 99), "requests": len(window),
            "server_cpu_ms_per_request": 1000 * (cpu["t1"][0] - cpu["t0"][0]) / len(window),
            "client_cpu_ms_per_request": 1000 * (cpu["t1"][1] - cpu["t0"][1]) / len(window)}


def pct(sorted_xs: list[float], q: float) -> float:
    """The q-th percentile (nearest rank)."""
    if not sorted_xs:
        return float("nan")
    return sorted_xs[min(len(sorted_xs) - 1, max(0, round(q / 100 * len(sorted_xs)) - 1))]


def expert_episodes(count: int, horizon: int = 20) -> list[tuple[int, list[str]]]:
    """(item, extracted expert actions, at most `horizon`: AgentGym-RL's BabyAI rounds) for the first `count` items
    of the shipped BabyAI train list (all 40 levels)."""
    from agentgym_nb import envs
    env = envs.make("babyai")
    items = envs.item_ids("babyai", "train")[:count]
    episodes = [(item, [env.parse_action(reply) for reply in env.expert(item)][:horizon]) for item in items]
    return [(item, actions) for item, actions in episodes if actions]


def run_loop(coro):
    try:
        import uvloop
        return uvloop.run(coro)
    except ImportError:
        return asyncio.run(coro)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--servers", nargs="+", default=list(SERVERS), choices=SERVERS)
    p.add_argument("--clients", nargs="+", type=int, default=[1, 8, 32, 128])
    p.add_argument("--seconds", type=float, default=10.0, help="measured window per (server, clients)")
    p.add_argument("--warmup", type=float, default=3.0)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--items", type=int, default=64, help="BabyAI items the clients cycle through")
    p.add_argument("--serve-baseline", nargs=2, default=None, metavar=("SERVER", "PORT"), help=argparse.SUPPRESS)
    p.add_argument("--out", default=os.path.join(ROOT, "bench", "results", "env_server.json"))
    args = p.parse_args()
    if args.serve_baseline is not None:   # a baseline server process (started by this script)
        import uvicorn
        faithful = args.serve_baseline[0] == "agentgym"
        # AgentGym's launch.py: uvicorn's defaults (access log on); the -nogc variant logs as ours does (not at all)
        uvicorn.run(agentgym_app(per_request_work=faithful), host="127.0.0.1", port=int(args.serve_baseline[1]),
                    access_log=faithful)
        return
    load_before = os.getloadavg()
    episodes = expert_episodes(args.items)
    runs = {s: {c: [] for c in args.clients} for s in args.servers}
    for r in range(args.repeats):
        order = args.servers[r % len(args.servers):] + args.servers[:r % len(args.servers)]
        for server in order:
            proc, addrs = start(server)
            try:
                for clients in args.clients:
                    result = run_loop(load(addrs, clients, episodes, args.warmup, args.seconds, proc))
                    runs[server][clients].append(result)
                    print(f"  repeat {r} {server:8s} {clients:4d} clients: {result['requests_per_s']:7.0f} req/s, "
                          f"p50 {result['p50_ms']:6.1f} ms, p99 {result['p99_ms']:7.1f} ms, "
                          f"server {result['server_cpu_ms_per_request']:.2f} CPU ms/req", flush=True)
            finally:
                stop(proc)
    medians = {s: {str(c): {f"median_{k}": statistics.median(x[k] for x in rs) for k in rs[0]}
                   for c, rs in per.items()} for s, per in runs.items()}
    out = {"benchmark": "env_server", "date": time.strftime("%Y-%m-%d"), "commit": commit(), "machine": machine(),
           "versions": versions("fastapi", "starlette", "uvicorn", "pydantic", "minigrid", "uvloop", "httptools"),
           "loadavg_before": load_before, "loadavg_after": os.getloadavg(),
           "params": {"env": "babyai", "clients": args.clients, "seconds": args.seconds, "warmup": args.warmup,
                      "repeats": args.repeats, "items": args.items,
                      "mean_steps_per_episode": statistics.mean(len(a) for _, a in episodes)},
           "results": medians, "runs": {s: {str(c): rs for c, rs in per.items()} for s, per in runs.items()}}
    if "agentgym" in medians:
        out["ratio_vs_agentgym"] = {s: {c: {"requests_per_s": v["median_requests_per_s"]
                                            / medians["agentgym"][c]["median_requests_per_s"],
                                            "p99": v["median_p99_ms"] / medians["agentgym"][c]["median_p99_ms"]}
                                        for c, v in per.items()} for s, per in medians.items() if s != "agentgym"}
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(out, f, indent=2)
    c32 = "32" if "32" in next(iter(medians.values())) else str(args.clients[-1])
    print(f"env_server ({c32} clients): " + "; ".join(
        f"{s}: {v[c32]['median_requests_per_s']:.0f} req/s, p99 {v[c32]['median_p99_ms']:.1f} ms"
        for s, v in medians.items()) + f" (load {load_before[0]:.1f}) -> {args.out}")








if __name__ == "__main__":
    main()
