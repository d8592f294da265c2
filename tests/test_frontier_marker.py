"""A frontier that vanishes under running workers (Redis restarted without persistence, or
flushed) is noticed and reported loudly, once, with what was lost."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
import redis
from scrapy.utils.test import get_crawler

from crawler.frontier.dupefilter import DupefilterConfig
from crawler.frontier.marker import FrontierMarker
from crawler.frontier.queue import Frontier
from crawler.frontier.riders import Riders
from crawler.keys import FrontierKeys
from devtools.services import free_port
from sandbox.seed import build_dataset
from tests.harness import Crawl, Restartable, Sandbox, poll

USERS = [author.unique_id for author in build_dataset().authors]


def _marker(client: redis.Redis) -> tuple[FrontierMarker, dict[str, int]]:
    stats = get_crawler().stats
    assert stats is not None
    frontier = Frontier(client, FrontierKeys("profiles", "profiles:start_urls"), DupefilterConfig())
    return FrontierMarker(frontier, stats, interval=0), stats._stats


def check(marker: FrontierMarker, leased_here: int) -> None:
    """The marker read with a round trip, as it rides a worker's pop."""
    riders = Riders()
    marker.ride(riders, lambda: leased_here)
    assert riders.send(marker.frontier.server)


def test_a_flushed_frontier_is_reported_once_by_every_worker(
    redis_client: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    (first, first_stats), (second, second_stats) = _marker(redis_client), _marker(redis_client)
    check(first, 0)
    check(second, 0)
    assert redis_client.exists("{profiles}:frontier")
    redis_client.lpush("profiles:start_urls", *(f"user{n}" for n in range(7)))
    redis_client.rpush("{profiles}:queue:0", *(f"request{n}" for n in range(20)))
    redis_client.zadd("{profiles}:queues", {"0": 0})
    check(first, 4)
    check(second, 0)
    assert not caplog.records, "an untouched frontier was reported"

    redis_client.flushdb()
    with caplog.at_level(logging.WARNING, logger="crawler.frontier.marker"):
        check(first, 4)  # writes a new marker...
        check(second, 0)  # ...that the second worker does not take for its own
        check(first, 4)
        check(second, 0)
    errors = [record.getMessage() for record in caplog.records if record.levelname == "ERROR"]
    assert len(errors) == 2, errors
    assert "Frontier of profiles vanished from Redis" in errors[0]
    assert "20 queued, 0 delayed and 0 leased requests, 7 start entries" in errors[0]
    assert "The 4 requests leased by this worker" in errors[0]
    for stats in (first_stats, second_stats):
        assert stats["frontier/lost"] == 1
        assert stats["frontier/lost/queued"] == 20
        assert stats["frontier/lost/start"] == 7
    assert redis_client.exists("{profiles}:frontier")


def test_an_empty_frontier_reset_is_only_a_warning(
    redis_client: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    marker, stats = _marker(redis_client)
    check(marker, 0)
    redis_client.flushdb()
    with caplog.at_level(logging.WARNING, logger="crawler.frontier.marker"):
        check(marker, 0)
    assert [record.levelname for record in caplog.records] == ["WARNING"]
    assert stats["frontier/lost"] == 1
    assert "frontier/lost/queued" not in stats


@pytest.mark.integration
def test_a_redis_restarted_empty_mid_crawl_is_reported(
    crawl: Crawl, sandbox: Sandbox, tmp_path: Path
) -> None:
    server = Restartable(free_port(), tmp_path / "redis", redis_args=("--appendonly", "no"))
    server.start()
    crawl.redis_url = server.uri
    client = redis.Redis(port=server.port)
    sandbox.admin("config", {"latency_ms": 150})
    client.lpush("profiles:start_urls", *(json.dumps({"unique_id": u}) for u in USERS))
    log = tmp_path / "worker.log"
    settings = {"CONCURRENT_REQUESTS": 2, "START_BATCH_SIZE": 20, "MAX_IDLE_TIME_BEFORE_CLOSE": 2}
    try:
        with crawl.background("profiles", settings=settings, log=log) as worker:
            poll(lambda: crawl.mongo.db.profiles.count_documents({}) >= 3, 30, "progress")
            held = client.zcard("{profiles}:queues") + client.zcard("{profiles}:leases")
            assert held, "nothing queued or leased to lose"
            server.kill()
            server.start()
            assert worker.wait(120) == 0, log.read_text()[-3000:]
        text = log.read_text()
        assert text.count("Frontier of profiles vanished from Redis") == 1, text[-3000:]
        assert "'frontier/lost': 1," in text
        assert "'frontier/lost/start': " in text
        assert crawl.mongo.db.profiles.count_documents({}) < len(USERS)
        assert client.exists("{profiles}:frontier")
    finally:
        client.close()
        server.stop()
