"""Map pages on the real paths (TARGETS.md §3).

``/maps/search/<query>`` is a shell whose ``div[role="feed"]`` JavaScript fills from
``/maps/api/feed`` in batches of ``batch_size``, each after ``delay_ms``, when the feed is
scrolled to its bottom, until "You've reached the end of the list.". A query with one match
redirects to its place page. ``/maps/place/...`` is rendered on the server with the real
class names; its pin is in the URL (``!3d<lat>!4d<lng>``). With ``gl`` set to an EU region and
no ``SOCS`` cookie, maps pages redirect to the consent interstitial ``/consent/m``. A query
starting with "unusual traffic" gets Google's block: 302 to ``/sorry/index`` (a 429 captcha).
A query with no places gets the page saying so ("Google Maps can't find ..."), without a feed.
Google's softer block, a feed that stops loading with no error page, is set per query: ``POST
/__admin__/maps/stall {"query": "shop near 00501", "after": 1, "searches": 2}`` has the next 2
loads of that search's page get ``after`` batches, then empty ones without the end (the list
stops growing); the loads after them get the whole list again.
Pages reference images, a font and a video under ``/mapfiles/`` (not guarded by the anti-bot
layer), so blocking those resources shows in the bytes served. ``/__admin__/maps/searches`` lists
every search with the ids of its places, in feed order, so a crawl can be checked against it.
With the configuration's ``maps_overlap`` searches overlap as Google's do: a search also lists
the places of the postal codes beside its own, each linked with the search's own viewport and
parameters (sandbox/places.py); a place page answers any link holding its feature id.
"""

from __future__ import annotations

import html
import json
import random
from collections.abc import Callable
from typing import Any
from urllib.parse import quote, urlencode

from aiohttp import web
from aiohttp.typedefs import Handler

from sandbox.places import Place, Places, build_places

EU_REGIONS = frozenset({"de", "fr", "it", "es", "nl", "pl", "ie", "be", "at"})
CONSENT_COOKIE = "SOCS"
BLOCKED_QUERY_PREFIX = "unusual traffic"
END_OF_LIST = "You've reached the end of the list."
NO_RESULTS = "Google Maps can't find"
BATCH_SIZE = 7
# Sizes of the static resources, in bytes (fixed, so a benchmark can count bytes served).
ASSET_SIZES = {"photo": 24_000, "font": 48_000, "video": 180_000}

_SEARCH_SCRIPT = """
(function () {
  const feed = document.querySelector('div[role="feed"]');
  let offset = 0, loading = false, done = false;
  async function load() {
    if (loading || done) return;
    loading = true;
    const r = await fetch('/maps/api/feed?' + new URLSearchParams({q: QUERY, offset: offset}));
    const data = await r.json();
    await new Promise((resolve) => setTimeout(resolve, DELAY));
    feed.insertAdjacentHTML('beforeend', data.html);
    offset = data.next; done = data.end; loading = false;
  }
  feed.addEventListener('scroll', function () {
    if (feed.scrollTop + feed.clientHeight >= feed.scrollHeight - 40) load();
  });
  load();
})();
"""

_STYLE = (
    "@font-face{font-family:'Google Sans';src:url(/mapfiles/fonts/GoogleSans.woff2)"
    " format('woff2')}body{font-family:'Google Sans',Roboto,Arial}"
    'div[role="feed"]{height:540px;overflow-y:auto}.Nv2PK{height:120px}'
)


def asset_body(kind: str, name: str) -> bytes:
    """Deterministic filler of ``ASSET_SIZES[kind]`` bytes for one static resource."""
    return random.Random(f"{kind}:{name}").randbytes(ASSET_SIZES[kind])


def _shell(title: str, body: str, script: str = "") -> str:
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        f"<title>{html.escape(title)}</title><style>{_STYLE}</style></head><body>"
        '<video autoplay muted preload="auto" src="/mapfiles/media/intro.mp4" width="1"></video>'
        f"{body}{script}</body></html>"
    )


