"""The explore feed as the real API answers it: null and absent counts, the exact statsV2,
soft blocks, pages without items and the cursorless recommend feed (TARGETS.md §1, §4)."""

from __future__ import annotations

import json
import time
from typing import Any, cast

import pytest
import redis
from scrapy import Request
from scrapy.http import TextResponse
from scrapy.utils.test import get_crawler

from crawler import settings as project_settings
from crawler.extractors.explore import FeedBlocked, parse_feed, popular_author, video_fields
from crawler.extractors.jsondata import NULL, FieldReader, field
from crawler.meta import DUE_META
from crawler.spiders.explore import ExploreSpider
from crawler.spiders.responses import BlockedPage
from sandbox.data import ALL_CATEGORY, rounded_count
from sandbox.seed import build_dataset
from tests.harness import Crawl, Sandbox

COUNTS = ("digg_count", "play_count", "share_count", "comment_count", "collect_count")


def _item(**fields: Any) -> dict[str, Any]:
    item: dict[str, Any] = {
        "id": "7301",
        "desc": "a dance",
        "createTime": 1700000000,
        "author": {"id": "66", "uniqueId": "dancer.one"},
        "stats": {
            "diggCount": 10,
            "playCount": 20,
            "shareCount": 30,
            "commentCount": 40,
            "collectCount": 50,
        },
    }
    item.update(fields)
    return item


# --- null and absent values ------------------------------------------------------------------


def test_field_tells_a_null_from_an_absent_key() -> None:
    assert field({"a": None}, "a") is NULL
    assert field({}, "a") is None
    assert field({"a": 0}, "a") == 0


def test_a_null_count_is_stored_as_null_and_counted() -> None:
    """A video whose diggCount is null has unknown likes, not 0."""
    item = _item(desc=None, createTime=None, author={"id": None, "uniqueId": None})
    item["stats"]["diggCount"] = None
    reader = FieldReader()
    fields = video_fields(item, 2, reader)
    assert fields["digg_count"] is None
    assert fields["play_count"] == 20
    assert fields["created_at"] is None
    assert (fields["description"], fields["author_id"], fields["author_unique_id"]) == (None,) * 3
    assert sorted(reader.bad) == [
        "author_id",
        "author_unique_id",
        "created_at",
        "description",
        "digg_count",
    ]


def test_absent_counts_and_time_are_null_not_zero() -> None:
    """An item without stats or createTime: its counts and time are unknown (null), never 0
    likes or a video of 1970; an absent value is not a bad one (not counted)."""
    reader = FieldReader()
    fields = video_fields({"id": "7302"}, 2, reader)
    assert fields["video_id"] == "7302"
    assert all(fields[name] is None for name in COUNTS)
    assert fields["created_at"] is None
    assert fields["description"] is fields["author_id"] is fields["author_unique_id"] is None
    assert reader.bad == []


def test_zero_is_a_count() -> None:
    item = _item()
    item["stats"]["diggCount"] = 0
    assert video_fields(item, 2)["digg_count"] == 0


# --- stats and statsV2 -----------------------------------------------------------------------


def test_the_exact_statsv2_wins_over_the_rounded_stats() -> None:
    """TikTok rounds ``stats`` from 10,000 up (22600 for 22609): ``statsV2`` holds the exact
    counts as strings."""
    item = _item(
        stats={"diggCount": 22600, "playCount": 1800000, "shareCount": 5},
        statsV2={"diggCount": "22609", "playCount": "1776621"},
    )
    fields = video_fields(item, 2)
    assert (fields["digg_count"], fields["play_count"]) == (22609, 1776621)
    assert fields["share_count"] == 5  # statsV2 lacks it: stats, field by field


def test_a_bad_statsv2_value_falls_back_to_stats() -> None:
    item = _item(statsV2={"diggCount": "lots", "playCount": None, "shareCount": "31"})
    reader = FieldReader()
    fields = video_fields(item, 2, reader)
    assert (fields["digg_count"], fields["play_count"], fields["share_count"]) == (10, 20, 31)
    assert reader.bad == []


