"""BabyAI with AgentGym's text interface (agentenv-babyai), on real minigrid.

Item `i` is level `GYM_IDS[i % 40]` reset with seed `i // 40`. The agent sees its 7x7 egocentric view as text and
acts with high-level actions ("go to red ball 1", "pickup grey key 2", "toggle and go through blue locked door 1",
...), each a list of minigrid primitives (0 left, 1 right, 2 forward, 3 pickup, 4 drop, 5 toggle) found by a BFS
over the visible area; a list stops early at the first primitive that leaves the view unchanged.
Reward on success is minigrid's `1 - 0.9 * step_count / max_steps` (step_count counts primitives), else 0.
"""
from __future__ import annotations

import contextlib
import copy
import io
import json
import random
import threading
from collections import deque
from dataclasses import dataclass, field

import gymnasium
import minigrid  # noqa: F401  (registers the BabyAI levels with gymnasium)
import numpy as np
from minigrid.core.constants import DIR_TO_VEC, IDX_TO_COLOR, IDX_TO_OBJECT, STATE_TO_IDX
from minigrid.core.world_object import WorldObj
from minigrid.envs.babyai.core.verifier import AfterInstr, AndInstr, BeforeInstr, ObjDesc, OpenInstr, PutNextInstr
from minigrid.utils.baby_ai_bot import (BabyAIBot, CloseSubgoal, DisappearedBoxError, DropSubgoal, GoNextToSubgoal,
                                        OpenSubgoal, PickupSubgoal)

from .base import Env, Episodes, Levels, Step, Track, check_item_id

# The gymnasium ids of AgentGym's `all_levels`, in order (a level is an index into them). GoToObjS6 is "-v1": minigrid >= 2.4 renamed the level when it fixed v0's
# room_size (v0 was registered with room_size=4), so "-v0" no longer exists.
GYM_IDS = (
    "BabyAI-GoToRedBallGrey-v0", "BabyAI-GoToRedBall-v0", "BabyAI-GoToRedBallNoDists-v0", "BabyAI-GoToObjS6-v1",
    "BabyAI-GoToLocalS8N7-v0", "BabyAI-GoToObjMazeS7-v0", "BabyAI-GoToImpUnlock-v0", "BabyAI-GoToSeqS5R2-v0",
    "BabyAI-GoToRedBlueBall-v0", "BabyAI-GoToDoor-v0", "BabyAI-GoToObjDoor-v0", "BabyAI-Open-v0",
    "BabyAI-OpenRedDoor-v0", "BabyAI-OpenDoorLoc-v0", "BabyAI-OpenRedBlueDoorsDebug-v0",
    "BabyAI-OpenDoorsOrderN4Debug-v0", "BabyAI-Pickup-v0", "BabyAI-UnblockPickup-v0", "BabyAI-PickupLoc-v0",
    "BabyAI-PickupDistDebug-v0", "BabyAI-PickupAbove-v0", "BabyAI-PutNextLocalS6N4-v0",
    "BabyAI-PutNextS7N4Carrying-v0", "BabyAI-Unlock-v0", "BabyAI-UnlockLocalDist-v0", "BabyAI-KeyInBox-v0",
    "BabyAI-UnlockPickupDist-v0", "BabyAI-BlockedUnlockPickup-v0", "BabyAI-UnlockToUnlock-v0",
    "BabyAI-ActionObjDoor-v0", "BabyAI-FindObjS7-v0", "BabyAI-KeyCorridorS6R3-v0", "BabyAI-OneRoomS20-v0",
    "BabyAI-MoveTwoAcrossS8N9-v0", "BabyAI-SynthS5R2-v0", "BabyAI-SynthLoc-v0", "BabyAI-SynthSeq-v0",
    "BabyAI-MiniBossLevel-v0", "BabyAI-BossLevel-v0", "BabyAI-BossLevelNoUnlock-v0",
)

