"""TextCraft with AgentGym's text interface (agentenv-textcraft), on Minecraft 1.16.5 recipes from minecraft-data.

The agent is shown the crafting commands of a goal's recipe tree (plus distractors) and must `get` base items and
`craft` its way up to the goal; crafting the goal gives reward 1 and ends the episode.

Where the recipes come from. AgentGym reads the 1.16 data pack's recipe files; minecraft-data ships the same shaped
and shapeless crafting recipes (for 1.16.5), but with every tag and item list expanded into one recipe per member
and without recipe groups. `crafting_tree` folds them back: variants of one result that differ in one ingredient
covering all members of a 1.16.5 item tag (`TAGS`, largest first) become one recipe naming the tag; variants over an
item-list ingredient (`ITEM_LISTS`) keep the first alternative, as AgentGym does; the groups AgentGym turns into
output tags are given by `group_of`. From there the build follows AgentGym's `CraftingTree`, in a fixed order
(results sorted by item id, then minecraft-data's order):
- a recipe whose single input ends in "_block" is dropped (9 ingots from a block, ...);
- a recipe's group becomes its output's tag ("minecraft:planks"), which is what generic ingredients match;
- cycle guard: a recipe is skipped when its output is already a dependency of one of its inputs (first come wins:
  iron ingot from nuggets is kept, nuggets from an ingot skipped);
- clean-up: an input tag with no craftable member becomes a plain, gettable item ("oak logs", "wooden slabs").
Checked offline against AgentGym's `CraftingTree` on its own 860 recipe files (sorted order): the same 544 goals
(depth 1: 125, 2: 291, 3: 117, 4: 11), recipes, tags, groups and depths, except a stale ungrouped duplicate of
"sugar from sugar cane" (its sugar.json) that minecraft-data does not have; tests/test_textcraft.py checks the counts.

Item ids. GOALS = the craftable items (min recipe depth >= 1) sorted by (depth, item id); item `i` is the goal
`GOALS[i % len(GOALS)]`, so ids 0..543 are 544 distinct goals, easiest first. AgentGym's list is stable-sorted by
depth over `os.listdir` order, so its order inside a depth is filesystem-dependent; ours is alphabetical.

Observation. "Crafting commands:\\n<one command per line>\\n\\nGoal: craft <goal>." with AgentGym's sampling, made
deterministic: every recipe on the goal's tree (all alternatives, recursively through tags) plus up to 10
distractors drawn from up to 10 uses of each ingredient, then shuffled, all with `random.Random(42)` over ordered
lists (AgentGym seeds the global RNG with 42 but samples from Python sets, so its commands change with
PYTHONHASHSEED). The observation depends on the goal only, as in AgentGym.

Actions and messages are AgentGym's, verbatim: `get N item`, `craft N out using N a, N b` (exact counts, no extra
inputs; a generic ingredient such as "planks" is matched by any item whose group tag it is), `inventory`.
Deliberate differences: AgentGym's `traverse_recipe_tree` extends the tree's own recipe lists in place, so after a
reset `craft` on an item of that tree may also accept (and output) its sub-recipes; here the tree is never mutated.
Custom commands/goal in /create's body are ignored, as in AgentGym.
"""
from __future__ import annotations

import functools
import random
import re
from dataclasses import dataclass, field

import minecraft_data
from fastapi import FastAPI
from pydantic import BaseModel

from .base import Env, Episodes, InvalidAction, Levels, Step, Track, check_action_length, check_item_id, react_action
from .wire import EnvPool, HTTPEnv, IdBody, ResetBody, StepBody, answer, on_env

INSTRUCTION = (
    'You are given few useful crafting recipes to craft items in Minecraft. Crafting commands are of the format '
    '"craft [target object] using [input ingredients]".\nEvery round I will give you an observation, you have to '
    'respond an action based on the state and instruction. You can "get" an object (ingredients) from the inventory '
    'or the environment, look-up the game inventory by "inventory", or "craft" (target) using any of the crafting '
    'commands.\nYour output must strictly follow this format:"Thought:\nyour thoughts.\n\nAction:\nyour next '
    'action"\n\nReminder: \n1. Always specify the quantity when using "get" and "craft" commands. - Example of get: '
    'get 1 lapis lazuli - Example1 of craft: craft 1 blue dye using 1 lapis lazuli - Example2 of craft: craft 1 '
    'golden carrot using 8 gold nugget, 1 carrot\n2. When using "get" command, do not specify whether the item comes '
    'from the inventory or the environment.\n3. You can use ONLY crafting commands provided, do not use your own '
    'crafting commands. However, if the crafting command uses a generic ingredient like "planks", you can use '
    'special types of the same ingredient e.g. "dark oak planks" in the command instead.\n\n'
)
VERSION = "1.16.5"
SEED = 42  # AgentGym's reset(seed=42)
MAX_DISTRACTORS = 10

