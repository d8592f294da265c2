"""The maps spider in a real headless Chromium against the sandbox's map pages."""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import json
import os
import re
from pathlib import Path
from typing import Any, cast
from urllib.parse import quote_plus

import pytest
import redis
from playwright.async_api import Page, Route, async_playwright
from scrapy.utils.project import get_project_settings
from scrapy.utils.request import request_from_dict
from scrapy.utils.test import get_crawler

from crawler.config.rules import SettingsError
from crawler.extractors.maps import END_OF_LIST, pin_from_url, place_fields, place_id_from_url
from crawler.frontier import codec
from crawler.spiders.base import InvalidStartEntry
from crawler.spiders.maps import MapsSpider, _argument_queries
from sandbox.maps import BATCH_SIZE, render_place
from sandbox.places import Place, build_places
from tests.harness import Crawl, Sandbox, no_reactor_needed, scrapy

PLACES = build_places()
CHROMIUM = os.environ.get("CHROMIUM_PATH", "/usr/bin/chromium")
needs_chromium = pytest.mark.skipif(
    not os.access(CHROMIUM, os.X_OK), reason=f"no Chromium at {CHROMIUM} (make test installs it)"
)


def _log_stats(stderr: str) -> dict[str, Any]:
    """The stats Scrapy dumps when the crawl ends, as a dict of numbers."""
    return {
        key: int(value) for key, value in re.findall(r"'([a-z_/.0-9]+)': (\d+)(?=[,}\n])", stderr)
    }


def _settings(sandbox: Sandbox, **extra: Any) -> dict[str, Any]:
    return {"MAPS_BASE_URL": sandbox.url, "MAPS_SCROLL_TIMEOUT": 3, **extra}


# --- extraction, without a crawler ---------------------------------------------------------------


def test_place_page_fields_and_pin_from_url() -> None:
    place = next(p for group in PLACES.by_query.values() for p in group if p.phone and p.hours)
    url = f"https://www.google.com{place.path}?entry=ttu"
    fields = place_fields(render_place(place), url)
    assert fields["place_id"] == place.place_id == place_id_from_url(url)
    assert (fields["latitude"], fields["longitude"]) == (place.latitude, place.longitude)
    assert pin_from_url(url) != (place.latitude + 0.0021, place.longitude - 0.0034)
    assert fields["name"] == place.name
    assert fields["rating"] == place.rating
    assert fields["review_count"] == place.review_count
    assert fields["category"] == place.category_label
    assert fields["address"] == place.address
    assert fields["phone"] == place.phone
    assert fields["website"] == place.website
    assert fields["plus_code"] == place.plus_code
    assert fields["hours"] == place.hours


@pytest.mark.parametrize("count", [1, 2, 1234])
def test_a_places_review_count_is_read_however_many(count: int) -> None:
    """Google labels one review "1 review", more "1,234 reviews"."""
    place = next(p for group in PLACES.by_query.values() for p in group if p.review_count)
    one = dataclasses.replace(place, review_count=count)
    url = f"https://www.google.com{place.path}?entry=ttu"
    assert place_fields(render_place(one), url)["review_count"] == count


def test_postal_code_arguments(tmp_path: Path) -> None:
    codes = tmp_path / "codes.txt"
    codes.write_text("00501\n\n00544\n00501\n")
    assert _argument_queries("shop", str(codes)) == ["shop near 00501", "shop near 00544"]
    assert _argument_queries("cafe", "01001, 01002") == ["cafe near 01001", "cafe near 01002"]
    with pytest.raises(SettingsError, match="postal_codes"):
        _argument_queries("shop", "00501,<script>")
    with pytest.raises(SettingsError, match="both"):
        MapsSpider(category="shop")


def test_search_requests_are_stored_as_json() -> None:
    spider = MapsSpider()
    spider.base_url, spider.language, spider.region = "https://www.google.com", "en", "de"
    (request,) = spider.requests_from_entry({"query": "shop  near 00501"})
    assert request.url == "https://www.google.com/maps/search/shop+near+00501?hl=en&gl=de"
    stored = codec.loads(codec.dumps(request.to_dict(spider=spider)))
    restored = request_from_dict(stored, spider=spider)
    assert restored.callback == spider.parse_search
    assert restored.errback == spider.close_page_on_error
    assert restored.meta["playwright_include_page"] is True
    (method,) = restored.meta["playwright_page_methods"]
    assert (method.method, method.args) == ("wait_for_load_state", ("load",))
    with pytest.raises(InvalidStartEntry):
        spider.requests_from_entry({"query": "x", "extra": 1})


# --- crawls in the browser -----------------------------------------------------------------------


