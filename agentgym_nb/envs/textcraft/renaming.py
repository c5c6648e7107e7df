"""Renamed copies of expert episodes, for cloning the nano on TextCraft (`NanoSpec.renamed_copies`)."""
from __future__ import annotations

import functools
import random
import re

from .recipes import crafting_tree, display

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
