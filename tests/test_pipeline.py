"""The MongoDB pipeline batches, validates, and loses nothing when MongoDB goes away."""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pymongo
import pytest
import redis
from scrapy.exceptions import DropItem
from scrapy.utils.test import get_crawler

from crawler.items import ProfileItem, VideoItem
from crawler.pipelines import MongoPipeline, ValidationPipeline
from crawler.pipelines.mongo import MongoSettings
from crawler.services import ServerProcess, free_port, start_mongo
from sandbox.data import build_dataset
from tests.harness import Crawl, Mongo, Sandbox, poll


def _video(video_id: str, likes: int = 1, **changes: Any) -> VideoItem:
    item = VideoItem(video_id, "d", 1, "a", "author", likes, 2, 3, 4, 5, 2)
    return replace(item, **changes)


def _settings(mongo_uri: str, database: str, spill: Path, **changes: Any) -> MongoSettings:
    base = MongoSettings(
        uri=mongo_uri,
        database=database,
        timeout_ms=2000,
        batch_size=500,
        flush_interval=30.0,
        max_pending=5000,
        retry_times=0,
        spill_dir=spill,
    )
    return replace(base, **changes)


def _pipeline(config: MongoSettings) -> tuple[MongoPipeline, Any]:
    stats = get_crawler().stats
    return MongoPipeline(config, stats, "videos-test"), stats


def test_a_full_batch_is_written_at_once(mongo: Mongo, tmp_path: Path) -> None:
    async def scenario() -> float:
        pipeline, stats = _pipeline(_settings(mongo.uri, mongo.database, tmp_path, batch_size=3))
        await pipeline.open_spider()
        started = time.monotonic()
        await asyncio.gather(*(pipeline.process_item(_video(str(n))) for n in range(3)))
        elapsed = time.monotonic() - started
        assert stats.get_value("mongo/batches") == 1
        await pipeline.close_spider()
        return elapsed

    assert asyncio.run(scenario()) < 5, "a full batch waited for the flush interval"
    assert mongo.db.videos.count_documents({}) == 3


def test_a_partial_batch_is_written_after_the_interval(mongo: Mongo, tmp_path: Path) -> None:
    async def scenario() -> float:
        config = _settings(mongo.uri, mongo.database, tmp_path, flush_interval=0.6)
        pipeline, _ = _pipeline(config)
        await pipeline.open_spider()
        started = time.monotonic()
        await pipeline.process_item(_video("only"))
        elapsed = time.monotonic() - started
        await pipeline.close_spider()
        return elapsed

    elapsed = asyncio.run(scenario())
    assert 0.5 <= elapsed < 5
    assert mongo.db.videos.count_documents({"video_id": "only"}) == 1


def test_close_writes_what_is_buffered(mongo: Mongo, tmp_path: Path) -> None:
    async def scenario() -> None:
        pipeline, _ = _pipeline(_settings(mongo.uri, mongo.database, tmp_path))
        await pipeline.open_spider()
        waiting = [asyncio.ensure_future(pipeline.process_item(_video(str(n)))) for n in range(7)]
        await asyncio.sleep(0)  # let them reach the buffer
        await pipeline.close_spider()
        await asyncio.gather(*waiting)

    asyncio.run(scenario())
    assert mongo.db.videos.count_documents({}) == 7


def test_duplicates_in_one_batch_and_recrawls_update(mongo: Mongo, tmp_path: Path) -> None:
    async def scenario() -> None:
        config = _settings(mongo.uri, mongo.database, tmp_path, batch_size=4, flush_interval=0.3)
        pipeline, _ = _pipeline(config)
        await pipeline.open_spider()
        await asyncio.gather(*(pipeline.process_item(_video("same", likes=n)) for n in range(4)))
        await pipeline.process_item(_video("same", likes=99))
        await pipeline.close_spider()

    asyncio.run(scenario())
    (doc,) = list(mongo.db.videos.find({"video_id": "same"}))
    assert doc["digg_count"] == 99
    assert doc["first_seen"] < doc["last_seen"]


@pytest.mark.parametrize(
    ("item", "reason"),
    [
        (_video("x", author_id=None), "missing_author_id"),
        (_video(""), "missing_video_id"),
        (ProfileItem(unique_id="u", status=None), "missing_status"),  # type: ignore[arg-type]
    ],
)
def test_invalid_items_are_dropped_with_reasons(item: Any, reason: str) -> None:
    stats = get_crawler().stats
    with pytest.raises(DropItem, match=reason.removeprefix("missing_")):
        ValidationPipeline(stats).process_item(item)
    assert stats.get_value(f"validation/dropped/{reason}") == 1


def test_valid_items_pass_validation() -> None:
    item = ProfileItem(unique_id="u", status="not_found")
    assert ValidationPipeline(get_crawler().stats).process_item(item) is item


