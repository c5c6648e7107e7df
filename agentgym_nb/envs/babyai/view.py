"""What the agent sees and can do in BabyAI: AgentGym's text for minigrid's 7x7 egocentric view, and its high-level
actions ("go to red ball 1", "toggle and go through blue locked door 1", ...) as lists of minigrid primitives found
by a BFS over the visible area (AgentGym's `postprocess_obs`)."""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from minigrid.core.constants import DIR_TO_VEC, IDX_TO_COLOR, IDX_TO_OBJECT, STATE_TO_IDX

LEFT, RIGHT, FORWARD, PICKUP, DROP, TOGGLE = range(6)
IDX_TO_STATE = {i: s for s, i in STATE_TO_IDX.items()}
DIRS = [tuple(int(c) for c in v) for v in DIR_TO_VEC]
BLOCKING = ("wall", "box", "lava", "ball", "key")  # cells a path may not enter (doors and unseen cells are fine)


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
    sight = Sight.of(world, image)
    offers = Offers(sight, world.carrying)
    # in AgentGym's order, which the actions list is printed in
    offers.move()
    offers.pickups()
    offers.drop()
    offers.doors()
    offers.goal()
    offers.go_tos()
    offers.actions["check available actions"] = []
    return View(sight.describe(world.carrying), offers.actions, offers.errors, offers.targets)


