"""MiniWoB++ (the `miniwob` registry package) as a text env in WebArena's style, on real Chromium.

Item `i` is task `TASKS[i % len(TASKS)]` with seed `i // len(TASKS)` (TASKS: the 74 of MiniWoB's 125 tasks that can
be solved from the text observation with element-id actions; EXCLUDED gives the reason for each other one).

The agent sees WebArena's observation, `OBSERVATION:\n<tree>\nURL: <url>\nOBJECTIVE: <utterance>\nPREVIOUS
ACTION: <action or None>`, where the tree is written from the DOM elements MiniWoB's own observation gives
(`core.getDOMInfo`): one tab-indented `[ref] role 'name' prop: value` line per element, as Chrome's accessibility
tree reads in WebArena (see `element_lines`). It acts with WebArena's grammar inside triple backticks:
`click [id]`, `type [id] [content] [0|1]` (MiniWoB's FOCUS_ELEMENT_AND_TYPE_TEXT, then Enter if the flag is 1),
`press [key_comb]` and `stop [answer]`; WebArena's other actions (hover, scroll, goto, tabs) are refused.

The episode ends when the task page ends it. The reward is MiniWoB's raw reward in [-1, 1] (no time penalty);
success = reward > 0. Some tasks give partial credit (click-checkboxes*, odd-or-even, phone-book), so a
mostly-right answer counts as a success there.

Differences from MiniWoB, each for a reason: episodes are limited by turns, not by MiniWoB's 10 s wall clock (an
LLM turn can take longer than that); `stop` gives up with -1, MiniWoB's reward for running out of time; after every
action the env waits until the page settles (no DOM change for 50 ms, no jQuery animation, every image loaded),
because elements get their ids when first seen and a half-drawn page would give the same item different ids.
Differences from WebArena: `type` presses Enter only when asked (flag 1; WebArena's default is 1, but on MiniWoB
pages Enter can submit a form early); pieces of text inside mixed content have no id (MiniWoB gives them none);
a text-less element such as an icon is named by its HTML id or classes (e.g. the email tasks' `generic 'trash'`).

One headless Chromium (Debian's, through selenium + chromedriver) serves every episode of an env, started on the
first reset: reset() reloads the task page, so every episode starts from a fresh page. A crashed browser fails the
call with EnvError and is killed; the next reset starts a fresh one. close() kills every browser process.
"""
from __future__ import annotations

import atexit
import os
import re
import shutil
import time
import weakref
from dataclasses import dataclass, field, replace

import psutil
from miniwob.constants import WEBDRIVER_SPECIAL_KEYS
from miniwob.dom import DOMElement
from miniwob.selenium_actions import execute_press_key, execute_type_text
from miniwob.selenium_instance import DEFAULT_BASE_URL
from selenium import webdriver
from selenium.common.exceptions import WebDriverException
from selenium.webdriver.chrome.service import Service

from .base import Env, EnvError, Episodes, InvalidAction, NoExpert, Step, Track, check_item_id
from .webarena.grammar import (TEMPLATE, Action, ActionParsingError, action_kind, extract_action, no_element,
                               parse_action, reply, require_block)

# Tasks solvable from the text observation with click/type/press on element ids, in a fixed (alphabetical) order.
TASKS = (
    "book-flight-nodelay", "buy-ticket", "choose-date", "choose-date-easy", "choose-date-medium",
    "choose-date-nodelay", "click-button", "click-button-sequence", "click-checkboxes", "click-checkboxes-large",
    "click-checkboxes-soft", "click-checkboxes-transfer", "click-collapsible", "click-collapsible-2",
    "click-collapsible-2-nodelay", "click-collapsible-nodelay", "click-dialog", "click-dialog-2", "click-link",
    "click-option", "click-tab", "click-tab-2", "click-tab-2-easy", "click-tab-2-hard", "click-tab-2-medium",
    "click-test", "click-test-2", "click-test-transfer", "click-widget", "copy-paste", "copy-paste-2",
    "email-inbox", "email-inbox-delete", "email-inbox-forward", "email-inbox-forward-nl",
    "email-inbox-forward-nl-turk", "email-inbox-important", "email-inbox-nl-turk", "email-inbox-noscroll",
    "email-inbox-reply", "email-inbox-star-reply", "enter-password", "enter-text", "enter-text-2",
    "enter-text-dynamic", "find-word", "focus-text", "focus-text-2", "form-sequence-2", "generate-number",
    "grid-coordinate", "guess-number", "login-user", "login-user-popup", "multi-layouts", "multi-orderings",
    "navigate-tree", "odd-or-even", "phone-book", "read-table", "read-table-2", "scroll-text", "search-engine",
    "simple-algebra", "simple-arithmetic", "social-media", "social-media-all",
    "social-media-some", "terminal", "text-transform", "tic-tac-toe", "unicode-test", "use-autocomplete-nodelay",
    "visual-addition",
)

# The shipped test split (agentgym_nb/data/items/miniwob_test.json) holds these tasks only, the train split every
# other task: harder or transfer variants of train tasks, so held-out success measures generalisation across tasks.
TEST_TASKS = (
    "choose-date-medium", "click-checkboxes-transfer", "click-collapsible-2-nodelay", "click-tab-2-hard",
    "click-test-transfer", "copy-paste-2", "email-inbox-forward-nl-turk", "email-inbox-nl-turk",
    "enter-text-dynamic", "focus-text-2", "login-user-popup", "multi-orderings", "read-table-2", "social-media-some",
)

