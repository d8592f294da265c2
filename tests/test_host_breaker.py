"""The circuit breaker per host (crawler/bans/breaker.py), against a real Redis and, end to end,
counted at the server of each host (sandbox/hosts.py) with time compressed: a host answering 429
without Retry-After gets no request during its blocks, which double per incident (not per
failed request), while the other hosts keep their rate; a host that drops every connection is
marked unreachable and its requests dead-lettered, as are those of a host whose robots.txt keeps
answering 503; ``requeue`` brings them back."""

from __future__ import annotations

import itertools
import json
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, cast

import pytest
import redis
from hypothesis import given, settings
from hypothesis import strategies as st
from playwright.async_api import Error as PlaywrightError
from scrapy.core.downloader.handlers.http11 import TunnelError
from scrapy.exceptions import (
    CannotResolveHostError,
    DownloadConnectionRefusedError,
    DownloadTimeoutError,
)
from scrapy.http import Response
from twisted.internet.error import ConnectBindError, TCPTimedOutError

from crawler.bans.breaker import (
    BREAKER,
    EVERY_HOST,
    MARKS,
    ROBOTS_UNAVAILABLE,
    UNREACHABLE,
    BlockSteps,
    HostBreaker,
    breaker_states,
    healthy,
    identity_at_fault,
    lift_block,
    mark_scope,
    site_of_url,
)
from crawler.bans.identities import Identity, IdentityPool
from crawler.bans.policy import retry_after
from crawler.browser.failures import navigation_failure
from crawler.config.rules import SettingsError
from crawler.keys import bans_key, breaker_failures_key, breaker_key
from sandbox.hosts import HostsWeb, host_address
from tests.harness import Crawl, closed_port, poll, scrapy, served_hosts

SPIDER = "breakertest"


def _breaker(
    client: redis.Redis, start: float = 1.0, longest: float = 8.0, **more: float
) -> HostBreaker:
    steps = BlockSteps(
        start,
        longest,
        more.get("forgive", 1000.0),
        int(more.get("max_exceptions", 3)),
        int(more.get("robots_tries", 2)),
    )
    return HostBreaker(client, SPIDER, steps)


def _cooldown(client: redis.Redis, field: str) -> float:
    return float(client.hget(bans_key(SPIDER), field) or 0)


# --- the script, against a real Redis ----------------------------------------------------------


def test_each_new_incident_doubles_the_block_up_to_the_longest(redis_client: redis.Redis) -> None:
    breaker = _breaker(redis_client, start=1.0, longest=8.0)
    expected = [1, 2, 4, 8, 8]
    sent = time.time()
    for level, seconds in enumerate(expected, start=1):
        before = time.time()
        block = breaker.failed("a.example", sent, "HTTP 429 without Retry-After")
        after = time.time()
        assert (block.level, block.fresh) == (level, True)
        assert seconds - 0.001 <= block.until - before  # written in milliseconds
        assert block.until - after <= seconds * 1.1 + 0.05
        # The host's cool-down is the block (or a longer one before it: the later end is kept).
        assert _cooldown(redis_client, "a.example") >= block.until - 0.001
        sent = block.until + 0.001  # the next request went after the block ended


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.integers(1, 8)), min_size=1, max_size=12))
def test_failures_in_flight_together_are_one_incident(
    redis_url: str, waves: list[tuple[bool, int]]
) -> None:
    """Each wave is ``n`` requests failing together; a wave either went after the host's block
    ended (a new incident: one step, whatever ``n``) or before (the same incident: no step)."""
    client = redis.Redis.from_url(redis_url)
    client.delete(*client.keys(f"{{{SPIDER}}}:*") or ["none"])
    breaker = _breaker(client, start=0.5, longest=1e6)
    until, level = 0.0, 0
    for after, n in waves:
        sent = until + 0.001 if after or level == 0 else until - 0.2
        blocks = [breaker.failed("h.example", sent, "HTTP 503") for _ in range(n)]
        if after or level == 0:
            level += 1
            assert blocks[0].fresh
            assert blocks[0].level == level
            until = blocks[0].until
        assert not any(block.fresh for block in blocks[1:]), "one wave, one step"
        assert {(block.level, block.until) for block in blocks[1:]} <= {(level, until)}
    states = {state.host: state for state in breaker_states(client, SPIDER)}
    assert states["h.example"].level == level
    client.close()


