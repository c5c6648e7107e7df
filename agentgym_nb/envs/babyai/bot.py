"""BabyAI's expert: minigrid's BabyAIBot plans, and each turn its intent is said in one of AgentGym's actions.

`play_bot` plays the bot in a BabyAI env it is handed (`expert_replies` in env.py hands it a private one), reading
only the env's minigrid world and current View, so this module never needs the env's class.
"""
from __future__ import annotations

import copy
import random
from collections import deque

import numpy as np
from minigrid.core.world_object import WorldObj
from minigrid.envs.babyai.core.verifier import AfterInstr, AndInstr, BeforeInstr, ObjDesc, OpenInstr, PutNextInstr
from minigrid.utils.baby_ai_bot import (BabyAIBot, CloseSubgoal, DisappearedBoxError, DropSubgoal, GoNextToSubgoal,
                                        OpenSubgoal, PickupSubgoal)

from .view import DIRS, DROP, FORWARD, LEFT, PICKUP, RIGHT, TOGGLE

MOVES = (LEFT, RIGHT, FORWARD)
PRIMITIVE_NAMES = {LEFT: "turn left", RIGHT: "turn right", FORWARD: "move forward", DROP: "drop", TOGGLE: "toggle"}


class BotStuck(Exception):
    """The bot searched too long for one decision (it can loop forever in states it was not written for)."""


class Bot(BabyAIBot):
    """BabyAIBot that knows the room it stands in, with a search budget per decision.

    Knowing the room (every cell reachable without passing a closed door) spares the look-around turns the bot
    spends to map it. When exploring through a door it prefers doors it can open now (not locked, or locked with a
    key it has seen; BabyAIBot otherwise loops on UnlockToUnlock) and doors the mission does not ask to open (an open
    door cannot be opened again with AgentGym's actions). The budget turns the bot's rare planning loops into an
    exception instead of a hang.
    """

    searches_per_decision = 500

    def __init__(self, world, knows_room: bool = True):
        self.knows_room = knows_room
        # the doors themselves, not their id()s: a deep copy of (world, bot) then holds the copied world's doors
        self.reserved_doors = [door for instr in _open_instrs(world.instrs) for door in instr.desc.obj_set]
        super().__init__(world)

    def _process_obs(self):
        super()._process_obs()
        if not self.knows_room:
            return
        world = self.mission.unwrapped
        width, height, cells, seen_mask = world.width, world.height, world.grid.grid, self.vis_mask
        start = _cell(world.agent_pos)
        todo, seen = [start], {start}
        while todo:
            x, y = todo.pop()
            seen_mask[x, y] = True
            content = cells[y * width + x]
            if (x, y) != start and content is not None and (
                    content.type == "wall" or (content.type == "door" and not content.is_open)):
                continue
            for nxt in ((x + 1, y), (x - 1, y), (x, y + 1), (x, y - 1)):
                if nxt not in seen and 0 <= nxt[0] < width and 0 <= nxt[1] < height:
                    seen.add(nxt)
                    todo.append(nxt)

    def _breadth_first_search(self, initial_states, accept_fn, ignore_blockers):
        """BabyAIBot's BFS, same visiting order, with a deque instead of re-slicing a list per pop."""
        self.bfs_counter += 1
        grid = self.mission.unwrapped.grid
        queue, previous_pos = deque((state, None) for state in initial_states), {}
        while queue:
            (i, j, di, dj), prev_pos = queue.popleft()
            if (i, j) in previous_pos:
                continue
            self.bfs_step_counter += 1
            cell = grid.grid[j * grid.width + i]
            previous_pos[(i, j)] = prev_pos
            if accept_fn((i, j), cell):
                path, pos = [], (i, j)
                while pos:
                    path.append(pos)
                    pos = previous_pos[pos]
                return path, (i, j), previous_pos
            if not self.vis_mask[i, j]:
                continue
            if cell:
                if cell.type == "wall" or (cell.type == "door" and not cell.is_open):
                    continue
                if cell.type != "door" and not ignore_blockers:
                    continue
            for k, l in ((di, dj), (dj, di), (-dj, -di), (-di, -dj)):
                if (i + k, j + l) not in previous_pos:
                    queue.append(((i + k, j + l, k, l), (i, j)))
        return None, None, previous_pos

    def replan(self, action_taken=None):
        self.searches = 0
        return super().replan(action_taken)

    def skip_reopening(self, open_instrs) -> int:
        """The bot wants to close an open door to open it again, which AgentGym's actions cannot do (toggle is only
        offered for closed doors): drop that plan, head for a closed door the mission still lets us open instead
        (if any), and return the next suggestion."""
        world = self.mission.unwrapped
        door = world.grid.get(*world.front_pos)
        self.stack.pop()
        if self.stack and isinstance(self.stack[-1], OpenSubgoal):
            self.stack.pop()
        for instr in open_instrs:
            closed = [d for d in instr.desc.obj_set if not d.is_open]
            if any(d is door for d in instr.desc.obj_set) and closed:
                here = _cell(world.agent_pos)
                nearest = min(closed, key=lambda d: abs(d.cur_pos[0] - here[0]) + abs(d.cur_pos[1] - here[1]))
                self.stack += [OpenSubgoal(self), GoNextToSubgoal(self, nearest, reason="Open")]
                break
        self.searches = 0
        for subgoal in self.stack:
            subgoal.update_agent_attributes()
        suggestion = world.actions.done
        while self.stack:
            suggestion = self.stack[-1].replan_before_action()
            if suggestion is not None:
                break
        self._remember_current_state()
        return suggestion if self.stack else world.actions.done

    def _shortest_path(self, accept_fn, try_with_blockers=False):
        self.searches += 1
        if self.searches > self.searches_per_decision:
            raise BotStuck(f"more than {self.searches_per_decision} searches for one decision")
        if accept_fn.__name__ in ("unopened_unlocked_door", "unopened_door"):  # ExploreSubgoal picking a door
            def preferred(pos, cell):
                return (accept_fn(pos, cell) and not _among(cell, self.reserved_doors)
                        and (not cell.is_locked or self._knows_key(cell.color)))
            found = super()._shortest_path(preferred, try_with_blockers)
            if found[1] is not None:
                return found
        return super()._shortest_path(accept_fn, try_with_blockers)

    def _knows_key(self, color: str) -> bool:
        world = self.mission.unwrapped
        if world.carrying is not None and world.carrying.type == "key" and world.carrying.color == color:
            return True
        return any(obj is not None and obj.type == "key" and obj.color == color and self.vis_mask[_cell(obj.cur_pos)]
                   for obj in world.grid.grid)


