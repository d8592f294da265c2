"""Faults combined in one crawl: workers killed, Redis killed, MongoDB away, poison entries.

Two profiles workers crawl a few hundred profiles. Along the way: a worker is killed (-9) and
replaced, twice; Redis is killed (-9) and restarted from its append-only file; MongoDB is stopped
until the workers spill items they cannot write, and started again; the start list carries
hostile entries among the good ones. At the end every profile is stored exactly once, every
hostile entry is set aside, and nothing is left in the frontier or the dead-letter list.
"""

from __future__ import annotations

import json
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path

import pymongo
import pytest
import redis

from sandbox.seed import build_dataset
from tests.harness import MONGO_PAUSE, Crawl, Mongo, Restartable, Sandbox, Worker, poll

pytestmark = pytest.mark.integration

DATASET = build_dataset()
MISSING = [f"gone.user{index}" for index in range(40)]
USERS = [author.unique_id for author in DATASET.authors] + MISSING
HOSTILE: list[bytes] = [
    b"[" * 5000 + b"]" * 5000,
    b'{"unique_id": ' * 3000,
    b"\xff\xfe\x00binary",
    b"ctrl\x00\x07\x1b[31m",
    b'{"unique_id": 1e999}',
    b'{"unique_id": null}',
    b'{"unique_id": true}',
    b'{"unique_id": ["a"]}',
    b'{"url": 7}',
    b'{"nope": 1}',
    b"[1, 2, 3]",
    b"ftp://127.0.0.1/@ftp.user",
    b"javascript:alert(1)",
    b"http://[::1/@bad.ipv6",
    b"http://127.0.0.1:99999/@bad.port",
    b"http://user:pw@127.0.0.1:1/@with.credentials",
    b"http://127.0.0.2:1/@foreign.host",
    b"x" * 300_000,
    b"a user with spaces",
    b"@" + b"y" * 40,
]
FRONTIER_KEYS = (
    "{profiles}:queues",
    "{profiles}:queue:0",
    "{profiles}:leases",
    "{profiles}:delayed",
    "{profiles}:data",
    "profiles:start_urls",
    "{profiles:start_urls}:leases",
)


@dataclass
class Fleet:
    """The workers of the test, each logging to its own file."""

    crawl: Crawl
    logs: Path
    workers: list[Worker] = field(default_factory=list)
    started: ExitStack = field(default_factory=ExitStack)

    def start(self) -> Worker:
        settings = {
            "FRONTIER_LEASE_SECONDS": 5,
            "START_BATCH_SIZE": 8,
            "CONCURRENT_REQUESTS": 2,
            "MONGO_BATCH_SIZE": 10,
            "MONGO_RETRY_TIMES": 1,
            # A stopped MongoDB is given up on after 2 attempts of 2 s, not 5 s, before the spill.
            "MONGO_CONNECT_TIMEOUT_MS": 2000,
        }
        log = self.logs / f"worker{len(self.workers)}.log"
        worker = self.started.enter_context(
            self.crawl.background("profiles", settings=settings, log=log)
        )
        self.workers.append(worker)
        return worker

    def replace(self, victim: Worker) -> None:
        victim.kill()
        self.start()

    def alive(self) -> list[Worker]:
        return [worker for worker in self.workers if worker.poll() is None]

    def log(self, index: int) -> str:
        return self.workers[index].log_text()

    def stop_all(self) -> None:
        for worker in self.alive():
            worker.kill()
        self.started.close()


def _stored(mongo: Mongo) -> int:
    try:
        return int(mongo.db.profiles.count_documents({}))
    except pymongo.errors.PyMongoError:
        return 0


def _progress(mongo: Mongo, at_least: int) -> None:
    poll(lambda: _stored(mongo) >= at_least, 90, f"{at_least} profiles stored", MONGO_PAUSE)


def _spills(fleet: Fleet) -> int:
    """How many times the workers found MongoDB away and spilled a batch to disk."""
    return sum(fleet.log(index).count("MongoDB unavailable") for index in range(len(fleet.workers)))


def test_workers_redis_and_mongodb_faults_lose_nothing(
    crawl: Crawl,
    sandbox: Sandbox,
    tmp_path: Path,
    own_redis: Restartable,
    own_mongo: Restartable,
) -> None:
    crawl.redis_url = f"redis://127.0.0.1:{own_redis.port}/0"
    crawl.mongo = Mongo(
        f"mongodb://127.0.0.1:{own_mongo.port}",
        "chaos",
        pymongo.MongoClient(f"mongodb://127.0.0.1:{own_mongo.port}", serverSelectionTimeoutMS=500),
    )
    client = redis.Redis(port=own_redis.port)
    sandbox.admin("config", {"latency_ms": 150})
    entries = [json.dumps({"unique_id": user}).encode() for user in USERS]
    for index, bad in enumerate(HOSTILE):
        entries.insert(index * 17, bad)
    client.lpush("profiles:start_urls", *entries)
    fleet = Fleet(crawl, tmp_path)
    first, second = fleet.start(), fleet.start()
    try:
        _progress(crawl.mongo, 40)
        fleet.replace(first)
        _progress(crawl.mongo, 90)
        own_redis.kill()
        poll(lambda: any("Redis unavailable" in fleet.log(i) for i in range(3)), 30, "notice")
        own_redis.start()
        _progress(crawl.mongo, 140)
        own_mongo.stop()
        spills = _spills(fleet)
        poll(lambda: _spills(fleet) > spills or not fleet.alive(), 60, "a spill")
        assert fleet.alive(), "the fleet stopped during the outage"
        own_mongo.start()
        _progress(crawl.mongo, 200)
        fleet.replace(second)
        for worker in fleet.alive():
            assert worker.wait(240) == 0, fleet.log(fleet.workers.index(worker))[-4000:]
    finally:
        fleet.stop_all()
    _assert_every_profile_once(crawl.mongo)
    _assert_nothing_left(client)
    # Every hostile entry set aside. One set aside by a worker killed before its ack went out
    # comes back and is set aside again: the list may hold it twice, never lose it.
    records = [json.loads(raw) for raw in client.lrange("profiles:start_urls:invalid", 0, -1)]
    fields = ("entry", "entry_base64", "truncated_from", "reason")
    distinct = {tuple(record.get(name) for name in fields) for record in records}
    assert len(distinct) == len(HOSTILE), records


def _assert_every_profile_once(mongo: Mongo) -> None:
    stored = [doc["unique_id"] for doc in mongo.db.profiles.find({}, {"unique_id": 1})]
    assert len(stored) == len(set(stored)), "a profile was stored twice"
    assert set(stored) == set(USERS), f"missing: {sorted(set(USERS) - set(stored))[:20]}"


def _assert_nothing_left(client: redis.Redis) -> None:
    for key in FRONTIER_KEYS:
        assert not client.exists(key), f"{key} still holds work"
    dead = client.lrange("{profiles}:dead", 0, 5)
    assert client.llen("{profiles}:dead") == 0, dead
