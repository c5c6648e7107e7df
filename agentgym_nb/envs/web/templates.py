"""The offline WebArena tasks' intent templates: one function per template, from slot values to a Task.

Three kinds, as in WebArena: information seeking (answer checked by string_match), navigation (the final page
checked by url_match) and content changing (the site's state checked by program_html after the episode). Horizons
range from two actions (search, answer) to fifteen (edit three address fields; read a price in the shop and post it
on the forum). The hand-written tasks and the generated training tasks are both made by calling these functions, so
an instance is evaluated and played by the expert the same way whichever list it is in.
"""
from __future__ import annotations

import urllib.parse

from . import data
from .plans import (BOTH_LOGIN, FORUM, FORUM_LOGIN, HOME, LAST_COMMENT, SHOP, SHOP_LOGIN, SHOWN_HOME, Click, Goto,
                    Read, Replace, Stop, Task, Type, answer_eval, cart_qty, cheapest, dearest,
                    find_post, find_product, html_eval, money, my_orders, newest_post, open_category, open_forum,
                    order_page, search_post, top_post, top_rated, url_eval)


def shop_task(template_id, intent, slots, evaluation, plan, login=None) -> Task:
    return Task(template_id, intent, slots, ("shopping",), SHOP, evaluation, tuple(plan), login)


def forum_task(template_id, intent, slots, evaluation, plan, login=None) -> Task:
    return Task(template_id, intent, slots, ("reddit",), FORUM, evaluation, tuple(plan), login)


def price(p: data.Product) -> Task:
    return shop_task(0, "What is the price of the {{product}}?", {"product": p.name},
                     answer_eval(money(p.price), must=[f"{p.price:,.2f}"]), find_product(p) + [Stop(money(p.price))])


def sku(p: data.Product) -> Task:
    return shop_task(1, "What is the SKU of the {{product}}?", {"product": p.name}, answer_eval(p.sku, exact=p.sku),
                     find_product(p) + [Stop(p.sku)])


def review_count(p: data.Product) -> Task:
    n = str(len(p.reviews))
    return shop_task(2, "How many reviews does the {{product}} have?", {"product": p.name}, answer_eval(n, must=[n]),
                     find_product(p) + [Stop(n)])


def cheapest_in(category: str) -> Task:
    p = cheapest(category)
    return shop_task(3, "What is the cheapest product in the {{category}} category?", {"category": category},
                     answer_eval(p.name, must=[p.name]),
                     open_category(category) + [Click("link", "Price: low to high",
                                                      "Sorting by price puts the cheapest first."), Stop(p.name)])


def dearest_in(category: str) -> Task:
    p = dearest(category)
    return shop_task(4, "What is the most expensive product in the {{category}} category?", {"category": category},
                     answer_eval(p.name, must=[p.name]),
                     open_category(category) + [Click("link", "Price: high to low",
                                                      "This sort puts the dearest first."), Stop(p.name)])


def count_under_20(category: str) -> Task:
    n = str(sum(p.price < 20 for p in data.products() if p.category == category))
    return shop_task(5, "How many products in the {{category}} category cost less than $20?", {"category": category},
                     answer_eval(n, must=[n]),
                     open_category(category) + [Click("link", "Price: low to high", "The cheap ones come first."),
                                                Stop(n)])


def latest_reviewer(p: data.Product) -> Task:
    author = p.reviews[0].author
    return shop_task(6, "Who wrote the most recent review of the {{product}}?", {"product": p.name},
                     answer_eval(author, must=[author]), find_product(p) + [Read(author), Stop(author)])


def order_total(o: data.Order) -> Task:
    return shop_task(7, "What was the grand total of my order #{{number}}?", {"number": o.number},
                     answer_eval(money(o.total), must=[f"{o.total:,.2f}"]),
                     my_orders(order_page(o)) + [Read(f"#{o.number}"), Stop(money(o.total))], login=SHOP_LOGIN)


def orders_in_year(year: int) -> Task:
    placed = [o for o in data.orders() if o.date.startswith(str(year))]
    count = str(len(placed))
    return shop_task(8, "How many orders did I place in {{year}}?", {"year": year}, answer_eval(count, must=[count]),
                     my_orders(order_page(placed[0]), f"{year} orders are older.") + [Stop(count)], login=SHOP_LOGIN)