def _rating_html(place: Place) -> str:
    if place.rating is None or place.review_count is None:
        return ""
    return (
        f'<span class="ZkP5Je" role="img"><span class="MW4etd">{place.rating:.1f}</span>'
        f'<span class="UY7F9">({place.review_count:,})</span></span>'
    )


def card_html(place: Place, link: str | None = None) -> str:
    """One result card of the feed, linking to ``link`` (the place's ``path`` by default)."""
    name = html.escape(place.name)
    return (
        '<div class="Nv2PK THOPZb CpccDe"><a class="hfpxzc" '
        f'aria-label="{name}" href="{html.escape(link or place.path)}"></a>'
        f'<img src="/mapfiles/photo/{quote(place.place_id)}.jpg" alt="" width="80" height="80">'
        f'<div class="qBF1Pd fontHeadlineSmall">{name}</div>{_rating_html(place)}'
        f'<div class="W4Efsd">{html.escape(place.category_label)} · '
        f"{html.escape(place.address)}</div></div>"
    )


def _end_html() -> str:
    return (
        '<div class="m6QErb tLjsW eKbjU"><div class="PbZDve"><p class="fontBodyMedium">'
        f'<span><span class="HlvSq">{END_OF_LIST}</span></span></p></div></div>'
    )


def render_search(query: str, delay_ms: int) -> str:
    script = (
        f"<script>const QUERY = {json.dumps(query)}; const DELAY = {delay_ms};"
        f"{_SEARCH_SCRIPT}</script>"
    )
    body = f'<div class="m6QErb" role="feed" aria-label="Results for {html.escape(query)}"></div>'
    return _shell(f"{query} - Google Maps", body, script)


def render_no_results(query: str) -> str:
    """The page of a search with no match: no feed, Google's words."""
    body = (
        f'<div role="main"><div class="Q2vNVc">{NO_RESULTS} {html.escape(query)}</div>'
        "<div>Make sure your search is spelled correctly. Try adding a city, state, or zip"
        " code.</div></div>"
    )
    return _shell(f"{query} - Google Maps", body)


def render_place(place: Place) -> str:
    """A place page with the real selectors (rendered on the server here)."""
    esc = html.escape
    parts = [
        f'<h1 class="DUwDvf lfPIob">{esc(place.name)}</h1>',
        f'<img src="/mapfiles/photo/{quote(place.place_id)}-hero.jpg" alt="" width="400">',
    ]
    if place.rating is not None and place.review_count is not None:
        parts.append(
            '<div class="F7nice"><span><span aria-hidden="true">'
            f"{place.rating:.1f}</span></span><span><span>"
            f'<span aria-label="{_reviews(place.review_count)}">({place.review_count:,})'
            "</span></span></span></div>"
        )
    parts.append(f'<button class="DkEaL">{esc(place.category_label)}</button>')
    parts.append(
        f'<button data-item-id="address" aria-label="Address: {esc(place.address)}">'
        f'<div class="Io6YTe">{esc(place.address)}</div></button>'
    )
    if place.website:
        parts.append(
            f'<a data-item-id="authority" href="{esc(place.website)}">'
            f'<div class="Io6YTe">{esc(place.website)}</div></a>'
        )
    if place.phone:
        digits = "".join(c for c in place.phone if c.isdigit())
        parts.append(
            f'<button data-item-id="phone:tel:+1{digits}" aria-label="Phone: {esc(place.phone)}">'
            f'<div class="Io6YTe">{esc(place.phone)}</div></button>'
        )
    parts.append(
        f'<button data-item-id="oloc"><div class="Io6YTe">{esc(place.plus_code)}</div></button>'
    )
    if place.hours:
        parts.append(f'<div class="t39EBf GUrTXd" aria-label="{esc(place.hours)}"></div>')
    return _shell(f"{place.name} - Google Maps", '<div role="main">' + "".join(parts) + "</div>")


