"""Per-domain stats, bounded by DOMAIN_STATS_MAX: a crawl of many sites counts the first
domains it meets by name and the others as ``(other)``, and the counts still match what each
host received. Real Redis, the MongoDB-wire server and a web of hosts on their own addresses."""

from __future__ import annotations

import json
from typing import cast

import pytest
import redis
from hypothesis import given
from hypothesis import strategies as st

from crawler.domain_stats import OTHER, DomainNames
from sandbox.hosts import host_address
from tests.harness import Crawl, scrapy, served_hosts

HOSTS, PAGES, MOST = 12, 3, 4


HOST_NAMES = st.sampled_from(["a", "b", "c", "d", "e", "f", ""])


@given(st.lists(HOST_NAMES, max_size=30), st.integers(0, 8))
def test_the_domains_named_are_the_first_met_and_never_more_than_the_most(
    hosts: list[str], most: int
) -> None:
    name = DomainNames(most)
    names = [name(host) for host in hosts]
    first_met = list(dict.fromkeys(hosts))[:most]
    assert [n for n in names if n != OTHER] == [h for h in hosts if h in first_met]
    assert names.count(OTHER) == sum(h not in first_met for h in hosts)


@pytest.mark.integration
def test_a_crawl_of_more_sites_than_domain_stats_max_counts_the_rest_as_other(
    crawl: Crawl, redis_client: redis.Redis
) -> None:
    """12 sites, 4 domains named: in the fleet's stats and in `scrapy status`, each named
    domain's requests are what its host received, and ``(other)``'s are the other hosts' sum."""
    settings = {"DOMAIN_STATS_MAX": MOST, "LINKS_SCOPE": "host", "LINKS_SITEMAPS": False}
    with served_hosts(HOSTS, PAGES) as web:
        homes = [f"http://{host_address(h)}:{web.port}/" for h in range(HOSTS)]
        redis_client.lpush("links:start_urls", *homes)
        result = crawl("links", settings=settings)
        assert result.returncode == 0, result.stderr[-3000:]
        received = {host: len(arrivals) for host, arrivals in web.arrivals.items()}
    assert len(received) == HOSTS
    stats = cast(dict[bytes, bytes], redis_client.hgetall("{links}:stats"))
    counted = {
        name.decode().split("/")[1]: int(value)
        for name, value in stats.items()
        if name.startswith(b"domain/") and name.endswith(b"/request_count")
    }
    named = set(counted) - {OTHER}
    assert len(named) == MOST
    assert {host: received[host] for host in named} == {host: counted[host] for host in named}
    assert counted[OTHER] == sum(n for host, n in received.items() if host not in named)

    status = scrapy("status", "links", "--json", env=crawl.env())
    assert status.returncode == 0, status.stderr[-3000:]
    domains = json.loads(status.stdout)["spiders"]["links"]["counters"]["domains"]
    assert {host: row["requests"] for host, row in domains.items()} == counted
