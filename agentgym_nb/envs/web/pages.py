"""Plain-HTML building blocks shared by the offline sites: a page shell, links, forms, pagination.

Pages are plain (no images): one 1280x720 viewport, the part WebArena's observation shows, holds a listing page;
longer pages (a product's reviews and review form, a post's comments) need a scroll, as on real sites.
"""
from __future__ import annotations

from html import escape
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse

from .state import COOKIE, STORE, Episode

STYLE = ("body{font:16px/1.5 sans-serif;margin:8px 16px}header{border-bottom:1px solid #ccc;padding-bottom:6px}"
         "header form{display:inline}ul{margin:6px 0;padding-left:20px}li{margin:4px 0}h1{font-size:24px;"
         "margin:10px 0}h2{font-size:18px;margin:14px 0 6px}p{margin:6px 0}.meta{color:#555}label{margin-right:8px}"
         "input[type=text],input[type=password]{width:280px}textarea{width:460px;height:60px}.message{color:#060}"
         ".error{color:#a00}nav a{margin-right:8px}")


def e(text) -> str:
    return escape(str(text), quote=True)


def link(href: str, text: str, label: str | None = None) -> str:
    aria = f' aria-label="{e(label)}"' if label else ""
    return f'<a href="{e(href)}"{aria}>{e(text)}</a>'


def url(path: str, **query) -> str:
    """`path?query` without empty values and without page=1 (the first page has one address)."""
    query = {k: v for k, v in query.items() if v not in (None, "") and not (k == "page" and v == 1)}
    return path + ("?" + urlencode(query) if query else "")


def text_input(name: str, label: str, value: str = "", kind: str = "text") -> str:
    return (f'<label>{e(label)} <input type="{kind}" name="{e(name)}" value="{e(value)}" '
            f'aria-label="{e(label)}"></label>')


def textarea(name: str, label: str, value: str = "") -> str:
    return f'<label>{e(label)} <textarea name="{e(name)}" aria-label="{e(label)}">{e(value)}</textarea></label>'


def form(action: str, fields: str, button: str, method: str = "post", label: str | None = None,
         button_label: str | None = None) -> str:
    """A form named `label` (if given) with a submit button showing `button`, named `button_label` if given."""
    aria = f' aria-label="{e(label)}"' if label else ""
    button_aria = f' aria-label="{e(button_label)}"' if button_label else ""
    return (f'<form method="{method}" action="{e(action)}"{aria}>{fields} '
            f'<button type="submit"{button_aria}>{e(button)}</button></form>')


def pagination(path: str, page: int, pages: int, **query) -> str:
    """Previous / page numbers / Next links; the current page number is plain text."""
    if pages <= 1:
        return ""
    parts = []
    if page > 1:
        parts.append(link(url(path, **query, page=page - 1), "Previous"))
    for n in range(1, pages + 1):
        parts.append(f"<span>Page {n}</span>" if n == page else link(url(path, **query, page=n), f"Page {n}"))
    if page < pages:
        parts.append(link(url(path, **query, page=page + 1), "Next"))
    return '<nav aria-label="Pages">' + " ".join(parts) + "</nav>"


def paginate(rows: list, page: int, size: int) -> tuple[list, int, int]:
    """(rows of `page`, clamped page, number of pages); page numbers start at 1."""
    pages = max(1, -(-len(rows) // size))
    page = min(max(page, 1), pages)
    return rows[(page - 1) * size: page * size], page, pages


def shell(title: str, header: str, body: str, message: str = "") -> HTMLResponse:
    note = f'<p class="message" role="status">{e(message)}</p>' if message else ""
    return HTMLResponse(f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>{e(title)}</title>'
                        f"<style>{STYLE}</style></head><body><header>{header}</header>{note}<main>{body}</main>"
                        "</body></html>")


def episode(request: Request) -> Episode:
    return STORE.get(request.cookies.get(COOKIE))


def int_param(request: Request, name: str, default: int = 1) -> int:
    try:
        return int(request.query_params.get(name, default))
    except ValueError:
        return default


def redirect(target: str) -> RedirectResponse:
    return RedirectResponse(target, status_code=303)


def not_found(title: str, header: str, what: str) -> HTMLResponse:
    response = shell(title, header, f"<h1>Page not found</h1><p>{e(what)}</p>")
    response.status_code = 404
    return response
