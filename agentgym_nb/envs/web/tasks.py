"""The offline WebArena tasks: WebArena config files over the embedded sites, each with a scripted expert plan.

Three kinds, as in WebArena: information seeking (answer checked by string_match), navigation (the final page
checked by url_match) and content changing (the site's state checked by program_html after the episode). Horizons
range from two actions (search, answer) to fifteen (edit three address fields; read a price in the shop and post it
on the forum). Task ids follow the order in which shop_tasks, forum_tasks and cross_site_tasks list them.

    python -m agentgym_nb.envs.web.tasks     # rewrite data/webarena/config_files/*.json and the item lists

The expert plays a plan in a private env: each step names its target by role and accessible name, the id is read
off the current observation (scrolling down until the target is in view), and the reply is written the way the
instruction asks ("Let's think step-by-step. ... In summary, the next action I will perform is ```...```").
"""
from __future__ import annotations

import json
import re
import threading
from dataclasses import dataclass
from pathlib import Path

from . import data

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


def find_post(p: data.Post) -> list:
    return [Type("textbox", "Search query", p.title), Click("link", p.title, "It is the post I am looking for.")]


def open_category(category: str) -> list:
    return [Click("link", category, f"It lists the products of the {category} category.")]


def open_forum(forum: str) -> list:
    return [Click("link", "Forums", "It lists all forums."), Click("link", f"/f/{forum}", f"It opens /f/{forum}.")]


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


# ---------------------------------------------------------------- templates -> tasks

