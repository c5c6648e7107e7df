"""The offline WebArena tasks by item id: WebArena config files over the embedded sites, each with a scripted
expert plan, made by the intent templates (templates.py).

Hand-written tasks (ids 0..81, in the order shop_tasks, forum_tasks and cross_site_tasks list them) are shipped as
config files; the test split is the last instantiation of each template with two or more. Generated training tasks
(ids from 1000) instantiate the same templates over the seeded data, away from every test task; their configs are
built in memory from the id (`config(item_id)`), deterministically.

    python -m agentgym_nb.envs.web.tasks     # rewrite data/webarena/config_files/*.json and the item lists
"""
from __future__ import annotations

import collections
import itertools
import json
from pathlib import Path

from . import data, state
from . import forum as forum_site
from .plans import Task, commented, order_numbered, order_page
from .templates import (account_edit_page, add_cheapest, add_to_cart, add_units, author_joined, author_post_count,
                        best_rated_in, biggest_forum, buy, category_by_price, change_bio, change_phone,
                        cheapest_in, comment_count, comment_on, count_under_20, create_post, dearest_in,
                        latest_reviewer, login_and_upvote, newest_title, open_post, order_details, order_history,
                        order_total, orders_in_year, phone_number, post_score, poster_profile, price,
                        price_comment, price_difference, product_page, recommend_best_kitchen, review_count,
                        search_forum, search_page_two, sign_in_then_status, sku, subscribe, third_page, top_posts,
                        top_score, unsubscribe, update_address, user_comment, visit_forum, vote, who_posted,
                        write_review)

DATA_DIR = Path(__file__).resolve().parents[2] / "data"
CONFIG_DIR = DATA_DIR / "webarena" / "config_files"


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
