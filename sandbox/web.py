"""A generated web of many sites on one port, told apart by the Host header (``siteN.test``).

Crawlers reach the sites by resolving ``*.test`` to the sandbox's loopback address (the links
spider: ``-s TWISTED_DNS_RESOLVER=crawler.links.resolver.MappedResolver -s
'LINKS_RESOLVE={"test": "127.0.0.1"}'``), so one port serves hundreds of hosts and no request
ever leaves the machine. Links carry the port the request came to.

Every site ``siteN.test`` has:
  ``/``                home; links to pages, other sites, and every trap below
  ``/p/<k>``           PAGES pages in a binary tree under the home (depth <= 3)
  ``/orphan``          linked from nowhere, listed in the sitemap only
  ``/robots.txt``      ``Disallow: /private/``, a Sitemap line, Crawl-delay on some sites
  ``/sitemap.xml``     a urlset (even sites); odd sites name ``/sitemap_index.xml``, an index
                       of ``/sitemap-pages.xml.gz`` (a gzipped urlset)
  ``/old``             301 to ``/p/2``;  ``/missing`` 404;  ``/files/report.pdf`` a PDF;
                       ``/download`` 4 MiB of application/octet-stream
  ``/private/...``     pages robots.txt disallows (linked from the home)
  ``/cal/YYYY/MM``     a calendar whose every month links the next one, forever
Site 0 links to every site's home, and to ``site0.test:1`` (nothing listens there).
``slow_sites`` sites (picked by the seed, never site 0) wait ``slow_ms`` before every answer;
``banning_sites`` others answer their first ``ban_after`` requests, then only a 429 ban page
with ``Retry-After: 1`` (crawler/bans/rules.py "http_429").
``GET /__admin__/web`` answers the ground truth (the pages a polite crawl of each site must
store; a banning site's are the pages it served before banning), the requests counted per host
and path (with their times), the ban answers per host and path, the statuses answered per host,
the HTML pages answered 200 per host with their bytes, and the most requests a host had in
flight at once; ``POST /__admin__/web`` with ``{"sites": 30, "pages": 6, "seed": 1,
"crawl_delay_every": 0, "crawl_delay": 0.5, "latency_ms": 0, "extras": true, "slow_sites": 0,
"slow_ms": 2000, "banning_sites": 0, "ban_after": 3}`` rebuilds the web and clears the counts
(``extras`` false: homes link only pages and other sites).
"""

from __future__ import annotations

import asyncio
import gzip
import json
import random
import time
from collections import Counter, defaultdict, deque
from dataclasses import asdict, dataclass
from typing import Any

from aiohttp import web
from aiohttp.typedefs import Handler, Middleware

SUFFIX = ".test"
DISALLOWED = "/private/"
TRAP = "/cal/"
LOG_SIZE = 100_000
DOWNLOAD_BYTES = 4 << 20
_XML = '<?xml version="1.0" encoding="UTF-8"?>\n'
_NS = 'xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"'


@dataclass(frozen=True)
class WebConfig:
    sites: int = 30
    pages: int = 6
    seed: int = 1
    crawl_delay_every: int = 0  # every Nth site (N, 2N, ...) asks for a Crawl-delay; 0 none
    crawl_delay: float = 0.5
    latency_ms: int = 0  # every answer of the web waits this long
    extras: bool = True  # False: homes link only pages and other sites (no traps; benchmarks)
    slow_sites: int = 0  # sites whose every answer waits slow_ms (near a crawler's timeout)
    slow_ms: int = 2000
    banning_sites: int = 0  # sites that ban (429) every request after their first ban_after
    ban_after: int = 3

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> WebConfig:
        config = cls(**{key: data[key] for key in asdict(cls()) if key in data})
        if not (1 <= config.sites <= 100_000 and 1 <= config.pages <= 10_000):
            raise ValueError("sites 1..100000 and pages 1..10000")
        if min(config.slow_sites, config.slow_ms, config.banning_sites, config.ban_after) < 0:
            raise ValueError("slow_sites, slow_ms, banning_sites and ban_after are >= 0")
        if config.slow_sites + config.banning_sites >= config.sites:
            raise ValueError("slow_sites + banning_sites must leave site 0 an ordinary site")
        return config