def phone_number() -> Task:
    phone = data.CUSTOMER.phone
    return shop_task(9, "What is the phone number on my account?", {}, answer_eval(phone, must=[phone]),
                     [Click("link", "My Account", "My contact details are there."), Stop(phone)], login=SHOP_LOGIN)


def best_rated_in(category: str) -> Task:
    p = top_rated(category)
    return shop_task(10, "Which product of the {{category}} category has the best rating?", {"category": category},
                     answer_eval(p.name, must=[p.name]),
                     open_category(category) + [Click("link", "Rating", "Sorting by rating puts the best first."),
                                                Stop(p.name)])


def category_by_price(category: str) -> Task:
    return shop_task(11, "Show me the products of the {{category}} category sorted by price from low to high.",
                     {"category": category}, url_eval(f"{SHOP}/category/{data.slug(category)}?sort=price"),
                     open_category(category) + [Click("link", "Price: low to high"), Stop()])


def search_page_two(query: str) -> Task:
    return shop_task(12, "Show me the second page of the search results for '{{query}}'.", {"query": query},
                     url_eval(f"{SHOP}/search?q={urllib.parse.quote_plus(query)}&page=2"),
                     [Type("textbox", "Search products", query), Click("link", "Page 2"), Stop()])


def product_page(p: data.Product) -> Task:
    return shop_task(13, "Open the product page of the {{product}}.", {"product": p.name},
                     url_eval(f"{SHOP}/product/{p.id}"), find_product(p) + [Stop()])


def order_history() -> Task:
    return shop_task(14, "Show me my order history.", {}, url_eval(f"{SHOP}/account/orders"), my_orders() + [Stop()],
                     login=SHOP_LOGIN)


def order_details(o: data.Order) -> Task:
    return shop_task(15, "Open the details of my order #{{number}}.", {"number": o.number},
                     url_eval(f"{SHOP}/orders/{o.number}"),
                     my_orders(order_page(o)) + [Click("link", f"View Order #{o.number}"), Stop()], login=SHOP_LOGIN)


def account_edit_page() -> Task:
    return shop_task(16, "Go to the page where I can edit my account information.", {},
                     url_eval(f"{SHOP}/account/edit"),
                     [Click("link", "My Account"), Click("link", "Edit Account Information"), Stop()], login=SHOP_LOGIN)


def add_to_cart(p: data.Product) -> Task:
    return shop_task(17, "Add the {{product}} to my shopping cart.", {"product": p.name}, html_eval(cart_qty(p, 1)),
                     find_product(p) + [Click("button", "Add to Cart"), Stop()])


def add_units(p: data.Product, qty: int) -> Task:
    return shop_task(18, "Add {{quantity}} units of the {{product}} to my shopping cart.",
                     {"quantity": qty, "product": p.name}, html_eval(cart_qty(p, qty)),
                     find_product(p) + [Replace("textbox", "Qty", str(qty), enter=True), Stop()])


def buy(p: data.Product) -> Task:
    placed = "000000188"  # the first order placed in an episode (checkout numbers them after the seeded 187)
    return shop_task(19, "Buy the {{product}}.", {"product": p.name},
                     html_eval((f"{SHOP}/account/orders", "document.querySelector('#orders li').outerText",
                                {"must_include": [placed, p.name]})),
                     find_product(p) + [Click("button", "Add to Cart"), Click("link", "Proceed to Checkout"),
                                        Click("button", "Place Order"), Stop()], login=SHOP_LOGIN)


def change_phone(phone: str) -> Task:
    return shop_task(20, "Change the phone number on my account to {{phone}}.", {"phone": phone},
                     html_eval((f"{SHOP}/account", "document.querySelector('#phone').outerText",
                                {"exact_match": phone})),
                     [Click("link", "My Account"), Click("link", "Edit Account Information"),
                      Replace("textbox", "Phone Number", phone, enter=True), Stop()], login=SHOP_LOGIN)


def update_address(street: str, city: str, zip_code: str) -> Task:
    return shop_task(21, "Update my shipping address to {{street}}, {{city}} {{zip}}.",
                     {"street": street, "city": city, "zip": zip_code},
                     html_eval((f"{SHOP}/account", "document.querySelector('#address').outerText",
                                {"must_include": [street, city, zip_code]})),
                     [Click("link", "My Account"), Click("link", "Edit Account Information"),
                      Replace("textbox", "Street Address", street), Replace("textbox", "City", city),
                      Replace("textbox", "Zip Code", zip_code, enter=True), Stop()], login=SHOP_LOGIN)


