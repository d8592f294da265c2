"""A worker through a MongoDB outage: seen away, items spilled at once, a SIGTERM obeyed at once.

A profiles worker crawls while its MongoDB is killed (-9). Its /metrics and ``scrapy status``
say MongoDB away while it is, and back once the spill file is replayed. Once a batch has found
MongoDB away, the items after it go to the spill file as they come (not one batch per connect
timeout and retries), and a worker told to go (SIGTERM) in the outage spills what it holds,
settles its leases and exits 0 promptly. MongoDB back, a worker replays the spill file: every
profile is stored exactly once.
"""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pymongo
import pytest
import redis
from prometheus_client.parser import text_string_to_metric_families

from crawler.storage.spill import read_line
from devtools.services import free_port
from sandbox.seed import build_dataset
from tests.harness import MONGO_PAUSE, Crawl, Mongo, Restartable, Sandbox, Worker, poll, scrapy

pytestmark = pytest.mark.integration

USERS = [author.unique_id for author in build_dataset().authors][:120]
SETTINGS = {
    "CONCURRENT_REQUESTS": 2,
    "MONGO_BATCH_SIZE": 50,
    # A batch finding MongoDB away waits 3 attempts of 2 s, and backoff, before it is spilled.
    "MONGO_CONNECT_TIMEOUT_MS": 2000,
    "MONGO_RETRY_TIMES": 2,
    "MAX_IDLE_TIME_BEFORE_CLOSE": 600,  # the worker goes when told to
}
LEASES = ("{profiles}:leases", "{profiles:start_urls}:leases")


def _stored(mongo: Mongo) -> int:
    try:
        return int(mongo.db.profiles.count_documents({}))
    except pymongo.errors.PyMongoError:
        return 0


def _spilled(spill: Path, worker: Worker) -> set[str]:
    """The keys of the profiles in the worker's spill file: its whole lines (the worker may be
    writing the last one)."""
    keys = set()
    for path in spill.glob(f"profiles-{worker.pid}-*.jsonl"):
        for line in path.read_bytes().split(b"\n")[:-1]:
            if line and not line.startswith(b"#"):
                keys.add(_key(line))
    return keys


def _key(line: bytes) -> str:
    return str(read_line(line)["filter"]["unique_id"])


def _start(crawl: Crawl, own_mongo: Restartable) -> redis.Redis:
    crawl.mongo = Mongo(
        own_mongo.uri, "outage", pymongo.MongoClient(own_mongo.uri, serverSelectionTimeoutMS=500)
    )
    client = redis.Redis.from_url(crawl.redis_url)
    client.lpush("profiles:start_urls", *[json.dumps({"unique_id": u}) for u in USERS])
    return client


def _settle(crawl: Crawl, client: redis.Redis, spill: Path) -> None:
    """MongoDB back, a worker replays the spill file left and crawls what was released: every
    profile stored once, nothing leased."""
    result = crawl("profiles", settings={"MONGO_SPILL_DIR": spill}, timeout=180)
    assert result.returncode == 0, result.stdout[-4000:]
    stored = [doc["unique_id"] for doc in crawl.mongo.db.profiles.find({}, {"unique_id": 1})]
    assert sorted(stored) == sorted(USERS)
    assert not any(client.exists(key) for key in LEASES)


def _through_an_outage(
    crawl: Crawl,
    sandbox: Sandbox,
    tmp_path: Path,
    own_mongo: Restartable,
    during: Callable[[Worker, Path, int], None],
    **more: object,
) -> None:
    """A worker crawls; once 10 profiles are stored its MongoDB is killed, ``during`` waits
    for what the test looks at (given the worker, its spill directory and the profiles stored
    before the kill), the worker is told to go; then nothing is lost and, MongoDB back, every
    profile is stored once."""
    client = _start(crawl, own_mongo)
    sandbox.admin("config", {"latency_ms": 150})
    spill = tmp_path / "spill"
    settings = {**_settings(spill), **more}
    with crawl.background("profiles", settings=settings, log=tmp_path / "w.log") as worker:
        poll(lambda: _stored(crawl.mongo) >= 10, 60, "10 profiles stored", MONGO_PAUSE)
        before = _stored(crawl.mongo)
        own_mongo.kill()
        during(worker, spill, before)
        _told_to_go(worker, client)
    _nothing_lost(crawl, own_mongo, spill, worker)
    _settle(crawl, client, spill)


