"""SciWorld on the real scienceworld jar (Java 17), with AgentGym's game list, texts, scores and wire format.

JVMs are costly (~2-4 s to start, ~300-450 MB each), so the module shares one in-process env and one server, and
the JVM pool hands idle JVMs on: the whole file starts about three. scienceworld lists a room's objects in hash
order, which differs between loads, so observations of two loads are compared as sets of lines, never verbatim.
"""
import json
import re
from pathlib import Path

import psutil
import pytest
import requests

from harness import loopback_server, require

require(envs=("sciworld",))

from scienceworld.constants import ID2TASK

from agentgym_nb.envs import EnvError, EnvStateError, connect, item_ids, make
from agentgym_nb.envs.base import MAX_ACTION_CHARS
from agentgym_nb.envs.http import make_app
from agentgym_nb.envs.sciworld import (EXCLUDED, INSTRUCTION, JVMS, NO_MATCH, NUM_GAMES, TASKS, SciWorld, SciWorldHTTP,
                                       game, item_id_of, item_lists, unordered_lines)

# a JVM starts on a busy 2-core machine; a hang is still a failure
pytestmark = [pytest.mark.timeout(240), pytest.mark.jvm]

ITEMS = Path(__file__).resolve().parent.parent / "agentgym_nb" / "data" / "items"
# lifespan-longest-lived, variation 93 (its first test variation): open door to outside (score 0), go to outside
# (50), focus on crocodile (100, done); focusing on any other animal fails the task (-100, done)
LIFESPAN = 4240 + 93
LIFESPAN_TASK = ("Your task is to find the animal with the longest life span.  The animals are in the 'outside' "
                 "location.  Focus on the animal with the longest life span.")


def reply(action: str) -> str:
    return f"Thought:\nI need to act.\n\nAction:\n{action}"


def agentgym_action(text: str) -> str:
    """What AgentGym's SciworldEnvClient.step posts for a model reply (ReAct: BaseAdapter.parse_react)."""
    if text.endswith("</s>"):
        text = text[:-5]
    parts = text.rsplit("Action:", 1)
    return parts[1].strip() if len(parts) == 2 else ""


def java_children() -> list:
    return [p for p in psutil.Process().children(recursive=True) if p.name() == "java"]


@pytest.fixture(scope="module", autouse=True)
def no_jvm_left_behind():
    """Every JVM this module starts is gone at its end (set up first, so torn down last)."""
    yield
    JVMS.close_idle()
    assert JVMS.busy == 0 and java_children() == []


@pytest.fixture(scope="module")
def env():
    env = make("sciworld")
    yield env
    env.close()


@pytest.fixture(scope="module")
def server():
    app = make_app("sciworld")
    with loopback_server(app) as url:
        yield url, app.state.pool
        for env_id in list(app.state.pool.slots):
            app.state.pool.close(env_id)


def post(url: str, path: str, body: dict | None = None):
    answer = requests.post(f"{url}/{path}", json=body, timeout=120)
    assert answer.status_code == 200, answer.text
    return answer.json()


def get(url: str, path: str, env_id: int):
    answer = requests.get(f"{url}/{path}?id={env_id}", timeout=120)  # AgentGym's client builds the query by hand
    assert answer.status_code == 200, answer.text
    return answer.json()


def create(url: str) -> int:
    answer = requests.post(f"{url}/create", timeout=120)  # AgentGym's client sends no body
    assert answer.status_code == 200
    return answer.json()["id"]


def test_game_list_is_agentgyms():
    assert TASKS == tuple(name for task_id, name in ID2TASK.items() if task_id not in EXCLUDED)
    assert len(TASKS) == 23 and NUM_GAMES == 4639
    # Appendix B.2 ranges: (first id, last id) -> task
    for first, last, task in [(0, 29, "boil"), (90, 119, "change-the-state-of-matter-of"),
                              (120, 659, "use-thermometer"), (660, 1095, "measure-melting-point-known-substance"),
                              (1436, 2335, "test-conductivity"), (2936, 3235, "find-living-thing"),
                              (4136, 4167, "chemistry-mix"), (4490, 4614, "lifespan-longest-lived-then-shortest-lived"),
                              (4629, 4638, "identify-life-stages-2")]:
        assert game(first) == (task, 0) and game(last) == (task, last - first)
        assert item_id_of(task, last - first) == last
    assert game(LIFESPAN) == ("lifespan-longest-lived", 93)
    assert all(item_id_of(*game(i)) == i for i in range(0, NUM_GAMES, 7))
    with pytest.raises(ValueError, match=r"sciworld item_id 4639 is out of range: valid ids are 0\.\.4638"):
        game(4639)
    for bad in (-1, True, "3", 1.5):
        with pytest.raises(ValueError, match=r"integer >= 0 \(sciworld: 0\.\.4638"):
            game(bad)
    assert SciWorld.category(None, 121) == "use-thermometer"
    assert SciWorld.category(None, 4638) == "identify-life-stages-2"
    assert SciWorld.success(SciWorld, 100) and not SciWorld.success(SciWorld, 99) and not SciWorld.success(SciWorld, -100)


