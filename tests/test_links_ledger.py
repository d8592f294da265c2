"""The links spider's per-host ledger on a real Redis: counts sent in batches, budgets kept
fleet-wide (exact with one worker, bounded overshoot with several), errors riding the
frontier's round trips, nothing lost at flush."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from redis.backoff import NoBackoff
from redis.exceptions import TimeoutError as RedisTimeoutError
from redis.retry import Retry

from crawler.frontier.riders import Riders
from crawler.links.ledger import RIDER, HostLedger
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


@contextlib.contextmanager
def _replies_lost(client: redis.Redis) -> Iterator[list[bool]]:
    """While the block runs, setting the flag it gives loses the reply of the next pipeline
    (Redis applied it; the worker hears a timeout)."""
    real = type(client.pipeline()).execute
    lose = [False]

    def execute(pipe: Any, *args: Any, **kwargs: Any) -> Any:
        replies = real(pipe, *args, **kwargs)
        if lose[0]:
            lose[0] = False
            raise RedisTimeoutError("the reply was lost")
        return replies

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(type(client.pipeline()), "execute", execute)
        yield lose


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
    with _replies_lost(redis_client) as lose:
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


def _batches_applied(client: redis.Redis) -> int:
    """The batches of counts Redis applied, by their numbers (one worker's)."""
    return sum(int(client.get(key) or 0) for key in client.keys("{links}:ledger:applied:*"))


def test_errors_ride_the_frontier_s_next_round_trip_together(redis_client: redis.Redis) -> None:
    """A site answering nothing but errors costs no write per error: they wait for the
    frontier's next round trip (the one that settles their requests' leases, or an earlier
    one) and go in it as one batch."""
    riders = Riders()
    riders.carried = True  # a FrontierScheduler sends them
    ledger = HostLedger(redis_client, "links", 60, flush_seconds=3600, riders=riders)
    for n in range(50):
        ledger.error("a.test", "http_404" if n % 2 else "DownloadTimeoutError")
    assert ledger.host("a.test") == {}
    assert _batches_applied(redis_client) == 0
    assert riders.waiting(RIDER)
    assert riders.send(redis_client)
    assert ledger.host("a.test") == {"errors:http_404": 25, "errors:DownloadTimeoutError": 25}
    assert _batches_applied(redis_client) == 1


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.lists(st.sampled_from(["page", "error", "trip", "trip failed", "reply lost"])))
def test_pages_and_errors_are_counted_once_whatever_becomes_of_the_round_trips(
    redis_client: redis.Redis, steps: list[str]
) -> None:
    """Pages flushed by the ledger and errors riding the frontier's trips, with trips that fail
    (Redis away) or whose reply is lost (Redis applied them): every count arrives, once."""
    redis_client.flushdb()
    riders = Riders()
    riders.carried = True
    ledger = HostLedger(redis_client, "links", 60, flush_pages=3, flush_seconds=3600, riders=riders)
    away = redis.Redis(port=free_port(), retry=Retry(NoBackoff(), 0))
    with _replies_lost(redis_client) as lose:
        for step in steps:
            if step == "page":
                with contextlib.suppress(RedisTimeoutError):
                    ledger.page("s", "a.test", 10, {})
            elif step == "error":
                ledger.error("a.test", "http_404")
            elif step == "trip failed":
                riders.send(away)
            else:
                lose[0] = step == "reply lost"
                riders.send(redis_client)
        lose[0] = False
        riders.send(redis_client)
        ledger.flush()
    pages, errors = steps.count("page"), steps.count("error")
    expected = {"pages": pages, "bytes": 10 * pages, "external_links": 0} if pages else {}
    assert ledger.host("a.test") == {**expected, **({"errors:http_404": errors} if errors else {})}
