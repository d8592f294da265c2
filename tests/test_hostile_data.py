"""Hostile answers: a bad value costs that value, a malformed answer is retried, never a ban.

The crawls fetch from a small real HTTP server that answers what the test gives it.
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, cast
from urllib.parse import parse_qs, urlsplit

import pytest
import redis
from scrapy import Request
from scrapy.http import HtmlResponse, TextResponse
from scrapy.spidermiddlewares.metacopy import MetaCopyDetectionMiddleware
from scrapy.utils.test import get_crawler

from crawler import settings as project_settings
from crawler.meta import DUE_META
from crawler.spiders.explore import ExploreSpider
from crawler.spiders.maps import MapsSpider
from crawler.spiders.profiles import ProfilesSpider
from tests.harness import Crawl, dead_letters

# path with query -> (content type, body); None answers 404.
Answer = Callable[[str], tuple[str, bytes] | None]
TRUNCATED_FEED = b'{"statusCode":0,"itemList":[{"id":"9","desc":"cut'
DEEP = b"[" * 100_000


class LoopbackServer(ThreadingHTTPServer):
    """A real HTTP server on 127.0.0.1 that counts every connection and every path."""

    daemon_threads = True

    def __init__(self, answer: Answer) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.answer = answer
        self.connections = 0
        self.paths: Counter[str] = Counter()
        self.lock = threading.Lock()
        self.thread = threading.Thread(target=self.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def verify_request(self, request: Any, client_address: Any) -> bool:
        with self.lock:
            self.connections += 1
        return True

    def stop(self) -> None:
        self.shutdown()
        self.server_close()


class _Handler(BaseHTTPRequestHandler):
    server: LoopbackServer

    def do_GET(self) -> None:
        with self.server.lock:
            self.server.paths[self.path] += 1
        found = self.server.answer(self.path)
        content_type, body = found or ("text/plain", b"not found")
        self.send_response(200 if found else 404)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        return


def profile_page(script: str | bytes) -> bytes:
    text = script.decode() if isinstance(script, bytes) else script
    return (
        "<html><head><title>x</title></head><body>"
        f'<script id="__UNIVERSAL_DATA_FOR_REHYDRATION__" type="application/json">{text}'
        "</script></body></html>"
    ).encode()


def universal(user: dict[str, Any], stats: dict[str, Any]) -> str:
    detail = {"statusCode": 0, "userInfo": {"user": user, "stats": stats}}
    return json.dumps({"__DEFAULT_SCOPE__": {"webapp.user-detail": detail}})


ODD_USER = {
    "uniqueId": True,
    "id": "42",
    "nickname": "Odd",
    "verified": "yes",
    "createTime": float("inf"),
}
ODD_STATS = {"followerCount": float("inf"), "heartCount": 2**70, "videoCount": "7"}
PROFILE_PAGES = {
    "/@odd.user": profile_page(universal(ODD_USER, ODD_STATS)),
    "/@fine.user": profile_page(universal({"uniqueId": "fine.user", "id": "1"}, {})),
    "/@deep.user": profile_page(DEEP),
    "/@cut.user": profile_page('{"__DEFAULT_SCOPE__": {"webapp.user-detail": {"statusCode"'),
}


def video(video_id: Any, **fields: Any) -> dict[str, Any]:
    stats = {"diggCount": 5, "playCount": 6, "shareCount": 7, "commentCount": 8}
    return {"id": video_id, "desc": "d", "createTime": 1700000000, "stats": stats, **fields}


FEEDS = {
    "2": json.dumps(
        {
            "statusCode": 0,
            "cursor": "3",
            "hasMore": False,
            "itemList": [
                video("v1"),
                video("v2", createTime=float("inf"), stats={"diggCount": "1e999"}),
                video(True),
            ],
        }
    ).encode(),
    "3": TRUNCATED_FEED,
    "4": DEEP,
}


def answer(path: str) -> tuple[str, bytes] | None:
    parts = urlsplit(path)
    if parts.path in PROFILE_PAGES:
        return "text/html; charset=utf-8", PROFILE_PAGES[parts.path]
    category = parse_qs(parts.query).get("categoryType", [""])[0]
    if parts.path == "/api/explore/item_list/" and category in FEEDS:
        return "application/json", FEEDS[category]
    return None


@pytest.fixture
def hostile() -> Iterator[LoopbackServer]:
    server = LoopbackServer(answer)
    yield server
    server.stop()


# --- ban rules and callbacks on real responses -----------------------------------------------


def _spider(cls: Any, **settings: Any) -> Any:
    # The project's settings with its extensions named off: they reach Redis when they start.
    defaults = {name: getattr(project_settings, name) for name in dir(project_settings)}
    defaults = {name: value for name, value in defaults.items() if name.isupper()}
    defaults["EXTENSIONS"] = dict.fromkeys(project_settings.EXTENSIONS)
    base = {"EXPLORE_BASE_URL": "http://127.0.0.1:9", "PROFILES_BASE_URL": "http://127.0.0.1:9"}
    crawler = get_crawler(cls, settings_dict={**defaults, **base, **settings})
    spider = cls.from_crawler(crawler)
    crawler.spider = spider
    return spider


def _feed_response(body: bytes, **meta: Any) -> TextResponse:
    url = "http://127.0.0.1:9/api/explore/item_list/?categoryType=3"
    request = Request(url, meta=meta)
    return TextResponse(url, body=body, encoding="utf-8", request=request)


@pytest.mark.parametrize("body", [TRUNCATED_FEED, DEEP, b"oops"])
def test_malformed_feed_is_not_a_ban(body: bytes) -> None:
    assert _spider(ExploreSpider).ban_rule(_feed_response(body)) is None


def test_html_instead_of_a_feed_is_still_a_ban() -> None:
    body = b"<html><script>window.location.href='/sec'</script></html>"
    assert _spider(ExploreSpider).ban_rule(_feed_response(body)) == "feed_not_json"


@pytest.mark.parametrize("path", ["/@deep.user", "/@cut.user"])
def test_malformed_profile_is_not_a_ban(path: str) -> None:
    url = f"http://127.0.0.1:9{path}"
    response = HtmlResponse(url, body=PROFILE_PAGES[path], request=Request(url))
    assert _spider(ProfilesSpider).ban_rule(response) is None


def _page(cursor: str, has_more: bool = True, items: int = 1) -> bytes:
    video = {"id": "1", "author": {"uniqueId": "a"}, "stats": {"diggCount": 1}}
    body = {"statusCode": 0, "cursor": cursor, "hasMore": has_more, "itemList": [video] * items}
    return json.dumps(body).encode()


@pytest.mark.parametrize(
    ("asked", "body", "stalled"),
    [
        ("16", _page("16"), "same_cursor"),
        ("32", _page("0"), "cursor_back"),
        ("16", _page("32"), None),
        ("abc", _page("abd"), None),  # not numbers: only the same one stalls
    ],
)
def test_a_feed_that_says_more_but_does_not_move_on_ends_its_walk(
    asked: str, body: bytes, stalled: str | None
) -> None:
    """With no page limit (EXPLORE_MAX_PAGES 0) a feed answering hasMore with the cursor it was
    asked for or one going back would be walked for ever: the walk ends there. (A page with no
    items is asked again: test_explore_feed.)"""
    spider = _spider(ExploreSpider)
    url = f"http://127.0.0.1:9/api/explore/item_list/?categoryType=3&cursor={asked}"
    response = TextResponse(url, body=body, encoding="utf-8", request=Request(url))
    following = [out for out in spider.parse_feed(response, 3, 5, 0) if isinstance(out, Request)]
    assert len(following) == (0 if stalled else 1)
    if stalled is not None:
        assert spider.crawler.stats.get_value(f"explore/chain_stalled/{stalled}") == 1


def test_malformed_feed_is_retried_later_until_its_retries_are_spent() -> None:
    spider = _spider(ExploreSpider, RETRY_TIMES=1, RETRY_BACKOFF_BASE=10)
    (retry,) = spider.parse_feed(_feed_response(TRUNCATED_FEED), 3, 1, 1)
    assert isinstance(retry, Request)
    assert retry.meta["retry_times"] == 1
    assert retry.meta[DUE_META] > time.time() + 5
    assert list(spider.parse_feed(_feed_response(TRUNCATED_FEED, retry_times=1), 3, 1, 1)) == []
    stats = spider.crawler.stats
    assert stats.get_value("retry/reason_count/feed_malformed") == 1
    assert stats.get_value("explore/malformed") == 2


def test_a_retry_is_not_taken_for_copied_meta_but_a_copy_still_is(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The retry of a malformed answer goes without the last download's meta; Scrapy's warning
    of meta copied from a response is still given for a spider that copies it."""
    spider = _spider(ExploreSpider, RETRY_TIMES=1)
    response = _feed_response(TRUNCATED_FEED, download_latency=0.2)
    (retry,) = spider.parse_feed(response, 3, 1, 1)
    assert "download_latency" not in retry.meta
    copies = MetaCopyDetectionMiddleware(spider.crawler)
    assert copies.get_processed_request(retry, response) is retry
    assert "internal meta keys" not in caplog.text
    copied = Request("http://127.0.0.1:9/next", meta=response.meta)
    copies.get_processed_request(copied, response)
    assert "['download_latency']" in caplog.text