def test_items_are_spilled_as_they_come_once_mongodb_is_known_away(
    crawl: Crawl, sandbox: Sandbox, tmp_path: Path, own_mongo: Restartable
) -> None:
    def all_spilled(worker: Worker, spill: Path, before: int) -> None:
        # The rest of the crawl (some 110 pages at 150 ms each, two at a time: about 9 s) is
        # spilled as it is fetched, once one batch has found MongoDB away (about 7 s). Before,
        # every item waited in a batch of its own for its 7 s of attempts: 4 or 5 in this time.
        poll(
            lambda: len(_spilled(spill, worker)) >= len(USERS) - before - 5,
            30,
            "the items of the outage spilled",
            MONGO_PAUSE,
        )

    _through_an_outage(crawl, sandbox, tmp_path, own_mongo, all_spilled)


def test_a_worker_told_to_go_during_an_outage_spills_what_it_holds_and_exits(
    crawl: Crawl, sandbox: Sandbox, tmp_path: Path, own_mongo: Restartable
) -> None:
    def first_spill(worker: Worker, spill: Path, before: int) -> None:
        # Told to go next, with pages fetched whose items wait to be stored: they are spilled,
        # not each held for its own timeouts and retries (6.75 s apiece) before it exits.
        poll(lambda: "MongoDB unavailable" in worker.log_text(), 30, "a spill")

    _through_an_outage(crawl, sandbox, tmp_path, own_mongo, first_spill)


def test_a_worker_told_to_go_while_a_batch_finds_mongodb_away_does_not_wait_out_its_retries(
    crawl: Crawl, sandbox: Sandbox, tmp_path: Path, own_mongo: Restartable
) -> None:
    def batch_still_tried(worker: Worker, spill: Path, before: int) -> None:
        served = sandbox.admin("stats")["total"]
        poll(lambda: sandbox.admin("stats")["total"] >= served + 4, 30, "pages after the kill")
        assert "MongoDB unavailable" not in worker.log_text()  # its batch is being tried

    # Six attempts of 2 s and 7.75 s of backoff: a batch would take some 20 s to be spilled.
    _through_an_outage(crawl, sandbox, tmp_path, own_mongo, batch_still_tried, MONGO_RETRY_TIMES=5)


def test_the_first_batch_of_an_outage_is_spilled_once_its_first_attempt_finds_no_server(
    crawl: Crawl, sandbox: Sandbox, tmp_path: Path, own_mongo: Restartable
) -> None:
    """With the default timeouts a batch took 4 attempts of 5 s and 1.75 s of backoff (some
    22 s) to find MongoDB away, the items fetched meanwhile held in memory; the first attempt
    that finds no server at all (its 5 s) is enough now."""

    def first_spilled_soon(worker: Worker, spill: Path, before: int) -> None:
        killed = time.monotonic()  # called just after the kill
        poll(lambda: _spilled(spill, worker), 60, "a spilled item")
        took = time.monotonic() - killed
        assert took < 12, f"the first item spilled {took:.1f} s after MongoDB was killed"

    timeouts = {"MONGO_CONNECT_TIMEOUT_MS": 5000, "MONGO_RETRY_TIMES": 3}
    _through_an_outage(crawl, sandbox, tmp_path, own_mongo, first_spilled_soon, **timeouts)


def test_a_mongodb_back_within_the_connect_timeout_costs_no_spill(
    crawl: Crawl, sandbox: Sandbox, tmp_path: Path, own_mongo: Restartable
) -> None:
    """MongoDB killed and started again at once, within the connect timeout: its batches find
    it back and are written, none spilled, MongoDB never held away; every profile stored once."""
    client = _start(crawl, own_mongo)
    sandbox.admin("config", {"latency_ms": 150})
    spill = tmp_path / "spill"
    settings = {**_settings(spill), "MONGO_CONNECT_TIMEOUT_MS": 5000, "MONGO_RETRY_TIMES": 3}
    with crawl.background("profiles", settings=settings, log=tmp_path / "w.log") as worker:
        poll(lambda: _stored(crawl.mongo) >= 10, 60, "10 profiles stored", MONGO_PAUSE)
        own_mongo.kill()
        own_mongo.start()
        poll(lambda: _stored(crawl.mongo) >= len(USERS), 60, "every profile", MONGO_PAUSE)
        assert "MongoDB unavailable" not in worker.log_text()
        assert not _spilled(spill, worker)
        _told_to_go(worker, client)
    _settle(crawl, client, spill)


