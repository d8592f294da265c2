"""A site whose pages and links a test writes, ``graph.test`` on any port: for crawls whose
order matters (sandbox/web.py generates its sites; this one is given, page by page).

``POST /__admin__/graph`` with ``{"pages": {"/": {"links": ["/a", "/b"]}, "/a": {"links":
["/c"], "after": ["/c"]}}, "hold_s": 30}`` replaces the site and clears its log. Each page
links the paths it lists; a page with ``after`` holds its answer until each of those paths has
been asked for (at most ``hold_s`` seconds), so a test decides which of two paths a crawl finds
first, whatever the machine's load; a page with ``redirect`` answers 302 to that path (a
members-only page sending to the site's login: ``{"redirect": "/login?next=/account"}``), or
the redirect ``status`` it gives (301, 303, 307, 308: ``{"redirect": "/b", "status": 301}``);
a page with ``body`` answers that text as it is, with ``type`` as its Content-Type (default
``text/html``): an empty page, a JSON answer, a page of prose; a page with an error ``status``
answers it (``{"status": 410}``: gone), with its ``body`` if it has one, else an empty page.
Any other path answers 404 (robots.txt too: everything is allowed). A page is its path,
whatever the query. ``GET /__admin__/graph`` answers the requests in the order they came, each
with its path, its query as sent, when it came, when it was answered, and whether a page's wait
ran out (``held_out``).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from aiohttp.typedefs import Handler, Middleware

HOST = "graph.test"
HOLD_SECONDS = 30.0
REDIRECTS = frozenset({301, 302, 303, 307, 308})


@dataclass(frozen=True)
class GraphPage:
    links: tuple[str, ...] = ()
    after: tuple[str, ...] = ()
    redirect: str = ""
    body: str | None = None
    type: str = "text/html"
    status: int = 0  # a redirect's (302 when 0), or an error status answered instead of links


class Graph:
    """The pages of one site and the requests they answered."""

    def __init__(self, pages: dict[str, GraphPage], hold_s: float = HOLD_SECONDS) -> None:
        self.pages = pages
        self.hold_s = hold_s
        self.asked: defaultdict[str, asyncio.Event] = defaultdict(asyncio.Event)
        self.log: list[dict[str, Any]] = []

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Graph:
        pages = {str(path): _page(dict(page)) for path, page in dict(data.get("pages", {})).items()}
        hold_s = float(data.get("hold_s", HOLD_SECONDS))
        if not 0 <= hold_s <= 300:
            raise ValueError("hold_s is 0..300 seconds")
        return cls(pages, hold_s)

    async def serve(self, request: web.Request) -> web.Response:
        path, came = request.path, time.time()
        self.asked[path].set()
        page = self.pages.get(path)
        held_out = False
        for other in page.after if page else ():
            try:
                await asyncio.wait_for(self.asked[other].wait(), came + self.hold_s - time.time())
            except TimeoutError:
                held_out = True
        query = request.raw_path.partition("?")[2]  # as the client wrote it
        answered = time.time()
        self.log.append(
            {"path": path, "query": query, "came": came, "answered": answered, "held_out": held_out}
        )
        if page is None:
            return web.Response(status=404, text="<html>Not found</html>", content_type="text/html")
        if page.redirect:
            return web.Response(status=page.status or 302, headers={"Location": page.redirect})
        if page.body is not None:
            return _as_written(page)
        if page.status:
            return _error(page.status)
        port = request.host.rsplit(":", 1)[1] if ":" in request.host else ""
        base = f"http://{HOST}:{port}" if port else f"http://{HOST}"
        anchors = "".join(f'<a href="{base}{link}">{link}</a>\n' for link in page.links)
        head = f"<!DOCTYPE html><html><head><title>{path}</title></head>"
        body = f"{head}<body>{anchors}</body></html>"
        return web.Response(text=body, content_type="text/html")


def _as_written(page: GraphPage) -> web.Response:
    """A page's own body, with its own Content-Type (and status, 200 unless it has one)."""
    body = (page.body or "").encode()
    return web.Response(status=page.status or 200, body=body, headers={"Content-Type": page.type})


def _error(status: int) -> web.Response:
    return web.Response(status=status, text="<html></html>", content_type="text/html")


def _page(data: dict[str, Any]) -> GraphPage:
    page = GraphPage(
        tuple(str(link) for link in data.get("links", [])),
        tuple(str(other) for other in data.get("after", [])),
        str(data.get("redirect", "")),
        None if data.get("body") is None else str(data["body"]),
        str(data.get("type", "text/html")),
        int(data.get("status", 0)),
    )
    if page.redirect and page.status and page.status not in REDIRECTS:
        raise ValueError(f"a redirect's status is one of {sorted(REDIRECTS)}, not {page.status}")
    if not page.redirect and page.status and not 400 <= page.status <= 599:
        raise ValueError(f"a page's status is an error, 400..599, not {page.status}")
    return page


class GraphPages:
    """Serves the site through a middleware (Host ``graph.test``) and its admin routes."""

    def __init__(self) -> None:
        self.graph = Graph({})

    def register(self, router: web.UrlDispatcher) -> None:
        router.add_get("/__admin__/graph", self.get_log)
        router.add_post("/__admin__/graph", self.rebuild)

    def middleware(self) -> Middleware:
        @web.middleware
        async def graph_host(request: web.Request, handler: Handler) -> web.StreamResponse:
            host = request.host.rsplit(":", 1)[0].lower() if request.host else ""
            if host != HOST:
                return await handler(request)
            return await self.graph.serve(request)

        return graph_host

    async def get_log(self, request: web.Request) -> web.Response:
        return web.json_response({"log": self.graph.log})

    async def rebuild(self, request: web.Request) -> web.Response:
        try:
            self.graph = Graph.from_json(json.loads(await request.text() or "{}"))
        except (ValueError, TypeError, AttributeError) as exc:
            return web.json_response({"error": str(exc)}, status=400)
        return web.json_response({"pages": len(self.graph.pages)})