BOT_FAILURES = (AssertionError, BotStuck, DisappearedBoxError)


def make_bot(world, knows_room: bool = True) -> Bot:
    """A bot for `world` that also handles missions starting with the object to move already in hand
    (PutNext...Carrying), where BabyAIBot would look for it on the floor and fail."""
    bot = Bot(world, knows_room)
    if isinstance(world.instrs, PutNextInstr) and world.carrying is not None:
        bot.stack = bot.stack[:-2]  # drop GoNextTo(object to move) and Pickup: it is already carried
    return bot


def reply(thought: str, action: str) -> str:
    return f"Thought:\nI need to {thought}.\n\nAction:\n{action}"


def _among(obj, objects) -> bool:
    """`obj` is one of `objects` (by identity). Not by id(): a freed object's id is handed to the next one made, so a
    replaced subgoal could pass for the one it replaced, more or less often as the process's memory happens to be."""
    return any(obj is o for o in objects)


def _cell(vec) -> tuple[int, int]:
    return int(vec[0]), int(vec[1])


def _named(obj) -> str:
    return f"{obj.color} door" if obj.type == "door" else f"{obj.color} {obj.type}"


def _open_instrs(instr) -> list:
    """The mission's "open ..." parts."""
    if isinstance(instr, (BeforeInstr, AfterInstr, AndInstr)):
        return _open_instrs(instr.instr_a) + _open_instrs(instr.instr_b)
    return [instr] if isinstance(instr, OpenInstr) else []


