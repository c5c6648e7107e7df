"""The offline WebArena tasks: WebArena config files over the embedded sites, each with a scripted expert plan.

Three kinds, as in WebArena: information seeking (answer checked by string_match), navigation (the final page
checked by url_match) and content changing (the site's state checked by program_html after the episode). Horizons
range from two actions (search, answer) to fifteen (edit three address fields; read a price in the shop and post it
on the forum). Each intent template is a function from slot values to a Task.

Hand-written tasks (ids 0..81, in the order shop_tasks, forum_tasks and cross_site_tasks list them) are shipped as
config files; the test split is the last instantiation of each template with two or more. Generated training tasks
(ids from 1000) instantiate the same templates over the seeded data, away from every test task; their configs are
built in memory from the id (`config(item_id)`), deterministically.

    python -m agentgym_nb.envs.web.tasks     # rewrite data/webarena/config_files/*.json and the item lists

The plans are played by the expert (envs/webarena/expert.py).
"""
from __future__ import annotations

import collections
import itertools
import json
import re
import urllib.parse
from dataclasses import dataclass
from pathlib import Path

from . import data, state
from . import forum as forum_site

DATA_DIR = Path(__file__).resolve().parents[2] / "data"
CONFIG_DIR = DATA_DIR / "webarena" / "config_files"
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


# ---------------------------------------------------------------- templates: slot values -> Task
# One function per WebArena intent template. The hand-written tasks and the generated training tasks are both made
# by calling them, so an instance is evaluated and played by the expert the same way whichever list it is in.

def shop_task(template_id, intent, slots, evaluation, plan, login=None) -> Task:
    return Task(template_id, intent, slots, ("shopping",), SHOP, evaluation, tuple(plan), login)


def forum_task(template_id, intent, slots, evaluation, plan, login=None) -> Task:
    return Task(template_id, intent, slots, ("reddit",), FORUM, evaluation, tuple(plan), login)


def price(p: data.Product) -> Task:
    return shop_task(0, "What is the price of the {{product}}?", {"product": p.name},
                     answer_eval(money(p.price), must=[f"{p.price:,.2f}"]), find_product(p) + [Stop(money(p.price))])


def sku(p: data.Product) -> Task:
    return shop_task(1, "What is the SKU of the {{product}}?", {"product": p.name}, answer_eval(p.sku, exact=p.sku),
                     find_product(p) + [Stop(p.sku)])


def review_count(p: data.Product) -> Task:
    n = str(len(p.reviews))
    return shop_task(2, "How many reviews does the {{product}} have?", {"product": p.name}, answer_eval(n, must=[n]),
                     find_product(p) + [Stop(n)])


def cheapest_in(category: str) -> Task:
    p = cheapest(category)
    return shop_task(3, "What is the cheapest product in the {{category}} category?", {"category": category},
                     answer_eval(p.name, must=[p.name]),
                     open_category(category) + [Click("link", "Price: low to high",
                                                      "Sorting by price puts the cheapest first."), Stop(p.name)])


def dearest_in(category: str) -> Task:
    p = dearest(category)
    return shop_task(4, "What is the most expensive product in the {{category}} category?", {"category": category},
                     answer_eval(p.name, must=[p.name]),
                     open_category(category) + [Click("link", "Price: high to low",
                                                      "This sort puts the dearest first."), Stop(p.name)])


def count_under_20(category: str) -> Task:
    n = str(sum(p.price < 20 for p in data.products() if p.category == category))
    return shop_task(5, "How many products in the {{category}} category cost less than $20?", {"category": category},
                     answer_eval(n, must=[n]),
                     open_category(category) + [Click("link", "Price: low to high", "The cheap ones come first."),
                                                Stop(n)])


def latest_reviewer(p: data.Product) -> Task:
    author = p.reviews[0].author
    return shop_task(6, "Who wrote the most recent review of the {{product}}?", {"product": p.name},
                     answer_eval(author, must=[author]), find_product(p) + [Read(author), Stop(author)])


def order_total(o: data.Order) -> Task:
    return shop_task(7, "What was the grand total of my order #{{number}}?", {"number": o.number},
                     answer_eval(money(o.total), must=[f"{o.total:,.2f}"]),
                     my_orders(order_page(o)) + [Read(f"#{o.number}"), Stop(money(o.total))], login=SHOP_LOGIN)