WOODS = ("oak", "spruce", "birch", "jungle", "acacia", "dark_oak")
STEMS = ("crimson", "warped")
COLOURS = ("white", "orange", "magenta", "light_blue", "yellow", "lime", "pink", "gray", "light_gray", "cyan",
           "purple", "blue", "brown", "green", "red", "black")


def _log_tags() -> dict[str, tuple[str, ...]]:
    logs = {f"{w}_logs": (f"{w}_log", f"{w}_wood", f"stripped_{w}_log", f"stripped_{w}_wood") for w in WOODS}
    stems = {f"{s}_stems": (f"{s}_stem", f"{s}_hyphae", f"stripped_{s}_stem", f"stripped_{s}_hyphae") for s in STEMS}
    return logs | stems


# The 1.16.5 item tags that crafting recipes name (members as in data/minecraft/tags/items). Two tags share their
# members with another tag or with an item list; `TAG_USERS` names the only recipes that use them.
TAGS = {
    "logs": tuple(item for members in _log_tags().values() for item in members),
    "wool": tuple(f"{c}_wool" for c in COLOURS),
    "planks": tuple(f"{w}_planks" for w in WOODS + STEMS),
    "wooden_slabs": tuple(f"{w}_slab" for w in WOODS + STEMS),
    **_log_tags(),
    "soul_fire_base_blocks": ("soul_sand", "soul_soil"),
    "coals": ("coal", "charcoal"),
    "stone_crafting_materials": ("cobblestone", "blackstone"),
    "stone_tool_materials": ("cobblestone", "blackstone"),
}
TAG_USERS = {
    "coals": {"campfire"},
    "stone_crafting_materials": {"furnace", "brewing_stand"},
    "stone_tool_materials": {f"stone_{tool}" for tool in ("sword", "shovel", "pickaxe", "axe", "hoe")},
}
# Item-list ingredients of 1.16.5 recipes ([{"item": a}, {"item": b}, ...]); AgentGym keeps the first.
ITEM_LISTS = (
    ("coal", "charcoal"), ("purpur_block", "purpur_pillar"), ("chiseled_quartz_block", "quartz_block", "quartz_pillar"),
    ("red_sandstone", "chiseled_red_sandstone", "cut_red_sandstone"),
    ("sandstone", "chiseled_sandstone", "cut_sandstone"), ("sand", "red_sand"),
)
# Recipe groups of the 1.16.5 data pack, by result; beds dyed from a white bed are "dyed_bed", white wool (from
# string) has none. A group equal to its result's id (the dyes, ingots) adds no tag, as in AgentGym.
_WOOD_GROUPS = {
    "planks": "planks", "button": "wooden_button", "door": "wooden_door", "fence": "wooden_fence",
    "fence_gate": "wooden_fence_gate", "pressure_plate": "wooden_pressure_plate", "slab": "wooden_slab",
    "stairs": "wooden_stairs", "trapdoor": "wooden_trapdoor", "sign": "sign", "boat": "boat",
}
_COLOUR_GROUPS = {"banner": "banner", "bed": "bed", "carpet": "carpet", "concrete_powder": "concrete_powder",
                  "stained_glass": "stained_glass", "stained_glass_pane": "stained_glass_pane",
                  "terracotta": "stained_terracotta", "wool": "wool"}
_SELF_GROUPS = {"black_dye", "blue_dye", "brown_dye", "light_blue_dye", "light_gray_dye", "magenta_dye",
                "orange_dye", "pink_dye", "red_dye", "white_dye", "yellow_dye", "iron_ingot", "gold_ingot",
                "netherite_ingot", "rabbit_stew", "sugar"}


