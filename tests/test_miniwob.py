"""MiniWoB++ on real Chromium (Debian's chromium + chromedriver through selenium), WebArena-style text.

Each test env starts one headless browser; the module shares one env where it can. The sweep of the expert over
every task it covers is slow (marked `slow` and `long`: CI runs it after `make test`, which plays a sample).
"""
import json
import re
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psutil
import pytest
import requests

from harness import loopback_server, require

require(envs=("miniwob",))

from agentgym_nb import envs
from agentgym_nb.envs import EnvError, EnvStateError, NoExpert, make
from agentgym_nb.envs.http import make_app
from agentgym_nb.envs.miniwob import EXCLUDED, EXPERT_TASKS, INSTRUCTION, TASKS, TEST_TASKS, MiniWoB, task_and_seed
from agentgym_nb.envs.webarena.grammar import NO_BACKTICKS

pytestmark = [pytest.mark.browser, pytest.mark.timeout(120)]   # Debian's chromium and chromium-driver: make install

N = len(TASKS)
PACKAGE = Path(envs.__file__).resolve().parent.parent


def item(task: str, seed: int = 0) -> int:
    return TASKS.index(task) + seed * N


def reply(action: str) -> str:
    return f"Let's think step-by-step. I act. In summary, the next action I will perform is ```{action}```"


# click-button, seed 0: read off the page (five elements under #area) and checked by hand against the DOM dump.
CLICK_BUTTON_0 = (
    "OBSERVATION:\n"
    "[4] StaticText 'donec lacus, ridiculus'\n"
    "[5] button 'okay'\n"
    "[6] button 'okay'\n"
    "[7] textbox ''\n"
    "[8] button 'next'\n"
    "[9] StaticText 'enim id at'\n"
    "URL: http://localhost:8000/miniwob/click-button.html\n"
    "OBJECTIVE: Click on the \"okay\" button.\n"
    "PREVIOUS ACTION: None"
)


@pytest.fixture(scope="module")
def env():
    env = make("miniwob")
    yield env
    env.close()


def test_registry_items_and_tasks():
    env = make("miniwob")
    assert isinstance(env, MiniWoB) and env.driver is None  # the browser starts on the first reset
    assert env.instruction == [{"role": "user", "content": INSTRUCTION}, {"role": "assistant", "content": "Ok."}]
    assert "```type [id] [content] [0|1]```" in INSTRUCTION and "hover" not in INSTRUCTION
    # every task miniwob registers is either supported or excluded with a reason
    source = (Path(__import__("miniwob").__file__).parent / "registration.py").read_text()
    registered = set(re.findall(r'id="miniwob/([a-z0-9-]+)-v1"', source))
    assert len(registered) == 125 and registered == set(TASKS) | set(EXCLUDED) and not set(TASKS) & set(EXCLUDED)
    assert list(TASKS) == sorted(TASKS) and N == 74
    assert task_and_seed(0) == ("book-flight-nodelay", 0) and task_and_seed(N + 1) == ("buy-ticket", 1)
    assert env.category(item("click-dialog", 7)) == "click-dialog"
    for bad in (-1, 1.5, "3", True):
        with pytest.raises(ValueError, match=r"miniwob: any int >= 0; task = id % 74"):
            task_and_seed(bad)
    train, test = envs.item_ids("miniwob", "train"), envs.item_ids("miniwob", "test")
    raw = json.loads((PACKAGE / "data" / "items" / "miniwob_test.json").read_text())
    assert raw[0] == {"item_id": f"miniwob_{test[0]}"}
    assert len(train) == 15 * (N - len(TEST_TASKS)) and len(test) == 10 * len(TEST_TASKS)
    train_tasks, test_tasks = {task_and_seed(i)[0] for i in train}, {task_and_seed(i)[0] for i in test}
    assert test_tasks == set(TEST_TASKS) and not train_tasks & test_tasks  # held out by task
    assert train_tasks | test_tasks == set(TASKS)


def test_observation_and_success(env):
    assert env.reset(item("click-button")) == CLICK_BUTTON_0
    assert env.observe() == CLICK_BUTTON_0
    step = env.step(reply("click [6]"))
    assert step.done and step.reward == 1.0 and env.success(step.reward)
    assert step.info == {"score": 1.0, "step_reward": 1.0, "action": "click [6]", "valid": True, "reason": None}
    assert step.observation.endswith("PREVIOUS ACTION: click [6] where [6] is button 'okay'")
    with pytest.raises(EnvStateError, match="done"):
        env.step(reply("click [5]"))
    # a wrong click ends with MiniWoB's raw -1 (the button next to the right ones says "next")
    env.reset(item("click-button"))
    step = env.step(reply("click [8]"))
    assert (step.done, step.reward, env.success(step.reward)) == (True, -1.0, False)


