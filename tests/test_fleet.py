"""A fleet loses nothing: a worker killed mid-crawl, Redis restarted mid-crawl."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest
import redis

from sandbox.seed import build_dataset
from tests.harness import MONGO_PAUSE, Crawl, Mongo, Restartable, Sandbox, poll

pytestmark = pytest.mark.integration

DATASET = build_dataset()
MISSING = [f"missing.user{index}" for index in range(60)]
# Half the sandbox's authors (every other one) and 60 missing users: 210 profiles, so a worker
# stopped after 40-60 of them leaves most of the work in flight or queued.
USERS = [author.unique_id for author in DATASET.authors[::2]] + MISSING
FRONTIER_KEYS = (
    "{profiles}:queue",
    "{profiles}:queues",
    "{profiles}:leases",
    "{profiles}:delayed",
    "{profiles}:data",
    "{profiles}:owner",
    "profiles:start_urls",
    "{profiles:start_urls}:leases",
)


# Each worker's settings: leases of 5 s, start entries 20 at a time, 4 requests at once.
WORKER = {"FRONTIER_LEASE_SECONDS": 5, "START_BATCH_SIZE": 20, "CONCURRENT_REQUESTS": 4}


def _assert_every_profile_once(mongo: Mongo) -> None:
    stored = [doc["unique_id"] for doc in mongo.db.profiles.find({}, {"unique_id": 1})]
    assert len(stored) == len(set(stored))
    assert set(stored) == set(USERS)
    statuses = {doc["unique_id"]: doc["status"] for doc in mongo.db.profiles.find()}
    assert all(statuses[name] == "not_found" for name in MISSING)


def _assert_frontier_empty(client: redis.Redis) -> None:
    for key in FRONTIER_KEYS:
        assert not client.exists(key), f"{key} still holds work"
    assert client.llen("{profiles}:dead") == 0


def test_a_killed_worker_loses_nothing(
    crawl: Crawl, redis_client: redis.Redis, sandbox: Sandbox, tmp_path: Path
) -> None:
    sandbox.admin("config", {"latency_ms": 60})
    redis_client.lpush("profiles:start_urls", *(json.dumps({"unique_id": u}) for u in USERS))
    with (
        crawl.background("profiles", settings=WORKER, log=tmp_path / "victim.log") as victim,
        crawl.background("profiles", settings=WORKER, log=tmp_path / "survivor.log") as survivor,
    ):
        poll(lambda: crawl.mongo.db.profiles.count_documents({}) >= 60, 60, "progress", MONGO_PAUSE)
        victim.kill()
        assert survivor.wait(180) == 0, (tmp_path / "survivor.log").read_text()[-3000:]
    _assert_every_profile_once(crawl.mongo)
    _assert_frontier_empty(redis_client)


def test_redis_restart_mid_crawl_loses_nothing(
    crawl: Crawl, sandbox: Sandbox, tmp_path: Path, own_redis: Restartable
) -> None:
    crawl.redis_url = f"redis://127.0.0.1:{own_redis.port}/0"
    client = redis.Redis(port=own_redis.port)
    sandbox.admin("config", {"latency_ms": 60})
    client.lpush("profiles:start_urls", *(json.dumps({"unique_id": u}) for u in USERS))
    log = tmp_path / "worker.log"
    with crawl.background("profiles", settings=WORKER, log=log) as worker:
        poll(lambda: crawl.mongo.db.profiles.count_documents({}) >= 60, 60, "progress", MONGO_PAUSE)
        own_redis.stop()
        poll(
            lambda: "backing off, nothing is dropped" in log.read_text(),
            60,
            "the scheduler to notice",
        )
        own_redis.start()
        assert worker.wait(180) == 0, log.read_text()[-3000:]
    assert "Redis reachable again" in log.read_text()
    _assert_every_profile_once(crawl.mongo)
    _assert_frontier_empty(client)


# SIGTERM: Docker, Kubernetes; SIGINT: Scrapyd 1.6 cancelling a job, Ctrl-C.
@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_stop_signal_releases_leases_at_once(
    crawl: Crawl, redis_client: redis.Redis, sandbox: Sandbox, tmp_path: Path, stop: signal.Signals
) -> None:
    sandbox.admin("config", {"latency_ms": 60})
    redis_client.lpush("profiles:start_urls", *(json.dumps({"unique_id": u}) for u in USERS))
    settings = {**WORKER, "FRONTIER_LEASE_SECONDS": 600}
    with crawl.background("profiles", settings=settings, log=tmp_path / "first.log") as first:
        poll(lambda: crawl.mongo.db.profiles.count_documents({}) >= 40, 60, "progress", MONGO_PAUSE)
        first.send_signal(stop)
        assert first.wait(60) == 0, (tmp_path / "first.log").read_text()[-3000:]
    assert redis_client.zcard("{profiles}:leases") == 0, "leases left to expire"
    assert redis_client.zcard("{profiles:start_urls}:leases") == 0
    with crawl.background("profiles", settings=settings, log=tmp_path / "second.log") as second:
        assert second.wait(180) == 0, (tmp_path / "second.log").read_text()[-3000:]
    _assert_every_profile_once(crawl.mongo)
    _assert_frontier_empty(redis_client)
