"""A fleet loses nothing: a worker killed mid-crawl, Redis restarted mid-crawl, a crawl paused
under the autoscaler and resumed."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import pytest
import redis

from sandbox.seed import build_dataset
from tests.harness import (
    MONGO_PAUSE,
    Crawl,
    Mongo,
    Restartable,
    Sandbox,
    autoscaler_exits,
    autoscaler_steps,
    background,
    poll,
    scrapy,
)

pytestmark = pytest.mark.integration

DATASET = build_dataset()
MISSING = [f"missing.user{index}" for index in range(60)]
# Half the sandbox's authors (every other one) and 60 missing users: 210 profiles, so a worker
# stopped after 40-60 of them leaves most of the work in flight or queued.
USERS = [author.unique_id for author in DATASET.authors[::2]] + MISSING
FRONTIER_KEYS = (
    "{profiles}:queues",
    "{profiles}:queue:0",
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


def test_a_paused_crawl_lets_the_autoscaler_stop_its_workers_and_resumes_whole(
    crawl: Crawl, redis_client: redis.Redis, sandbox: Sandbox, tmp_path: Path
) -> None:
    """Paused mid-crawl, the fleet wants no worker: the autoscaler stops them (they give back
    what they hold) and starts none while the crawl stays paused; resumed, it starts them
    again and every profile is stored once."""
    sandbox.admin("config", {"latency_ms": 200})  # the crawl outlasts the pause's 2 s to land
    redis_client.lpush("profiles:start_urls", *(json.dumps({"unique_id": u}) for u in USERS))
    settings = {**WORKER, "MAX_IDLE_TIME_BEFORE_CLOSE": 0, "STATS_PUBLISH_INTERVAL": 1}
    command = crawl.autoscale(
        "profiles", "--min", "0", "--max", "2", "--cooldown", "0", "--interval", "0.3",
        "--logs", str(tmp_path / "workers"), settings=settings,
    )  # fmt: skip
    log = tmp_path / "autoscale.log"
    with background(command, crawl.env(), log) as autoscaler:
        poll(lambda: crawl.mongo.db.profiles.count_documents({}) >= 20, 60, "progress", MONGO_PAUSE)
        paused = scrapy("frontier", "profiles", "pause", "--reason", "test", env=crawl.env())
        assert paused.returncode == 0, paused.stderr[-3000:]
        paused_at = time.time()
        poll(lambda: autoscaler_steps(log)[-1]["running"] == 0, 60, "the workers stopped")
        # A few looks more while the crawl stays paused: none may start a worker.
        poll(
            lambda: sum(step["time"] > paused_at + 1 for step in autoscaler_steps(log)) >= 5,
            30,
            "looks while paused",
        )
        poll(
            lambda: (
                not redis_client.zcard("{profiles}:leases")
                and not redis_client.zcard("{profiles:start_urls}:leases")
            ),
            30,
            "the stopped workers' leases given back",
        )
        left = redis_client.llen("profiles:start_urls") + sum(
            int(redis_client.llen(key)) for key in redis_client.keys("{profiles}:queue:*")
        )
        assert left > 0, "the crawl ended before the pause: nothing shows the fleet waits"
        status = scrapy("status", "profiles", "--json", env=crawl.env())
        assert json.loads(status.stdout)["spiders"]["profiles"]["sizing"]["paused"] is True
        resumed_at = time.time()
        resumed = scrapy("frontier", "profiles", "resume", env=crawl.env())
        assert resumed.returncode == 0, resumed.stderr[-3000:]
        poll(
            lambda: crawl.mongo.db.profiles.count_documents({}) == len(USERS),
            120,
            "every profile after the resume",
            MONGO_PAUSE,
        )
        poll(lambda: autoscaler_steps(log)[-1]["running"] == 0, 60, "the fleet scaled in")
        autoscaler.terminate()
        assert autoscaler.wait(60) == 0, log.read_text()[-3000:]
    steps = autoscaler_steps(log)
    while_paused = [step for step in steps if paused_at + 1 < step["time"] < resumed_at]
    assert len(while_paused) >= 5
    assert all(step["wanted"] == 0 and not step["started"] for step in while_paused)
    assert any(step["started"] for step in steps if step["time"] > resumed_at)
    exits = autoscaler_exits(log)
    assert set(exits.values()) == {0}, exits
    _assert_every_profile_once(crawl.mongo)
    _assert_frontier_empty(redis_client)
