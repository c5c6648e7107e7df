"""Our clients (`envs.connect`) against AgentGym's own servers, played through faithful stand-ins.

AgentGym's server packages cannot be installed here, so each stand-in below is a small FastAPI app speaking one
AgentGym server's wire format as its server.py writes it (agentenv-textcraft, -sciworld, -searchqa, -webarena):
endpoints, field names, `id` versus `env_idx`, answers, error answers, status codes and quirks. The game behind
each one is our in-process env (`envs.make`), so these tests exercise the wire, not the game.
Endpoints our clients never call (/detail, /action_hint, /goals, /observation_metadata, the visual-only ones and
the ones broken in AgentGym) are left out.
BabyAI's wire format is our default server's own, tested in tests/test_env_protocol.py.
"""
import contextlib
import itertools
import re

import pytest
import requests
from fastapi import FastAPI
from pydantic import BaseModel

from harness import loopback_server, require

require(envs=("sciworld", "textcraft"))

from agentgym_nb.envs import EnvError, connect, make
from agentgym_nb.envs.wire import answer
from agentgym_nb.envs.sciworld import JVMS, NUM_GAMES, item_id_of
from agentgym_nb.envs.textcraft import expert_replies

# a JVM and a browser start on a busy 2-core machine; a hang still fails
pytestmark = [pytest.mark.timeout(300), pytest.mark.browser, pytest.mark.jvm]


def reply(action: str) -> str:
    return f"Thought:\nI need to act.\n\nAction:\n{action}"


class IdBody(BaseModel):
    id: int


class IdStepBody(BaseModel):
    id: int
    action: str


class IdxBody(BaseModel):
    env_idx: int


class IdxStepBody(BaseModel):
    env_idx: int
    action: str


def env_of(envs: dict, env_id: int):
    """AgentGym's `_check_id`: the env, or the error its servers report as 200 {"error": ...}."""
    if env_id not in envs:
        raise ValueError(f"The id {env_id} is not valid.")
    return envs[env_id]


@contextlib.contextmanager
def standin(app: FastAPI):
    """Serve a stand-in on loopback; close the envs it still holds when done."""
    try:
        with loopback_server(app) as url:
            yield url
    finally:
        held = app.state.envs.values() if isinstance(app.state.envs, dict) else app.state.envs
        for env in [e for e in held if e is not None]:
            env.close()


# ---------------------------------------------------------------- stand-ins

def textcraft_server() -> FastAPI:
    """agentenv-textcraft (§1.3): /create needs a JSON body (even {}) and resets the new env to item = its id;
    /step has no "finished" check; /observation is a JSON string; failures are 200 {"error"} (§1.8)."""
    app, envs, ids = FastAPI(), {}, itertools.count()
    app.state.envs = envs

    class CreateBody(BaseModel):  # required; extra keys (the client's "minecraft_dir") are ignored
        commands: str | None = None
        goal: str | None = None

    class ResetBody(BaseModel):
        id: int
        data_idx: int = 0

    @app.get("/")
    def hello():
        return "This is environment TextCraft."

    @app.post("/create")
    def create(body: CreateBody):  # custom commands/goal are stored and never used
        def handle():
            env_id = next(ids)
            envs[env_id] = make("textcraft")
            return {"id": env_id, "observation": envs[env_id].reset(env_id), "done": False, "reward": 0}
        return answer(handle)

    @app.post("/reset")
    def reset(body: ResetBody):
        return answer(lambda: {"id": body.id, "observation": env_of(envs, body.id).reset(body.data_idx),
                               "done": False, "reward": 0})

    @app.post("/step")
    def step(body: IdStepBody):
        def handle():
            result = env_of(envs, body.id)._apply(body.action)  # no "finished" check, as in AgentGym
            return {"observation": result.observation, "reward": int(result.info["step_reward"]), "done": result.done}
        return answer(handle)

    @app.get("/observation")
    def observation(id: int):  # noqa: A002  (AgentGym's query parameter name)
        return answer(lambda: env_of(envs, id).observe())

    @app.post("/close")
    def close(body: IdBody):
        if body.id not in envs:
            return False
        envs.pop(body.id).close()
        return True

    return app


