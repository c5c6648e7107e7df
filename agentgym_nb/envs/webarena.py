"""WebArena with AgentGym's text interface (agentenv-webarena), driving real Chromium through Playwright.

The agent sees WebArena's observation: the open tabs and the accessibility tree of the current viewport, one
`[id] role 'name' properties` line per node (tab-indented), then `URL:`, `OBJECTIVE:` and `PREVIOUS ACTION:`.
It acts with WebArena's id-based grammar inside the first triple-backtick block of its reply: `click [id]`,
`hover [id]`, `type [id] [text] [0|1]`, `press [keys]`, `scroll [up|down]`, `goto [url]`, `new_tab`, `go_back`,
`go_forward`, `tab_focus [n]`, `close_tab`, `stop [answer]`. The episode ends at `stop`, and only then is there a
reward: the product of the task's evaluators (string_match, url_match, program_html) in [0, 1].

Tasks are WebArena config files (`config_files/<item id>.json`). By default they are the offline tasks shipped in
`agentgym_nb/data/webarena/config_files/` (ids 0..81) plus generated training tasks (ids from 1000, whose configs
`envs/web/tasks.py` builds in memory), played on the embedded sites (`envs/web/`) served on loopback.
With `config_dir=` (or the environment variable WEBARENA_CONFIG_DIR) the env runs WebArena's own 812 configs against
the real WebArena sites, whose URLs come from the environment variables WebArena uses (SHOPPING, SHOPPING_ADMIN,
REDDIT, GITLAB, MAP, WIKIPEDIA, HOMEPAGE).

Browser: one headless Debian Chromium per process, driven from a private event-loop thread, so envs stepped from
any thread share it. Each env holds one browser context; every reset clears its cookies and storage, sets the task's
login state and replaces its tabs, so episodes share nothing; close() hands the context back to the pool. A crashed
browser or a page that does not load within `page_load_timeout` raises EnvError, ends the episode and drops the
context; the next reset gets a fresh one (relaunching the browser if needed).

Differences from WebArena, each for a reason: node ids are small numbers assigned per document in tree order
(WebArena shows Chromium's node ids, which are not reproducible across runs, so expert demonstrations could not be
replayed); list bullets (ListMarker) and the `url` property are left out (tokens without information); a node is in
view when it overlaps the viewport (what WebArena's ratio test amounts to); after an action we wait for the page to
finish loading instead of sleeping a fixed 1.5 s.
"""
from __future__ import annotations

import ast
import asyncio
import atexit
import concurrent.futures
import html
import json
import os
import re
import shutil
import threading
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from pydantic import BaseModel

from .base import Env, EnvError, Episodes, InvalidAction, Step, Track, check_item_id

INSTRUCTION = (
    "You are an autonomous intelligent agent tasked with navigating a web browser. You will be given web-based "
    "tasks. These tasks will be accomplished through the use of specific actions you can issue.\n\nHere's the "
    "information you'll have:\nThe user's objective: This is the task you're trying to complete.\nThe current web "
    "page's accessibility tree: This is a simplified representation of the webpage, providing key information.\n"
    "The current web page's URL: This is the page you're currently navigating.\nThe open tabs: These are the tabs "
    "you have open.\nThe previous action: This is the action you just performed. It may be helpful to track your "
    "progress.\n\nThe actions you can perform fall into several categories:\n\nPage Operation Actions:\n"
    "```click [id]```: This action clicks on an element with a specific id on the webpage.\n```type [id] [content] "
    "[0|1]```: Use this to type the content into the field with id. By default, the \"Enter\" key is pressed after "
    "typing unless the last parameter is set to 0.\n```hover [id]```: Hover over an element with id.\n"
    "`press [key_comb]`:  Simulates the pressing of a key combination on the keyboard (e.g., Ctrl+v).\n"
    "```scroll [down|up]```: Scroll the page up or down to reveal content below or above the current view.\n\n"
    "Tab Management Actions:\n```new_tab```: Open a new, empty browser tab.\n```tab_focus [tab_index]```: Switch "
    "the browser's focus to a specific tab using its index.\n```close_tab```: Close the currently active tab.\n\n"
    "URL Navigation Actions:\n```goto [url]```: Navigate to a specific URL.\n```go_back```: Navigate to the "
    "previously viewed page.\n```go_forward```: Navigate to the next page (if a previous 'go_back' action was "
    "performed).\n\nCompletion Action:\n```stop [answer]```: Issue this action when you believe the task is "
    "complete. If the objective is to find a text-based answer, provide the answer in the bracket. If you believe "
    "the task is impossible to complete, provide the answer as \"N/A\" in the bracket.\n\nHomepage:\nIf you want to "
    "visit other websites, check out the homepage at http://homepage.com. It has a list of websites you can visit."
    "\n\nTo be successful, it is very important to follow the following rules:\n1. You should only issue an action "
    "that is valid given the current observation\n2. You should only issue one action at a time.\n3. You should "
    "follow the examples to reason step by step and then issue the next action.\n4.For ALL actions that take "
    "parameters, you MUST enclose each parameter in square brackets [].\n5. Generate the action in the correct "
    "format. Start with a \"Let's think step-by-step...In summary, the next action I will perform is\" phrase, "
    "followed by action inside triple backticks (```). For example, \"Let's think step-by-step. This page has a "
    "search box whose ID is [164]. According to the nominatim rule of openstreetmap, I can search for the "
    "restaurants near a location by \"restaurants near\". I can submit my typing by pressing the Enter afterwards. "
    "In summary, the next action I will perform is ```type [164] [restaurants near CMU] [1]```\".\n6. Issue stop "
    "action when you think you have achieved the objective. Don't generate anything after stop."
)
ACKNOWLEDGEMENT = "Ok."
NO_BACKTICKS = ("Cannot parse action from response. Your action should be inside triple backticks (```). "
                "Please adjust accordingly.")  # AgentGym's client, before anything reaches the server
TEMPLATE = "OBSERVATION:\n{observation}\nURL: {url}\nOBJECTIVE: {objective}\nPREVIOUS ACTION: {previous_action}"

# WebArena's site variables, their config placeholders and the addresses the agent sees (browser_env/env_config.py)
SITES = {"SHOPPING": "http://onestopmarket.com", "SHOPPING_ADMIN": "http://luma.com/admin",
         "REDDIT": "http://reddit.com", "GITLAB": "http://gitlab.com", "WIKIPEDIA": "http://wikipedia.org",
         "MAP": "http://openstreetmap.org", "HOMEPAGE": "http://homepage.com"}
OFFLINE_DIR = Path(__file__).resolve().parent.parent / "data" / "webarena" / "config_files"
ADMIN_ACCOUNT = {"username": "admin", "password": "admin1234"}  # WebArena's shopping_site_admin (helper functions)

