"""Due revisits to the frontier: a revisit that cannot be loaded, or Redis being down, does not
stop or stall the others."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

import pytest
import redis
from scrapy import Request

from crawler.frontier.reports import FrontierReports
from crawler.recrawl import RecrawlMiddleware
from crawler.recrawl.revisits import RECRAWL_META
from crawler.recrawl.store import Revisit, RevisitStore
from tests.test_recrawl_units import _middleware


@dataclass
class _Scheduler:
    """The part of the frontier scheduler promotion uses: Redis up or in backoff, the crawl
    paused or not."""

    down: bool = False
    flushes: bool = True
    held: bool = False

    def in_backoff(self) -> bool:
        return self.down

    def paused(self) -> bool:
        return self.held

    def flush(self) -> bool:
        return self.flushes


@dataclass
class _Engine:
    spider: Any
    crawled: list[Request] = field(default_factory=list)

    def crawl(self, request: Request) -> None:
        self.crawled.append(request)


def _promoting(
    redis_url: str, monkeypatch: pytest.MonkeyPatch, scheduler: _Scheduler
) -> tuple[RecrawlMiddleware, _Engine]:
    middleware = _middleware(redis_url)
    engine = _Engine(middleware.crawler.spider)
    middleware.crawler.engine = engine  # type: ignore[assignment]
    monkeypatch.setattr(FrontierReports, "scheduler", property(lambda self: scheduler))
    return middleware, engine


def _record(url: str, callback: str = "parse") -> str:
    return json.dumps({"url": url, "callback": callback})


def test_a_revisit_that_cannot_be_loaded_does_not_stop_the_others(
    redis_url: str, redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    middleware, engine = _promoting(redis_url, monkeypatch, _Scheduler())
    now = time.time()
    RevisitStore(redis_client, "profiles").add(
        [
            Revisit("aa", now - 2, _record("https://www.tiktok.com/@old", "renamed_since")),
            Revisit("bb", now - 1, "{not json"),
            Revisit("cc", now - 1, _record("https://www.tiktok.com/@good")),
        ]
    )
    middleware.promote()  # raises nothing
    assert [request.url for request in engine.crawled] == ["https://www.tiktok.com/@good"]
    assert list(RevisitStore(redis_client, "profiles").due_times()) == ["cc"]
    stats = middleware.crawler.stats
    assert stats is not None
    assert stats.get_value("recrawl/unreadable") == 2
    assert stats.get_value("recrawl/promoted") == 1


@pytest.mark.parametrize("held_by", ["down", "held"], ids=["redis_in_backoff", "crawl_paused"])
def test_no_revisit_is_claimed_while_redis_is_in_backoff_or_the_crawl_paused(
    redis_url: str, redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch, held_by: str
) -> None:
    """Redis in backoff: a call would block the reactor. Paused: a revisit claimed would wait in
    the queue and come due again meanwhile, so a long pause queued copy after copy of each page.
    Either way it waits in Redis, and is claimed once the worker goes on."""
    scheduler = _Scheduler(**{held_by: True})
    middleware, engine = _promoting(redis_url, monkeypatch, scheduler)
    due = time.time() - 1
    RevisitStore(redis_client, "profiles").add([Revisit("aa", due, _record("https://x.test/a"))])
    middleware.promote()
    assert (engine.crawled, redis_client.zscore("{profiles}:revisit", "aa")) == ([], due)
    setattr(scheduler, held_by, False)
    middleware.promote()
    assert [request.url for request in engine.crawled] == ["https://x.test/a"]


def test_a_handed_over_revisit_waits_again_until_its_visit_writes_the_next(
    redis_url: str, redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A revisit that fails, 404s or yields no items writes no next revisit: the page is not
    dropped from its revisits, it comes due again later."""
    middleware, engine = _promoting(redis_url, monkeypatch, _Scheduler())
    store = RevisitStore(redis_client, "profiles")
    record = {"url": "https://x.test/a", "meta": {RECRAWL_META: {"interval": 300}}}
    store.add([Revisit("aa", time.time() - 1, json.dumps(record))])
    middleware.promote()
    assert len(engine.crawled) == 1
    # As if unchanged: twice its interval (the visit, once done, writes its own).
    assert store.due_times()["aa"] == pytest.approx(time.time() + 600, abs=30)
    assert store.claim(10, hold=5).revisits == []  # not due again meanwhile
    assert json.loads(redis_client.hget("{profiles}:revisit:data", "aa") or "") == record


def test_a_claim_the_frontier_did_not_take_yet_is_completed_once_it_does(
    redis_url: str, redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The frontier could not write the handed-over requests (they wait in the worker): the
    revisit stays claimed, and is completed at the next promotion that writes them, not
    handed over a second time."""
    scheduler = _Scheduler(flushes=False)
    middleware, engine = _promoting(redis_url, monkeypatch, scheduler)
    store = RevisitStore(redis_client, "profiles")
    store.add([Revisit("aa", time.time() - 1, _record("https://x.test/a"))])
    middleware.promote()
    claimed_until = store.due_times()["aa"]
    middleware.promote()
    assert store.due_times()["aa"] == claimed_until  # still claimed, not completed
    scheduler.flushes = True
    middleware.promote()
    assert len(engine.crawled) == 1
    assert store.due_times()["aa"] > claimed_until  # completed: its fallback due time