def test_parse_action_is_agentgyms():
    parse = SciWorld.parse_action
    assert parse(None, "Thought:\nThe door is closed.\n\nAction:\nopen door to kitchen") == "open door to kitchen"
    assert parse(None, "Action: look around\nThought: no, wait\nAction:  wait1 \n") == "wait1"  # the last one
    assert parse(None, "I think I should look around.") == ""
    assert parse(None, "Action:\nmove a to b\nthen c") == "move a to b\nthen c"  # no line cut, no char filter
    assert parse(None, "Action: go to kitchen</s>") == "go to kitchen"  # AgentGym's client would post "go to kitche"
    assert agentgym_action("Action: go to kitchen</s>") == "go to kitche"


def test_item_lists_are_scienceworlds_splits():
    shipped = {split: json.loads((ITEMS / f"sciworld_{split}.json").read_text()) for split in ("train", "test")}
    assert all(set(r) == {"item_id"} and re.fullmatch(r"sciworld_\d+", r["item_id"]) for rs in shipped.values()
               for r in rs)
    train, test = item_ids("sciworld", "train"), item_ids("sciworld", "test")
    assert {"train": train, "test": test} == item_lists()  # regenerated from the jar's own variation splits
    assert len(test) == 201 and len(train) == 2312 and not set(train) & set(test)
    per_task = {task: [game(i)[1] for i in test if game(i)[0] == task] for task in TASKS}
    assert per_task["boil"] == [21, 22, 23, 24, 25, 26, 27, 28, 29]  # boil has 9 test variations (21..29): all
    assert per_task["use-thermometer"][:3] == [405, 418, 432]  # 135 test variations 405..539, every 13.5th
    assert per_task["identify-life-stages-2"] == [6, 7, 8, 9]
    assert sorted(len(v) for v in per_task.values()) == [4, 5, 5, 5, 8, 9, 9, 9, 9, 9, 9] + [10] * 12


def test_reset_steps_score_and_failure(env):
    first = env.reset(LIFESPAN)
    jvm = env.sim.pid
    assert env.task_description == LIFESPAN_TASK
    assert first == env.task_description + "\n" + env.raw == env.observe()
    assert env.raw.startswith("This room is called the greenhouse. In it, you see: \n\tthe agent\n")
    assert env.raw == env.sim.look().rstrip("\n")  # the first observation is "look around"
    assert (env.score, env.reward, env.phase) == (0, 0, "running")

    wrong = env.step(reply("fly to the moon"))
    assert (wrong.observation, wrong.reward, wrong.done) == (NO_MATCH, 0.0, False)
    assert wrong.info == {"score": 0, "step_reward": 0, "action": "fly to the moon", "valid": False}
    assert env.step(reply("open door to outside")).observation == "The door is now open."
    moved = env.step(reply("go to outside"))
    assert (moved.observation, moved.reward, moved.info["step_reward"], moved.done) == ("You move to the outside.", 50.0,
                                                                                  50, False)
    won = env.step("Thought:\nThe crocodile lives longest.\n\nAction:\nfocus on crocodile")
    assert (won.observation, won.reward, won.info["step_reward"], won.done) == ("You focus on the crocodile egg.", 100.0,
                                                                          50, True)
    assert env.success(won.reward) and env.phase == "over"
    with pytest.raises(EnvStateError, match="done"):
        env.step(reply("look around"))

    assert env.reset(LIFESPAN).startswith(LIFESPAN_TASK + "\nThis room is called the greenhouse.")
    assert env.sim.pid == jvm  # the JVM is reused across resets
    env.step(reply("open door to outside")), env.step(reply("go to outside"))
    failed = env.step(reply("focus on baby wolf"))  # not the longest-lived animal: scienceworld fails the task
    assert (failed.reward, failed.info["step_reward"], failed.done) == (-100.0, -150, True)
    assert not env.success(failed.reward)


def test_the_state_key_is_the_room_the_inventory_and_the_score_in_any_listing_order(env):
    """GiGPO's anchor key: a turn that changes nothing keeps it, one that opens a door changes it, and two listings
    of the same room in different line orders (ScienceWorld's sets) give the same key."""
    start = env.state_key(env.reset(LIFESPAN))
    assert start == (unordered_lines(env.sim.look()), unordered_lines(env.sim.inventory()), 0)
    assert env.state_key(env.step(reply("look around")).observation) == start
    opened = env.state_key(env.step(reply("open door to outside")).observation)
    assert opened != start and opened[1:] == start[1:]   # the room's door line changed, nothing else
    lines = env.sim.look().splitlines()
    assert unordered_lines("\n".join(lines[:1] + lines[:0:-1])) == opened[0]   # its objects listed backwards


