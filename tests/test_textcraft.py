"""TextCraft on minecraft-data's 1.16.5 recipes, with AgentGym's text interface (agentenv-textcraft semantics)."""
import collections
import hashlib
import json
import os
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import requests

from harness import loopback_server, require

require(envs=("textcraft",))

from agentgym_nb.envs import EnvError, EnvStateError, connect, item_ids, make
from agentgym_nb.envs.base import ACKNOWLEDGEMENT, MAX_ACTION_CHARS, MULTIPLE_ACTIONS
from agentgym_nb.envs.http import make_app
from agentgym_nb.envs.textcraft import (INSTRUCTION, TextCraft, commands, crafting_tree, expert_replies,
                                        first_observation, goal_of, renamed, split)

pytestmark = pytest.mark.timeout(120)
ROOT = Path(__file__).resolve().parent.parent


def reply(action: str) -> str:
    return f"Thought:\nI need to act.\n\nAction:\n{action}"


def item_of(goal: str) -> int:
    return crafting_tree().goals.index("minecraft:" + goal)


@pytest.fixture
def env():
    env = make("textcraft")
    yield env
    env.close()


def test_instruction_is_agentgyms():
    env = make("textcraft")
    assert isinstance(env, TextCraft) and env.instruction == [
        {"role": "user", "content": INSTRUCTION}, {"role": "assistant", "content": ACKNOWLEDGEMENT}]
    assert INSTRUCTION.startswith('You are given few useful crafting recipes to craft items in Minecraft. Crafting '
                                  'commands are of the format "craft [target object] using [input ingredients]".\n')
    assert 'format:"Thought:\nyour thoughts.\n\nAction:\nyour next action"\n\nReminder: \n1. Always' in INSTRUCTION
    assert INSTRUCTION.endswith('special types of the same ingredient e.g. "dark oak planks" in the command '
                                'instead.\n\n')


def test_tree_has_agentgyms_shape():
    """AgentGym's own 860 recipe files give 544 goals by depth 125/291/117/11 (reference B.3); the same here."""
    tree = crafting_tree()
    assert crafting_tree() is tree  # built once per process
    depths = collections.Counter(tree.depth[g] for g in tree.goals)
    assert len(tree.goals) == 544 and depths == {1: 125, 2: 291, 3: 117, 4: 11}
    assert list(tree.goals) == sorted(tree.goals, key=lambda g: (tree.depth[g], g))  # stable by depth, then by id
    assert set(tree.goals) == set(tree.recipes)

    def shown(item):
        return [r.command for r in tree.recipes["minecraft:" + item]]

    # tags fold back: "planks" (a group of 8 craftable members) stays generic, in 38 recipes
    assert shown("crafting_table") == ["craft 1 crafting table using 4 planks"]
    assert sorted(tree.members("minecraft:planks")) == [f"minecraft:{w}_planks" for w in (
        "acacia", "birch", "crimson", "dark_oak", "jungle", "oak", "spruce", "warped")]
    assert sum(any(i.name == "minecraft:planks" and i.is_tag for i in r.inputs)
               for rs in tree.recipes.values() for r in rs) == 38
    # a tag with no craftable member becomes a plain base item; two tags in one recipe (64 variants) fold too
    assert shown("oak_planks") == ["craft 4 oak planks using 1 oak logs"]
    assert shown("campfire") == ["craft 1 campfire using 3 stick, 1 coals, 3 logs"]
    assert shown("barrel") == ["craft 1 barrel using 6 planks, 2 wooden slabs"]
    assert {"minecraft:oak_logs", "minecraft:logs", "minecraft:wooden_slabs"} <= tree.items
    assert shown("stone_pickaxe") == ["craft 1 stone pickaxe using 3 stone tool materials, 2 stick"]
    # item lists keep their first alternative; a single "_block" input drops the recipe (so no quartz slab)
    assert shown("torch") == ["craft 4 torch using 1 coal, 1 stick"]
    assert shown("sandstone_stairs") == ["craft 4 sandstone stairs using 6 sandstone"]
    assert "minecraft:quartz_slab" not in tree.recipes
    assert not any(len(r.inputs) == 1 and r.inputs[0].name.endswith("_block") for rs in tree.recipes.values()
                   for r in rs)
    # cycle guard, first come first served in id order: ingots from nuggets, not nuggets from ingots
    assert shown("iron_ingot") == ["craft 1 iron ingot using 9 iron nugget"]
    assert "minecraft:iron_nugget" not in tree.recipes and "minecraft:iron_nugget" in tree.items
    # groups as in the data pack: colored wool is "wool", white wool (from string) is not
    assert tree.item_tag["minecraft:red_wool"] == "minecraft:wool" and "minecraft:white_wool" not in tree.item_tag
    assert tree.tags == {"minecraft:" + t for t in (
        "banner", "bark", "bed", "boat", "bonemeal", "carpet", "concrete_powder", "dyed_bed", "planks", "sign",
        "stained_glass", "stained_glass_pane", "stained_terracotta", "sticks", "wooden_button", "wooden_door",
        "wooden_fence", "wooden_fence_gate", "wooden_pressure_plate", "wooden_slab", "wooden_stairs",
        "wooden_trapdoor", "wool")}


