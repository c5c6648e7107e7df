"""Which envs there are: names -> Env classes, their shipped item lists, the levels of items and the horizons their
experts need. The HTTP server and client look names up here; `envs` (the package) hands these names on."""
from __future__ import annotations

import difflib
import importlib
import json
import os
import time
from pathlib import Path

from ..paths import default_outputs_dir
from .base import Env

# name -> "module:class" (imported on first use: some envs start a JVM or a browser) or an Env subclass
_REGISTRY: dict[str, str | type[Env]] = {
    "babyai": "agentgym_nb.envs.babyai:BabyAI",
    "textcraft": "agentgym_nb.envs.textcraft:TextCraft",
    "sciworld": "agentgym_nb.envs.sciworld:SciWorld",
    "searchqa": "agentgym_nb.envs.searchqa:SearchQA",
    "webarena": "agentgym_nb.envs.webarena:WebArena",
    "miniwob": "agentgym_nb.envs.miniwob:MiniWoB",
}
ENV_NAMES = tuple(_REGISTRY)


def register(name: str, env: str | type[Env]) -> None:
    """Make `env` (an Env subclass, or "module:Class") available as `name` to make, serve, connect and configs.
    Its class declares what configs read (tracks, levels, smoke episode shape, success score); its item lists are
    `<items_dir>/<name>_<split>.json`."""
    global ENV_NAMES
    _REGISTRY[name] = env
    ENV_NAMES = tuple(_REGISTRY)


def env_class(name: str) -> type[Env]:
    """The Env subclass registered as `name`; ValueError naming the valid names otherwise."""
    if name in _REGISTRY:
        target = _REGISTRY[name]
        if not isinstance(target, str):
            return target
        module, cls = target.split(":")
        return getattr(importlib.import_module(module), cls)
    available = ", ".join(ENV_NAMES)
    close = difflib.get_close_matches(str(name), ENV_NAMES, n=1)
    hint = f", did you mean {close[0]!r}?" if close else ""
    raise ValueError(f"unknown env {name!r}{hint} (available: {available})")


def item_ids(name: str, split: str) -> list[int]:
    """The env's shipped item list `split` ("train" or "test"), stored in AgentGym-RL-Data-ID's format
    (`<items_dir>/<env>_<split>.json` = `[{"item_id": "<env>_<n>"}, ...]`; `agentgym_nb/data/items/` for the
    envs of this package), as integers."""
    path = Path(env_class(name).items_dir) / f"{name}_{split}.json"
    if not path.exists():
        found = sorted(p.stem for p in path.parent.glob(f"{name}_*.json") if p != _shipped_turns_path(name))
        raise ValueError(f"no {split!r} item list for env {name!r}; shipped: {found}")
    records = json.loads(path.read_text())
    return [int(record["item_id"].rsplit("_", 1)[1]) for record in records]


def make(name: str, **kw) -> Env:
    """An in-process env."""
    return env_class(name)(**kw)


def select_levels(name: str, item_ids: list[int], levels: list[int] | None) -> list[int]:
    """The items of `item_ids` whose level (`Env.level`) is in `levels` (all of them when `levels` is None)."""
    if levels is None:
        return list(item_ids)
    level = env_class(name).level
    return [i for i in item_ids if level(i) in levels]


def expert_turns(name: str, item_ids: list[int]) -> dict[int, int | None]:
    """The replies env `name`'s expert needs to solve each item (None: it does not solve it). A horizon of H
    turns reaches an item when its expert needs at most H. The expert is deterministic per item, so the answer is
    read from the table shipped with the env's item lists (`shipped_expert_turns`), then from the cache
    <outputs>/data/<name>/expert_turns.json; only items in neither are played (once, then cached)."""
    known = shipped_expert_turns(name)
    path = Path(default_outputs_dir()) / "data" / name / "expert_turns.json"
    if any(i not in known for i in item_ids):
        known.update(_read_turns(path))
    todo = [i for i in dict.fromkeys(item_ids) if i not in known]
    if todo:
        played = play_expert(name, todo)
        known.update(played)
        path.parent.mkdir(parents=True, exist_ok=True)
        # another process may have added items meanwhile: merge, then replace the file in one step
        merged = {**_read_turns(path), **played}
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps({str(k): v for k, v in sorted(merged.items())}))
        os.replace(tmp, path)
    return {i: known[i] for i in item_ids}


def play_expert(name: str, item_ids: list[int]) -> dict[int, int | None]:
    """Play env `name`'s expert on each item: {item: the replies it took to succeed, or None}."""
    env, turns_of = make(name), {}
    try:
        for item in item_ids:
            _, turns = env.expert_episode(item)
            turns_of[item] = len(turns) if turns and env.success(turns[-1][1].reward) else None
    finally:
        env.close()
    return turns_of


def shipped_expert_turns(name: str) -> dict[int, int | None]:
    """The expert-turn table shipped next to the env's item lists (`<items_dir>/<name>_expert_turns.json`, made by
    `write_expert_turns`); {} for an env that ships none."""
    return _read_turns(_shipped_turns_path(name), key="turns")


def write_expert_turns(name: str) -> Path:
    """Play the expert on every item of env `name`'s shipped train and test lists and write the table
    `shipped_expert_turns` reads, so that no run waits for the expert (BabyAI's 5,000 items: minutes on one core).
    Regenerate it whenever the env or its expert changes: python -m agentgym_nb.envs expert-turns <name>"""
    items = sorted(set(item_ids(name, "train")) | set(item_ids(name, "test")))
    started = time.perf_counter()
    turns = play_expert(name, items)
    path = _shipped_turns_path(name)
    about = (f"Replies {name}'s deterministic expert needs per item of its train and test lists (null: it does not "
             f"succeed); read by envs.expert_turns. Made by `python -m agentgym_nb.envs expert-turns {name}` "
             f"({time.perf_counter() - started:.0f} s in one process).")
    path.write_text(json.dumps({"about": about, "turns": {str(k): v for k, v in turns.items()}}, indent=0) + "\n")
    return path


def _shipped_turns_path(name: str) -> Path:
    return Path(env_class(name).items_dir) / f"{name}_expert_turns.json"


def _read_turns(path: Path, key: str | None = None) -> dict[int, int | None]:
    if not path.exists():
        return {}
    table = json.loads(path.read_text())
    return {int(k): v for k, v in (table[key] if key else table).items()}