def orders_in_year(year: int) -> Task:
    placed = [o for o in data.orders() if o.date.startswith(str(year))]
    count = str(len(placed))
    return shop_task(8, "How many orders did I place in {{year}}?", {"year": year}, answer_eval(count, must=[count]),
                     my_orders(order_page(placed[0]), f"{year} orders are older.") + [Stop(count)], login=SHOP_LOGIN)


def phone_number() -> Task:
    phone = data.CUSTOMER.phone
    return shop_task(9, "What is the phone number on my account?", {}, answer_eval(phone, must=[phone]),
                     [Click("link", "My Account", "My contact details are there."), Stop(phone)], login=SHOP_LOGIN)


def best_rated_in(category: str) -> Task:
    p = top_rated(category)
    return shop_task(10, "Which product of the {{category}} category has the best rating?", {"category": category},
                     answer_eval(p.name, must=[p.name]),
                     open_category(category) + [Click("link", "Rating", "Sorting by rating puts the best first."),
                                                Stop(p.name)])


def category_by_price(category: str) -> Task:
    return shop_task(11, "Show me the products of the {{category}} category sorted by price from low to high.",
                     {"category": category}, url_eval(f"{SHOP}/category/{data.slug(category)}?sort=price"),
                     open_category(category) + [Click("link", "Price: low to high"), Stop()])


def search_page_two(query: str) -> Task:
    return shop_task(12, "Show me the second page of the search results for '{{query}}'.", {"query": query},
                     url_eval(f"{SHOP}/search?q={urllib.parse.quote_plus(query)}&page=2"),
                     [Type("textbox", "Search products", query), Click("link", "Page 2"), Stop()])


def product_page(p: data.Product) -> Task:
    return shop_task(13, "Open the product page of the {{product}}.", {"product": p.name},
                     url_eval(f"{SHOP}/product/{p.id}"), find_product(p) + [Stop()])


def order_history() -> Task:
    return shop_task(14, "Show me my order history.", {}, url_eval(f"{SHOP}/account/orders"), my_orders() + [Stop()],
                     login=SHOP_LOGIN)


def order_details(o: data.Order) -> Task:
    return shop_task(15, "Open the details of my order #{{number}}.", {"number": o.number},
                     url_eval(f"{SHOP}/orders/{o.number}"),
                     my_orders(order_page(o)) + [Click("link", f"View Order #{o.number}"), Stop()], login=SHOP_LOGIN)


def account_edit_page() -> Task:
    return shop_task(16, "Go to the page where I can edit my account information.", {},
                     url_eval(f"{SHOP}/account/edit"),
                     [Click("link", "My Account"), Click("link", "Edit Account Information"), Stop()], login=SHOP_LOGIN)


def add_to_cart(p: data.Product) -> Task:
    return shop_task(17, "Add the {{product}} to my shopping cart.", {"product": p.name}, html_eval(cart_qty(p, 1)),
                     find_product(p) + [Click("button", "Add to Cart"), Stop()])


def add_units(p: data.Product, qty: int) -> Task:
    return shop_task(18, "Add {{quantity}} units of the {{product}} to my shopping cart.",
                     {"quantity": qty, "product": p.name}, html_eval(cart_qty(p, qty)),
                     find_product(p) + [Replace("textbox", "Qty", str(qty), enter=True), Stop()])


def buy(p: data.Product) -> Task:
    placed = "000000188"  # the first order placed in an episode (checkout numbers them after the seeded 187)
    return shop_task(19, "Buy the {{product}}.", {"product": p.name},
                     html_eval((f"{SHOP}/account/orders", "document.querySelector('#orders li').outerText",
                                {"must_include": [placed, p.name]})),
                     find_product(p) + [Click("button", "Add to Cart"), Click("link", "Proceed to Checkout"),
                                        Click("button", "Place Order"), Stop()], login=SHOP_LOGIN)


def change_phone(phone: str) -> Task:
    return shop_task(20, "Change the phone number on my account to {{phone}}.", {"phone": phone},
                     html_eval((f"{SHOP}/account", "document.querySelector('#phone').outerText",
                                {"exact_match": phone})),
                     [Click("link", "My Account"), Click("link", "Edit Account Information"),
                      Replace("textbox", "Phone Number", phone, enter=True), Stop()], login=SHOP_LOGIN)


def update_address(street: str, city: str, zip_code: str) -> Task:
    return shop_task(21, "Update my shipping address to {{street}}, {{city}} {{zip}}.",
                     {"street": street, "city": city, "zip": zip_code},
                     html_eval((f"{SHOP}/account", "document.querySelector('#address').outerText",
                                {"must_include": [street, city, zip_code]})),
                     [Click("link", "My Account"), Click("link", "Edit Account Information"),
                      Replace("textbox", "Street Address", street), Replace("textbox", "City", city),
                      Replace("textbox", "Zip Code", zip_code, enter=True), Stop()], login=SHOP_LOGIN)