_POINTER = "needs pointer coordinates, hovering or dragging, which element-id actions cannot express"
_VISUAL = "the answer is only in colours, shapes or pixels, which the text observation does not carry"
_SELECT = ("uses a single-choice <select> dropdown, whose options and value are not in MiniWoB's DOM "
           "observation")
_DELAYED = ("its suggestions appear after a timed delay, so the observation read after typing does not show them "
            "(the -nodelay variant is included)")
_PARTIAL = "any answer earns a positive partial reward, so success (reward > 0) would not mean solved"
_SELECTION = "needs a text selection made with the mouse"
_SCROLL = "needs scrolling inside a textarea"
# Every other MiniWoB task (the flight.* tasks are FlightWoB, not MiniWoB, and are not listed at all).
EXCLUDED = {
    "ascending-numbers": "the numbers are hidden after the first click; the rest must be found by position",
    "bisect-angle": _POINTER, "book-flight": _DELAYED, "choose-list": _SELECT, "circle-center": _POINTER,
    "click-color": _VISUAL, "click-menu": _POINTER,
    "click-menu-2": "half of its episodes name the item by an icon image, which the utterance text does not show",
    "click-pie": _POINTER, "click-pie-nodelay": _POINTER,
    "click-scroll-list": "a multi-select list: which options are selected is not in the DOM observation",
    "click-shades": _VISUAL, "click-shape": _VISUAL, "count-shape": _VISUAL, "count-sides": _VISUAL,
    "daily-calendar": _POINTER, "drag-box": _POINTER, "drag-circle": _POINTER, "drag-cube": _POINTER,
    "drag-items": _POINTER, "drag-items-grid": _POINTER, "drag-shapes": _POINTER, "drag-shapes-2": _POINTER,
    "drag-single-shape": _POINTER, "drag-sort-numbers": _POINTER, "draw-circle": _POINTER, "draw-line": _POINTER,
    "enter-date": "a native date picker (its typed format depends on the browser locale)",
    "enter-time": "a native time picker (its typed format depends on the browser locale)",
    "find-greatest": _PARTIAL, "find-midpoint": _POINTER, "form-sequence": _POINTER, "form-sequence-3": _SELECT,
    "highlight-text": _SELECTION, "highlight-text-2": _SELECTION, "hot-cold": _POINTER, "identify-shape": _VISUAL,
    "number-checkboxes": _VISUAL,
    "order-food": "half of its episodes ask for food types shown only as icon images",
    "resize-textarea": _POINTER, "right-angle": _POINTER, "scroll-text-2": _SCROLL, "sign-agreement": _SCROLL,
    "stock-market": "the price moves in wall-clock time", "text-editor": _SELECTION, "use-autocomplete": _DELAYED,
    "use-colorwheel": _PARTIAL, "use-colorwheel-2": _VISUAL, "use-slider": _POINTER, "use-slider-2": _POINTER,
    "use-spinner": "typing into the spinner is blocked and its up/down buttons are unlabeled icons",
}

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
URL_ROOT = "http://localhost:8000/miniwob/"  # where MiniWoB's own `http-serve` puts the tasks
WEBARENA_ONLY = ("hover", "scroll", "goto", "new_tab", "go_back", "go_forward", "tab_focus", "close_tab")
TYPE_WITH_FLAG = re.compile(r"type ?\[\d+\] ?\[.*\] ?\[[01]\]", re.DOTALL)
CHROMIUM_FLAGS = ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--no-first-run", "--window-size=500,400")
NO_TIME_LIMIT_MS = 2_000_000_000  # MiniWoB's episode timer, effectively off (setTimeout's limit is 2**31 - 1)
SETTLE_SECONDS = 2.0
QUIET_SECONDS = 0.05
MAX_EXPERT_TURNS = 40


def task_and_seed(item_id: int) -> tuple[str, int]:
    """item_id -> (TASKS[item_id % len(TASKS)], item_id // len(TASKS))."""
    item_id = check_item_id(item_id, f"miniwob: any int >= 0; task = id % {len(TASKS)}, seed = id // {len(TASKS)}")
    return TASKS[item_id % len(TASKS)], item_id // len(TASKS)


# ---------------------------------------------------------------- observation: the DOM as an accessibility tree
ROLES = {"a": "link", "button": "button", "input_button": "button", "input_submit": "button",
         "input_reset": "button", "input_checkbox": "checkbox", "input_radio": "radio", "textarea": "textbox",
         "select": "combobox", "option": "option", "label": "LabelText", "li": "listitem", "ul": "list",
         "ol": "list", "img": "img", "table": "table", "tr": "row", "td": "cell", "th": "columnheader",
         "t": "StaticText", **{f"h{n}": "heading" for n in range(1, 7)}}
NAME_FROM_CONTENT = ("button", "link", "heading", "option")  # a non-leaf one of these shows its text as one name
CONTROLS = ("textbox", "checkbox", "radio", "combobox")


@dataclass
class Line:
    """One element as the agent sees it: `[ref] role 'name' prop: value ...` at tab depth `depth`.
    Text pieces inside mixed content (MiniWoB's "t" pseudo-elements) have no usable ref and show no id."""
    ref: int | None
    role: str
    name: str
    depth: int
    props: dict = field(default_factory=dict)

    def describe(self) -> str:
        """The line without its id and indentation (WebArena's element description in PREVIOUS ACTION)."""
        return " ".join([f"{self.role} {self.name!r}"] + [f"{k}: {v}" for k, v in self.props.items()])

    def render(self) -> str:
        head = f"[{self.ref}] " if self.ref is not None else ""
        return "\t" * self.depth + head + self.describe()


