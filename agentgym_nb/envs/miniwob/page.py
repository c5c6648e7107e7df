"""What the agent sees on a MiniWoB++ page: the DOM elements MiniWoB's own observation gives, written as Chrome's
accessibility tree reads in WebArena, inside WebArena's observation template."""
from __future__ import annotations

from dataclasses import dataclass, field

from miniwob.dom import DOMElement

from ..webarena.grammar import TEMPLATE

URL_ROOT = "http://localhost:8000/miniwob/"  # where MiniWoB's own `http-serve` puts the tasks
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
