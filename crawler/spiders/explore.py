"""Explore feed: videos of a category, page by page; popular authors go to the profiles spider.

Start entries (``-a categories=1,2`` or ``redis-cli lpush explore:start_urls ...``):
    ``2``                                      a category id (see CATEGORIES)
    ``{"category": 2, "max_pages": 3}``        JSON; max_pages overrides EXPLORE_MAX_PAGES
    ``https://host/api/explore/item_list/?...`` a full feed URL (explore or recommend API) on
                                               EXPLORE_BASE_URL (or ALLOWED_START_HOSTS)
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from functools import partial
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from scrapy import Request
from scrapy.spiderloader import get_spider_loader

from crawler.config import setting, setting_int, validate_base_url
from crawler.extractors.explore import (
    FeedBlocked,
    FeedError,
    FeedPage,
    parse_feed,
    popular_author,
    video_fields,
)
from crawler.extractors.jsondata import FieldReader, MalformedData
from crawler.frontier.jobs import JobBook, job_number_of
from crawler.frontier.options import hold_acks
from crawler.frontier.reports import FrontierReports
from crawler.frontier.riders import Riders
from crawler.handoff import Handoff, RidingHandoff
from crawler.items import VideoItem
from crawler.keys import handed_key, revisit_keys, start_key
from crawler.spiders.base import InvalidStartEntry, RedisFedSpider, bounded, check_keys
from crawler.spiders.responses import BlockedPage, body_text, retry_malformed

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from scrapy.http import Response
    from scrapy.settings import BaseSettings

# Category ids of the explore feed (TARGETS.md §1); 120 is "All".
CATEGORIES = {
    1: "comedy & drama",
    2: "dance & music",
    3: "relationship",
    4: "pet & nature",
    5: "lifestyle",
    6: "society",
    7: "fashion",
    8: "entertainment",
    10: "informative",
    11: "sport",
    12: "auto",
    120: "all",
}
FEED_PATHS = ("/api/explore/item_list/", "/api/recommend/item_list/")
_JSON_KEYS = {"category", "url", "max_pages"}
_CATEGORY_TEXT = re.compile(r"[0-9]{1,4}")
MAX_PAGES_LIMIT = 1_000_000
# Video ids a walk read by asking again remembers (its last ones): a page none of whose videos
# is new ends the walk.
SEEN_LIMIT = 1000


class ExploreSpider(RedisFedSpider):
    """Explore feeds into ``videos``, popular authors to ``profiles`` (EXPLORE_* settings)."""

    name = "explore"
    entry_kind = "explore start entry"
    base_url_setting = "EXPLORE_BASE_URL"
    entry_host_from = "base_url"

    def __init__(self, categories: str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.category_args = self.entry_argument("categories", categories)

    def configure(self, crawler: Crawler) -> None:
        settings = crawler.settings
        self.page_size = setting_int(settings, "EXPLORE_PAGE_SIZE", 1, 30)
        self.max_pages = setting_int(settings, "EXPLORE_MAX_PAGES", 0)
        self.min_likes = setting_int(settings, "EXPLORE_POPULAR_MIN_LIKES", 0)
        self.min_followers = setting_int(settings, "EXPLORE_POPULAR_MIN_FOLLOWERS", 0)
        self.handoff = self._build_handoff(crawler)

    def _build_handoff(self, crawler: Crawler) -> RidingHandoff | None:
        target: str = setting(crawler.settings, "EXPLORE_HANDOFF_SPIDER")
        if not target:
            return None
        if not _project_spider(crawler.settings, target):
            self.logger.warning(
                "EXPLORE_HANDOFF_SPIDER = %s is no spider of this project: popular authors go to "
                "its start list %s for another project to read",
                target,
                start_key(crawler.settings, target),
            )
        start = start_key(crawler.settings, target)
        handed = handed_key(crawler.settings, self.name)
        ttl = setting(crawler.settings, "EXPLORE_HANDOFF_TTL")
        profiles_url = validate_base_url(crawler.settings, "PROFILES_BASE_URL")

        def revisit_fingerprint(author: str) -> str:
            """The fingerprint a revisit of the author's profile page waits under."""
            request = Request(f"{profiles_url}/@{author}")
            return bytes(crawler.request_fingerprinter.fingerprint(request))[:16].hex()

        revisits = (revisit_keys(target)[0], revisit_fingerprint)
        handoff = Handoff(self.start_entries.server, start, handed, ttl, revisits)
        hold = hold_acks(setting(crawler.settings, "FRONTIER_LEASE_SECONDS"))
        count = partial(self.count, "explore/authors_handed")
        return RidingHandoff(handoff, Riders.of(crawler), FrontierReports(crawler), hold, count)

    def argument_entries(self) -> Iterable[str]:
        return self.category_args

    def requests_from_entry(self, entry: str | dict[str, Any]) -> Iterable[Request]:
        if isinstance(entry, dict):
            return [self._request_from_json(entry)]
        if entry.isascii() and entry.isdigit():
            return [self.category_request(_category(entry), self.max_pages)]
        return [self._request_from_url(entry, self.max_pages)]

    def _request_from_json(self, entry: dict[str, Any]) -> Request:
        check_keys(entry, _JSON_KEYS, set())
        max_pages = bounded(entry.get("max_pages", self.max_pages), "max_pages", MAX_PAGES_LIMIT)
        if "url" in entry:
            return self._request_from_url(entry["url"], max_pages)
        if "category" not in entry:
            raise InvalidStartEntry("missing_keys", "give 'category' or 'url'")
        return self.category_request(_category(entry["category"]), max_pages)

    def category_request(self, category: int, max_pages: int) -> Request:
        query = {"aid": 1988, "count": self.page_size, "cursor": 0, "categoryType": category}
        url = f"{self.base_url}/api/explore/item_list/?{urlencode(query)}"
        return self._feed_request(url, category, 1, max_pages)

    def _request_from_url(self, url: Any, max_pages: int) -> Request:
        parts = self.start_url(url)
        if parts.path not in FEED_PATHS:
            raise InvalidStartEntry("bad_url", f"path must be one of {FEED_PATHS}")
        query = dict(parse_qsl(parts.query))
        category = _category(query["categoryType"]) if "categoryType" in query else None
        return self._feed_request(parts.geturl(), category, 1, max_pages)

    def _feed_request(
        self,
        url: str,
        category: int | None,
        page: int,
        max_pages: int,
        seen: list[str] | None = None,
    ) -> Request:
        walk: dict[str, Any] = {"category": category, "page": page, "max_pages": max_pages}
        return Request(
            url,
            callback=self.parse_feed,
            cb_kwargs=walk if seen is None else {**walk, "seen": seen},
            headers={"Accept": "application/json"},
            # A feed changes over time: each walk reads it again, page by page.
            dont_filter=True,
        )

    def ban_rule(self, response: Response) -> str | None:
        """A block instead of the feed is a ban; a malformed answer is not (it is retried)."""
        try:
            parse_feed(body_text(response))
        except FeedBlocked as exc:
            return f"feed_{exc.reason}"
        except (FeedError, MalformedData):
            return None
        return None

    def parse_feed(
        self,
        response: Response,
        category: int | None,
        page: int,
        max_pages: int,
        seen: list[str] | None = None,
    ) -> Iterator[Any]:
        """One page of a walk: its videos, then the next page while the feed has more and
        ``max_pages`` (0: no bound) allows. ``seen``: the last video ids of a walk read by
        asking again (a feed without a cursor)."""
        try:
            feed = parse_feed(body_text(response))
        except FeedBlocked as exc:
            raise BlockedPage(f"feed_{exc.reason}") from exc
        except FeedError as exc:
            self.count(f"explore/feed_error/{exc.status_code}")
            self.logger.error("Feed error on %s: %s", response.url, exc)
            return
        except MalformedData as exc:
            self.count("explore/malformed")
            retry = retry_malformed(self.crawler, response, "feed_malformed", exc)
            if retry is not None:
                yield retry
            return
        self.count_bad_fields(feed.bad_fields)
        if feed.has_more and not feed.items:
            # More to come, yet none of it here: a hiccup of the API, or a softer block. Asked
            # again after the backoff; once the retries are spent, a dead letter ends the walk.
            self.count("explore/no_items")
            error = MalformedData("hasMore but no items")
            retry = retry_malformed(self.crawler, response, "feed_no_items", error)
            if retry is not None:
                yield retry
            return
        self.count("explore/pages")
        for item in feed.items:
            reader = FieldReader()
            fields = video_fields(item, category, reader)
            self.count_bad_fields(reader.bad)
            yield VideoItem(**fields)
        self._hand_over_authors(feed, response.request)
        if not (feed.has_more and (max_pages == 0 or page < max_pages)):
            return
        asked = _asked_cursor(response.url)
        if feed.cursor is None or feed.cursor == asked:
            yield from self._ask_again(response, feed, category, page, max_pages, seen or [])
            return
        if asked.isdigit() and feed.cursor.isdigit() and int(feed.cursor) < int(asked):
            # A cursor going back would walk the feed for ever (each page is fetched anew).
            self.count("explore/chain_stalled/cursor_back")
            self.logger.warning(
                "Feed %s says hasMore but its cursor went back: its walk ends", response.url
            )
            return
        yield self._feed_request(
            _with_cursor(response.url, feed.cursor), category, page + 1, max_pages
        )

    def _ask_again(
        self,
        response: Response,
        feed: FeedPage,
        category: int | None,
        page: int,
        max_pages: int,
        seen: list[str],
    ) -> Iterator[Request]:
        """The same request again, for a feed read so (the recommend feed answers other videos
        each time, with no cursor): only within ``max_pages`` (0 would ask for ever), and while
        each page brings videos the walk has not seen."""
        why = "no_cursor" if feed.cursor is None else "same_cursor"
        ids = [str(item["id"]) for item in feed.items]
        if max_pages == 0 or not set(ids) - set(seen):
            # With no bound, a feed without a cursor would be asked for ever: a warning.
            log = self.logger.warning if max_pages == 0 else self.logger.info
            why = why if max_pages == 0 else "nothing_new"
            self.count(f"explore/chain_stalled/{why}")
            log("Feed %s says hasMore but %s: its walk ends", response.url, why)
            return
        seen = [*seen, *(video for video in ids if video not in seen)][-SEEN_LIMIT:]
        yield self._feed_request(response.url, category, page + 1, max_pages, seen)

    def _hand_over_authors(self, feed: FeedPage, request: Request | None) -> None:
        if self.handoff is None:
            return
        entries: dict[str, dict[str, object]] = {}
        job = self._job_of(request)
        for item in feed.items:
            author = popular_author(item, self.min_likes, self.min_followers)
            if author:
                entries[author] = {"unique_id": author, **({"job": job} if job else {})}
        self.handoff.hand_over(entries, request)

    def _job_of(self, request: Request | None) -> str | None:
        """The crawl job of the page's request, which the authors it hands over keep."""
        number = None if request is None else job_number_of(request)
        return None if number is None else JobBook.of(self.crawler).name(number)


def _category(value: Any) -> int:
    """A known category id, given as a whole number or a string of digits."""
    if isinstance(value, str) and _CATEGORY_TEXT.fullmatch(value):
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value not in CATEGORIES:
        shown = repr(value)[:80]
        raise InvalidStartEntry("unknown_category", f"{shown}; known: {sorted(CATEGORIES)}")
    return value


def _asked_cursor(url: str) -> str:
    """The cursor a feed URL asks for ("0", the first page's, when it names none)."""
    return dict(parse_qsl(urlsplit(url).query)).get("cursor", "0")


def _with_cursor(url: str, cursor: str) -> str:
    parts = urlsplit(url)
    query = [(key, value) for key, value in parse_qsl(parts.query) if key != "cursor"]
    query.append(("cursor", cursor))
    return urlunsplit(parts._replace(query=urlencode(query)))


def _project_spider(settings: BaseSettings, name: str) -> bool:
    """Whether the project has a spider called ``name`` (its own module is looked in first)."""
    try:
        get_spider_loader(settings).load(name)
    except KeyError:
        return False
    return True
