"""One Stop Market, the offline shop (stands in for WebArena's `shopping` site).

    /                          home: categories, featured products
    /category/<slug>           listing; ?sort=position|name|price|price_desc|rating&page=N
    /search?q=                 product search (every query word in the name); ?page=N
    /product/<id>              details, add to cart, reviews, write a review (signed in)
    /cart, /checkout           cart (remove items), place an order (signed in)
    /account, /account/edit    profile (signed in), edit it
    /account/orders, /orders/<number>   order history (paginated) and one order
    /account/login, /account/logout
"""
from __future__ import annotations

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.routing import Route

from . import data
from .pages import (e, episode, form, int_param, link, not_found, paginate, pagination, redirect, shell,
                    text_input, textarea, url)
from .state import Episode, NewOrder, NewReview

SITE = "One Stop Market"
SORTS = {"position": ("Position", lambda p: p.id), "name": ("Name", lambda p: p.name),
         "price": ("Price: low to high", lambda p: p.price), "price_desc": ("Price: high to low", lambda p: -p.price),
         "rating": ("Rating", lambda p: (-p.rating, p.id))}
SHIPPING = 5.0


def money(value: float) -> str:
    return f"${value:,.2f}"


def header(ep: Episode) -> str:
    categories = " ".join(link(f"/category/{data.slug(c)}", c) for c in data.CATEGORIES)
    count = sum(ep.cart.values())
    account = (link("/account", "My Account") + " " + link("/account/logout", "Sign Out") if ep.shop_user
               else link("/account/login", "Sign In"))
    search = ('<form method="get" action="/search" role="search">'
              '<input type="text" name="q" aria-label="Search products" placeholder="Search products"> '
              '<button type="submit">Search</button></form>')
    return (f'{link("/", SITE)} <nav aria-label="Categories">{categories}</nav>{search} '
            f'{link("/cart", f"My Cart ({count})")} {account}')


def page(ep: Episode, title: str, body: str, message: str = ""):
    return shell(f"{title} | {SITE}" if title != SITE else SITE, header(ep), body, message)


def product_rows(products) -> str:
    rows = []
    for p in products:
        reviews = f"{len(p.reviews)} review" + ("" if len(p.reviews) == 1 else "s")
        rows.append(f'<li data-sku="{p.sku}">{link(f"/product/{p.id}", p.name)} <span>{money(p.price)}</span> '
                    f'<span class="meta">Rating {p.rating} ({reviews})</span></li>')
    return "<ul>" + "".join(rows) + "</ul>"


def listing(ep: Episode, title: str, path: str, products: list, request: Request, sort_links: bool, **query):
    sort = request.query_params.get("sort", "position")
    if sort not in SORTS:
        sort = "position"
    products = sorted(products, key=SORTS[sort][1])
    rows, current, pages = paginate(products, int_param(request, "page"), data.PAGE_SIZE)
    first = (current - 1) * data.PAGE_SIZE + 1
    shown = (f"<p>Items {first}-{first + len(rows) - 1} of {len(products)}</p>" if products
             else "<p>Your search returned no results.</p>")
    sorts = ""
    if sort_links:
        sorts = ('<p>Sort by: ' + " ".join(
            f"<strong>{e(label)}</strong>" if key == sort else link(url(path, **query, sort=key), label)
            for key, (label, _) in SORTS.items()) + "</p>")
    keep = {**query, "sort": sort if sort != "position" else None}
    body = f"<h1>{e(title)}</h1>{shown}{sorts}{product_rows(rows)}{pagination(path, current, pages, **keep)}"
    return page(ep, title, body)


async def home(request: Request):
    ep = episode(request)
    counts = {c: sum(p.category == c for p in data.products()) for c in data.CATEGORIES}
    categories = "".join(f"<li>{link(f'/category/{data.slug(c)}', c)} ({n} products)</li>" for c, n in counts.items())
    featured = [next(p for p in data.products() if p.category == c) for c in data.CATEGORIES]
    body = (f"<h1>Welcome to {SITE}</h1><h2>Shop by category</h2><ul>{categories}</ul>"
            f"<h2>Featured products</h2>{product_rows(featured)}")
    return page(ep, SITE, body)