def _target(bot, subgoal):
    """(cell, object or None) a GoNextTo subgoal heads for; (None, None) while the object is not found yet."""
    if isinstance(subgoal.datum, ObjDesc):
        obj, cell = bot._find_obj_pos(subgoal.datum, subgoal.reason == "PutNext")
        return (_cell(cell), obj) if cell is not None else (None, None)
    if isinstance(subgoal.datum, WorldObj):
        return _cell(subgoal.datum.cur_pos), subgoal.datum
    return _cell(subgoal.datum), bot.mission.unwrapped.grid.get(*_cell(subgoal.datum))


def _purpose(bot) -> str:
    """A short templated reason for the bot's current subgoal."""
    world, subgoal = bot.mission.unwrapped, bot.stack[-1] if bot.stack else None
    if isinstance(subgoal, PickupSubgoal):
        return f"pick up the {_named(world.grid.get(*world.front_pos))}"
    if isinstance(subgoal, DropSubgoal):
        return f"drop the {_named(world.carrying)}"
    if isinstance(subgoal, OpenSubgoal):
        return f"open the {_named(world.grid.get(*world.front_pos))}"
    if isinstance(subgoal, GoNextToSubgoal) and subgoal.reason != "Explore":
        _, obj = _target(bot, subgoal)
        if subgoal.reason == "PutNext" and obj is not None and world.carrying:
            return f"put the {_named(world.carrying)} next to the {_named(obj)}"
        if obj is not None and subgoal.reason != "PutNext":
            return f"go to the {_named(obj)}"
        return "move to a free spot"
    return "explore to find my target"


def _walk(world, primitives, early_stop: bool = True):
    """(cell, direction) after running movement `primitives` without stepping the env; with AgentGym's early stop
    (at the first primitive that leaves the view unchanged) when `early_stop`, which costs a rendered view per step."""
    pos, d, image = _cell(world.agent_pos), world.agent_dir, world.gen_obs()["image"] if early_stop else None
    saved = world.agent_pos, world.agent_dir
    try:
        for primitive in primitives:
            if primitive == FORWARD:
                ahead = world.grid.get(pos[0] + DIRS[d][0], pos[1] + DIRS[d][1])
                if ahead is None or ahead.can_overlap():
                    pos = (pos[0] + DIRS[d][0], pos[1] + DIRS[d][1])
            else:
                d = (d + (1 if primitive == RIGHT else -1)) % 4
            if not early_stop:
                continue
            world.agent_pos, world.agent_dir = pos, d
            seen = world.gen_obs()["image"]
            if np.array_equal(seen, image):
                break
            image = seen
    finally:
        world.agent_pos, world.agent_dir = saved
    return pos, d


def _preview(world, bot, suggestion: int, limit: int = 48) -> list:
    """The (cell, direction) states the bot walks through from here, on a copy, until it does anything but move or
    finishes/replaces a subgoal that is not exploratory (so a shortcut never skips a state the mission checks)."""
    world, bot = copy.deepcopy((world, bot))
    states = []
    for _ in range(limit):
        if suggestion not in MOVES:
            break
        _, _, terminated, _, _ = world.step(suggestion)
        states.append((_cell(world.agent_pos), world.agent_dir))
        kept = [g for g in bot.stack if not g.is_exploratory()]
        try:
            suggestion = bot.replan(suggestion)
        except BOT_FAILURES:
            break
        if terminated or not all(_among(g, bot.stack) for g in kept):
            break
    return states


def _shortcut(env, bot, suggestion: int, failed: set):
    """The movement action (go to / go through / move / turn) that lands furthest along the bot's own walk."""
    world, view = env.world, env._view
    here = (_cell(world.agent_pos), world.agent_dir)
    moves = [(name, primitives) for name, primitives in view.actions.items()
             if len(primitives) > 1 and all(p in MOVES for p in primitives) and (name, here) not in failed]
    if not moves:
        return None
    reach = {state: k + 1 for k, state in enumerate(_preview(world, bot, suggestion))}  # the last visit counts
    hoped = sorted(((reach.get(_walk(world, primitives, early_stop=False), 0), k) for k, (_, primitives) in
                    enumerate(moves)), key=lambda pair: -pair[0])
    best, best_reach = None, 1
    for upper_bound, k in hoped:  # the early stop can only shorten a walk: check the promising ones exactly
        if upper_bound <= best_reach:
            break
        exact = reach.get(_walk(world, moves[k][1]), 0)
        if exact > best_reach:
            best, best_reach = moves[k][0], exact
    return best