VIEWPORT = {"width": 1280, "height": 720}
CHROMIUM_FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--no-first-run"]
IGNORED_PROPERTIES = {"focusable", "editable", "readonly", "level", "settable", "multiline", "invalid", "url"}
HIDDEN_IF_EMPTY = {"generic", "img", "list", "strong", "paragraph", "banner", "navigation", "Section", "LabelText",
                   "Legend", "listitem"}
SKIPPED_ROLES = {"InlineTextBox", "ListMarker"}
SPECIAL_KEYS = {k.lower(): k for k in (
    "Backquote", "Minus", "Equal", "Backslash", "Backspace", "Meta", "Tab", "Delete", "Escape", "ArrowDown", "End",
    "Enter", "Home", "Insert", "PageDown", "PageUp", "ArrowRight", "ArrowUp", "F1", "F2", "F3", "F4", "F5", "F6",
    "F7", "F8", "F9", "F10", "F11", "F12")}
SCROLL_JS = ("(document.scrollingElement || document.body).scrollTop = "
             "(document.scrollingElement || document.body).scrollTop {sign} window.innerHeight;")


# ---------------------------------------------------------------- actions

class ActionParsingError(ValueError):
    """WebArena's message for an action it cannot read; the agent sees the message as the observation."""


@dataclass(frozen=True)
class Action:
    kind: str  # click hover type press scroll goto new_tab go_back go_forward tab_focus close_tab stop
    element_id: str = ""
    text: str = ""  # typed text ("\n" appended for Enter), key combination, url, direction or answer
    page_number: int = 0


def extract_action(response: str) -> str:
    """The content of the first ```...``` block of a reply (WebArena's action splitter)."""
    match = re.search(r"```((.|\n)*?)```", response)
    if not match:
        raise ActionParsingError(f"Cannot parse action from response {response}")
    return match.group(1).strip()


def parse_action(action_str: str) -> Action:
    """WebArena's `create_id_based_action`: the grammar of one action string; ActionParsingError otherwise."""
    action_str = action_str.strip()
    kind = action_str.split("[")[0].strip() if "[" in action_str else (action_str.split() or [""])[0].strip()
    if kind in ("click", "hover"):
        match = re.search(rf"{kind} ?\[(\d+)\]", action_str)
        if not match:
            raise ActionParsingError(f"Invalid {kind} action {action_str}")
        return Action(kind, element_id=match.group(1))
    if kind == "type":
        if not (action_str.endswith("[0]") or action_str.endswith("[1]")):
            action_str += " [1]"  # Enter by default
        match = re.search(r"type ?\[(\d+)\] ?\[(.+)\] ?\[(\d+)\]", action_str)
        if not match:
            raise ActionParsingError(f"Invalid type action {action_str}")
        text = match.group(2) + ("\n" if match.group(3) == "1" else "")
        return Action("type", element_id=match.group(1), text=text)
    if kind == "press":
        match = re.search(r"press ?\[(.+)\]", action_str)
        if not match:
            raise ActionParsingError(f"Invalid press action {action_str}")
        return Action("press", text="+".join(SPECIAL_KEYS.get(k.lower(), k) for k in match.group(1).split("+")))
    if kind == "scroll":
        match = re.search(r"scroll ?\[?(up|down)\]?", action_str)
        if not match:
            raise ActionParsingError(f"Invalid scroll action {action_str}")
        return Action("scroll", text=match.group(1))
    if kind == "goto":
        match = re.search(r"goto ?\[(.+)\]", action_str)
        if not match:
            raise ActionParsingError(f"Invalid goto action {action_str}")
        return Action("goto", text=match.group(1))
    if kind in ("new_tab", "go_back", "go_forward", "close_tab"):
        return Action(kind)
    if kind == "tab_focus":
        match = re.search(r"tab_focus ?\[(\d+)\]", action_str)
        if not match:
            raise ActionParsingError(f"Invalid tab_focus action {action_str}")
        return Action("tab_focus", page_number=int(match.group(1)))
    if kind == "stop":
        match = re.search(r"stop ?\[(.+)\]", action_str)
        return Action("stop", text=match.group(1) if match else "")  # some tasks need no answer
    raise ActionParsingError(f"Invalid action {action_str}")


def describe(action: Action, nodes: dict[str, dict]) -> str:
    """WebArena's `get_action_description`: the PREVIOUS ACTION line, naming the element acted on."""
    if action.kind in ("click", "hover", "type"):
        if action.element_id not in nodes:
            return (f'Attempt to perfom "{action.kind}" on element "[{action.element_id}]" but no matching element '
                    "found. Please check the observation more carefully.")
        element = " ".join(nodes[action.element_id]["text"].split()[1:])
        typed = f" [{action.text.replace(chr(10), ' ')}]" if action.kind == "type" else ""
        return f"{action.kind} [{action.element_id}]{typed} where [{action.element_id}] is {element}"
    argument = {"scroll": action.text, "press": action.text, "goto": action.text, "stop": action.text,
                "tab_focus": str(action.page_number)}.get(action.kind)
    name = "page_focus" if action.kind == "tab_focus" else action.kind
    return name if argument is None else f"{name} [{argument}]"


# ---------------------------------------------------------------- accessibility tree -> text

@dataclass
class NodeIds:
    """Small ids for the nodes of one document, in the order they are first seen (tree order on the first look).
    A node keeps its id while its document lives; a new document starts again at 1."""
    document: int | None = None
    ids: dict[int, int] = field(default_factory=dict)

    def start(self, document: int) -> None:
        if document != self.document:
            self.document, self.ids = document, {}

    def get(self, backend_id: int) -> int:
        return self.ids.setdefault(backend_id, len(self.ids) + 1)


def layout_bounds(snapshot: dict) -> dict[int, tuple[float, float, float, float]]:
    """backend node id -> (x, y, width, height) in page coordinates, from DOMSnapshot.captureSnapshot (main doc)."""
    document = snapshot["documents"][0]
    backend = document["nodes"]["backendNodeId"]
    layout = document["layout"]
    return {backend[index]: tuple(box) for index, box in zip(layout["nodeIndex"], layout["bounds"])}


def node_line(node: dict) -> str | None:
    """`role 'name' prop: value ...` for a node WebArena would print, None for one it hides."""
    try:
        role, name = node["role"]["value"], node["name"]["value"]
    except KeyError:  # ignored nodes have no name
        return None
    if role in SKIPPED_ROLES or not isinstance(name, str):
        return None
    properties = []
    for prop in node.get("properties", []):
        if prop["name"] in IGNORED_PROPERTIES or "value" not in prop.get("value", {}):
            continue
        properties.append(f"{prop['name']}: {prop['value']['value']}")
    if not name.strip() and ((not properties and role in HIDDEN_IF_EMPTY) or (properties and role == "listitem")):
        return None
    return f"{role} {name!r}" + (" " + " ".join(properties) if properties else "")


