"""WebArena with AgentGym's text interface (agentenv-webarena), driving real Chromium through Playwright.

The agent sees WebArena's observation: the open tabs and the accessibility tree of the current viewport, one
`[id] role 'name' properties` line per node (tab-indented), then `URL:`, `OBJECTIVE:` and `PREVIOUS ACTION:`.
It acts with WebArena's id-based grammar inside the first triple-backtick block of its reply: `click [id]`,
`hover [id]`, `type [id] [text] [0|1]`, `press [keys]`, `scroll [up|down]`, `goto [url]`, `new_tab`, `go_back`,
`go_forward`, `tab_focus [n]`, `close_tab`, `stop [answer]`. The episode ends at `stop`, and only then is there a
reward: the product of the task's evaluators (string_match, url_match, program_html) in [0, 1].

Tasks are WebArena config files (`config_files/<item id>.json`). By default they are the offline tasks shipped in
`agentgym_nb/data/webarena/config_files/` (ids 0..81) plus generated training tasks (ids from 1000, whose configs
`envs/web/tasks.py` builds in memory), played on the embedded sites (`envs/web/`) served on loopback.
With `config_dir=` (or the environment variable WEBARENA_CONFIG_DIR) the env runs WebArena's own 812 configs against
the real WebArena sites, whose URLs come from the environment variables WebArena uses (SHOPPING, SHOPPING_ADMIN,
REDDIT, GITLAB, MAP, WIKIPEDIA, HOMEPAGE).

    grammar.py     the text interface: observation template, reply format, action grammar
    axtree.py      Chromium's accessibility tree -> WebArena's text and node table
    configs.py     task configs and the site addresses they name
    evaluators.py  WebArena's evaluators: the reward at `stop`
    browser.py     the process's Chromium and its pool of contexts
    env.py         the env (`WebArena`)
    expert.py      the scripted expert that plays the offline tasks' plans
    wire.py        AgentGym's webarena server and client
"""
from .axtree import NodeIds, render_tree
from .browser import POOL, chromium_path, shutdown_browser
from .configs import SITES, OfflineConfigs, TaskConfigs, UrlMap
from .env import ACKNOWLEDGEMENT, INSTRUCTION, WebArena
from .evaluators import (Judge, content_score, exact_match, must_include, needs_judge, reddit_get_post_url,
                         string_score, url_score)
from .grammar import NO_BACKTICKS, TEMPLATE, Action, ActionParsingError, describe, extract_action, parse_action
from .wire import WebArenaHTTPEnv, webarena_routes

__all__ = ["ACKNOWLEDGEMENT", "INSTRUCTION", "NO_BACKTICKS", "POOL", "SITES", "TEMPLATE", "Action",
           "ActionParsingError", "Judge", "NodeIds", "OfflineConfigs", "TaskConfigs", "UrlMap", "WebArena",
           "WebArenaHTTPEnv", "chromium_path", "content_score", "describe", "exact_match", "extract_action",
           "must_include", "needs_judge", "parse_action", "reddit_get_post_url", "render_tree", "shutdown_browser",
           "string_score", "url_score", "webarena_routes"]
