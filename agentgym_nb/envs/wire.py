"""AgentGym's HTTP protocol as envs speak it, both sides: the request bodies, the pool of envs by id a server answers
from, how a failure is answered, BabyAI's routes (every env's default) and `HTTPEnv`, the client.

Every AgentGym server has the same life cycle (/create, /reset, /step, /observation, /close) but each env spells its
fields a little differently (`id` or `env_idx`, what /create and /reset return, extra endpoints). An env whose wire
format differs from BabyAI's sets `http_routes` (a function adding its endpoints to the app) and `http_client` (an
HTTPEnv subclass) on its Env class, next to the env itself. The server that puts routes and envs together is
`envs/http.py`.

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
import threading
from dataclasses import dataclass, field

import requests
from fastapi import FastAPI
from fastapi.responses import JSONResponse
from pydantic import BaseModel

from .base import Env, EnvError, EnvStateError, Step, check_item_id
from .registry import env_class


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