def _response(status: int, retry: str | None = None) -> Response:
    headers = {"Retry-After": retry} if retry is not None else {}
    return Response("http://a.example/", status=status, headers=headers)


@pytest.mark.parametrize(
    ("status", "retry", "trips", "waits"),
    [
        (429, None, True, False),
        (503, None, True, False),
        (429, "0", True, False),  # Retry-After: 0 counts as no header
        (503, "soon", True, False),  # unreadable: none
        (429, "30", False, True),  # the server said when: no step, its host waits it out
        (503, "30", False, True),
        (500, None, False, False),
        (200, None, False, False),
    ],
)
def test_what_trips_the_breaker(
    redis_client: redis.Redis, status: int, retry: str | None, trips: bool, waits: bool
) -> None:
    response = _response(status, retry)
    breaker = _breaker(redis_client)
    assert breaker.trips(response, retry_after(response)) is trips
    assert breaker.waits(response, retry_after(response)) is waits


@pytest.mark.parametrize(
    ("status", "well"), [(200, True), (301, True), (404, True), (429, False), (500, False)]
)
def test_only_an_answer_that_is_not_a_5xx_nor_a_429_clears_the_failures(
    status: int, well: bool
) -> None:
    assert healthy(status) is well


def test_connection_failures_in_a_row_mark_the_host_and_a_success_resets_them(
    redis_client: redis.Redis,
) -> None:
    breaker = _breaker(redis_client, start=0.01, max_exceptions=3)
    field = f"c.example|{mark_scope(UNREACHABLE)}"

    def fail() -> bool:
        return breaker.failed(
            "c.example", time.time() + 1e4, "ConnectionRefusedError", (UNREACHABLE,)
        ).marked

    assert [fail(), fail()] == [False, False]
    breaker.succeeded("c.example")  # answered in between: the count starts again
    assert [fail(), fail()] == [False, False]
    assert _cooldown(redis_client, field) == 0
    assert fail()
    assert _cooldown(redis_client, field) > time.time() + 7  # HOST_BLOCK_MAX (8 s here)
    robots = breaker.failed("d.example", time.time(), "robots.txt HTTP 503", (ROBOTS_UNAVAILABLE,))
    assert not robots.marked  # two robots.txt 5xx in a row mark it, not one


def test_one_failure_counts_towards_several_marks_until_the_first_one_is_set(
    redis_client: redis.Redis,
) -> None:
    """robots.txt getting no answer: one call counts it towards host_unreachable and
    robots_unavailable; the mark reached first wins, the one after it is not counted."""
    breaker = _breaker(redis_client, start=0.01, max_exceptions=2, robots_tries=3)
    both = (UNREACHABLE, ROBOTS_UNAVAILABLE)
    first = breaker.failed("r.example", time.time(), "robots.txt refused", both)
    assert first.failures == {UNREACHABLE: 1, ROBOTS_UNAVAILABLE: 1}
    assert not first.marked
    second = breaker.failed("r.example", time.time() + 1e4, "robots.txt refused", both)
    assert second.failures == {UNREACHABLE: 2}
    assert second.marks == {UNREACHABLE}
    assert breaker.marked("r.example", UNREACHABLE)
    counts = redis_client.hgetall(breaker_failures_key(SPIDER))
    assert counts == {b"r.example|!host_unreachable": b"2", b"r.example|!robots_unavailable": b"1"}
    assert _cooldown(redis_client, f"r.example|{mark_scope(ROBOTS_UNAVAILABLE)}") == 0


def test_a_quiet_host_is_forgiven_and_unban_starts_it_over(redis_client: redis.Redis) -> None:
    breaker = _breaker(redis_client, start=0.05, forgive=0.2)
    first = breaker.failed("f.example", time.time(), "HTTP 429")
    second = breaker.failed("f.example", first.until + 0.001, "HTTP 429")
    assert second.level == 2
    poll(lambda: time.time() > second.until + 0.25, 5, "the block ended, then a quiet spell")
    assert breaker.failed("f.example", time.time(), "HTTP 429").level == 1
    again = breaker.failed("f.example", time.time() + 1, "HTTP 429")
    assert again.level == 2
    lift_block(redis_client, SPIDER, "f.example")
    assert breaker.failed("f.example", time.time(), "HTTP 429").level == 1


