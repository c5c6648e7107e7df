"""The embedded offline websites behind `envs.make("webarena")`: an online shop (One Stop Market, WebArena's
`shopping`), a discussion forum (Postmill, WebArena's `reddit`) and a homepage, served on 127.0.0.1 by this
package over seeded deterministic data, plus the tasks written in WebArena's config format and their expert plans.

    data.py        the seeded content (products, reviews, orders; forums, users, posts, comments)
    state.py       what an episode changes, kept per episode (cookie `agentgym_episode`)
    shop.py, forum.py, pages.py   the sites (Starlette, plain HTML with forms)
    sites.py       serving them on free loopback ports
    plans.py       what a task is made of: plan steps, `Task`, evaluator specs, shared plan fragments
    templates.py   the intent templates: slot values -> Task
    tasks.py       the tasks by item id: 82 hand-written (ids 0..81) and ~900 generated training tasks (ids from
                   1000, configs built in memory); `python -m agentgym_nb.envs.web.tasks` rewrites
                   agentgym_nb/data/webarena/config_files/ and the item lists
"""
from .sites import SITE_VARIABLES, start, stop
from .state import COOKIE, STORE

__all__ = ["COOKIE", "SITE_VARIABLES", "STORE", "start", "stop"]
