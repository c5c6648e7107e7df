"""BabyAI on real minigrid, with AgentGym's text interface (agentenv-babyai semantics)."""
import json
import re
import time

import gymnasium
import pytest

from agentgym_nb import envs
from agentgym_nb.config import item_pool, make_config
from agentgym_nb.envs import ENV_NAMES, EnvStateError, InvalidAction, make
from agentgym_nb.envs import registry as env_registry
from agentgym_nb.envs.babyai import INSTRUCTION, GYM_IDS, BabyAI, expert_replies, level_and_seed
from agentgym_nb.envs.base import ACKNOWLEDGEMENT, MULTIPLE_ACTIONS, react_action

# Item 0 = GoToRedBallGrey, seed 0: an 8x8 room (walls on x, y = 0 and 7), agent at (6, 5) facing west, so "front"
# is -x and "right" is -y. Objects: grey key (5,6) (4,6) (4,4) (2,3), grey ball (5,4) (1,4), grey box (4,3), red ball
# (2,2). E.g. the key at (5,6) is 1 ahead and 1 to the left (Manhattan 2); ties in distance keep the view's row
# order, far rows first, so the ball at (1,4) (5 ahead) precedes the key at (2,3) (4 ahead), both at distance 6.
ITEM0_ACTIONS = ('["turn left", "turn right", "move forward", "pickup grey key 1", "pickup grey ball 1", '
                 '"pickup grey key 2", "pickup grey key 3", "pickup grey box 1", "pickup grey ball 2", '
                 '"pickup grey key 4", "pickup red ball 1", "go to grey key 1", "go to grey ball 1", '
                 '"go to grey key 2", "go to grey key 3", "go to grey box 1", "go to grey ball 2", "go to grey key 4", '
                 '"go to red ball 1", "check available actions"]')
ITEM0 = (
    "Your goal: go to the red ball\n"
    "In front of you in this room, you can see several objects: "
    "There is a grey key 1 1 steps in front of you and 1 steps to your left.  "
    "There is a grey ball 1 1 steps in front of you and 1 steps to your right.  "
    "There is a grey key 2 2 steps in front of you and 1 steps to your left.  "
    "There is a grey key 3 2 steps in front of you and 1 steps to your right.  "
    "There is a grey box 1 2 steps in front of you and 2 steps to your right.  "
    "There is a grey ball 2 5 steps in front of you and 1 steps to your right.  "
    "There is a grey key 4 4 steps in front of you and 2 steps to your right.  "
    "There is a red ball 1 4 steps in front of you and 3 steps to your right.  "
    "The room has walls around you. You are facing a wall 6 steps away. You are not carrying anything.\n"
    "Available actions: " + ITEM0_ACTIONS
)
# After "turn right" the agent faces north (front -y, right +x): only the ball (5,4), key (4,4) and box (4,3) are
# within 3 columns of it; the north wall (y = 0) is 5 ahead.
ITEM0_NORTH = (
    "In front of you in this room, you can see several objects: "
    "There is a grey ball 1 1 steps in front of you and 1 steps to your left.  "
    "There is a grey key 1 1 steps in front of you and 2 steps to your left.  "
    "There is a grey box 1 2 steps in front of you and 2 steps to your left.  "
    "The room has walls around you. You are facing a wall 5 steps away. You are not carrying anything.\n"
    'Available actions: ["turn left", "turn right", "move forward", "pickup grey ball 1", "pickup grey key 1", '
    '"pickup grey box 1", "go to grey ball 1", "go to grey key 1", "go to grey box 1", "check available actions"]'
)


def reply(action: str) -> str:
    return f"Thought:\nI need to act.\n\nAction:\n{action}"


@pytest.fixture
def env():
    env = make("babyai")
    yield env
    env.close()


def test_registry_and_instruction():
    assert ENV_NAMES[0] == "babyai" and "webarena" in ENV_NAMES
    with pytest.raises(ValueError, match="did you mean 'babyai'"):
        make("babya")
    env = make("babyai")
    assert isinstance(env, BabyAI) and env.name == "babyai"
    assert env.instruction == [{"role": "user", "content": INSTRUCTION},
                               {"role": "assistant", "content": ACKNOWLEDGEMENT}]
    assert INSTRUCTION.startswith("You are an exploration master that wants to finish every goal you are given.")
    assert INSTRUCTION.endswith(
        "Your response should use the following format:\nThought:\n<Your Thought>\n\nAction:\n<Your Action>")
    assert "- pick up <obj> <id> \n\n- go through <door> <id>: <door> must be an open door. \n\n" in INSTRUCTION