def test_hosts_forgiven_long_ago_leave_the_breaker_with_their_failures(
    redis_client: redis.Redis,
) -> None:
    """A crawl meeting many hosts that fail once does not keep them: each later failure
    deletes a few states forgiven long ago, and their failures in a row with them."""
    breaker = _breaker(redis_client, start=0.01, longest=0.02, forgive=0.05)
    for n in range(40):
        breaker.failed(f"gone{n}.example", time.time(), "refused", (UNREACHABLE,))

    def pruned() -> bool:
        breaker.failed("live.example", time.time(), "refused", (UNREACHABLE,))
        left = [key for key in redis_client.hkeys(breaker_key(SPIDER)) if key != b"live.example"]
        return not left

    poll(pruned, 30, "the forgiven hosts' states deleted")
    assert redis_client.hkeys(breaker_failures_key(SPIDER)) == [b"live.example|!host_unreachable"]


def test_a_longest_block_shorter_than_the_first_is_refused() -> None:
    from scrapy.settings import Settings

    from crawler import settings as project_settings

    values = Settings()
    values.setmodule(project_settings)
    values.set("HOST_BLOCK_START", 120)
    values.set("HOST_BLOCK_MAX", 60)
    with pytest.raises(SettingsError, match="HOST_BLOCK_MAX"):
        BlockSteps.from_settings(values)


# --- end to end, counted at the server ---------------------------------------------------------

HOSTS = 4
PAGES = 24
RATE = 4.0
START = 0.5


@pytest.fixture
def web() -> Iterator[HostsWeb]:
    """Hosts on their own loopback addresses, served from a thread of this process."""
    with served_hosts(HOSTS, PAGES) as web:
        yield web


def _pages(web: HostsWeb, host: int) -> list[str]:
    base = f"http://{host_address(host)}:{web.port}"
    return [base + ("/" if k == 0 else f"/p/{k}") for k in range(PAGES)]


def _waves(times: list[float], apart: float) -> list[list[float]]:
    waves: list[list[float]] = []
    for at in sorted(times):
        if waves and at - waves[-1][-1] < apart:
            waves[-1].append(at)
        else:
            waves.append([at])
    return waves


def _frontier(crawl: Crawl, *args: str) -> str:
    done = scrapy("frontier", "links", *args, env=crawl.env())
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def _crawl(crawl: Crawl, settings: dict[str, object], log: Path) -> None:
    with crawl.background("links", settings=settings, log=log) as worker:
        try:
            status = worker.wait(150)
        except subprocess.TimeoutExpired:
            status = None
    assert status == 0, log.read_text()[-5000:]


LINKS = {
    "POLITENESS_RATE": RATE,
    "POLITENESS_BURST": 1,
    "CONCURRENT_REQUESTS_PER_DOMAIN": 8,
    "LINKS_SCOPE": "host",
    "LINKS_SITEMAPS": False,
    "HOST_BLOCK_START": START,
    "MAX_IDLE_TIME_BEFORE_CLOSE": 2,
}