def group_of(result: str, inputs: tuple[str, ...]) -> str | None:
    """The data pack's recipe group for a recipe making `result` (bare item name) from `inputs` (bare names)."""
    if result in _SELF_GROUPS:
        return result
    if result in ("stick", "bone_meal"):
        return {"stick": "sticks", "bone_meal": "bonemeal"}[result]
    for wood in WOODS + STEMS:
        if result in (f"{wood}_wood", f"{wood}_hyphae", f"stripped_{wood}_wood", f"stripped_{wood}_hyphae"):
            return "bark"
        if result.startswith(wood + "_") and result[len(wood) + 1:] in _WOOD_GROUPS:
            return _WOOD_GROUPS[result[len(wood) + 1:]]
    for colour in COLOURS:
        kind = result[len(colour) + 1:] if result.startswith(colour + "_") else None
        if kind == "bed" and "white_bed" in inputs:
            return "dyed_bed"
        if kind == "wool" and "string" in inputs:
            return None
        if kind in _COLOUR_GROUPS:
            return _COLOUR_GROUPS[kind]
    return None


def display(name: str) -> str:
    """AgentGym's `item_id_to_str`: "minecraft:dark_oak_planks" -> "dark oak planks"."""
    return name.replace("minecraft:", "").replace("_", " ")


@dataclass(frozen=True)
class Ingredient:
    name: str  # "minecraft:<item>" or, when is_tag, "minecraft:<tag>"
    count: int
    is_tag: bool = False


@dataclass(frozen=True)
class Recipe:
    output: str  # item id
    count: int
    inputs: tuple[Ingredient, ...]
    group: str | None = None  # "minecraft:<group>": AgentGym's output tag

    @property
    def command(self) -> str:
        """AgentGym's `recipe_str`: "craft 4 oak planks using 1 oak logs"."""
        uses = ", ".join(f"{i.count} {display(i.name)}" for i in self.inputs)
        return f"craft {self.count} {display(self.output)} using {uses}"


@dataclass
class CraftingTree:
    recipes: dict[str, list[Recipe]]  # item id -> its recipes (AgentGym's itemid_recipes)
    tag_recipes: dict[str, list[Recipe]]  # group tag -> the recipes of its members
    items: set[str]  # ids `get` can name (AgentGym's itemid_set; craftable ones are refused)
    tags: set[str]
    item_tag: dict[str, str]  # item id -> its group tag (the last recipe with a group wins)
    depth: dict[str, int] = field(default_factory=dict)
    goals: tuple[str, ...] = ()
    uses: dict[str, list[Recipe]] = field(default_factory=dict)  # ingredient name -> recipes using it

    def is_craftable(self, name: str) -> bool:
        return name in self.recipes or name in self.tag_recipes

    def members(self, tag: str) -> list[str]:
        return [item for item, group in self.item_tag.items() if group == tag]

    def min_depth(self, name: str, _open: frozenset = frozenset()) -> int:
        """0 for a base item; else min over recipes of (max over inputs of depth + 1). Memoised; a name already
        being expanded counts as unreachable (the cycle guard leaves none, this only keeps recursion finite)."""
        if name in self.depth:
            return self.depth[name]
        recipes = self.recipes.get(name) or self.tag_recipes.get(name)
        if not recipes:
            return 0
        if name in _open:
            return 10**9
        depth = min(max(self.min_depth(i.name, _open | {name}) + 1 for i in r.inputs) for r in recipes)
        self.depth[name] = depth
        return depth

    def tree_recipes(self, name: str) -> list[Recipe]:
        """Every recipe on `name`'s tree: its own (or its tag's), then recursively its inputs', depth first, once."""
        seen_names, seen, order = set(), set(), []

        def visit(item):
            if item in seen_names:
                return
            seen_names.add(item)
            recipes = self.recipes.get(item) or self.tag_recipes.get(item) or []
            for recipe in recipes:
                if recipe not in seen:
                    seen.add(recipe)
                    order.append(recipe)
            for recipe in recipes:
                for ingredient in recipe.inputs:
                    visit(ingredient.name)

        visit(name)
        return order


