"""One round trip of the scheduler and the layout of its replies, without a crawler
(crawler/frontier/trip.py), on a real Redis."""

from __future__ import annotations

import hashlib
import json
from typing import Any, cast

import redis
from redis.backoff import NoBackoff
from redis.exceptions import RedisError
from redis.retry import Retry

from crawler.frontier.backoff import RedisBackoff
from crawler.frontier.chains import Credits
from crawler.frontier.dupefilter import DupefilterConfig
from crawler.frontier.leases import ACK, LeaseLedger
from crawler.frontier.options import FrontierSettings
from crawler.frontier.outbox import Outbox
from crawler.frontier.queue import Frontier, Pending
from crawler.frontier.riders import Rider, Riders
from crawler.frontier.trip import RoundTrips, Trip
from crawler.keys import FrontierKeys
from devtools.services import free_port

KEYS = FrontierKeys("tripped", "tripped:start_urls")
CONFIG = FrontierSettings(10, 60, 0.1, DupefilterConfig(mode="exact"), 0)


def _pending(url: str) -> Pending:
    return Pending(json.dumps({"url": url}), hashlib.sha1(url.encode()).digest())


def _trips(server: Any) -> tuple[RoundTrips, Outbox, Riders]:
    outbox, riders = Outbox(LeaseLedger(cast(Any, None), "w1")), Riders()
    frontier = Frontier(server, KEYS, CONFIG.dupefilter)
    return (
        RoundTrips(frontier, outbox, Credits(), riders, "w1", CONFIG),
        outbox,
        riders,
    )


def test_a_trip_writes_the_outbox_pops_and_hands_each_rider_its_replies(
    redis_client: redis.Redis,
) -> None:
    trips, outbox, riders = _trips(redis_client)
    for url in ("http://a.test/1", "http://a.test/2", "http://a.test/1"):
        outbox.push(_pending(url))
    read: list[list[Any]] = []
    riders.add("count", Rider(lambda pipe: pipe.incr("tripped:count"), read.append), 60)
    assert trips.needed(pop=False, everything=False)

    trip = trips.go(True, RedisBackoff(), lambda exc: None)
    assert trip is not None
    assert (trip.pushed, trip.filtered, trip.eager) == (3, 1, True)
    assert trip.popped is not None
    leased = sorted(json.loads(record)["url"] for _, record in trip.popped.leased)
    assert leased == ["http://a.test/1", "http://a.test/2"]
    assert read == [[1]]
    assert not outbox
    assert not trips.needed(pop=False, everything=True)

    # The acks of the next trip go without a pop: no pop's reply is read.
    outbox.leases.ops.append((ACK, trip.popped.leased[0][0], ""))
    after = trips.go(False, RedisBackoff(), lambda exc: None)
    assert after == Trip()
    assert redis_client.zcard(KEYS.leases) == 1


def test_a_trip_redis_fails_keeps_everything_for_the_next(redis_client: redis.Redis) -> None:
    """Redis away: the trip says so, the outbox keeps its requests and acks, each rider hears
    of the failure; the next trip, Redis back, writes them all."""
    dead = redis.Redis(port=free_port(), socket_connect_timeout=0.5, retry=Retry(NoBackoff(), 0))
    trips, outbox, riders = _trips(dead)
    outbox.push(_pending("http://a.test/kept"))
    failures: list[RedisError] = []
    lost: list[RedisError] = []
    riders.add(
        "count",
        Rider(lambda pipe: pipe.incr("tripped:count"), lambda replies: None, lost.append),
        60,
    )

    assert trips.go(True, RedisBackoff(), failures.append) is None
    assert len(failures) == 1
    assert len(lost) == 1
    assert [pending.json for pending in outbox.pushes] == [_pending("http://a.test/kept").json]

    trips.frontier = Frontier(redis_client, KEYS, CONFIG.dupefilter)
    trip = trips.go(True, RedisBackoff(), failures.append)
    assert trip is not None
    assert trip.popped is not None
    assert [json.loads(record)["url"] for _, record in trip.popped.leased] == ["http://a.test/kept"]
    assert len(failures) == 1
