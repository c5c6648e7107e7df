"""The seeded, read-only content of the offline websites: a shop's catalogue, reviews and one customer's order
history; a forum's communities, users, posts and comments. Everything is drawn from fixed word lists with fixed
seeds, so every build of the package serves byte-identical pages (tasks and their answers depend on it).

What changes during an episode (cart, new orders, comments, votes, profile edits) lives in `state.py`, never here.
"""
from __future__ import annotations

import datetime
import random
import re
from dataclasses import dataclass, field
from functools import lru_cache

PAGE_SIZE = 10  # listing rows per page, on both sites


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


# ---------------------------------------------------------------- shop

@dataclass(frozen=True)
class Review:
    author: str
    rating: int  # 1..5 stars
    title: str
    text: str
    date: str


@dataclass(frozen=True)
class Product:
    id: int
    name: str
    category: str
    price: float
    sku: str
    description: str
    reviews: tuple[Review, ...]

    @property
    def rating(self) -> float:
        """Mean review stars, one decimal; 0.0 without reviews."""
        return round(sum(r.rating for r in self.reviews) / len(self.reviews), 1) if self.reviews else 0.0


@dataclass(frozen=True)
class Order:
    number: str  # "000000142"
    date: str
    status: str
    items: tuple[tuple[int, int], ...]  # (product id, quantity)
    total: float


@dataclass(frozen=True)
class Customer:
    email: str
    password: str
    first_name: str
    last_name: str
    phone: str
    street: str
    city: str
    zip_code: str


CATEGORIES = {
    "Kitchen": ["Mug", "Kettle", "Skillet", "Cutting Board", "Teapot", "Colander", "Spatula", "Salad Bowl"],
    "Electronics": ["Headphones", "Charger", "Speaker", "Webcam", "Keyboard", "Mouse", "Power Bank", "Desk Lamp"],
    "Garden": ["Planter", "Watering Can", "Hose Nozzle", "Pruning Shears", "Bird Feeder", "Trowel", "Rake",
               "Seed Tray"],
    "Office": ["Notebook", "Stapler", "Desk Organizer", "Pen Set", "Binder", "Letter Tray", "Whiteboard",
               "Paper Shredder"],
    "Toys": ["Puzzle", "Kite", "Building Blocks", "Plush Bear", "Yo-Yo", "Board Game", "Toy Truck", "Jump Rope"],
    "Sports": ["Yoga Mat", "Water Bottle", "Dumbbell", "Tennis Racket", "Jump Box", "Resistance Band",
               "Gym Bag", "Foam Roller"],
}
ADJECTIVES = ["Classic", "Compact", "Deluxe", "Rustic", "Modern", "Sturdy", "Vintage", "Premium", "Foldable",
              "Eco"]
MATERIALS = ["Ceramic", "Bamboo", "Steel", "Walnut", "Copper", "Linen", "Granite", "Cobalt", "Ivory", "Olive"]
PER_CATEGORY = 24
FIRST_NAMES = ["Ava", "Liam", "Noah", "Mia", "Omar", "Lena", "Ravi", "Sofia", "Hugo", "Ines", "Kenji", "Maya",
               "Tariq", "Elena", "Jonas", "Priya", "Felix", "Nora", "Mateo", "Yara"]
LAST_NAMES = ["Smith", "Garcia", "Chen", "Novak", "Okafor", "Berg", "Rossi", "Silva", "Kim", "Haddad", "Meyer",
              "Dubois"]
REVIEW_TITLES = {5: "Love it", 4: "Very good", 3: "It is okay", 2: "Disappointing", 1: "Do not buy"}
REVIEW_TEXTS = {
    5: ["Exactly what I needed, great quality.", "Works perfectly and looks great.", "Would buy again."],
    4: ["Good value for the price.", "Solid product, minor flaws.", "Does the job well."],
    3: ["Average, nothing special.", "Fine for occasional use.", "Mixed feelings about this one."],
    2: ["Broke after a few weeks.", "Smaller than expected.", "Not worth the money."],
    1: ["Arrived damaged.", "Stopped working on day one.", "Very poor quality."],
}
CUSTOMER = Customer("emma.lopez@gmail.com", "Password.123", "Emma", "Lopez", "555-0142",
                    "101 S San Mateo Dr", "San Mateo", "94010")
ORDER_STATUSES = ["Complete", "Complete", "Complete", "Canceled", "Pending"]