INSTRUCTION = (
    "You are an exploration master that wants to finish every goal you are given. Every round I will give you an "
    "observation, and you have to respond an action and your thought based on the observation to finish the given "
    "task. You are placed in a room and you need to accomplish the given goal with actions.\n\nYou can use the "
    "following actions: \n\n- turn right \n\n- turn left \n\n- move forward \n\n- go to <obj> <id> \n\n- pick up "
    "<obj> <id> \n\n- go through <door> <id>: <door> must be an open door. \n\n- toggle and go through <door> <id>: "
    "<door> can be a closed door or a locked door. If you want to open a locked door, you need to carry a key that "
    "is of the same color as the locked door. \n\n- toggle: there is a closed or locked door right in front of you "
    "and you can toggle it.\nYour response should use the following format:\nThought:\n<Your Thought>\n\nAction:\n"
    "<Your Action>"
)

LEFT, RIGHT, FORWARD, PICKUP, DROP, TOGGLE = range(6)
IDX_TO_STATE = {i: s for s, i in STATE_TO_IDX.items()}
DIRS = [tuple(int(c) for c in v) for v in DIR_TO_VEC]
BLOCKING = ("wall", "box", "lava", "ball", "key")  # cells a path may not enter (doors and unseen cells are fine)
COMPLETED = "\n The task is completed."
_stdout_lock = threading.Lock()  # redirect_stdout swaps a process-wide global: one redirect at a time


def level_and_seed(item_id: int) -> tuple[str, int]:
    """item_id -> (GYM_IDS[item_id % 40], item_id // 40), AgentGym's mapping."""
    return GYM_IDS[level_index(item_id)], int(item_id) // len(GYM_IDS)


def level_index(item_id: int) -> int:
    """item_id -> its level's index in GYM_IDS (item_id % 40)."""
    return check_item_id(item_id, "babyai: any int >= 0; level = id % 40, seed = id // 40") % len(GYM_IDS)


def goal_text(mission: str) -> str:
    return mission.replace("then", "and").replace("after you", "and")


def normalize(action: str) -> str:
    """AgentGym's lower-case + strip; also "pick up X" -> "pickup X": the instruction says "pick up", the action
    list says "pickup" (AgentGym's server rejects "pick up", we accept both)."""
    action = action.lower().strip()
    return "pickup " + action[len("pick up "):] if action.startswith("pick up ") else action


def actions_suffix(actions) -> str:
    return "\nAvailable actions: [" + ", ".join(f'"{a}"' for a in actions) + "]"


@dataclass
class View:
    """What the agent sees: the description, the available actions (name -> primitives), the messages for the
    unavailable ones, and (for the expert) which action names target which grid cell."""
    description: str
    actions: dict[str, list[int]]
    errors: dict[str, str]
    targets: dict[tuple[int, int], list[str]] = field(default_factory=dict)


def find_path(start, direction, goal, blocked, xs, ys, arrive):
    """AgentGym's BFS over (cell, direction) with actions tried in the order forward, left, right.

    A state is marked visited when popped, not when queued, and every queueing overwrites its back-pointer; that
    quirk decides which of several equally short paths comes back (and rarely a longer one), so it is kept.
    Stops when standing on `goal` (arrive) or facing it; returns the primitive list, or None if there is no path.
    """
    back, seen = {}, set()
    queue = deque([(start, direction)])
    while queue:
        pos, d = queue.popleft()
        seen.add((pos, d))
        if pos == goal if arrive else (goal[0] - pos[0], goal[1] - pos[1]) == DIRS[d]:
            path = []
            while (pos, d) != (start, direction):
                (pos, d), action = back[(pos, d)]
                path.append(action)
            return path[::-1]
        for action, nxt in ((FORWARD, ((pos[0] + DIRS[d][0], pos[1] + DIRS[d][1]), d)),
                            (LEFT, (pos, (d - 1) % 4)), (RIGHT, (pos, (d + 1) % 4))):
            cell = nxt[0]
            if cell[0] not in xs or cell[1] not in ys or nxt in seen or cell in blocked:
                continue
            queue.append(nxt)
            back[nxt] = ((pos, d), action)
    return None