@pytest.mark.integration
def test_a_host_answering_429_is_blocked_with_doubling_steps_and_the_others_keep_their_rate(
    crawl: Crawl, redis_client: redis.Redis, web: HostsWeb, tmp_path: Path
) -> None:
    """The failing host has no rate limit, so its first requests go together and fail
    together; it answers 429 for four incidents, then recovers. The other hosts' rate is
    measured against the same crawl with no failing host, run just before (same load)."""
    failing = host_address(0)
    settings = {**LINKS, "POLITENESS_DOMAIN_RATES": json.dumps({failing: 0})}
    redis_client.lpush("links:start_urls", *(url for h in range(HOSTS) for url in _pages(web, h)))
    _crawl(crawl, settings, tmp_path / "control.log")
    control = _rates(web)
    redis_client.flushdb()
    web.arrivals.clear()

    web.faults[failing] = "429"
    redis_client.lpush("links:start_urls", *(url for h in range(HOSTS) for url in _pages(web, h)))
    log = tmp_path / "worker.log"
    with crawl.background("links", settings=settings, log=log) as worker:

        def waves_so_far() -> list[list[float]]:
            pages = [at for at, path in list(web.arrivals[failing]) if path != "/robots.txt"]
            return _waves(pages, START / 2)

        failed: list[list[float]] = poll(
            lambda: w if len(w := waves_so_far()) >= 4 else None, 60, "four incidents"
        )
        web.faults.clear()
        try:
            status = worker.wait(150)
        except subprocess.TimeoutExpired:
            status = None
    assert status == 0, log.read_text()[-5000:]

    waves = waves_so_far()
    assert len(failed[0]) >= 2, "the first requests went out together"
    # One step per incident, however many requests failed together in it.
    # The breaker's host is the site: the address and its port (not the scheme's own).
    level = {s.host: s.level for s in breaker_states(redis_client, "links")}[
        f"{failing}:{web.port}"
    ]
    assert level == 4
    # No request during a block: after the incident of wave n (from 0), the next wave comes
    # START * 2^n later at the soonest (its requests went back due within a second of the end).
    for n, (earlier, later) in enumerate(itertools.pairwise(waves[:5])):
        gap = later[0] - earlier[0]
        assert START * 2**n - 0.05 <= gap <= START * 2**n * 1.1 + 3.0, (n, gap, log.read_text())
    # Nothing lost: every page of every host, once the failing one recovered.
    assert json.loads(_frontier(crawl, "dead", "--json")) == []
    for host in range(HOSTS):
        assert len({path for _, path in web.arrivals[host_address(host)]}) == PAGES + 1
    rates = _rates(web)
    kept = sum(rates.values()) / sum(control.values())
    # Held up by the failing host's 7.5 s of blocks, the others would fall to about half their
    # rate. Run alone (a timed test), they kept 99.8-100 % of it in three runs; with the untimed
    # tests beside it on idle CPU (make unit), 94.5 % in one run of twelve.
    assert kept >= 0.9, f"the other hosts at {kept:.0%} of their rate: {rates} vs {control}"


def _rates(web: HostsWeb) -> dict[int, float]:
    """Requests per second at each host but the first (the failing one), after its first."""
    rates = {}
    for host in range(1, HOSTS):
        seen = sorted(at for at, path in web.arrivals[host_address(host)] if path != "/robots.txt")
        rates[host] = (len(seen) - 2) / (seen[-1] - seen[1])
    return rates


@pytest.mark.integration
def test_unreachable_hosts_and_unavailable_robots_are_dead_lettered_then_requeued(
    crawl: Crawl, redis_client: redis.Redis, web: HostsWeb, tmp_path: Path
) -> None:
    dropping, no_robots = host_address(0), host_address(1)
    web.faults.update({dropping: "drop", no_robots: "robots-503"})
    redis_client.lpush("links:start_urls", *(url for h in range(HOSTS) for url in _pages(web, h)))
    # The dropping host's robots.txt gets no answer: each failure counts towards both marks,
    # and host_unreachable, reached as soon, wins.
    settings = {**LINKS, "HOST_MAX_EXCEPTIONS": 2, "LINKS_ROBOTS_5XX_TRIES": 2}
    _crawl(crawl, settings, tmp_path / "first.log")

    dead = json.loads(_frontier(crawl, "dead", "--json", "--limit", "1000"))
    reasons: dict[str, set[str]] = {}
    for letter in dead:
        host = letter["request"]["url"].split("/")[2].split(":")[0]
        reasons.setdefault(host, set()).add(letter["failure"]["reason"])
    assert reasons == {dropping: {UNREACHABLE}, no_robots: {ROBOTS_UNAVAILABLE}}
    assert len(dead) == 2 * PAGES
    # The host whose robots.txt failed got no page request: robots.txt twice, a block apart.
    robots = [at for at, path in web.arrivals[no_robots]]
    assert [path for _, path in web.arrivals[no_robots]] == ["/robots.txt"] * 2
    assert robots[1] - robots[0] >= START - 0.05
    for host in range(2, HOSTS):
        assert len([p for _, p in web.arrivals[host_address(host)] if p != "/robots.txt"]) == PAGES

    shown = json.loads(_frontier(crawl, "hosts", "--json"))["hosts"]
    scopes = {(host["host"], host["scope"]) for host in shown}
    sites = (f"{dropping}:{web.port}", f"{no_robots}:{web.port}")
    assert {(sites[0], UNREACHABLE), (sites[1], ROBOTS_UNAVAILABLE)} <= scopes

    # The sites are back: requeue lifts the marks and brings every dead letter back.
    web.faults.clear()
    assert "the marks of 2 hosts lifted" in _frontier(crawl, "requeue")
    _crawl(crawl, settings, tmp_path / "second.log")
    assert json.loads(_frontier(crawl, "dead", "--json")) == []
    for host in (dropping, no_robots):
        fetched = {path for _, path in web.arrivals[host] if path != "/robots.txt"}
        assert len(fetched) == PAGES


