"""A maps feed that stops growing before its end (Google's softer block), in a real headless
Chromium against the sandbox's map pages: the search is tried again, its places kept, and
given up as a dead letter naming the stall; a search that ends honestly (the end of the list,
or no match) is done at once."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from typing import Any
from urllib.parse import unquote_plus, urlsplit

import pytest
import redis
from playwright.async_api import async_playwright
from scrapy.utils.project import get_project_settings

from crawler.spiders.maps import Feed, _feed_state
from sandbox.maps import BATCH_SIZE
from tests.harness import Crawl, Sandbox, dead_letters
from tests.test_maps import _log_stats, needs_chromium

pytestmark = needs_chromium

STALLED = "shop near 00501"
EMPTY = "bakery near 01001"


def _settings(sandbox: Sandbox, **extra: Any) -> dict[str, Any]:
    """A stall is told after two scrolls that loaded nothing in 1 s; a retry waits 1.5 s."""
    return {
        "MAPS_BASE_URL": sandbox.url,
        "MAPS_SCROLL_TIMEOUT": 1,
        "MAPS_SCROLL_MAX_STALLS": 2,
        "RETRY_BACKOFF_BASE": 1.5,
        **extra,
    }


def _searches_served(sandbox: Sandbox) -> Counter[str]:
    """How many times the sandbox served each search's page."""
    served: Counter[str] = Counter()
    for request in sandbox.admin("stats")["requests"]:
        path = urlsplit(request["path"]).path
        if path.startswith("/maps/search/"):
            served[unquote_plus(path.removeprefix("/maps/search/"))] += 1
    return served


def _stored(crawl: Crawl) -> set[str]:
    return {doc["place_id"] for doc in crawl.mongo.db.places.find({}, {"place_id": 1})}


async def _read(pages: list[str]) -> list[Feed]:
    """Each page's feed as the spider reads it, in a real Chromium."""
    options = get_project_settings().getdict("PLAYWRIGHT_LAUNCH_OPTIONS")
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(**options)
        try:
            page = await browser.new_page()
            feeds = []
            for html in pages:
                await page.set_content(html)
                feeds.append(await _feed_state(page))
            return feeds
        finally:
            await browser.close()


def test_the_end_of_a_list_and_a_search_that_found_nothing_are_told_from_a_stall() -> None:
    """Google's words with a plain or a typographic apostrophe; "found nothing" only without a
    feed (a feed that says it elsewhere is still read); a page with neither is no end."""
    card = '<a class="hfpxzc" href="/maps/place/A/data=!1s0x1:0x2"></a>'
    feed = f'<div role="feed">{card}<span class="HlvSq">{{end}}</span></div>'
    nothing = "<div>Google Maps can{apostrophe}t find bakery near 01001</div>"
    feeds = asyncio.run(
        _read(
            [
                nothing.format(apostrophe="'"),
                nothing.format(apostrophe="\u2019"),
                feed.format(end="") + nothing.format(apostrophe="'"),
                feed.format(end="You\u2019ve reached the end of the list."),
                feed.format(end=""),
                "<div>Loading...</div>",
            ]
        )
    )
    assert [(bool(f.links), f.ended, f.nothing) for f in feeds] == [
        (False, False, True),
        (False, False, True),
        (True, False, False),
        (True, True, False),
        (True, False, False),
        (False, False, False),
    ]


@pytest.mark.integration
def test_a_stalled_search_is_tried_again_until_its_list_ends(
    crawl: Crawl, redis_client: redis.Redis, sandbox: Sandbox
) -> None:
    """Its first two loads stop after one batch: the third reads the list to its end, and every
    place is stored (before, the search ended with its first batch, the rest lost unsaid). A
    search with no match and one read to its end are not tried again."""
    searches = sandbox.admin("maps/searches")
    other = next(q for q, ids in searches.items() if len(ids) > 2 * BATCH_SIZE and q != STALLED)
    sandbox.admin("maps/stall", {"query": STALLED, "after": 1, "searches": 2})
    for query in (STALLED, EMPTY, other):
        redis_client.lpush("maps:start_urls", json.dumps({"query": query}))
    result = crawl("maps", settings=_settings(sandbox))
    assert result.returncode == 0, result.stderr[-3000:]
    assert _stored(crawl) == set(searches[STALLED]) | set(searches[other])
    assert _searches_served(sandbox) == {STALLED: 3, EMPTY: 1, other: 1}
    assert not dead_letters(redis_client, "maps")
    stats = _log_stats(result.stderr)
    assert (stats["maps/feed/stalled"], stats["maps/feed/ended"]) == (2, 2)
    assert stats["maps/feed/no_results"] == 1


@pytest.mark.integration
def test_a_search_that_always_stalls_is_a_dead_letter_with_what_it_found_stored(
    crawl: Crawl, redis_client: redis.Redis, sandbox: Sandbox
) -> None:
    """Every load stops after one batch: the search is tried RETRY_TIMES more times, then
    given up as a dead letter that names the stall; the places it did list are stored."""
    searches = sandbox.admin("maps/searches")
    sandbox.admin("maps/stall", {"query": STALLED, "after": 1, "searches": 10})
    redis_client.lpush("maps:start_urls", json.dumps({"query": STALLED}))
    result = crawl("maps", settings=_settings(sandbox, RETRY_TIMES=1))
    assert result.returncode == 0, result.stderr[-3000:]
    assert _stored(crawl) == set(searches[STALLED][:BATCH_SIZE])
    assert _searches_served(sandbox) == {STALLED: 2}
    ((url, failure),) = dead_letters(redis_client, "maps").items()
    assert unquote_plus(urlsplit(url).path) == f"/maps/search/{STALLED}"
    assert failure["reason"] == "retries_exhausted:maps_feed_stalled"
    assert f"stopped growing at {BATCH_SIZE} results" in failure["error"]
