"""What the env runs in Chromium: its flags, the JavaScript it runs in MiniWoB's task page, and the waits for that
page to load and settle."""
from __future__ import annotations

import time

from ..base import EnvError

CHROMIUM_FLAGS = ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--no-first-run", "--window-size=500,400")
NO_TIME_LIMIT_MS = 2_000_000_000  # MiniWoB's episode timer, effectively off (setTimeout's limit is 2**31 - 1)
SETTLE_SECONDS = 2.0
QUIET_SECONDS = 0.05

CLICK_JS = """
var element = core.previousDOMInfo[arguments[0]];
if (element instanceof HTMLOptionElement) {  // element.click() does not select an option
  var select = element.closest('select');
  element.selected = select && select.multiple ? !element.selected : true;
  if (select) select.dispatchEvent(new Event('change', {bubbles: true}));
  return true;
}
return core.elementClick(arguments[0]);
"""
START_JS = f"""
window.agentgymChanged = Date.now();  // the time of the page's latest DOM change, for settle()
new MutationObserver(function () {{ window.agentgymChanged = Date.now(); }}).observe(
    document.body, {{subtree: true, childList: true, attributes: true, characterData: true}});
Math.seedrandom(arguments[0]);
core.setDataMode('train');
core.EPISODE_MAX_TIME = {NO_TIME_LIMIT_MS};
core.startEpisodeReal();
"""
STATE_JS = "return [WOB_DONE_GLOBAL, WOB_RAW_REWARD_GLOBAL, WOB_REWARD_REASON];"
BUSY_JS = """
if (Date.now() - window.agentgymChanged < arguments[0]) return true;
if (window.jQuery && jQuery(':animated').length) return true;
for (const image of document.images) if (!image.complete) return true;
for (const element of document.body.querySelectorAll('*')) {  // icons drawn with CSS content:url(...)
  const url = /url\\("?([^")]*)"?\\)/.exec(getComputedStyle(element).content);
  if (url) { const image = new Image(); image.src = url[1]; if (!image.complete) return true; }
}
return false;
"""
LOADED_JS = ("return !window.agentgymStale && typeof genProblem === 'function' && "
             "!!(window.core && core.cover_div);")
OBSERVE_JS = "return [core.getUtterance(), core.getDOMInfo()];"


def settle(driver) -> None:
    """Wait (at most SETTLE_SECONDS) until the page has not changed for QUIET_SECONDS, jQuery animations are over
    and every image is loaded. Elements get their refs when first seen, so reading a half-drawn page would make the
    same item's ids vary from run to run (and hide what a timer of 0 ms is about to show)."""
    time.sleep(QUIET_SECONDS)
    deadline = time.monotonic() + SETTLE_SECONDS
    while time.monotonic() < deadline and driver.execute_script(BUSY_JS, QUIET_SECONDS * 1000):
        time.sleep(0.02)


def wait_for(driver, script: str, problem: str, seconds: float = 5.0) -> None:
    deadline = time.monotonic() + seconds
    while not driver.execute_script(script):
        if time.monotonic() > deadline:
            raise EnvError(f"miniwob: {problem} within {seconds:.0f} s")
        time.sleep(0.02)
