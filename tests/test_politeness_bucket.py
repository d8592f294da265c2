"""The fleet's token bucket: one rate for every worker, and few round trips while waiting."""

from __future__ import annotations

import time
from typing import Any

import redis

from crawler.bans import politeness
from crawler.bans.politeness import FleetPoliteness, RatePolicy


def script_calls(server: redis.Redis) -> int:
    stats: Any = server.info("commandstats")
    return sum(int(stats.get(name, {}).get("calls", 0)) for name in ("cmdstat_evalsha",))


def test_waiting_workers_share_the_rate_and_ask_once_per_token(
    redis_client: redis.Redis,
) -> None:
    rate, seconds = 4.0, 1.5
    policy = RatePolicy(rate=rate, burst=1.0)
    workers = [FleetPoliteness(redis_client, "shop", policy) for _ in range(2)]
    before = script_calls(redis_client)
    granted, asked = 0, 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:  # both workers ask as often as they can for the whole time
        for worker in workers:
            asked += 1
            granted += worker.acquire("shop.example", "direct") == 0
    calls = script_calls(redis_client) - before
    assert granted <= rate * seconds + 1 + 1  # the rate plus the burst, across both workers
    assert granted >= rate * seconds / 2
    assert asked > 100 * calls, (asked, calls)
    # A worker asks Redis about once per token it gets and once per token the other one got.
    assert calls <= 2 * granted + 4, (calls, granted)


def test_at_higher_rates_one_round_trip_serves_several_requests(
    redis_client: redis.Redis,
) -> None:
    rate, burst, seconds = 20.0, 5.0, 1.5
    worker = FleetPoliteness(redis_client, "shop", RatePolicy(rate=rate, burst=burst))
    before = script_calls(redis_client)
    granted = 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        granted += worker.acquire("shop.example", "direct") == 0
    calls = script_calls(redis_client) - before
    assert rate * seconds / 2 <= granted <= rate * seconds + burst
    # Tokens come half a second's worth (10) at a time, at most the burst (5) per call.
    assert calls <= granted / 4 + 2, (calls, granted)


def test_a_broad_crawl_leaves_a_bounded_memory_of_buckets(
    redis_client: redis.Redis, monkeypatch: Any
) -> None:
    """Many domains each asked once: the worker keeps when the waiting buckets have their next
    token, and forgets those whose time has passed, so its memory does not grow with the web."""
    monkeypatch.setattr(politeness, "KNOWN_BUCKETS", 50)
    worker = FleetPoliteness(redis_client, "shop", RatePolicy(rate=1000.0, burst=1.0))
    for n in range(400):
        assert worker.acquire(f"site{n}.example", "direct") == 0  # one token each, then none left
    assert len(worker._tokens) == 0  # no empty counts kept
    assert len(worker._next_token) <= 50 + 1