def role_of(element: DOMElement) -> str:
    tag = element.tag
    if tag in ROLES:
        return ROLES[tag]
    if tag.startswith("input_"):
        return "textbox"  # text, password, email, number, search, ...
    return "StaticText" if element.text else "generic"


def hint_name(element: DOMElement) -> str:
    """A text-less element (an icon) is named by its HTML id or classes, leaving out jQuery UI's `ui-*` ones."""
    words = [element.id] + str(element.classes).split()
    return " ".join(w for w in words if w and not w.startswith("ui-") and w != "SVG_CLASS")


def all_text(element: DOMElement) -> str:
    if element.is_leaf:
        return element.text or ""
    return " ".join(t for t in (all_text(c) for c in element.children) if t)


def tree_lines(element: DOMElement, depth: int = 0) -> list[Line]:
    """The elements under `element` (excluded) as lines, like Chrome's accessibility tree seen by WebArena:
    containers without a role or name are skipped (their children move up), a button/link/heading/option shows its
    whole text as its name, a label around one form control names the control, textboxes show their value."""
    lines = []
    for child in element.children:
        lines += element_lines(child, depth)
    return lines


def element_lines(element: DOMElement, depth: int) -> list[Line]:
    role = role_of(element)
    ref = element.ref if element.ref > 0 else None
    props = {}
    if element.focused:
        props["focused"] = True
    if role in ("checkbox", "radio"):
        props["checked"] = "true" if element.value else "false"
    if element.tag == "textarea":
        props["multiline"] = True
    if role == "LabelText" and not element.is_leaf:
        controls = [e for e in element.subtree_elements if role_of(e) in CONTROLS]
        if len(controls) == 1:
            control = element_lines(controls[0], depth)[0]
            control.name = " ".join(all_text(c) for c in element.children if c is not controls[0]).strip()
            return [control]
    if role == "textbox":
        return [Line(ref, role, str(element.value or ""), depth, props)]
    if role in ("checkbox", "radio"):
        return [Line(ref, role, "", depth, props)]
    if element.is_leaf:
        name = element.text or ""
        if not name and role in ("generic", "StaticText"):
            name = hint_name(element)
            if not name:
                return []
        return [Line(ref, role, name, depth, props)]
    if role in NAME_FROM_CONTENT:
        return [Line(ref, role, all_text(element), depth, props)]
    children = tree_lines(element, depth + 1)
    if children and all(c.ref is None and c.role == "StaticText" for c in children):  # text only: one line
        return [Line(ref, "StaticText" if role == "generic" else role, " ".join(c.name for c in children), depth,
                     props)]
    if role == "generic" and not props:
        for child in children:
            child.depth -= 1
        return children
    return [Line(ref, role, "", depth, props)] + children


@dataclass
class Page:
    """What one observation shows: the task's utterance and the tree lines, plus every element ref on the page."""
    task: str
    utterance: str
    lines: list[Line]
    refs: dict[int, str]  # ref -> description, for every element in the DOM (printed or not)
    fields: tuple = ()  # the *-nl tasks' (key, value) pairs behind the utterance (for the expert only)

    def tree(self) -> str:
        return "\n".join(line.render() for line in self.lines)

    def find(self, role: str | None = None, name: str | None = None) -> list[Line]:
        return [line for line in self.lines if line.ref is not None and (role is None or line.role == role)
                and (name is None or line.name == name)]


def read_page(task: str, utterance, dom: dict) -> Page:
    root = DOMElement(dom)
    lines = tree_lines(root)
    refs = {e.ref: f"{role_of(e)} {(hint_name(e) or e.tag)!r}" for e in root.subtree_elements if e.ref > 0}
    refs.update({line.ref: line.describe() for line in lines if line.ref is not None})
    fields = ()
    if isinstance(utterance, dict):  # the *-nl tasks return {"utterance", "fields"}
        utterance, fields = utterance["utterance"], tuple(utterance["fields"].items())
    return Page(task, str(utterance), lines, refs, fields)


def observation_text(page: Page, previous: str) -> str:
    """WebArena's observation template (agent/prompts/raw/p_cot_id_actree_2s.py)."""
    return TEMPLATE.format(observation=page.tree(), url=f"{URL_ROOT}{page.task}.html", objective=page.utterance,
                           previous_action=previous)


# ---------------------------------------------------------------- actions: WebArena's grammar, MiniWoB's subset
def key_name(key_comb: str) -> str:
    """A Playwright-style key combination ("Enter", "Ctrl+a", "Shift+Tab") in MiniWoB's syntax ("<Enter>", "C-a",
    "S-<Tab>"); ValueError naming the valid keys otherwise."""
    modifiers = {"ctrl": "C-", "control": "C-", "shift": "S-", "alt": "A-", "meta": "M-", "cmd": "M-"}
    special = {name[1:-1].lower(): name for name in WEBDRIVER_SPECIAL_KEYS}
    *mods, key = key_comb.split("+") if key_comb != "+" else [key_comb]
    prefix = ""
    for mod in mods:
        if mod.strip().lower() not in modifiers:
            raise ValueError(f"unknown modifier {mod!r} (valid: Ctrl, Shift, Alt, Meta)")
        prefix += modifiers[mod.strip().lower()]
    if len(key) == 1:
        return prefix + key
    if key.strip().lower() in special:
        return prefix + special[key.strip().lower()]
    raise ValueError(f"unknown key {key!r} (valid: one character, or one of Enter, Tab, Backspace, Delete, Escape, "
                     "Space, ArrowUp, ArrowDown, ArrowLeft, ArrowRight, Home, End, PageUp, PageDown, ...)")