def write_review(p: data.Product, stars: int, title: str, text: str) -> Task:
    return shop_task(22, "Write a {{stars}}-star review of the {{product}} with the summary '{{title}}' and the text "
                     "'{{text}}'.", {"stars": stars, "product": p.name, "title": title, "text": text},
                     html_eval((f"{SHOP}/product/{p.id}", "document.querySelector('#reviews .review').outerText",
                                {"must_include": [title, text, f"{stars} stars by Emma Lopez"]})),
                     find_product(p) + [Click("radio", f"{stars} stars", f"That gives {stars} stars."),
                                        Type("textbox", "Summary", title, enter=False),
                                        Type("textbox", "Review", text, enter=False), Click("button", "Submit Review"),
                                        Stop()], login=SHOP_LOGIN)


def add_cheapest(category: str) -> Task:
    p = cheapest(category)
    return shop_task(23, "Add the cheapest product of the {{category}} category to my shopping cart.",
                     {"category": category}, html_eval(cart_qty(p, 1)),
                     open_category(category) + [Click("link", "Price: low to high"),
                                                Click("link", p.name, "It is the cheapest."),
                                                Click("button", "Add to Cart"), Stop()])


def sign_in_then_status() -> Task:
    o, c = data.orders()[0], data.CUSTOMER
    return shop_task(24, "Sign in to One Stop Market with the email {{email}} and the password {{password}}, then "
                     "tell me the status of my most recent order.", {"email": c.email, "password": c.password},
                     answer_eval(o.status, must=[o.status]),
                     [Click("link", "Sign In"), Type("textbox", "Email", c.email, enter=False),
                      Type("textbox", "Password", c.password), Click("link", "My Orders"), Stop(o.status)])


def who_posted(p: data.Post) -> Task:
    return forum_task(30, "Who posted '{{title}}' on Postmill?", {"title": p.title},
                      answer_eval(p.author, must=[p.author]), search_post(p) + [Stop(p.author)])


def comment_count(p: data.Post) -> Task:
    n = str(len(p.comments))
    return forum_task(31, "How many comments does the post '{{title}}' have?", {"title": p.title},
                      answer_eval(n, must=[n]), search_post(p) + [Stop(n)])


def newest_title(forum: str) -> Task:
    p = newest_post(forum)
    return forum_task(32, "What is the title of the newest post in /f/{{forum}}?", {"forum": forum},
                      answer_eval(p.title, must=[p.title]), open_forum(forum) + [Stop(p.title)])


def top_score(forum: str) -> Task:
    p = top_post(forum)
    return forum_task(33, "What is the score of the highest-scoring post in /f/{{forum}}?", {"forum": forum},
                      answer_eval(str(p.score), must=[str(p.score)]),
                      open_forum(forum) + [Click("link", "Top", "Sorting by score puts the best post first."),
                                           Stop(str(p.score))])


def author_joined(p: data.Post) -> Task:
    joined = data.user(p.author).joined
    return forum_task(34, "When did the author of the post '{{title}}' register on Postmill?", {"title": p.title},
                      answer_eval(joined, must=[joined]),
                      find_post(p) + [Click("link", p.author, "The author's profile shows the registration date."),
                                      Stop(joined)])


def author_post_count(p: data.Post) -> Task:
    n = str(sum(q.author == p.author for q in data.posts()))
    return forum_task(35, "How many posts has the author of '{{title}}' submitted?", {"title": p.title},
                      answer_eval(n, must=[n]),
                      find_post(p) + [Click("link", p.author, "The profile lists the submissions."), Stop(n)])


def user_comment(p: data.Post, c: data.Comment) -> Task:
    return forum_task(36, "What did {{user}} comment on the post '{{title}}'?", {"user": c.author, "title": p.title},
                      answer_eval(c.text, must=[c.text]), find_post(p) + [Read(c.text), Stop(c.text)])


