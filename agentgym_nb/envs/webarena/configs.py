"""WebArena task configs (`config_files/<item id>.json`) and the site addresses they name.

A config names its sites by placeholder (`__SHOPPING__`, ...), filled in with the sites' URLs, which the agent sees
under WebArena's public names (`http://onestopmarket.com`, ...): `UrlMap` translates between the two.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

from ..web import tasks as offline_tasks

# WebArena's site variables, their config placeholders and the addresses the agent sees (browser_env/env_config.py)
SITES = {"SHOPPING": "http://onestopmarket.com", "SHOPPING_ADMIN": "http://luma.com/admin",
         "REDDIT": "http://reddit.com", "GITLAB": "http://gitlab.com", "WIKIPEDIA": "http://wikipedia.org",
         "MAP": "http://openstreetmap.org", "HOMEPAGE": "http://homepage.com"}
PLACEHOLDER = re.compile(r"__(SHOPPING_ADMIN|SHOPPING|REDDIT|GITLAB|MAP|WIKIPEDIA|HOMEPAGE)__")


class UrlMap:
    """Local site addresses <-> the addresses the agent sees (WebArena's URL_MAPPINGS), matched at address
    boundaries so that port 4000 never matches inside port 40001."""

    def __init__(self, local_to_shown: dict[str, str]):
        self.pairs = sorted(((local.rstrip("/"), shown) for local, shown in local_to_shown.items() if local),
                            key=lambda pair: -len(pair[0]))

    def shown(self, url: str) -> str:
        for local, shown in self.pairs:
            if url == local or url.startswith(local) and url[len(local)] in "/?#":
                return shown + url[len(local):]
        return url

    def local(self, text: str) -> str:
        """Every shown address in `text` (http or https) replaced by its local one (WebArena does this to the
        whole action string)."""
        for local, shown in self.pairs:
            for variant in (shown, shown.replace("http://", "https://")):
                text = re.sub(re.escape(variant) + r"(?=$|[/?#\s\]])", lambda _: local, text)
        return text


class TaskConfigs:
    """WebArena task configs from a directory of `<item id>.json` files, with `__SITE__` placeholders filled in."""

    def __init__(self, directory: Path):
        self.directory = Path(directory)
        if not self.directory.is_dir():
            raise ValueError(f"webarena config directory {self.directory} does not exist (it should hold WebArena's "
                             "config_files/<task id>.json)")

    def raw(self, item_id: int) -> dict:
        path = self.directory / f"{item_id}.json"
        if not path.exists():
            count = len(list(self.directory.glob("*.json")))
            raise ValueError(f"webarena: no task config {path} ({count} config files in {self.directory})")
        return json.loads(path.read_text())

    def resolve(self, item_id: int, urls: dict[str, str]) -> dict:
        """The config with each `__SITE__` replaced by the site's URL; an unset site is an error naming it."""
        def fill(value):
            if isinstance(value, str):
                def site(match):
                    name = match.group(1)
                    if not urls.get(name):
                        raise ValueError(f"webarena task {item_id} uses the {name} site but its URL is not set: "
                                         f"export {name}=http://<host>:<port> (as for WebArena)")
                    return urls[name].rstrip("/")
                return PLACEHOLDER.sub(site, value)
            if isinstance(value, list):
                return [fill(v) for v in value]
            if isinstance(value, dict):
                return {k: fill(v) for k, v in value.items()}
            return value
        return fill(self.raw(item_id))


class OfflineConfigs(TaskConfigs):
    """The offline tasks: the shipped config files, and from `FIRST_GENERATED` on the generated training tasks,
    whose configs the generator builds from the id (hundreds of files would only repeat it)."""

    def __init__(self):
        super().__init__(offline_tasks.CONFIG_DIR)

    def raw(self, item_id: int) -> dict:
        if item_id >= offline_tasks.FIRST_GENERATED:
            return offline_tasks.config(item_id)
        return super().raw(item_id)