def parse_miniwob_action(action: str) -> Action:
    """One action string in WebArena's grammar, of the actions MiniWoB pages take: click, type (Enter only with the
    flag 1), press (the keys in MiniWoB's syntax) and stop; ValueError with the agent-facing message otherwise.
    A type without its flag gets [0]: WebArena would press Enter, and would read a text of 0 or 1 as the flag."""
    kind = action_kind(action)
    if kind in WEBARENA_ONLY:
        raise ValueError(f"Invalid action {action}: {kind} is not available on MiniWoB pages; use click [id], "
                         "type [id] [content] [0|1], press [key_comb] or stop [answer].")
    if kind not in ("click", "type", "press", "stop"):
        raise ValueError(f"Invalid action {action}: valid actions are click [id], type [id] [content] [0|1], "
                         "press [key_comb] and stop [answer].")
    flagged = action + " [0]" if kind == "type" and not TYPE_WITH_FLAG.fullmatch(action) else action
    try:
        command = parse_action(flagged)
    except ActionParsingError:
        raise ActionParsingError(f"Invalid {kind} action {action}") from None  # as written, without the added flag
    if command.kind == "press":
        try:
            return replace(command, text=key_name(command.text))
        except ValueError as bad:
            raise ValueError(f"Invalid press action {action}: {bad}") from None
    return command


def target_ref(command: Action) -> int:
    """The MiniWoB element ref a click or type acts on."""
    return int(command.element_id)


# ---------------------------------------------------------------- the env
CLICK_JS = """
var element = core.previousDOMInfo[arguments[0]];
if (element instanceof HTMLOptionElement) {  // element.click() does not select an option
  var select = element.closest('select');
  element.selected = select && select.multiple ? !element.selected : true;
  if (select) select.dispatchEvent(new Event('change', {bubbles: true}));
  return true;
}
return core.elementClick(arguments[0]);
"""
START_JS = f"""
window.agentgymChanged = Date.now();  // the time of the page's latest DOM change, for settle()
new MutationObserver(function () {{ window.agentgymChanged = Date.now(); }}).observe(
    document.body, {{subtree: true, childList: true, attributes: true, characterData: true}});
Math.seedrandom(arguments[0]);
core.setDataMode('train');
core.EPISODE_MAX_TIME = {NO_TIME_LIMIT_MS};
core.startEpisodeReal();
"""
STATE_JS = "return [WOB_DONE_GLOBAL, WOB_RAW_REWARD_GLOBAL, WOB_REWARD_REASON];"
BUSY_JS = """
if (Date.now() - window.agentgymChanged < arguments[0]) return true;
if (window.jQuery && jQuery(':animated').length) return true;
for (const image of document.images) if (!image.complete) return true;
for (const element of document.body.querySelectorAll('*')) {  // icons drawn with CSS content:url(...)
  const url = /url\\("?([^")]*)"?\\)/.exec(getComputedStyle(element).content);
  if (url) { const image = new Image(); image.src = url[1]; if (!image.complete) return true; }
}
return false;
"""
LOADED_JS = ("return !window.agentgymStale && typeof genProblem === 'function' && "
             "!!(window.core && core.cover_div);")
OBSERVE_JS = "return [core.getUtterance(), core.getDOMInfo()];"


def settle(driver) -> None:
    """Wait (at most SETTLE_SECONDS) until the page has not changed for QUIET_SECONDS, jQuery animations are over
    and every image is loaded. Elements get their refs when first seen, so reading a half-drawn page would make the
    same item's ids vary from run to run (and hide what a timer of 0 ms is about to show)."""
    time.sleep(QUIET_SECONDS)
    deadline = time.monotonic() + SETTLE_SECONDS
    while time.monotonic() < deadline and driver.execute_script(BUSY_JS, QUIET_SECONDS * 1000):
        time.sleep(0.02)


def wait_for(driver, script: str, problem: str, seconds: float = 5.0) -> None:
    deadline = time.monotonic() + seconds
    while not driver.execute_script(script):
        if time.monotonic() > deadline:
            raise EnvError(f"miniwob: {problem} within {seconds:.0f} s")
        time.sleep(0.02)


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


# ---------------------------------------------------------------- the expert: one scripted solver per task
# A solver reads only what the agent sees (the Page's lines and utterance; the *-nl tasks' fields) plus its own
# memory of earlier turns, and returns (thought, action). It raises ExpertStuck when the page is not as expected.
class ExpertStuck(RuntimeError):
    pass


ORDINALS = {"1st": 1, "2nd": 2, "3rd": 3, **{f"{n}th": n for n in range(4, 21)}}


def quoted(page: Page) -> list[str]:
    return re.findall(r'"([^"]*)"', page.utterance)


def one(lines: list[Line], what: str) -> Line:
    if not lines:
        raise ExpertStuck(f"no {what} on the page")
    return lines[0]


def click(line: Line, why: str) -> tuple[str, str]:
    return f"{why} It is [{line.ref}] {line.describe()}.", f"click [{line.ref}]"


def type_into(line: Line, text: str, why: str) -> tuple[str, str]:
    return f"{why} The field is [{line.ref}].", f"type [{line.ref}] [{text}]"


def submit(page: Page, name: str = "Submit") -> tuple[str, str]:
    return click(one(page.find("button", name), f"{name} button"), f"Everything is filled in, so I press {name}.")


def fill(page: Page, fields: list[tuple[Line, str]], button: str = "Submit") -> tuple[str, str]:
    """Type each value into its (so far empty) field, then press `button`."""
    for line, value in fields:
        if line.name != value:
            return type_into(line, value, f"I need to enter \"{value}\".")
    return submit(page, button)