def _day(start: datetime.date, offset: int) -> str:
    return (start + datetime.timedelta(days=offset)).isoformat()


@lru_cache(maxsize=1)
def products() -> tuple[Product, ...]:
    """144 products, 24 per category, with distinct prices within a category (so "cheapest" has one answer)."""
    rng = random.Random(7)
    out, names = [], set()
    for category, nouns in CATEGORIES.items():
        prices = set()
        while len(prices) < PER_CATEGORY:
            prices.add(round(rng.randint(3, 189) + rng.choice([0.49, 0.95, 0.99]), 2))
        prices = sorted(prices)
        rng.shuffle(prices)
        for k in range(PER_CATEGORY):
            while True:
                adjective, material, noun = rng.choice(ADJECTIVES), rng.choice(MATERIALS), rng.choice(nouns)
                name = f"{adjective} {material} {noun}"
                if name not in names:
                    names.add(name)
                    break
            pid = len(out) + 1
            reviews = []
            for r in range(rng.choice([0, 1, 2, 2, 3, 3, 4, 5])):
                stars = rng.choice([5, 5, 4, 4, 4, 3, 2, 1])
                author = f"{rng.choice(FIRST_NAMES)} {rng.choice(LAST_NAMES)}"
                reviews.append(Review(author, stars, REVIEW_TITLES[stars], rng.choice(REVIEW_TEXTS[stars]),
                                      _day(datetime.date(2023, 1, 5), pid * 3 + r * 17)))
            reviews.sort(key=lambda review: review.date, reverse=True)  # newest first, as the page shows them
            description = (f"A {adjective.lower()} {noun.lower()} with a {material.lower()} finish. "
                           f"Part of our {category.lower()} range.")
            out.append(Product(pid, name, category, prices[k], f"OSM-{1000 + pid * 7}", description, tuple(reviews)))
    return tuple(out)


def product(pid: int) -> Product | None:
    catalogue = products()
    return catalogue[pid - 1] if 1 <= pid <= len(catalogue) else None


def product_named(name: str) -> Product:
    for p in products():
        if p.name == name:
            return p
    raise KeyError(f"no product named {name!r}")


@lru_cache(maxsize=1)
def orders() -> tuple[Order, ...]:
    """Emma Lopez's 18 past orders, newest first (the order history page lists them so)."""
    rng = random.Random(11)
    catalogue = products()
    out = []
    for k in range(18):
        items = tuple(sorted({(rng.randint(1, len(catalogue)), rng.randint(1, 3)) for _ in range(rng.randint(1, 3))}))
        seen, unique = set(), []
        for pid, qty in items:
            if pid not in seen:
                seen.add(pid)
                unique.append((pid, qty))
        total = round(sum(catalogue[pid - 1].price * qty for pid, qty in unique) + 5.0, 2)  # flat shipping
        out.append(Order(f"{170 + k:09d}", _day(datetime.date(2022, 2, 1), k * 41 + rng.randint(0, 20)),
                         rng.choice(ORDER_STATUSES), tuple(unique), total))
    return tuple(reversed(out))


# ---------------------------------------------------------------- forum

@dataclass(frozen=True)
class Comment:
    id: int
    author: str
    text: str
    score: int
    date: str


@dataclass(frozen=True)
class Post:
    id: int
    forum: str
    title: str
    author: str
    body: str
    score: int
    date: str  # "2023-04-02 14:00"
    comments: tuple[Comment, ...] = field(default=())


@dataclass(frozen=True)
class Forum:
    name: str
    description: str
    subscribers: int


@dataclass(frozen=True)
class User:
    name: str
    joined: str
    bio: str


