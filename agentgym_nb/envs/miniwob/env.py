"""The MiniWoB++ env: one reused headless Chromium, a task page per episode, WebArena-style observations and
actions, and MiniWoB's reward."""
from __future__ import annotations

import atexit
import os
import shutil
import weakref

import psutil
from miniwob.selenium_actions import execute_press_key, execute_type_text
from miniwob.selenium_instance import DEFAULT_BASE_URL
from selenium import webdriver
from selenium.common.exceptions import WebDriverException
from selenium.webdriver.chrome.service import Service

from ..base import Env, EnvError, Episodes, InvalidAction, Step, Track
from ..webarena.grammar import Action, extract_action, no_element, reply, require_block
from .actions import parse_miniwob_action, target_ref
from .browser import CHROMIUM_FLAGS, CLICK_JS, LOADED_JS, OBSERVE_JS, START_JS, STATE_JS, settle, wait_for
from .page import Page, observation_text, read_page
from .solvers import MAX_EXPERT_TURNS, ExpertStuck, solver
from .tasks import task_and_seed

INSTRUCTION = (
    "You are an autonomous intelligent agent tasked with navigating a web browser. You will be given web-based "
    "tasks. These tasks will be accomplished through the use of specific actions you can issue.\n\n"
    "Here's the information you'll have:\n"
    "The user's objective: This is the task you're trying to complete.\n"
    "The current web page's accessibility tree: This is a simplified representation of the webpage, providing key "
    "information.\n"
    "The current web page's URL: This is the page you're currently navigating.\n"
    "The previous action: This is the action you just performed. It may be helpful to track your progress.\n\n"
    "The actions you can perform fall into several categories:\n\n"
    "Page Operation Actions:\n"
    "```click [id]```: This action clicks on an element with a specific id on the webpage.\n"
    "```type [id] [content] [0|1]```: Use this to type the content into the field with id. The text already in the "
    "field is kept. By default, the \"Enter\" key is not pressed after typing unless the last parameter is set to "
    "1.\n"
    "```press [key_comb]```:  Simulates the pressing of a key combination on the keyboard (e.g., Enter, Tab, "
    "Ctrl+a).\n\n"
    "Completion Action:\n"
    "```stop [answer]```: Issue this action only if you believe the task is impossible to complete: it ends the "
    "task as failed. A task ends by itself as soon as its goal is reached.\n\n"
    "To be successful, it is very important to follow the following rules:\n"
    "1. You should only issue an action that is valid given the current observation\n"
    "2. You should only issue one action at a time.\n"
    "3. You should follow the examples to reason step by step and then issue the next action.\n"
    "4. For ALL actions that take parameters, you MUST enclose each parameter in square brackets [].\n"
    "5. Generate the action in the correct format. Start with a \"Let's think step-by-step...In summary, the next "
    "action I will perform is\" phrase, followed by action inside triple backticks (```). For example, \"Let's "
    "think step-by-step. The objective asks me to enter \"Agustina\" into the text field, and the textbox has ID "
    "[5]. In summary, the next action I will perform is ```type [5] [Agustina]```\".\n"
    "6. The page can change after every action: always use the ids of the current observation."
)

_LIVE = weakref.WeakSet()  # envs with a running browser, killed at interpreter exit if nobody closed them


@atexit.register
def _kill_all_browsers() -> None:
    for env in list(_LIVE):
        env._kill_browser()


