"""Postmill, the offline discussion forum (stands in for WebArena's `reddit` site; same URL shapes).

    /                          front page: top posts, forums
    /forums                    all forums, subscribe / unsubscribe (logged in)
    /f/<forum>                 posts; ?sort=new|top&page=N
    /f/<forum>/<id>            a post, its comments, vote and comment (logged in)
    /submit                    create a post (logged in); ?forum= prefills the forum
    /user/<name>, /user/<name>/edit    profile (posts, comments, biography), edit the biography (own, logged in)
    /search?q=                 post titles containing every query word; ?page=N
    /login, /logout
"""
from __future__ import annotations

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.routing import Route

from . import data
from .pages import (e, episode, form, int_param, link, not_found, paginate, pagination, redirect, shell,
                    text_input, textarea, url)
from .state import Episode, NewComment, NewPost

SITE = "Postmill"
SORTS = {"new": "New", "top": "Top"}


def header(ep: Episode) -> str:
    search = ('<form method="get" action="/search" role="search">'
              '<input type="text" name="q" aria-label="Search query" placeholder="Search"> '
              '<button type="submit">Search</button></form>')
    account = (link(f"/user/{ep.forum_user}", ep.forum_user) + " " + link("/logout", "Log out") if ep.forum_user
               else link("/login", "Log in"))
    nav = f'<nav aria-label="Site">{link("/forums", "Forums")} {link("/submit", "Submit")}</nav>'
    return f'{link("/", SITE)} {nav}{search} {account}'


def page(ep: Episode, title: str, body: str, message: str = ""):
    return shell(f"{title} - {SITE}" if title != SITE else SITE, header(ep), body, message)


def all_posts(ep: Episode) -> list:
    """Seeded posts and this episode's, each as a dict view with the episode's votes and comment counts."""
    views = []
    for p in list(data.posts()) + ep.posts:
        comments = len(getattr(p, "comments", ())) + len(ep.comments.get(p.id, []))
        views.append({"id": p.id, "forum": p.forum, "title": p.title, "author": p.author, "body": p.body,
                      "date": p.date, "score": p.score + ep.votes.get(p.id, 0), "comments": comments})
    return views


def find_post(ep: Episode, forum: str, pid: int) -> dict | None:
    return next((p for p in all_posts(ep) if p["id"] == pid and p["forum"] == forum), None)


def post_rows(posts: list[dict], show_forum: bool = False) -> str:
    rows = []
    for p in posts:
        forum, address = p["forum"], f"/f/{p['forum']}/{p['id']}"
        where = " in " + link(f"/f/{forum}", f"/f/{forum}") if show_forum else ""
        comments = f"{p['comments']} comment" + ("" if p["comments"] == 1 else "s")
        rows.append(f'<li class="submission">{link(address, p["title"])} <span class="meta">Submitted by '
                    f'{link("/user/" + p["author"], p["author"])} on {p["date"]}{where}</span> '
                    f"<span>Score: {p['score']}</span> {link(address, comments, comments + ' on ' + p['title'])}</li>")
    return "<ul>" + "".join(rows) + "</ul>"


def sorted_posts(posts: list[dict], sort: str) -> list[dict]:
    if sort == "top":
        return sorted(posts, key=lambda p: (-p["score"], -p["id"]))
    return sorted(posts, key=lambda p: -p["id"])  # ids grow with time


def subscribed(ep: Episode, forum: str) -> bool:
    """The demo user starts subscribed to books and music."""
    return forum not in ep.unsubscribed and (forum in ep.subscribed or forum in ("books", "music"))


def subscribers(ep: Episode, forum: data.Forum) -> int:
    base = forum.subscribers
    if ep.forum_user:
        base += int(subscribed(ep, forum.name)) - int(forum.name in ("books", "music"))
    return base


async def home(request: Request):
    ep = episode(request)
    top = sorted_posts(all_posts(ep), "top")[:data.PAGE_SIZE]
    forums = "".join(f"<li>{link(f'/f/{f.name}', '/f/' + f.name)}</li>" for f in data.forums())
    body = f"<h1>Top posts</h1>{post_rows(top, show_forum=True)}<h2>Forums</h2><ul>{forums}</ul>"
    return page(ep, SITE, body)


async def forums(request: Request):
    ep = episode(request)
    rows = []
    for f in data.forums():
        toggle = ""
        if ep.forum_user:
            on = subscribed(ep, f.name)
            toggle = form(f"/f/{f.name}/subscribe", f'<input type="hidden" name="on" value="{int(not on)}">',
                          "Unsubscribe" if on else "Subscribe",
                          button_label=f"{'Unsubscribe from' if on else 'Subscribe to'} {f.name}")
        rows.append(f'<li id="forum-{f.name}">{link(f"/f/{f.name}", "/f/" + f.name)} <span>{e(f.description)}</span> '
                    f'<span class="meta">{subscribers(ep, f)} subscribers</span> {toggle}</li>')
    return page(ep, "Forums", f"<h1>All forums</h1><ul>{''.join(rows)}</ul>")