def test_item_id_means_goal(env):
    goals = crafting_tree().goals
    assert goal_of(0) == goals[0] == "minecraft:acacia_planks"
    assert goal_of(544) == goal_of(0) and goal_of(544 + 183) == goal_of(183) == "minecraft:crafting_table"
    assert env.category(0) == "depth-1" and env.category(183) == "depth-2" and env.category(543) == "depth-4"
    assert env.reset(0) == "Crafting commands:\ncraft 4 acacia planks using 1 acacia logs\n\nGoal: craft acacia planks."
    assert env.reset(544) == env.reset(0)
    for bad in (-1, 1.5, "3", True, None):
        with pytest.raises(ValueError, match=r"integer >= 0 \(textcraft: any int >= 0; goal = GOALS\[id % 544\]"):
            env.reset(bad)


def test_observation_lists_the_tree_and_at_most_ten_distractors():
    tree = crafting_tree()
    # golden carrot: its own recipe, and distractors that use its ingredients (gold nugget, carrot)
    assert first_observation("minecraft:golden_carrot") == (
        "Crafting commands:\n"
        "craft 1 rabbit stew using 1 baked potato, 1 cooked rabbit, 1 bowl, 1 carrot, 1 brown mushroom\n"
        "craft 1 rabbit stew using 1 baked potato, 1 cooked rabbit, 1 bowl, 1 carrot, 1 red mushroom\n"
        "craft 1 gold ingot using 9 gold nugget\n"
        "craft 1 glistering melon slice using 8 gold nugget, 1 melon slice\n"
        "craft 1 carrot on a stick using 1 fishing rod, 1 carrot\n"
        "craft 1 golden carrot using 8 gold nugget, 1 carrot\n\n"
        "Goal: craft golden carrot.")
    by_command = collections.defaultdict(list)
    for recipe in (r for rs in tree.recipes.values() for r in rs):
        by_command[recipe.command].append(recipe)
    counts = []
    for goal in tree.goals:
        lines = commands(goal)
        tree_lines = {r.command for r in tree.tree_recipes(goal)}
        ingredients = {i.name for r in tree.tree_recipes(goal) for i in r.inputs}
        distractors = [line for line in lines if line not in tree_lines]
        assert tree_lines <= set(lines) and len(lines) == len(set(lines))
        assert all(any(i.name in ingredients for r in by_command[line] for i in r.inputs) for line in distractors)
        counts.append(len(distractors))
    assert max(counts) == 10 and min(counts) == 0
    # crafting table: the planks tag pulls in all 8 plank recipes
    assert {f"craft 4 {w} planks using 1 {w} logs" for w in ("oak", "spruce", "dark oak")} <= set(
        commands("minecraft:crafting_table"))


