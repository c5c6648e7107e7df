"""AgentGym's HTTP protocol, both sides.

Every AgentGym server has the same life cycle (/create, /reset, /step, /observation, /close) but each env spells its
fields a little differently (`id` or `env_idx`, what /create and /reset return, extra endpoints). The shared parts
live here: the request bodies, `EnvPool` (envs by id), `answer` (how a failure is answered), `make_app`, and
`HTTPEnv`, the client. An env whose wire format differs from BabyAI's sets `http_routes` (a function adding its
endpoints to the app) and `http_client` (an HTTPEnv subclass) on its Env class, next to the env itself.

Default routes (BabyAI's wire format, `id_routes`):
    GET  /                      -> "This is environment BabyAI."
    POST /create                -> {"id": int}
    POST /reset {id, data_idx}  -> {"observation", "reward", "score", "deleted", "done"}
    POST /step {id, action}     -> {"observation", "reward", "score", "done"}
    GET  /observation?id=       -> {"observation", "reward", "score", "done", "deleted"}
    POST /close {id}            -> true / false
A failure is answered {"error": "<message>"}, at HTTP 200 as AgentGym's BabyAI, TextCraft and SciWorld servers
answer it (SearchQA's server gives it an error status instead; a missing field is FastAPI's 422).
Client: `HTTPEnv`, an Env that speaks this protocol to our server or to AgentGym's own.
"""
from __future__ import annotations

import contextlib
import json
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field

import requests
import uvicorn
from fastapi import FastAPI
from fastapi.responses import JSONResponse
from pydantic import BaseModel

from . import env_class, make
from .base import Env, EnvError, EnvStateError, Step, check_item_id


# Request bodies, one model per shape. BabyAI, TextCraft and SciWorld name the env `id`; SearchQA and WebArena name
# it `env_idx` (SearchQA's `id` is an item id). A body only one env's server takes extends these next to its routes.

class IdBody(BaseModel):
    id: int


class ResetBody(IdBody):
    data_idx: int


class StepBody(IdBody):
    action: str


class EnvIdxBody(BaseModel):
    env_idx: int


class EnvIdxStepBody(EnvIdxBody):
    action: str


class UnknownEnv(ValueError):
    """No env has this id (never created, or closed); AgentGym's wording."""

    def __init__(self, env_id: int):
        super().__init__(f"The id {env_id} is not valid.")
        self.env_id = env_id


@dataclass
class Slot:
    env: Env
    lock: threading.Lock = field(default_factory=threading.Lock)  # one request at a time per env


class EnvPool:
    """Server-side envs by id. Ids are never reused; a closed env is dropped at once."""

    def __init__(self, factory):
        self.factory = factory
        self.slots: dict[int, Slot] = {}
        self._lock = threading.Lock()
        self._next_id = 0

    def create(self) -> int:
        env = self.factory()
        with self._lock:
            env_id, self._next_id = self._next_id, self._next_id + 1
            self.slots[env_id] = Slot(env)
        return env_id

    @contextlib.contextmanager
    def use(self, env_id: int):
        """Hold env `env_id` for one request; UnknownEnv if it does not exist (any more)."""
        with self._lock:
            slot = self.slots.get(env_id)
        if slot is None:
            raise UnknownEnv(env_id)
        with slot.lock:
            if self.slots.get(env_id) is not slot:  # closed while we waited
                raise UnknownEnv(env_id)
            yield slot.env

    def close(self, env_id: int) -> bool:
        try:
            with self.use(env_id) as env:
                env.close()
                with self._lock:
                    del self.slots[env_id]
        except ValueError:
            return False
        return True


def answer(handler, failure=None):
    """Run a request handler; a failure is answered {"error": message}. By default at HTTP 200 with the exception's
    message, as AgentGym's BabyAI, TextCraft and SciWorld servers answer; `failure(error) -> (status, message)`
    gives another status and wording (SearchQA, whose AgentGym server answers failures with an HTTP error)."""
    try:
        return handler()
    except Exception as error:  # noqa: BLE001  (the protocol reports every failure the same way)
        status, message = failure(error) if failure else (200, str(error) or error.__class__.__name__)
        return error_answer(message, status)


def error_answer(message: str, status: int = 200):
    """The answer to a failure: {"error": message}, at HTTP `status`."""
    return {"error": message} if status == 200 else JSONResponse({"error": message}, status_code=status)


def on_env(pool: EnvPool, env_id: int, work, failure=None):
    """Answer a request with `work(env)` on env `env_id`, held for the request; failures as `answer` does."""
    def handle():
        with pool.use(env_id) as env:
            return work(env)
    return answer(handle, failure)


def running(env: Env, env_id: int) -> Env:
    """`env` if it is mid-episode; AgentGym's error wording otherwise."""
    if env.phase == "new":
        raise EnvStateError(f"The environment {env_id} has not been reset; POST /reset first.")
    if env.phase == "over":
        raise EnvStateError(f"The task with environment {env_id} has finished.")
    return env


def make_app(name: str, **kw) -> FastAPI:
    """The FastAPI app serving env `name` (built with `make(name, **kw)`) over AgentGym's protocol."""
    cls = env_class(name)
    pool = EnvPool(lambda: make(name, **kw))
    app = FastAPI(title=f"agentgym-nb {name}")
    app.state.pool = pool
    (cls.http_routes or id_routes)(app, pool, cls)
    return app