class Web:
    """The sites of one configuration, and the requests they answered."""

    def __init__(self, config: WebConfig) -> None:
        self.config = config
        self.counts: defaultdict[str, Counter[str]] = defaultdict(Counter)
        self.log: deque[tuple[str, str, float]] = deque(maxlen=LOG_SIZE)
        self.answers: defaultdict[str, Counter[int]] = defaultdict(Counter)
        self.bans: defaultdict[str, Counter[str]] = defaultdict(Counter)
        self.html: defaultdict[str, Counter[str]] = defaultdict(Counter)
        self.in_flight: Counter[str] = Counter()
        self.peak: Counter[str] = Counter()
        rng = random.Random(config.seed)
        self.cross = {i: rng.randrange(config.sites) for i in range(config.sites)}
        special = config.slow_sites + config.banning_sites
        chosen = rng.sample(range(1, config.sites), special) if special else []
        self.slow = frozenset(chosen[: config.slow_sites])
        self.banning = frozenset(chosen[config.slow_sites :])

    def hosts(self) -> list[str]:
        return [f"site{i}{SUFFIX}" for i in range(self.config.sites)]

    def index(self, host: str) -> int | None:
        name = host.removesuffix(SUFFIX)
        if name == host or not name.startswith("site") or not name[4:].isdigit():
            return None
        number = int(name[4:])
        return number if number < self.config.sites else None

    def crawl_delay(self, index: int) -> float:
        every = self.config.crawl_delay_every
        return self.config.crawl_delay if every and index and index % every == 0 else 0.0

    def names(self, indexes: frozenset[int]) -> list[str]:
        return [f"site{i}{SUFFIX}" for i in sorted(indexes)]

    def truth(self) -> dict[str, list[str]]:
        """Per host, the paths a polite crawl stores: home, pages and the sitemap's orphan; of
        a banning host, those of them it answered before it banned."""
        paths = ["/", *(f"/p/{k}" for k in range(self.config.pages)), "/orphan"]
        truth = dict.fromkeys(self.hosts(), paths)
        for host in self.names(self.banning):
            served = self.counts[host] - self.bans[host]
            truth[host] = [path for path in paths if served[path]]
        return truth

    def record(self, host: str, path: str) -> None:
        self.counts[host][path] += 1
        self.log.append((host, path, time.time()))

    async def serve(self, index: int, host: str, request: web.Request) -> web.StreamResponse:
        """Answer ``request`` for site ``index`` (named ``host``), counting what it answered."""
        self.record(host, request.path)
        self.in_flight[host] += 1
        self.peak[host] = max(self.peak[host], self.in_flight[host])
        try:
            wait = self.config.latency_ms + (self.config.slow_ms if index in self.slow else 0)
            if wait:
                await asyncio.sleep(wait / 1000)
            response: web.StreamResponse
            if index in self.banning and self.counts[host].total() > self.config.ban_after:
                self.bans[host][request.path] += 1
                response = ban_page()
            else:
                response = SitePage(self, index, request).answer()
        except web.HTTPException as exc:
            self.answers[host][exc.status] += 1
            raise
        finally:
            self.in_flight[host] -= 1
        self.tally(host, response)
        return response

    def tally(self, host: str, response: web.StreamResponse) -> None:
        self.answers[host][response.status] += 1
        body = response.body if isinstance(response, web.Response) else None
        if response.status == 200 and response.content_type == "text/html":
            self.html[host]["pages"] += 1
            self.html[host]["bytes"] += len(body) if isinstance(body, bytes) else 0

    def report(self) -> dict[str, Any]:
        times: defaultdict[str, list[float]] = defaultdict(list)
        for host, path, when in self.log:
            if path != "/robots.txt":
                times[host].append(when)
        return {
            "config": asdict(self.config),
            "hosts": self.hosts(),
            "truth": self.truth(),
            "disallowed": DISALLOWED,
            "trap": TRAP,
            "crawl_delays": {
                host: delay for i, host in enumerate(self.hosts()) if (delay := self.crawl_delay(i))
            },
            "slow": dict.fromkeys(self.names(self.slow), self.config.slow_ms),
            "banning": dict.fromkeys(self.names(self.banning), self.config.ban_after),
            "counts": {host: dict(paths) for host, paths in self.counts.items()},
            "times": dict(times),
            "bans": {host: dict(paths) for host, paths in self.bans.items()},
            "statuses": {host: dict(codes) for host, codes in self.answers.items()},
            "html": {host: dict(figures) for host, figures in self.html.items()},
            "peak_in_flight": dict(self.peak),
        }