DIGEST = """
import hashlib, json
from agentgym_nb.envs.textcraft import crafting_tree, first_observation
tree = crafting_tree()
text = json.dumps([tree.goals, [first_observation(g) for g in tree.goals]])
print(hashlib.sha256(text.encode()).hexdigest())
"""


def test_goals_and_observations_do_not_depend_on_the_process():
    """Two fresh interpreters with different hash seeds and working directories build identical text."""
    digests = []
    for seed, cwd in (("1", "/"), ("4242", str(ROOT))):
        environment = dict(os.environ, PYTHONHASHSEED=seed, PYTHONPATH=str(ROOT))
        done = subprocess.run([sys.executable, "-c", DIGEST], capture_output=True, text=True, timeout=120,
                              env=environment, cwd=cwd)
        assert done.returncode == 0, done.stderr
        digests.append(done.stdout.strip())
    tree = crafting_tree()
    here = hashlib.sha256(json.dumps([tree.goals, [first_observation(g) for g in tree.goals]]).encode()).hexdigest()
    assert digests[0] == digests[1] == here


def test_actions_and_messages(env):
    env.reset(item_of("crafting_table"))
    cases = [
        ("get 4 oak planks", "Could not find oak planks"),  # craftable: must be crafted
        ("get 4 planks", "Could not find planks"),  # a tag
        ("get 1 unobtainium", "Could not find unobtainium"),
        ("inventory", "Inventory: You are not carrying anything."),
        ("craft 1 crafting table using 4 planks", "Could not find enough items to craft minecraft:crafting_table"),
        ("craft 1 crafting table using oak planks", "Wrong item format: oak planks"),
        ("get 2 oak logs", "Got 2 oak logs"),
        ("craft 4 oak planks using 2 oak logs",  # exact counts only
         "Could not find a valid recipe for ItemTagWithCount(item_tag=ItemTag(tag=None, "
         "item_id='minecraft:oak_planks'), count=4)"),
        ("craft 9 oak planks using 1 oak logs", "Crafted 4 minecraft:oak_planks"),  # the count asked is ignored
        ("craft 4 planks using 1 oak logs", "Could not find a valid recipe for ItemTagWithCount(item_tag="
         "ItemTag(tag='minecraft:planks', item_id=None), count=4)"),
        ("craft 4 oak planks using 1 oak log", "Could not find enough items to craft minecraft:oak_planks"),
        ("inventory", "Inventory: [oak logs] (1) [oak planks] (4) "),
        ("Inventory", "Could not execute Inventory"),  # case matters, as in AgentGym
        ("dance", "Could not execute dance"),
        ("", "Could not execute "),
    ]
    for action, message in cases:
        step = env.act(action)
        assert (step.observation, step.reward, step.done) == (message, 0.0, False), action
        assert step.info["valid"] == message.startswith(("Got", "Crafted", "Inventory:"))
    step = env.step(reply("craft 1 crafting table using 4 oak planks") + "\nAction: inventory")
    assert (step.observation, step.done) == (MULTIPLE_ACTIONS, False)


def test_generic_ingredients_match_by_group(env):
    env.reset(item_of("painting"))
    for action in ("get 1 spruce logs", "get 1 dark oak logs", "craft 4 spruce planks using 1 spruce logs",
                   "craft 4 dark oak planks using 1 dark oak logs"):
        assert env.act(action).info["valid"]
    # one recipe ingredient "4 planks": two kinds of planks are two inputs, so the recipe does not match
    mixed = env.act("craft 1 crafting table using 2 spruce planks, 2 dark oak planks")
    assert mixed.observation.startswith("Could not find a valid recipe for ")
    assert env.act("craft 4 stick using 2 dark oak planks").observation == "Crafted 4 minecraft:stick"
    assert env.act("craft 4 stick using 2 spruce planks, 2 stick").observation.startswith("Could not find a valid")
    assert env.act("craft 4 stick using 2 spruce planks").observation == "Crafted 4 minecraft:stick"
    # "wool" is the group of the 15 dyed wools; white wool (made from string) is not one of them, as in AgentGym
    for action in ("get 4 string", "craft 1 white wool using 4 string", "get 1 poppy",
                   "craft 1 red dye using 1 poppy"):
        assert env.act(action).info["valid"], action
    white = env.act("craft 1 painting using 8 stick, 1 white wool")
    assert white.observation.startswith("Could not find a valid recipe") and not white.done
    assert env.act("get 4 string").info["valid"] and env.act("craft 1 white wool using 4 string").info["valid"]
    assert env.act("craft 1 red wool using 1 red dye, 1 white wool").observation == "Crafted 1 minecraft:red_wool"
    done = env.step(reply("craft 1 painting using 8 stick, 1 red wool"))
    assert (done.observation, done.reward, done.done, done.info["score"]) == ("Crafted 1 minecraft:painting", 1.0,
                                                                              True, 1.0)
    assert env.success(done.reward)
    with pytest.raises(EnvStateError, match="done"):
        env.step(reply("inventory"))


