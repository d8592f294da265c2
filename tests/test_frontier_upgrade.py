"""A frontier written by the previous version (one sorted set of ids, scores in ``prio``) is
taken over by this one while the crawl runs: nothing lost, order and priorities kept."""

from __future__ import annotations

import json
import time

import redis

from bench import _legacy_frontier as frontier_legacy
from crawler.frontier.dupefilter import DupefilterConfig
from crawler.frontier.queue import Frontier
from crawler.keys import FrontierKeys
from tests.test_frontier import LEASE, ids, pending, urls

KEYS = FrontierKeys("shop", "shop:start_urls")


def record(url: str) -> str:
    return json.dumps({"url": url})


def test_queued_delayed_and_leased_entries_of_the_old_layout_load(
    redis_client: redis.Redis,
) -> None:
    now = time.time()
    frontier_legacy.schedule(
        redis_client,
        KEYS,
        [
            (0, 0.0, record("a0")),
            (5, 0.0, record("b5")),  # id 2: leased below by an old worker that died
            (0, 0.0, record("c0")),
            (-3, 0.0, record("d-3")),
            (400, 0.0, record("e400")),
            (7, now - 1, record("late7")),  # delayed, due
            (9, now + 3600, record("later9")),  # delayed, not due
        ],
    )
    frontier_legacy.lease(redis_client, KEYS, "2", "old-worker", now - 1)
    frontier = Frontier(redis_client, KEYS, DupefilterConfig("exact"))
    assert frontier.sizes()["queue"] == 4
    assert frontier.sizes()["delayed"] == 2

    popped = frontier.pop(100, LEASE, "new-worker")
    assert (popped.promoted, popped.reclaimed, popped.queue_size) == (1, 1, 0)
    assert urls(popped) == ["e400", "late7", "b5", "a0", "c0", "d-3"]
    assert not redis_client.exists(KEYS.queue)  # moved to the new layout

    acks = [("a", lease_id, "") for lease_id, _ in popped.leased]
    assert frontier.settle(acks, "new-worker", LEASE) == 6
    assert redis_client.hkeys(KEYS.prio) == [b"7"]  # only the delayed one not due yet
    assert redis_client.hkeys(KEYS.data) == [b"7"]

    # The old delayed entry keeps its priority when it comes due, ahead of newer requests.
    frontier.schedule([pending("new0"), pending("new9", 9)])
    redis_client.zadd(KEYS.delayed, {"7": now - 1})
    last = frontier.pop(100, LEASE, "new-worker")
    assert urls(last) == ["later9", "new9", "new0"]
    # Only the new leases have a score there, for workers still running the old POP.
    assert sorted(redis_client.hkeys(KEYS.prio)) == sorted(i.encode() for i in ids(last))


def test_an_old_worker_requeues_delayed_and_leased_requests_of_new_workers(
    redis_client: redis.Redis,
) -> None:
    """Rolling upgrade: an old worker promoting due ids and reclaiming expired leases that new
    workers wrote puts them back (in its queue, which new workers take over), loses none."""
    frontier = Frontier(redis_client, KEYS, DupefilterConfig("exact"))
    now = time.time()
    frontier.schedule([pending("a0"), pending("b5", 5), pending("late-3", -3, due=now + 5)])
    leased = frontier.pop(1, LEASE, "new-worker")
    assert urls(leased) == ["b5"]

    later = now + LEASE + 10  # the delayed one is due and the lease expired
    old = frontier_legacy.pop(redis_client, KEYS, later, 0, later + LEASE, "old-worker")
    assert old[:2] == [1, 1]
    assert redis_client.zcard(KEYS.queue) == 2

    popped = frontier.pop(100, LEASE, "new-worker")
    assert urls(popped) == ["b5", "a0", "late-3"]
    assert frontier.settle([("a", i, "") for i in ids(popped)], "new-worker", LEASE) == 3
    assert frontier.sizes()["queue"] == 0
    assert not redis_client.exists(KEYS.data)
    assert not redis_client.exists(KEYS.prio)