def biggest_forum() -> Task:
    biggest = max(data.forums(), key=lambda f: f.subscribers)
    return forum_task(37, "Which forum on Postmill has the most subscribers?", {},
                      answer_eval(biggest.name, must=[biggest.name]),
                      [Click("link", "Forums", "The forum list shows subscriber counts."), Stop(biggest.name)])


def post_score(p: data.Post) -> Task:
    return forum_task(38, "What is the score of the post '{{title}}'?", {"title": p.title},
                      answer_eval(str(p.score), must=[str(p.score)]), search_post(p) + [Stop(str(p.score))])


def visit_forum(forum: str) -> Task:
    return forum_task(39, "Open the /f/{{forum}} forum.", {"forum": forum}, url_eval(f"{FORUM}/f/{forum}"),
                      open_forum(forum) + [Stop()])


def top_posts(forum: str) -> Task:
    return forum_task(40, "Show me the top posts of /f/{{forum}}.", {"forum": forum},
                      url_eval(f"{FORUM}/f/{forum}?sort=top"), open_forum(forum) + [Click("link", "Top"), Stop()])


def third_page(forum: str) -> Task:
    return forum_task(41, "Show me the third page of /f/{{forum}}.", {"forum": forum},
                      url_eval(f"{FORUM}/f/{forum}?page=3"), open_forum(forum) + [Click("link", "Page 3"), Stop()])


def poster_profile(p: data.Post) -> Task:
    return forum_task(42, "Open the profile page of the user who posted '{{title}}'.", {"title": p.title},
                      url_eval(f"{FORUM}/user/{p.author}"), find_post(p) + [Click("link", p.author), Stop()])


def open_post(p: data.Post) -> Task:
    return forum_task(43, "Open the post '{{title}}'.", {"title": p.title}, url_eval(f"{FORUM}/f/{p.forum}/{p.id}"),
                      find_post(p) + [Stop()])


def search_forum(query: str) -> Task:
    return forum_task(44, "Show me the search results for '{{query}}' on Postmill.", {"query": query},
                      url_eval(f"{FORUM}/search?q={urllib.parse.quote_plus(query)}"),
                      [Type("textbox", "Search query", query), Stop()])


def comment_on(p: data.Post, text: str) -> Task:
    return forum_task(45, "Post a comment '{{text}}' on the post '{{title}}'.", {"text": text, "title": p.title},
                      html_eval((f"{FORUM}/f/{p.forum}/{p.id}", LAST_COMMENT,
                                 {"must_include": [data.DEMO_USER, text]})),
                      find_post(p) + [Type("textbox", "Comment", text, enter=False), Click("button", "Post"), Stop()],
                      login=FORUM_LOGIN)


def vote(p: data.Post, up: bool) -> Task:
    word = "Upvote" if up else "Downvote"
    return forum_task(46 if up else 47, f"{word} the post '{{{{title}}}}'.", {"title": p.title},
                      html_eval((f"{FORUM}/f/{p.forum}/{p.id}", "document.querySelector('#vote').dataset.myVote",
                                 {"exact_match": "1" if up else "-1"})),
                      find_post(p) + [Click("button", word), Stop()], login=FORUM_LOGIN)


def create_post(forum: str, title: str, body: str) -> Task:
    return forum_task(48, "Create a post in /f/{{forum}} titled '{{title}}' with the body '{{body}}'.",
                      {"forum": forum, "title": title, "body": body},
                      html_eval(("func:reddit_get_post_url('__last_url__')",
                                 "document.querySelector('.submission__title').outerText", {"exact_match": title}),
                                ("last", "document.querySelector('.submission__body').outerText",
                                 {"must_include": [body]})),
                      open_forum(forum) + [Click("link", "Submit a new post"),
                                           Type("textbox", "Title", title, enter=False),
                                           Type("textbox", "Body", body, enter=False),
                                           Click("button", "Create submission"), Stop()], login=FORUM_LOGIN)


def change_bio(bio: str) -> Task:
    user = data.DEMO_USER
    return forum_task(49, "Change my Postmill biography to '{{bio}}'.", {"bio": bio},
                      html_eval((f"{FORUM}/user/{user}", "document.querySelector('#bio').outerText",
                                 {"exact_match": bio})),
                      [Click("link", user, "My profile has the biography."), Click("link", "Edit biography"),
                       Replace("textbox", "Biography", bio), Click("button", "Save"), Stop()], login=FORUM_LOGIN)


