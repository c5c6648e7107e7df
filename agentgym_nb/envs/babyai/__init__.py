"""BabyAI with AgentGym's text interface (agentenv-babyai), on real minigrid.

Item `i` is level `GYM_IDS[i % 40]` reset with seed `i // 40`. The agent sees its 7x7 egocentric view as text and
acts with high-level actions ("go to red ball 1", "pickup grey key 2", "toggle and go through blue locked door 1",
...), each a list of minigrid primitives (0 left, 1 right, 2 forward, 3 pickup, 4 drop, 5 toggle) found by a BFS
over the visible area; a list stops early at the first primitive that leaves the view unchanged.
Reward on success is minigrid's `1 - 0.9 * step_count / max_steps` (step_count counts primitives), else 0.

    view.py   the text view: what the agent sees, and its actions as minigrid primitives
    env.py    the env (`BabyAI`): items, episodes, messages, reward; `expert_replies`
    bot.py    the expert: minigrid's BabyAIBot, its intent said in AgentGym's actions
"""
from .env import GYM_IDS, INSTRUCTION, BabyAI, expert_replies, level_and_seed, level_index
from .view import View, read_view

__all__ = ["GYM_IDS", "INSTRUCTION", "BabyAI", "View", "expert_replies", "level_and_seed", "level_index", "read_view"]
