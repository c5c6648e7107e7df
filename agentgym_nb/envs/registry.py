"""Which envs there are: names -> Env classes, their shipped item lists, the levels of items and the horizons their
experts need. The HTTP server and client look names up here; `envs` (the package) hands these names on."""
from __future__ import annotations

import difflib
import importlib
import json
import os
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
        found = sorted(p.stem for p in path.parent.glob(f"{name}_*.json"))
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
    turns reaches an item when its expert needs at most H. Played once per item and cached in
    <outputs>/data/<name>/expert_turns.json (the expert is deterministic per item)."""
    path = Path(default_outputs_dir()) / "data" / name / "expert_turns.json"
    known = {int(k): v for k, v in json.loads(path.read_text()).items()} if path.exists() else {}
    todo = [i for i in dict.fromkeys(item_ids) if i not in known]
    if todo:
        env = make(name)
        try:
            for item in todo:
                _, turns = env.expert_episode(item)
                known[item] = len(turns) if turns and env.success(turns[-1][1].reward) else None
        finally:
            env.close()
        path.parent.mkdir(parents=True, exist_ok=True)
        # another process may have added items meanwhile: merge, then replace the file in one step
        merged = {**({int(k): v for k, v in json.loads(path.read_text()).items()} if path.exists() else {}), **known}
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps({str(k): v for k, v in sorted(merged.items())}))
        os.replace(tmp, path)
    return {i: known[i] for i in item_ids}