def textboxes(page: Page, multiline: bool | None = None) -> list[Line]:
    return [line for line in page.find("textbox") if multiline is None or ("multiline" in line.props) == multiline]


def solve_click_button(page, memory):
    target = quoted(page)[0] if quoted(page) else page.utterance.split("button ")[-1].rstrip(".")
    if page.task == "click-test":
        return click(one(page.find("button"), "button"), "There is one button to click.")
    return click(one(page.find("button", target), f"button {target!r}"), f"I need the button labeled {target}.")


def solve_click_button_sequence(page, memory):
    name = "TWO" if memory.get("clicked") else "ONE"
    memory["clicked"] = True
    return click(one(page.find("button", name), f"button {name}"), f"I click button {name} now.")


def solve_click_link(page, memory):
    target = quoted(page)[0]
    return click(one(page.find("StaticText", target), f"link {target!r}"), f"The link \"{target}\" is on the page.")


def solve_click_dialog(page, memory):
    target = quoted(page)[0]
    name = "Close" if target == "x" else target
    return click(one(page.find("button", name), f"button {name!r}"), f"The dialog has a button labeled {target}.")


def solve_click_choices(page, memory):
    """click-checkboxes(-large, -transfer), click-option: tick the named boxes, then Submit."""
    names = re.fullmatch(r"Select (.*) and click Submit\.", page.utterance).group(1)
    wanted = [] if names == "nothing" else names.split(", ")
    for line in page.lines:
        if line.role in ("checkbox", "radio") and (line.name in wanted) != (line.props["checked"] == "true"):
            return click(line, f"{line.name!r} must be {'selected' if line.name in wanted else 'cleared'}.")
    return submit(page)


def solve_click_tab(page, memory):
    target = re.search(r"Tab #\d+", page.utterance).group(0)
    return click(one(page.find("link", target), target), f"I need to click {target}.")


def solve_find_by_expanding(page, memory):
    """click-tab-2*, click-collapsible-2*: open tabs / sections in order until the link shows up."""
    target = quoted(page)[0]
    found = page.find("StaticText", target)
    if found:
        return click(found[0], f"The link \"{target}\" is visible.")
    role = "link" if page.task.startswith("click-tab") else "heading"
    opened = memory.setdefault("opened", [0] if role == "link" else [])  # the first tab starts open
    options = page.find(role)
    for index, line in enumerate(options):
        if index not in opened:
            opened.append(index)
            return click(line, f"The link \"{target}\" is not visible yet, so I open {line.name}.")
    raise ExpertStuck(f"{target!r} is in none of the {role}s")


def solve_click_collapsible(page, memory):
    if not memory.get("expanded"):
        memory["expanded"] = True
        return click(one(page.find("heading"), "section"), "The section has to be expanded first.")
    return submit(page)


def solve_click_widget(page, memory):
    kind = quoted(page)[0]
    lines = {"textarea": textboxes(page, multiline=True), "text": textboxes(page, multiline=False)}.get(kind)
    if lines is None:
        lines = page.find(kind)
    return click(one(lines, f"{kind} widget"), f"This is a {kind} widget.")


def solve_enter_text(page, memory):
    text = quoted(page)[0]
    if page.task == "enter-text-2":
        text = text.upper() if "upper case" in page.utterance else text.lower()
    return fill(page, [(one(textboxes(page), "textbox"), text)])


def solve_enter_password(page, memory):
    password = quoted(page)[0]
    return fill(page, [(line, password) for line in textboxes(page)])


def solve_login(page, memory):
    cancel = page.find("button", "Cancel")
    if cancel:
        return click(cancel[0], "A popup asks to leave the page; I cancel it to stay on the login form.")
    user, password = quoted(page)
    button = "OK" if page.task == "login-user-popup" else "Login"
    return fill(page, list(zip(textboxes(page), (user, password))), button)


def solve_focus_text(page, memory):
    match = re.search(r"(\d+)(st|nd|rd|th) input", page.utterance)
    index = int(match.group(1)) - 1 if match else 0
    return click(textboxes(page)[index], "I need to focus this textbox.")


def solve_find_word(page, memory):
    n = ORDINALS[re.search(r"(\d+(st|nd|rd|th)) word", page.utterance).group(1)]
    paragraph = one([line for line in page.find("StaticText") if len(line.name.split()) > 1], "paragraph")
    word = re.sub(r"[^a-zA-Z0-9]", "", paragraph.name.split()[n - 1])
    return fill(page, [(one(textboxes(page), "textbox"), word)])


def solve_scroll_text(page, memory):
    text = one(textboxes(page, multiline=True), "text area").name
    word = re.sub(r"[^a-zA-Z0-9]", "", text.split()[-1])
    return fill(page, [(one(textboxes(page, multiline=False), "text field"), word)])


def solve_copy_paste(page, memory):
    areas = textboxes(page, multiline=True)
    match = re.search(r"(\d+(st|nd|rd|th)) text area", page.utterance)
    source = areas[ORDINALS[match.group(1)] - 1] if match else areas[0]
    return fill(page, [(one(textboxes(page, multiline=False), "text input"), source.name)])


def cell_value(page: Page, label: str) -> str:
    cells = [line.name for line in page.find("cell")]
    return cells[cells.index(label) + 1]


def solve_read_table(page, memory):
    label = re.search(r"value of (.*) into", page.utterance).group(1)
    return fill(page, [(one(textboxes(page), "textbox"), cell_value(page, label))])


