"""The WebArena env: WebArena's tasks in a real browser, with AgentGym's text interface (agentenv-webarena).

Each env holds one browser context of the process's pool; every reset clears its cookies and storage, sets the
task's login state and replaces its tabs, so episodes share nothing; close() hands the context back to the pool. A
crashed browser or a page that does not load within `page_load_timeout` raises EnvError, ends the episode and
drops the context; the next reset gets a fresh one (relaunching the browser if needed). After an action the env
waits for the page to finish loading instead of sleeping WebArena's fixed 1.5 s.
"""
from __future__ import annotations

import asyncio
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from playwright.async_api import Error as PlaywrightError
from playwright.async_api import TimeoutError as PlaywrightTimeout

from .. import web
from ..base import Env, EnvError, Episodes, NoExpert, Step, Track, check_item_id
from .axtree import NodeIds, render_tree
from .browser import POOL, VIEWPORT
from .configs import SITES, OfflineConfigs, TaskConfigs, UrlMap
from .evaluators import Judge, evaluate, needs_judge
from .expert import expert_replies, play
from .grammar import TEMPLATE, Action, ActionParsingError, describe, extract_action, parse_action, require_block

INSTRUCTION = (
    "You are an autonomous intelligent agent tasked with navigating a web browser. You will be given web-based "
    "tasks. These tasks will be accomplished through the use of specific actions you can issue.\n\nHere's the "
    "information you'll have:\nThe user's objective: This is the task you're trying to complete.\nThe current web "
    "page's accessibility tree: This is a simplified representation of the webpage, providing key information.\n"
    "The current web page's URL: This is the page you're currently navigating.\nThe open tabs: These are the tabs "
    "you have open.\nThe previous action: This is the action you just performed. It may be helpful to track your "
    "progress.\n\nThe actions you can perform fall into several categories:\n\nPage Operation Actions:\n"
    "```click [id]```: This action clicks on an element with a specific id on the webpage.\n```type [id] [content] "
    "[0|1]```: Use this to type the content into the field with id. By default, the \"Enter\" key is pressed after "
    "typing unless the last parameter is set to 0.\n```hover [id]```: Hover over an element with id.\n"
    "`press [key_comb]`:  Simulates the pressing of a key combination on the keyboard (e.g., Ctrl+v).\n"
    "```scroll [down|up]```: Scroll the page up or down to reveal content below or above the current view.\n\n"
    "Tab Management Actions:\n```new_tab```: Open a new, empty browser tab.\n```tab_focus [tab_index]```: Switch "
    "the browser's focus to a specific tab using its index.\n```close_tab```: Close the currently active tab.\n\n"
    "URL Navigation Actions:\n```goto [url]```: Navigate to a specific URL.\n```go_back```: Navigate to the "
    "previously viewed page.\n```go_forward```: Navigate to the next page (if a previous 'go_back' action was "
    "performed).\n\nCompletion Action:\n```stop [answer]```: Issue this action when you believe the task is "
    "complete. If the objective is to find a text-based answer, provide the answer in the bracket. If you believe "
    "the task is impossible to complete, provide the answer as \"N/A\" in the bracket.\n\nHomepage:\nIf you want to "
    "visit other websites, check out the homepage at http://homepage.com. It has a list of websites you can visit."
    "\n\nTo be successful, it is very important to follow the following rules:\n1. You should only issue an action "
    "that is valid given the current observation\n2. You should only issue one action at a time.\n3. You should "
    "follow the examples to reason step by step and then issue the next action.\n4.For ALL actions that take "
    "parameters, you MUST enclose each parameter in square brackets [].\n5. Generate the action in the correct "
    "format. Start with a \"Let's think step-by-step...In summary, the next action I will perform is\" phrase, "
    "followed by action inside triple backticks (```). For example, \"Let's think step-by-step. This page has a "
    "search box whose ID is [164]. According to the nominatim rule of openstreetmap, I can search for the "
    "restaurants near a location by \"restaurants near\". I can submit my typing by pressing the Enter afterwards. "
    "In summary, the next action I will perform is ```type [164] [restaurants near CMU] [1]```\".\n6. Issue stop "
    "action when you think you have achieved the objective. Don't generate anything after stop."
)
ACKNOWLEDGEMENT = "Ok."
SCROLL_JS = ("(document.scrollingElement || document.body).scrollTop = "
             "(document.scrollingElement || document.body).scrollTop {sign} window.innerHeight;")


