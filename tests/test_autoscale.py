"""The local autoscaler over real workers: `scrapy fleet autoscale SPIDER --local` starts and
stops `scrapy crawl` processes toward the workers the work allows, and a worker told to go
loses nothing. Real Redis, the MongoDB-wire server and the sandbox."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from sandbox.hosts import HostsWeb, fetched_pages, host_address, site_pages
from tests.harness import (
    Crawl,
    Mongo,
    autoscaler_exits,
    autoscaler_steps,
    background,
    poll,
    served_hosts,
)

pytestmark = pytest.mark.integration

# Profiles of missing users (one request and one document each), pushed in waves: the backlog
# steps up, then down to nothing, four times; 2,500 pages in all.
WAVES = [625, 375, 875, 625]
# Workers the autoscaler keeps, at least and at most.
LEAST, MOST = 2, 5
# Workers stay up when idle (the autoscaler stops them), publish every second, lease 10 s.
WORKERS = {
    "MAX_IDLE_TIME_BEFORE_CLOSE": 0,
    "STATS_PUBLISH_INTERVAL": 1,
    "FRONTIER_LEASE_SECONDS": 10,
    "START_BATCH_SIZE": 50,
}


def _work_left(client: redis.Redis, spider: str) -> int:
    keys = [f"{{{spider}}}:leases", f"{{{spider}}}:delayed", f"{spider}:start_urls"]
    queued = sum(int(client.llen(key)) for key in client.keys(f"{{{spider}}}:queue:*"))
    return queued + sum(int(client.zcard(k) if "start" not in k else client.llen(k)) for k in keys)


def _running(log: Path) -> int:
    return int(autoscaler_steps(log)[-1]["running"])


def _stopped(log: Path) -> int:
    return sum(len(step.get("stopped", [])) for step in autoscaler_steps(log))


def _assert_every_profile_once(mongo: Mongo, users: list[str]) -> None:
    stored = [doc["unique_id"] for doc in mongo.db.profiles.find({}, {"unique_id": 1})]
    assert len(stored) == len(set(stored)), "a profile stored twice"
    assert set(stored) == set(users), f"{len(set(users) - set(stored))} profiles lost"


@pytest.mark.timeout(600)  # about 35 s on 2 cores, with the untimed tests beside it
def test_the_local_autoscaler_scales_out_and_in_and_loses_nothing(
    crawl: Crawl, redis_client: redis.Redis, tmp_path: Path
) -> None:
    """2,500 profiles in four waves (the backlog stepping up, then down to nothing): 2 to 5
    workers, the 3 beyond the minimum started once a wave and stopped once at its tail (not
    stopped while they hold work, then started again for what they gave back), each stopped
    one exits 0, every profile stored once and the frontier empty."""
    settings = {**WORKERS, "AUTOSCALE_BACKLOG_SECONDS": 0.1, "AUTOSCALE_WORKER_PACE": 20}
    command = crawl.autoscale(
        "profiles", "--min", str(LEAST), "--max", str(MOST), "--cooldown", "1", "--interval", "0.3",
        "--logs", str(tmp_path / "workers"), settings=settings,
    )  # fmt: skip
    log, users = tmp_path / "autoscale.log", []
    with background(command, crawl.env(), log) as autoscaler:
        for wave, size in enumerate(WAVES):
            batch = [f"missing.wave{wave}.{n}" for n in range(size)]
            users += batch
            redis_client.lpush(
                "profiles:start_urls", *(json.dumps({"unique_id": u}) for u in batch)
            )
            poll(lambda: _work_left(redis_client, "profiles") == 0, 240, f"wave {wave} done")
            poll(lambda: _running(log) == LEAST, 60, f"wave {wave}'s scale-in")
        autoscaler.terminate()
        assert autoscaler.wait(90) == 0, log.read_text()[-3000:]
    steps, exits = autoscaler_steps(log), autoscaler_exits(log)
    assert len(users) == sum(WAVES)
    # 3 a wave; a few more if the pace measured wavers at a tail.
    extra = (MOST - LEAST) * len(WAVES)
    assert extra <= _stopped(log) <= extra + 4
    assert max(step["running"] for step in steps) <= MOST
    assert max(step["wanted"] for step in steps) == MOST
    assert min(step["running"] for step in steps[5:]) >= LEAST
    assert set(exits.values()) == {0}, exits
    assert len(exits) == sum(len(step["started"]) for step in steps)
    _assert_every_profile_once(crawl.mongo, users)
    # The pace the workers measured: pages per busy worker-second, from the minute buckets.
    buckets = [redis_client.hgetall(key) for key in redis_client.keys("{profiles}:stats:minute:*")]
    pages = sum(int(bucket.get(b"pages", 0)) for bucket in buckets)
    busy = sum(int(bucket.get(b"busy_ms", 0)) for bucket in buckets) / 1000
    # At least once: a page whose worker was told to go before its item was stored is
    # released and fetched again (stored once).
    assert pages >= len(users)
    assert 0 < busy < MOST * (max(step["time"] for step in steps) - min(s["time"] for s in steps))
    frontier = ("queues", "leases", "delayed", "data", "owner")
    assert not any(redis_client.exists(f"{{profiles}}:{key}") for key in frontier)
    assert not redis_client.keys("{profiles}:queue:*")
    assert not redis_client.exists("profiles:start_urls", "{profiles:start_urls}:leases")
    assert redis_client.llen("{profiles}:dead") == 0


@pytest.fixture
def web() -> Iterator[HostsWeb]:
    """Five hosts of 12 pages each, served from a thread of this process."""
    with served_hosts(5, 12) as web:
        yield web


def test_a_politeness_bound_web_never_gets_a_second_worker(
    crawl: Crawl, redis_client: redis.Redis, web: HostsWeb, tmp_path: Path
) -> None:
    settings = {
        **WORKERS,
        "POLITENESS_RATE": 1,
        "POLITENESS_BURST": 1,
        "LINKS_SCOPE": "host",
        "LINKS_SITEMAPS": False,
        "METRICS_PORT": 0,
    }
    command = crawl.autoscale(
        "links", "--max", "8", "--cooldown", "1", "--interval", "0.3",
        "--logs", str(tmp_path / "workers"), settings=settings,
    )  # fmt: skip
    log = tmp_path / "autoscale.log"
    homes = [f"http://{host_address(h)}:{web.port}/" for h in range(5)]
    with background(command, crawl.env(), log) as autoscaler:
        redis_client.lpush("links:start_urls", *homes)
        site = site_pages(5, 12, web.port)
        poll(lambda: site <= fetched_pages(dict(web.arrivals)), 120, "the whole web fetched")
        poll(lambda: _work_left(redis_client, "links") == 0, 60, "the frontier drained")
        poll(lambda: autoscaler_steps(log)[-1]["running"] == 0, 30, "the worker stopped once done")
        autoscaler.terminate()
        assert autoscaler.wait(60) == 0, log.read_text()[-3000:]
    steps = autoscaler_steps(log)
    assert max(step["wanted"] for step in steps) == 1
    assert max(step["running"] for step in steps) <= 1
    exits = autoscaler_exits(log)
    assert len(exits) == sum(len(step["started"]) for step in steps) >= 1
    assert set(exits.values()) == {0}, exits
