"""The TextCraft env: the goal's crafting commands as the observation, and AgentGym's `get`, `craft` and `inventory`
with its messages and reward."""
from __future__ import annotations

import functools
import random
import re
from dataclasses import dataclass

from ..base import Env, Episodes, Levels, Step, Track
from .expert import expert_replies
from .recipes import Ingredient, Recipe, crafting_tree, display, goal_depth, goal_of

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
SEED = 42  # AgentGym's reset(seed=42)
MAX_DISTRACTORS = 10


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