def write_review(p: data.Product, stars: int, title: str, text: str) -> Task:
    return shop_task(22, "Write a {{stars}}-star review of the {{product}} with the summary '{{title}}' and the text "
                     "'{{text}}'.", {"stars": stars, "product": p.name, "title": title, "text": text},
                     html_eval((f"{SHOP}/product/{p.id}", "document.querySelector('#reviews .review').outerText",
                                {"must_include": [title, text, f"{stars} stars by Emma Lopez"]})),
                     find_product(p) + [Click("radio", f"{stars} stars", f"That gives {stars} stars."),
                                        Type("textbox", "Summary", title, enter=False),
                                        Type("textbox", "Review", text, enter=False), Click("button", "Submit Review"),
                                        Stop()], login=SHOP_LOGIN)


def add_cheapest(category: str) -> Task:
    p = cheapest(category)
    return shop_task(23, "Add the cheapest product of the {{category}} category to my shopping cart.",
                     {"category": category}, html_eval(cart_qty(p, 1)),
                     open_category(category) + [Click("link", "Price: low to high"),
                                                Click("link", p.name, "It is the cheapest."),
                                                Click("button", "Add to Cart"), Stop()])


def sign_in_then_status() -> Task:
    o, c = data.orders()[0], data.CUSTOMER
    return shop_task(24, "Sign in to One Stop Market with the email {{email}} and the password {{password}}, then "
                     "tell me the status of my most recent order.", {"email": c.email, "password": c.password},
                     answer_eval(o.status, must=[o.status]),
                     [Click("link", "Sign In"), Type("textbox", "Email", c.email, enter=False),
                      Type("textbox", "Password", c.password), Click("link", "My Orders"), Stop(o.status)])


def who_posted(p: data.Post) -> Task:
    return forum_task(30, "Who posted '{{title}}' on Postmill?", {"title": p.title},
                      answer_eval(p.author, must=[p.author]), search_post(p) + [Stop(p.author)])


def comment_count(p: data.Post) -> Task:
    n = str(len(p.comments))
    return forum_task(31, "How many comments does the post '{{title}}' have?", {"title": p.title},
                      answer_eval(n, must=[n]), search_post(p) + [Stop(n)])


def newest_title(forum: str) -> Task:
    p = newest_post(forum)
    return forum_task(32, "What is the title of the newest post in /f/{{forum}}?", {"forum": forum},
                      answer_eval(p.title, must=[p.title]), open_forum(forum) + [Stop(p.title)])


def top_score(forum: str) -> Task:
    p = top_post(forum)
    return forum_task(33, "What is the score of the highest-scoring post in /f/{{forum}}?", {"forum": forum},
                      answer_eval(str(p.score), must=[str(p.score)]),
                      open_forum(forum) + [Click("link", "Top", "Sorting by score puts the best post first."),
                                           Stop(str(p.score))])


def author_joined(p: data.Post) -> Task:
    joined = data.user(p.author).joined
    return forum_task(34, "When did the author of the post '{{title}}' register on Postmill?", {"title": p.title},
                      answer_eval(joined, must=[joined]),
                      find_post(p) + [Click("link", p.author, "The author's profile shows the registration date."),
                                      Stop(joined)])


def author_post_count(p: data.Post) -> Task:
    n = str(sum(q.author == p.author for q in data.posts()))
    return forum_task(35, "How many posts has the author of '{{title}}' submitted?", {"title": p.title},
                      answer_eval(n, must=[n]),
                      find_post(p) + [Click("link", p.author, "The profile lists the submissions."), Stop(n)])


def user_comment(p: data.Post, c: data.Comment) -> Task:
    return forum_task(36, "What did {{user}} comment on the post '{{title}}'?", {"user": c.author, "title": p.title},
                      answer_eval(c.text, must=[c.text]), find_post(p) + [Read(c.text), Stop(c.text)])


def biggest_forum() -> Task:
    biggest = max(data.forums(), key=lambda f: f.subscribers)
    return forum_task(37, "Which forum on Postmill has the most subscribers?", {},
                      answer_eval(biggest.name, must=[biggest.name]),
                      [Click("link", "Forums", "The forum list shows subscriber counts."), Stop(biggest.name)])


