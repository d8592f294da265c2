"""The fleet's token bucket: one rate for every worker, and few round trips while waiting."""

from __future__ import annotations

import itertools
import time
from typing import Any

import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from crawler.bans import politeness
from crawler.bans.politeness import FleetPoliteness
from crawler.frontier import lua
from crawler.frontier.pacing import RatePolicy


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


class _Clock:
    """The time as the politeness module reads it, moved on at will (no sleep)."""

    def __init__(self) -> None:
        self.offset = 0.0

    def time(self) -> float:
        return time.time() + self.offset

    def monotonic(self) -> float:
        return time.monotonic() + self.offset


def test_tokens_kept_for_later_never_add_to_a_full_bucket(
    redis_client: redis.Redis, monkeypatch: Any
) -> None:
    """Several identities (tokens taken by the ban middleware): the tokens one call granted
    beyond its request are spent within an interval or not at all, so after a quiet spell at
    most the burst goes at once; and the worker keeps a bounded memory of them."""
    clock = _Clock()
    monkeypatch.setattr(politeness, "time", clock)
    monkeypatch.setattr(politeness, "KNOWN_BUCKETS", 50)
    worker = FleetPoliteness(redis_client, "shop", RatePolicy(rate=10.0, burst=5.0))
    assert worker.acquire("a.test", "proxy:p:1") == 0
    clock.offset += 2.0  # the bucket is full again
    went = sum(worker.acquire("a.test", "proxy:p:1") == 0 for _ in range(20))
    assert went == 5  # the burst
    for n in range(400):
        worker.acquire(f"site{n}.example", "proxy:p:1")
        clock.offset += 0.2
    assert len(worker._tokens) <= 50 + 1


# --- the one bucket: turns planned by the pop, tokens taken by the send gate ---------------------

PLAN = "local at = bucket_plan(KEYS[1], tonumber(ARGV[1]), tonumber(ARGV[2]), " + (
    "tonumber(ARGV[3]), 0, 1e9)\nreturn fmt(at)"
)
_steps = st.lists(
    st.tuples(
        st.sampled_from(["plan", "take", "take_new", "ask", "take_book"]),
        st.floats(min_value=0.0, max_value=3.0),  # seconds since the step before
    ),
    min_size=1,
    max_size=40,
)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    steps=_steps,
    rate=st.sampled_from([0.5, 1.0, 4.0]),
    burst=st.sampled_from([1.0, 3.0]),
)
def test_tokens_taken_keep_the_rate_whatever_was_planned(
    redis_client: redis.Redis, steps: list[tuple[str, float]], rate: float, burst: float
) -> None:
    """However the pop's planned turns and the gate's takes interleave, and whatever allowance a
    take asks (a connection to open), the times the granted requests count as sent never hold
    more than ``burst`` within one interval: no request reaches its host too soon. A request
    turned away comes back after the wait it was told, so the takes probe the bucket's edges."""
    key = "{t}:rate:host|direct"
    redis_client.delete(key)
    plan = redis_client.register_script(lua.BUCKET + PLAN)
    take = redis_client.register_script(lua.TAKE)
    now, sent = 1_000_000.0, []
    for kind, gap in steps:
        now += gap
        if kind == "plan":
            assert float(plan(keys=[key], args=[rate, burst, now]).decode()) >= now - 1e-6
            continue
        allowance = 0.5 if kind == "take_new" else 0.0
        at = now
        while True:  # a request turned away comes back when told, as the gate holds it
            book = int(kind == "take_book")  # turned away, it books the next free turn
            args = [at, rate, burst, 1, 0, 1, 0, allowance, book]
            granted, wait, _ = take(keys=[key], args=args)
            if int(granted):
                sent.append(at + allowance)
                break
            assert float(wait) > 0
            if kind == "ask":  # turned away once: it went elsewhere (back to the frontier)
                break
            at += float(wait)
        now = at
    sent.sort()
    window = 1 / rate - 1e-3  # the microsecond rounding of the written times
    for first, later in zip(sent, sent[int(burst) :], strict=False):
        assert later - first >= window, (sent, first, later)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    rate=st.sampled_from([0.5, 4.0, 20.0]),
    burst=st.sampled_from([1.0, 3.0]),
    planned=st.integers(0, 4),
    turned=st.integers(2, 12),
)
def test_requests_turned_away_together_come_back_one_a_turn(
    redis_client: redis.Redis, rate: float, burst: float, planned: int, turned: int
) -> None:
    """The send gate's requests refused in one round trip (each with a turn a pop planned, the
    tokens spent) are each told a different wait, one interval apart and after every turn
    planned, and each is granted when it comes back then, as are the other planned requests at
    their turns: the gate's round trips stay about one a request, not one per waiting request
    at every token, and the turns counted as planned do not grow with the refusals."""
    key = "{t}:rate:herd.example|direct"
    redis_client.delete(key)
    plan = redis_client.register_script(lua.BUCKET + PLAN)
    take = redis_client.register_script(lua.TAKE)
    now = 1_000_000.0
    for _ in range(int(burst)):
        assert int(take(keys=[key], args=[now, rate, burst, 1, 0, 1, 0, 0, 1])[0])
    # Turns for the others, then for the requests to be turned away.
    turns = [
        float(plan(keys=[key], args=[rate, burst, now]).decode()) for _ in range(planned + turned)
    ]
    waits = []
    for _ in range(turned):  # asked before their turns: refused
        granted, wait, _ = take(keys=[key], args=[now, rate, burst, 1, 0, 1, 0, 0, 1])
        assert not int(granted)
        waits.append(now + float(wait))
    interval = 1 / rate
    assert all(b - a >= interval - 1e-3 for a, b in itertools.pairwise(waits))
    assert waits[0] >= max(turns) + interval - 1e-3
    for at in sorted(turns[:planned] + waits):  # the others at their turns, then the refused
        assert int(take(keys=[key], args=[at, rate, burst, 1, 0, 1, 0, 0, 1])[0]), at
    assert int(redis_client.hget(key, "planned") or 0) == 0