@pytest.mark.integration
def test_a_host_answering_503_with_retry_after_gets_no_request_until_then(
    crawl: Crawl, redis_client: redis.Redis, tmp_path: Path
) -> None:
    """A site in maintenance answers ``503`` with ``Retry-After: 4``: the fleet sends it nothing
    more until then (counted at its server), but the requests already on their way; then every
    page, once it is back."""
    wait = 4.0
    on_their_way = 0.5  # two turns at RATE: requests that left before the 503 came back
    with served_hosts(1, PAGES) as web:
        host = host_address(0)
        web.faults[host] = f"503:{wait:g}"
        redis_client.lpush("links:start_urls", *_pages(web, 0))
        log = tmp_path / "crawl.log"
        with crawl.background("links", settings=LINKS, log=log) as worker:
            first = min(poll(lambda: _arrived(web, host, False), 60, "the first 503"))
            web.faults.clear()  # back after its maintenance: the pages answer once asked
            assert worker.wait(150) == 0, log.read_text()[-5000:]
        pages = _arrived(web, host, False)
        fetched = {path for _, path in web.arrivals[host] if path != "/robots.txt"}
    early = [round(at - first, 2) for at in pages if first + on_their_way < at < first + wait]
    assert early == [], f"page requests within the Retry-After of the first 503: {early}"
    assert len(fetched) == PAGES
    assert json.loads(_frontier(crawl, "dead", "--json")) == []


@pytest.mark.integration
@pytest.mark.parametrize("broken", ["bind", "proxy"])
def test_a_broken_identity_is_blocked_not_the_healthy_host_it_fails_to_reach(
    crawl: Crawl, redis_client: redis.Redis, tmp_path: Path, broken: str
) -> None:
    """Two identities, one broken: a bind address the machine does not have (TEST-NET-1), or
    a proxy refusing connections. Its failures block it (on every host: they are its own), the
    retries go through the other, and the host, never blocked, gets every page."""
    with served_hosts(1, PAGES) as web, closed_port() as dead_port:
        host = host_address(0)
        identities: dict[str, object] = {"bind": {"BIND_ADDRESSES": "127.0.0.1,192.0.2.1"}}
        identities["proxy"] = {
            "BIND_ADDRESSES": "127.0.0.1",
            "PROXY_POOL": f"http://127.0.0.1:{dead_port}",
        }
        settings = {**LINKS, **cast(dict[str, object], identities[broken]), "RETRY_TIMES": 1}
        redis_client.lpush("links:start_urls", *_pages(web, 0))
        _crawl(crawl, settings, tmp_path / "crawl.log")
        fetched = {path for _, path in web.arrivals[host] if path != "/robots.txt"}
    assert json.loads(_frontier(crawl, "dead", "--json", "--limit", "1000")) == []
    assert len(fetched) == PAGES
    blocked = {state.host for state in breaker_states(redis_client, "links")}
    name = "bind:192.0.2.1" if broken == "bind" else f"proxy:127.0.0.1:{dead_port}"
    assert blocked == {f"{EVERY_HOST}|{name}"}, "the identity is blocked, never the host"