def test_an_unreadable_place_page_is_retried_later_never_acked_as_stored() -> None:
    """A place page without its place (filled by a script the plain fetch does not run, a
    consent page): tried again after the backoff, then given up as a dead letter; before, its
    lease was acked as if the place were stored."""
    spider = _spider(MapsSpider, MAPS_BASE_URL="http://127.0.0.1:9", RETRY_TIMES=1)
    url = "http://127.0.0.1:9/maps/place/Shop/data=!4m2!3m1!1s0x1:0x2"
    page = HtmlResponse(
        url, body=b"<html><body><div id=app></div></body></html>", request=Request(url)
    )
    (retry,) = spider.parse_place(page, "shop near 00501")
    assert isinstance(retry, Request)
    assert retry.meta["retry_times"] == 1
    assert retry.meta[DUE_META] > time.time()
    again = HtmlResponse(url, body=page.body, request=retry)
    assert list(spider.parse_place(again, "shop near 00501")) == []
    assert spider.crawler.stats.get_value("maps/place/unreadable") == 2


# --- crawls -------------------------------------------------------------------------------------

CRAWL_SETTINGS = {
    "RETRY_TIMES": 1,
    "RETRY_BACKOFF_MAX": 0.1,
    # Were a malformed answer taken for a ban, it would be given up after one short pause.
    "BAN_COOLDOWN": 0.5,
    "BAN_MAX_TIMES": 1,
    "EXPLORE_HANDOFF_SPIDER": "",
}


