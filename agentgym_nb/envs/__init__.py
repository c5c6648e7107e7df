"""Environments: in-process (`make`), over AgentGym's HTTP protocol (`serve`, `connect`).

    env = make("babyai")                                # or connect("babyai", "http://127.0.0.1:36002")
    observation = env.reset(item_id)
    step = env.step(model_reply)                         # Step(observation, reward, done, info)
"""
from __future__ import annotations

import difflib
import importlib
import itertools

from .base import Env, EnvError, EnvStateError, InvalidAction, Step

# name -> "module:class"; adding an environment is one line here
_REGISTRY = {
    "babyai": "agentgym_nb.envs.babyai:BabyAI",
    "textcraft": "agentgym_nb.envs.textcraft:TextCraft",
    "sciworld": "agentgym_nb.envs.sciworld:SciWorld",
    "searchqa": "agentgym_nb.envs.searchqa:SearchQA",
    "webarena": "agentgym_nb.envs.webarena:WebArena",
    "miniwob": "agentgym_nb.envs.miniwob:MiniWoB",
}
ENV_NAMES = tuple(_REGISTRY)


def env_class(name: str) -> type[Env]:
    """The Env subclass registered as `name`; ValueError naming the valid names otherwise."""
    if name in _REGISTRY:
        module, cls = _REGISTRY[name].split(":")
        return getattr(importlib.import_module(module), cls)
    available = ", ".join(ENV_NAMES)
    close = difflib.get_close_matches(str(name), ENV_NAMES, n=1)
    hint = f", did you mean {close[0]!r}?" if close else ""
    raise ValueError(f"unknown env {name!r}{hint} (available: {available})")


def item_ids(name: str, split: str) -> list[int]:
    """The env's shipped item list `split` ("train" or "test"), stored in AgentGym-RL-Data-ID's format
    (`agentgym_nb/data/items/<env>_<split>.json` = `[{"item_id": "<env>_<n>"}, ...]`), as integers."""
    import json
    from pathlib import Path

    env_class(name)
    path = Path(__file__).resolve().parent.parent / "data" / "items" / f"{name}_{split}.json"
    if not path.exists():
        found = sorted(p.stem for p in path.parent.glob(f"{name}_*.json"))
        raise ValueError(f"no {split!r} item list for env {name!r}; shipped: {found}")
    records = json.loads(path.read_text())
    return [int(record["item_id"].rsplit("_", 1)[1]) for record in records]


def make(name: str, **kw) -> Env:
    """An in-process env."""
    return env_class(name)(**kw)


def serve(name: str, host: str = "127.0.0.1", port: int = 36002, **kw) -> None:
    """Serve env `name` over AgentGym's HTTP protocol (blocks until interrupted)."""
    env_class(name)
    from .http import serve as serve_http

    serve_http(name, host=host, port=port, **kw)

# Envs whose items come in levels that a preset may restrict itself to (RunConfig.levels): the valid levels and
# what a level is. BabyAI: the level index (item_id % 40; 0 is GoToRedBallGrey); TextCraft: the recipe depth of the
# goal (1 = crafted from base items, up to 4); SciWorld: the task's index in AgentGym's task list (0 = boil).
ITEM_LEVELS = {"babyai": (range(40), "level index (item_id % 40)"),
               "textcraft": (range(1, 5), "recipe depth of the goal"),
               "sciworld": (range(23), "task index in AgentGym's task list (sciworld.TASKS)")}


def item_level(name: str, item_id: int) -> int:
    """The level of item `item_id` of env `name` (see ITEM_LEVELS)."""
    if name == "babyai":
        from .babyai import level_index
        return level_index(item_id)
    if name == "textcraft":
        from .textcraft import goal_depth
        return goal_depth(item_id)
    if name == "sciworld":
        from .sciworld import task_index
        return task_index(item_id)
    raise ValueError(f"env {name!r} has no item levels; levels select items of {', '.join(ITEM_LEVELS)} only")


def select_levels(name: str, item_ids: list[int], levels: list[int] | None) -> list[int]:
    """The items of `item_ids` whose level is in `levels` (all of them when `levels` is None)."""
    if levels is None:
        return list(item_ids)
    return [i for i in item_ids if item_level(name, i) in levels]


_NEXT_URL: dict[tuple[str, ...], itertools.count] = {}   # URL list -> its round-robin counter


def connect(name: str, url: str | list[str], timeout: float = 30.0) -> Env:
    """An env living on an AgentGym-protocol server at `url` (ours or AgentGym's own). Given a list of URLs (the
    ports of `python -m agentgym_nb.envs serve <env> --workers N`, or several hosts), each new env is created on the
    next URL in turn (round robin, shared by all threads) and stays there."""
    from .http import HTTPEnv

    if not isinstance(url, str):
        urls = tuple(url)
        if not urls or not all(isinstance(u, str) for u in urls):
            raise ValueError(f"connect needs a URL or a non-empty list of URL strings, got {url!r}")
        url = urls[next(_NEXT_URL.setdefault(urls, itertools.count())) % len(urls)]
    return (env_class(name).http_client or HTTPEnv)(name, url, timeout=timeout)


__all__ = ["ENV_NAMES", "ITEM_LEVELS", "Env", "EnvError", "EnvStateError", "InvalidAction", "Step", "connect",
           "env_class", "item_ids", "item_level", "make", "select_levels", "serve"]