async def category(request: Request):
    ep = episode(request)
    names = {data.slug(c): c for c in data.CATEGORIES}
    name = names.get(request.path_params["slug"])
    if name is None:
        return not_found(SITE, header(ep), f"There is no category {request.path_params['slug']!r}.")
    products = [p for p in data.products() if p.category == name]
    return listing(ep, name, f"/category/{request.path_params['slug']}", products, request, sort_links=True)


async def search(request: Request):
    ep = episode(request)
    query = request.query_params.get("q", "").strip()
    words = query.lower().split()
    found = [p for p in data.products() if words and all(w in p.name.lower() for w in words)]
    return listing(ep, f"Search results for: '{query}'", "/search", found, request, sort_links=False, q=query)


def reviews_of(ep: Episode, p: data.Product) -> list:
    """Newest first: this episode's reviews, then the seeded ones."""
    return list(reversed(ep.reviews.get(p.id, []))) + list(p.reviews)


async def product_page(request: Request):
    ep = episode(request)
    p = data.product(request.path_params["pid"])
    if p is None:
        return not_found(SITE, header(ep), "We can't find the product you are looking for.")
    reviews = reviews_of(ep, p)
    rating = round(sum(r.rating for r in reviews) / len(reviews), 1) if reviews else 0.0
    add = form("/cart/add", f'<input type="hidden" name="product_id" value="{p.id}">'
               + text_input("qty", "Qty", "1"), "Add to Cart", label="Add to cart")
    review_items = "".join(
        f'<li class="review"><strong>{e(r.title)}</strong> <span class="meta">{r.rating} stars by {e(r.author)} on '
        f"{r.date}</span><p>{e(r.text)}</p></li>" for r in reviews)
    same = [q for q in data.products() if q.category == p.category and q.id != p.id]
    related = [same[(p.id + k) % len(same)] for k in range(4)]
    if ep.shop_user:
        stars = " ".join(f'<label><input type="radio" name="rating" value="{n}"{" checked" if n == 5 else ""}>'
                         f"{n} stars</label>" for n in range(1, 6))
        write = form(f"/product/{p.id}/review", f"<p>Your rating: {stars}</p><p>{text_input('title', 'Summary')}"
                     f"</p><p>{textarea('text', 'Review')}</p>", "Submit Review", label="Write a review")
    else:
        write = f"<p>Please {link(url('/account/login', next=f'/product/{p.id}'), 'sign in')} to write a review.</p>"
    body = (f'<p class="meta">{link("/", "Home")} &gt; {link(f"/category/{data.slug(p.category)}", p.category)}</p>'
            f'<h1 id="product-name">{e(p.name)}</h1><p id="price">Price: {money(p.price)}</p>'
            f'<p>SKU: {p.sku}</p><p>Rating: {rating} out of 5 ({len(reviews)} reviews)</p>{add}'
            f"<h2>Details</h2><p>{e(p.description)}</p><h2>Related products</h2>{product_rows(related)}"
            f'<h2>Reviews ({len(reviews)})</h2><ul id="reviews">{review_items}</ul><h2>Write a review</h2>{write}')
    return page(ep, p.name, body)


async def add_review(request: Request):
    ep = episode(request)
    p = data.product(request.path_params["pid"])
    if p is None:
        return redirect("/")
    if not ep.shop_user:
        return redirect(url("/account/login", next=f"/product/{p.id}"))
    fields = await request.form()
    rating = int(fields.get("rating", "5")) if str(fields.get("rating", "5")).isdigit() else 5
    customer = ep.customer()
    review = NewReview(f"{customer['first_name']} {customer['last_name']}", min(max(rating, 1), 5),
                       str(fields.get("title", "")).strip() or "Review", str(fields.get("text", "")).strip(),
                       ep.tick()[:10])
    ep.reviews.setdefault(p.id, []).append(review)
    return redirect(f"/product/{p.id}")


async def cart_add(request: Request):
    ep = episode(request)
    fields = await request.form()
    p = data.product(int(fields.get("product_id", 0)) if str(fields.get("product_id", "")).isdigit() else 0)
    if p is None:
        return redirect("/cart")
    qty = str(fields.get("qty", "1")).strip()
    ep.cart[p.id] = ep.cart.get(p.id, 0) + (int(qty) if qty.isdigit() and int(qty) > 0 else 1)
    return redirect("/cart?added=" + str(p.id))