class WebPages:
    """Serves the web through a middleware (the Host header picks it) and its admin routes."""

    def __init__(self, config: WebConfig | None = None) -> None:
        self.web = Web(config or WebConfig())

    def register(self, router: web.UrlDispatcher) -> None:
        router.add_get("/__admin__/web", self.get_report)
        router.add_post("/__admin__/web", self.rebuild)

    def middleware(self) -> Middleware:
        @web.middleware
        async def virtual_hosts(request: web.Request, handler: Handler) -> web.StreamResponse:
            host = request.host.rsplit(":", 1)[0].lower() if request.host else ""
            index = self.web.index(host)
            if index is None:
                return await handler(request)
            return await self.web.serve(index, host, request)

        return virtual_hosts

    async def get_report(self, request: web.Request) -> web.Response:
        return web.json_response(self.web.report())

    async def rebuild(self, request: web.Request) -> web.Response:
        try:
            config = WebConfig.from_json(json.loads(await request.text() or "{}"))
        except (ValueError, TypeError) as exc:
            return web.json_response({"error": str(exc)}, status=400)
        self.web = Web(config)
        return web.json_response(asdict(config))


def ban_page() -> web.Response:
    """What a rate-limiting site answers: 429, a Retry-After, a page that is no content."""
    body = "<html><head><title>Too Many Requests</title></head><body>Slow down.</body></html>"
    headers = {"Retry-After": "1"}
    return web.Response(status=429, text=body, content_type="text/html", headers=headers)