def test_item_id_means_level_and_seed(env):
    assert len(set(GYM_IDS)) == 40
    assert level_and_seed(0) == ("BabyAI-GoToRedBallGrey-v0", 0)
    assert level_and_seed(41) == ("BabyAI-GoToRedBall-v0", 1)
    assert level_and_seed(81) == ("BabyAI-GoToRedBall-v0", 2)
    assert level_and_seed(3) == ("BabyAI-GoToObjS6-v1", 0)
    assert level_and_seed(79) == ("BabyAI-BossLevelNoUnlock-v0", 1)
    env.reset(81)
    reference = gymnasium.make("BabyAI-GoToRedBall-v0").unwrapped
    reference.reset(seed=2)
    assert env.gym_id == "BabyAI-GoToRedBall-v0"
    assert (env.world.agent_pos, env.world.agent_dir, env.world.mission) == (
        reference.agent_pos, reference.agent_dir, reference.mission)
    assert (env.world.grid.encode() == reference.grid.encode()).all()


def test_observation_text_on_a_hand_checked_grid(env):
    assert env.reset(0) == ITEM0
    step = env.step(reply("turn right"))
    assert step.observation == ITEM0_NORTH
    assert (step.reward, step.done, step.info) == (0.0, False, {"score": 0.0, "step_reward": 0.0, "action": "turn right",
                                                                "valid": True})
    # facing the east wall at distance 1: no object listed (AgentGym still prints the header), no "move forward"
    step = env.step(reply("turn right"))
    assert step.observation == (
        "In front of you in this room, you can see several objects: The room has walls around you. You are facing a "
        'wall 1 steps away. You are not carrying anything.\nAvailable actions: ["turn left", "turn right", '
        '"check available actions"]')
    assert env.step(reply("move forward")).observation.startswith(
        "There is a barrier in front of you, you can't move forward.\nAvailable actions: [")
    assert env.observe().startswith("Your goal: go to the red ball\nThere is a barrier")


def test_nothing_in_sight(env):
    # OneRoomS20 seed 0: an empty 7x7 view in a 20x20 room (AgentGym's missing space after "sight." kept)
    assert env.reset(32) == (
        "Your goal: pick up the ball\nYou cannot see any objects within sight.The room has walls around you. You are "
        'not carrying anything.\nAvailable actions: ["turn left", "turn right", "move forward", "check available '
        'actions"]')


def test_action_extraction():
    assert react_action("Thought:\nThe ball is near.\n\nAction:\ngo to red ball 1") == "go to red ball 1"
    assert react_action("Action:   Go-To red_ball 1!\nmore text") == "GoTo redball 1"
    assert react_action("no action at all") == ""
    with pytest.raises(InvalidAction) as bad:
        react_action("Action: turn left\nAction: turn right")
    assert bad.value.observation == MULTIPLE_ACTIONS


def test_actions_and_messages(env):
    env.reset(0)
    after_reset = "\nAvailable actions: " + ITEM0_ACTIONS
    cases = [
        (reply("go to red ball 9"), "The action is not recognized. Please check valid actions.", False),
        (reply("drop"), "You cannot drop the object, as you are not carrying anything.", False),
        ("I will just think this time.", "No change in state.", False),
        (reply("check available actions"), "You can take the following actions: turn left, turn right, move forward, "
         "pickup grey key 1, pickup grey ball 1, pickup grey key 2, pickup grey key 3, pickup grey box 1, pickup grey "
         "ball 2, pickup grey key 4, pickup red ball 1, go to grey key 1, go to grey ball 1, go to grey key 2, go to "
         "grey key 3, go to grey box 1, go to grey ball 2, go to grey key 4, go to red ball 1, check available "
         "actions", True),
    ]
    for text, message, valid in cases:
        step = env.step(text)
        assert step.observation == message + after_reset
        assert (step.reward, step.done, step.info["valid"]) == (0.0, False, valid)
    # AgentGym's client answers a reply with two actions itself, with the bare message
    step = env.step(reply("turn left") + "\nAction:\nturn right")
    assert (step.observation, step.reward, step.done) == (MULTIPLE_ACTIONS, 0.0, False)
    assert env.world.step_count == 0  # none of these reached the simulator


