"""TextCraft's expert: a plan that gets every base item once, up front, then crafts bottom-up."""
from __future__ import annotations

from .recipes import Ingredient, Recipe, crafting_tree, display, goal_of


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
