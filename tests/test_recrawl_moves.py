"""Revisits of pages that are no longer at their address, on real servers: a ``scrapy crawl
links`` worker revisits pages of the sandbox's ``graph.test`` (sandbox/graph.py), which the
test rewrites between visits, with intervals compressed to seconds. What a user sees is
measured where it shows: the waiting revisits in Redis and the requests the site was asked.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import redis

from crawler.frontier.codec import expand
from crawler.meta import SENT_BACK_META
from crawler.recrawl.store import Revisit, RevisitStore
from tests.harness import Crawl, Sandbox, Worker, closed_port, poll
from tests.test_links import links_settings
from tests.test_maps import needs_chromium

pytestmark = pytest.mark.integration

INTERVAL = 1.0
FINGERPRINT = "0123456789abcdef"
LEASE = 5
SETTINGS = links_settings(
    LINKS_SITEMAPS=False,
    RECRAWL_INITIAL_INTERVAL=INTERVAL,
    RECRAWL_MIN_INTERVAL=INTERVAL,
    RECRAWL_MAX_INTERVAL=2,
    RECRAWL_JITTER=0,
    RECRAWL_POLL_INTERVAL=0.05,
    FRONTIER_FLUSH_INTERVAL=0.05,
    FRONTIER_LEASE_SECONDS=LEASE,
    MAX_IDLE_TIME_BEFORE_CLOSE=0,
)


@pytest.fixture
def graph(sandbox: Sandbox) -> Iterator[Sandbox]:
    yield sandbox
    sandbox.admin("graph", {})


def _url(graph: Sandbox, path: str) -> str:
    return f"http://graph.test:{urlsplit(graph.url).port}{path}"


def _worker(crawl: Crawl, graph: Sandbox, tmp_path: Path, *paths: str, **extra: Any) -> Any:
    """A links worker (in the background) crawling each of ``paths`` alone (max_depth 0)."""
    redis_client = redis.Redis.from_url(crawl.redis_url)
    for path in paths:
        entry = {"url": _url(graph, path), "max_depth": 0}
        redis_client.lpush("links:start_urls", json.dumps(entry))
    return crawl.background("links", settings={**SETTINGS, **extra}, log=tmp_path / "worker.log")


def _waiting(redis_client: redis.Redis) -> dict[str, float]:
    """The path of each waiting revisit, with its due time."""
    scores: Any = redis_client.zrange("{links}:revisit", 0, -1, withscores=True)
    due = dict(scores)
    records: Any = redis_client.hgetall("{links}:revisit:data")
    return {
        urlsplit(json.loads(record)["url"]).path: due[fingerprint]
        for fingerprint, record in records.items()
        if fingerprint in due
    }


def _asked(graph: Sandbox, path: str) -> list[float]:
    """When the site was asked for ``path`` since it was last written."""
    return [entry["came"] for entry in graph.admin("graph")["log"] if entry["path"] == path]


def _running(worker: Worker) -> None:
    assert worker.poll() is None, worker.log_text()[-3000:]


def test_a_page_moved_for_good_is_revisited_at_its_new_address_only(
    crawl: Crawl, redis_client: redis.Redis, graph: Sandbox, tmp_path: Path
) -> None:
    """/a, revisited once, then answers 301 to /b: /b is stored and revisited, and /a's
    revisit ends with that visit (before, it waited on, /a was asked again at each of its
    fallbacks and redirected each time, for ever)."""
    graph.admin("graph", {"pages": {"/a": {}}})
    with _worker(crawl, graph, tmp_path, "/a") as worker:
        poll(lambda: len(_asked(graph, "/a")) >= 2, 30, "/a revisited")
        graph.admin("graph", {"pages": {"/a": {"redirect": "/b", "status": 301}, "/b": {}}})
        # /b revisited again and again (every 2 s at most), well past /a's fallback (LEASE s).
        poll(lambda: len(_asked(graph, "/b")) >= 6, 60, "/b revisited", pause=0.2)
        _running(worker)
        assert set(_waiting(redis_client)) == {"/b"}
        assert len(_asked(graph, "/a")) == 1


def _fingerprint(redis_client: redis.Redis, spider: str, path: str) -> str | None:
    """The fingerprint the revisit of ``path`` waits under, if one waits."""
    records: Any = redis_client.hgetall(f"{{{spider}}}:revisit:data")
    found = [key for key, record in records.items() if json.loads(record)["url"].endswith(path)]
    return found[0].decode() if found else None


def _waits(
    redis_client: redis.Redis, spider: str, fingerprint: str, asked: Callable[[], list[float]]
) -> list[float]:
    """The wait each absence in a row gave the revisit, from the time its page was asked (at
    the server) to the due time written (in Redis), until its revisits end."""
    absent, waits = f"{{{spider}}}:revisit:absent", list[float]()

    def next_absence() -> bool:
        times = redis_client.hget(absent, fingerprint)
        if times is not None and int(times) == len(waits) + 1:
            due = redis_client.zscore(f"{{{spider}}}:revisit", fingerprint)
            waits.append(float(due or 0) - asked()[len(waits)])
        return redis_client.zscore(f"{{{spider}}}:revisit", fingerprint) is None

    poll(next_absence, 60, "the revisits' end", pause=0.05)
    return waits


def _assert_doubled(waits: list[float]) -> None:
    """Two absences in a row waited twice, then four times the interval: each measured from
    the page's answer (at the server) to the write of its absence (in Redis), which a busy
    worker may make later, never sooner."""
    assert len(waits) == 2, waits
    for wait, expected in zip(waits, (2 * INTERVAL, 4 * INTERVAL), strict=True):
        assert expected - 0.05 <= wait <= expected + 1.5, waits


@pytest.mark.parametrize(
    "absent",
    [{}, {"/a": {"redirect": "/b", "status": 302}, "/b": {}}],
    ids=["gone-404", "moved-for-now-302"],
)
def test_a_page_away_from_its_address_is_revisited_less_and_less_then_no_more(
    crawl: Crawl, redis_client: redis.Redis, graph: Sandbox, tmp_path: Path, absent: dict[str, Any]
) -> None:
    """/a answers 404 (or a temporary redirect) from its first revisit on: each absence in a
    row doubles its wait (2 s, 4 s), and the third (RECRAWL_ABSENT_LIMIT) ends its revisits
    (before, /a was asked again at each fallback, twice its last interval, for ever). /c, a
    page that stays, is the clock."""
    graph.admin("graph", {"pages": {"/a": {}, "/c": {}}})
    extra = {"RECRAWL_MAX_INTERVAL": 4, "RECRAWL_ABSENT_LIMIT": 3}
    with _worker(crawl, graph, tmp_path, "/a", "/c", **extra) as worker:
        fingerprint = poll(lambda: _fingerprint(redis_client, "links", "/a"), 30, "/a stored")
        graph.admin("graph", {"pages": {"/c": {}, **absent}})
        waits = _waits(redis_client, "links", fingerprint, lambda: _asked(graph, "/a"))
        ended = len(_asked(graph, "/c"))
        # /c asked again (4 s at most): /a is not, nor any later.
        poll(lambda: len(_asked(graph, "/c")) >= ended + 1, 30, "/c revisited", pause=0.2)
        _running(worker)
    _assert_doubled(waits)
    assert len(_asked(graph, "/a")) == 3
    assert set(_waiting(redis_client)) == {"/c"} | set(absent) - {"/a"}
    assert not redis_client.exists("{links}:revisit:absent")


def test_a_page_gone_for_good_is_not_revisited_again(
    crawl: Crawl, redis_client: redis.Redis, graph: Sandbox, tmp_path: Path
) -> None:
    """/a answers 410 at its first revisit: that revisit is its last."""
    graph.admin("graph", {"pages": {"/a": {}, "/c": {}}})
    with _worker(crawl, graph, tmp_path, "/a", "/c") as worker:
        poll(lambda: "/a" in _waiting(redis_client), 30, "/a stored")
        graph.admin("graph", {"pages": {"/c": {}, "/a": {"status": 410}}})
        poll(lambda: _asked(graph, "/a"), 30, "/a revisited")
        # /c asked four times more (past /a's fallback, LEASE s, from its claim on).
        poll(lambda: len(_asked(graph, "/c")) >= 4, 30, "/c revisited", pause=0.2)
        _running(worker)
        assert set(_waiting(redis_client)) == {"/c"}
    assert len(_asked(graph, "/a")) == 1


@needs_chromium
def test_a_place_gone_from_the_map_is_revisited_less_and_less_then_no_more(
    crawl: Crawl, redis_client: redis.Redis, sandbox: Sandbox, tmp_path: Path
) -> None:
    """A place whose page answers 404 at its revisits (its callback never sees it: Scrapy's
    HttpErrorMiddleware) backs off and ends as a page's does: the maps spider's revisit of a
    place closed since, written as its last visit wrote it."""
    path = "/maps/place/Closed+Shop/data=!4m7!3m6!1s0x0:0xdead!8m2!3d40.8!4d-73.0"
    state = {"interval": INTERVAL, "hash": "x", "priority": 0}
    record = {
        "url": sandbox.url + path,
        "callback": "parse_place",
        "cb_kwargs": {"query": "shop near 00501"},
        "meta": {"recrawl": state, SENT_BACK_META: sandbox.url + path},
    }
    RevisitStore(redis_client, "maps").add([Revisit(FINGERPRINT, time.time(), json.dumps(record))])
    settings = {**SETTINGS, "MAPS_BASE_URL": sandbox.url, "RECRAWL_MAX_INTERVAL": 4}
    settings["RECRAWL_ABSENT_LIMIT"] = 3
    log = tmp_path / "worker.log"
    with crawl.background("maps", settings=settings, log=log) as worker:
        waits = _waits(redis_client, "maps", FINGERPRINT, lambda: _arrivals(sandbox, "0xdead"))
        _running(worker)
    _assert_doubled(waits)
    assert len(_arrivals(sandbox, "0xdead")) == 3


def _arrivals(sandbox: Sandbox, part: str) -> list[float]:
    """When the sandbox was asked for a path holding ``part`` (answered 404)."""
    requests = sandbox.admin("stats")["requests"]
    return [r["arrived"] for r in requests if part in r["path"] and r["status"] == 404]


DEAD_HOST = {
    "RECRAWL_MAX_INTERVAL": 4,
    "RECRAWL_ABSENT_LIMIT": 3,
    "RETRY_TIMES": 1,
    "RETRY_BACKOFF_MAX": 0.1,
    "FAILURE_PAUSE_RATIO": 0,
    # A revisit's fallback (a lease ahead) well past a visit slowed by robots.txt deferrals, so
    # no second visit of it starts while the first is still under way.
    "FRONTIER_LEASE_SECONDS": 2 * LEASE,
}


def _revisit_at(redis_client: redis.Redis, like: str, url: str) -> None:
    """A revisit of ``url`` under FINGERPRINT, due now: the links revisit of ``like`` (its
    fingerprint), written as if ``url``'s last visit had written it."""
    record = json.loads(redis_client.hget("{links}:revisit:data", like) or "{}")
    record["url"] = record["meta"][SENT_BACK_META] = url
    RevisitStore(redis_client, "links").add([Revisit(FINGERPRINT, time.time(), json.dumps(record))])