def shop_tasks() -> list[Task]:
    tasks = []

    def add(template_id, intent, slots, evaluation, plan, sites=("shopping",), start=SHOP, login=None):
        tasks.append(Task(template_id, intent, slots, sites, start, evaluation, tuple(plan), login))

    for pid in (3, 29, 126):  # price
        p = data.product(pid)
        add(0, "What is the price of the {{product}}?", {"product": p.name},
            answer_eval(money(p.price), must=[f"{p.price:,.2f}"]), find_product(p) + [Stop(money(p.price))])
    for pid in (58, 103):  # SKU
        p = data.product(pid)
        add(1, "What is the SKU of the {{product}}?", {"product": p.name}, answer_eval(p.sku, exact=p.sku),
            find_product(p) + [Stop(p.sku)])
    for pid in (17, 66):  # review count
        p = data.product(pid)
        n = str(len(p.reviews))
        add(2, "How many reviews does the {{product}} have?", {"product": p.name}, answer_eval(n, must=[n]),
            find_product(p) + [Stop(n)])
    for category in ("Kitchen", "Garden", "Toys"):  # cheapest
        p = cheapest(category)
        add(3, "What is the cheapest product in the {{category}} category?", {"category": category},
            answer_eval(p.name, must=[p.name]),
            open_category(category) + [Click("link", "Price: low to high", "Sorting by price puts the cheapest first."),
                                       Stop(p.name)])
    for category in ("Electronics", "Sports"):  # most expensive
        p = dearest(category)
        add(4, "What is the most expensive product in the {{category}} category?", {"category": category},
            answer_eval(p.name, must=[p.name]),
            open_category(category) + [Click("link", "Price: high to low", "This sort puts the dearest first."),
                                       Stop(p.name)])
    for category in ("Garden", "Electronics"):  # count under $20
        n = str(sum(p.price < 20 for p in data.products() if p.category == category))
        add(5, "How many products in the {{category}} category cost less than $20?", {"category": category},
            answer_eval(n, must=[n]),
            open_category(category) + [Click("link", "Price: low to high", "The cheap ones come first."), Stop(n)])
    for pid in (3, 95):  # latest review author
        p = data.product(pid)
        author = p.reviews[0].author
        add(6, "Who wrote the most recent review of the {{product}}?", {"product": p.name},
            answer_eval(author, must=[author]), find_product(p) + [Read(author), Stop(author)])
    for number in ("000000183", "000000175"):  # order total
        o = next(o for o in data.orders() if o.number == number)
        page = [] if data.orders().index(o) < data.PAGE_SIZE else [Click("link", "Page 2", "Older orders are there.")]
        add(7, "What was the grand total of my order #{{number}}?", {"number": number},
            answer_eval(money(o.total), must=[f"{o.total:,.2f}"]),
            [Click("link", "My Account"), Click("link", "My Orders")] + page
            + [Read(f"#{number}"), Stop(money(o.total))],
            login=SHOP_LOGIN)
    year_count = str(sum(o.date.startswith("2022") for o in data.orders()))
    add(8, "How many orders did I place in {{year}}?", {"year": 2022}, answer_eval(year_count, must=[year_count]),
        [Click("link", "My Account"), Click("link", "My Orders"), Click("link", "Page 2", "2022 orders are older."),
         Stop(year_count)], login=SHOP_LOGIN)
    add(9, "What is the phone number on my account?", {}, answer_eval(data.CUSTOMER.phone, must=[data.CUSTOMER.phone]),
        [Click("link", "My Account", "My contact details are there."), Stop(data.CUSTOMER.phone)], login=SHOP_LOGIN)
    p = top_rated("Office")
    add(10, "Which product of the {{category}} category has the best rating?", {"category": "Office"},
        answer_eval(p.name, must=[p.name]),
        open_category("Office") + [Click("link", "Rating", "Sorting by rating puts the best first."), Stop(p.name)])

    # navigation
    for category in ("Kitchen", "Sports"):
        add(11, "Show me the products of the {{category}} category sorted by price from low to high.",
            {"category": category}, url_eval(f"{SHOP}/category/{data.slug(category)}?sort=price"),
            open_category(category) + [Click("link", "Price: low to high"), Stop()])
    add(12, "Show me the second page of the search results for '{{query}}'.", {"query": "steel"},
        url_eval(f"{SHOP}/search?q=steel&page=2"),
        [Type("textbox", "Search products", "steel"), Click("link", "Page 2"), Stop()])
    for pid in (41, 118):
        p = data.product(pid)
        add(13, "Open the product page of the {{product}}.", {"product": p.name}, url_eval(f"{SHOP}/product/{p.id}"),
            find_product(p) + [Stop()])
    add(14, "Show me my order history.", {}, url_eval(f"{SHOP}/account/orders"),
        [Click("link", "My Account"), Click("link", "My Orders"), Stop()], login=SHOP_LOGIN)
    add(15, "Open the details of my order #{{number}}.", {"number": "000000181"}, url_eval(f"{SHOP}/orders/000000181"),
        [Click("link", "My Account"), Click("link", "My Orders"), Click("link", "View Order #000000181"), Stop()],
        login=SHOP_LOGIN)
    add(16, "Go to the page where I can edit my account information.", {}, url_eval(f"{SHOP}/account/edit"),
        [Click("link", "My Account"), Click("link", "Edit Account Information"), Stop()], login=SHOP_LOGIN)

    # content changing
    for pid in (29, 58, 137):
        p = data.product(pid)
        add(17, "Add the {{product}} to my shopping cart.", {"product": p.name}, html_eval(cart_qty(p, 1)),
            find_product(p) + [Click("button", "Add to Cart"), Stop()])
    for pid, qty in ((17, 3), (95, 2)):
        p = data.product(pid)
        add(18, "Add {{quantity}} units of the {{product}} to my shopping cart.", {"quantity": qty, "product": p.name},
            html_eval(cart_qty(p, qty)), find_product(p) + [Replace("textbox", "Qty", str(qty), enter=True), Stop()])
    for pid in (41, 126):
        p = data.product(pid)
        placed = "000000188"
        add(19, "Buy the {{product}}.", {"product": p.name},
            html_eval((f"{SHOP}/account/orders", "document.querySelector('#orders li').outerText",
                       {"must_include": [placed, p.name]})),
            find_product(p) + [Click("button", "Add to Cart"), Click("link", "Proceed to Checkout"),
                               Click("button", "Place Order"), Stop()], login=SHOP_LOGIN)
    for phone in ("555-0199", "555-3710"):
        add(20, "Change the phone number on my account to {{phone}}.", {"phone": phone},
            html_eval((f"{SHOP}/account", "document.querySelector('#phone').outerText", {"exact_match": phone})),
            [Click("link", "My Account"), Click("link", "Edit Account Information"),
             Replace("textbox", "Phone Number", phone, enter=True), Stop()], login=SHOP_LOGIN)
    street, city, zip_code = "42 Harbor Lane", "Oakland", "94607"
    add(21, "Update my shipping address to {{street}}, {{city}} {{zip}}.",
        {"street": street, "city": city, "zip": zip_code},
        html_eval((f"{SHOP}/account", "document.querySelector('#address').outerText",
                   {"must_include": [street, city, zip_code]})),
        [Click("link", "My Account"), Click("link", "Edit Account Information"),
         Replace("textbox", "Street Address", street), Replace("textbox", "City", city),
         Replace("textbox", "Zip Code", zip_code, enter=True), Stop()],
        login=SHOP_LOGIN)
    for pid, stars, title, text in ((66, 4, "Handy rake", "Light and sturdy, great for autumn leaves."),
                                    (118, 2, "Tangles easily", "The string knots after every flight.")):
        p = data.product(pid)
        add(22, "Write a {{stars}}-star review of the {{product}} with the summary '{{title}}' and the text "
            "'{{text}}'.",
            {"stars": stars, "product": p.name, "title": title, "text": text},
            html_eval((f"{SHOP}/product/{p.id}", "document.querySelector('#reviews .review').outerText",
                       {"must_include": [title, text, f"{stars} stars by Emma Lopez"]})),
            find_product(p) + [Click("radio", f"{stars} stars", f"That gives {stars} stars."),
                               Type("textbox", "Summary", title, enter=False),
                               Type("textbox", "Review", text, enter=False), Click("button", "Submit Review"), Stop()],
            login=SHOP_LOGIN)
    for category in ("Office", "Sports"):
        p = cheapest(category)
        add(23, "Add the cheapest product of the {{category}} category to my shopping cart.", {"category": category},
            html_eval(cart_qty(p, 1)),
            open_category(category) + [Click("link", "Price: low to high"),
                                       Click("link", p.name, "It is the cheapest."), Click("button", "Add to Cart"),
                                       Stop()])
    o = data.orders()[0]
    add(24, "Sign in to One Stop Market with the email {{email}} and the password {{password}}, then tell me the "
        "status of my most recent order.", {"email": data.CUSTOMER.email, "password": data.CUSTOMER.password},
        answer_eval(o.status, must=[o.status]),
        [Click("link", "Sign In"), Type("textbox", "Email", data.CUSTOMER.email, enter=False),
         Type("textbox", "Password", data.CUSTOMER.password), Click("link", "My Orders"), Stop(o.status)])
    return tasks