def _variants(data) -> dict[str, list[tuple[bool, tuple, int]]]:
    """minecraft-data's crafting recipes: bare result name -> [(shaped, cells, count)]; a shaped recipe's cells are
    its grid read row by row (None = empty), a shapeless one's its ingredient list."""
    name = {item_id: item["name"] for item_id, item in data.items.items()}
    variants = {}
    for result_id, recipes in data.recipes.items():
        for recipe in recipes:
            result = recipe["result"]
            if "inShape" in recipe:
                cells = tuple(None if c is None else name[c] for row in recipe["inShape"] for c in row)
                entry = (True, cells, int(result.get("count", 1)))
            else:
                entry = (False, tuple(name[c] for c in recipe["ingredients"]), int(result.get("count", 1)))
            variants.setdefault(name[int(result_id)], []).append(entry)
    return variants


def _fold(result: str, variants: list[tuple[bool, tuple, int]]) -> list[tuple[bool, tuple, int]]:
    """Undo minecraft-data's expansion for one result, one tag or item list at a time until nothing changes."""
    rules = [("#" + tag, members) for tag, members in sorted(TAGS.items(), key=lambda kv: -len(kv[1]))
             if result in TAG_USERS.get(tag, {result})]
    rules += [(None, members) for members in ITEM_LISTS]
    while True:
        for tag, members in rules:
            folded = _fold_once(variants, tag, members)
            if folded is not None:
                variants = folded
                break
        else:
            return variants


def _fold_once(variants: list, tag: str | None, members: tuple[str, ...]) -> list | None:
    """Variants that are equal but for one ingredient, which runs through all of a tag's `members`, become one
    variant naming `tag`; for an item list (tag None) any two or more alternatives become the first one's variant.
    None when no such set exists."""
    sets = {}
    for index, (shaped, cells, count) in enumerate(variants):
        present = {c for c in cells if c in members}
        if len(present) == 1:
            member = present.pop()
            template = tuple("#" if c == member else c for c in cells)
            key = (shaped, template if shaped else tuple(sorted(template, key=str)), count)
            sets.setdefault(key, {})[member] = index
    for found in sets.values():
        if set(found) == set(members) if tag else (len(found) > 1 and members[0] in found):
            keep = found[members[0]]
            shaped, cells, count = variants[keep]
            if tag:
                variants = variants[:keep] + [(shaped, tuple(tag if c == members[0] else c for c in cells),
                                                count)] + variants[keep + 1:]
            drop = set(found.values()) - {keep}
            return [v for i, v in enumerate(variants) if i not in drop]
    return None


def _ingredients(cells: tuple) -> tuple[Ingredient, ...]:
    """Distinct ingredients in order of first appearance, each counted (AgentGym counts a key's pattern cells)."""
    counts = {}
    for cell in cells:
        if cell is not None:
            counts[cell] = counts.get(cell, 0) + 1
    return tuple(Ingredient("minecraft:" + c.lstrip("#"), n, c.startswith("#")) for c, n in counts.items())


@functools.lru_cache(maxsize=1)
def crafting_tree() -> CraftingTree:
    """The crafting tree of Minecraft 1.16.5, built once per process (see the module docstring)."""
    variants = _variants(minecraft_data(VERSION))
    tree = CraftingTree(recipes={}, tag_recipes={}, items=set(), tags=set(), item_tag={})
    dependencies: dict[str, set[str]] = {}
    for result in sorted(variants):
        output = "minecraft:" + result
        for _, cells, count in _fold(result, variants[result]):
            inputs = _ingredients(cells)
            for ingredient in inputs:
                (tree.tags if ingredient.is_tag else tree.items).add(ingredient.name)
            tree.items.add(output)
            if len(inputs) == 1 and inputs[0].name.endswith("_block"):
                continue
            group = group_of(result, tuple(c for c in cells if c))
            tag = "minecraft:" + group if group else None
            if tag and tag != output:
                tree.tags.add(tag)
                tree.item_tag[output] = tag
            recipe = Recipe(output, count, inputs, tag)
            known = dependencies.setdefault(output, set())
            if any(output in dependencies.get(i.name, ()) for i in inputs):
                continue
            tree.recipes.setdefault(output, []).append(recipe)
            for ingredient in inputs:
                known.add(ingredient.name)
                known.update(dependencies.get(ingredient.name, ()))
            if tag:
                tree.tag_recipes.setdefault(tag, []).append(recipe)
    _clean_up(tree)
    tree.goals = tuple(sorted((item for item in tree.recipes if tree.min_depth(item) >= 1),
                              key=lambda item: (tree.min_depth(item), item)))
    for recipes in list(tree.recipes.values()) + list(tree.tag_recipes.values()):
        for recipe in recipes:
            for ingredient in recipe.inputs:
                uses = tree.uses.setdefault(ingredient.name, [])
                if recipe not in uses:
                    uses.append(recipe)
    return tree