def overlaps(box, scroll_x: float, scroll_y: float, viewport: dict) -> bool:
    if box is None:
        return False
    x, y, width, height = box
    return (width > 0 and height > 0 and x < scroll_x + viewport["width"] and x + width > scroll_x
            and y < scroll_y + viewport["height"] and y + height > scroll_y)


def render_tree(ax_nodes: list[dict], snapshot: dict, ids: NodeIds, viewport: dict = VIEWPORT
                ) -> tuple[str, dict[str, dict]]:
    """The viewport's accessibility tree as WebArena prints it, and its node table (WebArena's `obs_nodes_info`:
    id -> backend_id, union_bound [x, y, w, h] relative to the viewport, text).

    A node is printed when WebArena would print it and it overlaps the viewport; hidden nodes pass their children
    up one level. Then StaticText lines repeating one of the previous three lines are dropped, as WebArena does.
    """
    by_id = {}
    for node in ax_nodes:
        by_id.setdefault(node["nodeId"], node)
    root = ax_nodes[0]
    bounds = layout_bounds(snapshot)
    document = snapshot["documents"][0]
    scroll_x, scroll_y = document.get("scrollOffsetX", 0), document.get("scrollOffsetY", 0)
    ids.start(root.get("backendDOMNodeId", 0))
    lines, nodes = [], {}
    stack = [(root, 0)]
    while stack:
        node, depth = stack.pop()
        line, backend = node_line(node), node.get("backendDOMNodeId")
        child_depth = depth
        if line is not None and backend is not None:
            node_id = str(ids.get(backend))
            box = bounds.get(backend)
            if node is root or overlaps(box, scroll_x, scroll_y, viewport):
                text = f"[{node_id}] {line}"
                lines.append("\t" * depth + text)
                union = [box[0] - scroll_x, box[1] - scroll_y, box[2], box[3]] if box else [0.0, 0.0, 10.0, 10.0]
                nodes[node_id] = {"backend_id": backend, "union_bound": union, "text": text}
                child_depth = depth + 1
        children = [by_id[c] for c in node.get("childIds", []) if c in by_id]
        stack.extend((child, child_depth) for child in reversed(children))
    return "\n".join(drop_repeated_text(lines)), nodes


def drop_repeated_text(lines: list[str]) -> list[str]:
    """WebArena's `clean_accesibility_tree`: a StaticText line whose text already appears in one of the previous
    three kept lines (or is empty) is dropped."""
    kept = []
    for line in lines:
        match = re.search(r"\[\d+\] StaticText (.+)", line, re.DOTALL)
        if match:
            text = match.group(1)[1:-1]
            if not text or any(text in previous for previous in kept[-3:]):
                continue
        kept.append(line)
    return kept


# ---------------------------------------------------------------- urls

class UrlMap:
    """Local site addresses <-> the addresses the agent sees (WebArena's URL_MAPPINGS), matched at address
    boundaries so that port 4000 never matches inside port 40001."""

    def __init__(self, local_to_shown: dict[str, str]):
        self.pairs = sorted(((local.rstrip("/"), shown) for local, shown in local_to_shown.items() if local),
                            key=lambda pair: -len(pair[0]))

    def shown(self, url: str) -> str:
        for local, shown in self.pairs:
            if url == local or url.startswith(local) and url[len(local)] in "/?#":
                return shown + url[len(local):]
        return url

    def local(self, text: str) -> str:
        """Every shown address in `text` (http or https) replaced by its local one (WebArena does this to the
        whole action string)."""
        for local, shown in self.pairs:
            for variant in (shown, shown.replace("http://", "https://")):
                text = re.sub(re.escape(variant) + r"(?=$|[/?#\s\]])", lambda _: local, text)
        return text


# ---------------------------------------------------------------- task configs

PLACEHOLDER = re.compile(r"__(SHOPPING_ADMIN|SHOPPING|REDDIT|GITLAB|MAP|WIKIPEDIA|HOMEPAGE)__")


class TaskConfigs:
    """WebArena task configs from a directory of `<item id>.json` files, with `__SITE__` placeholders filled in."""

    def __init__(self, directory: Path):
        self.directory = Path(directory)
        if not self.directory.is_dir():
            raise ValueError(f"webarena config directory {self.directory} does not exist (it should hold WebArena's "
                             "config_files/<task id>.json)")

    def raw(self, item_id: int) -> dict:
        path = self.directory / f"{item_id}.json"
        if not path.exists():
            count = len(list(self.directory.glob("*.json")))
            raise ValueError(f"webarena: no task config {path} ({count} config files in {self.directory})")
        return json.loads(path.read_text())

    def resolve(self, item_id: int, urls: dict[str, str]) -> dict:
        """The config with each `__SITE__` replaced by the site's URL; an unset site is an error naming it."""
        def fill(value):
            if isinstance(value, str):
                def site(match):
                    name = match.group(1)
                    if not urls.get(name):
                        raise ValueError(f"webarena task {item_id} uses the {name} site but its URL is not set: "
                                         f"export {name}=http://<host>:<port> (as for WebArena)")
                    return urls[name].rstrip("/")
                return PLACEHOLDER.sub(site, value)
            if isinstance(value, list):
                return [fill(v) for v in value]
            if isinstance(value, dict):
                return {k: fill(v) for k, v in value.items()}
            return value
        return fill(self.raw(item_id))


class OfflineConfigs(TaskConfigs):
    """The offline tasks: the shipped config files, and from `FIRST_GENERATED` on the generated training tasks,
    whose configs the generator builds from the id (hundreds of files would only repeat it)."""

    def raw(self, item_id: int) -> dict:
        from .web import tasks

        if item_id >= tasks.FIRST_GENERATED:
            return tasks.config(item_id)
        return super().raw(item_id)


# ---------------------------------------------------------------- evaluators (evaluation_harness/evaluators.py)

Judge = Callable[[list[dict]], str]  # chat messages -> the reply text of an LLM


def clean_answer(answer: str) -> str:
    answer = answer.strip()
    if len(answer) >= 2 and answer[0] == answer[-1] and answer[0] in "'\"":
        answer = answer[1:-1]
    return answer.lower()


def exact_match(ref: str, pred: str) -> float:
    return float(clean_answer(pred) == clean_answer(ref))


def must_include(ref: str, pred: str, tokenize: bool = False) -> float:
    """`ref` inside `pred` after cleaning; a one-character ref must be a whole token when `tokenize` (so "0" does
    not match "10")."""
    ref, pred = clean_answer(ref), clean_answer(pred)
    if tokenize and len(ref) == 1:
        return float(ref in re.findall(r"\w+|[^\w\s]", pred))
    return float(ref in pred)


