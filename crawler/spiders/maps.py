"""Map listings (TARGETS.md §3, docs/spiders.md): search pages scrolled in a headless Chromium,
place pages. Start entries: ``{"query": "shop near 00501"}`` or the same as plain text, or
``-a category=shop -a postal_codes=00501,00544`` (or a file of codes): one search per code.

The spider drives the search page itself (``playwright_include_page``: its feed is filled by
JavaScript as it is scrolled) and closes it on every path (callback, errback, and at once for a
block or an error). The page adds batches at any time, also while it is read, so the links and
the end marker (which comes with the last batch) are read in one evaluation. A search ends
honestly with the end marker, or with the page saying it found nothing; a feed that stops
growing before either (Google's softer block) keeps the places it listed and is tried again
after the retry backoff, then given up as a dead letter ``retries_exhausted:maps_feed_stalled``.
Place pages are fetched without the browser unless MAPS_PLACES_WITH_BROWSER (the real site
renders them with JavaScript; the sandbox on the server).
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import AsyncIterator, Iterable
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote_plus

from scrapy import Request, signals
from scrapy.settings import default_settings
from scrapy_playwright.page import PageMethod

from crawler.config import setting, setting_int
from crawler.config.rules import SettingsError, shown
from crawler.extractors.jsondata import MalformedData
from crawler.extractors.maps import (
    END_OF_LIST,
    NO_RESULTS,
    is_block_page,
    is_consent_page,
    is_place_url,
    place_fields,
)
from crawler.items import PlaceItem
from crawler.spiders.base import InvalidStartEntry, RedisFedSpider, check_keys
from crawler.spiders.responses import BlockedPage, body_text, retry_malformed

if TYPE_CHECKING:
    from playwright.async_api import Page
    from scrapy.crawler import Crawler
    from scrapy.http import Response
    from twisted.python.failure import Failure

logger = logging.getLogger(__name__)

POSTAL_CODE = re.compile(r"^[0-9A-Za-z][0-9A-Za-z -]{1,9}$")
_JSON_KEYS = {"query"}
FEED_LINKS = 'div[role="feed"] a.hfpxzc'
# The page's words (a typographic apostrophe read as a plain one), whether it says the list
# ended, and whether it says, without a feed, that the search found nothing.
_WORDS = 'document.body.innerText.replace(/\u2019/g, "\'")'
_ENDED = f"{_WORDS}.includes({END_OF_LIST!r})"
_NOTHING = f"(!document.querySelector('div[role=\"feed\"]') && {_WORDS}.includes({NO_RESULTS!r}))"
# The links and the end in one evaluation: the page cannot add a batch between the two.
_FEED_STATE = (
    f"() => ({{links: Array.from(document.querySelectorAll({FEED_LINKS!r}),"
    f" e => e.getAttribute('href')), ended: {_ENDED}, nothing: {_NOTHING}}})"
)
_GREW = f"n => document.querySelectorAll({FEED_LINKS!r}).length > n || {_ENDED} || {_NOTHING}"
_SCROLL = (
    "() => { const feed = document.querySelector('div[role=\"feed\"]');"
    " if (feed) feed.scrollTop = feed.scrollHeight; }"
)
CONSENT_CHOICES = {"reject": "Reject all", "accept": "Accept all"}


class MapsSpider(RedisFedSpider):
    """Crawl map searches into ``places``. Settings: MAPS_* and PLAYWRIGHT_* (crawler/settings.py).
    Blocks are caught by ``ban_rule`` and the generic rules (302 to /sorry, 429)."""

    name = "maps"
    entry_kind = "maps start entry"
    custom_settings = {  # noqa: RUF012 (Scrapy's Spider declares it as an instance field)
        "DOWNLOAD_HANDLERS": {
            "http": "crawler.browser.BrowserHandler",
            "https": "crawler.browser.BrowserHandler",
        },
        # A navigation that could not reach its host fails with Scrapy's own download errors
        # (crawler/browser/failures.py), retried and counted by the circuit breaker as theirs;
        # the browser's other errors (a crashed page, a page method's timeout) are retried too.
        "RETRY_EXCEPTIONS": [*default_settings.RETRY_EXCEPTIONS, "playwright.async_api.Error"],
        # A place page once per crawl, whichever search's link led to it (maps_fingerprint.py).
        "REQUEST_FINGERPRINTER_CLASS": "crawler.spiders.maps_fingerprint.PlaceFingerprinter",
        # Places change slowly: revisited after a week, then 1 day..90 days.
        "RECRAWL_ENABLED": True,
        "RECRAWL_INITIAL_INTERVAL": 7 * 86_400.0,
        "RECRAWL_MIN_INTERVAL": 86_400.0,
        "RECRAWL_MAX_INTERVAL": 90 * 86_400.0,
    }
    base_url_setting = "MAPS_BASE_URL"
    entry_host_from = "base_url"
    language: str
    region: str
    consent: str
    max_results: int
    scroll_timeout_ms: float
    max_stalls: int
    places_with_browser: bool

    def __init__(
        self, category: str | None = None, postal_codes: str | None = None, **kwargs: Any
    ) -> None:
        super().__init__(**kwargs)
        self.queries = _argument_queries(category, postal_codes)
        if self.queries:  # checked as the crawl starts, as any -a entry
            self.entry_arguments["category"] = self.queries
        self._closing: set[asyncio.Task[None]] = set()

    def configure(self, crawler: Crawler) -> None:
        settings = crawler.settings
        self.language = setting(settings, "MAPS_LANGUAGE")
        self.region = setting(settings, "MAPS_REGION")
        self.consent = setting(settings, "MAPS_CONSENT")
        self.max_results = setting_int(settings, "MAPS_MAX_RESULTS", 0)
        self.scroll_timeout_ms = setting(settings, "MAPS_SCROLL_TIMEOUT") * 1000
        self.max_stalls = setting_int(settings, "MAPS_SCROLL_MAX_STALLS", 1)
        self.places_with_browser = settings.getbool("MAPS_PLACES_WITH_BROWSER")
        crawler.signals.connect(self.close_refused_page, signal=signals.response_downloaded)

    def argument_entries(self) -> Iterable[str]:
        return self.queries

    def requests_from_entry(self, entry: str | dict[str, Any]) -> Iterable[Request]:
        if isinstance(entry, dict):
            check_keys(entry, _JSON_KEYS, _JSON_KEYS)
            if not isinstance(entry["query"], str):
                raise InvalidStartEntry("bad_query", "a query is text")
            entry = entry["query"]
        query = " ".join(entry.split())
        if not query or len(query) > 200:
            raise InvalidStartEntry("bad_query", "a query is 1 to 200 characters")
        return [self.search_request(query)]

    def search_request(self, query: str) -> Request:
        params = "&".join(
            f"{name}={value}"
            for name, value in (("hl", self.language), ("gl", self.region))
            if value
        )
        url = f"{self.base_url}/maps/search/{quote_plus(query)}" + (f"?{params}" if params else "")
        return Request(
            url,
            callback=self.parse_search,
            errback=self.close_page_on_error,
            cb_kwargs={"query": query},
            meta={
                "playwright": True,
                "playwright_include_page": True,
                "playwright_page_goto_kwargs": {"wait_until": "domcontentloaded"},
                "playwright_page_methods": [PageMethod("wait_for_load_state", "load")],
            },
        )

    async def parse_search(self, response: Response, query: str) -> AsyncIterator[Request]:
        page: Page = response.meta.pop("playwright_page")
        try:
            urls, outcome = await self._place_urls(page, query)
        finally:
            await self._close_page(page)
        self.count("maps/searches")
        assert self.crawler.stats is not None
        self.crawler.stats.max_value("maps/feed/max_results", len(urls))
        for url in urls:
            yield self.place_request(response.urljoin(url), query)
        if outcome == "stalled":
            error = FeedStalled(f"the feed stopped growing at {len(urls)} results, before its end")
            retry = retry_malformed(self.crawler, response, "maps_feed_stalled", error, "Stall")
            if retry is not None:
                yield retry

    async def _place_urls(self, page: Page, query: str) -> tuple[list[str], str]:
        """The search's place links, and how its list ended (see :meth:`_feed_outcome`)."""
        if is_consent_page(page.url, await page.content()):
            await self._answer_consent(page)
        if is_place_url(page.url):
            self.count("maps/single_match")
            return [page.url], "single_match"
        if is_block_page(page.url, await page.content()):
            raise BlockedPage("maps_unusual_traffic")
        return await self._scroll_feed(page, query)

    async def _answer_consent(self, page: Page) -> None:
        label = CONSENT_CHOICES[self.consent]
        async with page.expect_navigation(wait_until="domcontentloaded"):
            await page.click(f'form button[aria-label="{label}"]')
        self.count(f"maps/consent/{self.consent}")

    async def _scroll_feed(self, page: Page, query: str) -> tuple[list[str], str]:
        stalls = 0
        while True:
            feed = await _feed_state(page)
            outcome = self._feed_outcome(feed, stalls)
            if outcome:
                break
            await page.evaluate(_SCROLL)
            stalls = 0 if await self._feed_grew(page, len(feed.links)) else stalls + 1
        self.count(f"maps/feed/{outcome}")
        unique = list(dict.fromkeys(feed.links))
        return (unique[: self.max_results] if self.max_results else unique), outcome

    def _feed_outcome(self, feed: Feed, stalls: int) -> str | None:
        """Why scrolling stops now, or None: the list "ended" (its end marker), the page found
        "no_results", "max_results_reached", or the feed "stalled" (MAPS_SCROLL_MAX_STALLS
        scrolls in a row loaded nothing, and the page shows no end)."""
        if feed.ended:
            return "ended"
        if feed.nothing and not feed.links:
            return "no_results"
        if self.max_results and len(feed.links) >= self.max_results:
            return "max_results_reached"
        return "stalled" if stalls >= self.max_stalls else None

    async def _feed_grew(self, page: Page, count: int) -> bool:
        """Whether the feed grew past ``count`` links or ended within MAPS_SCROLL_TIMEOUT."""
        from playwright.async_api import TimeoutError as PlaywrightTimeoutError

        try:
            await page.wait_for_function(_GREW, arg=count, timeout=self.scroll_timeout_ms)
        except PlaywrightTimeoutError:
            return False
        return True

    def place_request(self, url: str, query: str) -> Request:
        meta: dict[str, Any] = {}
        if self.places_with_browser:
            meta = {"playwright": True, "playwright_page_goto_kwargs": {"wait_until": "load"}}
        return Request(url, callback=self.parse_place, cb_kwargs={"query": query}, meta=meta)

    def parse_place(self, response: Response, query: str) -> Iterable[PlaceItem | Request]:
        fields = place_fields(body_text(response), response.url)
        if fields["place_id"] and fields["name"]:
            self.count("maps/places")
            yield PlaceItem(**fields, query=query)
            return
        # No place in it (a page the site fills by script, MAPS_PLACES_WITH_BROWSER off; a
        # consent page): tried again after the retry backoff, then a dead letter, never acked
        # as if its place were stored.
        self.count("maps/place/unreadable")
        error = MalformedData("no place id and name in the page")
        retry = retry_malformed(self.crawler, response, "place_unreadable", error)
        if retry is not None:
            yield retry

    # --- bans and closing pages ----------------------------------------------------------------

    def ban_rule(self, response: Response) -> str | None:
        """The "unusual traffic" captcha page, whatever its status code."""
        return "maps_unusual_traffic" if is_block_page(response.url, body_text(response)) else None

    def close_refused_page(self, response: Response, request: Request) -> None:
        """A browser response that will not reach the callback (a block, an error status, to
        be retried or dropped by the middlewares) gives its page back at once."""
        page = request.meta.get("playwright_page")
        if page is None or (response.status == 200 and self.ban_rule(response) is None):
            return
        del request.meta["playwright_page"]
        task = asyncio.ensure_future(self._close_page(page))
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    async def close_page_on_error(self, failure: Failure) -> None:
        request = getattr(failure, "request", None)
        page = request.meta.pop("playwright_page", None) if request is not None else None
        if page is not None:
            await self._close_page(page)
        self.count("maps/errors")

    async def _close_page(self, page: Page) -> None:
        from playwright.async_api import Error as PlaywrightError

        with suppress(PlaywrightError):
            if not page.is_closed():
                await page.close()
        self.count("maps/pages/closed")

    async def closed(self, reason: str) -> None:
        if self._closing:
            await asyncio.gather(*self._closing, return_exceptions=True)