def solve_read_table_2(page, memory):
    fields, label = [], None
    for line in page.lines:
        if line.role == "LabelText":
            label = line.name.rstrip(":")
        elif line.role == "textbox" and label:
            fields.append((line, cell_value(page, label)))
    return fill(page, fields)


def solve_arithmetic(page, memory):
    problem = one([line for line in page.find("StaticText") if "=" in line.name], "math problem").name
    left, right = (side.strip() for side in problem.split("="))
    if page.task == "simple-arithmetic":
        a, op, b = left.split()
        answer = {"+": int(a) + int(b), "-": int(a) - int(b), "x": int(a) * int(b), "*": int(a) * int(b)}[op]
    else:  # "a + x = c", "x - a = c", ...: try the integers
        answer = next(x for x in range(-1000, 1001) if _holds(left, int(right), x))
    return fill(page, [(one(textboxes(page), "textbox"), str(answer))])


def _holds(expression: str, value: int, x: int) -> bool:
    a, op, b = expression.replace("x", str(x)).split()
    return {"+": int(a) + int(b), "-": int(a) - int(b)}[op] == value


def solve_guess_number(page, memory):
    """Bisection on 0-9 with the page's "lower/higher than" feedback; an old guess is selected and typed over."""
    box = one(textboxes(page), "textbox")
    low, high = memory.setdefault("range", [0, 9])
    if memory.get("submitted"):
        feedback = " ".join(line.name for line in page.lines if line.role == "StaticText")
        guess = memory.pop("guess")
        low, high = (low, guess - 1) if "lower" in feedback else (guess + 1, high)
        memory["range"], memory["submitted"] = [low, high], False
    guess = memory.setdefault("guess", (low + high) // 2)
    if box.name == str(guess):
        memory["submitted"] = True
        return submit(page)
    if box.name and not memory.get("selected"):
        memory["selected"] = True
        return "The box still holds my last guess; I select it to type over it.", "press [Ctrl+a]"
    memory["selected"] = False
    return type_into(box, str(guess), f"The number is between {low} and {high}; I guess {guess}.")


def solve_search_engine(page, memory):
    query = quoted(page)[0]
    n = int(re.search(r"the (\d+)(st|nd|rd|th) search result", page.utterance).group(1))
    box = one(textboxes(page), "search box")
    if box.name != query:
        return type_into(box, query, f"I search for \"{query}\".")
    pages = [line for line in page.find("link") if line.name.isdigit()]
    results = [line for line in page.find("link") if not line.name.isdigit() and line.name not in ("<", ">")]
    if not results:
        return click(one(page.find("button", "Search"), "Search button"), "Now I press Search.")
    wanted = (n - 1) // 3 + 1
    if memory.get("page", 1) != wanted:
        memory["page"] = wanted
        return click(one([p for p in pages if p.name == str(wanted)], f"page {wanted}"),
                     f"Result {n} is on page {wanted}.")
    return click(results[(n - 1) % 3], f"This is search result {n}.")


def solve_navigate_tree(page, memory):
    target = quoted(page)[0]
    found = page.find("StaticText", target)
    if found:
        return click(found[0], f"{target!r} is visible in the tree.")
    opened = memory.setdefault("opened", set())
    for hitarea, folder in zip(page.lines, page.lines[1:]):
        if "expandable-hitarea" in hitarea.name and folder.ref is not None and folder.ref not in opened:
            opened.add(folder.ref)
            return click(folder, f"{target!r} is not visible; I open the folder {folder.name}.")
    raise ExpertStuck(f"no folder left to open for {target!r}")


def posts(page: Page) -> list[tuple[str, list[Line]]]:
    """social-media: (username, the lines of that post) in page order."""
    result = []
    for line in page.lines:
        if line.role == "StaticText" and line.name.startswith("@") and line.ref is not None:
            result.append((line.name, []))
        elif result:
            result[-1][1].append(line)
    return result


def solve_social_media(page, memory):
    label, user = quoted(page)[0], re.search(r"@\w+", page.utterance).group(0)
    if page.task == "social-media":
        menu = [line for line in page.find("listitem") if line.name == label or line.name.startswith(label + " ")]
        if menu:
            return click(menu[0], f"The menu shows {label}.")
        for name, lines in posts(page):
            if name == user:
                icon = [line for line in lines if line.name == label.lower()]
                more = icon or [line for line in lines if line.name == "more"]
                return click(one(more, "more menu"), f"The post by {user} has this control.")
        raise ExpertStuck(f"no post by {user}")
    count = len([name for name, _ in posts(page) if name == user])
    if page.task == "social-media-some":
        count = int(re.search(r"on (\d+) posts? by", page.utterance).group(1))
    done = memory.setdefault("clicked", [])
    if len(done) < count:
        for name, lines in posts(page):
            icon = [line for line in lines if line.name == label.lower()]
            if name == user and icon and icon[0].ref not in done:
                done.append(icon[0].ref)
                return click(icon[0], f"This post is by {user}; I click its {label} button.")
    return submit(page)


def email_goal(page: Page) -> dict:
    if page.fields:
        fields = dict(page.fields)
        return {"by": fields["by"], "task": fields.get("task", "forward" if "to" in fields else ""),
                "to": fields.get("to"), "message": fields.get("message")}
    u = page.utterance
    by = re.search(r"email by (.+?) and", u).group(1)
    if "forward" in u:
        return {"by": by, "task": "forward", "to": re.search(r"forward that email to (.+)\.$", u).group(1)}
    if "reply" in u:
        return {"by": by, "task": "reply", "message": quoted(page)[0]}
    return {"by": by, "task": "delete" if "trash" in u else "star"}


def solve_email(page, memory):
    goal = email_goal(page)
    if goal["task"] in ("delete", "star"):
        icon = "trash" if goal["task"] == "delete" else "star"
        for sender, next_lines in _rows(page):
            if sender.name == goal["by"]:
                return click(one([line for line in next_lines if line.name == icon], icon),
                             f"This row is the email by {goal['by']}; I click its {icon} icon.")
        raise ExpertStuck(f"no email by {goal['by']}")
    send = page.find("generic", f"send-{goal['task']}")
    if send:
        box = textboxes(page, multiline=goal["task"] == "reply")
        value = goal["to"] if goal["task"] == "forward" else goal["message"]
        field_line = one(box, "field")
        if field_line.name != value:
            return type_into(field_line, value, f"I write \"{value}\".")
        return click(send[0], "The message is ready; I send it.")
    action = page.find("StaticText", goal["task"].capitalize())
    if action:
        return click(action[0], f"The email is open; I click {goal['task'].capitalize()}.")
    for sender, _ in _rows(page):
        if sender.name == goal["by"]:
            return click(sender, f"I open the email by {goal['by']}.")
    raise ExpertStuck(f"no email by {goal['by']}")


def _rows(page: Page) -> list[tuple[Line, list[Line]]]:
    """The inbox rows: (sender line, the row's next four lines: subject, body, trash, star)."""
    lines = page.lines
    return [(line, lines[i + 1:i + 5]) for i, line in enumerate(lines[:-4])
            if line.role == "StaticText" and line.ref is not None and lines[i + 3].name == "trash"]


def solve_buy_ticket(page, memory):
    goal = re.search(r"with the (.*)\.", page.utterance).group(1)
    buttons = page.find("button")
    durations = [line.name for line in page.find("StaticText") if re.fullmatch(r"\d+h \d+m", line.name)]
    minutes = [int(h) * 60 + int(m) for h, m in (re.findall(r"\d+", d) for d in durations)]
    prices = [int(re.search(r"\d+", b.name).group(0)) for b in buttons]
    key = {"cheapest cost": prices, "most expensive cost": [-p for p in prices],
           "shortest duration": minutes, "longest duration": [-m for m in minutes]}[goal]
    best = buttons[key.index(min(key))]
    return click(best, f"This ticket has the {goal}.")


def solve_terminal(page, memory):
    box = one(textboxes(page), "terminal input")
    listing = [line.name for line in page.find("StaticText")]
    if "ls" not in listing:
        return "I list the files first.", f"type [{box.ref}] [ls] [1]"
    files = listing[listing.index("ls") + 1].split()
    match = re.search(r"extension \.(\w+)", page.utterance)
    name = next(f for f in files if (f.endswith("." + match.group(1)) if match else "." not in f))
    return f"The file to delete is {name}.", f"type [{box.ref}] [rm {name}] [1]"


def solve_text_transform(page, memory):
    box = one(textboxes(page), "textbox")
    text = "".join(line.name for line in page.lines[:page.lines.index(box)] if line.role == "StaticText")
    return fill(page, [(box, text)])


def solve_grid_coordinate(page, memory):
    target = re.search(r"\(-?\d+,-?\d+\)", page.utterance).group(0)
    return click(one(page.find("generic", target), target), f"The grid point {target} is on the page.")


def solve_visual_addition(page, memory):
    count = len(page.find("generic", "addition-block"))
    return fill(page, [(one(textboxes(page), "textbox"), str(count))])


def solve_odd_or_even(page, memory):
    marked = memory.setdefault("marked", [])
    lines = page.lines
    for i, line in enumerate(lines):
        if line.role == "StaticText" and re.fullmatch(r"-?\d+", line.name) and i not in marked:
            marked.append(i)
            word = "Odd" if int(line.name) % 2 else "Even"
            button = lines[i - 1] if word == "Odd" else lines[i + 1]
            return click(button, f"{line.name} is {word.lower()}.")
    return submit(page)


def solve_generate_number(page, memory):
    shown = one([line for line in page.find("StaticText") if re.fullmatch(r"-|-?\d+", line.name)], "number").name
    u = page.utterance
    goal = re.search(r"(less|greater) than (\d+)", u)
    ok = shown != "-" and (
        (int(shown) < int(goal.group(2)) if goal.group(1) == "less" else int(shown) > int(goal.group(2))) if goal
        else int(shown) % 2 == (1 if "odd" in u else 0))
    if ok:
        return submit(page)
    return click(one(page.find("button", "Generate"), "Generate button"), f"{shown} does not fit; I generate again.")


def solve_form_sequence_2(page, memory):
    u = page.utterance
    radio = page.find("radio")[ORDINALS[re.search(r"(\w+) radio button", u).group(1)] - 1]
    box = textboxes(page)[ORDINALS[re.search(r"the (\w+) textbox", u).group(1)] - 1]
    if radio.props["checked"] == "false":
        return click(radio, "I check the radio button first.")
    return fill(page, [(box, quoted(page)[0])])


def solve_multi_layouts(page, memory):
    """Three labelled text fields (labels before or after their fields, rows in any order) and a search button."""
    genre, director, year = re.search(r"Search for (.+) movies directed by (.+) from year (\d+)\.",
                                      page.utterance).groups()
    values = {"genre": genre, "director": director, "year": year, "date": year}

    def value_of(line: Line) -> str | None:
        return next((value for word, value in values.items() if word in line.name.lower()), None)

    labels = [i for i, line in enumerate(page.lines) if line.role != "textbox" and value_of(line)]
    boxes = [i for i, line in enumerate(page.lines) if line.role == "textbox"]
    after = labels[0] > boxes[0]  # this layout puts each label after its field
    for i in boxes:
        label = min(j for j in labels if j > i) if after else max(j for j in labels if j < i)
        box, value = page.lines[i], value_of(page.lines[label])
        if box.name != value:
            return type_into(box, value, f"The field labeled {page.lines[label].name!r} wants {value}.")
    last = [line for line in page.lines if line.ref is not None and line.role in ("button", "StaticText")][-1]
    return click(last, "All fields are filled in; I submit the search.")


def solve_autocomplete(page, memory):
    start, *end = quoted(page)
    box = one(textboxes(page), "textbox")
    if box.name != start and not memory.get("picked"):
        return type_into(box, start, f"I type {start!r} to see the suggestions.")
    options = [line for line in page.find("StaticText") if line.name.startswith(start)
               and (not end or line.name.endswith(end[0]))]
    if options and not memory.get("picked"):
        memory["picked"] = True
        return click(options[0], f"{options[0].name} matches.")
    return submit(page)


def solve_phone_book(page, memory):
    person, what = re.search(r"Find (.+) in the contact book and click on their (\w+)", page.utterance).groups()
    if page.find("heading", person):
        index = {"phone": 0, "email": 1, "address": 2}[what]
        links = [line for line in page.find("link") if not re.fullmatch(r"\d+|<|>", line.name)]
        return click(links[index], f"This is {person}'s {what}.")
    return click(one(page.find("link", ">"), "next page"), f"{person} is not on this page; I go to the next one.")


MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
          "November", "December")