def _clean_up(tree: CraftingTree) -> None:
    """An input tag none of whose members is craftable becomes a plain item (AgentGym's `clean_up_recipes`)."""
    plain = {i.name for recipes in tree.recipes.values() for r in recipes for i in r.inputs
             if i.is_tag and not any(m in tree.recipes for m in tree.members(i.name))}

    def fix(recipe):
        inputs = tuple(Ingredient(i.name, i.count) if i.name in plain else i for i in recipe.inputs)
        return recipe if inputs == recipe.inputs else Recipe(recipe.output, recipe.count, inputs, recipe.group)

    for table in (tree.recipes, tree.tag_recipes):
        for key, recipes in table.items():
            table[key] = [fix(r) for r in recipes]
    tree.items |= plain
    tree.tags -= plain


def goal_of(item_id: int) -> str:
    """item_id -> GOALS[item_id % len(GOALS)] (an item id such as "minecraft:crafting_table")."""
    goals = crafting_tree().goals
    item_id = check_item_id(item_id, f"textcraft: any int >= 0; goal = GOALS[id % {len(goals)}]")
    return goals[item_id % len(goals)]


def goal_depth(item_id: int) -> int:
    """The recipe depth of item `item_id`'s goal: its level (1 = crafted from base items)."""
    return crafting_tree().depth[goal_of(item_id)]


@functools.lru_cache(maxsize=None)
def commands(goal: str) -> tuple[str, ...]:
    """The crafting commands shown for `goal`: its tree's recipes plus up to 10 distractors, shuffled (seed 42)."""
    tree, rng = crafting_tree(), random.Random(SEED)
    recipes = tree.tree_recipes(goal)
    shown = list(dict.fromkeys(r.command for r in recipes))
    drawn = []
    for recipe in recipes:
        for ingredient in recipe.inputs:
            uses = tree.uses.get(ingredient.name, [])
            drawn += rng.sample(uses, min(len(uses), MAX_DISTRACTORS))
    candidates = [c for c in dict.fromkeys(r.command for r in drawn) if c not in shown]
    lines = shown + rng.sample(candidates, min(len(candidates), MAX_DISTRACTORS))
    rng.shuffle(lines)
    return tuple(lines)


def first_observation(goal: str) -> str:
    return "Crafting commands:\n{}\n\nGoal: craft {}.".format("\n".join(commands(goal)), display(goal))


class ActionFailed(Exception):
    """An action the game refuses; its message is the observation."""


@dataclass(frozen=True)
class Named:
    """AgentGym's ItemTag + count for a name the agent typed: a tag if the name is a known tag, else an item."""
    name: str
    count: int
    is_tag: bool

    @property
    def item_id(self) -> str | None:
        return None if self.is_tag else self.name

    def __repr__(self) -> str:  # AgentGym's dataclass repr, quoted in "Could not find a valid recipe for ..."
        tag, item = (self.name, None) if self.is_tag else (None, self.name)
        return f"ItemTagWithCount(item_tag=ItemTag(tag={tag!r}, item_id={item!r}), count={self.count})"


ACTION_PATTERNS = (("craft", r"craft (.*) using (.*)"), ("get", r"get ([0-9]+) (.*)"), ("inventory", r"inventory"))


def succeeded(observation: str) -> bool:
    """Whether a step observation reports an action the game carried out (logged as info["valid"])."""
    return observation.startswith(("Got ", "Crafted ", "Inventory: "))


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
                return {"observation": result.observation, "reward": int(result.info["step_reward"]), "done": result.done}
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
        info = {"score": self.score, "step_reward": self.reward, "action": action, "valid": succeeded(self.last_observation)}
        return Step(self.last_observation, self.score, bool(data["done"]), info)

    def observe(self) -> str:
        return self._call("GET", "observation", params={"id": self.env_id})


