"""The links spider's per-host ledger on a real Redis: counts sent in batches, budgets kept
fleet-wide (exact with one worker, bounded overshoot with several), nothing lost at flush."""

from __future__ import annotations

import contextlib
from typing import Any

import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from redis.exceptions import TimeoutError as RedisTimeoutError

from crawler.links.ledger import HostLedger
from devtools.services import free_port


def test_counts_wait_for_a_batch_then_all_arrive(redis_client: redis.Redis) -> None:
    ledger = HostLedger(redis_client, "links", 60, flush_pages=10, flush_seconds=3600)
    for _ in range(9):
        ledger.page("s", "a.test", 100, {"b.test": 2})
    assert ledger.host("a.test") == {}  # nine pages: not sent yet
    ledger.page("s", "a.test", 100, {"b.test": 2})
    assert ledger.host("a.test") == {"pages": 10, "bytes": 1000, "external_links": 20}
    assert ledger.host("b.test") == {"backlinks": 20}
    ledger.page("s", "c.test", 5, {})
    ledger.flush()
    assert ledger.summary(top=5)["totals"] == {"pages": 11, "bytes": 1005, "external_links": 20}
    assert 0 < int(redis_client.ttl(ledger.keys.host("c.test"))) <= 60


def test_a_flush_is_due_after_its_interval(redis_client: redis.Redis) -> None:
    ledger = HostLedger(redis_client, "links", 60, flush_pages=1000, flush_seconds=0.0)
    ledger.page("s", "a.test", 1, {})
    assert ledger.host("a.test")["pages"] == 1


def test_one_worker_keeps_a_budget_exactly(redis_client: redis.Redis) -> None:
    ledger = HostLedger(redis_client, "links", 60, flush_pages=50, flush_seconds=3600)
    fetched = [ledger.page("s", "a.test", 1, {}, max_pages=120)[0] for _ in range(130)]
    assert fetched == list(range(1, 131))
    assert int(redis_client.get(ledger.keys.budget("s", "a.test")) or 0) == 130


@settings(
    max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    workers=st.integers(2, 4),
    flush_pages=st.integers(1, 20),
    max_pages=st.integers(1, 60),
    order=st.lists(st.integers(0, 3), min_size=1, max_size=200),
)
def test_workers_overshoot_a_budget_by_less_than_their_unsent_pages(
    redis_client: redis.Redis, workers: int, flush_pages: int, max_pages: int, order: list[int]
) -> None:
    """Pages a fleet stores (fetched <= max_pages) beyond the budget stay under what the
    other workers may hold unsent: (workers - 1) x flush_pages."""
    redis_client.flushdb()
    ledgers = [
        HostLedger(redis_client, "links", 60, flush_pages=flush_pages, flush_seconds=3600)
        for _ in range(workers)
    ]
    stored = 0
    for turn in order:
        fetched, _ = ledgers[turn % workers].page("s", "a.test", 1, {}, max_pages=max_pages)
        stored += fetched <= max_pages
    assert stored <= max_pages + (workers - 1) * flush_pages
    for ledger in ledgers:
        ledger.flush()
    assert int(redis_client.get(ledgers[0].keys.budget("s", "a.test")) or 0) == len(order)


def test_counts_kept_while_redis_is_away_arrive_with_the_next_flush(
    redis_client: redis.Redis,
) -> None:
    away = redis.Redis(port=free_port(), socket_connect_timeout=1)
    ledger = HostLedger(away, "links", 60, flush_pages=2, flush_seconds=3600)
    ledger.page("s", "a.test", 10, {})
    with pytest.raises(redis.ConnectionError):
        ledger.page("s", "a.test", 10, {})
    ledger.server = redis_client
    ledger.page("s", "a.test", 10, {})
    ledger.flush()
    assert ledger.host("a.test") == {"pages": 3, "bytes": 30, "external_links": 0}


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.lists(st.tuples(st.sampled_from(["a.test", "b.test"]), st.booleans()), max_size=40))
def test_a_batch_whose_reply_is_lost_is_counted_once_when_sent_again(
    redis_client: redis.Redis, pages: list[tuple[str, bool]]
) -> None:
    """Each page is counted; after a page marked lost, the next round trip's reply is lost
    (Redis applied it, the worker never heard): the batches go again with the next flush."""
    redis_client.flushdb()
    ledger = HostLedger(redis_client, "links", 60, flush_pages=3, flush_seconds=3600)
    real = type(redis_client.pipeline()).execute
    lose = [False]

    def execute(pipe: Any, *args: Any, **kwargs: Any) -> Any:
        replies = real(pipe, *args, **kwargs)
        if lose[0]:
            lose[0] = False
            raise RedisTimeoutError("the reply was lost")
        return replies

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(type(redis_client.pipeline()), "execute", execute)
        for host, lost in pages:
            lose[0] = lose[0] or lost
            with contextlib.suppress(RedisTimeoutError):
                ledger.page("s", host, 10, {"c.test": 1})
        lose[0] = False
        ledger.flush()
    for host in ("a.test", "b.test"):
        count = sum(1 for name, _ in pages if name == host)
        expected = {"pages": count, "bytes": 10 * count, "external_links": count} if count else {}
        assert ledger.host(host) == expected
        assert int(redis_client.get(ledger.keys.budget("s", host)) or 0) == count
    assert ledger.host("c.test") == ({"backlinks": len(pages)} if pages else {})
    totals = ledger.summary()["totals"]
    assert totals.get("pages", 0) == len(pages)
