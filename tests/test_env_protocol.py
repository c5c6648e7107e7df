"""AgentGym's HTTP protocol: our server driven exactly like AgentGym's client, and our client against our server."""
import re
import socket
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests

from agentgym_nb.envs import EnvError, EnvStateError, connect, make
from agentgym_nb.envs.babyai import expert_replies
from agentgym_nb.envs.base import MULTIPLE_ACTIONS
from agentgym_nb.envs.http import make_app, start_server
from harness import loopback_server

pytestmark = pytest.mark.timeout(120)  # a hang is a failure, not a stuck CI job


def agentgym_action(reply: str) -> str:
    """What AgentGym's BabyAIEnvClient.step posts for a model reply (agentenv/envs/babyai.py)."""
    matches = re.findall(r"Action:\s*(.*?)(?=\n|$)", reply, re.DOTALL)
    action = matches[-1] if matches else ""
    action = re.sub(r"[^A-Za-z0-9, ]+", "", action)
    return " ".join(action.split()).strip()


def reply(action: str) -> str:
    return f"Thought:\nI need to act.\n\nAction:\n{action}"


@pytest.fixture(scope="module")
def server():
    """Our BabyAI server on a free 127.0.0.1 port, in a thread; yields (url, its env pool)."""
    app = make_app("babyai")
    with loopback_server(app) as url:
        yield url, app.state.pool


def post(url: str, path: str, body: dict | None = None):
    answer = requests.post(f"{url}/{path}", json=body, timeout=30)
    assert answer.status_code == 200, answer.text
    return answer.json()


def create(url: str) -> int:
    answer = requests.post(f"{url}/create", timeout=30)  # AgentGym's client sends no body
    assert answer.status_code == 200
    return answer.json()["id"]


def test_agentgym_client_flow_matches_in_process(server):
    url, _ = server
    assert requests.get(url + "/", timeout=30).json() == "This is environment BabyAI."
    env_id = create(url)
    assert requests.get(f"{url}/observation", params={"id": env_id}, timeout=30).json() == {
        "observation": "Environment not initialized", "reward": 0, "score": 0, "done": False, "deleted": False}
    for item in (5, 27, 37):  # multi-turn expert episodes: a maze, unlocking with a key, a long mission
        local = make("babyai")
        answer = post(url, "reset", {"id": env_id, "data_idx": item})
        assert answer == {"observation": local.reset(item), "reward": 0.0, "score": 0.0, "deleted": False,
                          "done": False}
        replies = expert_replies(item)
        assert len(replies) > 3
        for text in replies:
            expected = local.step(text)
            answer = post(url, "step", {"id": env_id, "action": agentgym_action(text)})
            assert answer == {"observation": expected.observation, "reward": expected.info["step_reward"],
                              "score": expected.info["score"], "done": expected.done}
        assert answer["done"] and answer["score"] > 0 and answer["score"] == expected.reward
        observed = requests.get(f"{url}/observation", params={"id": env_id}, timeout=30).json()
        assert observed == {"observation": local.observe(), "reward": answer["reward"], "score": answer["score"],
                            "done": True, "deleted": False}
    assert post(url, "close", {"id": env_id}) is True


def test_whole_reply_posted_to_step_is_extracted(server):
    url, _ = server
    clean, whole = create(url), create(url)
    post(url, "reset", {"id": clean, "data_idx": 3}), post(url, "reset", {"id": whole, "data_idx": 3})
    a = post(url, "step", {"id": clean, "action": "turn left"})
    b = post(url, "step", {"id": whole, "action": reply("turn left")})
    assert a == b and a["observation"].startswith("In front of you")
    c = post(url, "step", {"id": whole, "action": reply("turn left") + "\nAction: turn right"})
    assert c == {"observation": MULTIPLE_ACTIONS, "reward": 0.0, "score": 0.0, "done": False}


def test_32_concurrent_envs_do_not_mix(server):
    url, pool = server
    script = ["turn left", "move forward", "check available actions", "turn right", "move forward", "go to red ball 1"]
    items = list(range(200, 232))
    expected = {}
    for item in items:
        local = make("babyai")
        expected[item] = [local.reset(item)] + [local.act(action).observation for action in script]
    start = threading.Barrier(len(items))

    def episode(item):
        env_id = create(url)
        start.wait()  # every env exists before any episode runs
        seen = [post(url, "reset", {"id": env_id, "data_idx": item})["observation"]]
        seen += [post(url, "step", {"id": env_id, "action": action})["observation"] for action in script]
        return env_id, seen

    with ThreadPoolExecutor(len(items)) as threads:
        results = list(threads.map(episode, items))
    ids = [env_id for env_id, _ in results]
    assert len(set(ids)) == len(items)
    assert all(seen == expected[item] for item, (_, seen) in zip(items, results))
    assert all(post(url, "close", {"id": env_id}) is True for env_id in ids)
    assert not set(ids) & set(pool.slots)


