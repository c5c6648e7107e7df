"""Which MiniWoB++ tasks are items: the tasks solvable from the text observation with element-id actions, the
held-out ones, the reason each other task is left out, and item id -> (task, seed)."""
from __future__ import annotations

from ..base import check_item_id

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


def task_and_seed(item_id: int) -> tuple[str, int]:
    """item_id -> (TASKS[item_id % len(TASKS)], item_id // len(TASKS))."""
    item_id = check_item_id(item_id, f"miniwob: any int >= 0; task = id % {len(TASKS)}, seed = id // {len(TASKS)}")
    return TASKS[item_id % len(TASKS)], item_id // len(TASKS)