@dataclass
class Tab:
    """What we keep per browser page: its CDP session, its main frame's loading state, its node ids.

    `requested` is set when the page asks for a new document (a form submission does so a few milliseconds after
    the key press that caused it, before the browser starts loading); `loading` counts loads in progress."""
    cdp: object
    main_frame: str
    requested: float | None = None  # loop time of a navigation request not yet started
    loading: int = 0
    ids: NodeIds = field(default_factory=NodeIds)


class WebArena(Env):
    """WebArena tasks in a real browser with AgentGym's interface; see the package docstring.

    `config_dir`: a directory of WebArena config files (real WebArena, site URLs from the environment); default
    WEBARENA_CONFIG_DIR if set, else the offline tasks on the embedded sites. `judge`: an LLM chat function
    (messages -> reply text) for tasks graded by fuzzy_match; without one such tasks refuse to reset.
    `page_load_timeout`: seconds a page may take to load before the episode fails with EnvError.
    """

    name, title = "webarena", "WebArena"
    task_instruction = INSTRUCTION
    acknowledgement = ACKNOWLEDGEMENT
    # A step (Chromium, accessibility trees of ~2k tokens a turn) costs about 20 times a BabyAI step: the cpu
    # preset trains half the tasks per step over 24 steps (three stages of 8).
    tracks = {"all": Track("every task of the offline sites", None,
                           Episodes(rounds=(4, 8, 12), max_tokens=128, max_total_tokens=8192, max_envs=6),
                           budget=dict(prompts_per_step=4, steps=24, rounds_every=8))}
    # Its instruction and an accessibility tree are ~1,850 tokens, and ~650 more per turn.
    smoke = Episodes(rounds=(1, 2), max_tokens=24, max_total_tokens=3584)
    smoke_nano = dict(demos=8, max_total_tokens=4032, bc_max_steps=8, check_every=8)
    success_score = 1.0

    def __init__(self, config_dir: str | Path | None = None, judge: Judge | None = None,
                 page_load_timeout: float = 30.0):
        config_dir = config_dir or os.environ.get("WEBARENA_CONFIG_DIR") or None
        self.offline = config_dir is None
        self.configs = OfflineConfigs() if self.offline else TaskConfigs(Path(config_dir))
        self.judge, self.page_load_timeout = judge, page_load_timeout
        self.pool = POOL
        self.config: dict = {}
        self.urls: dict[str, str] = {}
        self.url_map = UrlMap({})
        self.context = None
        self.page = None
        self.tabs: dict[object, Tab] = {}
        self.nodes: dict[str, dict] = {}
        self.tree = ""
        self.url = ""
        self.history: list[str] = ["None"]
        self.episode_token: str | None = None
        self.item_id: int | None = None

    # -- episode ------------------------------------------------------------------------------------------------

    def reset(self, item_id: int) -> str:
        self.check_open()
        item_id = check_item_id(item_id, f"webarena: a config file name in {self.configs.directory}")
        self._forget_episode()
        self.phase = "new"
        self.urls = self._site_urls()
        self.config = self.configs.resolve(item_id, self.urls)
        if needs_judge(self.config) and self.judge is None:
            raise ValueError(f"webarena task {item_id} is graded by an LLM judge (fuzzy_match); construct the env "
                             "with judge=<function: chat messages -> reply text>")
        self.url_map = UrlMap({self.urls[name]: SITES[name] for name in SITES if self.urls.get(name)})
        self.item_id, self.history, self.score, self.reward = item_id, ["None"], 0.0, 0.0
        self._run(self._start(), self.page_load_timeout * (1 + len(self._start_urls())) + 30)
        self.phase = "running"
        return self.observe()

    def _site_urls(self) -> dict[str, str]:
        if self.offline:
            return web.start()
        return {name: os.environ.get(name, "") for name in SITES}

    def _start_urls(self) -> list[str]:
        return [u.strip() for u in self.config.get("start_url", "").split(" |AND| ") if u.strip()]

    def observe(self) -> str:
        """WebArena's prompt for the current state (AgentGym's GET /observation)."""
        return TEMPLATE.format(observation=self.tree, url=self.url, objective=self.config.get("intent", ""),
                               previous_action=self.history[-1])

    def parse_action(self, text: str) -> str:
        """AgentGym's client check: the reply must hold a ```...``` block; the whole reply goes on to act()."""
        return require_block(text)

    def act(self, text: str) -> Step:
        """AgentGym's server step: the first ``` block of the reply (shown URLs mapped to local ones) is parsed;
        an unreadable one is answered with WebArena's message and costs the turn. Otherwise it is executed (a
        failing execution is not an error: WebArena records it and shows the new state) and, at `stop`, the task's
        evaluators give the reward."""
        self.check_running()
        try:
            action = parse_action(self.url_map.local(extract_action(text)))
        except ActionParsingError as error:
            info = {"score": self.score, "step_reward": 0.0, "action": "", "valid": False, "fail_error": str(error)}
            return Step(str(error), 0.0, False, info)
        self.history.append(describe(action, self.nodes))
        timeout = self.page_load_timeout * (3 + len(self.config["eval"].get("program_html") or [])) + 30
        fail_error, score = self._run(self._act(action), timeout)
        if action.kind == "stop":
            self.phase, self.score, self.reward = "over", score, score
        info = {"score": self.score, "step_reward": self.reward, "action": self.history[-1], "valid": not fail_error,
                "fail_error": fail_error, "url": self.url}
        return Step(self.observe(), self.reward, action.kind == "stop", info)

    def category(self, item_id: int) -> str:
        """The task's site(s), e.g. "shopping", "reddit", "shopping+reddit"."""
        item_id = check_item_id(item_id, f"webarena: a config file name in {self.configs.directory}")
        return "+".join(self.configs.raw(item_id)["sites"])

    def expert(self, item_id: int) -> list[str]:
        """Replies that solve an offline task (its scripted plan, played in the expert's private env)."""
        self._check_offline_expert()
        return expert_replies(item_id, new_env=WebArena)

    def expert_episode(self, item_id: int) -> tuple[str, list[tuple[str, Step]]]:
        """The task's plan played in this env (see Env.expert_episode); RuntimeError unless it earns reward 1."""
        self._check_offline_expert()
        return play(self, item_id)

    def _check_offline_expert(self) -> None:
        if not self.offline:
            raise NoExpert("webarena: the scripted expert covers the offline tasks only")

    def metadata(self) -> dict:
        """WebArena's observation metadata (AgentGym's GET /observation_metadata)."""
        return {"text": {"obs_nodes_info": self.nodes}, "image": {"obs_nodes_info": {}}}

    def close(self) -> None:
        self._release(keep=True)
        super().close()

    # -- browser work (runs on the pool's loop) -------------------------------------------------------------

    def _run(self, coroutine, timeout: float):
        """Run browser work; a failure of the browser (or of a page to load) ends the episode with EnvError and
        drops the context, so the next reset starts from a fresh one."""
        try:
            return self.pool.run(self._guarded(coroutine), timeout)
        except BaseException:
            if self.phase == "running":
                self.phase = "over"
            self._release(keep=False)
            raise

    async def _guarded(self, coroutine):
        try:
            return await coroutine
        except PlaywrightTimeout as error:
            raise EnvError(f"webarena: a page did not load within {self.page_load_timeout:.0f}s "
                           f"({self.url or 'starting the task'}): {str(error).splitlines()[0]}") from None
        except PlaywrightError as error:
            raise EnvError(f"webarena: browser error ({self.url or 'starting the task'}): "
                           f"{str(error).splitlines()[0]}") from None

    async def _start(self) -> None:
        """Begin the episode in this env's context (made on first use): storage cleared and set to the task's
        login state, geolocation set, the start pages opened, then the previous episode's pages closed (opening
        first keeps the context's renderer alive: a reset costs a page load, not a process start)."""
        storage = self.config.get("storage_state")
        state = {"cookies": [], "origins": []}
        if storage and not self.offline:
            path = Path(storage) if Path(storage).is_absolute() else self.configs.directory.parent / storage
            if not path.exists():
                raise EnvError(f"webarena task {self.item_id} needs the login state {path}; create it with WebArena's "
                               "`python browser_env/auto_login.py` in its webarena directory")
            state = json.loads(path.read_text())
        if self.context is not None and self.context.browser is not self.pool.browser:
            self.context, self.tabs = None, {}  # made by a browser that is gone (crashed or shut down)
        if self.context is None:
            self.context = await self.pool.new_context()
            self.context.set_default_timeout(self.page_load_timeout * 1000)
        await self.context.set_storage_state(state)
        await self.context.set_geolocation(self.config.get("geolocation"))
        if self.offline:
            logins = Path(storage).name.removesuffix("_state.json").split(".") if storage else []
            self.episode_token = web.STORE.begin(tuple(logins))
            await self.context.add_cookies([{"name": web.COOKIE, "value": self.episode_token,
                                             "url": self.urls["HOMEPAGE"]}])
        old_pages, pages = list(self.context.pages), []
        for url in self._start_urls() or ["about:blank"]:
            pages.append(await self.context.new_page())
            await self._tab(pages[-1])
            await pages[-1].goto(url, wait_until="load")
        for page in old_pages:
            self.tabs.pop(page, None)
            await page.close()
        self.page = pages[0]
        await self.page.bring_to_front()
        await self._observe()

    async def _tab(self, page) -> Tab:
        """The Tab of `page`, attaching a CDP session (accessibility, snapshots, load events) on first use."""
        if page not in self.tabs:
            cdp = await self.context.new_cdp_session(page)
            await cdp.send("Page.enable")
            frame = (await cdp.send("Page.getFrameTree"))["frameTree"]["frame"]["id"]
            tab = Tab(cdp, frame)
            loop = asyncio.get_running_loop()

            def requested(event, tab=tab):
                if event["frameId"] == tab.main_frame:
                    tab.requested = loop.time()

            def started(event, tab=tab):
                if event["frameId"] == tab.main_frame:
                    tab.requested, tab.loading = None, tab.loading + 1

            def stopped(event, tab=tab):
                if event["frameId"] == tab.main_frame:
                    tab.loading = max(0, tab.loading - 1)

            cdp.on("Page.frameRequestedNavigation", requested)
            cdp.on("Page.frameStartedLoading", started)
            cdp.on("Page.frameStoppedLoading", stopped)
            self.tabs[page] = tab
        return self.tabs[page]

    async def _settle(self) -> None:
        """Wait until a navigation the action started has loaded (instead of WebArena's fixed 1.5 s sleep)."""
        await asyncio.sleep(0.01)  # the request of a click or Enter arrives within milliseconds
        tab, loop = await self._tab(self.page), asyncio.get_running_loop()
        try:  # a round trip through the page's renderer: a navigation it scheduled has been requested by now
            await tab.cdp.send("Runtime.evaluate", {"expression": "0"})
        except Exception:  # noqa: BLE001  (the document is being replaced: the load events below tell the rest)
            pass
        deadline = loop.time() + self.page_load_timeout
        while not self.page.is_closed():
            if tab.requested is not None and loop.time() - tab.requested > 2.0:
                tab.requested = None  # requested but never started (cancelled): nothing to wait for
            if tab.requested is None and not tab.loading:
                return
            if loop.time() > deadline:
                raise PlaywrightTimeout(f"still loading {self.page.url}")
            await asyncio.sleep(0.005)

    async def _observe(self) -> None:
        """Read the current tab: tab titles, accessibility tree of the viewport, URL."""
        tab = await self._tab(self.page)
        ax_nodes = (await tab.cdp.send("Accessibility.getFullAXTree"))["nodes"]
        snapshot = await tab.cdp.send("DOMSnapshot.captureSnapshot", {"computedStyles": []})
        text, self.nodes = render_tree(ax_nodes, snapshot, tab.ids)
        titles = []
        for index, page in enumerate(self.context.pages):
            if page is self.page:  # the document's title is the root's name: no extra round trip
                titles.append(f"Tab {index} (current): {ax_nodes[0].get('name', {}).get('value', '')}")
            else:
                titles.append(f"Tab {index}: {await page.title()}")
        self.tree = " | ".join(titles) + "\n\n" + text
        self.url = self.url_map.shown(self.page.url)

    async def _act(self, action: Action) -> tuple[str, float]:
        """Execute, wait for loading, observe; at stop, evaluate. Returns (WebArena's fail_error, score)."""
        fail_error = ""
        try:
            await self._execute(action)
        except PlaywrightTimeout:
            raise
        except (PlaywrightError, KeyError, IndexError, ValueError) as error:
            if self.page.is_closed() or not self.context.browser.is_connected() or "crash" in str(error).lower():
                raise EnvError(f"webarena: browser error ({self.url}): {str(error).splitlines()[0]}") from None
            fail_error = str(error).splitlines()[0] if str(error) else error.__class__.__name__
        await self._settle()
        await self._observe()
        score = 0.0
        if action.kind == "stop":
            score = await evaluate(self.config, action.text, self.page, self.urls, self.judge)
        return fail_error, score

    def _center(self, element_id: str) -> tuple[float, float]:
        """Middle of the element's visible part (WebArena clicks the middle of its box)."""
        x, y, width, height = self.nodes[element_id]["union_bound"]  # KeyError: not in the observation
        left, top = max(x, 0), max(y, 0)
        right, bottom = min(x + width, VIEWPORT["width"]), min(y + height, VIEWPORT["height"])
        return (left + right) / 2, (top + bottom) / 2

    async def _execute(self, action: Action) -> None:
        page, kind = self.page, action.kind
        if kind in ("click", "type"):
            await page.mouse.click(*self._center(action.element_id))
            if kind == "type":
                await page.keyboard.type(action.text)
        elif kind == "hover":
            await page.mouse.move(*self._center(action.element_id))
        elif kind == "scroll":
            await page.evaluate(SCROLL_JS.format(sign="-" if action.text == "up" else "+"))
        elif kind == "press":
            keys = action.text
            if "Meta" in keys and "Mac" not in await page.evaluate("navigator.platform"):
                keys = keys.replace("Meta", "Control")
            await page.keyboard.press(keys)
        elif kind == "goto":
            await page.goto(action.text, wait_until="load")
        elif kind == "go_back":
            await page.go_back(wait_until="load")
        elif kind == "go_forward":
            await page.go_forward(wait_until="load")
        elif kind == "new_tab":
            self.page = await self.context.new_page()
            await self._tab(self.page)
        elif kind == "tab_focus":
            self.page = self.context.pages[action.page_number]
            await self.page.bring_to_front()
        elif kind == "close_tab":
            await page.close()
            self.tabs.pop(page, None)
            self.page = self.context.pages[-1] if self.context.pages else await self.context.new_page()

    def _forget_episode(self) -> None:
        """Drop the offline sites' state of the episode that ended."""
        if self.episode_token is not None:
            web.STORE.end(self.episode_token)
            self.episode_token = None

    def _release(self, keep: bool) -> None:
        """Give this env's browser context back to the pool (after close(), `keep`) or close it (after a failure)."""
        self._forget_episode()
        context, self.context, self.page, self.tabs, self.nodes = self.context, None, None, {}, {}
        if context is not None and context.browser is self.pool.browser and self.pool.loop is not None:
            try:
                self.pool.run(self.pool.release(context, keep), 30)
            except Exception:  # noqa: BLE001  (a crashed browser has no context left to close)
                pass