def test_labels_values_keys_and_enter(env):
    observation = env.reset(item("click-checkboxes"))  # "Select HF2 and click Submit."
    assert "[6] checkbox 'AU' checked: false\n[8] checkbox 'HF2' checked: false\n[9] button 'Submit'" in observation
    step = env.step(reply("click [8]"))
    assert "[8] checkbox 'HF2' focused: True checked: true" in step.observation and not step.done
    assert env.step(reply("click [9]")).reward == 1.0

    observation = env.reset(item("login-user"))
    assert "[6] LabelText 'Username'\n[7] textbox ''\n[9] LabelText 'Password'\n[10] textbox ''" in observation
    step = env.step(reply("type [7] [karri]"))
    assert "[7] textbox 'karri' focused: True" in step.observation
    assert step.observation.endswith("PREVIOUS ACTION: type [7] [karri] where [7] is textbox ''")
    env.step(reply("type [7] [xe]"))  # typing keeps what is there ...
    assert "[7] textbox 'karrixe'" in env.observe()
    env.step(reply("press [Ctrl+a]"))  # ... unless it is selected first
    assert env.observe().endswith("PREVIOUS ACTION: press [Ctrl+a]")
    env.step(reply("type [7] [karrie]"))
    env.step(reply("type [10] [AU]"))
    assert env.step(reply("click [11]")).reward == 1.0

    observation = env.reset(item("terminal"))  # the [1] flag presses Enter: the terminal runs the command
    box = re.search(r"\[(\d+)\] textbox ''", observation).group(1)
    step = env.step(reply(f"type [{box}] [ls] [1]"))
    assert re.search(r"StaticText 'ls'\n\[\d+\] StaticText '[\w. ]+'", step.observation)


def test_invalid_actions_cost_a_turn_and_change_nothing(env):
    env.reset(item("click-button"))
    cases = [
        ("I would click okay.", NO_BACKTICKS),
        (reply("hover [5]"), "Invalid action hover [5]: hover is not available on MiniWoB pages"),
        (reply("click [-3]"), "Invalid click action click [-3]"),
        (reply("click 5"), "Invalid click action click 5"),
        (reply("press [Hyper+x]"), "Invalid press action press [Hyper+x]: unknown modifier 'Hyper'"),
        (reply("dance"), "Invalid action dance: valid actions are click [id], type [id] [content] [0|1]"),
    ]
    for text, message in cases:
        step = env.step(text)
        assert step.observation.startswith(message), (text, step.observation)
        assert (step.reward, step.done, step.info["valid"]) == (0.0, False, False)
    step = env.step(reply("click [99]"))  # an id not on the page: WebArena's words as the previous action
    assert step.observation == CLICK_BUTTON_0.replace(
        "PREVIOUS ACTION: None", 'PREVIOUS ACTION: Attempt to perfom "click" on element "[99]" but no matching '
        "element found. Please check the observation more carefully.")
    assert not step.info["valid"] and not step.done
    assert env.step(reply("click [5]")).reward == 1.0  # the page was untouched: the right click still wins


def test_stop_gives_up_and_errors(env):
    env.reset(item("enter-text"))
    step = env.step(reply("stop [N/A]"))
    assert (step.done, step.reward, step.info["reason"], env.success(step.reward)) == (True, -1.0, "stopped", False)
    fresh = make("miniwob")
    with pytest.raises(EnvStateError, match="before reset"):
        fresh.step(reply("click [4]"))
    fresh.close()
    with pytest.raises(EnvStateError, match="after close"):
        fresh.reset(0)


def test_same_item_same_page(env):
    """Ids are assigned as elements are first seen, so the same item gives the same page only once the page has
    settled (email icons are images that load after the task is drawn). The expert test below also replays, in this
    browser, replies found in the expert's own browser."""
    first = env.reset(item("email-inbox", 4))
    assert "[16] generic 'star'" in first and env.reset(item("email-inbox", 4)) == first
    assert env.reset(item("email-inbox", 5)) != first


# the brief's core tasks plus multi-step ones (popups, email, pagination, date picker, feedback loops, key presses)
EXPERT_SAMPLE = [("click-button", 1), ("click-link", 2), ("enter-text", 3), ("click-checkboxes", 1),
                 ("click-dialog", 3), ("login-user-popup", 2), ("email-inbox-forward", 1), ("search-engine", 2),
                 ("guess-number", 3), ("choose-date-easy", 1)]


def solved(env: MiniWoB, item_id: int) -> tuple[bool, list[str]]:
    """Whether the expert's episode played in `env` (expert_episode) ends in success, and its replies; every reply
    is in the instruction's format and no step is done before the last."""
    _, turns = env.expert_episode(item_id)
    assert all(re.fullmatch(r"Let's think step-by-step\. .+ In summary, the next action I will perform is ```.+```",
                            text, re.DOTALL) for text, _ in turns)
    assert not any(step.done for _, step in turns[:-1])
    return turns[-1][1].done and env.success(turns[-1][1].reward), [text for text, _ in turns]


