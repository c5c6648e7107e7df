"""Serving the offline sites on 127.0.0.1: the shop, the forum and a homepage linking both, each on a free port,
all in one background thread (one event loop, three uvicorn servers). Started once per process on first use.
"""
from __future__ import annotations

import asyncio
import atexit
import socket
import threading
import time

import uvicorn
from starlette.applications import Starlette
from starlette.routing import Route

from . import forum, shop
from .pages import link, shell

# WebArena's environment-variable names for the sites we stand in for
SITE_VARIABLES = ("SHOPPING", "REDDIT", "HOMEPAGE")


def homepage_app(urls: dict[str, str]) -> Starlette:
    """WebArena's homepage lists the sites; ours lists the two offline ones."""
    async def index(request):
        tiles = (f"<li>{link(urls['SHOPPING'], shop.SITE)} <span>An online shop: products, reviews, cart and "
                 f"orders.</span></li><li>{link(urls['REDDIT'], forum.SITE)} <span>A discussion forum: posts, "
                 "comments, votes.</span></li>")
        return shell("Homepage", "Homepage", f"<h1>Websites</h1><ul>{tiles}</ul>")
    return Starlette(routes=[Route("/", index)])


class SiteServers:
    """The three sites on free loopback ports; `urls` maps SHOPPING/REDDIT/HOMEPAGE to their base URLs."""

    def __init__(self):
        sockets = {}
        for name in SITE_VARIABLES:
            sock = socket.socket()
            sock.bind(("127.0.0.1", 0))
            sockets[name] = sock
        self.urls = {name: f"http://127.0.0.1:{sock.getsockname()[1]}" for name, sock in sockets.items()}
        apps = {"SHOPPING": shop.app(), "REDDIT": forum.app(), "HOMEPAGE": homepage_app(self.urls)}
        self.servers = [uvicorn.Server(uvicorn.Config(apps[name], log_level="warning", access_log=False,
                                                      lifespan="off", timeout_keep_alive=30))
                        for name in SITE_VARIABLES]
        self._sockets = [sockets[name] for name in SITE_VARIABLES]
        self.thread = threading.Thread(target=self._run, name="agentgym-web-sites", daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 30
        while not all(s.started for s in self.servers):
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the offline web sites failed to start")
            time.sleep(0.01)

    def _run(self) -> None:
        async def serve_all():
            await asyncio.gather(*(s.serve(sockets=[sock]) for s, sock in zip(self.servers, self._sockets)))
        asyncio.run(serve_all())

    def stop(self) -> None:
        for server in self.servers:
            server.should_exit = True
        self.thread.join(timeout=10)
        for sock in self._sockets:
            sock.close()


_servers: SiteServers | None = None
_lock = threading.Lock()


def start() -> dict[str, str]:
    """The offline sites' base URLs by WebArena variable name, starting the servers on first call."""
    global _servers
    with _lock:
        if _servers is None or not _servers.thread.is_alive():
            _servers = SiteServers()
        return dict(_servers.urls)


def stop() -> None:
    global _servers
    with _lock:
        if _servers is not None:
            _servers.stop()
            _servers = None


atexit.register(stop)
