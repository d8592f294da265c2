"""Politeness counted where it is promised: at the server of each host.

A web of many hosts, each on its own loopback address (sandbox/hosts.py), is crawled by one,
two or four `scrapy crawl links` workers at a polite rate with burst 1, one start entry per
host. The server notes every request's arrival per host. No request may reach a host sooner
than the rate allows after the host's previous one, and the crawl must keep (nearly) every host
busy while every host has work: start entries are taken in when the work that may go now runs
short, not when the queue does (a polite queue, full of work waiting for its turn, never runs
short).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from contextlib import ExitStack
from itertools import pairwise
from pathlib import Path

import pytest
import redis

from sandbox.hosts import (
    HostsWeb,
    busy_hosts,
    early_requests,
    fetched_pages,
    host_address,
    site_pages,
)
from tests.harness import Crawl, served_hosts

pytestmark = pytest.mark.integration

HOSTS = 100
PAGES = 5
RATE = 0.25  # requests per second per host


def _push_homes(redis_client: redis.Redis, web: HostsWeb, hosts: int) -> list[str]:
    """The home of each of the first ``hosts`` hosts, pushed as the links spider's start
    entries."""
    homes = [f"http://{host_address(h)}:{web.port}/" for h in range(hosts)]
    redis_client.lpush("links:start_urls", *homes)
    return homes


@pytest.fixture
def web() -> Iterator[HostsWeb]:
    """The web served from a thread of this process, so its arrivals are read directly."""
    with served_hosts(HOSTS, PAGES) as web:
        yield web


@pytest.mark.parametrize("workers", [2, 4])
def test_workers_keep_every_host_busy_and_none_early(
    crawl: Crawl, redis_client: redis.Redis, web: HostsWeb, tmp_path: Path, workers: int
) -> None:
    _push_homes(redis_client, web, HOSTS)
    settings: dict[str, object] = {
        "POLITENESS_RATE": RATE,
        "POLITENESS_BURST": 1,
        "LINKS_SCOPE": "host",
        "LINKS_SITEMAPS": False,
        "CONCURRENT_REQUESTS": 32,
        "MAX_IDLE_TIME_BEFORE_CLOSE": 2,
    }
    logs = [tmp_path / f"worker-{n}.log" for n in range(workers)]
    with ExitStack() as stack:
        running = [
            stack.enter_context(crawl.background("links", settings=settings, log=log))
            for log in logs
        ]
        statuses = [worker.wait(240) for worker in running]
    tails = "\n".join(log.read_text()[-3000:] for log in logs)
    assert statuses == [0] * workers, tails

    arrivals = {address: list(seen) for address, seen in web.arrivals.items()}
    # The whole web, counted at the server, and nothing left in the frontier.
    assert site_pages(HOSTS, PAGES, web.port) <= fetched_pages(arrivals), tails
    assert not redis_client.keys("{links}:queue:*")
    # Exact: no request sooner than 0.9 / RATE after its host's previous one.
    early = early_requests(arrivals, RATE)
    if early:
        seen = sorted(arrivals[early[0][0]])
        gaps = [(round(at - seen[0][0], 3), path) for at, path in seen]
        raise AssertionError(f"{len(early)} early requests, the closest: {early[:5]}; {gaps}")
    # Every host busy: each host has PAGES + 1 requests to make (robots.txt and its pages), so
    # from 1 to 4 turns into the crawl every host has work and may get some of it.
    start = min(float(at) for seen in arrivals.values() for at, _ in seen)
    busy = busy_hosts(arrivals, start + 1 / RATE, start + 4 / RATE)
    assert len(busy) >= 0.8 * HOSTS, f"only {len(busy)} of {HOSTS} hosts busy"


def test_scope_any_takes_every_seed_at_depth_0_and_fetches_a_page_again_only_nearer(
    crawl: Crawl, redis_client: redis.Redis, web: HostsWeb, tmp_path: Path
) -> None:
    """One start entry per host, scope "any": other hosts' pages link many of the homes, and
    a polite queue is never short of work. The seeds still go in at depth 0 before those links
    reach them. A page is fetched again only from a shorter path found after its first request
    went (docs/frontier.md); one found while its first request waits is fetched once, from the
    shorter path. Counted at the server, with the depth each request carried
    (tests/depth_header.py, added to the spider's middlewares with ``-s``)."""
    homes = _push_homes(redis_client, web, HOSTS)
    middleware = {"tests.depth_header.DepthHeaderMiddleware": 990}
    settings: dict[str, object] = {
        "POLITENESS_RATE": 1,
        "POLITENESS_BURST": 1,
        "LINKS_SCOPE": "any",
        "LINKS_SITEMAPS": False,
        "CONCURRENT_REQUESTS": 32,
        "START_BATCH_SIZE": 4,
        "DOWNLOADER_MIDDLEWARES": json.dumps(middleware),
    }
    log = tmp_path / "worker.log"
    with crawl.background("links", settings=settings, log=log) as worker:
        assert worker.wait(240) == 0, log.read_text()[-3000:]
    arrivals = {address: list(seen) for address, seen in web.arrivals.items()}
    pages = site_pages(HOSTS, PAGES, web.port)
    assert pages <= fetched_pages(arrivals)
    assert early_requests(arrivals, 1.0) == []
    counts = Counter((address, path) for address, seen in arrivals.items() for _, path in seen)
    # Every fetch of a page carried its depth; each later fetch of one, a smaller depth.
    assert {page: len(web.depths[page]) for page in pages} == {page: counts[page] for page in pages}
    again = {page: web.depths[page] for page, n in counts.items() if n > 1}
    no_nearer = {
        page: seen for page, seen in again.items() if any(a <= b for a, b in pairwise(seen))
    }
    assert no_nearer == {}, "fetched again by a path no shorter"
    # The seeds went in first: a page found by a shorter path after it went is the exception.
    assert len(again) <= 0.02 * HOSTS * PAGES, again
    depths = {
        doc["url"]: doc["depth"] for doc in crawl.mongo.db.pages.find({}, {"url": 1, "depth": 1})
    }
    assert {home: depths.get(home) for home in homes if depths.get(home) != 0} == {}


HELD_UP = {
    "before_the_gate": 900,  # the late middleware's order
    "after_the_gate": 960,
    "slow_first_connection": 0,  # the handler holds a worker's first request to each host
}


@pytest.mark.parametrize("where", list(HELD_UP))
def test_a_request_held_up_on_its_way_still_reaches_its_host_on_time(
    crawl: Crawl, redis_client: redis.Redis, web: HostsWeb, tmp_path: Path, where: str
) -> None:
    """Requests held up on their way (tests/late_requests.py): every other one 0.6 s between
    the scheduler and the download handler, before the send gate takes its token or after, as
    a busy reactor would; or a worker's first request to each host 1.2 s in the handler, as a
    connection slow to open would. At 1 request/s per host no request may reach its host
    sooner than 0.9 s after the host's previous one. A turn taken when the request left the
    frontier, not as it goes, or a token counted taken when the request did not go yet, would
    let the next request, on time, follow the held-up one too soon."""
    hosts = 10
    _push_homes(redis_client, web, hosts)
    settings: dict[str, object] = {
        "POLITENESS_RATE": 1,
        "POLITENESS_BURST": 1,
        "LINKS_SCOPE": "host",
        "LINKS_SITEMAPS": False,
    }
    if HELD_UP[where]:
        middleware = {"tests.late_requests.LateMiddleware": HELD_UP[where]}
        settings["DOWNLOADER_MIDDLEWARES"] = json.dumps(middleware)
    else:
        handler = "tests.late_requests.SlowFirstConnectHandler"
        settings["DOWNLOAD_HANDLERS"] = json.dumps({"http": handler})
    log = tmp_path / "worker.log"
    with crawl.background("links", settings=settings, log=log) as worker:
        assert worker.wait(120) == 0, log.read_text()[-3000:]
    arrivals = {address: list(seen) for address, seen in web.arrivals.items()}
    assert {(host_address(h), "/") for h in range(hosts)} <= fetched_pages(arrivals)
    early = early_requests(arrivals, 1.0)
    if early:
        seen = sorted(arrivals[early[0][0]])
        gaps = [(round(at - seen[0][0], 3), path) for at, path in seen]
        raise AssertionError(f"{len(early)} early requests, the closest: {early[:5]}; {gaps}")