@dataclass
class Sight:
    """The agent's cell (px, py) and direction d, its forward (fx, fy) and right (rx, ry) unit vectors, the grid
    ranges its view covers (xs, ys), the objects it sees nearest first (name, cell, Manhattan distance) and the
    boxes and walls straight ahead, nearest first (kind, steps ahead)."""
    px: int
    py: int
    d: int
    fx: int
    fy: int
    rx: int
    ry: int
    xs: range
    ys: range
    objs: list[tuple[str, tuple[int, int], int]]
    barriers: list[tuple[str, int]]

    @classmethod
    def of(cls, world, image) -> Sight:
        size, d = world.agent_view_size, world.agent_dir
        px, py = (int(c) for c in world.agent_pos)
        (fx, fy), (rx, ry) = DIRS[d], DIRS[(d + 1) % 4]
        top = (px + fx * (size - 1) - rx * (size // 2), py + fy * (size - 1) - ry * (size // 2))
        end = (top[0] + size * (rx - fx), top[1] + size * (ry - fy))
        xs, ys = (range(e, t + 1) if e < t else range(t, e) for e, t in zip(end, top))
        objs, barriers = [], []
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
        return cls(px, py, d, fx, fy, rx, ry, xs, ys, objs, barriers)

    def ahead_and_right(self, cell) -> tuple[int, int]:
        return (self.fx * (cell[0] - self.px) + self.fy * (cell[1] - self.py),
                self.rx * (cell[0] - self.px) + self.ry * (cell[1] - self.py))

    def describe(self, carrying) -> str:
        """The observation's text: the objects in sight (walls left out), the barrier ahead, what is carried."""
        if self.objs:
            text, seen = "In front of you in this room, you can see several objects: ", {}
            for name, cell, _ in self.objs:
                if "wall" in name:
                    continue
                ahead, right = self.ahead_and_right(cell)
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
        if self.barriers:
            text += f"You are facing a {self.barriers[0][0]} {self.barriers[0][1]} steps away. "
        return text + (f"You are carrying a {carrying.color} {carrying.type}." if carrying else
                       "You are not carrying anything.")


class Offers:
    """The high-level actions of a sight (name -> primitives), the messages of those it cannot offer, and which
    names target which cell (for the expert), built kind by kind.

    Numbering quirk kept from AgentGym: pickup/go-to numbers count only reachable objects, the description's numbers
    count all of them."""

    def __init__(self, sight: Sight, carrying):
        self.sight, self.carrying = sight, carrying
        self.blocked = {cell for name, cell, _ in sight.objs if any(b in name for b in BLOCKING)}
        self.actions: dict[str, list[int]] = {"turn left": [LEFT], "turn right": [RIGHT]}
        self.errors: dict[str, str] = {}
        self.targets: dict[tuple[int, int], list[str]] = {}

    def path_to(self, cell, arrive=False):
        s = self.sight
        return find_path((s.px, s.py), s.d, cell, self.blocked, s.xs, s.ys, arrive)

    def offer(self, name, cell, primitives) -> None:
        self.actions[name] = primitives
        self.targets.setdefault(cell, []).append(name)

    def move(self) -> None:
        if not self.sight.barriers or self.sight.barriers[0][1] > 1:
            self.actions["move forward"] = [FORWARD]
        else:
            self.errors["move forward"] = "There is a barrier in front of you, you can't move forward."

    def pickups(self) -> None:
        if self.carrying is not None:
            return
        count = {}
        for name, cell, _ in self.sight.objs:
            if any(k in name for k in ("wall", "door", "goal")):
                continue
            path = self.path_to(cell)
            n = count.get(name, 0) + 1
            if path is not None:
                count[name] = n
                self.offer(f"pickup {name} {n}", cell, path + [PICKUP])
            else:
                self.errors[f"pickup {name} {n}"] = f"You cannot pickup {name} {n}, as there is no path leading to it."

    def drop(self) -> None:
        s = self.sight
        if self.carrying is None:
            self.errors["drop"] = "You cannot drop the object, as you are not carrying anything."
        elif any(cell == (s.px + s.fx, s.py + s.fy) and any(b in name for b in BLOCKING) for name, cell, _ in s.objs):
            self.errors["drop"] = "You cannot drop the object, as there is already an object in front of you."
        else:
            self.actions["drop"] = [DROP]

    def doors(self) -> None:
        doors = {}
        for name, cell, _ in self.sight.objs:
            if "door" not in name:
                continue
            doors[name] = n = doors.get(name, 0) + 1
            if "open door" in name:
                path = self.path_to(cell, arrive=True)
                if path is not None:
                    self.offer(f"go through {name} {n}", cell, path)
                else:
                    self.errors[f"go through {name} {n}"] = (
                        f"You cannot go through {name} {n}, as there is no path leading to it.")
                continue
            if "locked door" in name and self.key_problem(name):
                self.errors[f"toggle and go through {name} {n}"] = (
                    f"You cannot toggle and go through {name} {n}, {self.key_problem(name)}")
                continue
            path = self.path_to(cell)
            if path is not None:
                self.offer(f"toggle and go through {name} {n}", cell, path + [TOGGLE, FORWARD])
            else:  # AgentGym prints the whole counter dict here
                self.errors[f"toggle and go through {name} {n}"] = (
                    f"You cannot toggle and go through {name} {doors}, as there is no path leading to it.")
            if path == []:
                self.offer("toggle", cell, [TOGGLE])
            if "closed door" in name:
                self.errors[f"go through {name} {n}"] = (
                    f"You cannot go through {name} {n}, as it is closed. You should toggle it first.")

    def key_problem(self, door: str) -> str | None:
        """Why the carried object cannot unlock the locked `door`, or None when it can."""
        if self.carrying is None or self.carrying.type != "key":
            return "as you are not carrying a key."
        if self.carrying.color != door.split(" ")[0]:
            return "as the color of the key you are carrying does not match the color of door."
        return None

    def goal(self) -> None:
        for name, cell, _ in self.sight.objs:
            if "goal" in name:
                path = self.path_to(cell, arrive=True)
                if path is not None:
                    self.offer("go to goal", cell, path)
                else:
                    self.errors["go to goal"] = "You cannot go to the goal, as there is no path leading to it."

    def go_tos(self) -> None:
        count = {}
        for name, cell, _ in self.sight.objs:
            if "wall" in name or "goal" in name:
                continue
            path = self.path_to(cell)
            n = count.get(name, 0) + 1
            if path is not None:
                count[name] = n
                self.offer(f"go to {name} {n}", cell, path)
            else:
                self.errors[f"go to {name} {n}"] = f"You cannot go to {name} {n}, as there is no path leading to it."
