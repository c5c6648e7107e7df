"""AgentGym's HTTP protocol, the server: `make_app` puts a registered env's routes (its own or BabyAI's, see
`envs/wire.py`) and a pool of its envs together; `serve`, `serve_workers` and `start_server` run that app in one or
several processes.
"""
from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import tempfile
import time

import requests
import uvicorn
from fastapi import FastAPI

from .base import EnvError
from .registry import env_class, make
from .wire import EnvPool, id_routes


def make_app(name: str, **kw) -> FastAPI:
    """The FastAPI app serving env `name` (built with `make(name, **kw)`) over AgentGym's protocol."""
    cls = env_class(name)
    pool = EnvPool(lambda: make(name, **kw))
    app = FastAPI(title=f"agentgym-nb {name}")
    app.state.pool = pool
    (cls.http_routes or id_routes)(app, pool, cls)
    return app


def free_ports(count: int = 1, host: str = "127.0.0.1") -> int:
    """A port p such that p, p+1, ..., p+count-1 are free on `host` now (for `serve --port p --workers count`).

    Asks the OS for a free port rather than trusting a fixed one: fixed ports such as 36002 sit inside Linux's
    ephemeral range (32768-60999), so any outgoing connection on the machine may hold them at the wrong moment."""
    for _ in range(100):
        with socket.socket() as s:
            s.bind((host, 0))
            port = s.getsockname()[1]
        try:
            for i in range(count):
                with socket.socket() as s:
                    s.bind((host, port + i))
            return port
        except OSError:
            continue
    raise RuntimeError(f"found no {count} consecutive free ports on {host}")


def server_options(options: dict) -> list[str]:
    """An env's constructor options as `serve` arguments: --set key=<JSON> (paths as text)."""
    return [arg for key, value in options.items() for arg in ("--set", f"{key}={json.dumps(value, default=str)}")]


def start_server(name: str, port: int = 0, host: str = "127.0.0.1", timeout: float = 120.0,
                 **options) -> tuple[subprocess.Popen, str]:
    """Start `python -m agentgym_nb.envs serve <name>` in its own process and wait until it answers GET / (AgentGym's
    health check). Returns (process, url); the caller stops it with process.terminate().

    port=0 picks a free port. A port found free can still be taken before the server binds it: any process on the
    machine may be handed it as an ephemeral port (SciWorld's JVM, a Jupyter kernel). A server that exits with
    "address already in use" on a port picked here is therefore started again on another: three ports in all. A
    server that exits for any other reason, or does not answer within `timeout` seconds, raises EnvError with the end
    of its stderr."""
    for _ in range(3):
        chosen = port or free_ports(host=host)
        url = f"http://{host}:{chosen}"
        stderr = tempfile.TemporaryFile(mode="w+")   # a file, not a pipe: a pipe nobody reads can fill and block it
        process = subprocess.Popen([sys.executable, "-m", "agentgym_nb.envs", "serve", name, *server_options(options),
                                    "--host", host, "--port", str(chosen)],
                                   stdout=subprocess.DEVNULL, stderr=stderr, text=True)
        deadline = time.monotonic() + timeout
        while process.poll() is None and time.monotonic() < deadline:
            try:
                requests.get(url + "/", timeout=2)
            except requests.RequestException:
                time.sleep(0.2)
                continue
            if process.poll() is None:   # the answer came from our server, not from whoever holds the port
                stderr.close()           # the server writes to its own copy of the file
                return process, url
        if process.poll() is None:
            process.kill()
            process.wait()
            stderr.close()
            raise EnvError(f"the {name} server at {url} did not answer GET / within {timeout:g}s")
        stderr.seek(0)
        log = stderr.read()[-2000:]
        stderr.close()
        if port or "address already in use" not in log:
            raise EnvError(f"the {name} server at {url} exited with code {process.returncode}: {log}")
    raise EnvError(f"three free ports in a row were taken before the {name} server could bind them; last: {url}")


def serve(name: str, host: str = "127.0.0.1", port: int = 36002, **kw) -> None:
    """Serve env `name` over HTTP until interrupted (one process: the envs live in its memory)."""
    uvicorn.run(make_app(name, **kw), host=host, port=port, access_log=False)


def serve_workers(name: str, host: str = "127.0.0.1", port: int = 36002, workers: int = 2, **kw) -> None:
    """Serve env `name` from `workers` server processes on ports port, port+1, ..., port+workers-1, until interrupted
    or until one of them stops (then all stop). Each process has its own envs and ids, so a client keeps talking to
    the port that created its env: `connect(name, [url_0, url_1, ...])` spreads new envs over them in turn.
    (Not uvicorn's --workers, which shares one port between processes and would route an id to a process that does
    not hold it.) Several processes use several cores: one Python process steps its envs one at a time (the GIL).
    `kw` (the env's constructor options) reach every process as `--set key=<JSON>` (paths as text)."""
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))   # so `finally` stops the workers on a plain kill
    procs = [subprocess.Popen([sys.executable, "-m", "agentgym_nb.envs", "serve", name, *server_options(kw),
                               "--host", host, "--port", str(port + i)]) for i in range(workers)]
    urls = [f"http://{host}:{port + i}" for i in range(workers)]
    print(f"serving {name} from {workers} processes: {' '.join(urls)}", flush=True)
    try:
        while all(p.poll() is None for p in procs):
            time.sleep(0.5)
    except KeyboardInterrupt:   # Ctrl-C reached the workers too (same process group): they are stopping
        pass
    finally:
        for p in procs:
            if p.poll() is None:
                p.terminate()
        for p in procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
    failed = [(p.args[-1], p.returncode) for p in procs if p.returncode not in (0, -signal.SIGTERM)]
    if failed:
        raise SystemExit(f"{name} server process(es) stopped: (port, exit code) {failed}")
