"""``scrapy frontier SPIDER unban --identity NAME [HOST]`` against a real Redis: an operator
sees an identity's blocks (a proxy failing on its own blocks it on every host, ``*|NAME``; a
failure through it blocks it on the host, ``HOST|NAME``) in ``hosts`` and lifts them, for
every worker, its step starting over; the delayed requests that waited for the block are due at
once, the others keep their time."""

from __future__ import annotations

import json
import time
from typing import cast

import pytest
import redis
from scrapy.settings import Settings

from crawler.bans.breaker import (
    EVERY_HOST,
    MARKS,
    BlockSteps,
    HostBreaker,
    breaker_states,
    mark_scope,
)
from crawler.bans.politeness import FleetPoliteness
from crawler.connection import reply_text
from crawler.frontier.dupefilter import DupefilterConfig
from crawler.frontier.pacing import RatePolicy
from crawler.frontier.queue import Frontier
from crawler.keys import FrontierKeys, bans_key
from tests.harness import scrapy
from tests.test_frontier import pending

SPIDER = "links"
PROXY = "proxy:p1.example:8080"
BIND = "bind:10.0.0.2"


def _frontier(redis_url: str, *args: str) -> tuple[int, str, str]:
    done = scrapy("frontier", SPIDER, *args, env={"REDIS_URL": redis_url, "PATH": "/usr/bin:/bin"})
    return done.returncode, done.stdout, done.stderr


def _fleet(client: redis.Redis) -> FleetPoliteness:
    settings = Settings()
    settings.setmodule("crawler.settings")
    return FleetPoliteness(client, SPIDER, RatePolicy.from_settings(settings), refresh=0.0)


def _bans(client: redis.Redis) -> set[str]:
    return {reply_text(name) for name in cast(list[bytes], client.hkeys(bans_key(SPIDER)))}


def _delayed(client: redis.Redis, frontier: Frontier) -> list[tuple[bytes, float]]:
    return cast(
        list[tuple[bytes, float]], client.zrange(frontier.keys.delayed, 0, -1, withscores=True)
    )


@pytest.fixture
def blocked(redis_client: redis.Redis) -> HostBreaker:
    """The proxy blocked on every host (its own failure, step 2) and, under rotate, banned on
    b.example; the bind address blocked on a.example."""
    breaker = HostBreaker(redis_client, SPIDER, BlockSteps(60.0, 3600.0, 3600.0, 3, 2))
    first = breaker.identity_failed(EVERY_HOST, PROXY, time.time(), "ConnectionRefusedError")
    breaker.identity_failed(EVERY_HOST, PROXY, first.until + 1, "ConnectionRefusedError")
    breaker.identity_failed("a.example", BIND, time.time(), "TCPTimedOutError")
    _fleet(redis_client).ban("b.example", PROXY, 600, "http_429 (HTTP 429)")
    return breaker


def test_hosts_shows_an_identitys_blocks_with_their_own_step(
    redis_url: str, blocked: HostBreaker
) -> None:
    code, out, err = _frontier(redis_url, "hosts", "--json")
    assert code == 0, err[-2000:]
    shown = {(host["host"], host["identity"], host["step"]) for host in json.loads(out)["hosts"]}
    assert shown == {(EVERY_HOST, PROXY, 2), ("a.example", BIND, 1), ("b.example", PROXY, 0)}
    code, out, _ = _frontier(redis_url, "hosts")
    assert f"every host  identity {PROXY} until" in out
    assert "unban --identity NAME [HOST]" in out


def test_unban_identity_lifts_its_blocks_everywhere_and_its_waiting_requests_are_due(
    redis_url: str, redis_client: redis.Redis, blocked: HostBreaker
) -> None:
    fleet = _fleet(redis_client)
    assert fleet.cooling_until(EVERY_HOST, PROXY) > time.time() + 60
    every = float(redis_client.hget(bans_key(SPIDER), f"{EVERY_HOST}|{PROXY}") or 0)
    frontier = Frontier(redis_client, FrontierKeys(SPIDER, ""), DupefilterConfig("exact"))
    waited = pending("http://c.example/waited", due=every + 0.6)  # sent back for the block
    later = pending("http://c.example/retry", due=every + 900)  # a retry's own backoff
    frontier.schedule([waited, later])

    code, out, err = _frontier(redis_url, "unban", "--identity", PROXY)
    assert code == 0, err[-2000:]
    assert f"2 active blocks of {PROXY} on every host lifted for links" in out
    assert "1 delayed requests due now" in out
    assert _bans(redis_client) == {f"a.example|{BIND}"}, "the bind address's block stays"
    dues = sorted(score for _, score in _delayed(redis_client, frontier))
    assert dues[0] <= time.time() < dues[1] - 800
    # Every worker sees it free at its next read of the cool-downs, and its next failure is a
    # first step again.
    assert fleet.cooling_until(EVERY_HOST, PROXY) == 0
    assert fleet.cooling_until("b.example", PROXY) == 0
    after_its_block = time.time() + 10_000  # a new incident, were its step kept
    assert blocked.identity_failed(EVERY_HOST, PROXY, after_its_block, "refused").level == 1