def forum_tasks() -> list[Task]:
    tasks = []

    def add(template_id, intent, slots, evaluation, plan, sites=("reddit",), start=FORUM, login=None):
        tasks.append(Task(template_id, intent, slots, sites, start, evaluation, tuple(plan), login))

    for k in (0, 5):  # who posted
        p = commented(k)
        add(30, "Who posted '{{title}}' on Postmill?", {"title": p.title}, answer_eval(p.author, must=[p.author]),
            [Type("textbox", "Search query", p.title), Stop(p.author)])
    for k in (1, 7):  # comment count
        p = commented(k)
        n = str(len(p.comments))
        add(31, "How many comments does the post '{{title}}' have?", {"title": p.title}, answer_eval(n, must=[n]),
            [Type("textbox", "Search query", p.title), Stop(n)])
    for forum in ("books", "science"):
        p = newest_post(forum)
        add(32, "What is the title of the newest post in /f/{{forum}}?", {"forum": forum},
            answer_eval(p.title, must=[p.title]), open_forum(forum) + [Stop(p.title)])
    for forum in ("gaming", "travel"):
        p = top_post(forum)
        add(33, "What is the score of the highest-scoring post in /f/{{forum}}?", {"forum": forum},
            answer_eval(str(p.score), must=[str(p.score)]),
            open_forum(forum) + [Click("link", "Top", "Sorting by score puts the best post first."),
                                 Stop(str(p.score))])
    p = commented(3)
    u = data.user(p.author)
    add(34, "When did the author of the post '{{title}}' register on Postmill?", {"title": p.title},
        answer_eval(u.joined, must=[u.joined]),
        find_post(p) + [Click("link", p.author, "The author's profile shows the registration date."), Stop(u.joined)])
    for k in (2, 9):
        p = commented(k)
        n = str(sum(q.author == p.author for q in data.posts()))
        add(35, "How many posts has the author of '{{title}}' submitted?", {"title": p.title}, answer_eval(n, must=[n]),
            find_post(p) + [Click("link", p.author, "The profile lists the submissions."), Stop(n)])
    p = commented(4)
    c = p.comments[-1]
    add(36, "What did {{user}} comment on the post '{{title}}'?", {"user": c.author, "title": p.title},
        answer_eval(c.text, must=[c.text]), find_post(p) + [Read(c.text), Stop(c.text)])
    biggest = max(data.forums(), key=lambda f: f.subscribers)
    add(37, "Which forum on Postmill has the most subscribers?", {}, answer_eval(biggest.name, must=[biggest.name]),
        [Click("link", "Forums", "The forum list shows subscriber counts."), Stop(biggest.name)])
    p = commented(6)
    add(38, "What is the score of the post '{{title}}'?", {"title": p.title},
        answer_eval(str(p.score), must=[str(p.score)]), [Type("textbox", "Search query", p.title), Stop(str(p.score))])

    # navigation
    for forum in ("music", "cooking"):
        add(39, "Open the /f/{{forum}} forum.", {"forum": forum}, url_eval(f"{FORUM}/f/{forum}"),
            open_forum(forum) + [Stop()])
    add(40, "Show me the top posts of /f/{{forum}}.", {"forum": "travel"}, url_eval(f"{FORUM}/f/travel?sort=top"),
        open_forum("travel") + [Click("link", "Top"), Stop()])
    add(41, "Show me the third page of /f/{{forum}}.", {"forum": "gaming"}, url_eval(f"{FORUM}/f/gaming?page=3"),
        open_forum("gaming") + [Click("link", "Page 3"), Stop()])
    p = commented(8)
    add(42, "Open the profile page of the user who posted '{{title}}'.", {"title": p.title},
        url_eval(f"{FORUM}/user/{p.author}"), find_post(p) + [Click("link", p.author), Stop()])
    for k in (10, 11):
        p = commented(k)
        add(43, "Open the post '{{title}}'.", {"title": p.title}, url_eval(f"{FORUM}/f/{p.forum}/{p.id}"),
            find_post(p) + [Stop()])
    add(44, "Show me the search results for '{{query}}' on Postmill.", {"query": "worth it"},
        url_eval(f"{FORUM}/search?q=worth+it"), [Type("textbox", "Search query", "worth it"), Stop()])

    # content changing
    user = data.DEMO_USER
    for k, text in ((12, "Thanks, this helped me a lot."), (13, "I have the same question."),
                    (14, "Great post, saving this for later.")):
        p = commented(k)
        add(45, "Post a comment '{{text}}' on the post '{{title}}'.", {"text": text, "title": p.title},
            html_eval((f"{FORUM}/f/{p.forum}/{p.id}", LAST_COMMENT, {"must_include": [user, text]})),
            find_post(p) + [Type("textbox", "Comment", text, enter=False), Click("button", "Post"), Stop()],
            login=FORUM_LOGIN)
    for k, value, word in ((15, "1", "Upvote"), (16, "1", "Upvote"), (17, "-1", "Downvote")):
        p = commented(k)
        add(46 if value == "1" else 47, f"{word} the post '{{{{title}}}}'.", {"title": p.title},
            html_eval((f"{FORUM}/f/{p.forum}/{p.id}", "document.querySelector('#vote').dataset.myVote",
                       {"exact_match": value})),
            find_post(p) + [Click("button", word), Stop()], login=FORUM_LOGIN)
    for forum, title, body in (("books", "Reading group for June", "Anyone want to read one classic per month?"),
                               ("cooking", "Best way to store fresh herbs", "Mine always wilt within two days.")):
        add(48, "Create a post in /f/{{forum}} titled '{{title}}' with the body '{{body}}'.",
            {"forum": forum, "title": title, "body": body},
            html_eval(("func:reddit_get_post_url('__last_url__')",
                       "document.querySelector('.submission__title').outerText", {"exact_match": title}),
                      ("last", "document.querySelector('.submission__body').outerText", {"must_include": [body]})),
            open_forum(forum) + [Click("link", "Submit a new post"), Type("textbox", "Title", title, enter=False),
                                 Type("textbox", "Body", body, enter=False), Click("button", "Create submission"),
                                 Stop()], login=FORUM_LOGIN)
    bio = "Amateur astronomer and weekend baker."
    add(49, "Change my Postmill biography to '{{bio}}'.", {"bio": bio},
        html_eval((f"{FORUM}/user/{user}", "document.querySelector('#bio').outerText", {"exact_match": bio})),
        [Click("link", user, "My profile has the biography."), Click("link", "Edit biography"),
         Replace("textbox", "Biography", bio), Click("button", "Save"), Stop()], login=FORUM_LOGIN)
    add(50, "Subscribe to /f/{{forum}}.", {"forum": "science"},
        html_eval((f"{FORUM}/forums", "document.querySelector('#forum-science button').outerText",
                   {"exact_match": "Unsubscribe"})),
        [Click("link", "Forums"), Click("button", "Subscribe to science"), Stop()], login=FORUM_LOGIN)
    add(51, "Unsubscribe from /f/{{forum}}.", {"forum": "books"},
        html_eval((f"{FORUM}/forums", "document.querySelector('#forum-books button').outerText",
                   {"exact_match": "Subscribe"})),
        [Click("link", "Forums"), Click("button", "Unsubscribe from books"), Stop()], login=FORUM_LOGIN)
    p = commented(18)
    add(52, "Log in to Postmill as {{user}} with the password {{password}} and upvote the post '{{title}}'.",
        {"user": user, "password": data.DEMO_PASSWORD, "title": p.title},
        html_eval((f"{FORUM}/f/{p.forum}/{p.id}", "document.querySelector('#vote').dataset.myVote",
                   {"exact_match": "1"})),
        [Click("link", "Log in"), Type("textbox", "Username", user, enter=False),
         Type("textbox", "Password", data.DEMO_PASSWORD)] + find_post(p) + [Click("button", "Upvote"), Stop()])
    return tasks