def test_a_count_bad_in_both_copies_is_null_and_counted() -> None:
    item = _item(statsV2={"diggCount": "lots"})
    item["stats"]["diggCount"] = None
    reader = FieldReader()
    assert video_fields(item, 2, reader)["digg_count"] is None
    assert reader.bad == ["digg_count"]


def test_popular_authors_are_judged_by_the_exact_counts() -> None:
    item = _item(stats={"diggCount": 250_000}, statsV2={"diggCount": "249999"})
    assert popular_author(item, 250_000, 10_000) is None
    followed = _item(
        authorStats={"followerCount": 10_000}, authorStatsV2={"followerCount": "10049"}
    )
    assert popular_author(followed, 10**9, 10_040) == "dancer.one"


# --- soft blocks and pages without items -----------------------------------------------------

SOFT_BLOCK = {"statusCode": 0, "status_code": 0, "status_msg": "", "extra": {"now": 1}}
FEED_URL = "http://127.0.0.1:9/api/explore/item_list/?aid=1988&count=16&categoryType=3"


def _spider(**settings: Any) -> ExploreSpider:
    # The project's settings with its extensions named off: they reach Redis when they start.
    defaults = {name: getattr(project_settings, name) for name in dir(project_settings)}
    defaults = {name: value for name, value in defaults.items() if name.isupper()}
    defaults["EXTENSIONS"] = dict.fromkeys(project_settings.EXTENSIONS)
    base = {
        "EXPLORE_BASE_URL": "http://127.0.0.1:9",
        "PROFILES_BASE_URL": "http://127.0.0.1:9",
        "EXPLORE_HANDOFF_SPIDER": "",
    }
    crawler = get_crawler(ExploreSpider, settings_dict={**defaults, **base, **settings})
    spider = ExploreSpider.from_crawler(crawler)
    crawler.spider = spider
    return spider


def _response(body: dict[str, Any], url: str = FEED_URL, **meta: Any) -> TextResponse:
    request = Request(url, meta=meta)
    return TextResponse(url, body=json.dumps(body).encode(), encoding="utf-8", request=request)


@pytest.mark.parametrize(
    "body",
    [SOFT_BLOCK, {**SOFT_BLOCK, "itemList": None, "hasMore": None}, {"statusCode": 0}],
)
def test_a_status_0_answer_without_data_is_a_block(body: dict[str, Any]) -> None:
    """The real API answers a blocked IP or a stale session with status 0 and nothing else."""
    with pytest.raises(FeedBlocked) as raised:
        parse_feed(json.dumps(body))
    assert raised.value.reason == "no_data"
    spider = _spider()
    assert spider.ban_rule(_response(body)) == "feed_no_data"
    with pytest.raises(BlockedPage, match="feed_no_data"):  # ban checks off: never stored
        list(spider.parse_feed(_response(body), 3, 1, 0))
    assert spider.crawler.stats.get_value("explore/pages") is None


@pytest.mark.parametrize(
    "body",
    [
        {"statusCode": 0, "itemList": [], "hasMore": False},
        {"statusCode": 0, "hasMore": False, "cursor": "55"},
    ],
)
def test_the_end_of_a_feed_is_no_block(body: dict[str, Any]) -> None:
    page = parse_feed(json.dumps(body))
    assert (page.items, page.has_more) == ([], False)
    assert _spider().ban_rule(_response(body)) is None


@pytest.mark.parametrize("items", [None, []])
def test_a_page_with_more_but_no_items_is_asked_again_then_given_up(
    items: list[Any] | None,
) -> None:
    """hasMore, the cursor moved on, no items: the walk does not end there (nor on the next
    page, never read); the page is asked again after the backoff, then given up as a dead
    letter once the retries are spent."""
    spider = _spider(RETRY_TIMES=1, RETRY_BACKOFF_BASE=10)
    body = {"statusCode": 0, "hasMore": True, "cursor": "32", "itemList": items}
    url = f"{FEED_URL}&cursor=16"
    (retry,) = spider.parse_feed(_response(body, url), 3, 2, 0)
    assert isinstance(retry, Request)
    assert retry.url == url
    assert retry.meta["retry_times"] == 1
    assert retry.meta[DUE_META] > time.time() + 5
    assert list(spider.parse_feed(_response(body, url, retry_times=1), 3, 2, 0)) == []
    stats = spider.crawler.stats
    assert stats.get_value("explore/no_items") == 2
    assert stats.get_value("retry/reason_count/feed_no_items") == 1
    assert stats.get_value("explore/pages") is None