def sciworld_server() -> FastAPI:
    """agentenv-sciworld (§1.4): /create without a body; /reset answers task_name, var_num, task_description,
    observation (the "look around" after load), reward, score, deleted, done and an out-of-range item is
    "list index out of range"; /step answers the score change and the score, and "has finished" after done; failures
    are 200 {"error"} (§1.8) except a second /close, which is an unhandled error: HTTP 500."""
    app, envs, ids = FastAPI(), {}, itertools.count()
    app.state.envs = envs

    class ResetBody(BaseModel):
        id: int
        data_idx: int

    @app.get("/")
    def hello():
        return "This is environment ScienceWorld."

    @app.post("/create")
    def create():
        def handle():
            env_id = next(ids)
            envs[env_id] = make("sciworld")
            return {"id": env_id}
        return answer(handle)

    @app.post("/reset")
    def reset(body: ResetBody):
        def handle():
            env = env_of(envs, body.id)
            if body.data_idx >= NUM_GAMES:  # AgentGym indexes its flat game list directly
                raise IndexError("list index out of range")
            env.reset(body.data_idx)
            return {"task_name": env.task_name, "var_num": env.variation, "task_description": env.task_description,
                    "observation": env.raw, "reward": env.reward, "score": env.score, "deleted": False,
                    "done": env.phase == "over"}
        return answer(handle)

    @app.post("/step")
    def step(body: IdStepBody):
        def handle():
            env = env_of(envs, body.id)
            if env.phase == "over":
                raise ValueError(f"The task with environment {body.id} has finished.")
            result = env.act(body.action)
            return {"observation": result.observation, "reward": result.info["step_reward"],
                    "score": result.info["score"], "done": result.done}
        return answer(handle)

    @app.get("/observation")
    def observation(id: int):  # noqa: A002
        return answer(lambda: env_of(envs, id).raw)

    @app.post("/close")
    def close(body: IdBody):  # unguarded in AgentGym: closing twice raises, and the client gets HTTP 500
        envs.pop(body.id).close()
        return True

    return app


def searchqa_server() -> FastAPI:
    """agentenv-searchqa (§1.5): `env_idx` names the env and `id` the item; /create {"id": item} answers a bare
    integer; /reset and /observation answer the question prompt as a JSON string; /step {"observation", "reward",
    "done", "info": null} and never locks a finished episode. No error handling: an unknown env_idx, an item out
    of range or a null item id is an unhandled exception, i.e. HTTP 500 "Internal Server Error"."""
    app, envs = FastAPI(), []  # a list: an unknown env_idx is an IndexError
    app.state.envs = envs

    class CreateBody(BaseModel):
        id: int

    class ResetBody(BaseModel):
        env_idx: int
        id: int | None = None

    @app.get("/")
    def hello():
        return "ok"

    @app.post("/create")
    def create(body: CreateBody):
        env = make("searchqa")
        env.reset(body.id)
        envs.append(env)
        return len(envs) - 1

    @app.post("/reset")
    def reset(body: ResetBody):
        return envs[body.env_idx].reset(body.id)

    @app.post("/step")
    def step(body: IdxStepBody):
        observation, reward, done, _ = envs[body.env_idx].respond(body.action)
        return {"observation": observation, "reward": reward, "done": done, "info": None}

    @app.get("/observation")
    def observation(env_idx: int):
        return envs[env_idx].observe()

    @app.post("/close")
    def close(body: IdxBody):
        if body.env_idx >= len(envs) or envs[body.env_idx] is None:
            return False
        envs[body.env_idx].close()
        envs[body.env_idx] = None
        return True

    return app


