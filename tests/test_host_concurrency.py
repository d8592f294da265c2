"""POLITENESS_CONCURRENCY: requests in flight per domain for the whole fleet, not per worker.
The leases in real Redis, then two `scrapy crawl links` workers on the sandbox's web, whose
every host counts the most requests it had in flight at once."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from contextlib import ExitStack
from typing import Any

import pytest
import redis
from scrapy import Request, Spider
from scrapy.http import HtmlResponse
from scrapy.utils.test import get_crawler

from crawler.bans import concurrency
from crawler.bans.concurrency import HostSlots
from crawler.meta import DUE_META
from crawler.middlewares import HostConcurrencyMiddleware, HostFullMiddleware
from tests.harness import Crawl, Sandbox, poll
from tests.test_links import (
    assert_each_path_asked_once,
    build_web,
    home,
    links_settings,
    stored,
    truth,
)


@pytest.fixture
def web(sandbox: Sandbox) -> Iterator[Sandbox]:
    yield sandbox
    sandbox.admin("web", {})  # the default web again


def test_a_domain_has_at_most_cap_leases_and_a_given_back_one_frees_a_slot(
    redis_client: redis.Redis,
) -> None:
    slots = HostSlots(redis_client, "links", cap=2)
    first, second = slots.take("a.test", 30), slots.take("a.test", 30)
    assert first is not None
    assert second is not None
    assert slots.take("a.test", 30) is None
    assert slots.take("b.test", 30) is not None  # another domain has its own slots
    slots.give_back("a.test", first)
    assert slots.take("a.test", 30) is not None
    assert slots.in_flight("a.test") == 2


def test_the_leases_of_a_worker_that_died_free_themselves(redis_client: redis.Redis) -> None:
    dead = HostSlots(redis_client, "links", cap=1)
    assert dead.take("a.test", 0.5) is not None  # never given back
    alive = HostSlots(redis_client, "links", cap=1)
    assert alive.take("a.test", 30) is None
    poll(lambda: alive.take("a.test", 30), timeout=5, what="the expired lease to free its slot")
    assert 0 < redis_client.ttl("{links}:inflight:a.test") <= 30


class _Links(Spider):
    name = "links"


def test_a_worker_remembers_a_full_host_and_backs_off_without_asking_redis(
    redis_url: str, redis_client: redis.Redis
) -> None:
    crawler = get_crawler(_Links, {"REDIS_URL": redis_url, "POLITENESS_CONCURRENCY": 1})
    middleware = HostConcurrencyMiddleware.from_crawler(crawler)
    other = HostSlots(redis_client, "links", cap=1)
    assert other.take("full.test", 30) is not None  # another worker holds the only slot

    def admit(n: int) -> Request | None:
        return asyncio.run(middleware._admit(Request(f"https://full.test/{n}")))

    calls = _script_calls(redis_client)
    dues = []
    for n in range(20):
        back = admit(n)
        assert back is not None
        dues.append(back.meta[DUE_META] - time.time())
    assert _script_calls(redis_client) - calls == 1  # asked once, then the worker knew
    assert dues[0] <= 1.0
    assert all(due >= dues[0] - 0.1 for due in dues)
    for n in range(3):  # three more refusals in a row (as if each window had ended)
        middleware.admission.full_until["full.test"] = 0.0
        assert admit(100 + n) is not None
    later = admit(200)
    assert later is not None
    assert later.meta[DUE_META] - time.time() > 1.5  # 0.2-0.8 s doubled three times
    assert _script_calls(redis_client) - calls == 4
    before_ban = HostFullMiddleware.from_crawler(crawler)  # 640: before a rate token is taken
    held = before_ban.process_request(Request("https://full.test/300"))
    assert held is not None
    assert held.meta[DUE_META] - time.time() > 1.5
    assert before_ban.process_request(Request("https://free.test/")) is None
    assert _script_calls(redis_client) - calls == 4


def test_a_request_sent_back_before_its_download_gives_its_slot_back(
    redis_url: str, redis_client: redis.Redis
) -> None:
    """A request a later middleware sends back holding its slot (the send gate holds it for
    its host's turn) is admitted again when it comes back: its old slot does not refuse it,
    and the domain holds one lease, not two."""
    crawler = get_crawler(_Links, {"REDIS_URL": redis_url, "POLITENESS_CONCURRENCY": 1})
    middleware = HostConcurrencyMiddleware.from_crawler(crawler)
    request = Request("https://held.test/1")
    assert asyncio.run(middleware._admit(request)) is None
    assert asyncio.run(middleware._admit(request)) is None  # back from the send gate
    assert redis_client.zcard(middleware.admission.slots.key("held.test")) == 1
    middleware.process_response(request, HtmlResponse(request.url, request=request))
    assert redis_client.zcard(middleware.admission.slots.key("held.test")) == 0


def test_a_broad_crawl_leaves_a_bounded_memory_of_full_domains(
    redis_url: str, redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Domains refused once each (full elsewhere) are forgotten once their wait ended and many
    were met: the worker's memory does not grow with the web."""
    monkeypatch.setattr(concurrency, "KNOWN_FULL", 50)
    crawler = get_crawler(_Links, {"REDIS_URL": redis_url, "POLITENESS_CONCURRENCY": 1})
    admission = HostConcurrencyMiddleware.from_crawler(crawler).admission
    other = HostSlots(redis_client, "links", cap=1)
    for n in range(400):
        assert other.take(f"site{n}.test", 30) is not None
        assert admission.admit(Request(f"https://site{n}.test/")) is not None
        admission.full_until[f"site{n}.test"] = 0.0  # its wait ended
    assert len(admission.refusals) <= 50
    assert len(admission.full_until) <= 50


def _script_calls(server: redis.Redis) -> int:
    stats: dict[str, Any] = server.info("commandstats")
    return sum(
        int(stats.get(name, {}).get("calls", 0)) for name in ("cmdstat_evalsha", "cmdstat_eval")
    )


@pytest.mark.integration
def test_two_workers_share_each_hosts_slots(
    crawl: Crawl, redis_client: redis.Redis, web: Sandbox
) -> None:
    """Each worker alone could send 8 requests at once to a host; together they send 2."""
    report = build_web(web, sites=3, pages=6, latency_ms=150)
    redis_client.lpush("links:start_urls", *[home(web, host) for host in report["hosts"]])
    settings = links_settings(POLITENESS_CONCURRENCY=2, LINKS_MAX_CALENDAR_HOPS=2)
    with ExitStack() as running:
        workers = [
            running.enter_context(crawl.background("links", settings=settings)) for _ in range(2)
        ]
        for worker in workers:
            worker.wait(120)
            assert worker.returncode == 0, worker.log_text()[-3000:]
        logs = [worker.log_text() for worker in workers]

    pages = stored(crawl)
    assert {key for key in pages if not key[1].startswith(report["trap"])} == truth(report)
    report = web.admin("web")
    counts = report["counts"]
    # A request sent back to wait that then redirects (/old -> /p/2) is filtered as any link:
    # the two workers asked each path once (a page found again by its sitemap, a shorter path
    # than its links, fetched again from there).
    assert_each_path_asked_once(counts, *logs, pages=pages)
    assert max(report["peak_in_flight"].values()) == 2, report["peak_in_flight"]
    assert not redis_client.keys("{links}:inflight:*"), "every lease was given back"
