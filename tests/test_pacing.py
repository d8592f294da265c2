"""Politeness taken in the frontier's pop (``Pacing``): a worker is handed only requests whose
host has a token now; the others wait for their host's turn in the delayed set."""

from __future__ import annotations

import itertools
import json
import time
from typing import Any, cast
from urllib.parse import urlsplit

import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scrapy import Request
from scrapy.settings import Settings

from crawler import settings as project
from crawler.config import setting
from crawler.frontier.dupefilter import DupefilterConfig
from crawler.frontier.options import FrontierSettings
from crawler.frontier.pacing import Pacing, RatePolicy
from crawler.frontier.queue import Frontier, Pending
from crawler.frontier.records import pending as record_of
from crawler.keys import FrontierKeys
from tests.harness import poll

KEYS = FrontierKeys("paced", "paced:start_urls")
LEASE = 30.0


def pacing(rate: float = 2.0, burst: float = 1.0, **more: Any) -> Pacing:
    return Pacing(identity="default", rate=rate, burst=burst, recovery=0.001, **more)


def entry(url: str, meta: dict[str, Any] | None = None) -> Pending:
    """What the scheduler stores for a plain GET of ``url``."""
    request = Request(url, meta=meta or {}, dont_filter=True)
    return record_of(request, url.encode().ljust(8, b"\0"), None)


@pytest.fixture
def frontier(redis_client: redis.Redis) -> Frontier:
    return Frontier(redis_client, KEYS, DupefilterConfig(mode="none"))


def turn_times(client: redis.Redis) -> list[float]:
    """Due times of the turns waiting in the delayed set, earliest first."""
    raw: Any = client.zrange(KEYS.delayed, 0, -1, withscores=True)
    return [float(score) for _, score in raw]


def gaps(times: list[float]) -> list[float]:
    return [later - earlier for earlier, later in itertools.pairwise(times)]


def leased_urls(frontier: Frontier, rules: Pacing, count: int = 50) -> list[str]:
    popped = frontier.pop(count, LEASE, "w1", rules)
    assert popped.paced == {lease_id for lease_id, _ in popped.leased}
    return [json.loads(data)["u"] for _, data in popped.leased]


def test_a_busy_host_does_not_hold_back_the_others(
    frontier: Frontier, redis_client: redis.Redis
) -> None:
    """Same-host links come first in the queue; the pop still hands out every other host's
    request at once, and gives the busy host's backlog turns one interval apart."""
    busy = [f"http://busy.test/p/{n}" for n in range(10)]
    others = [f"http://site{n}.test/" for n in range(5)]
    frontier.schedule([entry(url) for url in busy + others])
    started = time.time()
    assert leased_urls(frontier, pacing(rate=2.0)) == [busy[0], *others]
    times = turn_times(redis_client)
    assert len(times) == 9
    assert all(0.49 <= gap <= 0.51 for gap in gaps(times))
    assert started + 0.45 <= times[0] <= time.time() + 0.55
    assert frontier.sizes()["queue"] == 0


def test_turns_are_handed_out_when_they_come(frontier: Frontier) -> None:
    urls = [f"http://one.test/{n}" for n in range(4)]
    frontier.schedule([entry(url) for url in urls])
    rules = pacing(rate=10.0)
    got = leased_urls(frontier, rules)
    sent = [time.time()]

    def more() -> bool:
        new = leased_urls(frontier, rules)
        sent.extend(time.time() for _ in new)
        got.extend(new)
        return len(got) == 4

    poll(more, timeout=10, pause=0.01)
    assert got == urls  # the host's requests keep their order
    # Handed out at its turn or after (what the worker sees carries the pops' own latency).
    assert min(gaps(sent)) >= 0.1 - 0.03
    sizes = frontier.sizes()
    assert (sizes["queue"], sizes["delayed"]) == (0, 0)