def _absences(redis_client: redis.Redis) -> list[float]:
    """The wait each absence in a row gave FINGERPRINT's revisit, from when the test saw it
    counted (in Redis, polled every 0.05 s) to the due time written with it, until the
    revisit ends."""
    waits: list[float] = []

    def next_absence() -> bool:
        times = redis_client.hget("{links}:revisit:absent", FINGERPRINT)
        due = redis_client.zscore("{links}:revisit", FINGERPRINT)
        if due is None:
            return True
        if times is not None and int(times) == len(waits) + 1:
            waits.append(due - time.time())
        return False

    poll(next_absence, 30, "the revisits' end", pause=0.05)
    return waits


@pytest.mark.parametrize(
    "extra",
    [
        {"HOST_BLOCK_START": 0, "LINKS_ROBOTS_OBEY": False},
        {"HOST_BLOCK_START": 0.1, "HOST_BLOCK_MAX": 0.2},
    ],
    ids=["refused-after-retries", "marked-by-the-breaker"],
)
def test_a_page_whose_host_does_not_answer_is_revisited_less_and_less_then_no_more(
    crawl: Crawl, redis_client: redis.Redis, graph: Sandbox, tmp_path: Path, extra: dict[str, Any]
) -> None:
    """A revisit of a page on a host that refuses every connection fails at each visit, its
    retries spent (or, with the circuit breaker, its robots.txt refused until the host is
    marked for the fleet): each such visit backs it off as a 404 does (2 s, then 4 s), and the
    third (RECRAWL_ABSENT_LIMIT) ends it, with one dead letter per visit (before, it came back
    at each fallback, for ever, one more dead letter each time). /c, a page that stays, is the
    clock."""
    graph.admin("graph", {"pages": {"/c": {}}})
    settings = {**DEAD_HOST, **extra}
    with closed_port() as port, _worker(crawl, graph, tmp_path, "/c", **settings) as worker:
        like = poll(lambda: _fingerprint(redis_client, "links", "/c"), 30, "/c stored")
        dead = f"http://127.0.0.1:{port}/a"
        _revisit_at(redis_client, like, dead)
        waits = _absences(redis_client)
        letters = _letters_of(redis_client, dead)
        # /c asked twice more (4 s each at most): no visit of /a still under way then.
        seen = len(_asked(graph, "/c"))
        poll(lambda: len(_asked(graph, "/c")) >= seen + 2, 30, "/c revisited", pause=0.2)
        _running(worker)
        assert _letters_of(redis_client, dead) == letters
    assert letters == 3
    assert len(waits) == 2, waits
    for wait, expected in zip(waits, (2 * INTERVAL, 4 * INTERVAL), strict=True):
        assert expected - 1 <= wait <= expected + 0.05, waits
    assert set(_waiting(redis_client)) == {"/c"}
    assert not redis_client.exists("{links}:revisit:absent")


def _letters_of(redis_client: redis.Redis, url: str) -> int:
    """How many dead letters the links spider holds of ``url``."""
    raw: Any = redis_client.lrange("{links}:dead", 0, -1)
    return sum(expand(json.loads(letter)["request"])["url"] == url for letter in raw)