def fuzzy_match(judge: Judge, ref: str, pred: str, intent: str) -> float:
    """WebArena's `llm_fuzzy_match` prompt, answered by `judge`."""
    message = ("Help a teacher to grade the answer of a student given a question. Keep in mind that the student may "
               "use different phrasing or wording to answer the question. The goal is to evaluate whether the answer "
               f"is semantically equivalent to the reference answer.\nquestion: {intent}\nreference answer: {ref}\n"
               "all the string 'N/A' that you see is a special sequence that means 'not achievable'\n"
               f"student answer: {pred}\nConclude the judgement by correct/incorrect/partially correct.")
    reply = judge([{"role": "system", "content": "You are a helpful assistant"},
                   {"role": "user", "content": message}]).lower()
    return 0.0 if "partially correct" in reply or "incorrect" in reply else float("correct" in reply)


def ua_match(judge: Judge, ref: str, pred: str, intent: str) -> float:
    """WebArena's `llm_ua_match`: does the reported reason for giving up match the real one?"""
    message = (f"task: {intent}\nactual unachievable reason: {ref}\nreported unachievable reason: {pred}\n"
               "The task described above is inherently unachievable due to the reason specified under 'actual "
               "unachievable reason'. An individual previously attempted this task and was unable to complete it. "
               "They provided a reason for their failure, which is listed under 'reported unachievable reason'. Your "
               "role is to review both the actual and reported reasons. Determine if the reported reason aligns with "
               "the actual reason, even if implicitly. If the stated reason is in line with the actual reason, "
               "respond with 'same'. Otherwise, respond with 'different'.")
    reply = judge([{"role": "system", "content": "You are a helpful assistant"},
                   {"role": "user", "content": message}]).lower()
    return 0.0 if "different" in reply else float("same" in reply)


def needs_judge(config: dict) -> bool:
    return "string_match" in config["eval"]["eval_types"] and "fuzzy_match" in (
        config["eval"].get("reference_answers") or {})


def string_score(config: dict, answer: str, judge: Judge | None) -> float:
    """StringEvaluator: the product over the reference answers' rules."""
    pred, score = clean_answer(answer), 1.0
    for rule, value in (config["eval"].get("reference_answers") or {}).items():
        if rule == "exact_match":
            score *= exact_match(value, pred)
        elif rule == "must_include":
            score *= min((must_include(v, pred, tokenize=len(value) == 1) for v in value), default=1.0)
        elif rule == "fuzzy_match":
            if judge is None:
                raise ValueError("this task is graded by an LLM judge (fuzzy_match); pass judge=")
            if value == "N/A":
                score *= exact_match(value, pred)
                if score != 1:
                    score = ua_match(judge, config["eval"].get("string_note", ""), pred, config["intent"])
            else:
                for reference in value:
                    score *= fuzzy_match(judge, reference, pred, config["intent"])
        else:
            raise ValueError(f"unknown string_match rule {rule!r} (exact_match, must_include, fuzzy_match)")
    return score


def url_score(config: dict, url: str) -> float:
    """URLEvaluator, "GOLD in PRED": some reference path is inside the page's host+path, and every reference query
    parameter has one of its reference values."""
    rule = config["eval"].get("url_note", "GOLD in PRED")
    if rule != "GOLD in PRED":
        raise ValueError(f"unknown url_note {rule!r} (only 'GOLD in PRED')")

    def split(address):
        parsed = urllib.parse.urlparse(address.rstrip("/"))
        return parsed.netloc + parsed.path, urllib.parse.parse_qs(parsed.query)

    references = [split(u) for u in config["eval"]["reference_url"].split(" |OR| ")]
    path, query = split(url)
    score = float(any(ref_path in path for ref_path, _ in references))
    wanted: dict[str, set] = {}
    for _, ref_query in references:
        for key, values in ref_query.items():
            wanted.setdefault(key, set()).update(values)
    for key, values in wanted.items():
        score *= float(any(v in query.get(key, []) for v in values))
    return score


def content_score(required: dict, selected: str) -> float:
    """HTMLContentEvaluator's check of one target's selected text."""
    if "exact_match" in required:
        return exact_match(required["exact_match"], selected)
    if "must_include" in required:
        return float(all(any(must_include(option, selected) for option in content.split(" |OR| "))
                         for content in required["must_include"]))
    raise ValueError(f"unknown required_contents {sorted(required)} (exact_match, must_include)")


# WebArena's evaluation helper functions (evaluation_harness/helper_functions.py), by the name configs call them.

def reddit_get_post_url(url: str) -> str:
    """http://host/f/<forum>/<id>/anything -> http://host/f/<forum>/<id>/; other URLs unchanged."""
    parsed = urllib.parse.urlparse(url)
    parts = parsed.path.split("/")
    if len(parts) < 4 or parts[1] != "f":
        return url
    return f"{parsed.scheme}://{parsed.netloc}/f/{parts[2]}/{parts[3]}/"