def test_step_does_not_list_valid_actions(env):
    env.reset(LIFESPAN)

    def forbidden():
        raise AssertionError("step() asked the JVM for every valid action")

    env.sim.get_valid_action_object_combinations = forbidden
    try:
        assert env.step(reply("open door to outside")).observation == "The door is now open."
    finally:
        del env.sim.get_valid_action_object_combinations
    hint = env.action_hint()  # on demand only
    assert "focus on OBJ" in hint["possible_actions"] and "crocodile" not in hint["possible_objects"]
    assert "go to outside" in hint["valid_actions"] and len(hint["valid_actions"]) > 50
    assert env.goals().startswith("Completed keys:")


def test_expert_solves_a_sample_of_test_items(env):
    """One test item of each of four tasks (the full test set is measured by bench/env_sciworld.py)."""
    test = item_ids("sciworld", "test")
    tasks = ("lifespan-longest-lived", "test-conductivity", "find-animal", "chemistry-mix")
    sample = [next(i for i in test if game(i)[0] == task) for task in tasks]
    assert sample == [LIFESPAN, 1436 + 675, 3836 + 225, 4136 + 24]
    for item in sample:
        replies = env.expert(item)
        assert all(re.fullmatch(r"Thought:\nI need to [^\n]+\.\n\nAction:\n[^\n]+", r) for r in replies)
        env.reset(item)
        for turn, text in enumerate(replies, 1):  # gold paths may end in actions after the task is done
            step = env.step(text)
            if step.done:
                break
        assert step.done and step.reward == 100 and env.success(step.reward) and turn >= len(replies) - 2, item


def test_expert_during_an_episode_leaves_it_alone(env):
    """An expert asked for while an episode runs does not disturb it: it runs on another JVM of the pool."""
    env.reset(LIFESPAN)
    env.step(reply("open door to outside"))
    before = (env.sim.look(), env.moves, env.score)
    replies = env.expert(LIFESPAN)
    assert (env.sim.look(), env.moves, env.score) == before and JVMS.busy == 1
    assert [env.parse_action(r) for r in replies] == ["open door to outside", "go to outside", "focus on crocodile",
                                                      "wait1"]
    assert env.step(replies[1]).observation == "You move to the outside."  # replies[0] opened the door already
    won = env.step(replies[2])
    assert (won.observation, won.reward, won.done) == ("You focus on the crocodile egg.", 100.0, True)


def test_agentgym_client_flow(server, env):
    url, pool = server
    assert requests.get(url + "/", timeout=30).json() == "This is environment ScienceWorld."
    env_id = create(url)
    assert get(url, "detail", env_id) == {"deleted": False, "done": False}
    assert get(url, "observation", env_id) == {"error": f"The environment {env_id} has not been reset; POST /reset "
                                                        "first."}
    item = 3836 + 225  # find-animal: focus on an animal, move it to the orange box in the living room
    replies = env.expert(item)
    answer = post(url, "reset", {"id": env_id, "data_idx": item})
    env.reset(item)
    assert set(answer) == {"task_name", "var_num", "task_description", "observation", "reward", "score", "deleted",
                           "done"}
    assert (answer["task_name"], answer["var_num"], answer["deleted"], answer["done"]) == ("find-animal", 225, False,
                                                                                         False)
    assert answer["task_description"] == env.task_description
    shown = answer["task_description"] + "\n" + answer["observation"]  # what AgentGym's client observes
    assert sorted(shown.split("\n")) == sorted(env.observe().split("\n"))  # same room, objects in hash order
    deltas = [answer["reward"]]
    for text in replies:
        answer = post(url, "step", {"id": env_id, "action": agentgym_action(text)})
        assert set(answer) == {"observation", "reward", "score", "done"}
        deltas.append(answer["reward"])
        if answer["done"]:
            break
    assert answer["done"] and answer["score"] == 100 == sum(deltas)
    assert get(url, "observation", env_id) == answer["observation"]
    detail = get(url, "detail", env_id)
    assert detail["done"] and detail["score"] == 100 and detail["observation"] == answer["observation"]
    assert get(url, "goals", env_id)["goals"].startswith("Completed keys:")
    assert {"possible_actions", "possible_objects"} <= set(get(url, "action_hint", env_id))
    assert post(url, "step", {"id": env_id, "action": "look around"}) == {
        "error": f"The task with environment {env_id} has finished."}
    assert post(url, "reset", {"id": env_id, "data_idx": item})["done"] is False  # reset after done is fine
    assert post(url, "close", {"id": env_id}) is True
    assert env_id not in pool.slots
    assert post(url, "close", {"id": env_id}) == {"error": f"The task with environment {env_id} has been deleted."}
    assert post(url, "step", {"id": env_id, "action": "look around"}) == {
        "error": f"The task with environment {env_id} has been deleted."}