class _BatchLandsAfterFirstRead:
    """A real page whose feed batch, held back until then, lands right after the first thing read
    from the page, before the next read: what a slow network or a busy CPU can make happen."""

    def __init__(self, page: Page, release: asyncio.Event) -> None:
        self._page, self._release = page, release

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._page, name)
        if not inspect.iscoroutinefunction(method):
            return method

        async def read_then_land(*args: Any, **kwargs: Any) -> Any:
            result = await method(*args, **kwargs)
            if not self._release.is_set():
                self._release.set()
                await self._page.get_by_text(END_OF_LIST).wait_for()
            return result

        return read_then_land


async def _scroll_while_batch_lands(spider: MapsSpider, query: str) -> tuple[list[str], str]:
    release = asyncio.Event()

    async def hold(route: Route) -> None:
        await release.wait()
        await route.continue_()

    options = spider.settings.getdict("PLAYWRIGHT_LAUNCH_OPTIONS")
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(**options)
        try:
            page = await browser.new_page()
            await page.route("**/maps/api/feed?*", hold)
            await page.goto(f"{spider.base_url}/maps/search/{quote_plus(query)}")
            watched = cast(Page, _BatchLandsAfterFirstRead(page, release))
            return await spider._scroll_feed(watched, query)
        finally:
            await browser.close()


@needs_chromium
def test_feed_read_while_its_last_batch_lands(sandbox: Sandbox) -> None:
    searches = sandbox.admin("maps/searches")
    query = next(q for q, ids in searches.items() if 1 < len(ids) <= BATCH_SIZE)
    settings = {**get_project_settings().copy_to_dict(), "MAPS_BASE_URL": sandbox.url}
    settings |= no_reactor_needed()  # the spider scrolls outside a crawl
    spider = MapsSpider.from_crawler(get_crawler(MapsSpider, settings_dict=settings))
    links, outcome = asyncio.run(_scroll_while_batch_lands(spider, query))
    assert [place_id_from_url(link) for link in links] == searches[query]
    assert outcome == "ended"


@pytest.mark.integration
@needs_chromium
def test_listing_consent_and_single_match(
    crawl: Crawl, redis_client: redis.Redis, sandbox: Sandbox
) -> None:
    redis_client.lpush("maps:start_urls", json.dumps({"query": "shop near 00501"}))
    result = crawl(
        "maps",
        "-a",
        "category=pharmacy",
        "-a",
        "postal_codes=00544,01001",
        settings=_settings(sandbox, MAPS_REGION="de", MAPS_BROWSER_RESTART_PAGES=2),
    )
    assert result.returncode == 0, result.stderr[-3000:]

    expected = {
        place.place_id: (query, place)
        for query in ("shop near 00501", "pharmacy near 00544", "pharmacy near 01001")
        for place in PLACES.search(query)
    }
    assert len(PLACES.search("shop near 00501")) > 3 * 7, "needs several scroll loads"
    docs = list(crawl.mongo.db.places.find({}, {"_id": 0}))
    assert sorted(doc["place_id"] for doc in docs) == sorted(expected)
    for doc in docs:
        query, place = expected[doc["place_id"]]
        assert doc["query"] == query
        assert_place_fields(doc, place)

    served = sandbox.admin("stats")["by_path"]
    place_paths = {path: n for path, n in served.items() if path.startswith("/maps/place/")}
    # The single match's page is opened once by the browser (redirect) and once over HTTP.
    assert sum(place_paths.values()) == len(expected) + 1
    assert served.get("/consent/m", 0) >= 1

    stats = _log_stats(result.stderr)
    assert stats["maps/searches"] == 3
    assert stats["maps/single_match"] == 1
    assert stats["maps/consent/reject"] >= 1
    assert stats["maps/feed/ended"] == 2
    assert stats["maps/pages/open_at_close"] == 0
    assert stats["maps/pages/closed"] == stats["playwright/page_count"] == 3
    assert stats["playwright/request_count/aborted"] > 0
    # MAPS_BROWSER_RESTART_PAGES=2: the third search waits for a browser of its own.
    assert stats.get("maps/browser/restarts", 0) >= 1
    assert stats["playwright/browser_count"] >= 2


