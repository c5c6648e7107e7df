"""TextCraft with AgentGym's text interface (agentenv-textcraft), on Minecraft 1.16.5 recipes from minecraft-data.

The agent is shown the crafting commands of a goal's recipe tree (plus distractors) and must `get` base items and
`craft` its way up to the goal; crafting the goal gives reward 1 and ends the episode.

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

    recipes.py    the crafting tree from minecraft-data, the goals, the item split
    env.py        the env (`TextCraft`): observation, actions, messages, reward
    expert.py     the expert's plan
    wire.py       AgentGym's TextCraft server and client
    renaming.py   renamed copies of expert episodes, for cloning the nano
"""
from .env import INSTRUCTION, TextCraft, commands, first_observation, succeeded
from .expert import expert_replies, plan
from .recipes import CraftingTree, crafting_tree, display, goal_depth, goal_of, split
from .renaming import renamed
from .wire import TextCraftClient, http_routes

__all__ = ["INSTRUCTION", "CraftingTree", "TextCraft", "TextCraftClient", "commands", "crafting_tree", "display",
           "expert_replies", "first_observation", "goal_depth", "goal_of", "http_routes", "plan", "renamed", "split",
           "succeeded"]