def cross_site_tasks() -> list[Task]:
    """Shop + forum, from the homepage: the long horizons."""
    tasks = []
    user = data.DEMO_USER
    for pid, k in ((95, 19), (137, 20)):
        p, post = data.product(pid), commented(k)
        plan = ([Click("link", "One Stop Market", "The price is in the shop.")] + find_product(p)
                + [Goto(SHOWN_HOME, "The forum is listed on the homepage."), Click("link", "Postmill")]
                + find_post(post) + [Type("textbox", "Comment", money(p.price), enter=False), Click("button", "Post"),
                                     Stop()])
        tasks.append(Task(60, "Find the price of the {{product}} on One Stop Market, then comment on the Postmill "
                          "post '{{title}}' with just that price (for example $9.99).",
                          {"product": p.name, "title": post.title}, ("shopping", "reddit"), HOME,
                          html_eval((f"{FORUM}/f/{post.forum}/{post.id}", LAST_COMMENT,
                                     {"must_include": [user, f"{p.price:,.2f}"]})), tuple(plan), BOTH_LOGIN))
    p = top_rated("Kitchen")
    title = f"Recommendation: {p.name}"
    plan = ([Click("link", "One Stop Market"), Click("link", "Kitchen"),
             Click("link", "Rating", "The best rated product comes first."), Goto(SHOWN_HOME),
             Click("link", "Postmill")]
            + open_forum("cooking") + [Click("link", "Submit a new post"), Type("textbox", "Title", title, enter=False),
                                       Type("textbox", "Body", money(p.price), enter=False),
                                       Click("button", "Create submission"), Stop()])
    tasks.append(Task(61, "Create a post in /f/cooking titled 'Recommendation: <name>' for the best-rated product of "
                      "One Stop Market's Kitchen category, with the product's price (like $9.99) as the body.", {},
                      ("shopping", "reddit"), HOME,
                      html_eval(("func:reddit_get_post_url('__last_url__')",
                                 "document.querySelector('.submission__title').outerText", {"exact_match": title}),
                                ("last", "document.querySelector('.submission__body').outerText",
                                 {"must_include": [f"{p.price:,.2f}"]})), tuple(plan), BOTH_LOGIN))
    a, b = sorted((data.product(29), data.product(41)), key=lambda q: -q.price)
    difference = money(round(a.price - b.price, 2))
    tasks.append(Task(62, "How much more does the {{first}} cost than the {{second}} on One Stop Market?",
                      {"first": a.name, "second": b.name}, ("shopping",), HOME,
                      answer_eval(difference, must=[difference[1:]]),
                      tuple([Click("link", "One Stop Market")] + find_product(data.product(29))
                            + find_product(data.product(41)) + [Stop(difference)])))
    return tasks