def webarena_server() -> FastAPI:
    """agentenv-webarena (§1.6): `env_idx` fields; /reset {"env_idx", "seed", "idx"} answers the raw tree, sites and
    intent, or observation "TimeoutError" (sites/object "Error") on any failure; the prompt comes from GET
    /observation; /step answers observation, reward (1.0 per executed action before the end, the evaluation at
    `stop`), terminated, truncated, info, and an action WebArena cannot parse is (message, 0, false, false, null);
    /close answers {"closed": "closed"} or {"closed": "Close Env N Error: ..."}."""
    app, envs, ids = FastAPI(), {}, itertools.count()
    app.state.envs = envs

    class ResetBody(BaseModel):
        env_idx: int
        seed: int
        idx: int

    @app.get("/")
    def hello():
        return "ok"

    @app.post("/create")
    def create():
        env_idx = next(ids)
        envs[env_idx] = make("webarena")
        return {"env_idx": env_idx}

    @app.post("/reset")
    def reset(body: ResetBody):
        env = envs[body.env_idx]
        try:
            env.reset(body.idx)
        except Exception:  # noqa: BLE001  (AgentGym answers every reset failure this way)
            return {"observation": "TimeoutError", "sites": "Error", "object": "Error"}
        return {"observation": env.tree, "sites": env.config["sites"], "object": env.config["intent"]}

    @app.post("/step")
    def step(body: IdxStepBody):
        env = envs[body.env_idx]
        try:
            result = env.act(body.action)
            if not result.info["action"]:  # our env answers an unparsable action; WebArena raises
                raise ValueError(result.observation)
        except Exception as error:  # noqa: BLE001  (AgentGym answers every step failure this way)
            return {"observation": str(error), "reward": 0, "terminated": False, "truncated": False, "info": None}
        reward = result.reward if result.done else float(not result.info["fail_error"])
        return {"observation": result.observation, "reward": reward, "terminated": result.done, "truncated": False,
                "info": {"fail_error": result.info["fail_error"]}}

    @app.get("/observation")
    def observation(env_idx: int):
        return envs[env_idx].observe()

    @app.post("/close")
    def close(body: IdxBody):
        try:
            envs.pop(body.env_idx).close()
        except Exception as error:  # noqa: BLE001
            return {"closed": f"Close Env {body.env_idx} Error: {error!r}"}
        return {"closed": "closed"}

    return app


# ---------------------------------------------------------------- our clients against them

def test_textcraft_client_against_agentgym_server():
    app = textcraft_server()
    with standin(app) as url:
        assert requests.post(f"{url}/create", timeout=30).status_code == 422  # AgentGym's /create needs a body
        env, local = connect("textcraft", url), make("textcraft")  # so our client must send one
        item = 200  # dark oak fence: six turns (get logs and bamboo, craft planks and sticks, then the fence)
        assert env.reset(item) == local.reset(item)
        for text in [reply("get 1 nothing")] + expert_replies(item):
            ours, theirs = env.step(text), local.step(text)
            assert (ours.observation, ours.reward, ours.done, ours.info) == (
                theirs.observation, theirs.reward, theirs.done, theirs.info)
        assert ours.done and ours.reward == 1.0 and env.success(ours.reward)
        assert env.observe() == local.observe()  # GET /observation's bare JSON string
        env.close()
        assert env.env_id not in app.state.envs

        lost = connect("textcraft", url)
        lost.reset(0)
        requests.post(f"{url}/close", json={"id": lost.env_id}, timeout=30)  # the server lost the env
        with pytest.raises(EnvError, match=re.escape(f"textcraft server {url}/step failed: The id {lost.env_id} is "
                                                     "not valid.")):
            lost.step(reply("inventory"))


