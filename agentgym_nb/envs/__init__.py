"""Environments: in-process (`make`), over AgentGym's HTTP protocol (`serve`, `connect`).

    env = make("babyai")                                # or connect("babyai", "http://127.0.0.1:36002")
    observation = env.reset(item_id)
    step = env.step(model_reply)                         # Step(observation, reward, done, info)

    base.py       the Env interface every env and the client share
    registry.py   which envs there are (names -> classes), their item lists, levels and expert horizons
    wire.py       AgentGym's protocol as envs speak it: request bodies, answers, default routes, the client
    http.py       the server: an app for a registered env, and the processes that serve it
    babyai/, textcraft/, sciworld.py, searchqa.py, webarena/, miniwob/   the envs (web/: WebArena's offline sites)
"""
from __future__ import annotations

import itertools

from . import registry
from .base import Env, EnvError, EnvStateError, Episodes, InvalidAction, Levels, NoExpert, Step, Track
from .registry import env_class, expert_turns, item_ids, make, register, select_levels


def __getattr__(name: str):
    if name == "ENV_NAMES":   # read from the registry on each use: register() adds names after this module loads
        return registry.ENV_NAMES
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def serve(name: str, host: str = "127.0.0.1", port: int = 36002, **kw) -> None:
    """Serve env `name` over AgentGym's HTTP protocol (blocks until interrupted)."""
    env_class(name)
    from .http import serve as serve_http   # FastAPI and uvicorn take a second to load: only servers pay for it

    serve_http(name, host=host, port=port, **kw)


_NEXT_URL: dict[tuple[str, ...], itertools.count] = {}   # URL list -> its round-robin counter


def connect(name: str, url: str | list[str], timeout: float = 30.0) -> Env:
    """An env living on an AgentGym-protocol server at `url` (ours or AgentGym's own). Given a list of URLs (the
    ports of `python -m agentgym_nb.envs serve <env> --workers N`, or several hosts), each new env is created on the
    next URL in turn (round robin, shared by all threads) and stays there."""
    from .wire import HTTPEnv   # the HTTP stack (FastAPI, requests) loads only for remote envs

    if not isinstance(url, str):
        urls = tuple(url)
        if not urls or not all(isinstance(u, str) for u in urls):
            raise ValueError(f"connect needs a URL or a non-empty list of URL strings, got {url!r}")
        url = urls[next(_NEXT_URL.setdefault(urls, itertools.count())) % len(urls)]
    return (env_class(name).http_client or HTTPEnv)(name, url, timeout=timeout)


__all__ = ["ENV_NAMES", "Env", "EnvError", "EnvStateError", "Episodes", "InvalidAction", "Levels", "NoExpert", "Step",
           "Track", "connect", "env_class", "expert_turns", "item_ids", "make", "register", "select_levels", "serve"]