TASKS: tuple[Task, ...] = tuple(shop_tasks() + forum_tasks() + cross_site_tasks())


def split() -> dict[str, list[int]]:
    """Test = the last instantiation of every template with two or more; train = the rest (disjoint by task)."""
    last = {}
    for index, task in enumerate(TASKS):
        last.setdefault(task.template_id, []).append(index)
    test = sorted(ids[-1] for ids in last.values() if len(ids) >= 2)
    return {"train": [i for i in range(len(TASKS)) if i not in test], "test": test}


def write() -> None:
    """Rewrite the config files and the item lists from TASKS."""
    CONFIG_DIR.mkdir(parents=True, exist_ok=True)
    for old in CONFIG_DIR.glob("*.json"):
        old.unlink()
    for index, task in enumerate(TASKS):
        (CONFIG_DIR / f"{index}.json").write_text(json.dumps(task.config(index), indent=2) + "\n")
    for name, ids in split().items():
        (DATA_DIR / "items" / f"webarena_{name}.json").write_text(
            json.dumps([{"item_id": f"webarena_{i}"} for i in ids], indent=1) + "\n")


# ---------------------------------------------------------------- the expert

LINE = re.compile(r"^\t*\[(\d+)\] (\S+) ('(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\")")
MAX_SCROLLS = 8


