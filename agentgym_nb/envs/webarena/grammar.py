"""WebArena's text interface: the observation the agent reads, the reply it writes (its reasoning, then one action
inside triple backticks) and the id-based action grammar of that action (WebArena's `create_id_based_action`).
MiniWoB speaks it too, with a subset of the actions."""
from __future__ import annotations

import re
from dataclasses import dataclass

from ..base import InvalidAction

TEMPLATE = "OBSERVATION:\n{observation}\nURL: {url}\nOBJECTIVE: {objective}\nPREVIOUS ACTION: {previous_action}"
NO_BACKTICKS = ("Cannot parse action from response. Your action should be inside triple backticks (```). "
                "Please adjust accordingly.")  # AgentGym's client, before anything reaches the server
BLOCK = re.compile(r"```((.|\n)*?)```")
SPECIAL_KEYS = {k.lower(): k for k in (
    "Backquote", "Minus", "Equal", "Backslash", "Backspace", "Meta", "Tab", "Delete", "Escape", "ArrowDown", "End",
    "Enter", "Home", "Insert", "PageDown", "PageUp", "ArrowRight", "ArrowUp", "F1", "F2", "F3", "F4", "F5", "F6",
    "F7", "F8", "F9", "F10", "F11", "F12")}


class ActionParsingError(ValueError):
    """WebArena's message for an action it cannot read; the agent sees the message as the observation."""


@dataclass(frozen=True)
class Action:
    kind: str  # click hover type press scroll goto new_tab go_back go_forward tab_focus close_tab stop
    element_id: str = ""
    text: str = ""  # typed text ("\n" appended for Enter), key combination, url, direction or answer
    page_number: int = 0


def require_block(reply: str) -> str:
    """AgentGym's WebArena client check: a reply without a ```...``` block is refused (InvalidAction) before it
    reaches the server; any other reply goes on whole."""
    if not BLOCK.search(reply):
        raise InvalidAction(NO_BACKTICKS)
    return reply


def extract_action(response: str) -> str:
    """The content of the first ```...``` block of a reply (WebArena's action splitter)."""
    match = BLOCK.search(response)
    if not match:
        raise ActionParsingError(f"Cannot parse action from response {response}")
    return match.group(1).strip()


def action_kind(action_str: str) -> str:
    """The action's name: what precedes its first "[", else its first word."""
    action_str = action_str.strip()
    return action_str.split("[")[0].strip() if "[" in action_str else (action_str.split() or [""])[0].strip()


def parse_action(action_str: str) -> Action:
    """WebArena's `create_id_based_action`: the grammar of one action string; ActionParsingError otherwise."""
    action_str = action_str.strip()
    kind = action_kind(action_str)
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


def no_element(kind: str, element_id) -> str:
    """WebArena's PREVIOUS ACTION for an action on an id the observation does not show."""
    return (f'Attempt to perfom "{kind}" on element "[{element_id}]" but no matching element found. Please check '
            "the observation more carefully.")


def describe(action: Action, nodes: dict[str, dict]) -> str:
    """WebArena's `get_action_description`: the PREVIOUS ACTION line, naming the element acted on."""
    if action.kind in ("click", "hover", "type"):
        if action.element_id not in nodes:
            return no_element(action.kind, action.element_id)
        element = " ".join(nodes[action.element_id]["text"].split()[1:])
        typed = f" [{action.text.replace(chr(10), ' ')}]" if action.kind == "type" else ""
        return f"{action.kind} [{action.element_id}]{typed} where [{action.element_id}] is {element}"
    argument = {"scroll": action.text, "press": action.text, "goto": action.text, "stop": action.text,
                "tab_focus": str(action.page_number)}.get(action.kind)
    name = "page_focus" if action.kind == "tab_focus" else action.kind
    return name if argument is None else f"{name} [{argument}]"


def reply(thought: str, action: str) -> str:
    """A reply in the form the instruction asks for (how the experts write theirs)."""
    return f"Let's think step-by-step. {thought} In summary, the next action I will perform is ```{action}```"