def test_server_robustness(server):
    url, pool = server
    for path, body in [("step", {"id": 10**6, "action": "look around"}), ("reset", {"id": 10**6, "data_idx": 0}),
                       ("close", {"id": 10**6})]:
        assert post(url, path, body) == {"error": f"The id {10**6} is not valid."}
    assert get(url, "goals", 10**6) == {"error": f"The id {10**6} is not valid."}
    env_id = create(url)
    assert post(url, "step", {"id": env_id, "action": "look around"}) == {
        "error": f"The environment {env_id} has not been reset; POST /reset first."}
    assert "valid ids are 0..4638" in post(url, "reset", {"id": env_id, "data_idx": 4639})["error"]
    bad = requests.post(f"{url}/step", data=b'{"id": 0, "action": ', headers={"Content-Type": "application/json"},
                        timeout=30)
    assert bad.status_code == 422 and "json" in bad.text.lower()
    assert requests.post(f"{url}/reset", json={"id": env_id}, timeout=30).status_code == 422
    post(url, "reset", {"id": env_id, "data_idx": LIFESPAN})
    huge = "open " + "x" * 2**20  # a megabyte: refused with a clear error before it reaches the JVM
    assert post(url, "step", {"id": env_id, "action": huge}) == {
        "error": f"sciworld: the action has {len(huge):,} characters; at most {MAX_ACTION_CHARS:,} are accepted "
                 "(a model reply is a few thousand)"}
    assert post(url, "step", {"id": env_id, "action": "open door to outside"})["observation"] == "The door is now open."

    # the JVM cap: envs beyond it are refused at /create, with the way to raise it; closing one frees a JVM
    cap = JVMS.cap
    JVMS.cap = JVMS.live  # no new JVM may start; the idle ones are handed out first
    try:
        extra = [create(url) for _ in range(len(JVMS.idle))]
        refused = post(url, "create")
        assert re.fullmatch(rf"all {JVMS.cap} ScienceWorld JVMs of this process are in use .*"
                            r"AGENTGYM_NB_SCIWORLD_JVMS=<n>.*", refused["error"])
        assert post(url, "close", {"id": env_id}) is True
        extra.append(create(url))
    finally:
        JVMS.cap = cap
    assert all(post(url, "close", {"id": i}) is True for i in extra)
    assert requests.get(url + "/", timeout=30).status_code == 200  # still serving


def test_our_client_against_our_server(server, env):
    url, pool = server
    replies = env.expert(LIFESPAN)  # before the client takes the idle JVM (env may be mid-episode: it borrows one)
    client = connect("sciworld", url)
    assert isinstance(client, SciWorldHTTP) and client.instruction == env.instruction
    assert client.instruction[0]["content"] == INSTRUCTION
    assert INSTRUCTION.startswith("You are an agent for science world. Every round I will give you an observation")
    assert INSTRUCTION.endswith('"description": "list your inventory"}]\nYour response should use the following '
                                'format:\nThought:\nyour thoughts.\n\nAction:\nyour next action')
    with pytest.raises(EnvStateError, match="before reset"):
        client.step(reply("look around"))
    first = client.reset(LIFESPAN)
    assert first.startswith(LIFESPAN_TASK + "\nThis room is called the greenhouse.") and client.observe() == first
    step = client.step(reply("fly to the moon"))
    assert (step.observation, step.reward, step.done, step.info) == (NO_MATCH, 0.0, False, {
        "score": 0, "step_reward": 0, "action": "fly to the moon", "valid": False})
    for text in replies:  # from the module's env: one JVM less than the client's own expert() would start
        step = client.step(text)
        if step.done:
            break
    assert step.done and client.success(step.reward) and step.info["score"] == 100
    assert client.observe() == step.observation
    with pytest.raises(EnvStateError, match="done"):
        client.step(reply("look around"))
    client.close()
    client.close()  # a second close is a no-op on our client
    assert client.env_id not in pool.slots


def test_a_dead_jvm_is_replaced_at_reset(env):
    env.reset(LIFESPAN)
    dead = env.sim
    dead._gateway.java_process.kill()
    dead._gateway.java_process.wait()
    with pytest.raises(EnvError, match="the ScienceWorld JVM failed .*reset\\(\\) starts a new one"):
        env.step(reply("open door to outside"))
    assert env.reset(LIFESPAN).startswith(LIFESPAN_TASK) and env.sim is not dead and env.sim.alive()
    assert env.step(reply("open door to outside")).observation == "The door is now open."
    assert JVMS.busy == 1 and dead not in JVMS.idle