def test_sciworld_client_against_agentgym_server():
    app = sciworld_server()
    with standin(app) as url:
        env = connect("sciworld", url)
        item = item_id_of("find-animal", 225)
        replies = app.state.envs[env.env_id].expert(item)  # on the stand-in's JVM: one JVM less to start
        first = env.reset(item)
        served = app.state.envs[env.env_id]
        assert first == served.task_description + "\n" + served.raw  # AgentGym's client joins the two
        deltas = []
        for text in replies:
            step = env.step(text)
            deltas.append(step.info["step_reward"])
            if step.done:
                break
        assert step.done and step.reward == 100 == step.info["score"] == sum(deltas) and env.success(step.reward)
        assert len(deltas) > 3
        assert env.observe() == requests.get(f"{url}/observation", params={"id": env.env_id}, timeout=30).json()

        # the server's {"error"} answers become EnvError naming the env and the request, never a zero reward
        with pytest.raises(EnvError, match=re.escape(f"sciworld server {url}/reset failed: list index out of range")):
            env.reset(NUM_GAMES)
        env.reset(item_id_of("lifespan-longest-lived", 93))
        for action in ("open door to outside", "go to outside", "focus on crocodile"):  # finished behind our back
            requests.post(f"{url}/step", json={"id": env.env_id, "action": action}, timeout=60)
        with pytest.raises(EnvError, match=re.escape(f"{url}/step failed: The task with environment {env.env_id} "
                                                     "has finished.")):
            env.step(reply("look around"))
        env.close()
        assert env.env_id not in app.state.envs

        lost = connect("sciworld", url)
        assert requests.post(f"{url}/close", json={"id": lost.env_id}, timeout=60).json() is True
        with pytest.raises(EnvError, match=re.escape(f"sciworld server {url}/close answered HTTP 500")):
            lost.close()  # AgentGym's second /close is an HTTP 500
    JVMS.close_idle()


def test_searchqa_client_against_agentgym_server():
    app = searchqa_server()
    with standin(app) as url:
        env, local = connect("searchqa", url), make("searchqa")  # /create {"id": 0}, then /reset to the item
        item = 3
        assert local.reset(item) != local.reset(0)  # so a swapped `id`/`env_idx` would show
        assert env.reset(item) == local.reset(item) == env.observe()
        for text in ["<think>hmm</think> no tags"] + local.expert(item):
            ours, theirs = env.step(text), local.step(text)
            assert (ours.observation, ours.reward, ours.done, ours.info) == (
                theirs.observation, theirs.reward, theirs.done, theirs.info)
        assert ours.done and ours.reward == 1.0 and env.success(ours.reward)
        env.close()
        assert app.state.envs[env.env_id] is None

        # AgentGym's SearchQA answers every failure with a bare HTTP 500
        lost = connect("searchqa", url)
        with pytest.raises(EnvError, match=re.escape(f"searchqa server {url}/reset answered HTTP 500: Internal "
                                                     "Server Error")):
            lost.reset(10**6)  # item id out of range
        lost.reset(1)
        requests.post(f"{url}/close", json={"env_idx": lost.env_id}, timeout=30)
        with pytest.raises(EnvError, match=re.escape(f"searchqa server {url}/step answered HTTP 500")):
            lost.step("<search>x</search>")


def test_webarena_client_against_agentgym_server():
    app = webarena_server()
    with standin(app) as url:
        env = connect("webarena", url)
        item = 0  # the price of a product: search, open it, stop with the price
        first = env.reset(item)  # /reset answers the raw tree; the client shows the prompt from /observation
        served = app.state.envs[env.env_id]
        assert first == "OBSERVATION:\n" + served.tree + "\nURL: http://onestopmarket.com/\nOBJECTIVE: " + (
            served.config["intent"] + "\nPREVIOUS ACTION: None")
        unparsable = env.step("In summary, the next action I will perform is ```fly [3]```")
        assert (unparsable.observation, unparsable.reward, unparsable.done, unparsable.info["valid"]) == (
            "Invalid action fly [3]", 0.0, False, False)
        replies = env.expert(item)
        for text in replies[:-1]:
            step = env.step(text)  # the server sends WebArena's 1.0 per executed action; the client reports 0
            assert (step.reward, step.done, step.info["valid"]) == (0.0, False, True)
        stop = env.step(replies[-1])
        assert stop.done and stop.reward == 1.0 and env.success(stop.reward)
        assert stop.observation.endswith("PREVIOUS ACTION: stop [$15.49]")
        env.close()
        assert env.env_id not in app.state.envs

        lost = connect("webarena", url)
        with pytest.raises(EnvError, match=f"webarena server {url} could not reset item 10000"):
            lost.reset(10_000)  # AgentGym's "TimeoutError" reset
        requests.post(f"{url}/close", json={"env_idx": lost.env_id}, timeout=30)
        with pytest.raises(EnvError, match=re.escape(f"webarena server {url}/close failed: Close Env {lost.env_id} "
                                                     "Error")):
            lost.close()  # a close that failed server-side is reported, not taken for success