def test_an_operator_sees_mongodb_away_while_it_is_and_back_once_the_spill_is_replayed(
    crawl: Crawl, sandbox: Sandbox, tmp_path: Path, own_mongo: Restartable
) -> None:
    client = _start(crawl, own_mongo)
    sandbox.admin("config", {"latency_ms": 150})
    spill, port = tmp_path / "spill", free_port()
    settings = {**_settings(spill), "METRICS_PORT": port}
    with crawl.background("profiles", settings=settings, log=tmp_path / "w.log") as worker:
        poll(lambda: _stored(crawl.mongo) >= 10, 60, "10 profiles stored", MONGO_PAUSE)
        assert _gauges(port) == {"crawler_mongo_away": 0, "crawler_mongo_spilled_items": 0}
        own_mongo.kill()
        away = poll(lambda: _gauges_if(port, lambda g: g["crawler_mongo_away"] == 1), 60, "away")
        assert away["crawler_mongo_spilled_items"] > 0
        line = poll(lambda: _status_worker_line(crawl, "MONGODB AWAY"), 60, "status: away")
        assert "items spilled" in line
        own_mongo.start()
        back = {"crawler_mongo_away": 0, "crawler_mongo_spilled_items": 0}
        poll(lambda: _gauges_if(port, lambda g: g == back), 60, "back, replayed", MONGO_PAUSE)
        line = poll(lambda: _status_worker_line(crawl, "", absent="MONGODB AWAY"), 60, "status")
        assert "spilled" not in line
        _told_to_go(worker, client)
    _settle(crawl, client, spill)


def _gauges(port: int) -> dict[str, float]:
    """The worker's MongoDB gauges, as its /metrics serves them."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
        page = answer.read().decode()
    return {
        sample.name: sample.value
        for family in text_string_to_metric_families(page)
        for sample in family.samples
        if sample.name.startswith("crawler_mongo_") and sample.labels["spider"] == "profiles"
    }


def _gauges_if(port: int, wanted: Callable[[dict[str, float]], bool]) -> dict[str, float] | None:
    gauges = _gauges(port)
    return gauges if wanted(gauges) else None


def _status_worker_line(crawl: Crawl, present: str, absent: str = "\0") -> str | None:
    """The worker's line of ``scrapy status profiles`` once it holds ``present`` and not
    ``absent``."""
    shown = scrapy("status", "profiles", env=crawl.env()).stdout.splitlines()
    start = next(n for n, text in enumerate(shown) if text.strip().startswith("workers"))
    [line] = shown[start + 1 : start + 2]
    return line if present in line and absent not in line else None


def _settings(spill: Path) -> dict[str, object]:
    return {**SETTINGS, "MONGO_SPILL_DIR": spill}


def _told_to_go(worker: Worker, client: redis.Redis) -> None:
    """SIGTERM: the worker exits 0 within 10 s, holding no lease."""
    worker.terminate()
    told = time.monotonic()
    assert worker.wait(60) == 0, worker.log_text()[-4000:]
    took = time.monotonic() - told
    assert took < 10, f"exited {took:.1f} s after SIGTERM"
    assert not any(client.exists(key) for key in LEASES)


def _nothing_lost(crawl: Crawl, own_mongo: Restartable, spill: Path, worker: Worker) -> None:
    """Every profile stored before the outage, in the spill file or back in the queue."""
    own_mongo.start()
    stored = {doc["unique_id"] for doc in crawl.mongo.db.profiles.find({}, {"unique_id": 1})}
    queued = "\n".join(_queued(crawl))
    left = set(USERS) - stored - _spilled(spill, worker)
    assert all(user in queued for user in left), sorted(left)[:10]


def _queued(crawl: Crawl) -> list[str]:
    """What the frontier holds to crawl: the start list, the queues and their requests."""
    client = redis.Redis.from_url(crawl.redis_url)
    held = list(client.lrange("profiles:start_urls", 0, -1))
    for key in client.keys("{profiles}:queue:*"):
        held += client.lrange(key, 0, -1)
    held += client.hvals("{profiles}:data")
    return [entry.decode(errors="replace") if isinstance(entry, bytes) else entry for entry in held]
