"""An IP address in a start URL needs no lookup: MappedResolver (the resolver the sandbox's web
is crawled with) answers it with itself, so ``http://[::1]:PORT/`` is crawled, not failed as a
name it cannot resolve (and its host then blocked by the circuit breaker)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, cast
from urllib.parse import urlsplit

import pytest
import redis

from crawler.links.resolver import MappedResolver
from devtools.services import start_sandbox
from tests.harness import Crawl

if TYPE_CHECKING:
    from twisted.internet.base import ReactorBase

RESOLVER = {
    "TWISTED_DNS_RESOLVER": "crawler.links.resolver.MappedResolver",
    "LINKS_RESOLVE": json.dumps({"test": "127.0.0.1"}),
}


def test_an_ip_address_needs_no_lookup() -> None:
    resolver = MappedResolver(cast("ReactorBase", _NoReactor()), 0, 1.0, {"test": "127.0.0.2"})
    answers: list[str] = []
    for name in ("::1", "[::1]", "127.0.0.1", "site1.test"):
        resolver.getHostByName(name).addCallback(answers.append)
    assert answers == ["::1", "::1", "127.0.0.1", "127.0.0.2"]


class _NoReactor:
    """A reactor no lookup may reach: answers that need one fail the test."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"the resolver used the reactor ({name})")


@pytest.fixture(scope="module")
def ipv6_sandbox() -> Iterator[str]:
    """The sandbox listening on IPv6's loopback only; its base URL (``http://[::1]:PORT``)."""
    server, url = start_sandbox(host="::1")
    yield url
    server.stop()


@pytest.mark.integration
def test_an_ipv6_start_url_is_crawled_and_the_worker_closes(
    crawl: Crawl, redis_client: redis.Redis, ipv6_sandbox: str
) -> None:
    start = f"{ipv6_sandbox}/@nobody"  # an HTML page on any host (the sandbox's web needs a name)
    assert urlsplit(start).hostname == "::1"
    redis_client.lpush("links:start_urls", json.dumps({"url": start, "max_depth": 0}))
    settings = {**RESOLVER, "LINKS_SITEMAPS": False}
    result = crawl("links", settings=settings, timeout=60)
    assert result.returncode == 0, result.stderr[-3000:]
    pages = list(crawl.mongo.db.pages.find({}, {"url": 1, "status": 1}))
    assert [(doc["url"], doc["status"]) for doc in pages] == [(start, 200)]
    assert redis_client.llen("{links}:dead") == 0
