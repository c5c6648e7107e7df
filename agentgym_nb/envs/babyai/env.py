"""The BabyAI env: items as (level, seed), episodes on minigrid with AgentGym's observations, actions, messages and
reward, and `expert_replies`, the bot played in a private env."""

from __future__ import annotations

import contextlib
import io
import json
import threading

import gymnasium
import minigrid  # noqa: F401  (registers the BabyAI levels with gymnasium)
import numpy as np

from ..base import Env, Episodes, Levels, Step, Track, check_item_id
from .bot import play_bot
from .view import actions_suffix, normalize, read_view

# The gymnasium ids of AgentGym's `all_levels`, in order (a level is an index into them). GoToObjS6 is "-v1":
# minigrid >= 2.4 renamed the level when it fixed v0's room_size (v0 was registered with room_size=4), so "-v0" no
# longer exists.
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
        # phase whose learning rate decays to 0: episodes of up to 20 turns are harder to clone.
        # At the cpu preset a run is 20 steps of 8 tasks x 4 episodes (AgentGym-RL's n), stages of 7 steps: half the
        # steps and episodes per task of the one-room track, whose episodes are a third as long, so that notebooks 04
        # and 05 stay laptop runs. The horizon study (bench/horizon.py) sets its own, longer budget.
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


def expert_replies(item_id: int, max_turns: int = 64, hesitation: float = 0.0) -> list[str]:
    """Replies that solve `item_id`: minigrid's BabyAIBot plans, and each turn its intent is said in one action.

    When the bot heads for a listed object, the matching "go to X n" / "pickup X n" / "toggle and go through D n" is
    used; when it walks, the movement action that lands furthest along the bot's own walk; otherwise the bot's next
    primitive by name. A multi-primitive action that stops early is not retried from the same state. A bot that
    knows the room it stands in tries first; if it fails, one that knows only what it has seen. If neither solves
    the item (the bot cannot open boxes, e.g. KeyInBox, and neither can AgentGym's actions; or `max_turns` pass) the
    shorter attempt is returned: replay it and check success().

    `hesitation` > 0 makes a suboptimal demonstrator: before each turn, with that probability (seeded by the item),
    it wastes the turn on one of bot.HESITATIONS and the bot replans from wherever that left it. Cloning it gives a
    policy that knows what to do but dawdles, which a short horizon punishes and RL can fix.
    """
    if not 0.0 <= hesitation < 1.0:
        raise ValueError(f"hesitation is a probability in [0, 1), got {hesitation}")
    attempts = []
    for knows_room in (True, False):
        replies, solved = play_bot(BabyAI(), item_id, max_turns, knows_room, hesitation)
        if solved:
            return replies
        attempts.append(replies)
    return min(attempts, key=len)