async def subscribe(request: Request):
    ep = episode(request)
    name = request.path_params["forum"]
    if not ep.forum_user:
        return redirect(url("/login", next="/forums"))
    fields = await request.form()
    if fields.get("on") == "1":
        ep.subscribed.add(name)
        ep.unsubscribed.discard(name)
    else:
        ep.unsubscribed.add(name)
        ep.subscribed.discard(name)
    return redirect("/forums")


async def forum_page(request: Request):
    ep = episode(request)
    name = request.path_params["forum"]
    forum = next((f for f in data.forums() if f.name == name), None)
    if forum is None:
        return not_found(SITE, header(ep), f"The forum /f/{name} does not exist.")
    sort = request.query_params.get("sort", "new")
    sort = sort if sort in SORTS else "new"
    posts = sorted_posts([p for p in all_posts(ep) if p["forum"] == name], sort)
    rows, current, pages = paginate(posts, int_param(request, "page"), data.PAGE_SIZE)
    sorts = "Sort by: " + " ".join(f"<strong>{label}</strong>" if key == sort else
                                   link(url(f"/f/{name}", sort=key), label) for key, label in SORTS.items())
    body = (f"<h1>/f/{name}</h1><p>{e(forum.description)} &middot; {subscribers(ep, forum)} subscribers</p>"
            f"<p>{link(url('/submit', forum=name), 'Submit a new post')}</p><p>{sorts}</p>{post_rows(rows)}"
            f"{pagination(f'/f/{name}', current, pages, sort=sort if sort != 'new' else None)}")
    return page(ep, f"/f/{name}", body)


def comments_of(ep: Episode, pid: int) -> list:
    seeded = data.post(pid).comments if data.post(pid) else ()
    return list(seeded) + ep.comments.get(pid, [])


async def post_page(request: Request):
    ep = episode(request)
    forum, pid = request.path_params["forum"], request.path_params["pid"]
    p = find_post(ep, forum, pid)
    if p is None:
        return not_found(SITE, header(ep), "This post does not exist.")
    mine = ep.votes.get(pid, 0)
    vote = (f'<div id="vote" data-my-vote="{mine}"><span>Score: {p["score"]}</span> '
            + form(f"/f/{forum}/{pid}/vote", '<input type="hidden" name="value" value="1">', "Upvote",
                   label="Upvote") + " "
            + form(f"/f/{forum}/{pid}/vote", '<input type="hidden" name="value" value="-1">', "Downvote",
                   label="Downvote") + "</div>")
    comments = comments_of(ep, pid)
    items = "".join(f'<li class="comment"><span class="meta">{link(f"/user/{c.author}", c.author)} commented on '
                    f'{c.date}</span> <span class="comment-text">{e(c.text)}</span> '
                    f'<span class="meta">Score: {c.score}</span></li>' for c in comments)
    if ep.forum_user:
        reply = form(f"/f/{forum}/{pid}/comment", textarea("text", "Comment"), "Post", label="Add a comment")
    else:
        reply = f"<p>{link(url('/login', next=f'/f/{forum}/{pid}'), 'Log in')} to comment.</p>"
    author = link("/user/" + p["author"], p["author"])
    body = (f'<p class="meta">{link(f"/f/{forum}", "/f/" + forum)}</p>'
            f'<h1 class="submission__title">{e(p["title"])}</h1>'
            f'<p class="meta">Submitted by {author} on {p["date"]}</p>'
            f'<p class="submission__body">{e(p["body"])}</p>{vote}'
            f'<h2>{len(comments)} comments</h2>{reply}<ul id="comments">{items}</ul>')
    return page(ep, p["title"], body)


async def vote(request: Request):
    ep = episode(request)
    forum, pid = request.path_params["forum"], request.path_params["pid"]
    if not ep.forum_user:
        return redirect(url("/login", next=f"/f/{forum}/{pid}"))
    fields = await request.form()
    value = 1 if fields.get("value") == "1" else -1
    ep.votes[pid] = 0 if ep.votes.get(pid) == value else value  # voting twice takes the vote back
    return redirect(f"/f/{forum}/{pid}")


async def comment(request: Request):
    ep = episode(request)
    forum, pid = request.path_params["forum"], request.path_params["pid"]
    if not ep.forum_user:
        return redirect(url("/login", next=f"/f/{forum}/{pid}"))
    text = " ".join(str((await request.form()).get("text", "")).split())
    if text and find_post(ep, forum, pid):
        ids = [c.id for p in data.posts() for c in p.comments] + [c.id for cs in ep.comments.values() for c in cs]
        ep.comments.setdefault(pid, []).append(NewComment(max(ids) + 1, ep.forum_user, text, ep.tick()))
    return redirect(f"/f/{forum}/{pid}")