def post_score(p: data.Post) -> Task:
    return forum_task(38, "What is the score of the post '{{title}}'?", {"title": p.title},
                      answer_eval(str(p.score), must=[str(p.score)]), search_post(p) + [Stop(str(p.score))])


def visit_forum(forum: str) -> Task:
    return forum_task(39, "Open the /f/{{forum}} forum.", {"forum": forum}, url_eval(f"{FORUM}/f/{forum}"),
                      open_forum(forum) + [Stop()])


def top_posts(forum: str) -> Task:
    return forum_task(40, "Show me the top posts of /f/{{forum}}.", {"forum": forum},
                      url_eval(f"{FORUM}/f/{forum}?sort=top"), open_forum(forum) + [Click("link", "Top"), Stop()])


def third_page(forum: str) -> Task:
    return forum_task(41, "Show me the third page of /f/{{forum}}.", {"forum": forum},
                      url_eval(f"{FORUM}/f/{forum}?page=3"), open_forum(forum) + [Click("link", "Page 3"), Stop()])


def poster_profile(p: data.Post) -> Task:
    return forum_task(42, "Open the profile page of the user who posted '{{title}}'.", {"title": p.title},
                      url_eval(f"{FORUM}/user/{p.author}"), find_post(p) + [Click("link", p.author), Stop()])


def open_post(p: data.Post) -> Task:
    return forum_task(43, "Open the post '{{title}}'.", {"title": p.title}, url_eval(f"{FORUM}/f/{p.forum}/{p.id}"),
                      find_post(p) + [Stop()])


def search_forum(query: str) -> Task:
    return forum_task(44, "Show me the search results for '{{query}}' on Postmill.", {"query": query},
                      url_eval(f"{FORUM}/search?q={urllib.parse.quote_plus(query)}"),
                      [Type("textbox", "Search query", query), Stop()])


def comment_on(p: data.Post, text: str) -> Task:
    return forum_task(45, "Post a comment '{{text}}' on the post '{{title}}'.", {"text": text, "title": p.title},
                      html_eval((f"{FORUM}/f/{p.forum}/{p.id}", LAST_COMMENT,
                                 {"must_include": [data.DEMO_USER, text]})),
                      find_post(p) + [Type("textbox", "Comment", text, enter=False), Click("button", "Post"), Stop()],
                      login=FORUM_LOGIN)


def vote(p: data.Post, up: bool) -> Task:
    word = "Upvote" if up else "Downvote"
    return forum_task(46 if up else 47, f"{word} the post '{{{{title}}}}'.", {"title": p.title},
                      html_eval((f"{FORUM}/f/{p.forum}/{p.id}", "document.querySelector('#vote').dataset.myVote",
                                 {"exact_match": "1" if up else "-1"})),
                      find_post(p) + [Click("button", word), Stop()], login=FORUM_LOGIN)


def create_post(forum: str, title: str, body: str) -> Task:
    return forum_task(48, "Create a post in /f/{{forum}} titled '{{title}}' with the body '{{body}}'.",
                      {"forum": forum, "title": title, "body": body},
                      html_eval(("func:reddit_get_post_url('__last_url__')",
                                 "document.querySelector('.submission__title').outerText", {"exact_match": title}),
                                ("last", "document.querySelector('.submission__body').outerText",
                                 {"must_include": [body]})),
                      open_forum(forum) + [Click("link", "Submit a new post"),
                                           Type("textbox", "Title", title, enter=False),
                                           Type("textbox", "Body", body, enter=False),
                                           Click("button", "Create submission"), Stop()], login=FORUM_LOGIN)


def change_bio(bio: str) -> Task:
    user = data.DEMO_USER
    return forum_task(49, "Change my Postmill biography to '{{bio}}'.", {"bio": bio},
                      html_eval((f"{FORUM}/user/{user}", "document.querySelector('#bio').outerText",
                                 {"exact_match": bio})),
                      [Click("link", user, "My profile has the biography."), Click("link", "Edit biography"),
                       Replace("textbox", "Biography", bio), Click("button", "Save"), Stop()], login=FORUM_LOGIN)


def subscribe(forum: str) -> Task:
    return forum_task(50, "Subscribe to /f/{{forum}}.", {"forum": forum},
                      html_eval((f"{FORUM}/forums", f"document.querySelector('#forum-{forum} button').outerText",
                                 {"exact_match": "Unsubscribe"})),
                      [Click("link", "Forums"), Click("button", f"Subscribe to {forum}"), Stop()], login=FORUM_LOGIN)