def test_unban_identity_on_a_host_lifts_that_block_only(
    redis_url: str, redis_client: redis.Redis, blocked: HostBreaker
) -> None:
    code, out, err = _frontier(redis_url, "unban", "--identity", PROXY, "B.example.", "--json")
    assert code == 0, err[-2000:]
    lifted = json.loads(out)["lifted"]
    assert [(c["domain"], c["identity"]) for c in lifted] == [("b.example", PROXY)]
    assert _bans(redis_client) == {f"{EVERY_HOST}|{PROXY}", f"a.example|{BIND}"}
    code, out, err = _frontier(redis_url, "unban", "--identity", BIND, "a.example")
    assert code == 0, err[-2000:]
    assert {state.host for state in breaker_states(redis_client, SPIDER)} == {
        f"{EVERY_HOST}|{PROXY}"
    }


def test_unban_of_a_host_starts_its_identities_steps_over(
    redis_url: str, redis_client: redis.Redis, blocked: HostBreaker
) -> None:
    code, _, err = _frontier(redis_url, "unban", "a.example")
    assert code == 0, err[-2000:]
    after_its_block = time.time() + 10_000  # a new incident, were its step kept
    assert blocked.identity_failed("a.example", BIND, after_its_block, "timeout").level == 1


def test_an_identity_with_no_block_is_said_so_with_those_that_have_one(
    redis_url: str, blocked: HostBreaker
) -> None:
    code, out, err = _frontier(redis_url, "unban", "--identity", "proxy:p2.example:8080")
    assert code == 0
    assert "0 active blocks of proxy:p2.example:8080" in out
    assert f"identities blocked: {BIND}, {PROXY}" in err


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["unban", "--identity", "!host_unreachable"], "is no identity name"),
        (["unban", "--identity", "a|b"], "is no identity name"),
        (["hosts", "--identity", PROXY], "--identity goes with unban"),
        (["unban", "--identity", PROXY, "a.example", "b.example"], "give a spider name"),
        (["unban"], "unban takes one domain"),
    ],
)
def test_unban_identity_refuses_what_it_cannot_do(
    redis_url: str, args: list[str], said: str
) -> None:
    code, _, err = _frontier(redis_url, *args)
    assert code == 2
    assert said in err


def test_requeue_counts_the_hosts_whose_marks_it_lifts(
    redis_url: str, redis_client: redis.Redis
) -> None:
    """A host marked both unreachable and robots-unavailable is one host whose marks are
    lifted, not two."""
    until = time.time() + 600
    fields = [f"a.example|{mark_scope(mark)}" for mark in MARKS]
    fields.append(f"b.example|{mark_scope(MARKS[0])}")
    redis_client.hset(bans_key(SPIDER), mapping=dict.fromkeys(fields[:1], until))
    code, out, err = _frontier(redis_url, "requeue", "--json")
    assert code == 0, err[-2000:]
    assert json.loads(out) == {
        **{"requeued": 0, "dropped_by_job_number": {}},
        **{"marks_lifted": 1, "hosts": ["a.example"]},
    }
    redis_client.hset(bans_key(SPIDER), mapping=dict.fromkeys(fields, until))
    code, out, err = _frontier(redis_url, "requeue")
    assert code == 0, err[-2000:]
    assert "the marks of 2 hosts lifted (3)" in out
    assert _bans(redis_client) == set()


def test_unban_of_a_site_with_its_port_makes_its_requests_due(
    redis_url: str, redis_client: redis.Redis
) -> None:
    """A site on a port of its own is blocked (and shown by ``hosts``) as HOST:PORT: ``unban``
    of it as shown makes its delayed requests due, as ``unban HOST`` does; an empty name is a
    usage error."""
    breaker = HostBreaker(redis_client, SPIDER, BlockSteps(300.0, 3600.0, 3600.0, 3, 2))
    block = breaker.failed("a.example:8080", time.time(), "ConnectionRefusedError")
    frontier = Frontier(redis_client, FrontierKeys(SPIDER, ""), DupefilterConfig("exact"))
    frontier.schedule([pending("http://a.example:8080/p", due=block.until + 0.5)])
    code, out, err = _frontier(redis_url, "unban", "a.example:8080")
    assert code == 0, err[-2000:]
    assert "1 delayed requests due now" in out
    assert _delayed(redis_client, frontier)[0][1] <= time.time()
    code, _, err = _frontier(redis_url, "unban", "")
    assert code == 2
    assert "is not a host name: give HOST, HOST:PORT or a URL" in err