def test_expert_solves_every_goal():
    """All 544 goals (the 100 test items among them), replayed through step(); fast because pure Python."""
    env, lengths = make("textcraft"), []
    for item in range(len(crafting_tree().goals)):
        replies = expert_replies(item)
        env.reset(item)
        steps = [env.step(text) for text in replies]
        assert steps[-1].done and env.success(steps[-1].reward), item
        assert not any(s.done for s in steps[:-1]) and all(s.info["valid"] for s in steps), item
        lengths.append(len(replies))
    assert min(lengths) == 2 and max(lengths) <= 60
    test = item_ids("textcraft", "test")
    assert sum(lengths[i] <= 30 for i in test) >= 99  # AgentGym-RL evaluates TextCraft with 30 rounds


def test_a_renamed_episode_swaps_item_words_one_to_one_and_keeps_the_rest():
    """The nano's extra demonstrations: blackstone stairs (item 7's goal) under other names, consistently."""
    import random
    env = make("textcraft")
    first = env.reset(item_of("blackstone_stairs"))
    replies = expert_replies(item_of("blackstone_stairs"))
    messages = [{"role": "user", "content": INSTRUCTION}, {"role": "assistant", "content": "OK."},
                {"role": "user", "content": first}]
    for text in replies:
        messages += [{"role": "assistant", "content": text}, {"role": "user", "content": env.step(text).observation}]
    new = renamed(messages, random.Random(0))
    assert new[:2] == messages[:2]                     # the instruction's examples keep their real names
    old_text, new_text = [" || ".join(m["content"] for m in ms[2:]) for ms in (messages, new)]
    old_words, new_words = re.findall("[A-Za-z]+", old_text), re.findall("[A-Za-z]+", new_text)
    assert len(old_words) == len(new_words)            # only whole words change ("minecraft:blackstone_stairs" too)
    swaps = {(a, b) for a, b in zip(old_words, new_words) if a != b}
    assert {a for a, _ in swaps} == {"blackstone", "polished", "slab", "wall", "stairs"}
    assert len({a for a, _ in swaps}) == len({b for _, b in swaps})             # one-to-one
    assert "blackstone" not in new_text and "Goal: craft " in new_text and "so I get it." in new_text
    assert "get 6 " in new_text and "craft 4 " in new_text                       # counts are kept


def test_shipped_splits_are_goal_disjoint_and_stratified():
    train, test = item_ids("textcraft", "train"), item_ids("textcraft", "test")
    assert (train, test) == split()
    assert len(train) == 374 and len(test) == 100
    goals = crafting_tree().goals
    assert max(train + test) < len(goals)  # one id per goal, so disjoint ids are disjoint goals
    assert not {goal_of(i) for i in train} & {goal_of(i) for i in test}
    env = make("textcraft")
    assert collections.Counter(env.category(i) for i in test) == {"depth-1": 23, "depth-2": 53, "depth-3": 22,
                                                                  "depth-4": 2}
    records = json.loads((ROOT / "agentgym_nb/data/items/textcraft_test.json").read_text())
    assert records[0] == {"item_id": f"textcraft_{test[0]}"} and set(records[0]) == {"item_id"}