class MiniWoB(Env):
    """One MiniWoB++ episode at a time in one reused headless Chromium (started on the first reset)."""

    name, title = "miniwob", "MiniWoB"
    task_instruction = INSTRUCTION
    tracks = {"all": Track("every task", None, Episodes(rounds=(2, 4, 6), max_tokens=128, max_total_tokens=3072,
                                                         max_envs=8))}
    smoke = Episodes(rounds=(1, 2), max_tokens=24, max_total_tokens=1536)
    smoke_nano = dict(demos=16)

    def __init__(self):
        self.driver = None
        self._processes = []  # chromedriver and every process under it, killed for good in close()
        self._expert_env = None  # a private env for expert(), started on first use
        self.task = None
        self.page = None
        self.previous = "None"
        self.last = ""

    @property
    def instruction(self) -> list[dict]:
        return [{"role": "user", "content": self.task_instruction}, {"role": "assistant", "content": "Ok."}]

    def category(self, item_id: int) -> str:
        return task_and_seed(item_id)[0]

    # -- browser
    def _start_browser(self):
        binary = os.environ.get("MINIWOB_CHROME_BINARY") or shutil.which("chromium") or "/usr/bin/chromium"
        driver_path = os.environ.get("MINIWOB_CHROMEDRIVER") or shutil.which("chromedriver") or "/usr/bin/chromedriver"
        for path in (binary, driver_path):
            if not os.path.exists(path):
                raise EnvError(f"miniwob: {path} not found; install Debian's browser with `apt-get install -y "
                               "chromium chromium-driver` (or set MINIWOB_CHROME_BINARY and MINIWOB_CHROMEDRIVER)")
        options = webdriver.ChromeOptions()
        options.binary_location = binary
        for flag in CHROMIUM_FLAGS:
            options.add_argument(flag)
        service = Service(executable_path=driver_path)
        try:
            self.driver = webdriver.Chrome(service=service, options=options)
        except Exception as error:
            self._track(service)
            self._kill_browser()
            raise EnvError(f"miniwob: could not start chromium: {error.__class__.__name__}: {error}") from None
        self._track(service)
        _LIVE.add(self)
        self.driver.set_page_load_timeout(30)
        self.driver.set_script_timeout(10)

    def _track(self, service) -> None:
        """Remember chromedriver and the browser it started: if chromedriver dies first, the browser's own
        processes are still found (through its main process) and killed."""
        if service.process is None:
            return
        try:
            driver = psutil.Process(service.process.pid)
            self._processes = [driver] + driver.children()
        except psutil.NoSuchProcess:
            pass

    def browser_processes(self) -> list:
        """The live processes of this env's browser (chromedriver, chromium and chromium's children)."""
        found = {}
        for root in self._processes:
            try:
                for process in [root] + root.children(recursive=True):
                    if process.is_running() and process.status() != psutil.STATUS_ZOMBIE:
                        found[process.pid] = process
            except psutil.NoSuchProcess:
                pass
        return list(found.values())

    def _kill_browser(self) -> None:
        """Quit the browser, then kill whatever of chromedriver and chromium survived, and reap them."""
        processes = self.browser_processes()
        if self.driver is not None:
            try:
                self.driver.quit()
            except Exception:  # noqa: BLE001  (a crashed browser cannot quit cleanly; it is killed below)
                pass
        for process in processes:
            try:
                process.kill()
            except psutil.NoSuchProcess:
                pass
        psutil.wait_procs(processes, timeout=5)
        self.driver, self._processes = None, []

    def _browser(self, what: str, fn):
        """Run `fn(driver)`. A browser failure, or a page that does not load, kills the browser and fails the
        episode with EnvError; the next reset starts a fresh browser."""
        try:
            return fn(self.driver)
        except (WebDriverException, EnvError) as error:
            self._kill_browser()
            self.phase = "new"
            message = str(error).strip().splitlines()[0] if str(error).strip() else error.__class__.__name__
            raise EnvError(f"miniwob: the browser failed during {what} ({message}); the next reset() starts a "
                           "fresh browser") from None

    # -- episode
    def reset(self, item_id: int) -> str:
        self.check_open()
        task, seed = task_and_seed(item_id)
        self.phase = "new"
        if self.driver is None:
            self._start_browser()

        def load(driver):
            driver.execute_script("window.agentgymStale = true;")  # gone once the new page has replaced it
            driver.get(f"{DEFAULT_BASE_URL}{task}.html")
            wait_for(driver, LOADED_JS, f"the page of task {task} did not finish loading")
            driver.execute_script(START_JS, seed)
            wait_for(driver, "return WOB_TASK_READY;", f"task {task} did not become ready")
            settle(driver)

        self._browser(f"reset({item_id})", load)
        self.task, self.item_id = task, item_id
        self.phase, self.score, self.reward, self.previous = "running", 0.0, 0.0, "None"
        self.page = self._read()
        self.last = observation_text(self.page, self.previous)
        return self.last

    def _read(self) -> Page:
        utterance, dom = self._browser("observe", lambda d: d.execute_script(OBSERVE_JS))
        return read_page(self.task, utterance, dom)

    def observe(self) -> str:
        return self.last

    def parse_action(self, text: str) -> str:
        """AgentGym's WebArena client check: the reply must hold a ```...``` block; the whole reply goes on to
        act() (and over HTTP, to the server), which takes the action out of it."""
        return require_block(text)

    def act(self, action: str) -> Step:
        """Apply a reply's first ``` block (or a bare action string). Bad grammar is answered with the error
        message; an id that is not on the page with the page and WebArena's "no matching element" line as the
        previous action. Both cost the turn and change nothing."""
        self.check_running()
        try:
            action = extract_action(require_block(action)) if "```" in action else action.strip()
            command = parse_miniwob_action(action)
        except (InvalidAction, ValueError) as bad:
            message = bad.observation if isinstance(bad, InvalidAction) else str(bad)
            return Step(message, self.score, False, {"score": self.score, "step_reward": 0.0, "action": action,
                                                     "valid": False})
        if command.kind in ("click", "type") and target_ref(command) not in self.page.refs:
            self.previous = no_element(command.kind, target_ref(command))
            self.last = observation_text(self.page, self.previous)
            return Step(self.last, self.score, False, {"score": self.score, "step_reward": 0.0, "action": action,
                                                       "valid": False})
        self._browser(action, lambda driver: self._execute(driver, command))
        done, raw_reward, reason = self._browser("reading the reward", lambda d: d.execute_script(STATE_JS))
        if command.kind == "stop" and not done:
            done, raw_reward, reason = True, -1.0, "stopped"
        self.previous = self._describe(command, action)
        self.page = self._read()
        self.last = observation_text(self.page, self.previous)
        self.reward = float(raw_reward) if done else 0.0
        self.score += self.reward
        if done:
            self.phase = "over"
        info = {"score": self.score, "step_reward": self.reward, "action": action, "valid": True}
        if done:
            info["reason"] = reason
        return Step(self.last, self.score, bool(done), info)

    def _execute(self, driver, command: Action) -> None:
        if command.kind == "stop":
            driver.execute_script("core.endEpisode(-1, false, 'stopped');")
            return
        if command.kind in ("click", "type"):
            driver.execute_script(CLICK_JS, target_ref(command))
        if command.kind == "type":
            execute_type_text(command.text.removesuffix("\n"), driver)
            if command.text.endswith("\n"):  # the grammar's mark of the [1] flag
                execute_press_key("<Enter>", driver)
        if command.kind == "press":
            execute_press_key(command.text, driver)
        settle(driver)

    def _describe(self, command: Action, action: str) -> str:
        """WebArena's action2str for id-based actions."""
        if command.kind not in ("click", "type"):
            return action
        ref = target_ref(command)
        where = f" where [{ref}] is {self.page.refs.get(ref, '')}"
        if command.kind == "click":
            return f"click [{ref}]{where}"
        return f"type [{ref}] [{command.text.removesuffix(chr(10))}]{where}"

    def expert(self, item_id: int) -> list[str]:
        """Replies that solve `item_id`: a scripted solver per task (EXPERT_TASKS) reads each observation (what
        the agent sees) and picks the next action, played in a private browser. NoExpert for a task without a
        solver. A solver that gets stuck stops early and its replies so far are returned: replay them and check
        success() (the tests do)."""
        solver(item_id)   # refuses a task without a solver before a private browser starts
        if self._expert_env is None:
            self._expert_env = MiniWoB()
        return [text for text, _ in self._expert_env.expert_episode(item_id)[1]]

    def expert_episode(self, item_id: int) -> tuple[str, list[tuple[str, Step]]]:
        """The solver played in this browser (see Env.expert_episode): the episode expert() would play privately."""
        solve = solver(item_id)
        observation, memory, turns = self.reset(item_id), {}, []
        for _ in range(MAX_EXPERT_TURNS):
            try:
                thought, action = solve(self.page, memory)
            except ExpertStuck:
                break
            text = reply(thought, action)
            turns.append((text, self.step(text)))
            if turns[-1][1].done:
                break
        return observation, turns

    def close(self) -> None:
        if self._expert_env is not None:
            self._expert_env.close()
            self._expert_env = None
        self._kill_browser()
        super().close()
