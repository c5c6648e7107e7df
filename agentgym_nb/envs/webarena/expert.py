"""The scripted expert of the offline tasks: it plays a task's plan (envs/web/tasks.py) in an offline WebArena env.

Each step of a plan names its target by role and accessible name; the id is read off the current observation
(scrolling down until the target is in view), and the reply is written the way the instruction asks ("Let's think
step-by-step. ... In summary, the next action I will perform is ```...```").
"""
from __future__ import annotations

import ast
import re
import threading
from typing import Callable

from ..base import Env, Step
from ..web.plans import Click, Goto, Read, Replace, Stop, Type
from ..web.tasks import task
from .grammar import reply

LINE = re.compile(r"^\t*\[(\d+)\] (\S+) ('(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\")")
MAX_SCROLLS = 8


def element_id(tree: str, role: str, name: str) -> str | None:
    """The id of the first `[id] role 'name'` line in an observation's tree, None if not in view."""
    for line in tree.splitlines():
        match = LINE.match(line)
        if match and match.group(2) == role and ast.literal_eval(match.group(3)) == name:
            return match.group(1)
    return None


_expert_env = None
_expert_lock = threading.Lock()
_solved: dict[int, list[str]] = {}  # the sites and ids are deterministic: a task's replies never change


def expert_replies(item_id: int, new_env: Callable[[], Env]) -> list[str]:
    """Play task(item_id)'s plan in the expert's private offline env (`new_env()`, made on first use); the replies,
    checked to earn reward 1. The env (one browser context) is kept for the next call (a reset is much cheaper
    than a new context), and each task's replies are remembered for the process."""
    global _expert_env
    task(item_id)  # ValueError for an id that is no offline task
    with _expert_lock:
        if item_id not in _solved:
            if _expert_env is None:
                _expert_env = new_env()
            try:
                _solved[item_id] = [text for text, _ in play(_expert_env, item_id)[1]]
            except BaseException:
                _expert_env.close()
                _expert_env = None
                raise
        return list(_solved[item_id])


def play(env, item_id: int) -> tuple[str, list[tuple[str, Step]]]:
    """Reset `env` (an offline WebArena env) to the task and follow its plan, reading ids off each observation:
    the first observation, then each reply sent with its Step (as Env.expert_episode), checked to earn reward 1
    (RuntimeError otherwise)."""
    observation, turns = env.reset(item_id), []

    def send(thought: str, action: str):
        text = reply(thought, action)
        turns.append((text, env.step(text)))

    def find(role: str, name: str) -> str:
        for _ in range(MAX_SCROLLS):
            found = element_id(env.tree, role, name)
            if found is not None:
                return found
            send(f"I need the {role} '{name}', which is not in view yet, so I scroll down.", "scroll [down]")
        raise RuntimeError(f"webarena expert: no {role} {name!r} on {env.url} (task {item_id})")

    for step in task(item_id).plan:
        if isinstance(step, Click):
            node = find(step.role, step.name)
            send(f"The {step.role} '{step.name}' has ID [{node}]. {step.why or 'I click it.'}", f"click [{node}]")
        elif isinstance(step, Type):
            node = find(step.role, step.name)
            enter = " and press Enter" if step.enter else ""
            send(f"The {step.role} '{step.name}' has ID [{node}]. I type \"{step.text}\" into it{enter}.",
                 f"type [{node}] [{step.text}] [{int(step.enter)}]")
        elif isinstance(step, Replace):
            node = find(step.role, step.name)
            send(f"The {step.role} '{step.name}' [{node}] holds an old value; I click into it first.",
                 f"click [{node}]")
            send("I select the whole old value.", "press [Meta+a]")
            send("I delete the selected text.", "press [Backspace]")
            enter = " and press Enter to save" if step.enter else ""
            send(f"The field [{node}] is empty now. I type \"{step.text}\"{enter}.",
                 f"type [{node}] [{step.text}] [{int(step.enter)}]")
        elif isinstance(step, Read):
            for _ in range(MAX_SCROLLS):
                if step.text in env.tree:
                    break
                send("The information I need is further down the page, so I scroll down.", "scroll [down]")
            else:
                raise RuntimeError(f"webarena expert: {step.text!r} never came into view (task {item_id})")
        elif isinstance(step, Goto):
            send(f"{step.why or 'I go to that address.'} I go to {step.url}.", f"goto [{step.url}]")
        elif isinstance(step, Stop):
            thought = f"The answer is {step.answer}." if step.answer else "The objective is complete."
            send(thought, f"stop [{step.answer}]" if step.answer else "stop []")
    last = turns[-1][1] if turns else None
    if last is None or not last.done or not env.success(last.reward):
        raise RuntimeError(f"webarena expert: the plan of task {item_id} did not earn reward 1 "
                           f"(reward {last.reward if last else None}, at {env.url})")
    return observation, turns