def subscribe(forum: str) -> Task:
    return forum_task(50, "Subscribe to /f/{{forum}}.", {"forum": forum},
                      html_eval((f"{FORUM}/forums", f"document.querySelector('#forum-{forum} button').outerText",
                                 {"exact_match": "Unsubscribe"})),
                      [Click("link", "Forums"), Click("button", f"Subscribe to {forum}"), Stop()], login=FORUM_LOGIN)


def unsubscribe(forum: str) -> Task:
    return forum_task(51, "Unsubscribe from /f/{{forum}}.", {"forum": forum},
                      html_eval((f"{FORUM}/forums", f"document.querySelector('#forum-{forum} button').outerText",
                                 {"exact_match": "Subscribe"})),
                      [Click("link", "Forums"), Click("button", f"Unsubscribe from {forum}"), Stop()],
                      login=FORUM_LOGIN)


def login_and_upvote(p: data.Post) -> Task:
    user, password = data.DEMO_USER, data.DEMO_PASSWORD
    return forum_task(52, "Log in to Postmill as {{user}} with the password {{password}} and upvote the post "
                      "'{{title}}'.", {"user": user, "password": password, "title": p.title},
                      html_eval((f"{FORUM}/f/{p.forum}/{p.id}", "document.querySelector('#vote').dataset.myVote",
                                 {"exact_match": "1"})),
                      [Click("link", "Log in"), Type("textbox", "Username", user, enter=False),
                       Type("textbox", "Password", password)] + find_post(p) + [Click("button", "Upvote"), Stop()])


def price_comment(p: data.Product, post: data.Post) -> Task:
    """Shop + forum, from the homepage: read a price, post it as a comment."""
    plan = ([Click("link", "One Stop Market", "The price is in the shop.")] + find_product(p)
            + [Goto(SHOWN_HOME, "The forum is listed on the homepage."), Click("link", "Postmill")]
            + find_post(post) + [Type("textbox", "Comment", money(p.price), enter=False), Click("button", "Post"),
                                 Stop()])
    return Task(60, "Find the price of the {{product}} on One Stop Market, then comment on the Postmill post "
                "'{{title}}' with just that price (for example $9.99).", {"product": p.name, "title": post.title},
                ("shopping", "reddit"), HOME,
                html_eval((f"{FORUM}/f/{post.forum}/{post.id}", LAST_COMMENT,
                           {"must_include": [data.DEMO_USER, f"{p.price:,.2f}"]})), tuple(plan), BOTH_LOGIN)


def recommend_best_kitchen() -> Task:
    p = top_rated("Kitchen")
    title = f"Recommendation: {p.name}"
    plan = ([Click("link", "One Stop Market"), Click("link", "Kitchen"),
             Click("link", "Rating", "The best rated product comes first."), Goto(SHOWN_HOME),
             Click("link", "Postmill")]
            + open_forum("cooking") + [Click("link", "Submit a new post"), Type("textbox", "Title", title, enter=False),
                                       Type("textbox", "Body", money(p.price), enter=False),
                                       Click("button", "Create submission"), Stop()])
    return Task(61, "Create a post in /f/cooking titled 'Recommendation: <name>' for the best-rated product of "
                "One Stop Market's Kitchen category, with the product's price (like $9.99) as the body.", {},
                ("shopping", "reddit"), HOME,
                html_eval(("func:reddit_get_post_url('__last_url__')",
                           "document.querySelector('.submission__title').outerText", {"exact_match": title}),
                          ("last", "document.querySelector('.submission__body').outerText",
                           {"must_include": [f"{p.price:,.2f}"]})), tuple(plan), BOTH_LOGIN)


def price_difference(x: data.Product, y: data.Product) -> Task:
    """Look both up (in this order); the intent names the dearer one first."""
    a, b = sorted((x, y), key=lambda q: -q.price)
    difference = money(round(a.price - b.price, 2))
    return Task(62, "How much more does the {{first}} cost than the {{second}} on One Stop Market?",
                {"first": a.name, "second": b.name}, ("shopping",), HOME,
                answer_eval(difference, must=[difference[1:]]),
                tuple([Click("link", "One Stop Market")] + find_product(x) + find_product(y) + [Stop(difference)]))