def _stats(client: redis.Redis, spider: str) -> dict[str, str]:
    raw = cast(dict[bytes, bytes], client.hgetall("{" + spider + "}:stats"))
    return {key.decode(): value.decode() for key, value in raw.items()}


def _frontier_empty(client: redis.Redis, spider: str) -> bool:
    keys = ("queue", "leases", "delayed")
    return not any(client.exists("{" + spider + "}:" + key) for key in keys)


@pytest.mark.integration
def test_profiles_crawl_of_hostile_pages(
    crawl: Crawl, redis_client: redis.Redis, hostile: LoopbackServer
) -> None:
    users = "users=odd.user,fine.user,deep.user,cut.user"
    settings = {**CRAWL_SETTINGS, "PROFILES_BASE_URL": hostile.url}
    result = crawl("profiles", "-a", users, settings=settings, timeout=90)
    assert result.returncode == 0, result.stderr[-3000:]

    stored = {doc["unique_id"]: doc for doc in crawl.mongo.db.profiles.find({}, {"_id": 0})}
    assert set(stored) == {"odd.user", "fine.user"}
    odd = stored["odd.user"]
    assert (odd["user_id"], odd["nickname"], odd["video_count"]) == ("42", "Odd", 7)
    assert odd["follower_count"] is odd["heart_count"] is odd["created_at"] is None
    assert odd["verified"] is None

    stats = _stats(redis_client, "profiles")
    for name in ("unique_id", "verified", "created_at", "follower_count", "heart_count"):
        assert stats[f"extract/bad_field/{name}"] == "1", name
    assert "ban/count" not in stats
    dead = dead_letters(redis_client, "profiles")
    assert sorted(dead) == [f"{hostile.url}/@cut.user", f"{hostile.url}/@deep.user"]
    for failure in dead.values():
        assert failure["reason"] == "retries_exhausted:profile_malformed"
    assert hostile.paths["/@deep.user"] == hostile.paths["/@cut.user"] == 2
    assert _frontier_empty(redis_client, "profiles")


@pytest.mark.integration
def test_explore_crawl_of_hostile_feeds(
    crawl: Crawl, redis_client: redis.Redis, hostile: LoopbackServer
) -> None:
    settings = {**CRAWL_SETTINGS, "EXPLORE_BASE_URL": hostile.url}
    result = crawl("explore", "-a", "categories=2,3,4", settings=settings, timeout=90)
    assert result.returncode == 0, result.stderr[-3000:]

    videos = {doc["video_id"]: doc for doc in crawl.mongo.db.videos.find({}, {"_id": 0})}
    assert set(videos) == {"v1", "v2"}
    assert (videos["v1"]["created_at"], videos["v1"]["digg_count"]) == (1700000000, 5)
    assert videos["v2"]["created_at"] is videos["v2"]["digg_count"] is None
    assert videos["v2"]["description"] == "d"

    stats = _stats(redis_client, "explore")
    for name in ("id", "created_at", "digg_count"):
        assert stats[f"extract/bad_field/{name}"] == "1", name
    assert "ban/count" not in stats
    dead = dead_letters(redis_client, "explore")
    assert len(dead) == 2
    assert {failure["reason"] for failure in dead.values()} == {"retries_exhausted:feed_malformed"}
    fetched: Counter[str] = Counter()
    for path, hits in hostile.paths.items():
        fetched[parse_qs(urlsplit(path).query)["categoryType"][0]] += hits
    assert (fetched["3"], fetched["4"]) == (2, 2)
    assert _frontier_empty(redis_client, "explore")
    # The retries are the project's own, not meta the spider copied from a response.
    assert "internal meta keys" not in result.stderr, result.stderr[-3000:]