def test_a_turn_taken_late_is_given_up_not_bunched(
    frontier: Frontier, redis_client: redis.Redis
) -> None:
    """A worker that comes back a long time after its host's turns were due gets one request
    per token, not the whole backlog at once."""
    frontier.schedule([entry(f"http://late.test/{n}") for n in range(6)])
    rules = pacing(rate=20.0)
    assert len(leased_urls(frontier, rules)) == 1
    # Every turn is now due, most of them far more than one interval (0.05 s) ago.
    members = cast("list[bytes]", redis_client.zrange(KEYS.delayed, 0, -1))
    past: dict[bytes, float] = dict.fromkeys(members, 1.0)
    redis_client.zadd(KEYS.delayed, past, xx=True)
    assert len(leased_urls(frontier, rules)) <= 1
    assert frontier.sizes()["delayed"] + frontier.sizes()["queue"] >= 4


def test_turns_beyond_the_horizon_stay_queued(frontier: Frontier) -> None:
    frontier.schedule([entry(f"http://slow.test/{n}") for n in range(20)])
    rules = pacing(rate=1.0, horizon=5.0)
    assert len(leased_urls(frontier, rules)) == 1
    sizes = frontier.sizes()
    assert sizes["delayed"] == 5
    assert sizes["queue"] == 14


def test_crawl_delay_spaces_the_host_without_burst(
    frontier: Frontier, redis_client: redis.Redis
) -> None:
    frontier.schedule([entry(f"http://delay.test/{n}", {"crawl_delay": 3}) for n in range(3)])
    assert len(leased_urls(frontier, pacing(rate=100.0, burst=10.0))) == 1
    assert [round(gap, 2) for gap in gaps(turn_times(redis_client))] == [3.0]


def test_unlimited_rate_hands_everything_out(frontier: Frontier) -> None:
    frontier.schedule([entry(f"http://fast.test/{n}") for n in range(30)])
    assert len(leased_urls(frontier, pacing(rate=0.0), count=30)) == 30


def test_per_domain_rates_win(frontier: Frontier, redis_client: redis.Redis) -> None:
    frontier.schedule([entry(f"http://slow.test/{n}") for n in range(3)])
    rules = pacing(rate=100.0, burst=1.0, per_domain={"slow.test": 0.5})
    assert len(leased_urls(frontier, rules)) == 1
    assert [round(gap, 2) for gap in gaps(turn_times(redis_client))] == [2.0]


@pytest.mark.parametrize(
    ("host", "per_domain", "gap"),
    [
        ("www.slow.test", {"slow.test": 0.5}, 2.0),  # a domain covers its hosts
        ("a.b.slow.test", {"slow.test": 0.5, "b.slow.test": 0.25}, 4.0),  # the nearest wins
        ("notslow.test", {"slow.test": 0.5}, 0.01),  # a name that only ends the same does not
        ("127.0.0.1", {"0.0.1": 0.5}, 0.01),  # an address is only its own
    ],
)
def test_a_domains_rate_covers_its_hosts(
    frontier: Frontier,
    redis_client: redis.Redis,
    host: str,
    per_domain: dict[str, float],
    gap: float,
) -> None:
    """POLITENESS_DOMAIN_RATES {"tiktok.com": 0.2} paces www.tiktok.com, as the pop (Lua) and
    the ban middleware (Python) read it alike."""
    frontier.schedule([entry(f"http://{host}/{n}") for n in range(3)])
    rules = pacing(rate=100.0, burst=1.0, per_domain=per_domain)
    leased_urls(frontier, rules)
    assert [round(gap, 2) for gap in gaps(turn_times(redis_client))] == [gap]
    assert RatePolicy(100.0, 1.0, per_domain).rate_for(host) == round(1 / gap, 2)


def test_domain_rates_keys_are_read_as_hosts() -> None:
    """Keys as a request's host gives them: lower case, no trailing dot, an IDN in ASCII, an
    IPv6 address without brackets."""
    given = '{"Slow.Test.": 1, "bücher.test": 2, "[2001:DB8::1]": 3, "10.0.0.1": 4}'
    rates = setting(Settings({"POLITENESS_DOMAIN_RATES": given}), "POLITENESS_DOMAIN_RATES")
    assert rates == {"slow.test": 1, "xn--bcher-kva.test": 2, "2001:db8::1": 3, "10.0.0.1": 4}