# --- feeds read by asking again (the recommend feed) -----------------------------------------

RECOMMEND_URL = "http://127.0.0.1:9/api/recommend/item_list/?from_page=fyp&count=30"


def _videos(*ids: str, **page: Any) -> dict[str, Any]:
    items = [_item(id=video_id) for video_id in ids]
    return {"statusCode": 0, "hasMore": True, "itemList": items, **page}


def _next(spider: ExploreSpider, response: TextResponse, **walk: Any) -> list[Request]:
    walk = {"category": None, "page": 1, "max_pages": 10, **walk}
    return [out for out in spider.parse_feed(response, **walk) if isinstance(out, Request)]


def test_a_feed_without_a_cursor_is_asked_again_while_it_brings_new_videos() -> None:
    """The recommend feed has no cursor: the same request answers other videos each time."""
    spider = _spider()
    (again,) = _next(spider, _response(_videos("1", "2", "3"), RECOMMEND_URL))
    assert (again.url, again.dont_filter) == (RECOMMEND_URL, True)
    assert again.cb_kwargs == {
        "category": None,
        "page": 2,
        "max_pages": 10,
        "seen": ["1", "2", "3"],
    }
    response = _response(_videos("3", "4"), RECOMMEND_URL)
    (third,) = _next(spider, response, **{**again.cb_kwargs, "category": None})
    assert third.cb_kwargs["page"] == 3
    assert third.cb_kwargs["seen"] == ["1", "2", "3", "4"]


def test_a_walk_asking_again_ends_on_a_page_with_nothing_new() -> None:
    spider = _spider()
    response = _response(_videos("2", "1"), RECOMMEND_URL)
    assert _next(spider, response, page=4, seen=["1", "2", "3"]) == []
    assert spider.crawler.stats.get_value("explore/chain_stalled/nothing_new") == 1


@pytest.mark.parametrize(
    ("page", "max_pages", "body", "stalled"),
    [
        (10, 10, _videos("1"), None),  # its bound reached
        (1, 0, _videos("1"), "no_cursor"),  # no bound: it would be asked for ever
        (1, 10, _videos("1", hasMore=False), None),  # the feed's end
    ],
)
def test_a_walk_asking_again_stays_within_its_bound(
    page: int, max_pages: int, body: dict[str, Any], stalled: str | None
) -> None:
    spider = _spider()
    assert _next(spider, _response(body, RECOMMEND_URL), page=page, max_pages=max_pages) == []
    if stalled:
        assert spider.crawler.stats.get_value(f"explore/chain_stalled/{stalled}") == 1


def test_a_cursor_answered_unchanged_is_asked_again_within_a_bound() -> None:
    spider = _spider()
    url = f"{RECOMMEND_URL}&cursor=0"
    (again,) = _next(spider, _response(_videos("1", cursor="0"), url))
    assert again.url == url
    assert again.cb_kwargs["seen"] == ["1"]


def test_a_cursor_feed_is_walked_by_its_cursor() -> None:
    spider = _spider()
    url = f"{FEED_URL}&cursor=16"
    (following,) = _next(spider, _response(_videos("1", cursor="32"), url), category=3)
    assert following.url.endswith("&cursor=32")
    assert "seen" not in following.cb_kwargs


# --- crawls of the sandbox -------------------------------------------------------------------

DATASET = build_dataset()


def _stats(client: redis.Redis, spider: str) -> dict[str, str]:
    raw = cast(dict[bytes, bytes], client.hgetall("{" + spider + "}:stats"))
    return {key.decode(): value.decode() for key, value in raw.items()}