# ---- HTTP: AgentGym's wire format ----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def server():
    app = make_app("textcraft")
    with loopback_server(app) as url:
        yield url, app.state.pool


class AgentGymClient:
    """What agentenv's TextCraftEnvClient sends and reads (agentenv/envs/textcraft.py at 640f8bc..HEAD)."""

    def __init__(self, base: str):
        self.base = base
        answer = requests.post(f"{base}/create", timeout=30,
                               json={"minecraft_dir": "agentenv_textcraft/", "commands": None, "goal": None})
        assert answer.status_code == 200
        answer = answer.json()
        self.env_id, self.info = answer["id"], {"observation": answer["observation"], "reward": 0, "done": False}

    def _post(self, path, data):
        data["id"] = self.env_id
        answer = requests.post(f"{self.base}/{path}", json=data, timeout=30)
        assert answer.status_code == 200
        return answer.json()

    def _get(self, path):
        answer = requests.get(f"{self.base}/{path}?id={self.env_id}", timeout=30)
        assert answer.status_code == 200
        return answer.json()

    def step(self, text):
        import re
        matches = re.findall(r"Action:\s*(.*?)(?=\n|$)", text, re.DOTALL)
        if len(matches) > 1:
            return MULTIPLE_ACTIONS, 0, False
        action = " ".join(re.sub(r"[^A-Za-z0-9, ]+", "", matches[-1] if matches else "").split()).strip()
        response = self._post("step", {"action": action})
        self.info = {"observation": response["observation"], "reward": response["reward"], "done": response["done"]}
        return response["observation"], response["reward"], response["done"]

    def reset(self, idx):
        response = self._post("reset", {"data_idx": idx})
        self.info.update({"observation": response["observation"], "reward": 0, "done": False})
        return response

    def close(self):
        return self._post("close", {})


def test_agentgym_client_against_our_server(server):
    url, pool = server
    assert requests.get(url + "/", timeout=30).json() == "This is environment TextCraft."
    client = AgentGymClient(url)
    # /create resets the new env to item = its id
    assert client.info["observation"] == first_observation(goal_of(client.env_id))
    assert client._get("observation") == client.info["observation"]
    for item in (item_of("painting"), item_ids("textcraft", "test")[-1]):
        local = make("textcraft")
        assert client.reset(item) == {"id": client.env_id, "observation": local.reset(item), "done": False,
                                      "reward": 0}
        for text in [reply("get 1 nothing")] + expert_replies(item):
            expected = local.step(text)
            assert client.step(text) == (expected.observation, expected.info["step_reward"], expected.done)
        assert client.info == {"observation": expected.observation, "reward": 1, "done": True}
        assert client._get("observation") == expected.observation
        assert client._get("detail") == {"observation": expected.observation, "done": True, "reward": 1,
                                         "deleted": False}
    # AgentGym's server has no "finished" check: stepping after done goes on
    assert client.step(reply("inventory"))[0].startswith("Inventory: [")
    # a whole reply posted to /step is extracted by our server (AgentGym's would answer "Could not execute ...")
    assert client._post("step", {"action": reply("inventory")}) == client._post("step", {"action": "inventory"})
    assert client._post("step", {"action": reply("a") + "\nAction: b"}) == {"observation": MULTIPLE_ACTIONS,
                                                                            "reward": 0, "done": False}
    assert client.close() is True and client.env_id not in pool.slots


def test_our_client_against_our_server(server):
    url, pool = server
    env, local = connect("textcraft", url), make("textcraft")
    assert env.instruction == local.instruction
    with pytest.raises(EnvStateError, match="before reset"):
        env.step(reply("inventory"))
    item = item_of("campfire")
    assert env.reset(item) == local.reset(item)
    for text in [reply("get 1 logs") + "\nAction: inventory", reply("craft 1 campfire using 1 logs")] + env.expert(
            item):
        ours, theirs = env.step(text), local.step(text)
        assert (ours.observation, ours.reward, ours.done, ours.info) == (
            theirs.observation, theirs.reward, theirs.done, theirs.info)
    assert ours.done and env.success(ours.reward) and ours.info["score"] == 1.0
    with pytest.raises(EnvStateError, match="done"):
        env.step(reply("inventory"))
    assert env.observe() == local.observe() == ours.observation
    env.close()
    env.close()  # closing twice is harmless on the client
    assert env.env_id not in pool.slots


