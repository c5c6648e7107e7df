"""The browser: one headless Debian Chromium per process, driven by Playwright's async API from a private event-loop
thread, so envs stepped from any thread share it. Envs borrow browser contexts from the pool and hand them back."""
from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import os
import shutil
import threading

from playwright.async_api import async_playwright

from ..base import EnvError

VIEWPORT = {"width": 1280, "height": 720}
CHROMIUM_FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--no-first-run"]


def chromium_path() -> str:
    found = shutil.which("chromium") or ("/usr/bin/chromium" if os.path.exists("/usr/bin/chromium") else None)
    if found is None:
        raise EnvError("webarena needs Chromium: install Debian's package (apt-get install chromium); "
                       "Playwright's own browser download is not used")
    return found


class BrowserPool:
    """One Chromium for the process, driven by Playwright's async API on a private event-loop thread.

    `run(coroutine)` executes on that loop from any thread. `new_context()` hands out a context: an idle one that a
    closed env released (at most `idle_limit` are kept, with their pages open so their renderer stays warm; the
    next env clears its storage and replaces its pages), else a new one, launching the browser first if it is not
    running (first use, or after a crash). Contexts of failed episodes are closed, never kept.
    """

    idle_limit = 2

    def __init__(self):
        self.loop: asyncio.AbstractEventLoop | None = None
        self.thread: threading.Thread | None = None
        self.playwright = None
        self.browser = None
        self.idle: list = []  # touched on the loop thread only
        self.launches = 0
        self._lock = threading.Lock()

    def _start_loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self.loop is None or not self.thread.is_alive():
                loop = asyncio.new_event_loop()
                self.thread = threading.Thread(target=loop.run_forever, name="agentgym-webarena-browser", daemon=True)
                self.thread.start()
                self.loop = loop
            return self.loop

    def run(self, coroutine, timeout: float):
        """Run `coroutine` on the browser loop and wait at most `timeout` seconds (then EnvError)."""
        future = asyncio.run_coroutine_threadsafe(coroutine, self._start_loop())
        try:
            return future.result(timeout)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise EnvError(f"webarena: the browser did not answer within {timeout:.0f}s") from None

    async def new_context(self):
        while self.idle:
            context = self.idle.pop()
            if context.browser is self.browser and self.browser.is_connected():
                return context
        if self.browser is None or not self.browser.is_connected():
            await self._launch()
        try:
            return await self.browser.new_context(viewport=VIEWPORT, device_scale_factor=1)
        except Exception:  # noqa: BLE001  (a browser that died since the check: relaunch once)
            if self.browser.is_connected():
                raise
            await self._launch()
            return await self.browser.new_context(viewport=VIEWPORT, device_scale_factor=1)

    async def release(self, context, keep: bool) -> None:
        """Take back an env's context: kept idle if `keep` and there is room, else closed."""
        alive = context.browser is self.browser and self.browser is not None and self.browser.is_connected()
        if keep and alive and len(self.idle) < self.idle_limit:
            self.idle.append(context)
        elif alive:
            await context.close()

    async def _launch(self) -> None:
        if self.browser is not None:
            try:
                await self.browser.close()
            except Exception:  # noqa: BLE001  (it crashed: nothing left to close)
                pass
        if self.playwright is None:
            self.playwright = await async_playwright().start()
        self.browser = await self.playwright.chromium.launch(executable_path=chromium_path(), args=CHROMIUM_FLAGS,
                                                             headless=True)
        self.launches += 1

    async def _shutdown(self) -> None:
        self.idle = []
        if self.browser is not None:
            try:
                await self.browser.close()
            except Exception:  # noqa: BLE001
                pass
        if self.playwright is not None:
            await self.playwright.stop()
        self.browser = self.playwright = None

    def close(self) -> None:
        """Close the browser and stop the loop thread (the next use starts both again)."""
        with self._lock:
            loop, thread = self.loop, self.thread
            self.loop = None
        if loop is None:
            return
        if thread.is_alive():
            try:
                asyncio.run_coroutine_threadsafe(self._shutdown(), loop).result(30)
            except Exception:  # noqa: BLE001  (shutting down: best effort)
                pass
            loop.call_soon_threadsafe(loop.stop)
            thread.join(timeout=10)


POOL = BrowserPool()
atexit.register(POOL.close)


def shutdown_browser() -> None:
    """Close this process's Chromium (envs still open get EnvError; the next reset starts a new browser)."""
    POOL.close()
