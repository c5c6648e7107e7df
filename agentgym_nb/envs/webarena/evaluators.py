"""WebArena's evaluators (evaluation_harness/evaluators.py): the reward of an episode at `stop` is the product of its
config's eval types, in the config's order: string_match on the answer, url_match on the final page's address,
program_html on what pages show after the episode (WebArena's helper functions included)."""
from __future__ import annotations

import ast
import asyncio
import html
import re
import urllib.parse
from typing import Callable

import requests

ADMIN_ACCOUNT = {"username": "admin", "password": "admin1234"}  # WebArena's shopping_site_admin (helper functions)

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


async def evaluate(config: dict, answer: str, page, urls: dict[str, str], judge: Judge | None) -> float:
    """The product of the config's evaluators, in its order (evaluation_harness.evaluator_router), on the answer
    given at `stop` and the Playwright `page` the episode ended on."""
    score = 1.0
    for kind in config["eval"]["eval_types"]:
        if kind == "string_match":  # in a thread: an LLM judge must not stall the other envs' browser work
            score *= await asyncio.to_thread(string_score, config, answer, judge)
        elif kind == "url_match":
            score *= url_score(config, page.url)
        elif kind == "program_html":
            score *= await program_html_score(config, page, urls)
        else:
            raise ValueError(f"webarena: unknown eval type {kind!r} (string_match, url_match, program_html)")
    return score


async def program_html_score(config: dict, page, urls: dict[str, str]) -> float:
    """HTMLContentEvaluator: for each target, open its URL (or stay: "last"), select text with its locator
    (a JS expression, a helper function, or the whole page) and check the required contents."""
    score = 1.0
    for target in config["eval"]["program_html"]:
        url = target["url"]
        if url.startswith("func:"):
            url = await call_helper(url.split("func:", 1)[1], page, urls)
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
            selected = await call_helper(locator.split("func:", 1)[1], page, urls)
        else:
            raise ValueError(f"webarena: unknown locator {locator!r}")
        score *= content_score(target["required_contents"], html.unescape(selected))
    return score