def id_routes(app: FastAPI, pool: EnvPool, cls: type[Env]) -> None:
    """BabyAI's wire format: `id` in bodies and queries, /reset and /step answer observation/reward/score/done."""

    @app.get("/")
    def hello():
        return f"This is environment {cls.title}."

    @app.post("/create")
    def create():
        return answer(lambda: {"id": pool.create()})

    @app.post("/reset")
    def reset(body: ResetBody):
        def work(env):
            observation = env.reset(body.data_idx)
            return {"observation": observation, "reward": env.reward, "score": env.score, "deleted": False,
                    "done": env.phase == "over"}
        return on_env(pool, body.id, work)

    @app.post("/step")
    def step(body: StepBody):
        # AgentGym's clients post the extracted action; a whole reply ("...Action: ...") is extracted here.
        def work(env):
            running(env, body.id)
            result = env.step(body.action) if "Action:" in body.action else env.act(body.action)
            return {"observation": result.observation, "reward": result.info.get("step_reward", 0.0),
                    "score": result.info["score"], "done": result.done}
        return on_env(pool, body.id, work)

    @app.get("/observation")
    def observation(id: int):  # noqa: A002  (AgentGym's query parameter name)
        def work(env):
            if env.phase == "new":
                return {"observation": "Environment not initialized", "reward": 0, "score": 0, "done": False,
                        "deleted": False}
            return {"observation": env.observe(), "reward": env.reward, "score": env.score,
                    "done": env.phase == "over", "deleted": False}
        return on_env(pool, id, work)

    @app.post("/close")
    def close(body: IdBody):
        return pool.close(body.id)


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


class HTTPEnv(Env):
    """An env on an AgentGym-protocol server. Like AgentGym's client it posts /create on construction, extracts the
    action from the reply locally and posts only the action, and reports the server's "score" as the reward.

    Every request has `timeout` seconds; an unreachable server, a timeout, a non-200 answer or an {"error"} answer
    raises EnvError naming the URL. Out-of-order calls raise EnvStateError locally, before any request.
    Env-specific clients override `_create`, `_reset`, `act`, `observe` and `_close` (the wire calls) only.
    """

    def __init__(self, name: str, url: str, timeout: float = 30.0):
        self.spec = env_class(name)
        self.name, self.task_instruction = name, self.spec.task_instruction
        self.acknowledgement = self.spec.acknowledgement
        self.success_score = self.spec.success_score
        self.url, self.timeout = url.rstrip("/"), timeout
        self.session = requests.Session()
        self.last_observation = ""
        self._local = None  # an in-process env for expert(), built on first use
        self.env_id = self._create()

    def parse_action(self, text: str) -> str:  # client-side, as AgentGym's clients do
        return self.spec.parse_action(self, text)

    def category(self, item_id: int) -> str:
        return self.spec.category(self, item_id)

    def _create(self) -> int:
        return self._call("POST", "create")["id"]

    def _call(self, method: str, path: str, body: dict | None = None, params: dict | None = None):
        url = f"{self.url}/{path}"
        try:
            answer = self.session.request(method, url, json=body, params=params, timeout=self.timeout)
        except requests.Timeout:
            raise EnvError(f"{self.name} server {url} did not answer within {self.timeout}s") from None
        except requests.RequestException as error:
            raise EnvError(f"cannot reach {self.name} server {url}: {error.__class__.__name__}: {error}") from None
        if answer.status_code != 200:
            # uvicorn closes the connection after an unhandled exception (AgentGym's SearchQA answers every failure
            # so): reusing it would make the next request fail with "connection reset". Start afresh.
            self.session.close()
            raise EnvError(f"{self.name} server {url} answered HTTP {answer.status_code}: {answer.text[:300]}")
        try:
            data = answer.json()
        except ValueError:
            raise EnvError(f"{self.name} server {url} answered non-JSON: {answer.text[:300]!r}") from None
        if isinstance(data, dict) and "error" in data:
            raise EnvError(f"{self.name} server {url} failed: {data['error']}")
        return data

    def reset(self, item_id: int) -> str:
        self.check_open()
        item_id = check_item_id(item_id, f"{self.name} item ids")
        self.last_observation = self._reset(item_id)
        return self.last_observation

    def _reset(self, item_id: int) -> str:
        """POST /reset; sets reward, score and phase; returns the first observation."""
        data = self._call("POST", "reset", {"id": self.env_id, "data_idx": item_id})
        self.reward, self.score = data["reward"], data["score"]
        self.phase = "over" if data["done"] else "running"
        return data["observation"]

    def act(self, action: str) -> Step:
        self.check_running()
        valid = self.spec.is_valid_action(self.last_observation, action)
        data = self._call("POST", "step", {"id": self.env_id, "action": action})
        self.last_observation, self.reward, self.score = data["observation"], data["reward"], data["score"]
        if data["done"]:
            self.phase = "over"
        info = {"score": self.score, "step_reward": self.reward, "action": action, "valid": valid}
        return Step(self.last_observation, float(self.score), bool(data["done"]), info)

    def observe(self) -> str:
        return self._call("GET", "observation", params={"id": self.env_id})["observation"]

    def _close(self) -> None:
        self._call("POST", "close", {"id": self.env_id})

    def expert(self, item_id: int) -> list[str]:
        """Computed locally: item ids mean the same on both sides of the protocol."""
        if self._local is None:
            self._local = self.spec()
        return self._local.expert(item_id)

    def close(self) -> None:
        if self.phase == "closed":
            return
        super().close()
        try:
            self._close()
        finally:
            self.session.close()
            if self._local is not None:
                self._local.close()