@dataclass
class OwnMongo:
    """A private MongoDB-wire server a test can stop and start again on the same port."""

    port: int
    data: Path
    server: ServerProcess | None

    @property
    def uri(self) -> str:
        return f"mongodb://127.0.0.1:{self.port}"

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop()
            self.server = None

    def start(self) -> None:
        self.server = start_mongo(self.port, self.data)


@pytest.fixture
def own_mongo(tmp_path: Path) -> Iterator[OwnMongo]:
    port, data = free_port(), tmp_path / "mongo-data"
    holder = OwnMongo(port, data, start_mongo(port, data))
    yield holder
    holder.stop()


def _count(uri: str, collection: str) -> int:
    client: pymongo.MongoClient[dict[str, Any]] = pymongo.MongoClient(uri)
    try:
        return client["crawler"][collection].count_documents({})
    finally:
        client.close()


def test_spilled_batches_are_replayed_when_mongodb_returns(
    own_mongo: OwnMongo, tmp_path: Path
) -> None:
    spill = tmp_path / "spill"

    async def scenario() -> Any:
        config = _settings(
            own_mongo.uri, "crawler", spill, batch_size=5, flush_interval=0.4, timeout_ms=300
        )
        pipeline, stats = _pipeline(config)
        await pipeline.open_spider()
        own_mongo.stop()
        await asyncio.gather(*(pipeline.process_item(_video(str(n))) for n in range(10)))
        assert stats.get_value("mongo/spilled") == 10
        lines = [line for path in spill.glob("*.jsonl") for line in path.read_text().splitlines()]
        assert len(lines) == 10
        own_mongo.start()
        while not stats.get_value("mongo/replayed"):
            await asyncio.sleep(0.1)
        await pipeline.close_spider()
        return stats

    stats = asyncio.run(asyncio.wait_for(scenario(), 60))
    assert stats.get_value("mongo/replayed") == 10
    assert _count(own_mongo.uri, "videos") == 10
    assert not list(spill.glob("*.jsonl")), "the spill file outlived its replay"


def test_spill_left_by_a_dead_worker_is_replayed_at_start(
    own_mongo: OwnMongo, tmp_path: Path
) -> None:
    spill = tmp_path / "spill"
    spill.mkdir()
    record = {
        "collection": "videos",
        "filter": {"video_id": "left"},
        "update": {"$set": {"video_id": "left", "digg_count": 3}},
    }
    (spill / "videos-test-99999999.jsonl").write_text(json.dumps(record) + "\n")

    async def scenario() -> None:
        pipeline, _ = _pipeline(_settings(own_mongo.uri, "crawler", spill))
        await pipeline.open_spider()
        await pipeline.close_spider()

    asyncio.run(scenario())
    assert _count(own_mongo.uri, "videos") == 1
    assert not list(spill.glob("*.jsonl"))


def test_mongodb_stopped_mid_crawl_loses_nothing(
    crawl: Crawl,
    redis_client: redis.Redis,
    sandbox: Sandbox,
    own_mongo: OwnMongo,
    tmp_path: Path,
) -> None:
    crawl.mongo = replace(crawl.mongo, uri=own_mongo.uri, database="crawler")
    users = [author.unique_id for author in build_dataset().authors]
    sandbox.admin("config", {"latency_ms": 40})
    redis_client.lpush("profiles:start_urls", *(json.dumps({"unique_id": u}) for u in users))
    log = tmp_path / "worker.log"
    settings = {
        "MONGO_SPILL_DIR": tmp_path / "spill",
        "MONGO_CONNECT_TIMEOUT_MS": 500,
        "MONGO_RETRY_TIMES": 1,
        "MONGO_FLUSH_INTERVAL": 0.3,
        "MONGO_BATCH_SIZE": 10,
        "CONCURRENT_REQUESTS": 4,
    }
    with open(log, "wb") as out:
        worker = subprocess.Popen(
            crawl.command("profiles", settings=settings),
            cwd=crawl.root,
            env=crawl.env(),
            stdout=out,
            stderr=out,
        )
    try:
        poll(lambda: _count(own_mongo.uri, "profiles") >= 30, 30, "progress")
        own_mongo.stop()
        poll(lambda: "spilling" in log.read_text(), 30, "the spill")
        own_mongo.start()
        assert worker.wait(180) == 0, log.read_text()[-3000:]
    finally:
        if worker.poll() is None:
            worker.kill()
    client: pymongo.MongoClient[dict[str, Any]] = pymongo.MongoClient(own_mongo.uri)
    stored = [doc["unique_id"] for doc in client["crawler"]["profiles"].find()]
    client.close()
    assert sorted(stored) == sorted(users)
    assert "Replayed" in log.read_text()