@pytest.mark.integration
@needs_chromium
def test_one_batch_searches_store_every_place(
    crawl: Crawl, redis_client: redis.Redis, sandbox: Sandbox
) -> None:
    """A feed of one batch ends with its first batch, which lands about when the spider starts
    reading the page (with images blocked, the load event does not wait for it). A browser
    opens two pages at most here: the later searches wait for new browsers, and nothing is lost
    across them."""
    searches = sandbox.admin("maps/searches")
    one_batch = {query: ids for query, ids in searches.items() if 1 < len(ids) <= BATCH_SIZE}
    assert len(one_batch) >= 5
    for query in one_batch:
        redis_client.lpush("maps:start_urls", json.dumps({"query": query}))
    settings = {"MAPS_BASE_URL": sandbox.url, "MAPS_BROWSER_RESTART_PAGES": 2}
    result = crawl("maps", settings=settings)
    assert result.returncode == 0, result.stderr[-3000:]
    stored = {doc["place_id"] for doc in crawl.mongo.db.places.find({}, {"place_id": 1})}
    assert stored == {place_id for ids in one_batch.values() for place_id in ids}
    stats = _log_stats(result.stderr)
    assert stats["maps/feed/ended"] == len(one_batch)
    assert stats["playwright/page_count/max_concurrent"] <= 2
    assert stats["playwright/browser_count"] >= (len(one_batch) + 1) // 2
    assert stats["maps/pages/closed"] == stats["playwright/page_count"] == len(one_batch)
    assert "maps/browser/drain_timeouts" not in stats


@pytest.mark.integration
@needs_chromium
def test_block_page_is_a_ban_and_its_page_is_closed(
    crawl: Crawl, redis_client: redis.Redis, sandbox: Sandbox
) -> None:
    redis_client.lpush("maps:start_urls", "unusual traffic near 00501")
    # The 429 is also an incident for the circuit breaker: its host's block starts at 1 s here.
    settings = _settings(sandbox, BAN_MAX_TIMES=1, BAN_COOLDOWN=1, HOST_BLOCK_START=1)
    result = crawl("maps", settings=settings, timeout=90)
    assert result.returncode == 0, result.stderr[-3000:]
    stats = _log_stats(result.stderr)
    assert stats["ban/count"] >= 1
    assert stats.get("ban/rule/http_429", 0) + stats.get("ban/rule/challenge_page", 0) >= 1
    assert stats["maps/pages/open_at_close"] == 0
    assert stats["maps/pages/closed"] == stats["playwright/page_count"]
    assert crawl.mongo.db.places.count_documents({}) == 0
    served = cast(dict[str, int], sandbox.admin("stats")["by_path"])
    assert served.get("/sorry/index", 0) >= 1


HELD_PAGE_SPIDER = """
import scrapy


class HeldPage(scrapy.Spider):
    name = "held_page"
    custom_settings = {
        "DOWNLOAD_HANDLERS": {"http": "crawler.browser.BrowserHandler"},
        "MAPS_BROWSER_RESTART_PAGES": 1,
        "MAPS_BROWSER_DRAIN_SECONDS": 1,
    }

    async def start(self):
        yield self.page("/@quote.user0", self.keep_page_open)

    def page(self, path, callback):
        meta = {"playwright": True, "playwright_include_page": True}
        return scrapy.Request(self.base + path, callback=callback, meta=meta)

    def keep_page_open(self, response):
        yield {"url": response.url}
        yield self.page("/@quote.user1", self.close_page)

    async def close_page(self, response):
        await response.meta["playwright_page"].close()
        yield {"url": response.url}
        if response.url.endswith("user1"):
            yield self.page("/@quote.user2", self.close_page)
"""


@pytest.mark.integration
@needs_chromium
def test_a_page_never_closed_holds_up_the_next_one_only_for_the_drain_time(
    crawl: Crawl, sandbox: Sandbox, tmp_path: Path
) -> None:
    """A browser full at one page whose page is never closed: the next page waits
    MAPS_BROWSER_DRAIN_SECONDS for it, then opens in that browser, and so does the one after
    it, without waiting; the crawl ends."""
    spider = tmp_path / "held_page.py"
    spider.write_text(HELD_PAGE_SPIDER)
    result = scrapy(
        "runspider",
        str(spider),
        "-a",
        f"base={sandbox.url}",
        "-s",
        "MAX_IDLE_TIME_BEFORE_CLOSE=1",
        env=crawl.env(),
        timeout=90,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    stats = _log_stats(result.stderr)
    assert stats.get("item_scraped_count") == 3, result.stderr[-4000:]
    assert stats["maps/browser/drain_timeouts"] == 1
    assert stats["maps/pages/open_at_close"] == 1
    assert stats["playwright/browser_count"] == 1
    assert "A full browser's pages are still open after 1 s (1 open)" in result.stderr
    assert "Restarting the browser" not in result.stderr


def assert_place_fields(doc: dict[str, Any], place: Place) -> None:
    """The stored place document holds every field the sandbox's place has."""
    assert doc["name"] == place.name
    assert doc["rating"] == place.rating
    assert doc["review_count"] == place.review_count
    assert doc["category"] == place.category_label
    assert doc["address"] == place.address
    assert doc["phone"] == place.phone
    assert doc["website"] == place.website
    assert doc["plus_code"] == place.plus_code
    assert doc["hours"] == place.hours
    assert (doc["latitude"], doc["longitude"]) == (place.latitude, place.longitude)