def render_consent(target: str) -> str:
    body = (
        "<h1>Before you continue to Google</h1>"
        '<form action="/consent/save" method="post">'
        f'<input type="hidden" name="continue" value="{html.escape(target)}">'
        '<button name="set_eom" value="true" aria-label="Reject all">Reject all</button>'
        '<button name="set_eom" value="false" aria-label="Accept all">Accept all</button>'
        "</form>"
    )
    return _shell("Before you continue to Google", body)


class MapsPages:
    """Serves the search pages, their feed API, place pages, consent and static resources."""

    def __init__(
        self,
        places: Places | None = None,
        batch_size: int = BATCH_SIZE,
        delay_ms: int = 150,
        overlap: Callable[[], bool] = lambda: False,
    ):
        self.places = places or build_places()
        self.batch_size = batch_size
        self.delay_ms = delay_ms
        self.overlap = overlap
        self.stalls = Stalls()

    def register(self, router: web.UrlDispatcher) -> None:
        router.add_get("/maps/search/{query}", self.search)
        router.add_get("/maps/api/feed", self.feed)
        router.add_get("/maps/place/{name}/{tail:.*}", self.place)
        router.add_get("/consent/m", self.consent)
        router.add_post("/consent/save", self.consent_save)
        router.add_get("/mapfiles/photo/{name}", self.asset("photo"))
        router.add_get("/mapfiles/fonts/{name}", self.asset("font"))
        router.add_get("/mapfiles/media/{name}", self.asset("video"))
        router.add_get("/__admin__/maps/searches", self.searches)
        router.add_post("/__admin__/maps/stall", self.stall)

    def reset(self) -> None:
        """Forget the stalls set (``/__admin__/reset``)."""
        self.stalls = Stalls()

    def _needs_consent(self, request: web.Request) -> bool:
        region = request.query.get("gl", "").lower()
        return region in EU_REGIONS and CONSENT_COOKIE not in request.cookies

    def _consent_redirect(self, request: web.Request) -> web.Response:
        query = urlencode({"continue": str(request.url), "gl": request.query.get("gl", "")})
        raise web.HTTPFound(f"/consent/m?{query}")

    async def search(self, request: web.Request) -> web.Response:
        query = " ".join(request.match_info["query"].replace("+", " ").split())
        if query.lower().startswith(BLOCKED_QUERY_PREFIX):
            raise web.HTTPFound("/sorry/index?" + urlencode({"continue": str(request.url)}))
        if self._needs_consent(request):
            self._consent_redirect(request)
        found = self._found(query)
        if len(found) == 1:
            raise web.HTTPFound(self._link(found[0], query))
        if not found:
            return web.Response(text=render_no_results(query), content_type="text/html")
        self.stalls.loaded(query)
        return web.Response(text=render_search(query, self.delay_ms), content_type="text/html")

    async def feed(self, request: web.Request) -> web.Response:
        try:
            offset = max(0, int(request.query.get("offset", "0")))
        except ValueError:
            raise web.HTTPBadRequest() from None
        query = request.query.get("q", "")
        if self.stalls.stalled(query, offset // self.batch_size):
            return web.json_response({"html": "", "next": offset, "end": False})
        return web.json_response(self.feed_batch(query, offset))

    async def stall(self, request: web.Request) -> web.Response:
        """Have a query's next loads stall (see the module's docstring)."""
        try:
            data = json.loads(await request.text())
            self.stalls.set(str(data["query"]), int(data["after"]), int(data["searches"]))
        except (ValueError, KeyError, TypeError) as exc:
            return web.json_response({"error": f"bad stall: {exc}"}, status=400)
        return web.json_response({"ok": True})

    def feed_batch(self, query: str, offset: int) -> dict[str, Any]:
        """The feed API's answer: cards from ``offset``, the next offset, whether it ended."""
        found = self._found(query)
        batch = found[offset : offset + self.batch_size]
        end = offset + len(batch) >= len(found)
        cards = "".join(card_html(place, self._link(place, query)) for place in batch)
        text = cards + (_end_html() if end else "")
        return {"html": text, "next": offset + len(batch), "end": end}

    def browser_bytes(self, query: str) -> int:
        """Bytes of the documents and feed batches a browser loads for one scrolled search."""
        found = self._found(query)
        if len(found) == 1:
            return len(render_place(found[0]).encode())
        if not found:
            return len(render_no_results(query).encode())
        total, offset = len(render_search(query, self.delay_ms).encode()), 0
        while True:
            batch = self.feed_batch(query, offset)
            total += len(json.dumps(batch).encode())
            if batch["end"]:
                return total
            offset = batch["next"]

    async def searches(self, request: web.Request) -> web.Response:
        """Every search of the seeded places: ``{query: [place id, ...]}``."""
        return web.json_response(self.places.place_ids(self.overlap()))

    def _found(self, query: str) -> tuple[Place, ...]:
        return self.places.search(query, self.overlap())

    def _link(self, place: Place, query: str) -> str:
        """The place's link in the results of ``query``: one fixed path, unless searches
        overlap (then the search's own, as Google's)."""
        return place.link(query) if self.overlap() else place.path

    async def place(self, request: web.Request) -> web.Response:
        tail = request.match_info["tail"]
        place_id = tail.split("!1s", 1)[1].split("!", 1)[0] if "!1s" in tail else ""
        place = self.places.by_id.get(place_id)
        if place is None:
            raise web.HTTPNotFound()
        if self._needs_consent(request):
            self._consent_redirect(request)
        return web.Response(text=render_place(place), content_type="text/html")

    async def consent(self, request: web.Request) -> web.Response:
        target = request.query.get("continue", "/")
        return web.Response(text=render_consent(target), content_type="text/html")

    async def consent_save(self, request: web.Request) -> web.Response:
        form = await request.post()
        target = str(form.get("continue") or "/")
        if not target.startswith(f"{request.scheme}://{request.host}/"):
            target = "/"
        response = web.HTTPFound(target)
        value = "rejected" if form.get("set_eom") == "true" else "accepted"
        response.set_cookie(CONSENT_COOKIE, value, path="/", max_age=3600 * 24 * 390)
        raise response

    def asset(self, kind: str) -> Handler:
        content_type = {"photo": "image/jpeg", "font": "font/woff2", "video": "video/mp4"}[kind]

        async def handler(request: web.Request) -> web.Response:
            body = asset_body(kind, request.match_info["name"])
            headers = {"Cache-Control": "no-store"}
            return web.Response(body=body, content_type=content_type, headers=headers)

        return handler


class Stalls:
    """Queries whose feed stops growing: for each, the batches a load gets and how many loads
    stall still; the load in progress of each query (one at a time, as a crawl's search)."""

    def __init__(self) -> None:
        self.planned: dict[str, tuple[int, int]] = {}
        self.current: dict[str, int] = {}

    def set(self, query: str, after: int, searches: int) -> None:
        if after < 0 or searches < 0:
            raise ValueError("after and searches are counts, 0 or more")
        self.planned[_key(query)] = (after, searches)

    def loaded(self, query: str) -> None:
        """A search page of ``query`` was served: its feed stalls if loads to stall are left."""
        key = _key(query)
        after, left = self.planned.get(key, (0, 0))
        if left:
            self.planned[key] = (after, left - 1)
            self.current[key] = after
        else:
            self.current.pop(key, None)

    def stalled(self, query: str, batch: int) -> bool:
        """Whether the feed of ``query`` answers its ``batch``-th batch (from 0) with nothing."""
        after = self.current.get(_key(query))
        return after is not None and batch >= after


def _key(query: str) -> str:
    return " ".join(query.lower().split())


def _reviews(count: int) -> str:
    """The label Google gives a place's review count: "1,234 reviews", "1 review"."""
    return f"{count:,} review" + ("" if count == 1 else "s")