def element_id(tree: str, role: str, name: str) -> str | None:
    """The id of the first `[id] role 'name'` line in an observation's tree, None if not in view."""
    import ast

    for line in tree.splitlines():
        match = LINE.match(line)
        if match and match.group(2) == role and ast.literal_eval(match.group(3)) == name:
            return match.group(1)
    return None


def reply(thought: str, action: str) -> str:
    return f"Let's think step-by-step. {thought} In summary, the next action I will perform is ```{action}```"


_expert_env = None
_expert_lock = threading.Lock()
_solved: dict[int, list[str]] = {}  # the sites and ids are deterministic: a task's replies never change


def expert_replies(item_id: int) -> list[str]:
    """Play TASKS[item_id]'s plan in the expert's private offline env; the replies, checked to earn reward 1.
    The env (one browser context) is kept for the next call (a reset is much cheaper than a new context), and
    each task's replies are remembered for the process."""
    global _expert_env
    from ..webarena import WebArena

    if not 0 <= item_id < len(TASKS):
        raise ValueError(f"webarena: the offline tasks are 0..{len(TASKS) - 1}, got {item_id}")
    with _expert_lock:
        if item_id not in _solved:
            if _expert_env is None:
                _expert_env = WebArena()
            try:
                _solved[item_id] = play(_expert_env, item_id)
            except BaseException:
                _expert_env.close()
                _expert_env = None
                raise
        return list(_solved[item_id])


def play(env, item_id: int) -> list[str]:
    """Reset `env` (an offline WebArena env) to the task and follow its plan, reading ids off each observation;
    the replies sent, checked to earn reward 1 (RuntimeError otherwise)."""
    replies, last = [], None
    env.reset(item_id)

    def send(thought: str, action: str):
        nonlocal last
        replies.append(reply(thought, action))
        last = env.step(replies[-1])

    def find(role: str, name: str) -> str:
        for _ in range(MAX_SCROLLS):
            found = element_id(env.tree, role, name)
            if found is not None:
                return found
            send(f"I need the {role} '{name}', which is not in view yet, so I scroll down.", "scroll [down]")
        raise RuntimeError(f"webarena expert: no {role} {name!r} on {env.url} (task {item_id})")

    for step in TASKS[item_id].plan:
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
    if last is None or not last.done or not env.success(last.reward):
        raise RuntimeError(f"webarena expert: the plan of task {item_id} did not earn reward 1 "
                           f"(reward {last.reward if last else None}, at {env.url})")
    return replies


if __name__ == "__main__":
    write()
    print(f"wrote {len(TASKS)} task configs to {CONFIG_DIR} and the webarena item lists")