def read_view(world, image) -> View:
    """AgentGym's `postprocess_obs`: the egocentric `image` of `world` as text, actions and error messages."""
    size, d = world.agent_view_size, world.agent_dir
    px, py = (int(c) for c in world.agent_pos)
    (fx, fy), (rx, ry) = DIRS[d], DIRS[(d + 1) % 4]
    top = (px + fx * (size - 1) - rx * (size // 2), py + fy * (size - 1) - ry * (size // 2))
    end = (top[0] + size * (rx - fx), top[1] + size * (ry - fy))
    xs, ys = (range(e, t + 1) if e < t else range(t, e) for e, t in zip(end, top))

    objs, barriers = [], []  # objs: (name, cell, manhattan distance); barriers: (type, distance ahead)
    for j in range(size):
        for i in range(size):
            x, y = top[0] - fx * j + rx * i, top[1] - fy * j + ry * i
            dist = abs(px - x) + abs(py - y)
            if x < 0 or y < 0 or dist == 0:
                continue
            kind, color, state = (int(v) for v in image[i, j])
            kind = IDX_TO_OBJECT[kind]
            if kind in ("door", "key", "ball", "box", "goal", "lava", "wall"):
                state_word = f" {IDX_TO_STATE[state]}" if kind == "door" else ""
                objs.append((f"{IDX_TO_COLOR[color]}{state_word} {kind}", (x, y), dist))
            if kind in ("box", "wall") and fx * (y - py) - fy * (x - px) == 0:
                barriers.append((kind, fx * (x - px) + fy * (y - py)))
    objs.sort(key=lambda o: o[2])
    barriers.sort(key=lambda b: b[1])

    def ahead_and_right(cell):
        return fx * (cell[0] - px) + fy * (cell[1] - py), rx * (cell[0] - px) + ry * (cell[1] - py)

    if objs:
        text, seen = "In front of you in this room, you can see several objects: ", {}
        for name, cell, _ in objs:
            if "wall" in name:
                continue
            ahead, right = ahead_and_right(cell)
            side = "right" if right > 0 else "left"
            if right == 0:
                where = f"right in front of you {ahead} steps away. "
            else:
                where = f"{ahead} steps in front of you and {abs(right)} steps to your {side}. "
            seen[name] = seen.get(name, 0) + 1
            text += f"There is a {name} {seen[name]} {where} "
    else:
        text = "You cannot see any objects within sight."
    text += "The room has walls around you. "
    if barriers:
        text += f"You are facing a {barriers[0][0]} {barriers[0][1]} steps away. "
    carrying = world.carrying
    text += f"You are carrying a {carrying.color} {carrying.type}." if carrying else "You are not carrying anything."

    blocked = {cell for name, cell, _ in objs if any(b in name for b in BLOCKING)}

    def path_to(cell, arrive=False):
        return find_path((px, py), d, cell, blocked, xs, ys, arrive)

    actions, errors, targets = {"turn left": [LEFT], "turn right": [RIGHT]}, {}, {}

    def offer(name, cell, primitives):
        actions[name] = primitives
        targets.setdefault(cell, []).append(name)

    if not barriers or barriers[0][1] > 1:
        actions["move forward"] = [FORWARD]
    else:
        errors["move forward"] = "There is a barrier in front of you, you can't move forward."

    # Numbering quirk kept from AgentGym: pickup/go-to numbers count only reachable objects, the description's
    # numbers count all of them.
    if carrying is None:
        count = {}
        for name, cell, _ in objs:
            if any(k in name for k in ("wall", "door", "goal")):
                continue
            path = path_to(cell)
            n = count.get(name, 0) + 1
            if path is not None:
                count[name] = n
                offer(f"pickup {name} {n}", cell, path + [PICKUP])
            else:
                errors[f"pickup {name} {n}"] = f"You cannot pickup {name} {n}, as there is no path leading to it."
    if carrying is not None:
        front = (px + fx, py + fy)
        if any(cell == front and any(b in name for b in BLOCKING) for name, cell, _ in objs):
            errors["drop"] = "You cannot drop the object, as there is already an object in front of you."
        else:
            actions["drop"] = [DROP]
    else:
        errors["drop"] = "You cannot drop the object, as you are not carrying anything."

    doors = {}
    for name, cell, _ in objs:
        if "door" not in name:
            continue
        doors[name] = n = doors.get(name, 0) + 1
        if "open door" in name:
            path = path_to(cell, arrive=True)
            if path is not None:
                offer(f"go through {name} {n}", cell, path)
            else:
                errors[f"go through {name} {n}"] = (
                    f"You cannot go through {name} {n}, as there is no path leading to it.")
            continue
        if "locked door" in name:
            problem = None
            if carrying is None or carrying.type != "key":
                problem = "as you are not carrying a key."
            elif carrying.color != name.split(" ")[0]:
                problem = "as the color of the key you are carrying does not match the color of door."
            if problem:
                errors[f"toggle and go through {name} {n}"] = f"You cannot toggle and go through {name} {n}, {problem}"
                continue
        path = path_to(cell)
        if path is not None:
            offer(f"toggle and go through {name} {n}", cell, path + [TOGGLE, FORWARD])
        else:  # AgentGym prints the whole counter dict here
            errors[f"toggle and go through {name} {n}"] = (
                f"You cannot toggle and go through {name} {doors}, as there is no path leading to it.")
        if path == []:
            offer("toggle", cell, [TOGGLE])
        if "closed door" in name:
            errors[f"go through {name} {n}"] = (
                f"You cannot go through {name} {n}, as it is closed. You should toggle it first.")

    for name, cell, _ in objs:
        if "goal" in name:
            path = path_to(cell, arrive=True)
            if path is not None:
                offer("go to goal", cell, path)
            else:
                errors["go to goal"] = "You cannot go to the goal, as there is no path leading to it."

    count = {}
    for name, cell, _ in objs:
        if "wall" in name or "goal" in name:
            continue
        path = path_to(cell)
        n = count.get(name, 0) + 1
        if path is not None:
            count[name] = n
            offer(f"go to {name} {n}", cell, path)
        else:
            errors[f"go to {name} {n}"] = f"You cannot go to {name} {n}, as there is no path leading to it."
    actions["check available actions"] = []
    return View(text, actions, errors, targets)


@contextlib.contextmanager
def _quiet():
    """Swallow minigrid's "Sampling rejected: ..." prints during level generation."""
    with _stdout_lock, contextlib.redirect_stdout(io.StringIO()):
        yield


class BabyAI(Env):
    """One BabyAI episode at a time, with AgentGym's observations, actions and messages.

    The episode ends when minigrid reports success (reward > 0). A failure termination (strict missions, e.g.
    OpenDoorsOrderN4Debug) does not end it, as in AgentGym, whose wrapper resets `done` whenever reward <= 0.5; we
    differ for slow successes (0 < reward <= 0.5): AgentGym keeps those running and re-adds the stale reward to the
    score on every later invalid action, here they end and the score is the single success reward.
    """

    name, title = "babyai", "BabyAI"
    task_instruction = INSTRUCTION
    levels = Levels("level index (item_id % 40)", range(len(GYM_IDS)))
    tracks = {
        # One room, no keys: the expert needs 1-6 turns, so RL on a 2-core CPU shows learning within minutes.
        "one-room": Track("the 19 one-room levels without keys (expert: 1-6 turns)",
                          (0, 1, 2, 3, 4, 7, 8, 9, 10, 12, 13, 15, 18, 19, 20, 21, 22, 29, 32),
                          Episodes(rounds=(2, 4, 6), max_tokens=40, max_total_tokens=1536),
                          nano=dict(hesitation=0.4, bc_max_steps=450, bc_batch_tokens=8192, check_every=150,
                                    target_success=1.1)),
        # Rooms, doors, keys and mazes whose expert needs 3.5-21.5 turns (median per level): the paper's horizons
        # (6 -> 13 -> 20) matter here, so short, long and growing horizons can differ (bench/horizon.py). Its nano
        # is cloned longer than the one-room one, from a demonstrator that wastes fewer turns (0.2), with a final
        # phase whose learning rate decays to 0: episodes of up to 20 turns are harder to clone (docs/results.md
        # has the recipes tried and each one's held-out success per level).
        # At the cpu preset a run is 20 steps of 8 tasks x 4 episodes (AgentGym-RL's n; a step at H = 20 takes about
        # 25 s on two cores), stages of 7 steps: notebook 04 runs in about 13 minutes, 05 in about 20 (docs/results.md,
        # notebook run times). The horizon study (bench/horizon.py) sets its own, longer budget.
        "long": Track("multi-room, door, key and maze levels (expert: 3.5-21.5 turns, median per level) at the "
                      "paper's horizons",
                      (5, 7, 11, 14, 15, 16, 17, 20, 21, 23, 24, 26, 28, 30, 33),
                      Episodes(rounds=(6, 13, 20), max_tokens=40, max_total_tokens=4096),
                      budget=dict(samples_per_prompt=4, steps=20, rounds_every=7),
                      nano=dict(hesitation=0.2, demos=1200, bc_max_steps=1200, bc_decay_steps=600,
                                bc_batch_tokens=16384, check_every=150, target_success=1.1)),
        "all": Track("all 40 levels (the paper's item set)", None,
                     Episodes(rounds=(6, 13, 20), max_tokens=40, max_total_tokens=4096),
                     nano=dict(hesitation=0.4, bc_max_steps=600, bc_batch_tokens=16384, check_every=150,
                               target_success=1.1)),
    }
    smoke = Episodes(rounds=(1, 2), max_tokens=24, max_total_tokens=768)
    content_words = ("red", "green", "blue", "purple", "yellow", "grey", "ball", "box", "key", "door", "goal", "wall",
                     "lava", "open", "closed", "locked", "left", "right", "forward", "front", "behind", "carrying")

    def __init__(self):
        self.world = None  # the unwrapped minigrid env of the current episode, reused while the level stays the same
        self.gym_id = None  # the minigrid level of the current world
        self.item_id = None
        self.goal = ""
        self.last = ""  # the latest observation text, without the goal line and the actions list
        self._view = None
        self._image = None
        self._on_primitive = None  # expert hook: called with each primitive actually executed

    def reset(self, item_id: int) -> str:
        self.check_open()
        level, seed = level_and_seed(item_id)
        if level != self.gym_id:
            if self.world is not None:
                self.world.close()
            self.world, self.gym_id = gymnasium.make(level).unwrapped, level
        with _quiet():
            obs, _ = self.world.reset(seed=seed)
        self.item_id, self.goal = int(item_id), goal_text(self.world.mission)
        self._image, self._view = obs["image"], read_view(self.world, obs["image"])
        self.last, self.score, self.reward, self.phase = self._view.description, 0.0, 0.0, "running"
        return self.observe()

    def observe(self) -> str:
        """The latest observation with the goal line, as reset and GET /observation send it."""
        return f"Your goal: {self.goal}\n" + self.last + actions_suffix(self._view.actions)

    @property
    def available_actions(self) -> list[str]:
        return list(self._view.actions)

    def act(self, action: str) -> Step:
        """AgentGym's `BabyAI.step`: normalize, then answer "check", reject unknown actions with their message, or
        run the action's primitives (stopping at the first one that leaves the view unchanged)."""
        self.check_running()
        given, action = action, normalize(action)
        view, reward, done, valid = self._view, 0.0, False, True
        if "check" in action:
            self.last = "You can take the following actions: " + ", ".join(view.actions)
        elif action == "":
            self.last, valid = "No change in state.", False
        elif action not in view.actions:
            self.last = view.errors.get(action, "The action is not recognized. Please check valid actions.")
            valid = False
        elif not view.actions[action]:
            self.last = "No change in state."
        else:
            reward, terminated = self._run(view.actions[action])
            done = terminated and reward > 0
        self.reward = reward
        self.score += reward
        if done:
            self.phase = "over"
        info = {"score": self.score, "step_reward": reward, "action": given, "valid": valid}
        return Step(self.last + actions_suffix(self._view.actions), self.score, done, info)

    def _run(self, primitives: list[int]) -> tuple[float, bool]:
        for primitive in primitives:
            obs, reward, terminated, _, _ = self.world.step(primitive)
            if self._on_primitive:
                self._on_primitive(primitive)
            if np.array_equal(obs["image"], self._image):
                break
            self._image = obs["image"]
        self._view = read_view(self.world, obs["image"])
        self.last = self._view.description + (COMPLETED if terminated else "")
        return float(reward), bool(terminated)

    def expert(self, item_id: int, max_turns: int = 64, hesitation: float = 0.0) -> list[str]:
        """minigrid's BabyAIBot, spoken in AgentGym's action vocabulary; see `expert_replies`."""
        return expert_replies(item_id, max_turns, hesitation)

    @staticmethod
    def is_valid_action(observation: str, action: str) -> bool:
        """Would the server accept `action` in the state shown by `observation` (which ends in the actions list)?
        A client reports this as info["valid"] without asking the server."""
        action = normalize(action)
        listed = json.loads(observation[observation.rindex("\nAvailable actions: ") + 20:])
        return "check" in action or action in listed

    def state_key(self, observation: str) -> tuple:
        """The agent's cell, direction and what it carries, and every cell of the grid (walls, doors open, closed
        or locked, objects where they lie)."""
        carrying = self.world.carrying
        return (tuple(int(c) for c in self.world.agent_pos), int(self.world.agent_dir),
                (carrying.type, carrying.color) if carrying else None, self.world.grid.encode().tobytes())

    @classmethod
    def level(cls, item_id: int) -> int:
        return level_index(item_id)

    def category(self, item_id: int) -> str:
        return level_and_seed(item_id)[0]

    def close(self) -> None:
        if self.world is not None:
            self.world.close()
        self.world = self._view = self.gym_id = None
        super().close()


# ---------------------------------------------------------------- the expert

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


def _choose(env: BabyAI, bot, suggestion: int, mission_doors: list, failed: set) -> tuple[str, str] | None:
    """(thought, action) for the bot's current intent; None when the bot's primitive has no name right now."""
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


def expert_replies(item_id: int, max_turns: int = 64, hesitation: float = 0.0) -> list[str]:
    """Replies that solve `item_id`: minigrid's BabyAIBot plans, and each turn its intent is said in one action.

    When the bot heads for a listed object, the matching "go to X n" / "pickup X n" / "toggle and go through D n" is
    used; when it walks, the movement action that lands furthest along the bot's own walk; otherwise the bot's next
    primitive by name. A multi-primitive action that stops early is not retried from the same state. A bot that
    knows the room it stands in tries first; if it fails, one that knows only what it has seen. If neither solves
    the item (the bot cannot open boxes, e.g. KeyInBox, and neither can AgentGym's actions; or `max_turns` pass) the
    shorter attempt is returned: replay it and check success().

    `hesitation` > 0 makes a suboptimal demonstrator: before each turn, with that probability (seeded by the item),
    it wastes the turn on one of HESITATIONS and the bot replans from wherever that left it. Cloning it gives a
    policy that knows what to do but dawdles, which a short horizon punishes and RL can fix.
    """
    if not 0.0 <= hesitation < 1.0:
        raise ValueError(f"hesitation is a probability in [0, 1), got {hesitation}")
    attempts = []
    for knows_room in (True, False):
        replies, solved = _expert_attempt(item_id, max_turns, knows_room, hesitation)
        if solved:
            return replies
        attempts.append(replies)
    return min(attempts, key=len)


def _expert_attempt(item_id: int, max_turns: int, knows_room: bool,
                    hesitation: float = 0.0) -> tuple[list[str], bool]:
    """One run of the bot on a private env: (replies, solved)."""
    rng = random.Random(item_id)
    env = BabyAI()
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