@pytest.mark.integration
def test_a_host_failing_through_every_identity_is_still_marked_unreachable(
    crawl: Crawl, redis_client: redis.Redis, tmp_path: Path
) -> None:
    """Two working bind addresses, a host that drops every connection: each failure blocks the
    identity it went through on the host, and once both are blocked there the host is (a step
    of its own), until it is marked unreachable and its requests dead-lettered."""
    with served_hosts(1, PAGES) as web:
        host = host_address(0)
        web.faults[host] = "drop"
        settings = {**LINKS, "BIND_ADDRESSES": "127.0.0.1,127.0.0.2", "HOST_MAX_EXCEPTIONS": 2}
        redis_client.lpush("links:start_urls", *_pages(web, 0))
        _crawl(crawl, settings, tmp_path / "crawl.log")
    dead = json.loads(_frontier(crawl, "dead", "--json", "--limit", "1000"))
    assert {letter["failure"]["reason"] for letter in dead} == {UNREACHABLE}
    assert len(dead) == PAGES
    site = f"{host}:{web.port}"
    blocked = {state.host for state in breaker_states(redis_client, "links")}
    assert {site, f"{site}|bind:127.0.0.1", f"{site}|bind:127.0.0.2"} <= blocked


@pytest.mark.parametrize(
    ("exception", "proxied", "own"),
    [
        (ConnectBindError(), False, True),  # type: ignore[no-untyped-call]
        (DownloadConnectionRefusedError(), False, False),  # the host refused
        (DownloadConnectionRefusedError(), True, True),  # the proxy refused
        (CannotResolveHostError(), True, True),  # the proxy's own name
        (DownloadTimeoutError(), True, False),  # the host may be slow
        (TCPTimedOutError(), True, False),  # type: ignore[no-untyped-call]
        (
            TunnelError(
                "Could not open CONNECT tunnel with proxy p:8080 [{'status': 407, "
                "'reason': 'Proxy Authentication Required'}]"
            ),
            True,
            True,
        ),
        (
            TunnelError(
                "Could not open CONNECT tunnel with proxy p:8080 [{'status': 502, "
                "'reason': 'Bad Gateway'}]"
            ),
            True,
            False,
        ),  # it could not reach the host
        (TunnelError("Could not open CONNECT tunnel with proxy p:8080 [b'garbage']"), True, True),
        (  # the browser's: a 403 or a 502 alike
            navigation_failure(
                PlaywrightError(
                    "Page.goto: net::ERR_TUNNEL_CONNECTION_FAILED at https://a.example/"
                )
            ),
            True,
            False,
        ),
    ],
)
def test_which_connection_failures_are_the_identity_s_own(
    exception: Exception, proxied: bool, own: bool
) -> None:
    assert identity_at_fault(exception, proxied) is own


def test_a_failed_identity_hands_on_to_the_next_one_not_cooling_down() -> None:
    pool = IdentityPool(["127.0.0.2", "127.0.0.3"], ["http://user:pw@proxy.example:8080"])
    names = [identity.name for identity in pool.identities]
    assert names == ["bind:127.0.0.2", "bind:127.0.0.3", "proxy:proxy.example:8080"]
    cooling = {"bind:127.0.0.3"}

    def cooling_until(identity: Identity) -> float:
        return 1.0 if identity.name in cooling else 0.0

    nxt = pool.other_than("bind:127.0.0.2", cooling_until)
    assert nxt is not None
    assert nxt.name == "proxy:proxy.example:8080"
    meta: dict[str, object] = {}
    pool.identities[0].apply(meta)
    nxt.apply(meta)  # no bind address left behind: it goes through the proxy only
    assert meta == {"identity": nxt.name, "proxy": "http://user:pw@proxy.example:8080"}
    pool.identities[1].apply(meta)  # nor a proxy behind a bind address
    assert meta == {"identity": "bind:127.0.0.3", "bindaddress": ("127.0.0.3", 0)}
    cooling.update(names[1:])
    assert pool.other_than("bind:127.0.0.2", cooling_until) is None


def _arrived(web: HostsWeb, host: str, robots: bool) -> list[float]:
    """When ``host`` received its robots.txt requests (``robots``), or its other requests."""
    return [at for at, path in web.arrivals[host] if (path == "/robots.txt") == robots]