def test_server_errors_and_robustness(server):
    url, pool = server

    def post(path, body=None, **kw):
        answer = requests.post(f"{url}/{path}", timeout=30, **({"json": body} if body is not None else kw))
        return answer.status_code, answer.json()

    gone = 10**6
    for path, body in (("step", {"id": gone, "action": "inventory"}), ("reset", {"id": gone, "data_idx": 0})):
        assert post(path, body) == (200, {"error": f"The id {gone} is not valid."})
    for path in ("observation", "detail"):
        assert requests.get(f"{url}/{path}", params={"id": gone}, timeout=30).json() == {
            "error": f"The id {gone} is not valid."}
    status, created = post("create", {})
    assert status == 200 and created["observation"].startswith("Crafting commands:\n")
    status, bare = post("create", data=b"")  # no body at all is fine too
    assert status == 200 and bare["id"] == created["id"] + 1
    env_id = created["id"]
    status, error = post("reset", {"id": env_id, "data_idx": -1})
    assert "integer >= 0" in error["error"]
    assert post("reset", {"id": env_id}) == (200, {"id": env_id, "observation": first_observation(goal_of(0)),
                                                   "done": False, "reward": 0})  # data_idx defaults to 0
    # malformed JSON and missing fields: FastAPI's 422, and the server keeps serving
    broken = requests.post(f"{url}/step", data=b'{"id": 0, "action": ', timeout=30,
                           headers={"Content-Type": "application/json"})
    assert broken.status_code == 422 and "json" in broken.text.lower()
    assert requests.post(f"{url}/step", json={"id": env_id}, timeout=30).status_code == 422
    huge = "craft 1 x using " + "1 a, " * (1 << 18)  # over a megabyte
    assert post("step", {"id": env_id, "action": huge}) == (200, {
        "error": f"textcraft: the action has {len(huge):,} characters; at most {MAX_ACTION_CHARS:,} are accepted "
                 "(a model reply is a few thousand)"})
    assert post("step", {"id": env_id, "action": "inventory"}) == (200, {
        "observation": "Inventory: You are not carrying anything.", "reward": 0, "done": False})
    assert post("close", {"id": env_id}) == (200, True)
    assert post("close", {"id": env_id}) == (200, False)
    assert post("step", {"id": env_id, "action": "inventory"}) == (200, {"error": f"The id {env_id} is not valid."})
    assert post("close", {"id": bare["id"]}) == (200, True)
    assert requests.get(url + "/", timeout=30).json() == "This is environment TextCraft."


def test_client_errors_raise_env_error(server):
    url, pool = server
    env = connect("textcraft", url)
    env.reset(0)
    pool.close(env.env_id)
    with pytest.raises(EnvError, match="not valid"):
        env.step(reply("inventory"))
    with pytest.raises(EnvError, match="HTTP 404"):
        connect("textcraft", url + "/nowhere")


def test_many_envs_concurrently_and_no_leak(server):
    url, pool = server
    before = set(pool.slots)
    items = item_ids("textcraft", "test")[:24]

    def episode(item):
        env = connect("textcraft", url)
        env.reset(item)
        steps = [env.step(text) for text in env.expert(item)]
        env.close()
        return steps[-1].done and steps[-1].reward == 1.0

    with ThreadPoolExecutor(12) as threads:
        assert all(threads.map(episode, items))
    for _ in range(200):  # create/reset/step/close cycles leave nothing behind
        env = connect("textcraft", url)
        env.reset(7)
        env.step(reply("inventory"))
        env.close()
    assert set(pool.slots) == before