def solve_choose_date(page, memory):
    month, day, year = (int(x) for x in re.search(r"(\d+)/(\d+)/(\d+)", page.utterance).groups())
    box = one(textboxes(page), "date field")
    if box.name == f"{month:02d}/{day:02d}/{year}":
        return submit(page)
    shown = [line.name for line in page.find("StaticText")]
    names = [name for name in shown if name in MONTHS]
    if not names:
        return click(box, "I open the date picker.")
    years = [int(name) for name in shown if re.fullmatch(r"\d{4}", name)]
    offset = (year - years[0]) * 12 + month - 1 - MONTHS.index(names[0])
    if offset:
        direction = "Next" if offset > 0 else "Prev"
        return click(one(page.find("link", direction), direction), f"The picker shows {names[0]} {years[0]}; "
                     f"I go to the {'next' if offset > 0 else 'previous'} month.")
    return click(one(page.find("link", str(day)), f"day {day}"), f"I pick day {day}.")


SOLVERS = {
    "buy-ticket": solve_buy_ticket, "click-button": solve_click_button,
    "click-button-sequence": solve_click_button_sequence, "click-checkboxes": solve_click_choices,
    "click-checkboxes-large": solve_click_choices, "click-checkboxes-transfer": solve_click_choices,
    "click-collapsible": solve_click_collapsible, "click-collapsible-nodelay": solve_click_collapsible,
    "click-collapsible-2": solve_find_by_expanding, "click-collapsible-2-nodelay": solve_find_by_expanding,
    "click-dialog": solve_click_dialog, "click-dialog-2": solve_click_dialog, "click-link": solve_click_link,
    "click-option": solve_click_choices, "click-tab": solve_click_tab, "click-tab-2": solve_find_by_expanding,
    "click-tab-2-easy": solve_find_by_expanding, "click-tab-2-hard": solve_find_by_expanding,
    "click-tab-2-medium": solve_find_by_expanding, "click-test": solve_click_button,
    "click-test-2": solve_click_button, "click-test-transfer": solve_click_button,
    "click-widget": solve_click_widget, "copy-paste": solve_copy_paste, "copy-paste-2": solve_copy_paste,
    **{task: solve_email for task in TASKS if task.startswith("email-inbox")},
    "enter-password": solve_enter_password, "enter-text": solve_enter_text, "enter-text-2": solve_enter_text,
    "enter-text-dynamic": solve_enter_text, "find-word": solve_find_word, "focus-text": solve_focus_text,
    "focus-text-2": solve_focus_text, "guess-number": solve_guess_number, "login-user": solve_login,
    "login-user-popup": solve_login, "navigate-tree": solve_navigate_tree, "read-table": solve_read_table,
    "read-table-2": solve_read_table_2, "scroll-text": solve_scroll_text, "search-engine": solve_search_engine,
    "simple-algebra": solve_arithmetic, "simple-arithmetic": solve_arithmetic, "social-media": solve_social_media,
    "social-media-all": solve_social_media, "social-media-some": solve_social_media, "terminal": solve_terminal,
    "unicode-test": solve_click_button, "text-transform": solve_text_transform,
    "grid-coordinate": solve_grid_coordinate, "visual-addition": solve_visual_addition,
    "odd-or-even": solve_odd_or_even, "generate-number": solve_generate_number,
    "form-sequence-2": solve_form_sequence_2,
    "multi-layouts": solve_multi_layouts, "multi-orderings": solve_multi_layouts,
    "use-autocomplete-nodelay": solve_autocomplete, "phone-book": solve_phone_book,
    **{task: solve_choose_date for task in TASKS if task.startswith("choose-date")},
}
EXPERT_TASKS = tuple(task for task in TASKS if task in SOLVERS)


def solver(item_id: int):
    """The scripted solver of item_id's task; NoExpert for a task without one."""
    task, _ = task_and_seed(item_id)
    if task not in SOLVERS:
        raise NoExpert(f"miniwob: no expert for task {task!r} (item {item_id}); the expert solves "
                       f"{', '.join(EXPERT_TASKS)}")
    return SOLVERS[task]