@pytest.mark.integration
def test_a_robots_txt_without_an_answer_holds_its_host_back_until_it_answers(
    crawl: Crawl, redis_client: redis.Redis, web: HostsWeb, tmp_path: Path
) -> None:
    """A host's robots.txt drops the connection: that is no answer, not "allow everything"
    (which would let the fleet fetch what it forbids for LINKS_ROBOTS_TTL). No page of the host
    is asked for until its robots.txt answered, asked again after each block; then every one."""
    silent = host_address(0)
    web.faults[silent] = "robots-drop"
    redis_client.lpush("links:start_urls", *_pages(web, 0))
    log = tmp_path / "crawl.log"
    with crawl.background("links", settings=LINKS, log=log) as worker:
        poll(
            lambda: len(_arrived(web, silent, True)) >= 2 or _arrived(web, silent, False),
            60,
            "robots.txt asked again (or a page asked for)",
        )
        assert _arrived(web, silent, False) == []
        del web.faults[silent]
        assert worker.wait(120) == 0, log.read_text()[-3000:]
    pages = {path for _, path in web.arrivals[silent] if path != "/robots.txt"}
    assert len(pages) == PAGES
    assert max(_arrived(web, silent, True)) < min(_arrived(web, silent, False))


@pytest.mark.integration
def test_a_robots_txt_that_never_answers_ends_as_dead_letters_even_with_no_unreachable_mark(
    crawl: Crawl, redis_client: redis.Redis, web: HostsWeb, tmp_path: Path
) -> None:
    """HOST_MAX_EXCEPTIONS 0 never marks a host unreachable: its robots.txt getting no answer
    counts towards robots_unavailable, so the crawl ends, none of the host's pages asked for.
    Each failure is one call of the breaker's script, counting towards both marks."""
    silent = host_address(0)
    web.faults[silent] = "robots-drop"
    redis_client.lpush("links:start_urls", *_pages(web, 0))
    settings = {**LINKS, "HOST_MAX_EXCEPTIONS": 0, "LINKS_ROBOTS_5XX_TRIES": 2}
    with breaker_calls(redis_client) as calls:
        _crawl(crawl, settings, tmp_path / "crawl.log")
        called = calls()
    dead = json.loads(_frontier(crawl, "dead", "--json", "--limit", "1000"))
    assert len(dead) == PAGES
    assert {letter["failure"]["reason"] for letter in dead} == {ROBOTS_UNAVAILABLE}
    assert _arrived(web, silent, False) == []
    assert len(_arrived(web, silent, True)) == 2
    assert called == 2
    failures = redis_client.hgetall(breaker_failures_key("links"))
    site = f"{silent}:{web.port}"
    assert failures == {f"{site}|!{mark}".encode(): b"2" for mark in MARKS}


@contextmanager
def breaker_calls(client: redis.Redis) -> Iterator[Callable[[], int]]:
    """While the block runs, the Redis server logs every command (its SLOWLOG): the calls of the
    circuit breaker's script it ran so far. The script is loaded first, so each call is one
    EVALSHA (none is answered NOSCRIPT and sent again)."""
    sha = client.script_load(BREAKER).encode()
    before = cast(dict[Any, Any], client.config_get("slowlog-*"))
    client.config_set("slowlog-log-slower-than", 0)
    client.config_set("slowlog-max-len", 1_000_000)
    client.slowlog_reset()

    def count() -> int:
        logged: list[dict[str, Any]] = client.slowlog_get(1_000_000)
        return sum(entry["command"].startswith(b"EVALSHA " + sha) for entry in logged)

    try:
        yield count
    finally:
        for name, value in before.items():
            client.config_set(name, value)
        client.slowlog_reset()


@pytest.mark.parametrize(
    ("url", "site"),
    [
        ("http://a.example/p", "a.example"),
        ("http://a.example:80/p", "a.example"),
        ("https://a.example:443/", "a.example"),
        ("https://a.example:80/", "a.example:80"),
        ("http://a.example:1/", "a.example:1"),  # a refused port blocks that port only
        ("http://127.0.0.1:8080/x", "127.0.0.1:8080"),
        ("http://a.example:99999/", "a.example"),  # no port Python reads
    ],
)
def test_the_breaker_blocks_a_host_and_the_port_the_url_names(url: str, site: str) -> None:
    assert site_of_url(url) == site