def _choose(env, bot, suggestion: int, mission_doors: list, failed: set) -> tuple[str, str] | None:
    """(thought, action) for the bot's current intent in `env` (a BabyAI env); None when the bot's primitive has no
    name right now."""
    world, view, stack = env.world, env._view, bot.stack
    top, below = (stack[-1] if stack else None), (stack[-2] if len(stack) > 1 else None)
    here = (_cell(world.agent_pos), world.agent_dir)

    def usable(name):
        return name in view.actions and (name, here) not in failed

    if isinstance(top, GoNextToSubgoal) and top.reason != "PutNext":
        cell, obj = _target(bot, top)
        if obj is not None:
            names = view.targets.get(cell, [])
            for name in names:
                if name.startswith("pickup ") and isinstance(below, PickupSubgoal) and usable(name):
                    return f"pick up the {_named(obj)}", name
                if (name.startswith("toggle and go through ") and isinstance(below, OpenSubgoal)
                        and not _among(obj, mission_doors) and usable(name)):
                    return f"open the {_named(obj)} and go through it", name
            for name in names:
                if name.startswith("go to ") and usable(name):
                    return f"go to the {_named(obj)}" + (" to open it" if isinstance(below, OpenSubgoal) else ""), name
    front = _cell(world.front_pos)
    if isinstance(top, OpenSubgoal) and suggestion == TOGGLE:
        door = world.grid.get(*front)
        for name in view.targets.get(front, []):
            if name.startswith("toggle and go through ") and not _among(door, mission_doors) and usable(name):
                return f"open the {_named(door)} and go through it", name
    if suggestion == PICKUP:
        names = [n for n in view.targets.get(front, []) if n.startswith("pickup ") and view.actions[n] == [PICKUP]]
        return (_purpose(bot), names[0]) if names else None
    if suggestion in MOVES:
        name = _shortcut(env, bot, suggestion, failed)
        if name:
            return _purpose(bot), name
    name = PRIMITIVE_NAMES.get(suggestion)
    return (_purpose(bot), name) if name in view.actions else None


# What a hesitating demonstrator does with a wasted turn: look at its options, or turn on the spot.
HESITATIONS = (("check what I can do", "check available actions"), ("look around", "turn left"),
               ("look around", "turn right"))


def play_bot(env, item_id: int, max_turns: int, knows_room: bool, hesitation: float = 0.0) -> tuple[list[str], bool]:
    """One run of the bot on item `item_id` in `env`, a new BabyAI env that is closed afterwards: (replies, solved).
    See `env.expert_replies` for the choices the bot makes and `hesitation`."""
    rng = random.Random(item_id)
    env.reset(item_id)
    bot = make_bot(env.world, knows_room)
    open_instrs = _open_instrs(env.world.instrs)
    suggestion, executed = [None], []

    def on_primitive(primitive):
        executed.append(primitive)
        try:
            suggestion[0] = bot.replan(primitive) if suggestion[0] is not None else None
        except BOT_FAILURES:
            suggestion[0] = None  # the bot is lost: stop after this turn

    env._on_primitive = on_primitive
    replies, failed = [], set()
    try:
        suggestion[0] = bot.replan()
        for _ in range(max_turns):
            if suggestion[0] is None:
                break
            if bot.stack and isinstance(bot.stack[-1], CloseSubgoal):
                suggestion[0] = bot.skip_reopening(open_instrs)
            choice = _choose(env, bot, suggestion[0], bot.reserved_doors, failed)
            if choice is None:
                break
            if hesitation and rng.random() < hesitation:
                choice = rng.choice(HESITATIONS)
            thought, action = choice
            here, planned = (_cell(env.world.agent_pos), env.world.agent_dir), env._view.actions[action]
            replies.append(reply(thought, action))
            executed.clear()
            step = env.act(action)
            if step.done:
                return replies, env.success(step.reward)
            if len(executed) < len(planned):
                failed.add((action, here))
    except BOT_FAILURES:
        pass  # the bot gave up (e.g. it opened a box, or hit one of its assertions)
    finally:
        env.close()
    return replies, False
