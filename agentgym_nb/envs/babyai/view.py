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