def unsubscribe(forum: str) -> Task:
    return forum_task(51, "Unsubscribe from /f/{{forum}}.", {"forum": forum},
                      html_eval((f"{FORUM}/forums", f"document.querySelector('#forum-{forum} button').outerText",
                                 {"exact_match": "Subscribe"})),
                      [Click("link", "Forums"), Click("button", f"Unsubscribe from {forum}"), Stop()],
                      login=FORUM_LOGIN)


def login_and_upvote(p: data.Post) -> Task:
    user, password = data.DEMO_USER, data.DEMO_PASSWORD
    return forum_task(52, "Log in to Postmill as {{user}} with the password {{password}} and upvote the post "
                      "'{{title}}'.", {"user": user, "password": password, "title": p.title},
                      html_eval((f"{FORUM}/f/{p.forum}/{p.id}", "document.querySelector('#vote').dataset.myVote",
                                 {"exact_match": "1"})),
                      [Click("link", "Log in"), Type("textbox", "Username", user, enter=False),
                       Type("textbox", "Password", password)] + find_post(p) + [Click("button", "Upvote"), Stop()])


def price_comment(p: data.Product, post: data.Post) -> Task:
    """Shop + forum, from the homepage: read a price, post it as a comment."""
    plan = ([Click("link", "One Stop Market", "The price is in the shop.")] + find_product(p)
            + [Goto(SHOWN_HOME, "The forum is listed on the homepage."), Click("link", "Postmill")]
            + find_post(post) + [Type("textbox", "Comment", money(p.price), enter=False), Click("button", "Post"),
                                 Stop()])
    return Task(60, "Find the price of the {{product}} on One Stop Market, then comment on the Postmill post "
                "'{{title}}' with just that price (for example $9.99).", {"product": p.name, "title": post.title},
                ("shopping", "reddit"), HOME,
                html_eval((f"{FORUM}/f/{post.forum}/{post.id}", LAST_COMMENT,
                           {"must_include": [data.DEMO_USER, f"{p.price:,.2f}"]})), tuple(plan), BOTH_LOGIN)


def recommend_best_kitchen() -> Task:
    p = top_rated("Kitchen")
    title = f"Recommendation: {p.name}"
    plan = ([Click("link", "One Stop Market"), Click("link", "Kitchen"),
             Click("link", "Rating", "The best rated product comes first."), Goto(SHOWN_HOME),
             Click("link", "Postmill")]
            + open_forum("cooking") + [Click("link", "Submit a new post"), Type("textbox", "Title", title, enter=False),
                                       Type("textbox", "Body", money(p.price), enter=False),
                                       Click("button", "Create submission"), Stop()])
    return Task(61, "Create a post in /f/cooking titled 'Recommendation: <name>' for the best-rated product of "
                "One Stop Market's Kitchen category, with the product's price (like $9.99) as the body.", {},
                ("shopping", "reddit"), HOME,
                html_eval(("func:reddit_get_post_url('__last_url__')",
                           "document.querySelector('.submission__title').outerText", {"exact_match": title}),
                          ("last", "document.querySelector('.submission__body').outerText",
                           {"must_include": [f"{p.price:,.2f}"]})), tuple(plan), BOTH_LOGIN)


def price_difference(x: data.Product, y: data.Product) -> Task:
    """Look both up (in this order); the intent names the dearer one first."""
    a, b = sorted((x, y), key=lambda q: -q.price)
    difference = money(round(a.price - b.price, 2))
    return Task(62, "How much more does the {{first}} cost than the {{second}} on One Stop Market?",
                {"first": a.name, "second": b.name}, ("shopping",), HOME,
                answer_eval(difference, must=[difference[1:]]),
                tuple([Click("link", "One Stop Market")] + find_product(x) + find_product(y) + [Stop(difference)]))


# ---------------------------------------------------------------- the hand-written tasks (ids 0..81)

