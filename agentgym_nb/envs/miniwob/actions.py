"""What the agent may do on a MiniWoB++ page: WebArena's action grammar, the subset MiniWoB pages take."""
from __future__ import annotations

import re
from dataclasses import replace

from miniwob.constants import WEBDRIVER_SPECIAL_KEYS

from ..webarena.grammar import Action, ActionParsingError, action_kind, parse_action

WEBARENA_ONLY = ("hover", "scroll", "goto", "new_tab", "go_back", "go_forward", "tab_focus", "close_tab")
TYPE_WITH_FLAG = re.compile(r"type ?\[\d+\] ?\[.*\] ?\[[01]\]", re.DOTALL)


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