def _shopping_api(shopping: str, path: str, params: dict | None = None):
    import requests

    token = requests.post(f"{shopping}/rest/default/V1/integration/admin/token", json=ADMIN_ACCOUNT, timeout=30).json()
    answer = requests.get(f"{shopping}/rest/V1/{path}", params=params, timeout=30,
                          headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"})
    answer.raise_for_status()
    return answer.json()


def shopping_get_latest_order_url(shopping: str) -> str:
    latest = _shopping_api(shopping, "orders", {"searchCriteria[sortOrders][0][field]": "created_at",
                                                "searchCriteria[sortOrders][0][direction]": "DESC",
                                                "searchCriteria[pageSize]": "1"})["items"][0]
    return f"{shopping}/sales/order/view/order_id/{int(latest['increment_id'])}/"


def shopping_get_sku_latest_review_author(shopping: str, sku: str) -> str:
    reviews = _shopping_api(shopping, f"products/{sku}/reviews")
    return reviews[-1]["nickname"] if reviews else ""


def shopping_get_sku_latest_review_rating(shopping: str, sku: str) -> str:
    reviews = _shopping_api(shopping, f"products/{sku}/reviews")
    return str(reviews[-1]["ratings"][0]["percent"]) if reviews else ""


async def gitlab_get_project_memeber_role(page, account_name: str) -> str:
    script = """(name) => {
        const accounts = [...document.querySelectorAll("td[data-label='Account'] span.gl-avatar-labeled-sublabel")];
        const index = accounts.findIndex(e => e.outerText === '@' + name);
        return index < 0 ? "" : document.querySelectorAll("td.col-max-role span")[index].outerText;
    }"""
    try:
        return await page.evaluate(script, account_name)
    except Exception:  # noqa: BLE001  (WebArena: a page without the table has no role)
        return ""


async def call_helper(expression: str, page, urls: dict[str, str]) -> str:
    """Run a `func:name(args)` of a WebArena config: only the helpers above, arguments literals, `__page__`."""
    call = ast.parse(expression.replace("__last_url__", page.url), mode="eval").body
    if not isinstance(call, ast.Call) or not isinstance(call.func, ast.Name):
        raise ValueError(f"webarena: cannot evaluate helper call {expression!r}")
    args = [page if isinstance(a, ast.Name) and a.id == "__page__" else ast.literal_eval(a) for a in call.args]
    name = call.func.id
    if name == "reddit_get_post_url":
        return reddit_get_post_url(*args)
    if name == "gitlab_get_project_memeber_role":
        return await gitlab_get_project_memeber_role(*args)
    shopping = {"shopping_get_latest_order_url": shopping_get_latest_order_url,
                "shopping_get_sku_latest_review_author": shopping_get_sku_latest_review_author,
                "shopping_get_sku_latest_review_rating": shopping_get_sku_latest_review_rating}.get(name)
    if shopping is None:
        raise ValueError(f"webarena: unknown evaluation helper {name!r}")
    if not urls.get("SHOPPING"):
        raise ValueError(f"webarena: {name} needs the SHOPPING site URL")
    return await asyncio.to_thread(shopping, urls["SHOPPING"].rstrip("/"), *args)


# ---------------------------------------------------------------- the browser

def chromium_path() -> str:
    found = shutil.which("chromium") or ("/usr/bin/chromium" if os.path.exists("/usr/bin/chromium") else None)
    if found is None:
        raise EnvError("webarena needs Chromium: install Debian's package (apt-get install chromium); "
                       "Playwright's own browser download is not used")
    return found


class BrowserPool:
    """One Chromium for the process, driven by Playwright's async API on a private event-loop thread.

    `run(coroutine)` executes on that loop from any thread. `new_context()` hands out a context: an idle one that a
    closed env released (at most `idle_limit` are kept, with their pages open so their renderer stays warm; the
    next env clears its storage and replaces its pages), else a new one, launching the browser first if it is not
    running (first use, or after a crash). Contexts of failed episodes are closed, never kept.
    """

    idle_limit = 2

    def __init__(self):
        self.loop: asyncio.AbstractEventLoop | None = None
        self.thread: threading.Thread | None = None
        self.playwright = None
        self.browser = None
        self.idle: list = []  # touched on the loop thread only
        self.launches = 0
        self._lock = threading.Lock()

    def _start_loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self.loop is None or not self.thread.is_alive():
                loop = asyncio.new_event_loop()
                self.thread = threading.Thread(target=loop.run_forever, name="agentgym-webarena-browser", daemon=True)
                self.thread.start()
                self.loop = loop
            return self.loop

    def run(self, coroutine, timeout: float):
        """Run `coroutine` on the browser loop and wait at most `timeout` seconds (then EnvError)."""
        future = asyncio.run_coroutine_threadsafe(coroutine, self._start_loop())
        try:
            return future.result(timeout)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise EnvError(f"webarena: the browser did not answer within {timeout:.0f}s") from None

    async def new_context(self):
        while self.idle:
            context = self.idle.pop()
            if context.browser is self.browser and self.browser.is_connected():
                return context
        if self.browser is None or not self.browser.is_connected():
            await self._launch()
        try:
            return await self.browser.new_context(viewport=VIEWPORT, device_scale_factor=1)
        except Exception:  # noqa: BLE001  (a browser that died since the check: relaunch once)
            if self.browser.is_connected():
                raise
            await self._launch()
            return await self.browser.new_context(viewport=VIEWPORT, device_scale_factor=1)

    async def release(self, context, keep: bool) -> None:
        """Take back an env's context: kept idle if `keep` and there is room, else closed."""
        alive = context.browser is self.browser and self.browser is not None and self.browser.is_connected()
        if keep and alive and len(self.idle) < self.idle_limit:
            self.idle.append(context)
        elif alive:
            await context.close()

    async def _launch(self) -> None:
        from playwright.async_api import async_playwright

        if self.browser is not None:
            try:
                await self.browser.close()
            except Exception:  # noqa: BLE001  (it crashed: nothing left to close)
                pass
        if self.playwright is None:
            self.playwright = await async_playwright().start()
        self.browser = await self.playwright.chromium.launch(executable_path=chromium_path(), args=CHROMIUM_FLAGS,
                                                             headless=True)
        self.launches += 1

    async def _shutdown(self) -> None:
        self.idle = []
        if self.browser is not None:
            try:
                await self.browser.close()
            except Exception:  # noqa: BLE001
                pass
        if self.playwright is not None:
            await self.playwright.stop()
        self.browser = self.playwright = None

    def close(self) -> None:
        """Close the browser and stop the loop thread (the next use starts both again)."""
        with self._lock:
            loop, thread = self.loop, self.thread
            self.loop = None
        if loop is None:
            return
        if thread.is_alive():
            try:
                asyncio.run_coroutine_threadsafe(self._shutdown(), loop).result(30)
            except Exception:  # noqa: BLE001  (shutting down: best effort)
                pass
            loop.call_soon_threadsafe(loop.stop)
            thread.join(timeout=10)


POOL = BrowserPool()
atexit.register(POOL.close)


def shutdown_browser() -> None:
    """Close this process's Chromium (envs still open get EnvError; the next reset starts a new browser)."""
    POOL.close()


@dataclass
class Tab:
    """What we keep per browser page: its CDP session, its main frame's loading state, its node ids.

    `requested` is set when the page asks for a new document (a form submission does so a few milliseconds after
    the key press that caused it, before the browser starts loading); `loading` counts loads in progress."""
    cdp: object
    main_frame: str
    requested: float | None = None  # loop time of a navigation request not yet started
    loading: int = 0
    ids: NodeIds = field(default_factory=NodeIds)


# ---------------------------------------------------------------- the env

class WebArena(Env):
    """WebArena tasks in a real browser with AgentGym's interface; see the module docstring.

    `config_dir`: a directory of WebArena config files (real WebArena, site URLs from the environment); default
    WEBARENA_CONFIG_DIR if set, else the offline tasks on the embedded sites. `judge`: an LLM chat function
    (messages -> reply text) for tasks graded by fuzzy_match; without one such tasks refuse to reset.
    `page_load_timeout`: seconds a page may take to load before the episode fails with EnvError.
    """

    name, title = "webarena", "WebArena"
    task_instruction = INSTRUCTION
    # A step (Chromium, accessibility trees of ~2k tokens a turn) costs about 20 times a BabyAI step: the cpu
    # preset trains half the tasks per step over 24 steps (three stages of 8).
    tracks = {"all": Track("every task of the offline sites", None,
                           Episodes(rounds=(4, 8, 12), max_tokens=128, max_total_tokens=8192, max_envs=6),
                           budget=dict(prompts_per_step=4, steps=24, rounds_every=8))}
    # Its instruction and an accessibility tree are ~1,850 tokens, and ~650 more per turn.
    smoke = Episodes(rounds=(1, 2), max_tokens=24, max_total_tokens=3584)
    smoke_nano = dict(demos=8, max_total_tokens=4032, bc_max_steps=8, check_every=8)
    success_score = 1.0

    def __init__(self, config_dir: str | Path | None = None, judge: Judge | None = None,
                 page_load_timeout: float = 30.0):
        config_dir = config_dir or os.environ.get("WEBARENA_CONFIG_DIR") or None
        self.offline = config_dir is None
        self.configs = OfflineConfigs(OFFLINE_DIR) if self.offline else TaskConfigs(Path(config_dir))
        self.judge, self.page_load_timeout = judge, page_load_timeout
        self.pool = POOL
        self.config: dict = {}
        self.urls: dict[str, str] = {}
        self.url_map = UrlMap({})
        self.context = None
        self.page = None
        self.tabs: dict[object, Tab] = {}
        self.nodes: dict[str, dict] = {}
        self.tree = ""
        self.url = ""
        self.history: list[str] = ["None"]
        self.episode_token: str | None = None
        self.item_id: int | None = None

    @property
    def instruction(self) -> list[dict]:
        return [{"role": "user", "content": INSTRUCTION}, {"role": "assistant", "content": ACKNOWLEDGEMENT}]

    # -- episode ------------------------------------------------------------------------------------------------

    def reset(self, item_id: int) -> str:
        self.check_open()
        item_id = check_item_id(item_id, f"webarena: a config file name in {self.configs.directory}")
        self._forget_episode()
        self.phase = "new"
        self.urls = self._site_urls()
        self.config = self.configs.resolve(item_id, self.urls)
        if needs_judge(self.config) and self.judge is None:
            raise ValueError(f"webarena task {item_id} is graded by an LLM judge (fuzzy_match); construct the env "
                             "with judge=<function: chat messages -> reply text>")
        self.url_map = UrlMap({self.urls[name]: SITES[name] for name in SITES if self.urls.get(name)})
        self.item_id, self.history, self.score, self.reward = item_id, ["None"], 0.0, 0.0
        self._run(self._start(), self.page_load_timeout * (1 + len(self._start_urls())) + 30)
        self.phase = "running"
        return self.observe()

    def _site_urls(self) -> dict[str, str]:
        if self.offline:
            from . import web

            return web.start()
        return {name: os.environ.get(name, "") for name in SITES}

    def _start_urls(self) -> list[str]:
        return [u.strip() for u in self.config.get("start_url", "").split(" |AND| ") if u.strip()]

    def observe(self) -> str:
        """WebArena's prompt for the current state (AgentGym's GET /observation)."""
        return TEMPLATE.format(observation=self.tree, url=self.url, objective=self.config.get("intent", ""),
                               previous_action=self.history[-1])

    def parse_action(self, text: str) -> str:
        """AgentGym's client check: the reply must hold a ```...``` block; the whole reply goes on to act()."""
        if not re.search(r"```(.*?)```", text, re.DOTALL):
            raise InvalidAction(NO_BACKTICKS)
        return text

    def act(self, text: str) -> Step:
        """AgentGym's server step: the first ``` block of the reply (shown URLs mapped to local ones) is parsed;
        an unreadable one is answered with WebArena's message and costs the turn. Otherwise it is executed (a
        failing execution is not an error: WebArena records it and shows the new state) and, at `stop`, the task's
        evaluators give the reward."""
        self.check_running()
        try:
            action = parse_action(self.url_map.local(extract_action(text)))
        except ActionParsingError as error:
            info = {"score": self.score, "reward": 0.0, "action": "", "valid": False, "fail_error": str(error)}
            return Step(str(error), 0.0, False, info)
        self.history.append(describe(action, self.nodes))
        timeout = self.page_load_timeout * (3 + len(self.config["eval"].get("program_html") or [])) + 30
        fail_error, score = self._run(self._act(action), timeout)
        if action.kind == "stop":
            self.phase, self.score, self.reward = "over", score, score
        info = {"score": self.score, "reward": self.reward, "action": self.history[-1], "valid": not fail_error,
                "fail_error": fail_error, "url": self.url}
        return Step(self.observe(), self.reward, action.kind == "stop", info)

    def category(self, item_id: int) -> str:
        """The task's site(s), e.g. "shopping", "reddit", "shopping+reddit"."""
        item_id = check_item_id(item_id, f"webarena: a config file name in {self.configs.directory}")
        return "+".join(self.configs.raw(item_id)["sites"])

    def expert(self, item_id: int) -> list[str]:
        """Replies that solve an offline task (a scripted plan, played in a private browser context)."""
        if not self.offline:
            raise ValueError("webarena: the scripted expert covers the offline tasks only")
        from .web.tasks import expert_replies

        return expert_replies(item_id)

    def metadata(self) -> dict:
        """WebArena's observation metadata (AgentGym's GET /observation_metadata)."""
        return {"text": {"obs_nodes_info": self.nodes}, "image": {"obs_nodes_info": {}}}

    def close(self) -> None:
        self._release(keep=True)
        super().close()

    # -- browser work (runs on the pool's loop) -------------------------------------------------------------

    def _run(self, coroutine, timeout: float):
        """Run browser work; a failure of the browser (or of a page to load) ends the episode with EnvError and
        drops the context, so the next reset starts from a fresh one."""
        try:
            return self.pool.run(self._guarded(coroutine), timeout)
        except BaseException:
            if self.phase == "running":
                self.phase = "over"
            self._release(keep=False)
            raise

    async def _guarded(self, coroutine):
        from playwright.async_api import Error as PlaywrightError
        from playwright.async_api import TimeoutError as PlaywrightTimeout

        try:
            return await coroutine
        except PlaywrightTimeout as error:
            raise EnvError(f"webarena: a page did not load within {self.page_load_timeout:.0f}s "
                           f"({self.url or 'starting the task'}): {str(error).splitlines()[0]}") from None
        except PlaywrightError as error:
            raise EnvError(f"webarena: browser error ({self.url or 'starting the task'}): "
                           f"{str(error).splitlines()[0]}") from None

    async def _start(self) -> None:
        """Begin the episode in this env's context (made on first use): storage cleared and set to the task's
        login state, geolocation set, the start pages opened, then the previous episode's pages closed (opening
        first keeps the context's renderer alive: a reset costs a page load, not a process start)."""
        storage = self.config.get("storage_state")
        state = {"cookies": [], "origins": []}
        if storage and not self.offline:
            path = Path(storage) if Path(storage).is_absolute() else self.configs.directory.parent / storage
            if not path.exists():
                raise EnvError(f"webarena task {self.item_id} needs the login state {path}; create it with WebArena's "
                               "`python browser_env/auto_login.py` in its webarena directory")
            state = json.loads(path.read_text())
        if self.context is not None and self.context.browser is not self.pool.browser:
            self.context, self.tabs = None, {}  # made by a browser that is gone (crashed or shut down)
        if self.context is None:
            self.context = await self.pool.new_context()
            self.context.set_default_timeout(self.page_load_timeout * 1000)
        await self.context.set_storage_state(state)
        await self.context.set_geolocation(self.config.get("geolocation"))
        if self.offline:
            from . import web

            logins = Path(storage).name.removesuffix("_state.json").split(".") if storage else []
            self.episode_token = web.STORE.begin(tuple(logins))
            await self.context.add_cookies([{"name": web.COOKIE, "value": self.episode_token,
                                             "url": self.urls["HOMEPAGE"]}])
        old_pages, pages = list(self.context.pages), []
        for url in self._start_urls() or ["about:blank"]:
            pages.append(await self.context.new_page())
            await self._tab(pages[-1])
            await pages[-1].goto(url, wait_until="load")
        for page in old_pages:
            self.tabs.pop(page, None)
            await page.close()
        self.page = pages[0]
        await self.page.bring_to_front()
        await self._observe()

    async def _tab(self, page) -> Tab:
        """The Tab of `page`, attaching a CDP session (accessibility, snapshots, load events) on first use."""
        if page not in self.tabs:
            cdp = await self.context.new_cdp_session(page)
            await cdp.send("Page.enable")
            frame = (await cdp.send("Page.getFrameTree"))["frameTree"]["frame"]["id"]
            tab = Tab(cdp, frame)
            loop = asyncio.get_running_loop()

            def requested(event, tab=tab):
                if event["frameId"] == tab.main_frame:
                    tab.requested = loop.time()

            def started(event, tab=tab):
                if event["frameId"] == tab.main_frame:
                    tab.requested, tab.loading = None, tab.loading + 1

            def stopped(event, tab=tab):
                if event["frameId"] == tab.main_frame:
                    tab.loading = max(0, tab.loading - 1)

            cdp.on("Page.frameRequestedNavigation", requested)
            cdp.on("Page.frameStartedLoading", started)
            cdp.on("Page.frameStoppedLoading", stopped)
            self.tabs[page] = tab
        return self.tabs[page]

    async def _settle(self) -> None:
        """Wait until a navigation the action started has loaded (instead of WebArena's fixed 1.5 s sleep)."""
        from playwright.async_api import TimeoutError as PlaywrightTimeout

        await asyncio.sleep(0.01)  # the request of a click or Enter arrives within milliseconds
        tab, loop = await self._tab(self.page), asyncio.get_running_loop()
        try:  # a round trip through the page's renderer: a navigation it scheduled has been requested by now
            await tab.cdp.send("Runtime.evaluate", {"expression": "0"})
        except Exception:  # noqa: BLE001  (the document is being replaced: the load events below tell the rest)
            pass
        deadline = loop.time() + self.page_load_timeout
        while not self.page.is_closed():
            if tab.requested is not None and loop.time() - tab.requested > 2.0:
                tab.requested = None  # requested but never started (cancelled): nothing to wait for
            if tab.requested is None and not tab.loading:
                return
            if loop.time() > deadline:
                raise PlaywrightTimeout(f"still loading {self.page.url}")
            await asyncio.sleep(0.005)

    async def _observe(self) -> None:
        """Read the current tab: tab titles, accessibility tree of the viewport, URL."""
        tab = await self._tab(self.page)
        ax_nodes = (await tab.cdp.send("Accessibility.getFullAXTree"))["nodes"]
        snapshot = await tab.cdp.send("DOMSnapshot.captureSnapshot", {"computedStyles": []})
        text, self.nodes = render_tree(ax_nodes, snapshot, tab.ids)
        titles = []
        for index, page in enumerate(self.context.pages):
            if page is self.page:  # the document's title is the root's name: no extra round trip
                titles.append(f"Tab {index} (current): {ax_nodes[0].get('name', {}).get('value', '')}")
            else:
                titles.append(f"Tab {index}: {await page.title()}")
        self.tree = " | ".join(titles) + "\n\n" + text
        self.url = self.url_map.shown(self.page.url)

    async def _act(self, action: Action) -> tuple[str, float]:
        """Execute, wait for loading, observe; at stop, evaluate. Returns (WebArena's fail_error, score)."""
        from playwright.async_api import Error as PlaywrightError
        from playwright.async_api import TimeoutError as PlaywrightTimeout

        fail_error = ""
        try:
            await self._execute(action)
        except PlaywrightTimeout:
            raise
        except (PlaywrightError, KeyError, IndexError, ValueError) as error:
            if self.page.is_closed() or not self.context.browser.is_connected() or "crash" in str(error).lower():
                raise EnvError(f"webarena: browser error ({self.url}): {str(error).splitlines()[0]}") from None
            fail_error = str(error).splitlines()[0] if str(error) else error.__class__.__name__
        await self._settle()
        await self._observe()
        score = await self._evaluate(action.text) if action.kind == "stop" else 0.0
        return fail_error, score

    def _center(self, element_id: str) -> tuple[float, float]:
        """Middle of the element's visible part (WebArena clicks the middle of its box)."""
        x, y, width, height = self.nodes[element_id]["union_bound"]  # KeyError: not in the observation
        left, top = max(x, 0), max(y, 0)
        right, bottom = min(x + width, VIEWPORT["width"]), min(y + height, VIEWPORT["height"])
        return (left + right) / 2, (top + bottom) / 2

    async def _execute(self, action: Action) -> None:
        page, kind = self.page, action.kind
        if kind in ("click", "type"):
            await page.mouse.click(*self._center(action.element_id))
            if kind == "type":
                await page.keyboard.type(action.text)
        elif kind == "hover":
            await page.mouse.move(*self._center(action.element_id))
        elif kind == "scroll":
            await page.evaluate(SCROLL_JS.format(sign="-" if action.text == "up" else "+"))
        elif kind == "press":
            keys = action.text
            if "Meta" in keys and "Mac" not in await page.evaluate("navigator.platform"):
                keys = keys.replace("Meta", "Control")
            await page.keyboard.press(keys)
        elif kind == "goto":
            await page.goto(action.text, wait_until="load")
        elif kind == "go_back":
            await page.go_back(wait_until="load")
        elif kind == "go_forward":
            await page.go_forward(wait_until="load")
        elif kind == "new_tab":
            self.page = await self.context.new_page()
            await self._tab(self.page)
        elif kind == "tab_focus":
            self.page = self.context.pages[action.page_number]
            await self.page.bring_to_front()
        elif kind == "close_tab":
            await page.close()
            self.tabs.pop(page, None)
            self.page = self.context.pages[-1] if self.context.pages else await self.context.new_page()

    async def _evaluate(self, answer: str) -> float:
        """The product of the task's evaluators, in the config's order (evaluation_harness.evaluator_router)."""
        score = 1.0
        for kind in self.config["eval"]["eval_types"]:
            if kind == "string_match":  # in a thread: an LLM judge must not stall the other envs' browser work
                score *= await asyncio.to_thread(string_score, self.config, answer, self.judge)
            elif kind == "url_match":
                score *= url_score(self.config, self.page.url)
            elif kind == "program_html":
                score *= await self._program_html()
            else:
                raise ValueError(f"webarena: unknown eval type {kind!r} (string_match, url_match, program_html)")
        return score

    async def _program_html(self) -> float:
        """HTMLContentEvaluator: for each target, open its URL (or stay: "last"), select text with its locator
        (a JS expression, a helper function, or the whole page) and check the required contents."""
        page, score = self.page, 1.0
        for target in self.config["eval"]["program_html"]:
            url = target["url"]
            if url.startswith("func:"):
                url = await call_helper(url.split("func:", 1)[1], page, self.urls)
            if url != "last":
                await page.goto(url, wait_until="load")
            locator = target["locator"]
            if not locator.strip():
                selected = await page.content()
            elif locator.startswith("document.") or locator.startswith("[...document."):
                for prep in target.get("prep_actions", []):
                    try:
                        await page.evaluate(f"() => {prep}")
                    except Exception:  # noqa: BLE001  (WebArena ignores failing preparations)
                        pass
                try:
                    selected = str(await page.evaluate(f"() => {locator}") or "")
                except Exception:  # noqa: BLE001  (the element is missing: the page is wrong)
                    selected = ""
            elif locator.startswith("func:"):
                selected = await call_helper(locator.split("func:", 1)[1], page, self.urls)
            else:
                raise ValueError(f"webarena: unknown locator {locator!r}")
            score *= content_score(target["required_contents"], html.unescape(selected))
        return score

    def _forget_episode(self) -> None:
        """Drop the offline sites' state of the episode that ended."""
        if self.episode_token is not None:
            from . import web

            web.STORE.end(self.episode_token)
            self.episode_token = None

    def _release(self, keep: bool) -> None:
        """Give this env's browser context back to the pool (after close(), `keep`) or close it (after a failure)."""
        self._forget_episode()
        context, self.context, self.page, self.tabs, self.nodes = self.context, None, None, {}, {}
        if context is not None and context.browser is self.pool.browser and self.pool.loop is not None:
            try:
                self.pool.run(self.pool.release(context, keep), 30)
            except Exception:  # noqa: BLE001  (a crashed browser has no context left to close)
                pass


# ---------------------------------------------------------------- AgentGym's webarena wire format

class ResetBody(BaseModel):
    env_idx: int
    seed: int = 0
    idx: int


class StepBody(BaseModel):
    env_idx: int
    action: str


class CloseBody(BaseModel):
    env_idx: int


def webarena_routes(app, pool, cls) -> None:
    """agentenv-webarena's server: `env_idx` fields, /reset answers the raw tree + sites + intent, /step the prompt,
    reward, terminated, truncated, info; failures inside /reset and /step are reported in the answer itself (as
    AgentGym does), with an extra "error" field naming the failure for clients that want it."""
    from .base import EnvStateError
    from .http import answer

    @app.get("/")
    def hello():
        return "ok"

    @app.post("/create")
    def create():
        return answer(lambda: {"env_idx": pool.create()})

    @app.post("/reset")
    def reset(body: ResetBody):
        try:
            with pool.use(body.env_idx) as env:
                env.reset(body.idx)
                return {"observation": env.tree, "sites": env.config["sites"], "object": env.config["intent"]}
        except Exception as error:  # noqa: BLE001  (AgentGym answers every reset failure this way)
            return {"observation": "TimeoutError", "sites": "Error", "object": "Error",
                    "error": str(error) or error.__class__.__name__}

    @app.post("/step")
    def step(body: StepBody):
        try:
            with pool.use(body.env_idx) as env:
                if env.phase != "running":
                    raise EnvStateError(f"The environment {body.env_idx} is not running; POST /reset first.")
                result = env.act(body.action)
        except Exception as error:  # noqa: BLE001
            message = str(error) or error.__class__.__name__
            return {"observation": message, "reward": 0, "terminated": False, "truncated": False, "info": None,
                    "error": message}
        if not result.done:  # WebArena's per-step reward: 1.0 when the action executed (clients ignore it)
            reward = float(result.info["valid"])
        else:
            reward = result.reward
        info = {"fail_error": result.info["fail_error"], "url": result.info.get("url", "")}
        return {"observation": result.observation, "reward": reward, "terminated": result.done, "truncated": False,
                "info": info if "url" in result.info else None}

    @app.get("/observation")
    def observation(env_idx: int):
        def handle():
            with pool.use(env_idx) as env:
                return env.observe()
        return answer(handle)

    @app.get("/observation_metadata")
    def observation_metadata(env_idx: int):
        def handle():
            with pool.use(env_idx) as env:
                return env.metadata()
        return answer(handle)

    @app.post("/close")
    def close(body: CloseBody):
        if pool.close(body.env_idx):
            return {"closed": "closed"}
        return {"closed": f"Close Env {body.env_idx} Error: The id {body.env_idx} is not valid."}


def _http_client():
    from .http import HTTPEnv

    class WebArenaHTTPEnv(HTTPEnv):
        """AgentGym's WebarenaEnvClient: posts the whole reply (after checking for a ``` block), reads the prompt
        from GET /observation, and reports the reward only when the episode terminated."""

        @property
        def instruction(self) -> list[dict]:
            return [{"role": "user", "content": INSTRUCTION}, {"role": "assistant", "content": ACKNOWLEDGEMENT}]

        def _create(self) -> int:
            return self._call("POST", "create")["env_idx"]

        def _reset(self, item_id: int) -> str:
            data = self._call("POST", "reset", {"env_idx": self.env_id, "seed": 0, "idx": item_id})
            if data["observation"] == "TimeoutError":
                raise EnvError(f"webarena server {self.url} could not reset item {item_id}")
            self.reward = self.score = 0.0
            self.phase = "running"
            return self.observe()

        def act(self, action: str) -> Step:
            self.check_running()
            data = self._call("POST", "step", {"env_idx": self.env_id, "action": action})
            done = bool(data["terminated"])
            self.reward = float(data["reward"]) if done else 0.0
            if done:
                self.phase, self.score = "over", self.reward
            self.last_observation = data["observation"]
            info = {"score": self.score, "reward": self.reward, "action": action,
                    "valid": bool(data["info"]) and not data["info"].get("fail_error")}
            return Step(self.last_observation, self.reward, done, info)

        def observe(self) -> str:
            return self._call("GET", "observation", params={"env_idx": self.env_id})

        def category(self, item_id: int) -> str:
            if self._local is None:
                self._local = self.spec()
            return self._local.category(item_id)

        def _close(self) -> None:
            closed = self._call("POST", "close", {"env_idx": self.env_id}).get("closed")
            if closed != "closed":  # AgentGym reports a failed close (time-out, error) in the answer, at HTTP 200
                raise EnvError(f"webarena server {self.url}/close failed: {closed}")

    return WebArenaHTTPEnv


WebArena.http_routes = staticmethod(webarena_routes)
WebArena.http_client = _http_client()
