"""A Redis outage is never a request's failure: Redis killed (-9) mid-crawl and restarted from
its append-only file costs a pause, and the crawl ends with every profile stored once."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import redis

from sandbox.seed import build_dataset
from tests.harness import MONGO_PAUSE, Crawl, Restartable, Sandbox, poll

pytestmark = pytest.mark.integration

# At the fleet rate of 10 requests a second, 160 profiles take about 16 s: the outage comes
# after 60 of them, with most of the work still to do.
USERS = [author.unique_id for author in build_dataset().authors[:160]]
FRONTIER_KEYS = (
    "{profiles}:queues",
    "{profiles}:queue:0",
    "{profiles}:leases",
    "{profiles}:delayed",
    "profiles:start_urls",
    "{profiles:start_urls}:leases",
)
NOT_IN_LOG = ("Scraper close failure", "Error caught on signal handler", "Traceback")


def test_redis_killed_and_restarted_mid_crawl_loses_nothing(
    crawl: Crawl, sandbox: Sandbox, tmp_path: Path, own_redis: Restartable
) -> None:
    crawl.redis_url = f"redis://127.0.0.1:{own_redis.port}/0"
    client = redis.Redis(port=own_redis.port)
    sandbox.admin("config", {"latency_ms": 40})
    client.lpush("profiles:start_urls", *(json.dumps({"unique_id": u}) for u in USERS))
    log = tmp_path / "worker.log"
    # Every entry is read at once, so the crawl never pauses between start batches, and a
    # fleet-wide rate well under what eight slots could fetch, even on a loaded machine. With
    # two identities (bind addresses) tokens are taken in the worker, not at the send gate: some
    # requests always wait in the ban middleware for their next token from Redis, and the
    # outage finds them there.
    settings = {
        "FRONTIER_LEASE_SECONDS": 5,
        "CONCURRENT_REQUESTS": 8,
        "START_BATCH_SIZE": len(USERS),
        "POLITENESS_RATE": 5,
        "POLITENESS_BURST": 5,
        "BIND_ADDRESSES": "127.0.0.1,127.0.0.2",
    }
    with crawl.background("profiles", settings=settings, log=log) as worker:
        poll(lambda: crawl.mongo.db.profiles.count_documents({}) >= 60, 60, "progress", MONGO_PAUSE)
        own_redis.kill()
        poll(lambda: log.read_text().count("Redis unavailable") >= 2, 30, "the outage noticed")
        poll(lambda: "Ban-check waits for Redis" in log.read_text(), 30, "requests waiting")
        poll(lambda: "Fleet stats not published" in log.read_text(), 30, "stats waiting")
        own_redis.start()
        assert worker.wait(120) == 0, log.read_text()[-3000:]
    text = log.read_text()
    for line in NOT_IN_LOG:
        assert line not in text, text[text.find(line) - 200 :][:3000]
    stored = [doc["unique_id"] for doc in crawl.mongo.db.profiles.find({}, {"unique_id": 1})]
    assert sorted(stored) == sorted(USERS)
    assert client.llen("{profiles}:dead") == 0, client.lrange("{profiles}:dead", 0, 2)
    for key in FRONTIER_KEYS:
        assert not client.exists(key), f"{key} still holds work"