def test_close_frees_the_env(server):
    url, pool = server
    env_id = create(url)
    post(url, "reset", {"id": env_id, "data_idx": 0})
    assert env_id in pool.slots
    assert post(url, "close", {"id": env_id}) is True
    assert env_id not in pool.slots
    assert post(url, "step", {"id": env_id, "action": "turn left"}) == {"error": f"The id {env_id} is not valid."}
    assert post(url, "reset", {"id": env_id, "data_idx": 0}) == {"error": f"The id {env_id} is not valid."}
    assert post(url, "close", {"id": env_id}) is False


def test_server_errors(server):
    url, _ = server
    assert post(url, "step", {"id": 10**6, "action": "turn left"}) == {"error": f"The id {10**6} is not valid."}
    assert requests.get(f"{url}/observation", params={"id": 10**6}, timeout=30).json() == {
        "error": f"The id {10**6} is not valid."}
    env_id = create(url)
    assert post(url, "step", {"id": env_id, "action": "turn left"}) == {
        "error": f"The environment {env_id} has not been reset; POST /reset first."}
    assert "integer >= 0" in post(url, "reset", {"id": env_id, "data_idx": -1})["error"]
    assert requests.post(f"{url}/reset", json={"id": env_id}, timeout=30).status_code == 422
    post(url, "reset", {"id": env_id, "data_idx": 0})
    assert post(url, "step", {"id": env_id, "action": "go to red ball 1"})["done"] is True
    assert post(url, "step", {"id": env_id, "action": "turn left"}) == {
        "error": f"The task with environment {env_id} has finished."}
    assert post(url, "reset", {"id": env_id, "data_idx": 0})["done"] is False  # reset after done is fine
    post(url, "close", {"id": env_id})


def test_our_client_against_our_server(server):
    url, pool = server
    env, local = connect("babyai", url), make("babyai")
    assert env.instruction == local.instruction
    with pytest.raises(EnvStateError, match="before reset"):
        env.step(reply("turn left"))
    assert env.reset(7) == local.reset(7)
    world = pool.slots[env.env_id].env.world
    primitives = world.step_count
    twice = env.step(reply("turn left") + "\nAction: turn right")
    assert (twice.observation, twice.reward, twice.done) == (MULTIPLE_ACTIONS, 0.0, False)
    assert world.step_count == primitives  # answered by the client, the server never saw it
    for text in [reply("pick up nothing 1")] + env.expert(7):
        ours, theirs = env.step(text), local.step(text)
        assert (ours.observation, ours.reward, ours.done, ours.info) == (
            theirs.observation, theirs.reward, theirs.done, theirs.info)
    assert ours.done and env.success(ours.reward)
    with pytest.raises(EnvStateError, match="done"):
        env.step(reply("turn left"))
    assert env.observe() == local.observe()
    env.close()
    assert env.env_id not in pool.slots
    with pytest.raises(EnvStateError, match="after close"):
        env.reset(0)


def test_client_failures_raise_env_error(server):
    url, pool = server
    env = connect("babyai", url)
    env.reset(0)
    pool.close(env.env_id)  # the server lost the env (restart, someone else closed it)
    with pytest.raises(EnvError, match=re.escape(f"{url}/step") + ".*not valid"):
        env.step(reply("turn left"))
    with pytest.raises(EnvError, match="HTTP 404"):
        connect("babyai", url + "/nowhere")

    unused = socket.socket()
    unused.bind(("127.0.0.1", 0))
    port = unused.getsockname()[1]
    unused.close()
    with pytest.raises(EnvError, match=f"cannot reach babyai server http://127.0.0.1:{port}/create"):
        connect("babyai", f"http://127.0.0.1:{port}", timeout=5)

    silent = socket.socket()  # accepts connections, never answers
    silent.bind(("127.0.0.1", 0))
    silent.listen()
    try:
        with pytest.raises(EnvError, match="did not answer within 0.5s"):
            connect("babyai", f"http://127.0.0.1:{silent.getsockname()[1]}", timeout=0.5)
    finally:
        silent.close()


def test_cli():
    bad = subprocess.run([sys.executable, "-m", "agentgym_nb.envs", "serve", "babya"], capture_output=True, text=True,
                         timeout=60)
    assert bad.returncode == 2 and "unknown env 'babya', did you mean 'babyai'?" in bad.stderr

    process, url = start_server("babyai")
    try:
        assert requests.get(url + "/", timeout=10).json() == "This is environment BabyAI."
    finally:
        process.terminate()
        process.wait(timeout=30)
