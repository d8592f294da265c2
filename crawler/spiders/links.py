"""Whole sites, breadth first: every HTML page reachable from the start URLs, within limits
(docs/spiders.md). Start entries (``-a urls=a,b``, ``-a file=domains.txt`` or
``redis-cli lpush links:start_urls``): a URL, a bare host (LINKS_DEFAULT_SCHEME://host/), or
``{"url": ..., "max_depth": 3, "max_pages": 10000, "scope": "domain"}``.

Links are canonicalised (crawler/links/urls.py) before they reach the frontier, robots.txt is
obeyed for the fleet (crawler/links/robots.py) and per-host counters go to Redis
(crawler/links/ledger.py); pages go to ``pages``. A fleet's order is not strictly breadth
first: each request carries its depth to the frontier (meta DEPTH_META), whose duplicate filter
lets a page found again by a shorter path through, so it is fetched again from there; a page is
stored at the shortest depth found, and within max_depth by any path found.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

from scrapy import Request, signals
from scrapy.exceptions import StopDownload
from scrapy.http import HtmlResponse

from crawler import settings as project
from crawler.config import setting
from crawler.extractors.links import parse_page
from crawler.links.entries import RefusedStartUrl, file_entries, start_request_url
from crawler.links.ledger import HostLedger
from crawler.links.page import entry_budget, moved_start, page_item
from crawler.links.robots import LINKS_META
from crawler.links.sitemaps import SitemapBudget, robots_sitemaps, sitemap_body, sitemap_urls
from crawler.links.urls import (
    SCOPES,
    BadUrl,
    UrlRules,
    canonical_url,
    host_of,
    in_scope,
    is_calendar,
    link_priority,
    request_url,
    scope_root,
)
from crawler.meta import CRAWL_DELAY_META, DEPTH_LIMIT, DEPTH_META, JOB_META
from crawler.recrawl.revisits import RECRAWL_META
from crawler.spiders.base import InvalidStartEntry, RedisFedSpider, bounded, check_keys
from crawler.spiders.responses import body_text

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from scrapy.http import Response
    from scrapy.http.headers import Headers
    from scrapy.settings import BaseSettings

    from crawler.connection import RedisClient

_JSON_KEYS = {"url", "max_depth", "max_pages", "scope"}
MAX_DEPTH_LIMIT = DEPTH_LIMIT  # the frontier's: each depth is a request's (meta DEPTH_META)
MAX_PAGES_LIMIT = 1_000_000_000
# Statuses that reach the callback to be counted as the host's errors (others are dropped by
# Scrapy's HttpErrorMiddleware; bans and 5xx are the ban and retry middlewares' job).
COUNTED_ERRORS = [404, 410]
# Content types parsed as pages; a page answering another one is not downloaded further.
HTML_TYPES = (b"text/html", b"application/xhtml+xml")
# Sitemap levels below robots.txt's (an index of indexes, which sitemaps.org does not allow,
# is followed once).
SITEMAP_NESTING = 2
SITEMAP_LEVEL_META = "links_sitemap_level"


class LinksSpider(RedisFedSpider):
    """Breadth-first crawl of whole sites into ``pages``; settings: LINKS_* (settings.py)."""

    name = "links"
    entry_kind = "links start entry"
    entry_host_from = "entry"
    # Start URLs go through the dupefilter: a site is crawled again after a frontier purge.
    refetch_start_urls = False
    # Any site's 403 (a private file, a forbidden directory) is that page's error, and its
    # redirect to its login page (a members-only page) that page's answer; an empty page, or
    # JSON whose status code is 8 (which the explore and profiles APIs send a client they
    # refuse), is a page like any other. Blocks are still told by what their protection sends
    # (crawler/bans/rules.py).
    ban_rules_left_out: tuple[str, ...] = (
        *("forbidden", "login_redirect"),
        *("empty_body", "json_error"),
    )
    custom_settings = {  # noqa: RUF012 (Scrapy's Spider declares it as an instance field)
        # A redirect's target is one page with its canonical URL (links/fingerprint.py).
        "REQUEST_FINGERPRINTER_CLASS": "crawler.links.fingerprint.CanonicalFingerprinter",
        # A broad crawl meets huge files: refuse bodies over 10 MiB, warn over 2 MiB.
        "DOWNLOAD_MAXSIZE": 10 * 1024 * 1024,
        "DOWNLOAD_WARNSIZE": 2 * 1024 * 1024,
        # Pages are revisited after a day, then as often as they change (1 hour..30 days).
        "RECRAWL_ENABLED": True,
        "RECRAWL_INITIAL_INTERVAL": 86_400.0,
        "RECRAWL_MIN_INTERVAL": 3_600.0,
        "RECRAWL_MAX_INTERVAL": 30 * 86_400.0,
        # Scrapy hands each response's output to CONCURRENT_ITEMS (default 100) asyncio tasks
        # at once, made anew per response; a page yields one item and its links, so a few do.
        "CONCURRENT_ITEMS": 8,
        # The fleet's robots.txt middleware where Scrapy's RobotsTxtMiddleware sits (100), the
        # per-host error counter at 90, among the project's (the add-on keeps them too).
        "DOWNLOADER_MIDDLEWARES": {
            **project.DOWNLOADER_MIDDLEWARES,
            "crawler.links.ledger.HostErrorsMiddleware": 90,
            "crawler.links.robots.FleetRobotsMiddleware": 100,
        },
        # Scrapy's Depth and UrlLength spider middlewares: the spider's own bounds do their work.
        "SPIDER_MIDDLEWARES": {
            **project.SPIDER_MIDDLEWARES,
            "scrapy.spidermiddlewares.depth.DepthMiddleware": None,
            "scrapy.spidermiddlewares.urllength.UrlLengthMiddleware": None,
        },
    }

    def __init__(self, urls: str | None = None, file: str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.url_args = self.entry_argument("urls", urls)
        if file is not None:
            self.url_args += file_entries(file)

    @classmethod
    def from_crawler(cls, crawler: Crawler, *args: Any, **kwargs: Any) -> LinksSpider:
        spider = super().from_crawler(crawler, *args, **kwargs)
        crawler.signals.connect(spider.on_headers, signal=signals.headers_received)
        # The ledger sends its counts in batches: the rest when the crawl pauses or ends.
        crawler.signals.connect(spider.ledger.flush, signal=signals.spider_idle)
        crawler.signals.connect(spider.ledger.flush, signal=signals.spider_closed)
        return spider

    @classmethod
    def fleet_report(cls, server: RedisClient, settings: BaseSettings) -> dict[str, Any]:
        """What ``scrapy status links`` adds: the fleet's totals, the ten hosts with most pages."""
        ledger = HostLedger(server, cls.name, setting(settings, "LINKS_STATE_TTL"))
        summary = ledger.summary(top=10)
        return {"hosts": summary["totals"], "top hosts": summary["hosts"]}

    def configure(self, crawler: Crawler) -> None:
        settings = crawler.settings
        self.default_scheme: str = setting(settings, "LINKS_DEFAULT_SCHEME")
        self.max_depth: int = setting(settings, "LINKS_MAX_DEPTH")
        self.max_pages: int = setting(settings, "LINKS_MAX_PAGES")
        self.scope: str = setting(settings, "LINKS_SCOPE")
        self.rules = UrlRules(
            setting(settings, "LINKS_MAX_URL_LENGTH"),
            setting(settings, "LINKS_MAX_REPEATED_SEGMENTS"),
        )
        self.max_calendar_hops: int = setting(settings, "LINKS_MAX_CALENDAR_HOPS")
        self.sitemaps: bool = setting(settings, "LINKS_SITEMAPS")
        self.sitemap_max_urls: int = setting(settings, "LINKS_SITEMAP_MAX_URLS")
        self.maxsize = settings.getint("DOWNLOAD_MAXSIZE")
        self.store_body: bool = setting(settings, "LINKS_STORE_BODY")
        self.body_max_bytes: int = setting(settings, "LINKS_BODY_MAX_BYTES")
        self.ledger = HostLedger.of(crawler)
        # Links this worker has asked for already, with the least depth asked at: the frontier's
        # dupefilter drops them anyway unless they come by a shorter path (its local cache,
        # DUPEFILTER_LOCAL_CACHE, remembers as many), so no request is made.
        self.asked: dict[str, int] = {}
        self.asked_limit = 0
        # Sitemap entries asked for per (start entry, host, "page" or "sitemap"), bounded by its
        # budget: sitemaps cannot queue more of a host than it may store.
        self.sitemap_budget = SitemapBudget()
        if settings.get("DUPEFILTER_MODE") != "none":
            self.asked_limit = settings.getint("DUPEFILTER_LOCAL_CACHE")

    def argument_entries(self) -> Iterable[str]:
        return self.url_args

    def requests_from_entry(self, entry: str | dict[str, Any]) -> Iterable[Request]:
        if isinstance(entry, str):
            return [self.start_request(entry, self.max_depth, self.max_pages, self.scope)]
        check_keys(entry, _JSON_KEYS, {"url"})
        return [
            self.start_request(
                entry["url"],
                bounded(entry.get("max_depth", self.max_depth), "max_depth", MAX_DEPTH_LIMIT),
                bounded(entry.get("max_pages", self.max_pages), "max_pages", MAX_PAGES_LIMIT),
                _scope(entry.get("scope", self.scope)),
            )
        ]

    def start_request(self, value: Any, max_depth: int, max_pages: int, scope: str) -> Request:
        if isinstance(value, str) and "://" not in value:
            value = f"{self.default_scheme}://{value.strip()}"
        self.start_url(value)  # no base URL: any http(s) host
        try:
            url = start_request_url(value, self.rules.max_length)
        except RefusedStartUrl as exc:
            raise InvalidStartEntry(exc.reason, exc.detail) from None
        root = scope_root(canonical_url(url), scope)
        state = {
            "depth": 0,
            "max_depth": max_depth,
            "max_pages": max_pages,
            "scope": scope,
            "root": root,
            "start": hashlib.blake2b(canonical_url(url).encode(), digest_size=6).hexdigest(),
            "hops": 0,
        }
        return self._page_request(url, state, priority=10)

    def _page_request(
        self, url: str, state: dict[str, Any], priority: int, delay: Any = None
    ) -> Request:
        # The depth goes to the frontier too: a URL found again by a shorter path passes its
        # duplicate filter, and is fetched again to follow its links from there.
        meta = {
            LINKS_META: state,
            DEPTH_META: state["depth"],
            "handle_httpstatus_list": COUNTED_ERRORS,
        }
        if delay:
            # The host's robots.txt Crawl-delay, known from the linking page: spaced at once.
            meta[CRAWL_DELAY_META] = delay
        return Request(url, callback=self.parse_page, priority=priority, meta=meta)

    def on_headers(self, headers: Headers, request: Request, **kwargs: Any) -> None:
        """Stop downloading a page whose Content-Type says it is not HTML (a PDF behind an
        extension-less URL): its callback gets the headers and counts it, never parses it."""
        if LINKS_META not in request.meta or request.callback != self.parse_page:
            return
        if headers.get(b"Location"):
            return  # a redirect: its own body does not matter, its target is checked in turn
        content_type = (headers.get(b"Content-Type") or b"").split(b";")[0].strip().lower()
        if content_type and content_type not in HTML_TYPES:
            self.count("links/skipped/content_type")
            # The cut answer has an empty body: not a ban (crawler/bans/rules.py "empty_body").
            request.meta["dont_ban_check"] = True
            raise StopDownload(fail=False)

    def parse_page(self, response: Response) -> Iterator[Any]:
        state: dict[str, Any] = response.meta[LINKS_META]
        url = canonical_url(response.url)
        host = host_of(url)
        redirects = response.meta.get("redirect_urls")
        if redirects and not in_scope(url, state["scope"], state["root"]):
            moved = moved_start(state, url, redirects)
            if moved is None:
                self._left_scope(response, state)
                return
            state = moved
        if response.status >= 400:
            self.count(f"links/errors/http_{response.status}")
            self.ledger.error(host, f"http_{response.status}")
            return
        if not isinstance(response, HtmlResponse):
            self.count("links/not_html")
            return
        fields = parse_page(body_text(response), response.url, response.encoding)
        self.count_bad_fields(fields.bad_fields)
        links = self._canonical_links(fields.links)
        external = Counter(h for link in links if (h := host_of(link)) != host)
        # A revisit (crawler/recrawl/) refreshes a page inside the budget, never spends it, and
        # its links were counted as backlinks when the page was first fetched.
        revisit = RECRAWL_META in response.meta
        start, size = entry_budget(state, response.meta), len(response.body)
        fetched, backlinks = self.ledger.page(
            start, host, size, external, state["max_pages"], revisit
        )
        if state["max_pages"] and fetched > state["max_pages"] and not revisit:
            self.count("links/over_max_pages")
            return
        self.count("links/pages")
        kept = self.body_max_bytes if self.store_body else None
        yield page_item(response, url, int(state["depth"]), fields, len(links), kept)
        delay, job = response.meta.get(CRAWL_DELAY_META), response.meta.get(JOB_META)
        yield from self._follow(links, host, state, backlinks, delay, job)

    def _left_scope(self, response: Response, state: dict[str, Any]) -> None:
        """A page whose redirects took it off the crawl's scope (a /go/ link, an expired
        domain parked elsewhere) is neither stored nor followed."""
        self.count("links/skipped/redirect_out_of_scope")
        if state["depth"] == 0:
            self.logger.warning(
                "Start URL %s redirects off its domain to %s: not crawled",
                response.meta["redirect_urls"][0],
                response.url,
            )

    def _canonical_links(self, links: Iterable[str]) -> dict[str, str]:
        """Each page the links lead to once: its canonical URL, and the URL of the first link
        to it, which is asked for (``urls.request_url``)."""
        canonical: dict[str, str] = {}
        for link in links:
            try:
                canonical.setdefault(canonical_url(link), request_url(link))
            except BadUrl as exc:
                self.count(f"links/skipped/{exc.reason}")
        return canonical

    def _follow(
        self,
        links: dict[str, str],
        host: str,
        state: dict[str, Any],
        backlinks: dict[str, int],
        delay: Any = None,
        job: int | None = None,
    ) -> Iterator[Request]:
        depth = int(state["depth"]) + 1
        if depth > state["max_depth"]:
            return
        for link, url in links.items():
            child = self._child_state(link, state, depth)
            if child is not None and self._first_ask(link, depth, job):
                target = host_of(link)
                same = target == host
                rank = link_priority(depth, same, backlinks.get(target, 0))
                yield self._page_request(url, child, rank, delay if same else None)

    def _first_ask(self, link: str, depth: int, job: int | None = None) -> bool:
        """False for a link this worker has followed before at ``depth`` or less in the same
        crawl ``job`` (counted as ``links/skipped/asked_before``)."""
        if not self.asked_limit:
            return True
        link = link if job is None else f"{job} {link}"
        least = self.asked.get(link)
        if least is not None and least <= depth:
            self.count("links/skipped/asked_before")
            return False
        if least is None and len(self.asked) >= self.asked_limit:
            self.asked.clear()
        self.asked[link] = depth
        return True

    def _child_state(self, link: str, state: dict[str, Any], depth: int) -> dict[str, Any] | None:
        if not in_scope(link, state["scope"], state["root"]):
            self.count("links/skipped/out_of_scope")
            return None
        try:
            self.rules.check(link)
        except BadUrl as exc:
            self.count(f"links/skipped/{exc.reason}")
            return None
        hops = int(state["hops"]) + 1 if is_calendar(link.split("?", 1)[0]) else 0
        if hops > self.max_calendar_hops:
            self.count("links/skipped/calendar")
            return None
        return {**state, "depth": depth, "hops": hops}

    # --- robots.txt and sitemaps -------------------------------------------------------------

    def robots_requests(self, request: Request, sitemaps: list[str]) -> list[Request]:
        """What a host's robots.txt seeds for the fleet: its sitemaps on the host, else
        /sitemap.xml."""
        state = request.meta.get(LINKS_META)
        if not self.sitemaps or state is None:
            return []
        here = canonical_url(request.url)
        if redirects := request.meta.get("redirect_urls"):
            state = moved_start(state, here, redirects) or state  # as parse_page moves it
        return [self._sitemap_request(url, state, 0) for url in robots_sitemaps(here, sitemaps)]

    def _sitemap_request(self, url: str, state: dict[str, Any], level: int) -> Request:
        meta = {LINKS_META: {**state, "depth": 0}, SITEMAP_LEVEL_META: level}
        return Request(url, callback=self.parse_sitemap, priority=5, meta=meta)

    def parse_sitemap(self, response: Response) -> Iterator[Request]:
        state: dict[str, Any] = response.meta[LINKS_META]
        body = sitemap_body(response, self.maxsize)
        kind, locations = sitemap_urls(body or b"", self.sitemap_max_urls)
        self.count(f"links/sitemaps/{kind or 'unreadable'}")
        host = host_of(canonical_url(response.url))
        level = int(response.meta.get(SITEMAP_LEVEL_META, 0)) + 1
        if state["max_depth"] < 1:
            return
        if kind == "sitemapindex" and level > SITEMAP_NESTING:
            self.count("links/skipped/sitemap_nested")
            return
        key = self.sitemap_budget.key(entry_budget(state, response.meta), host, kind)
        job = response.meta.get(JOB_META)
        for link, url in self._canonical_links(locations).items():
            if host_of(link) != host:
                self.count("links/skipped/sitemap_foreign")
                continue
            if not self.sitemap_budget.allows(key, state["max_pages"]):
                self.count("links/skipped/sitemap_over_budget")
                return
            if kind == "sitemapindex":
                request = self._sitemap_request(url, state, level)
            elif (child := self._child_state(link, state, 1)) and self._first_ask(link, 1, job):
                request = self._page_request(url, child, priority=-2 + 1)
            else:
                continue
            self.sitemap_budget.asked[key] += 1
            yield request


def _scope(value: Any) -> str:
    if value not in SCOPES:
        raise InvalidStartEntry("bad_scope", f"{repr(value)[:80]}; one of {', '.join(SCOPES)}")
    return str(value)