def test_pick_up_is_pickup():
    spoken, listed = make("babyai"), make("babyai")
    spoken.reset(0), listed.reset(0)
    a = spoken.step(reply("Pick Up grey key 1"))
    b = listed.step(reply("pickup grey key 1"))
    assert a.observation == b.observation and a.info["valid"] and b.info["valid"]
    assert "You are carrying a grey key." in a.observation and "drop" in spoken.available_actions


def test_success_reward_is_minigrids(env):
    env.reset(0)
    step = env.step(reply("go to red ball 1"))
    # the BFS path faces the red ball after 8 primitives; GoToRedBallGrey allows 8 * 8 = 64 steps
    assert (env.world.step_count, env.world.max_steps) == (8, 64)
    assert step.done and step.reward == pytest.approx(1 - 0.9 * 8 / 64) == step.info["score"]
    assert env.success(step.reward)
    assert step.observation.split("\nAvailable actions: ")[0].endswith(
        "You are not carrying anything.\n The task is completed.")


def test_failed_strict_mission_keeps_running(env):
    # OpenDoorsOrderN4Debug seed 0: "open the purple door after you open the red door". minigrid's strict verifier
    # reports failure on the first toggle; as in AgentGym the episode goes on (with AgentGym's misleading text),
    # and opening the second door then succeeds.
    env.reset(15)
    assert env.goal == "open the purple door and open the red door"
    env.step(reply("go to red closed door 1"))
    first = env.step(reply("toggle"))
    assert "\n The task is completed.\nAvailable" in first.observation and not first.done and first.reward == 0.0
    env.step(reply("go to purple closed door 1"))
    second = env.step(reply("toggle"))
    assert second.done and second.reward == pytest.approx(1 - 0.9 * env.world.step_count / env.world.max_steps)


def test_errors(env):
    for bad in (-1, 1.5, "3", True, None):
        with pytest.raises(ValueError, match=r"integer >= 0 \(babyai: any int >= 0; level = id % 40"):
            env.reset(bad)
    with pytest.raises(EnvStateError, match="before reset"):
        env.step(reply("turn left"))
    env.reset(0)
    assert env.step(reply("go to red ball 1")).done
    with pytest.raises(EnvStateError, match="done"):
        env.step(reply("turn left"))
    with pytest.raises(EnvStateError, match="done"):
        env.step(reply("turn left") + "\nAction: turn right")  # the state check comes before extraction
    assert env.reset(0) == ITEM0  # a finished env can be reset
    env.close()
    with pytest.raises(EnvStateError, match="after close"):
        env.step(reply("turn left"))
    with pytest.raises(EnvStateError, match="after close"):
        env.reset(0)


def test_expert_solves_every_level_but_keyinbox():
    """One item per level (seed 1). KeyInBox cannot be solved with AgentGym's actions: its key is inside a box and
    no action toggles a box."""
    env = make("babyai")
    for item in range(40, 80):
        replies = expert_replies(item)
        assert all(re.fullmatch(r"Thought:\nI need to [^\n]+\.\n\nAction:\n[a-z0-9 ]+", r) for r in replies)
        env.reset(item)
        steps = [env.step(r) for r in replies]
        solved = bool(steps) and steps[-1].done and env.success(steps[-1].reward)
        assert solved == (GYM_IDS[item % 40] != "BabyAI-KeyInBox-v0"), (item, GYM_IDS[item % 40], len(replies))
        assert len(replies) <= 64 and not any(s.done for s in steps[:-1])


