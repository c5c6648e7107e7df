"""AgentGym's webarena wire format (agentenv-webarena's server and WebarenaEnvClient), both sides."""
from __future__ import annotations

from ..base import EnvError, EnvStateError, Step
from ..wire import EnvIdxBody, EnvIdxStepBody, HTTPEnv, answer, on_env
from .env import WebArena


class WebArenaResetBody(EnvIdxBody):
    seed: int = 0
    idx: int


def webarena_routes(app, pool, cls) -> None:
    """agentenv-webarena's server: `env_idx` fields, /reset answers the raw tree + sites + intent, /step the prompt,
    reward, terminated, truncated, info. A failed /reset or /step is answered in those fields, as AgentGym does
    (its client checks for the observation "TimeoutError"), next to the "error" every failure is answered with."""

    @app.get("/")
    def hello():
        return "ok"

    @app.post("/create")
    def create():
        return answer(lambda: {"env_idx": pool.create()})

    @app.post("/reset")
    def reset(body: WebArenaResetBody):
        def work(env):
            env.reset(body.idx)
            return {"observation": env.tree, "sites": env.config["sites"], "object": env.config["intent"]}
        answered = on_env(pool, body.env_idx, work)
        if "error" in answered:
            return {"observation": "TimeoutError", "sites": "Error", "object": "Error", "error": answered["error"]}
        return answered

    @app.post("/step")
    def step(body: EnvIdxStepBody):
        def work(env):
            if env.phase != "running":
                raise EnvStateError(f"The environment {body.env_idx} is not running; POST /reset first.")
            result = env.act(body.action)
            if not result.done:  # WebArena's per-step reward: 1.0 when the action executed (clients ignore it)
                reward = float(result.info["valid"])
            else:
                reward = result.reward
            info = {"fail_error": result.info["fail_error"], "url": result.info.get("url", "")}
            return {"observation": result.observation, "reward": reward, "terminated": result.done,
                    "truncated": False, "info": info if "url" in result.info else None}
        answered = on_env(pool, body.env_idx, work)
        if "error" in answered:
            return {"observation": answered["error"], "reward": 0, "terminated": False, "truncated": False,
                    "info": None, "error": answered["error"]}
        return answered

    @app.get("/observation")
    def observation(env_idx: int):
        return on_env(pool, env_idx, lambda env: env.observe())

    @app.get("/observation_metadata")
    def observation_metadata(env_idx: int):
        return on_env(pool, env_idx, lambda env: env.metadata())

    @app.post("/close")
    def close(body: EnvIdxBody):
        if pool.close(body.env_idx):
            return {"closed": "closed"}
        return {"closed": f"Close Env {body.env_idx} Error: The id {body.env_idx} is not valid."}


class WebArenaHTTPEnv(HTTPEnv):
    """AgentGym's WebarenaEnvClient: posts the whole reply (after checking for a ``` block), reads the prompt
    from GET /observation, and reports the reward only when the episode terminated."""

    def _create(self) -> int:
        return self._call("POST", "create")["env_idx"]

    def _reset(self, item_id: int) -> str:
        data = self._call("POST", "reset", {"env_idx": self.env_id, "seed": 0, "idx": item_id})
        if data["observation"] == "TimeoutError":
            raise EnvError(f"webarena server {self.url} could not reset item {item_id}")
        self.reward = self.score = 0.0
        self.phase = "running"
        return self.observe()

    def act(self, action: str) -> Step:
        self.check_running()
        data = self._call("POST", "step", {"env_idx": self.env_id, "action": action})
        done = bool(data["terminated"])
        self.reward = float(data["reward"]) if done else 0.0
        if done:
            self.phase, self.score = "over", self.reward
        self.last_observation = data["observation"]
        info = {"score": self.score, "step_reward": self.reward, "action": action,
                "valid": bool(data["info"]) and not data["info"].get("fail_error")}
        return Step(self.last_observation, self.reward, done, info)

    def observe(self) -> str:
        return self._call("GET", "observation", params={"env_idx": self.env_id})

    def category(self, item_id: int) -> str:
        if self._local is None:
            self._local = self.spec()
        return self._local.category(item_id)

    def _close(self) -> None:
        closed = self._call("POST", "close", {"env_idx": self.env_id}).get("closed")
        if closed != "closed":  # AgentGym reports a failed close (time-out, error) in the answer, at HTTP 200
            raise EnvError(f"webarena server {self.url}/close failed: {closed}")


WebArena.http_routes = staticmethod(webarena_routes)
WebArena.http_client = WebArenaHTTPEnv