# The cpu nano's recipe (models.NanoSpec fields): a clone must copy item names out of the recipes, so word-level
# tokens, and each demonstration also in renamed copies so that names cannot be memorised; then cloning at a learning
# rate falling to 0.
NANO_RECIPE = dict(tokenizer="words", renamed_copies=4, bc_max_steps=800, check_every=80, bc_decay_steps=600,
                   bc_decay_lr=2e-3)
# The reply budget holds the expert's longest reply (its first thought reads the goal's recipe aloud).
CPU_EPISODES = Episodes(rounds=(4, 8, 12), max_tokens=96, max_total_tokens=2048)


class TextCraft(Env):
    """One TextCraft episode at a time, with AgentGym's observations, grammar, messages and reward."""

    name, title = "textcraft", "TextCraft"
    task_instruction = INSTRUCTION
    http_routes = staticmethod(http_routes)
    http_client = TextCraftClient
    levels = Levels("recipe depth of the goal", range(1, 5))
    tracks = {
        # Depths 3 and 4 need 11 and 19 turns on average, and a cpu nano cloned on every depth solved none.
        "shallow": Track("goals of recipe depth 1 and 2 (expert: 2-12 turns)", (1, 2), CPU_EPISODES, nano=NANO_RECIPE),
        "all": Track("every goal, depths 1-4 (the paper's item set)", None, CPU_EPISODES, nano=NANO_RECIPE),
    }
    smoke = Episodes(rounds=(1, 2), max_tokens=24, max_total_tokens=1024)
    content_words = ("craft", "get", "using", "inventory", "planks", "logs", "stick", "dye", "wool", "ingot", "nugget")

    def __init__(self):
        self.tree = crafting_tree()
        self.goal = None
        self.item_id = None
        self.inventory: dict[str, int] = {}
        self.last = ""

    def reset(self, item_id: int) -> str:
        self.check_open()
        self.goal = goal_of(item_id)
        self.item_id, self.inventory = int(item_id), {}
        self.last, self.score, self.reward, self.phase = first_observation(self.goal), 0.0, 0.0, "running"
        return self.last

    def observe(self) -> str:
        """The latest observation, as GET /observation reports it."""
        return self.last

    def act(self, action: str) -> Step:
        self.check_running()
        return self._apply(action)

    def _apply(self, action: str) -> Step:
        """AgentGym's `TextCraftEnv.step` (the server also applies actions after done, as AgentGym's does)."""
        try:
            observation, reward = self._run(action)
        except ActionFailed as failure:
            observation, reward = str(failure), 0.0
        done = reward > 0
        self.last, self.reward = observation, reward
        self.score += reward
        if done:
            self.phase = "over"
        info = {"score": self.score, "step_reward": reward, "action": action, "valid": succeeded(observation)}
        return Step(observation, self.score, done, info)

    def _run(self, action: str) -> tuple[str, float]:
        for kind, pattern in ACTION_PATTERNS:
            match = re.match(pattern, action)
            if match and kind == "craft":
                return self._craft(match.group(1), match.group(2))
            if match and kind == "get":
                return self._get(match.group(2), int(match.group(1)))
            if match:
                held = "".join(f"[{display(item)}] ({n}) " for item, n in self.inventory.items())
                return "Inventory: " + (held or "You are not carrying anything."), 0.0
        raise ActionFailed(f"Could not execute {action}")

    def named(self, text: str, count: int) -> Named:
        """AgentGym's `item_str_to_obj`: "dark oak planks" -> minecraft:dark_oak_planks, a tag if it is one."""
        name = "minecraft:" + text.replace(" ", "_")
        return Named(name, count, name in self.tree.tags)

    def _get(self, text: str, count: int) -> tuple[str, float]:
        item = self.named(text, count)
        if self.tree.is_craftable(item.name) or item.is_tag or item.name not in self.tree.items:
            raise ActionFailed(f"Could not find {text}")
        self.inventory[item.name] = self.inventory.get(item.name, 0) + count
        return f"Got {count} {text}", float(item.name == self.goal)

    def _craft(self, output_text: str, inputs_text: str) -> tuple[str, float]:
        counted = re.match("([0-9]+) (.*)", output_text)
        output = self.named(counted.group(2), int(counted.group(1))) if counted else self.named(output_text, 1)
        inputs = []
        for piece in inputs_text.split(","):
            match = re.match(r"([0-9]+) (.*)", piece.strip())
            if not match:
                raise ActionFailed(f"Wrong item format: {piece.strip()}")
            inputs.append(self.named(match.group(2), int(match.group(1))))
        if any(i.item_id not in self.inventory or self.inventory[i.item_id] < i.count for i in inputs):
            raise ActionFailed(f"Could not find enough items to craft {output.item_id}")
        recipe = self._matching_recipe(output, inputs)
        if recipe is None:
            raise ActionFailed(f"Could not find a valid recipe for {output!r}")
        for ingredient in inputs:
            self.inventory[ingredient.name] -= ingredient.count
            if self.inventory[ingredient.name] == 0:
                del self.inventory[ingredient.name]
        self.inventory[recipe.output] = self.inventory.get(recipe.output, 0) + recipe.count
        return f"Crafted {recipe.count} {recipe.output}", float(recipe.output == self.goal)

    def _matching_recipe(self, output: Named, inputs: list[Named]) -> Recipe | None:
        """The first recipe of the output whose every ingredient is given with its exact count (by item id, by tag
        or by the given item's group tag) and nothing else is given; AgentGym's `CraftingTree.craft`."""
        for recipe in self.tree.recipes.get(output.item_id, []):
            left = list(inputs)
            for ingredient in recipe.inputs:
                given = next((i for i in left if self._matches(ingredient, i)), None)
                if given is None or given.count != ingredient.count:
                    break
                left.remove(given)
            else:
                if not left:
                    return recipe
        return None

    def _matches(self, ingredient: Ingredient, given: Named) -> bool:
        if not ingredient.is_tag:
            return given.item_id == ingredient.name
        return (given.is_tag and given.name == ingredient.name) or self.tree.item_tag.get(given.name) == ingredient.name

    def expert(self, item_id: int) -> list[str]:
        return expert_replies(item_id)

    def state_key(self, observation: str) -> tuple:
        """The inventory: all an episode of one goal changes."""
        return tuple(sorted(self.inventory.items()))

    @classmethod
    def level(cls, item_id: int) -> int:
        return goal_depth(item_id)

    def category(self, item_id: int) -> str:
        return f"depth-{goal_depth(item_id)}"

    def close(self) -> None:
        self.inventory = {}
        super().close()