async def cart_remove(request: Request):
    ep = episode(request)
    fields = await request.form()
    pid = int(fields.get("product_id", 0)) if str(fields.get("product_id", "")).isdigit() else 0
    ep.cart.pop(pid, None)
    return redirect("/cart")


def cart_total(ep: Episode) -> float:
    return round(sum(data.product(pid).price * qty for pid, qty in ep.cart.items()), 2)


async def cart(request: Request):
    ep = episode(request)
    added = data.product(int_param(request, "added", 0))
    message = f"You added {added.name} to your shopping cart." if added and added.id in ep.cart else ""
    if not ep.cart:
        return page(ep, "Shopping Cart", "<h1>Shopping Cart</h1><p>You have no items in your shopping cart.</p>",
                    message)
    items = []
    for pid, qty in ep.cart.items():
        p = data.product(pid)
        remove = form("/cart/remove", f'<input type="hidden" name="product_id" value="{pid}">', "Remove",
                      button_label=f"Remove {p.name}")
        items.append(f'<li class="cart-item" data-sku="{p.sku}">{link(f"/product/{pid}", p.name)} '
                     f'<span>Qty: <span class="qty">{qty}</span></span> <span>Price: {money(p.price)}</span> '
                     f"<span>Subtotal: {money(p.price * qty)}</span> {remove}</li>")
    body = (f'<h1>Shopping Cart</h1><ul id="cart">{"".join(items)}</ul>'
            f"<p>Subtotal: {money(cart_total(ep))}</p>{link('/checkout', 'Proceed to Checkout')}")
    return page(ep, "Shopping Cart", body, message)


def ship_to(ep: Episode) -> str:
    c = ep.customer()
    return f"{c['first_name']} {c['last_name']}, {c['street']}, {c['city']} {c['zip_code']}"


async def checkout(request: Request):
    ep = episode(request)
    if not ep.shop_user:
        return redirect(url("/account/login", next="/checkout"))
    if request.method == "POST":
        if not ep.cart:
            return redirect("/cart")
        number = f"{188 + len(ep.orders):09d}"
        total = round(cart_total(ep) + SHIPPING, 2)
        ep.orders.append(NewOrder(number, ep.tick()[:10], tuple(ep.cart.items()), total, ship_to(ep)))
        ep.cart.clear()
        return redirect(f"/orders/{number}?placed=1")
    if not ep.cart:
        return redirect("/cart")
    lines = "".join(f"<li>{e(data.product(pid).name)} x {qty}</li>" for pid, qty in ep.cart.items())
    body = (f"<h1>Checkout</h1><h2>Shipping address</h2><p>{e(ship_to(ep))}</p><h2>Items</h2><ul>{lines}</ul>"
            f"<p>Shipping: {money(SHIPPING)}</p><p>Order total: {money(cart_total(ep) + SHIPPING)}</p>"
            + form("/checkout", "", "Place Order"))
    return page(ep, "Checkout", body)


def all_orders(ep: Episode) -> list:
    """Newest first: this episode's orders, then the seeded history."""
    return list(reversed(ep.orders)) + list(data.orders())


async def orders(request: Request):
    ep = episode(request)
    if not ep.shop_user:
        return redirect(url("/account/login", next="/account/orders"))
    rows, current, pages = paginate(all_orders(ep), int_param(request, "page"), data.PAGE_SIZE)
    items = []
    for o in rows:
        names = ", ".join(data.product(pid).name for pid, _ in o.items)
        view = link(f"/orders/{o.number}", "View Order", f"View Order #{o.number}")
        items.append(f"<li>Order #{o.number} <span>Date: {o.date}</span> <span>Order Total: {money(o.total)}</span> "
                     f'<span>Status: {o.status}</span> <span class="meta">Items: {e(names)}</span> {view}</li>')
    body = f'<h1>My Orders</h1><ul id="orders">{"".join(items)}</ul>{pagination("/account/orders", current, pages)}'
    return page(ep, "My Orders", body)


