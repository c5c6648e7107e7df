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

    tasks.py     which tasks are items (TASKS, TEST_TASKS, EXCLUDED), item id -> (task, seed)
    page.py      the observation: MiniWoB's DOM as an accessibility tree
    actions.py   WebArena's action grammar, the subset MiniWoB pages take
    browser.py   Chromium's flags, the JavaScript run in the task page, waiting for it to settle
    env.py       the env (`MiniWoB`)
    solvers.py   the expert: one scripted solver per task
"""
from .actions import key_name, parse_miniwob_action
from .env import INSTRUCTION, MiniWoB
from .page import Line, Page, read_page
from .solvers import EXPERT_TASKS, SOLVERS, solver
from .tasks import EXCLUDED, TASKS, TEST_TASKS, task_and_seed

__all__ = ["EXCLUDED", "EXPERT_TASKS", "INSTRUCTION", "SOLVERS", "TASKS", "TEST_TASKS", "Line", "MiniWoB", "Page",
           "key_name", "parse_miniwob_action", "read_page", "solver", "task_and_seed"]
