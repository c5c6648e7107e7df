"""What an episode changes on the offline sites, kept apart per episode.

The browser carries the episode's token in the `agentgym_episode` cookie (cookies ignore ports, so one cookie on
127.0.0.1 reaches every site). Each token owns a fresh `Episode`: the shop's cart, new orders, new reviews and
profile edits, the forum's new posts, comments, votes, subscriptions and biography edits, and who is logged in on
each site. The seeded content in `data.py` is never modified, so one episode cannot leak into the next.
Requests without a known token share one "public" episode (a person browsing by hand).
"""
from __future__ import annotations

import secrets
import threading
from dataclasses import dataclass, field

from . import data

COOKIE = "agentgym_episode"


@dataclass
class NewOrder:
    number: str
    date: str
    items: tuple[tuple[int, int], ...]
    total: float
    ship_to: str
    status: str = "Pending"


@dataclass
class NewReview:
    author: str
    rating: int
    title: str
    text: str
    date: str


@dataclass
class NewComment:
    id: int
    author: str
    text: str
    date: str
    score: int = 1


@dataclass
class NewPost:
    id: int
    forum: str
    title: str
    author: str
    body: str
    date: str
    score: int = 1


@dataclass
class Episode:
    shop_user: str | None = None  # logged-in customer email
    forum_user: str | None = None
    cart: dict[int, int] = field(default_factory=dict)  # product id -> quantity, in insertion order
    orders: list[NewOrder] = field(default_factory=list)  # newest last
    reviews: dict[int, list[NewReview]] = field(default_factory=dict)
    profile: dict[str, str] = field(default_factory=dict)  # Customer field -> new value
    posts: list[NewPost] = field(default_factory=list)
    comments: dict[int, list[NewComment]] = field(default_factory=dict)
    votes: dict[int, int] = field(default_factory=dict)  # post id -> +1 / -1
    subscribed: set[str] = field(default_factory=set)
    unsubscribed: set[str] = field(default_factory=set)
    bio: str | None = None
    clock: int = 0  # minutes since the episode started: dates of new content

    def customer(self) -> dict[str, str]:
        """The logged-in customer's profile with this episode's edits."""
        base = data.CUSTOMER
        fields = {"first_name": base.first_name, "last_name": base.last_name, "email": base.email,
                  "phone": base.phone, "street": base.street, "city": base.city, "zip_code": base.zip_code}
        return {**fields, **self.profile}

    def tick(self) -> str:
        """A fresh timestamp after every seeded one (the newest content is always the episode's own)."""
        self.clock += 1
        return f"2024-06-01 {9 + self.clock // 60:02d}:{self.clock % 60:02d}"


class EpisodeStore:
    """Episodes by token, thread-safe. `begin` mints a token; `end` forgets it; unknown tokens share `public`."""

    def __init__(self):
        self._episodes: dict[str, Episode] = {}
        self._lock = threading.Lock()
        self.public = Episode()

    def begin(self, logins: tuple[str, ...] = ()) -> str:
        """A new episode, already logged in on the sites named in `logins` ("shopping", "reddit")."""
        unknown = set(logins) - {"shopping", "reddit"}
        if unknown:
            raise ValueError(f"cannot log in to {sorted(unknown)}; the offline sites are 'shopping' and 'reddit'")
        episode = Episode(shop_user=data.CUSTOMER.email if "shopping" in logins else None,
                          forum_user=data.DEMO_USER if "reddit" in logins else None)
        token = secrets.token_hex(8)
        with self._lock:
            self._episodes[token] = episode
        return token

    def end(self, token: str) -> None:
        with self._lock:
            self._episodes.pop(token, None)

    def get(self, token: str | None) -> Episode:
        with self._lock:
            return self._episodes.get(token or "", self.public)

    def __len__(self) -> int:
        return len(self._episodes)


STORE = EpisodeStore()