@pytest.mark.integration
def test_a_crawl_stores_the_exact_counts(crawl: Crawl, sandbox: Sandbox) -> None:
    """The sandbox's feed, as the real one, rounds ``stats`` and keeps ``statsV2`` exact."""
    videos = DATASET.videos_by_category[2]
    assert any(video.stats.digg_count != rounded_count(video.stats.digg_count) for video in videos)
    result = crawl("explore", "-a", "categories=2", settings={"EXPLORE_HANDOFF_SPIDER": ""})
    assert result.returncode == 0, result.stderr[-3000:]
    stored = {doc["video_id"]: doc for doc in crawl.mongo.db.videos.find({}, {"_id": 0})}
    assert set(stored) == {video.id for video in videos}
    for video in videos:
        doc = stored[video.id]
        assert (doc["digg_count"], doc["play_count"]) == (
            video.stats.digg_count,
            video.stats.play_count,
        )


@pytest.mark.integration
def test_a_soft_blocked_feed_is_a_ban_and_the_walk_goes_on_after_it(
    crawl: Crawl, redis_client: redis.Redis, sandbox: Sandbox
) -> None:
    """The sandbox answers its third request on with the real feed's soft block (status 0, no
    data) for a second: a ban, waited out; the walk then goes on to the feed's end."""
    sandbox.admin(
        "config",
        {
            "rate_limit": {
                "enabled": True,
                "max_requests": 2,
                "window_seconds": 60,
                "ban_seconds": 1,
                "ban_mode": "soft_block",
            }
        },
    )
    settings = {"EXPLORE_HANDOFF_SPIDER": "", "BAN_COOLDOWN": 2, "BAN_MAX_TIMES": 0}
    result = crawl("explore", "-a", "categories=2", settings=settings, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    stored = set(crawl.mongo.db.videos.distinct("video_id"))
    assert stored == {video.id for video in DATASET.videos_by_category[2]}
    stats = _stats(redis_client, "explore")
    assert int(stats["ban/rule/feed_no_data"]) >= 1
    assert sandbox.admin("stats")["bans"]["issued"] >= 1
    assert redis_client.llen("{explore}:dead") == 0


@pytest.mark.integration
def test_pages_answered_once_without_items_are_asked_again(
    crawl: Crawl, redis_client: redis.Redis, sandbox: Sandbox
) -> None:
    sandbox.admin("config", {"feed_mode": "hollow_once"})
    settings = {"EXPLORE_HANDOFF_SPIDER": "", "RETRY_BACKOFF_MAX": 0.1}
    result = crawl("explore", "-a", "categories=2", settings=settings, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    stored = set(crawl.mongo.db.videos.distinct("video_id"))
    assert stored == {video.id for video in DATASET.videos_by_category[2]}
    stats = _stats(redis_client, "explore")
    pages = -(-len(DATASET.videos_by_category[2]) // project_settings.EXPLORE_PAGE_SIZE)
    assert int(stats["explore/no_items"]) == pages - 1
    assert int(stats["explore/pages"]) == pages
    assert redis_client.llen("{explore}:dead") == 0


@pytest.mark.integration
def test_the_recommend_feed_is_read_by_asking_again(
    crawl: Crawl, redis_client: redis.Redis, sandbox: Sandbox
) -> None:
    """The sandbox's recommend feed without a cursor, as the real one: each request the next
    30 videos of the "for you" list, round again once through it. The walk reads every video,
    then ends on the first page that brings none it has not seen."""
    sandbox.admin("config", {"feed_mode": "refresh"})
    url = f"{sandbox.url}/api/recommend/item_list/?from_page=fyp&count=30"
    redis_client.lpush("explore:start_urls", json.dumps({"url": url, "max_pages": 100}))
    result = crawl("explore", settings={"EXPLORE_HANDOFF_SPIDER": ""}, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    videos = DATASET.videos_by_category[ALL_CATEGORY]
    assert set(crawl.mongo.db.videos.distinct("video_id")) == {video.id for video in videos}
    stats = _stats(redis_client, "explore")
    assert int(stats["explore/pages"]) == -(-len(videos) // 30) + 1
    assert stats["explore/chain_stalled/nothing_new"] == "1"