def shop_tasks() -> list[Task]:
    product, order = data.product, order_numbered
    return [
        *(price(product(pid)) for pid in (3, 29, 126)),
        *(sku(product(pid)) for pid in (58, 103)),
        *(review_count(product(pid)) for pid in (17, 66)),
        *(cheapest_in(category) for category in ("Kitchen", "Garden", "Toys")),
        *(dearest_in(category) for category in ("Electronics", "Sports")),
        *(count_under_20(category) for category in ("Garden", "Electronics")),
        *(latest_reviewer(product(pid)) for pid in (3, 95)),
        *(order_total(order(number)) for number in ("000000183", "000000175")),
        orders_in_year(2022), phone_number(), best_rated_in("Office"),
        # navigation
        *(category_by_price(category) for category in ("Kitchen", "Sports")),
        search_page_two("steel"),
        *(product_page(product(pid)) for pid in (41, 118)),
        order_history(), order_details(order("000000181")), account_edit_page(),
        # content changing
        *(add_to_cart(product(pid)) for pid in (29, 58, 137)),
        *(add_units(product(pid), qty) for pid, qty in ((17, 3), (95, 2))),
        *(buy(product(pid)) for pid in (41, 126)),
        *(change_phone(phone) for phone in ("555-0199", "555-3710")),
        update_address("42 Harbor Lane", "Oakland", "94607"),
        write_review(product(66), 4, "Handy rake", "Light and sturdy, great for autumn leaves."),
        write_review(product(118), 2, "Tangles easily", "The string knots after every flight."),
        *(add_cheapest(category) for category in ("Office", "Sports")),
        sign_in_then_status(),
    ]


def forum_tasks() -> list[Task]:
    return [
        *(who_posted(commented(k)) for k in (0, 5)),
        *(comment_count(commented(k)) for k in (1, 7)),
        *(newest_title(forum) for forum in ("books", "science")),
        *(top_score(forum) for forum in ("gaming", "travel")),
        author_joined(commented(3)),
        *(author_post_count(commented(k)) for k in (2, 9)),
        user_comment(commented(4), commented(4).comments[-1]),
        biggest_forum(), post_score(commented(6)),
        # navigation
        *(visit_forum(forum) for forum in ("music", "cooking")),
        top_posts("travel"), third_page("gaming"), poster_profile(commented(8)),
        *(open_post(commented(k)) for k in (10, 11)),
        search_forum("worth it"),
        # content changing
        *(comment_on(commented(k), text) for k, text in ((12, "Thanks, this helped me a lot."),
                                                          (13, "I have the same question."),
                                                          (14, "Great post, saving this for later."))),
        *(vote(commented(k), up) for k, up in ((15, True), (16, True), (17, False))),
        create_post("books", "Reading group for June", "Anyone want to read one classic per month?"),
        create_post("cooking", "Best way to store fresh herbs", "Mine always wilt within two days."),
        change_bio("Amateur astronomer and weekend baker."),
        subscribe("science"), unsubscribe("books"), login_and_upvote(commented(18)),
    ]


def cross_site_tasks() -> list[Task]:
    """Shop + forum, from the homepage: the long horizons."""
    return [*(price_comment(data.product(pid), commented(k)) for pid, k in ((95, 19), (137, 20))),
            recommend_best_kitchen(), price_difference(data.product(29), data.product(41))]


TASKS: tuple[Task, ...] = tuple(shop_tasks() + forum_tasks() + cross_site_tasks())


def held_out() -> list[int]:
    """The test tasks: the last instantiation of every hand-written template with two or more."""
    last = {}
    for index, t in enumerate(TASKS):
        last.setdefault(t.template_id, []).append(index)
    return sorted(ids[-1] for ids in last.values() if len(ids) >= 2)


# ---------------------------------------------------------------- generated training tasks (ids from 1000)
# The templates above, instantiated over the seeded data: enough demonstrations and RL items to learn from. Built in
# memory from their id (never written to config_files), in a fixed order that depends on nothing but the code.

FIRST_GENERATED = 1000
PER_TEMPLATE = 30  # at most this many instances of a template, spread evenly over its slot values
PHONES = tuple(f"555-{n:04d}" for n in range(1000, 10000, 450))
STREET_KINDS = ("Street", "Avenue", "Lane", "Road")
CITIES = (("Oakland", "94607"), ("Fresno", "93721"), ("Sacramento", "95814"), ("San Jose", "95113"),
          ("Berkeley", "94704"))