class FeedStalled(Exception):
    """A search's feed stopped growing before its end: its list is not whole."""


@dataclass(frozen=True)
class Feed:
    """A search page read at one instant: its place links, whether it shows the end of the
    list, and whether it says it found nothing (no feed)."""

    links: list[str]
    ended: bool
    nothing: bool


async def _feed_state(page: Page) -> Feed:
    state = await page.evaluate(_FEED_STATE)
    links = [str(link) for link in state["links"] if link]
    return Feed(links, bool(state["ended"]), bool(state["nothing"]))


def _argument_queries(category: str | None, postal_codes: str | None) -> list[str]:
    """The queries of ``-a category=`` and ``-a postal_codes=`` (a file or ``a,b,c``), or
    SettingsError saying what is wrong with them (one line, exit status 2)."""
    if category is None and postal_codes is None:
        return []
    category, postal_codes = (category or "").strip(), (postal_codes or "").strip()
    if not category or not postal_codes:
        given = "category" if category else "postal_codes" if postal_codes else ""
        problem = f"-a {given} alone" if given else "-a category and -a postal_codes are empty"
        raise SettingsError(
            f"{problem}: give both -a category=<name> and -a postal_codes=<file or a,b,c>"
        )
    path = Path(postal_codes)
    try:
        text = path.read_text("utf-8") if path.is_file() else postal_codes.replace(",", "\n")
    except OSError as exc:
        raise SettingsError(f"-a postal_codes={postal_codes}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise SettingsError(f"-a postal_codes={postal_codes}: not UTF-8") from None
    codes = [line.strip() for line in text.splitlines() if line.strip()]
    bad = [code for code in codes if not POSTAL_CODE.match(code)]
    if bad or not codes:
        raise SettingsError(
            f"-a postal_codes: expected codes such as 00501, got {shown(bad) if bad else 'none'}"
        )
    return [f"{category} near {code}" for code in dict.fromkeys(codes)]
