"""Per-domain stats, bounded by DOMAIN_STATS_MAX for the whole fleet: the fleet names the first
domains its workers publish and counts the others as ``(other)``; a named domain's counts are
whole (every worker counts it by name), and every count is somewhere. Real Redis; the crawl
test also the MongoDB-wire server and a web of hosts on their own addresses."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any, cast

import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from crawler.keys import FleetKeys, FrontierKeys
from crawler.observability.domain_stats import OTHER, domain_stat
from crawler.observability.publisher import StatsPublisher
from sandbox.hosts import host_address
from tests.harness import Crawl, scrapy, served_hosts

SPIDER = "shop"
KEYS = FleetKeys.for_spider(SPIDER, "{%(spider)s}:stats")
HOSTS = st.sampled_from(["a", "b", "c", "d", "e", "f", ""])
# A step: which of three workers, the hosts it meets, then whether it publishes, and whether the
# publish's reply is lost (applied in Redis, its batch sent again with the next).
STEP = st.tuples(
    st.integers(0, 2), st.lists(HOSTS, max_size=6), st.sampled_from(["", "publish", "lost"])
)
STEPS = st.lists(STEP, max_size=12)


def _requests_by_domain(stats: dict[Any, Any]) -> dict[str, int]:
    """The request counts per domain name in a worker's stats or the fleet's hash."""
    named: dict[str, int] = {}
    for name, value in stats.items():
        text = name.decode() if isinstance(name, bytes) else name
        if text.startswith("domain/") and text.endswith("/request_count"):
            named[text.split("/")[1]] = int(value)
    return named


@settings(deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(most=st.integers(0, 4), steps=STEPS)
def test_any_workers_and_publishes_name_at_most_the_most_and_lose_no_count(
    redis_client: redis.Redis, most: int, steps: list[tuple[int, list[str], str]]
) -> None:
    redis_client.flushdb()
    frontier = FrontierKeys(SPIDER, f"{SPIDER}:start_urls")
    workers = [
        StatsPublisher(redis_client, KEYS, frontier, "bloom", f"w{n}", 30, most_domains=most)
        for n in range(3)
    ]
    own: list[dict[str, Any]] = [{}, {}, {}]
    met: list[Counter[str]] = [Counter(), Counter(), Counter()]
    for index, hosts, publish in [*steps, *((n, [], "publish") for n in range(3))]:
        worker, stats = workers[index], own[index]
        for host in hosts:
            key = domain_stat(worker.domains(host), "request_count")
            stats[key] = stats.get(key, 0) + 1
            met[index][host or "-"] += 1
        if publish == "publish":
            worker.publish(dict(stats), {"host": "here"})
            worker.fold_into(stats)
        elif publish == "lost":
            pipe = redis_client.pipeline(transaction=False)
            worker.queue_publish(pipe, dict(stats), {"host": "here"})
            pipe.execute()

    fleet = _requests_by_domain(redis_client.hgetall(KEYS.stats))
    named = set(fleet) - {OTHER}
    members = cast(set[bytes], redis_client.smembers(KEYS.domains))
    assert named == {member.decode() for member in members}
    assert len(named) <= most
    everyone = sum(met, Counter())
    assert {host: fleet[host] for host in named} == {host: everyone[host] for host in named}
    assert sum(fleet.values()) == sum(everyone.values())
    for stats, counted in zip(own, met, strict=True):
        mine = _requests_by_domain(stats)
        assert set(mine) <= named | {OTHER}
        assert sum(mine.values()) == sum(counted.values())
    for worker, stats in zip(workers, own, strict=True):
        worker.close(stats, "finished")
    assert sum(_requests_by_domain(redis_client.hgetall(KEYS.stats)).values()) == len(
        [host for _, hosts, _ in steps for host in hosts]
    )
    assert redis_client.keys(f"{KEYS.stats}:applied:*") == []
    assert redis_client.zcard(KEYS.workers) == 0


@pytest.mark.integration
def test_two_workers_crawling_more_sites_than_domain_stats_max_name_the_same_domains(
    crawl: Crawl, redis_client: redis.Redis
) -> None:
    """12 sites, 4 domains named, two workers: in the fleet's stats and in `scrapy status`,
    each named domain's requests are what its host received, and ``(other)``'s are the
    other hosts' sum."""
    most, sites = 4, 12
    settings = {"DOMAIN_STATS_MAX": most, "LINKS_SCOPE": "host", "LINKS_SITEMAPS": False}
    with served_hosts(sites, 3) as web:
        homes = [f"http://{host_address(h)}:{web.port}/" for h in range(sites)]
        redis_client.lpush("links:start_urls", *homes)
        with (
            crawl.background("links", settings=settings) as first,
            crawl.background("links", settings=settings) as second,
        ):
            for worker in (first, second):
                assert worker.wait(120) == 0, worker.log_text()[-3000:]
        received = {host: len(arrivals) for host, arrivals in web.arrivals.items()}
    assert len(received) == sites
    counted = _requests_by_domain(cast(dict[bytes, bytes], redis_client.hgetall("{links}:stats")))
    named = set(counted) - {OTHER}
    assert len(named) == most
    assert {host: received[host] for host in named} == {host: counted[host] for host in named}
    assert counted[OTHER] == sum(n for host, n in received.items() if host not in named)

    status = scrapy("status", "links", "--json", env=crawl.env())
    assert status.returncode == 0, status.stderr[-3000:]
    domains = json.loads(status.stdout)["spiders"]["links"]["counters"]["domains"]
    assert {host: row["requests"] for host, row in domains.items()} == counted