def reply(thought: str, action: str) -> str:
    return f"Thought:\n{thought}\n\nAction:\n{action}"


def plan(goal: str) -> list[tuple[str, str]]:
    """(thought, action) pairs that craft `goal` from base items: every base item is got once, up front, in the
    total amount the crafts need; then the crafts run bottom-up.

    Each item is made with its shallowest recipe (ties: the first); a generic ingredient ("planks") with its
    shallowest member (ties: by id). Crafting a recipe whose inputs are themselves made from a shared ingredient
    re-checks all inputs until every one is in stock, so sub-crafts never eat another input's share.
    """
    tree = crafting_tree()
    stock: dict[str, int] = {}
    needs: dict[str, int] = {}  # base item -> total to get
    crafts: list[tuple[str, str]] = []

    def concrete(ingredient: Ingredient) -> str:
        if not ingredient.is_tag:
            return ingredient.name
        return min(tree.members(ingredient.name), key=lambda m: (tree.min_depth(m), m))

    def shallowest(item: str) -> Recipe:
        return min(tree.recipes[item], key=lambda r: max(tree.min_depth(i.name) + 1 for i in r.inputs))

    def obtain(item: str, count: int) -> None:
        missing = count - stock.get(item, 0)
        if missing <= 0:
            return
        if item not in tree.recipes:
            needs[item] = needs.get(item, 0) + missing
            stock[item] = count
            return
        recipe = shallowest(item)
        parts = [(concrete(i), i.count) for i in recipe.inputs]
        for _ in range(-(-missing // recipe.count)):
            gather(parts, recipe)
            for part, n in parts:
                stock[part] -= n
            stock[item] = stock.get(item, 0) + recipe.count
            uses = ", ".join(f"{n} {display(part)}" for part, n in parts)
            thought = (f"I have everything for the goal, so I craft {display(item)}." if item == goal else
                       f"I craft {display(item)} now; a later craft needs it.")
            crafts.append((thought, f"craft {recipe.count} {display(item)} using {uses}"))

    def gather(parts: list[tuple[str, int]], recipe: Recipe) -> None:
        for _ in range(len(parts) + 1):  # each pass can only be undone by a later part's sub-crafts
            for part, n in parts:
                obtain(part, n)
            if all(stock.get(part, 0) >= n for part, n in parts):
                return
        raise RuntimeError(f"textcraft expert: could not gather the inputs of {recipe.command}")

    obtain(goal, 1)
    gets = [(f"I need {n} {display(item)}; it cannot be crafted, so I get it.", f"get {n} {display(item)}")
            for item, n in needs.items()]
    steps = gets + crafts
    # The first thought reads the goal's recipe line aloud: after "The goal is craft <goal> using" the ingredients
    # follow by copying the matching line of the observation, the one skill a small policy learns first.
    steps[0] = (f"The goal is {shallowest(goal).command}. {steps[0][0]}", steps[0][1])
    return steps


def expert_replies(item_id: int) -> list[str]:
    """Replies that solve `item_id`: `plan(goal)` in AgentGym's Thought/Action format."""
    return [reply(thought, action) for thought, action in plan(goal_of(item_id))]


# Words of item names that are also glue ("lily of the valley"; "for the goal"): never renamed.
GLUE_WORDS = frozenset({"a", "and", "o", "of", "on", "the"})


@functools.lru_cache(maxsize=None)
def item_words() -> tuple[str, ...]:
    """Every word of every item's display name, sorted, glue words left out."""
    tree = crafting_tree()
    names = {display(item) for item in (*tree.items, *tree.recipes)}
    return tuple(sorted({w for name in names for w in name.split()} - GLUE_WORDS))


def renamed(messages: list[dict], rng: random.Random) -> list[dict]:
    """An expert episode with its item-name words swapped for other item words, one-to-one and the same in every
    message ("blackstone stairs" -> "birch lantern" throughout), the instruction (messages[:2]) left alone.

    Why: TextCraft has only 374 train goals, and a nano cloned on 374 episodes memorises their names instead of
    copying them out of the crafting commands. In a renamed copy no name can be remembered, only copied; RL then
    runs on the real recipes. Words are matched between letters ("minecraft:blackstone_stairs" too)."""
    vocabulary = item_words()
    pattern = re.compile(r"(?<![A-Za-z])(" + "|".join(sorted(vocabulary, key=len, reverse=True)) + r")(?![A-Za-z])")
    used = sorted({m.group(1) for msg in messages[2:] for m in pattern.finditer(msg["content"])})
    mapping = dict(zip(used, rng.sample(vocabulary, len(used))))
    return messages[:2] + [{**msg, "content": pattern.sub(lambda m: mapping[m.group(1)], msg["content"])}
                           for msg in messages[2:]]


def split(train_size: int = 374, test_size: int = 100, seed: int = 0) -> tuple[list[int], list[int]]:
    """Goal-disjoint (train, test) item ids in [0, len(GOALS)), stratified by depth (largest-remainder quotas),
    drawn with random.Random(seed); the shipped data/items/textcraft_{train,test}.json are split()."""
    tree = crafting_tree()
    by_depth: dict[int, list[int]] = {}
    for item_id, goal in enumerate(tree.goals):
        by_depth.setdefault(tree.depth[goal], []).append(item_id)
    rng, test, train = random.Random(seed), [], []
    for size, chosen in ((test_size, test), (train_size, train)):
        pools = {d: [i for i in ids if i not in test] for d, ids in by_depth.items()}
        total = sum(len(p) for p in pools.values())
        quota = {d: size * len(p) // total for d, p in pools.items()}
        order = sorted(pools, key=lambda d: (-(size * len(pools[d]) % total), d))
        for d in order[:size - sum(quota.values())]:
            quota[d] += 1
        for d in sorted(pools):
            chosen += sorted(rng.sample(pools[d], quota[d]))
    return sorted(train), sorted(test)