def _take(server: redis.Redis, key: str, now: float, rate: float, burst: float) -> float:
    """take.lua for one request at ``now``: 0 when granted, else the seconds to wait."""
    reply: Any = server.eval(lua.TAKE, 1, key, now, rate, burst, 1, 0.001, 1, 0, 0)
    return 0.0 if int(reply[0]) else float(reply[1])


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    rate=st.sampled_from([0.5, 1.0, 4.0]),
    burst=st.sampled_from([1.0, 2.0]),
    stall=st.floats(0.01, 3.0),
    asks=st.lists(st.floats(0.0, 4.0), max_size=6),
)
def test_a_request_that_went_late_moves_its_hosts_next_token(
    redis_client: redis.Redis, rate: float, burst: float, stall: float, asks: list[float]
) -> None:
    """A request granted at t0 that goes on only at t0 + ``stall`` (sent_late.lua), whatever
    other requests asked meanwhile and were turned away, leaves the host's next token no sooner
    than one interval after it went, less what the burst still allows."""
    key = "rate:late.example|direct"
    redis_client.delete(key)
    t0 = 1_000_000.0
    for _ in range(int(burst)):  # the burst spent: the last one is the request that stalls
        assert _take(redis_client, key, t0, rate, burst) == 0
    went = t0 + stall
    for offset in sorted(asks):  # asks turned away before the stalled request went on
        if t0 + offset < went and _take(redis_client, key, t0 + offset, rate, burst) == 0:
            return  # its token came before the stall ended: nothing to move
    redis_client.eval(lua.SENT_LATE, 1, key, went, t0, rate, burst, 0.001)
    assert _take(redis_client, key, went + 0.99 / rate, rate, burst) > 0
    assert _take(redis_client, key, went + 1.001 / rate, rate, burst) == 0