def test_a_turn_survives_its_worker(frontier: Frontier, redis_client: redis.Redis) -> None:
    """Turns wait in Redis: a worker killed while holding none loses nothing, and another worker
    gets them when they come."""
    frontier.schedule([entry(f"http://kept.test/{n}") for n in range(3)])
    rules = pacing(rate=10.0)
    first = frontier.pop(10, 0.3, "dead-worker", rules)  # its lease runs out
    assert len(first.leased) == 1
    got: list[str] = []

    def others() -> bool:
        got.extend(json.loads(data)["u"] for _, data in frontier.pop(10, LEASE, "w2", rules).leased)
        return len(got) == 3

    poll(others, timeout=10, pause=0.02)
    assert sorted(got) == [f"http://kept.test/{n}" for n in range(3)]
    assert not redis_client.exists(KEYS.delayed)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    host=st.from_regex(r"[A-Za-z0-9][A-Za-z0-9.-]{0,20}", fullmatch=True),
    port=st.one_of(st.none(), st.integers(1, 65535)),
    user=st.one_of(st.none(), st.from_regex(r"[a-z]{1,5}(:[a-z]{1,5})?", fullmatch=True)),
    path=st.text(max_size=30),
    scheme=st.sampled_from(["http", "https", "HTTP", "ftp", "data"]),
)
def test_the_pop_reads_the_host_python_reads(
    frontier: Frontier,
    redis_client: redis.Redis,
    host: str,
    port: int | None,
    user: str | None,
    path: str,
    scheme: str,
) -> None:
    """Whatever the URL, the pop never fails: an http(s) request's token comes from the bucket
    of the host urllib names (the one the ban middleware uses), any other is handed out
    unpaced."""
    redis_client.flushdb()
    netloc = (f"{user}@" if user else "") + host + (f":{port}" if port else "")
    try:
        request = Request(f"{scheme}://{netloc}/{path}", dont_filter=True)
    except ValueError:
        return
    frontier.schedule([record_of(request, b"12345678", None)])
    popped = frontier.pop(5, LEASE, "w1", pacing(rate=1.0))
    assert len(popped.leased) == 1
    buckets = [key.decode() for key in redis_client.scan_iter(KEYS.buckets + "*")]
    if scheme.lower() in ("http", "https"):
        assert popped.paced
        assert buckets == [f"{KEYS.buckets}{urlsplit(request.url).hostname}|default"]
    else:
        assert not popped.paced
        assert buckets == []


@pytest.mark.parametrize(
    ("overrides", "identity"),
    [
        ({}, "default"),
        ({"BIND_ADDRESSES": ["127.0.0.2"]}, "bind:127.0.0.2"),
        ({"BIND_ADDRESSES": " 127.0.0.2 "}, "bind:127.0.0.2"),  # -s BIND_ADDRESSES=" 127.0.0.2 "
        ({"PROXY_POOL": ["http://user:secret@proxy.test:3128"]}, "proxy:proxy.test:3128"),
        ({"BIND_ADDRESSES": ["127.0.0.2", "127.0.0.3"]}, None),
        ({"DOWNLOADER_MIDDLEWARES": {"crawler.middlewares.BanMiddleware": None}}, None),
    ],
)
def test_the_frontier_paces_from_the_settings(
    overrides: dict[str, Any], identity: str | None
) -> None:
    """The scheduler's politeness is built from the settings: POLITENESS_* for the one identity
    BIND_ADDRESSES and PROXY_POOL give (named without its secret); none with several identities
    (the ban middleware takes their tokens) or with the ban middleware off."""
    values = {name: getattr(project, name) for name in dir(project) if name.isupper()}
    rates = {"POLITENESS_RATE": 2.0, "POLITENESS_DOMAIN_RATES": {"slow.test": 0.1}}
    config = FrontierSettings.from_settings(Settings({**values, **rates, **overrides}))
    if identity is None:
        assert config.pacing is None
        return
    assert config.pacing is not None
    assert config.pacing.identity == identity
    assert config.pacing.rate == 2.0
    assert config.pacing.per_domain == {"slow.test": 0.1}
    assert 0 < config.pacing.ahead <= config.lease_seconds / 4
