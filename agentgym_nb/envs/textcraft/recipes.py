"""Minecraft 1.16.5's crafting recipes as AgentGym's crafting tree, and the goals (items) built on it.

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
"""
from __future__ import annotations

import functools
import random
from dataclasses import dataclass, field

import minecraft_data

from ..base import check_item_id

VERSION = "1.16.5"
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
