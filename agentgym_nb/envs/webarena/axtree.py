"""Chromium's accessibility tree as WebArena prints it: one `[id] role 'name' properties` line per node in the
viewport, tab-indented, plus the node table (WebArena's `obs_nodes_info`) that actions on ids are resolved with.

Node ids are small numbers assigned per document in tree order (WebArena shows Chromium's node ids, which are not
reproducible across runs, so expert demonstrations could not be replayed). List bullets (ListMarker) and the `url`
property are left out: tokens without information. A node is in view when it overlaps the viewport, which is what
WebArena's ratio test amounts to.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from .browser import VIEWPORT

IGNORED_PROPERTIES = {"focusable", "editable", "readonly", "level", "settable", "multiline", "invalid", "url"}
HIDDEN_IF_EMPTY = {"generic", "img", "list", "strong", "paragraph", "banner", "navigation", "Section", "LabelText",
                   "Legend", "listitem"}
SKIPPED_ROLES = {"InlineTextBox", "ListMarker"}


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
