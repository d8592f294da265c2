"""``scrapy frontier SPIDER unban NAME`` reads a host as ``hosts`` prints it and the crawl keys
it, against a real Redis: a Unicode name as its punycode host, ``HOST:PORT`` as that site,
``HOST`` as the host on every port, a URL as its host (and port); anything else is refused in
one line, exit status 2."""

from __future__ import annotations

import time

import pytest
import redis

from crawler.bans.breaker import UNREACHABLE, BlockSteps, HostBreaker
from crawler.frontier.dupefilter import DupefilterConfig
from crawler.frontier.queue import Frontier
from crawler.keys import FrontierKeys, breaker_failures_key, breaker_key
from tests.test_frontier import pending
from tests.test_unban_identity import _bans, _frontier

SPIDER = "links"
SITE = "xn--bcher-kva.test:1"


@pytest.fixture
def blocked(redis_client: redis.Redis) -> Frontier:
    """bücher.test:1 blocked by the breaker (a failure towards its unreachable mark counted),
    with a request delayed till the block's end."""
    breaker = HostBreaker(redis_client, SPIDER, BlockSteps(600.0, 3600.0, 3600.0, 3, 2))
    block = breaker.failed(SITE, time.time(), "ConnectionRefusedError", (UNREACHABLE,))
    frontier = Frontier(redis_client, FrontierKeys(SPIDER, ""), DupefilterConfig("exact"))
    frontier.schedule([pending(f"http://{SITE}/page", due=block.until)])
    return frontier


def _due_now(client: redis.Redis, frontier: Frontier) -> int:
    return client.zcount(frontier.keys.delayed, "-inf", time.time())


def test_hosts_shows_the_punycode_site_unban_takes(redis_url: str, blocked: Frontier) -> None:
    code, out, err = _frontier(redis_url, "hosts")
    assert code == 0, err[-2000:]
    assert out.startswith(f"{SITE}  blocked until ")


@pytest.mark.parametrize(
    "name",
    [SITE, "bücher.test:1", "Bücher.TEST.", "http://bücher.test:1/path?q=1", "xn--bcher-kva.test"],
)
def test_unban_lifts_the_block_however_the_host_is_written(
    redis_url: str, redis_client: redis.Redis, blocked: Frontier, name: str
) -> None:
    code, out, err = _frontier(redis_url, "unban", name)
    assert code == 0, err[-2000:]
    assert f"lifted {SITE} via every identity" in out
    assert "1 delayed requests due now" in out
    assert _bans(redis_client) == set()
    assert not redis_client.exists(breaker_key(SPIDER), breaker_failures_key(SPIDER))
    assert _due_now(redis_client, blocked) == 1
    code, out, _ = _frontier(redis_url, "hosts")
    assert out.strip() == f"0 hosts held back for {SPIDER}"


def test_unban_of_another_port_lifts_nothing(
    redis_url: str, redis_client: redis.Redis, blocked: Frontier
) -> None:
    code, out, err = _frontier(redis_url, "unban", "bücher.test:2")
    assert code == 0, err[-2000:]
    assert out.strip() == (
        f"0 active cool-downs of xn--bcher-kva.test:2 lifted for {SPIDER}; "
        "0 delayed requests due now"
    )
    assert _bans(redis_client) == {SITE}
    assert _due_now(redis_client, blocked) == 0


@pytest.mark.parametrize(
    "name", ["example.com/path", "a b.test", "x.test:http", "x.test:70000", "ftp://x.test/", ""]
)
def test_unban_refuses_what_names_no_host_in_one_line(
    redis_url: str, redis_client: redis.Redis, blocked: Frontier, name: str
) -> None:
    code, _, err = _frontier(redis_url, "unban", name)
    assert code == 2
    said = f"unban: {name!r} is not a host name: give HOST, HOST:PORT or a URL, as "
    assert err.strip().splitlines()[-1].endswith(said + "`scrapy frontier SPIDER hosts` shows it")
    assert _bans(redis_client) == {SITE}
