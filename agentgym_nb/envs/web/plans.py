"""What an offline WebArena task is made of: the plan steps the expert plays, `Task` (a WebArena config plus its
plan), the evaluator specs a config carries, and the plan fragments the templates share.

The plans are played by the expert (envs/webarena/expert.py).
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from . import data

SHOP, FORUM, HOME = "__SHOPPING__", "__REDDIT__", "__HOMEPAGE__"
SHOP_LOGIN, FORUM_LOGIN, BOTH_LOGIN = ("./.auth/shopping_state.json", "./.auth/reddit_state.json",
                                       "./.auth/shopping.reddit_state.json")
SHOWN_HOME = "http://homepage.com"
LAST_COMMENT = "document.querySelector('#comments .comment:last-child').outerText"


# ---------------------------------------------------------------- plan steps

@dataclass(frozen=True)
class Click:
    role: str
    name: str
    why: str = ""


@dataclass(frozen=True)
class Type:
    role: str
    name: str
    text: str
    enter: bool = True


@dataclass(frozen=True)
class Replace:
    """Overwrite a pre-filled field: click it, select all, delete, type (WebArena's `type` only appends)."""
    role: str
    name: str
    text: str
    enter: bool = False


@dataclass(frozen=True)
class Read:
    """Scroll down until `text` is in view (to read an answer off the page)."""
    text: str


@dataclass(frozen=True)
class Goto:
    url: str  # as the agent sees it (http://reddit.com/...)
    why: str = ""


@dataclass(frozen=True)
class Stop:
    answer: str = ""


@dataclass(frozen=True)
class Task:
    template_id: int
    intent_template: str  # with {{slots}}, as WebArena writes them
    slots: dict
    sites: tuple[str, ...]
    start_url: str
    evaluation: dict
    plan: tuple
    storage_state: str | None = None

    @property
    def intent(self) -> str:
        return re.sub(r"\{\{(\w+)\}\}", lambda m: str(self.slots[m.group(1)]), self.intent_template)

    def config(self, task_id: int) -> dict:
        """The task as a WebArena config file."""
        evaluation = {"eval_types": [], "reference_answers": None, "reference_url": "", "program_html": [],
                      "string_note": "", "reference_answer_raw_annotation": ""}
        evaluation.update(self.evaluation)
        return {"sites": list(self.sites), "task_id": task_id, "require_login": self.storage_state is not None,
                "storage_state": self.storage_state, "start_url": self.start_url, "geolocation": None,
                "intent_template": self.intent_template, "instantiation_dict": self.slots, "intent": self.intent,
                "require_reset": False, "eval": evaluation, "intent_template_id": self.template_id}


def answer_eval(raw: str, must: list[str] | None = None, exact: str | None = None) -> dict:
    references = {"exact_match": exact} if exact is not None else {"must_include": must}
    return {"eval_types": ["string_match"], "reference_answers": references, "reference_answer_raw_annotation": raw}


def url_eval(url: str) -> dict:
    return {"eval_types": ["url_match"], "reference_url": url, "url_note": "GOLD in PRED"}


def html_eval(*targets: tuple[str, str, dict]) -> dict:
    return {"eval_types": ["program_html"],
            "program_html": [{"url": u, "locator": loc, "required_contents": req} for u, loc, req in targets]}


# ---------------------------------------------------------------- plan fragments

def money(value: float) -> str:
    return f"${value:,.2f}"


def find_product(p: data.Product) -> list:
    return [Type("textbox", "Search products", p.name), Click("link", p.name, "It is the product I am looking for.")]


def search_post(p: data.Post) -> list:
    return [Type("textbox", "Search query", p.title)]


def find_post(p: data.Post) -> list:
    return search_post(p) + [Click("link", p.title, "It is the post I am looking for.")]


def open_category(category: str) -> list:
    return [Click("link", category, f"It lists the products of the {category} category.")]


def open_forum(forum: str) -> list:
    return [Click("link", "Forums", "It lists all forums."), Click("link", f"/f/{forum}", f"It opens /f/{forum}.")]


def my_orders(page: int = 1, why: str = "Older orders are there.") -> list:
    """From any shop page (signed in) to page `page` of my order history."""
    return [Click("link", "My Account"), Click("link", "My Orders")] + (
        [Click("link", f"Page {page}", why)] if page > 1 else [])


def order_page(o: data.Order) -> int:
    return data.orders().index(o) // data.PAGE_SIZE + 1


def order_numbered(number: str) -> data.Order:
    return next(o for o in data.orders() if o.number == number)


def cart_qty(p: data.Product, qty: int) -> tuple:
    return (f"{SHOP}/cart", f"document.querySelector('[data-sku=\"{p.sku}\"] .qty').outerText",
            {"exact_match": str(qty)})


def by_name(name: str) -> data.Product:
    return data.product_named(name)


def cheapest(category: str) -> data.Product:
    return min((p for p in data.products() if p.category == category), key=lambda p: p.price)


def dearest(category: str) -> data.Product:
    return max((p for p in data.products() if p.category == category), key=lambda p: p.price)


def top_rated(category: str) -> data.Product:
    return min((p for p in data.products() if p.category == category), key=lambda p: (-p.rating, p.id))


def newest_post(forum: str) -> data.Post:
    return max((p for p in data.posts() if p.forum == forum), key=lambda p: p.id)


def top_post(forum: str) -> data.Post:
    return min((p for p in data.posts() if p.forum == forum), key=lambda p: (-p.score, -p.id))


def commented(k: int) -> data.Post:
    """The k-th post with at least two comments."""
    return [p for p in data.posts() if len(p.comments) >= 2][k]