def slot_values() -> list[tuple]:
    """(template, every instantiation the seeded data offers as argument tuples), in a fixed order. Filters keep
    only instances whose answer is unambiguous and visible where the expert's plan reads it."""
    products, posts, orders = data.products(), data.posts(), data.orders()
    categories, forums = list(data.CATEGORIES), [f.name for f in data.forums()]
    alone = [p for p in posts if found_alone(p)]  # these templates read the answer off the search results
    fresh = state.Episode()  # what the demo user is subscribed to before the episode changes anything
    pairs = [(p, products[(p.id + 36) % len(products)]) for p in products]  # p and the product 37 ids later

    def each(values):
        return [(value,) for value in values]

    return [
        (price, each(products)), (sku, each(products)), (review_count, each(products)),
        (cheapest_in, each(categories)), (dearest_in, each(categories)), (count_under_20, each(categories)),
        (latest_reviewer, each(p for p in products if p.reviews)), (order_total, each(orders)),
        (orders_in_year, each(one_page_years())),
        (best_rated_in, each(c for c in categories if one_best_rated(c))),
        (category_by_price, each(categories)), (search_page_two, each(two_page_queries())),
        (product_page, each(products)), (order_details, each(orders)),
        (add_to_cart, each(products)), (add_units, [(p, 2 + p.id % 4) for p in products]), (buy, each(products)),
        (change_phone, each(PHONES)), (update_address, addresses()), (write_review, [review_of(p) for p in products]),
        (add_cheapest, each(categories)),
        (who_posted, each(alone)), (comment_count, each(alone)), (newest_title, each(forums)),
        (top_score, each(forums)), (author_joined, each(posts)), (author_post_count, each(posts)),
        (user_comment, [(p, said[-1]) for p in posts if (said := telling_comments(p))]),
        (post_score, each(alone)), (visit_forum, each(forums)), (top_posts, each(forums)), (third_page, each(forums)),
        (poster_profile, each(posts)), (open_post, each(posts)),
        (search_forum, each(topic for _, topics in data.FORUMS.values() for topic in topics)),
        (comment_on, [(p, data.COMMENT_TEXTS[p.id % len(data.COMMENT_TEXTS)]) for p in posts]),
        (vote, [(p, True) for p in posts]), (vote, [(p, False) for p in posts]),
        (create_post, new_posts()), (change_bio, each(bios())),
        (subscribe, each(f for f in forums if not forum_site.subscribed(fresh, f))),
        (unsubscribe, each(f for f in forums if forum_site.subscribed(fresh, f))),
        (login_and_upvote, each(posts)),
        (price_comment, [(p, data.post(p.id)) for p in products]),
        (price_difference, [(a, b) for a, b in pairs if a.price != b.price]),
    ]


def found_alone(p: data.Post) -> bool:
    """Does searching the forum for the post's title find it alone (the forum's rule: every word in the title)?"""
    words = p.title.lower().split()
    return sum(all(w in q.title.lower() for w in words) for q in data.posts()) == 1


def telling_comments(p: data.Post) -> list[data.Comment]:
    """Comments of `p` whose author and text occur once on it (so "what did X comment" has one answer)."""
    authors = collections.Counter(c.author for c in p.comments)
    texts = collections.Counter(c.text for c in p.comments)
    return [c for c in p.comments if authors[c.author] == 1 and texts[c.text] == 1]


def one_page_years() -> list[int]:
    """Years whose orders all sit on one page of the order history (the plan reads one page)."""
    pages = {}
    for o in data.orders():
        pages.setdefault(int(o.date[:4]), set()).add(order_page(o))
    return sorted(year for year, on in pages.items() if len(on) == 1)


def one_best_rated(category: str) -> bool:
    best, second = sorted((p.rating for p in data.products() if p.category == category), reverse=True)[:2]
    return best > second


def two_page_queries() -> list[str]:
    """Name words whose shop search has a second page (the shop's rule: the word inside the product name)."""
    words = [w.lower() for w in data.ADJECTIVES + data.MATERIALS]
    return [w for w in words if sum(w in p.name.lower() for p in data.products()) > data.PAGE_SIZE]


def addresses() -> list[tuple[str, str, str]]:
    return [(f"{12 + 31 * k} {data.LAST_NAMES[k % len(data.LAST_NAMES)]} {STREET_KINDS[k % len(STREET_KINDS)]}",
             *CITIES[k % len(CITIES)]) for k in range(20)]


def review_of(p: data.Product) -> tuple:
    """(product, stars, summary, text) in the words the seeded reviews use for that many stars."""
    stars = 1 + p.id % 5
    return p, stars, data.REVIEW_TITLES[stars], data.REVIEW_TEXTS[stars][p.id % len(data.REVIEW_TEXTS[stars])]


def new_posts() -> list[tuple[str, str, str]]:
    """(forum, title, body) of posts nobody wrote yet: the forum's title patterns x topics its seeded posts left
    unused, with two of the seeded body sentences."""
    taken, sentences = {p.title for p in data.posts()}, data.BODY_SENTENCES
    out = []
    for forum, (_, topics) in data.FORUMS.items():
        for k, (topic, pattern) in enumerate(itertools.product(topics, data.TITLE_PATTERNS)):
            title = pattern.format(t=topic)
            title = title[0].upper() + title[1:]
            if title not in taken:
                out.append((forum, title, f"{sentences[k % len(sentences)]} {sentences[(k + 1) % len(sentences)]}"))
    return out