class SitePage:
    """One answer of site ``index`` to ``request``."""

    def __init__(self, site_web: Web, index: int, request: web.Request) -> None:
        self.web = site_web
        self.index = index
        self.request = request
        self.port = request.host.rsplit(":", 1)[1] if ":" in request.host else ""
        self.pages = site_web.config.pages

    def url(self, index: int, path: str) -> str:
        port = f":{self.port}" if self.port else ""
        return f"http://site{index}{SUFFIX}{port}{path}"

    def answer(self) -> web.StreamResponse:
        path = self.request.path
        fixed = {
            "/": self.home,
            "/robots.txt": self.robots,
            "/sitemap.xml": self.sitemap,
            "/sitemap_index.xml": self.sitemap_index,
            "/sitemap-pages.xml.gz": self.sitemap_gz,
            "/orphan": lambda: self.html("Orphan", [self.url(self.index, "/")]),
            "/files/report.pdf": self.pdf,
            "/download": self.download,
        }
        if path in fixed:
            return fixed[path]()
        if path == "/old":
            raise web.HTTPMovedPermanently(self.url(self.index, "/p/2"))
        if path.startswith("/p/") and path[3:].isdigit() and int(path[3:]) < self.pages:
            return self.page(int(path[3:]))
        if path.startswith(DISALLOWED):
            return self.html("Private", [self.url(self.index, DISALLOWED + "more")])
        if path.startswith(TRAP):
            return self.calendar(path)
        return web.Response(
            status=404, text="<html><body>Not found</body></html>", content_type="text/html"
        )

    def html(self, title: str, links: list[str], lang: str = "en") -> web.Response:
        anchors = "".join(f'<a href="{link}">{link}</a>\n' for link in links)
        body = (
            f'<!DOCTYPE html><html lang="{lang}"><head><title>{title}</title>'
            f'<meta name="description" content="{title} of site{self.index}"></head>'
            f"<body><h1>{title}</h1>{anchors}</body></html>"
        )
        return web.Response(text=body, content_type="text/html")

    def home(self) -> web.Response:
        own = [f"/p/{k}" for k in (0, 1) if k < self.pages]
        if self.web.config.extras:
            own += ["/old", "/missing", "/files/report.pdf", DISALLOWED + "secret", "/download"]
            own += [f"{TRAP}2024/01", "/p/1?utm_source=home&fbclid=x#top", "/a/a/a/a/"]
            own += ["mailto:me@example.org", "javascript:void(0)", "#main"]
        links = [self.url(self.index, path) if path[0] == "/" else path for path in own]
        sites = self.web.config.sites
        links += [self.url((self.index + 1) % sites, "/")]
        links += [self.url(self.web.cross[self.index], f"/p/{self.index % self.pages}")]
        if self.index == 0:
            links += [self.url(i, "/") for i in range(sites)]
            if self.web.config.extras:  # a site that refuses connections (port 1)
                links.append(f"http://site0{SUFFIX}:1/")
        return self.html(f"Home of site{self.index}", links)

    def page(self, k: int) -> web.Response:
        children = [c for c in (2 * k + 2, 2 * k + 3) if c < self.pages]
        if k == 1 and self.pages > 0:
            children.append(self.pages - 1)
        links = [f"/p/{c}" for c in children] + ["/", "../p/0"]
        return self.html(f"Page {k} of site{self.index}", links, lang="en-GB")

    def calendar(self, path: str) -> web.Response:
        parts = path[len(TRAP) :].strip("/").split("/")
        try:
            year, month = int(parts[0]), int(parts[1])
        except (IndexError, ValueError):
            year, month = 2024, 1
        year, month = (year + 1, 1) if month == 12 else (year, month + 1)
        return self.html("Calendar", [f"{TRAP}{year}/{month:02d}", "/"])

    def robots(self) -> web.Response:
        sitemap = "/sitemap_index.xml" if self.index % 2 else "/sitemap.xml"
        lines = ["User-agent: *", f"Disallow: {DISALLOWED}"]
        if delay := self.web.crawl_delay(self.index):
            lines.append(f"Crawl-delay: {delay}")
        lines += ["", f"Sitemap: {self.url(self.index, sitemap)}", ""]
        return web.Response(text="\n".join(lines), content_type="text/plain")

    def urlset(self) -> str:
        paths = ["/", *(f"/p/{k}" for k in range(self.pages)), "/orphan"]
        entries = "".join(f"<url><loc>{self.url(self.index, p)}</loc></url>" for p in paths)
        return f"{_XML}<urlset {_NS}>{entries}</urlset>"

    def sitemap(self) -> web.Response:
        return web.Response(text=self.urlset(), content_type="application/xml")

    def sitemap_index(self) -> web.Response:
        loc = self.url(self.index, "/sitemap-pages.xml.gz")
        body = f"{_XML}<sitemapindex {_NS}><sitemap><loc>{loc}</loc></sitemap></sitemapindex>"
        return web.Response(text=body, content_type="application/xml")

    def sitemap_gz(self) -> web.Response:
        body = gzip.compress(self.urlset().encode())
        return web.Response(body=body, content_type="application/x-gzip")

    def download(self) -> web.Response:
        """A large binary file behind a URL without an extension."""
        return web.Response(body=b"\0" * DOWNLOAD_BYTES, content_type="application/octet-stream")

    def pdf(self) -> web.Response:
        return web.Response(body=b"%PDF-1.4\n%%EOF\n", content_type="application/pdf")