def test_expert_solves_a_sample_of_tasks_and_its_replies_replay(env):
    """expert() plays in a private browser; its replies, replayed here, solve the task as the episode
    expert_episode plays here does, with the same replies (ids are assigned the same way in both browsers)."""
    assert {task for task, _ in EXPERT_SAMPLE} <= set(EXPERT_TASKS) and len(EXPERT_TASKS) == 71
    for task, seed in EXPERT_SAMPLE:
        success, replies = solved(env, item(task, seed))
        assert success and env.expert(item(task, seed)) == replies, task
        env.reset(item(task, seed))
        steps = [env.step(text) for text in replies]
        assert steps[-1].done and env.success(steps[-1].reward), task


@pytest.mark.slow
@pytest.mark.long   # 213 episodes in Chromium, minutes: make test plays the sample above
@pytest.mark.timeout(1800)
def test_expert_solves_every_covered_task():
    """Every covered task at three seeds, played on three envs at once (threads: one page's settling overlaps the
    others' episodes)."""
    local, opened = threading.local(), []

    def fails(task_seed: tuple[str, int]) -> bool:
        if not hasattr(local, "env"):
            local.env = make("miniwob")
            opened.append(local.env)
        return not solved(local.env, item(*task_seed))[0]

    episodes = [(task, seed) for task in EXPERT_TASKS for seed in range(3)]
    try:
        with ThreadPoolExecutor(3) as workers:
            failures = [episode for episode, failed in zip(episodes, workers.map(fails, episodes)) if failed]
    finally:
        for env in opened:
            env.close()
    assert failures == []


def test_expert_refuses_tasks_without_a_solver(env):
    with pytest.raises(NoExpert, match="no expert for task 'click-checkboxes-soft'.*the expert solves "
                                       "buy-ticket, choose-date"):
        env.expert(item("click-checkboxes-soft"))
    with pytest.raises(NoExpert, match="no expert for task 'tic-tac-toe'"):
        env.expert_episode(item("tic-tac-toe", 3))


def test_a_crashed_browser_fails_the_episode_and_the_next_reset_recovers(env):
    env.reset(item("click-test"))
    for process in env.browser_processes():  # the browser crashes (chromedriver survives)
        if process.name() != "chromedriver":
            process.kill()
    with pytest.raises(EnvError, match="the browser failed during click \\[4\\].*the next reset\\(\\) starts a fresh"):
        env.step(reply("click [4]"))
    assert env.browser_processes() == [] and env.phase == "new"
    env.reset(item("click-test"))  # a fresh browser
    assert env.step(reply("click [4]")).reward == 1.0


def test_http_protocol_over_loopback():
    app = make_app("miniwob")
    with loopback_server(app) as url:
        assert requests.get(url, timeout=10).json() == "This is environment MiniWoB."
        remote = envs.connect("miniwob", url)
        try:
            assert remote.reset(item("click-button")) == CLICK_BUTTON_0
            step = remote.step("no backticks here")  # refused client-side, as AgentGym's WebArena client does
            assert (step.observation, step.info["valid"]) == (NO_BACKTICKS, False)
            step = remote.step(reply("click [99]"))  # the whole reply goes to the server, which extracts the action
            assert "no matching element found" in step.observation and not step.done
            answer = requests.post(f"{url}/step", json={"id": remote.env_id, "action": "click [5]"}, timeout=30).json()
            assert (answer["reward"], answer["score"], answer["done"]) == (1.0, 1.0, True)
            assert remote.observe().endswith("PREVIOUS ACTION: click [5] where [5] is button 'okay'")
            server_env = app.state.pool.slots[remote.env_id].env
            processes = server_env.browser_processes()
            assert processes
        finally:
            remote.close()
        assert app.state.pool.slots == {}
        assert not [p for p in processes if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
        assert requests.post(f"{url}/reset", json={"id": remote.env_id, "data_idx": 0}, timeout=10).json() == {
            "error": f"The id {remote.env_id} is not valid."}


def test_close_kills_every_browser_process(env):
    """Last in the module: closes the shared env (its browser and the expert's)."""
    if env._expert_env is None:
        env.expert(item("click-test"))
    processes = env.browser_processes() + env._expert_env.browser_processes()
    assert {p.name() for p in processes} == {"chromedriver", "chromium"} and len(processes) >= 6
    env.close()
    assert [p for p in processes if p.is_running() and p.status() != psutil.STATUS_ZOMBIE] == []
    assert env.driver is None and env._expert_env is None