async def submit(request: Request):
    ep = episode(request)
    if not ep.forum_user:
        return redirect(url("/login", next=url("/submit", forum=request.query_params.get("forum"))))
    names = [f.name for f in data.forums()]
    error = ""
    if request.method == "POST":
        fields = await request.form()
        forum = str(fields.get("forum", "")).strip().removeprefix("/f/")
        title, body = " ".join(str(fields.get("title", "")).split()), str(fields.get("body", "")).strip()
        if forum in names and title:
            pid = len(data.posts()) + len(ep.posts) + 1
            ep.posts.append(NewPost(pid, forum, title, ep.forum_user, body, ep.tick()))
            return redirect(f"/f/{forum}/{pid}")
        error = (f'<p class="error" role="alert">Choose one of the forums ({", ".join(names)}) and give a title.</p>')
    fields = (f"<p>{text_input('forum', 'Forum', request.query_params.get('forum', ''))}</p>"
              f"<p>{text_input('title', 'Title')}</p><p>{textarea('body', 'Body')}</p>")
    return page(ep, "Create submission", f"<h1>Create submission</h1>{error}"
                + form(url("/submit", forum=request.query_params.get("forum")), fields, "Create submission"))


async def user_page(request: Request):
    ep = episode(request)
    name = request.path_params["name"]
    u = data.user(name)
    if u is None:
        return not_found(SITE, header(ep), f"There is no user {name}.")
    posts = sorted_posts([p for p in all_posts(ep) if p["author"] == name], "new")
    comments = [(p, c) for p in all_posts(ep) for c in comments_of(ep, p["id"]) if c.author == name]
    comment_rows = "".join(f"<li>On {link('/f/%s/%d' % (p['forum'], p['id']), p['title'])}: {e(c.text)}</li>"
                           for p, c in comments)
    bio = ep.bio if (name == data.DEMO_USER and ep.bio is not None) else u.bio
    edit = (f"<p>{link(f'/user/{name}/edit', 'Edit biography')}</p>" if ep.forum_user == name else "")
    body = (f"<h1>/u/{name}</h1><p>Registered {u.joined}</p><h2>Biography</h2><p id=\"bio\">{e(bio)}</p>{edit}"
            f"<h2>Submissions ({len(posts)})</h2>{post_rows(posts, show_forum=True)}"
            f"<h2>Comments ({len(comments)})</h2><ul>{comment_rows}</ul>")
    return page(ep, f"/u/{name}", body)


async def user_edit(request: Request):
    ep = episode(request)
    name = request.path_params["name"]
    if ep.forum_user != name:
        return redirect(url("/login", next=f"/user/{name}/edit"))
    if request.method == "POST":
        ep.bio = " ".join(str((await request.form()).get("bio", "")).split())
        return redirect(f"/user/{name}")
    current = ep.bio if ep.bio is not None else data.user(name).bio
    return page(ep, "Edit biography", "<h1>Edit biography</h1>"
                + form(f"/user/{name}/edit", textarea("bio", "Biography", current), "Save"))


async def search(request: Request):
    ep = episode(request)
    query = request.query_params.get("q", "").strip()
    words = query.lower().split()
    found = sorted_posts([p for p in all_posts(ep) if words and all(w in p["title"].lower() for w in words)], "new")
    rows, current, pages = paginate(found, int_param(request, "page"), data.PAGE_SIZE)
    shown = f"<p>{len(found)} results</p>" if found else "<p>No results.</p>"
    body = (f"<h1>Search results for '{e(query)}'</h1>{shown}{post_rows(rows, show_forum=True)}"
            f"{pagination('/search', current, pages, q=query)}")
    return page(ep, "Search", body)


async def login(request: Request):
    ep = episode(request)
    target = request.query_params.get("next", "/")
    target = target if target.startswith("/") and not target.startswith("//") else "/"
    error = ""
    if request.method == "POST":
        fields = await request.form()
        if str(fields.get("username", "")).strip() == data.DEMO_USER and fields.get("password") == data.DEMO_PASSWORD:
            ep.forum_user = data.DEMO_USER
            return redirect(target)
        error = '<p class="error" role="alert">Bad credentials.</p>'
    fields = f"<p>{text_input('username', 'Username')}</p><p>{text_input('password', 'Password', kind='password')}</p>"
    return page(ep, "Log in", f"<h1>Log in</h1>{error}" + form(url("/login", next=target), fields, "Log in"))


async def logout(request: Request):
    episode(request).forum_user = None
    return redirect("/")


def app() -> Starlette:
    return Starlette(routes=[
        Route("/", home), Route("/forums", forums), Route("/f/{forum}", forum_page),
        Route("/f/{forum}/subscribe", subscribe, methods=["POST"]),
        Route("/f/{forum}/{pid:int}", post_page), Route("/f/{forum}/{pid:int}/", post_page),
        Route("/f/{forum}/{pid:int}/vote", vote, methods=["POST"]),
        Route("/f/{forum}/{pid:int}/comment", comment, methods=["POST"]),
        Route("/submit", submit, methods=["GET", "POST"]), Route("/user/{name}", user_page),
        Route("/user/{name}/edit", user_edit, methods=["GET", "POST"]), Route("/search", search),
        Route("/login", login, methods=["GET", "POST"]), Route("/logout", logout),
    ])
