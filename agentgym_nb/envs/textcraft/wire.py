"""AgentGym's TextCraft wire format (agentenv-textcraft's server and TextCraftEnvClient), both sides."""
from __future__ import annotations

from fastapi import FastAPI
from pydantic import BaseModel

from ..base import Env, InvalidAction, Step, check_action_length, react_action
from ..wire import EnvPool, HTTPEnv, IdBody, ResetBody, StepBody, answer, on_env
from .env import TextCraft, succeeded


class TextCraftCreateBody(BaseModel):
    commands: str | None = None  # accepted and ignored, as by AgentGym's server
    goal: str | None = None


class TextCraftResetBody(ResetBody):
    data_idx: int = 0  # AgentGym's TextCraft server defaults it


def http_routes(app: FastAPI, pool: EnvPool, cls: type[Env]) -> None:
    """AgentGym's TextCraft wire format (agentenv-textcraft/server.py):

        GET  /                         -> "This is environment TextCraft."
        POST /create {commands?, goal?} -> {"id", "observation", "done": false, "reward": 0}  (reset to item = id)
        POST /reset {id, data_idx=0}   -> {"id", "observation", "done": false, "reward": 0}
        POST /step {id, action}        -> {"observation", "reward": 0|1, "done"}  (also after done, as AgentGym)
        GET  /observation?id=          -> the latest observation (a JSON string)
        GET  /detail?id=               -> {"observation", "done", "reward", "deleted": false}
        POST /close {id}               -> true / false
    Failures are HTTP 200 {"error": ...}; /create also takes no body (AgentGym's requires one, even {}).
    """

    @app.get("/")
    def hello():
        return f"This is environment {cls.title}."

    @app.post("/create")
    def create(body: TextCraftCreateBody | None = None):
        def handle():
            env_id = pool.create()
            try:
                with pool.use(env_id) as env:
                    observation = env.reset(env_id)
            except Exception:
                pool.close(env_id)
                raise
            return {"id": env_id, "observation": observation, "done": False, "reward": 0}
        return answer(handle)

    @app.post("/reset")
    def reset(body: TextCraftResetBody):
        return on_env(pool, body.id, lambda env: {"id": body.id, "observation": env.reset(body.data_idx),
                                                  "done": False, "reward": 0})

    @app.post("/step")
    def step(body: StepBody):
        def handle():
            check_action_length(cls.name, body.action)
            with pool.use(body.id) as env:
                if env.phase == "new":
                    raise ValueError(f"The environment {body.id} has not been reset; POST /reset first.")
                text = body.action
                if "Action:" in text:  # a whole reply: extract its action as AgentGym's client would
                    try:
                        text = react_action(text)
                    except InvalidAction as bad:
                        return {"observation": bad.observation, "reward": 0, "done": False}
                result = env._apply(text)  # after done too, as AgentGym's server
                return {"observation": result.observation, "reward": int(result.info["step_reward"]),
                        "done": result.done}
        return answer(handle)

    @app.get("/observation")
    def observation(id: int):  # noqa: A002  (AgentGym's query parameter name)
        return on_env(pool, id, lambda env: env.observe())

    @app.get("/detail")
    def detail(id: int):  # noqa: A002
        return on_env(pool, id, lambda env: {"observation": env.observe(), "done": env.phase == "over",
                                             "reward": int(env.reward), "deleted": False})

    @app.post("/close")
    def close(body: IdBody):
        return pool.close(body.id)


class TextCraftClient(HTTPEnv):
    """Our client for a TextCraft server (ours or AgentGym's): /create answers with the id and a first
    observation, /reset and /step carry no score (the step's reward, 0 or 1, is the score), /observation is a string.
    """

    def _create(self) -> int:
        data = self._call("POST", "create", {"commands": None, "goal": None})
        return data["id"]

    def _reset(self, item_id: int) -> str:
        data = self._call("POST", "reset", {"id": self.env_id, "data_idx": item_id})
        self.reward, self.score, self.phase = 0.0, 0.0, "running"
        return data["observation"]

    def act(self, action: str) -> Step:
        self.check_running()
        data = self._call("POST", "step", {"id": self.env_id, "action": action})
        self.last_observation, self.reward = data["observation"], float(data["reward"])
        self.score += self.reward
        if data["done"]:
            self.phase = "over"
        info = {"score": self.score, "step_reward": self.reward, "action": action,
                "valid": succeeded(self.last_observation)}
        return Step(self.last_observation, self.score, bool(data["done"]), info)

    def observe(self) -> str:
        return self._call("GET", "observation", params={"id": self.env_id})


TextCraft.http_routes = staticmethod(http_routes)
TextCraft.http_client = TextCraftClient