async def order(request: Request):
    ep = episode(request)
    if not ep.shop_user:
        return redirect(url("/account/login", next=request.url.path))
    found = next((o for o in all_orders(ep) if o.number == request.path_params["number"]), None)
    if found is None:
        return not_found(SITE, header(ep), "This order does not exist.")
    items = "".join(f'<li>{link(f"/product/{pid}", data.product(pid).name)} <span>Qty: {qty}</span> '
                    f"<span>Price: {money(data.product(pid).price)}</span></li>" for pid, qty in found.items)
    thanks = f"Thank you for your purchase! Your order number is {found.number}." if request.query_params.get(
        "placed") else ""
    body = (f'<h1>Order #{found.number}</h1><p>Status: {found.status}</p><p>Order Date: {found.date}</p>'
            f'<h2>Items Ordered</h2><ul id="order-items">{items}</ul><p>Grand Total: {money(found.total)}</p>')
    return page(ep, f"Order #{found.number}", body, thanks)


async def account(request: Request):
    ep = episode(request)
    if not ep.shop_user:
        return redirect(url("/account/login", next="/account"))
    c = ep.customer()
    saved = "You saved the account information." if request.query_params.get("saved") else ""
    body = (f"<h1>My Account</h1><h2>Contact Information</h2><p>{e(c['first_name'])} {e(c['last_name'])}</p>"
            f'<p>{e(c["email"])}</p><p>Phone: <span id="phone">{e(c["phone"])}</span></p>'
            f'<h2>Default Shipping Address</h2><p id="address">{e(c["street"])}, {e(c["city"])} {e(c["zip_code"])}</p>'
            f"<ul><li>{link('/account/edit', 'Edit Account Information')}</li>"
            f"<li>{link('/account/orders', 'My Orders')}</li></ul>")
    return page(ep, "My Account", body, saved)


PROFILE_FIELDS = (("first_name", "First Name"), ("last_name", "Last Name"), ("phone", "Phone Number"),
                  ("street", "Street Address"), ("city", "City"), ("zip_code", "Zip Code"))


async def account_edit(request: Request):
    ep = episode(request)
    if not ep.shop_user:
        return redirect(url("/account/login", next="/account/edit"))
    if request.method == "POST":
        fields = await request.form()
        for key, _ in PROFILE_FIELDS:
            value = " ".join(str(fields.get(key, "")).split())
            if value:
                ep.profile[key] = value
        return redirect("/account?saved=1")
    c = ep.customer()
    inputs = "".join(f"<p>{text_input(key, label, c[key])}</p>" for key, label in PROFILE_FIELDS)
    return page(ep, "Edit Account Information",
                "<h1>Edit Account Information</h1>" + form("/account/edit", inputs, "Save"))


async def login(request: Request):
    ep = episode(request)
    target = request.query_params.get("next", "/account")
    target = target if target.startswith("/") and not target.startswith("//") else "/account"
    error = ""
    if request.method == "POST":
        fields = await request.form()
        email, password = str(fields.get("email", "")).strip(), str(fields.get("password", ""))
        if email.lower() == data.CUSTOMER.email and password == data.CUSTOMER.password:
            ep.shop_user = data.CUSTOMER.email
            return redirect(target)
        error = '<p class="error" role="alert">The account sign-in was incorrect. Please try again.</p>'
    fields = f"<p>{text_input('email', 'Email')}</p><p>{text_input('password', 'Password', kind='password')}</p>"
    body = f"<h1>Customer Login</h1>{error}" + form(url("/account/login", next=target), fields, "Sign In")
    return page(ep, "Customer Login", body)


async def logout(request: Request):
    episode(request).shop_user = None
    return redirect("/")


def app() -> Starlette:
    return Starlette(routes=[
        Route("/", home), Route("/category/{slug}", category), Route("/search", search),
        Route("/product/{pid:int}", product_page), Route("/product/{pid:int}/review", add_review, methods=["POST"]),
        Route("/cart", cart), Route("/cart/add", cart_add, methods=["POST"]),
        Route("/cart/remove", cart_remove, methods=["POST"]), Route("/checkout", checkout, methods=["GET", "POST"]),
        Route("/account", account), Route("/account/edit", account_edit, methods=["GET", "POST"]),
        Route("/account/orders", orders), Route("/orders/{number}", order),
        Route("/account/login", login, methods=["GET", "POST"]), Route("/account/logout", logout),
    ])