FORUMS = {
    "books": ("Books and reading", ["novel", "poetry collection", "biography", "short story", "graphic novel",
                                    "mystery", "fantasy series"]),
    "gaming": ("Video and tabletop games", ["console", "strategy game", "indie game", "board game", "racing game",
                                            "puzzle game", "controller"]),
    "cooking": ("Recipes and kitchen talk", ["sourdough", "curry", "pasta sauce", "dumpling", "omelette",
                                             "pancake", "soup"]),
    "music": ("Listening, playing and making music", ["guitar", "vinyl record", "synthesizer", "jazz album",
                                                      "concert", "playlist", "piano"]),
    "science": ("Science news and questions", ["telescope", "black hole", "vaccine", "volcano", "octopus",
                                               "solar panel", "fossil"]),
    "travel": ("Trips, tips and destinations", ["train route", "hostel", "island", "mountain hike", "road trip",
                                                "city break", "museum"]),
}
TITLE_PATTERNS = [
    "What is the best {t} you have tried?", "Is a {t} worth it for beginners?", "My first {t}: a review",
    "Looking for {t} recommendations", "Unpopular opinion about the {t}", "How do you pick a {t}?",
    "The {t} that changed my mind", "Share your favourite {t}", "A question about my {t}",
    "Why is every {t} so expensive?",
]
BODY_SENTENCES = ["I have been thinking about this for a while.", "Curious what everyone here thinks.",
                  "Happy to hear any advice.", "Long time reader, first post.", "Thanks in advance!",
                  "Details in the comments if anyone wants them."]
COMMENT_TEXTS = ["Totally agree with this.", "I had the opposite experience.", "Great question, following.",
                 "Try the one from last year, it is much better.", "This is the way.", "Thanks for sharing!",
                 "I would not recommend it.", "Depends on your budget honestly.", "Came here to say the same.",
                 "Could you post an update later?"]
USER_PARTS = (["quiet", "lucky", "clever", "brave", "sunny", "rapid", "cosmic", "gentle"],
              ["otter", "falcon", "maple", "pixel", "comet", "badger", "willow", "harbor"])
DEMO_USER, DEMO_PASSWORD = "MarvelsGrantMan136", "test1234"
POSTS_PER_FORUM = 25


@lru_cache(maxsize=1)
def users() -> tuple[User, ...]:
    rng = random.Random(5)
    names = sorted({f"{a}_{b}{rng.randint(1, 99)}" for a in USER_PARTS[0] for b in USER_PARTS[1]})
    rng.shuffle(names)
    chosen = [DEMO_USER] + sorted(names[:23])
    return tuple(User(name, _day(datetime.date(2019, 3, 1), rng.randint(0, 1200)),
                      f"Hi, I am {name}. I mostly read and sometimes post.") for name in chosen)


def user(name: str) -> User | None:
    return next((u for u in users() if u.name == name), None)


@lru_cache(maxsize=1)
def forums() -> tuple[Forum, ...]:
    rng = random.Random(3)
    return tuple(Forum(name, description, rng.randint(40, 900) * 10) for name, (description, _) in FORUMS.items())


@lru_cache(maxsize=1)
def posts() -> tuple[Post, ...]:
    """25 posts per forum, ids 1..150; dates increase with the id, so "newest" is the largest id."""
    rng = random.Random(9)
    people = [u.name for u in users()]
    out, comment_id = [], 0
    plan = [(forum, rng.sample(range(len(TITLE_PATTERNS) * len(topics)), POSTS_PER_FORUM))
            for forum, (_, topics) in FORUMS.items()]
    slots = [(forum, k) for forum, picks in plan for k in picks]
    rng.shuffle(slots)  # interleave forums in time
    start = datetime.datetime(2023, 1, 2, 8, 0)
    for index, (forum, pick) in enumerate(slots):
        topics = FORUMS[forum][1]
        pattern, topic = TITLE_PATTERNS[pick % len(TITLE_PATTERNS)], topics[pick // len(TITLE_PATTERNS)]
        title = pattern.format(t=topic)
        title = title[0].upper() + title[1:]
        when = start + datetime.timedelta(hours=index * 7 + rng.randint(0, 5))
        comments = []
        for c in range(rng.choice([0, 1, 2, 3, 3, 4, 5, 6])):
            comment_id += 1
            said = (when + datetime.timedelta(hours=c + 1)).strftime("%Y-%m-%d %H:%M")
            comments.append(Comment(comment_id, rng.choice(people[1:]), rng.choice(COMMENT_TEXTS), rng.randint(-2, 40),
                                    said))
        body = " ".join(rng.sample(BODY_SENTENCES, 2))
        out.append(Post(index + 1, forum, title, rng.choice(people[1:]), body, rng.randint(-3, 250),
                        when.strftime("%Y-%m-%d %H:%M"), tuple(comments)))
    return tuple(out)


def post(pid: int) -> Post | None:
    every = posts()
    return every[pid - 1] if 1 <= pid <= len(every) else None


def post_titled(title: str) -> Post:
    for p in posts():
        if p.title == title:
            return p
    raise KeyError(f"no post titled {title!r}")