def bios() -> list[str]:
    topics = [topic for _, forum_topics in data.FORUMS.values() for topic in forum_topics]
    half = len(topics) // 2  # pair a topic of the first three forums with one of the last three
    return [f"{topics[k].capitalize()} lover and {topics[k + half]} fan." for k in range(half)]


def spread(items: list, n: int, offset: int = 0) -> list:
    """`n` items evenly spaced over `items` (all when there are no more), the first `offset` in: templates over the
    same products or posts (offset = template id) pick different ones, so together they cover more of the data."""
    if len(items) <= n:
        return list(items)
    return [items[(offset + k * len(items) // n) % len(items)] for k in range(n)]


def near_test(test: list[Task]):
    """A predicate: does a task (near-)duplicate one of the `test` tasks? It does when it shares a slot value with a
    test task of its template (a product, post, category, forum, order, text...), or names a product or post any
    test task names (templates about one product or post share most of their steps)."""
    def values(t: Task) -> set[str]:
        return {v for v in t.slots.values() if isinstance(v, str)}  # not ints (stars, quantity, year)

    named = {p.name for p in data.products()} | {p.title for p in data.posts()}
    per_template = {(t.template_id, v) for t in test for v in values(t)}
    entities = {v for t in test for v in values(t) & named}
    return lambda t: any((t.template_id, v) in per_template or v in entities for v in values(t))


def instantiation(t: Task) -> tuple[int, str]:
    return t.template_id, json.dumps(t.slots, sort_keys=True)


def generate() -> tuple[Task, ...]:
    """The generated training tasks: each template's new instantiations (not a hand-written task, not near a test
    task), spread over its slot values, then interleaved template by template so that any prefix of the list (the
    first demonstrations a build takes) covers every template."""
    near = near_test([TASKS[i] for i in held_out()])
    written = {instantiation(t) for t in TASKS}
    rows = []
    for template, arguments in slot_values():
        candidates = [template(*args) for args in arguments]
        new = [t for t in candidates if not near(t) and instantiation(t) not in written]
        rows.append(spread(new, PER_TEMPLATE, offset=new[0].template_id if new else 0))
    return tuple(t for row in itertools.zip_longest(*rows) for t in row if t is not None)


GENERATED: tuple[Task, ...] = generate()


def generated_ids() -> list[int]:
    return list(range(FIRST_GENERATED, FIRST_GENERATED + len(GENERATED)))


def task(item_id: int) -> Task:
    """An offline task by item id: hand-written 0..81, generated from FIRST_GENERATED on."""
    if 0 <= item_id < len(TASKS):
        return TASKS[item_id]
    if 0 <= item_id - FIRST_GENERATED < len(GENERATED):
        return GENERATED[item_id - FIRST_GENERATED]
    raise ValueError(f"webarena: no task config {item_id}: the offline tasks are the {len(TASKS)} config files in "
                     f"{CONFIG_DIR} (ids 0..{len(TASKS) - 1}) and {len(GENERATED)} generated training tasks (ids "
                     f"{FIRST_GENERATED}..{FIRST_GENERATED + len(GENERATED) - 1})")


def config(item_id: int) -> dict:
    """The WebArena config of an offline task; a generated task's is built here, the same way as the files."""
    return task(item_id).config(item_id)


def split() -> dict[str, list[int]]:
    """The item lists: test = held_out(); train = the other hand-written tasks, then every generated one."""
    test = held_out()
    return {"train": [i for i in range(len(TASKS)) if i not in test] + generated_ids(), "test": test}


def write() -> None:
    """Rewrite the hand-written tasks' config files and the item lists."""
    CONFIG_DIR.mkdir(parents=True, exist_ok=True)
    for old in CONFIG_DIR.glob("*.json"):
        old.unlink()
    for index, t in enumerate(TASKS):
        (CONFIG_DIR / f"{index}.json").write_text(json.dumps(t.config(index), indent=2) + "\n")
    for name, ids in split().items():
        (DATA_DIR / "items" / f"webarena_{name}.json").write_text(
            json.dumps([{"item_id": f"webarena_{i}"} for i in ids], indent=1) + "\n")


if __name__ == "__main__":
    write()
    print(f"wrote {len(TASKS)} task configs to {CONFIG_DIR} and the webarena item lists (train: the hand-written "
          f"ones and {len(GENERATED)} generated tasks)")