def test_expert_episode_is_the_expert_played_on_the_env():
    """Env.expert_episode: the first observation, then each expert reply with its Step, up to done, on this env;
    options reach expert() (a hesitating demonstrator). KeyInBox (item 65) has no replies: an episode of none."""
    env, other = make("babyai"), make("babyai")
    for item, hesitation in [(40, 0.0), (47, 0.4), (65, 0.0)]:
        observation, turns = env.expert_episode(item, hesitation=hesitation)
        assert observation == other.reset(item)
        assert [text for text, _ in turns] == expert_replies(item, hesitation=hesitation)
        for text, step in turns:
            again = other.step(text)
            assert (step.observation, step.reward, step.done) == (again.observation, again.reward, again.done)
        solved = bool(turns) and turns[-1][1].done and env.success(turns[-1][1].reward)
        assert solved == (GYM_IDS[item % 40] != "BabyAI-KeyInBox-v0"), item


def test_shipped_expert_turns_are_the_experts():
    """The table shipped with the item lists covers every train and test item and agrees with the expert played
    now: three items of each of a few levels (one room, long-track doors and mazes, KeyInBox's None), train and
    test. A disagreement means the expert or minigrid changed: regenerate the table (see write_expert_turns)."""
    shipped = env_registry.shipped_expert_turns("babyai")
    assert set(shipped) == set(envs.item_ids("babyai", "train")) | set(envs.item_ids("babyai", "test"))
    assert all(t is None or isinstance(t, int) and 1 <= t <= 64 for t in shipped.values())
    levels = (0, 11, 25, 28, 33)   # GoToRedBallGrey, Open, KeyInBox, UnlockToUnlock, MoveTwoAcrossS8N9
    sample = [base + level + 40 * k for level in levels for base in (0, 100000) for k in (0, 13, 24)]
    assert env_registry.play_expert("babyai", sample) == {i: shipped[i] for i in sample}
    assert shipped[25] is None and shipped[0] is not None


def test_expert_turns_of_the_long_track_need_no_playing(tmp_path, monkeypatch):
    """A horizon study's first run asks for the expert's turns on every long-track train item: with no outputs
    cache they come from the shipped table at once. An item outside the shipped lists is played and cached, the
    shipped ones are not copied into the cache."""
    monkeypatch.setenv("AGENTGYM_NB_OUTPUTS", str(tmp_path))
    cfg = make_config(preset="cpu", env="babyai", track="long")
    items = item_pool(cfg, "train") + item_pool(cfg, "test")
    assert len(items) == 1500 + 375
    started = time.perf_counter()
    turns = envs.expert_turns("babyai", items)
    assert time.perf_counter() - started < 2
    assert list(turns) == items and not (tmp_path / "data").exists()   # nothing played, nothing cached
    shipped = env_registry.shipped_expert_turns("babyai")
    assert turns == {i: shipped[i] for i in items}
    unshipped = 4000 + 5   # past the train list: GoToObjMazeS7, seed 100
    both = envs.expert_turns("babyai", [unshipped, 0])
    assert both == {unshipped: env_registry.play_expert("babyai", [unshipped])[unshipped], 0: shipped[0]}
    cache = json.loads((tmp_path / "data" / "babyai" / "expert_turns.json").read_text())
    assert cache == {str(unshipped): both[unshipped]}


@pytest.mark.slow
def test_hesitating_demonstrator_wastes_turns_yet_solves():
    """hesitation=0.4: about 40% of the demonstrator's turns are wasted (its thought says so), the bot replans from
    wherever a wasted turn left it, the item is still solved, and the same item gives the same replies."""
    env = make("babyai")
    wasted = total = out_of_turns = 0
    for item in range(40, 80):
        if GYM_IDS[item % 40] == "BabyAI-KeyInBox-v0":
            continue
        replies = expert_replies(item, hesitation=0.4)
        assert replies == expert_replies(item, hesitation=0.4)
        env.reset(item)
        steps = [env.step(r) for r in replies]
        if len(replies) == 64:   # a long level (GoToImpUnlock) can spend the 64 turns: the build drops such demos
            out_of_turns += 1
            continue
        assert steps[-1].done and env.success(steps[-1].reward), (item, GYM_IDS[item % 40])
        wasted += sum(("I need to look around." in r or "I need to check what I can do." in r) for r in replies)
        total += len(replies)
        assert not any("look around" in r for r in expert_replies(item))
    assert 0.3 < wasted / total < 0.5 and out_of_turns <= 2, (wasted, total, out_of_turns)
    with pytest.raises(ValueError, match=r"hesitation is a probability in \[0, 1\), got 1.5"):
        expert_replies(40, hesitation=1.5)
