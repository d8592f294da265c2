"""The MongoDB pipeline batches, validates, and loses nothing when MongoDB goes away."""

from __future__ import annotations

import asyncio
import json
import signal
import time
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, ClassVar

import bson
import hypothesis
import pymongo
import pytest
import redis
from bson import SON, CodecOptions, json_util
from hypothesis import HealthCheck, example, given
from hypothesis import strategies as st
from itemadapter import ItemAdapter
from scrapy.exceptions import CloseSpider, DropItem
from scrapy.utils.test import get_crawler

import crawler.settings as project
from crawler.config.rules import SettingsError
from crawler.config.values import Destination
from crawler.frontier.codec import expand
from crawler.items import PageItem, ProfileItem, VideoItem
from crawler.pipelines import ITEMS_NOT_STORED, ItemNotStored, MongoPipeline, ValidationPipeline
from crawler.storage.changes import with_change_hash
from crawler.storage.destinations import Destinations, document_of
from crawler.storage.mongo import MongoSettings
from crawler.storage.spill import read_line
from devtools.services import ServerProcess, free_port, mongo_command, start_server
from sandbox.seed import build_dataset
from tests.harness import MONGO_PAUSE, Crawl, Mongo, Restartable, Sandbox, poll
from tests.mongo_config import pipeline_settings as _settings


def _video(video_id: str, likes: int = 1, **changes: Any) -> VideoItem:
    item = VideoItem(video_id, "d", 1, "a", "author", likes, 2, 3, 4, 5, 2)
    return replace(item, **changes)


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


def test_the_flush_loop_outlives_an_error(mongo: Mongo, tmp_path: Path) -> None:
    """An error in the loop that writes old batches is logged and counted; the loop goes on,
    so items waiting in a partial batch are still stored (none waits forever)."""

    async def scenario() -> Any:
        pipeline, stats = _pipeline(_settings(mongo.uri, mongo.database, tmp_path, batch_size=50))
        await pipeline.open_spider()
        spill = pipeline.writer.spill
        assert spill is not None
        calls = {"n": 0}
        pending = spill.pending

        def failing_once() -> bool:
            calls["n"] += 1
            if calls["n"] == 1:
                raise OSError("spill directory gone")
            return pending()

        spill.pending = failing_once  # type: ignore[method-assign]
        items = (pipeline.process_item(_video(str(n))) for n in range(3))
        await asyncio.wait_for(asyncio.gather(*items), 10)
        await pipeline.close_spider()
        return stats

    stats = asyncio.run(scenario())
    assert stats.get_value("mongo/flush_loop_errors") == 1
    assert mongo.db.videos.count_documents({}) == 3


def test_a_partial_batch_is_written_once_no_item_joins_it(mongo: Mongo, tmp_path: Path) -> None:
    """A crawl that pauses or ends has its last items stored at once, not after the interval."""

    async def scenario() -> float:
        config = _settings(mongo.uri, mongo.database, tmp_path, flush_interval=30.0)
        pipeline, _ = _pipeline(config)
        await pipeline.open_spider()
        started = time.monotonic()
        await pipeline.process_item(_video("only"))
        elapsed = time.monotonic() - started
        await pipeline.close_spider()
        return elapsed

    assert asyncio.run(scenario()) < 5, "a lone item waited for the flush interval"
    assert mongo.db.videos.count_documents({"video_id": "only"}) == 1


def test_items_that_keep_coming_are_written_in_batches(mongo: Mongo, tmp_path: Path) -> None:
    """Items arriving every 10 ms for a second go in batches of up to MONGO_FLUSH_INTERVAL's
    worth (0.3 s here), not one write each."""

    async def scenario() -> Any:
        config = _settings(mongo.uri, mongo.database, tmp_path, flush_interval=0.3)
        pipeline, stats = _pipeline(config)
        await pipeline.open_spider()
        stored = []
        for n in range(100):
            stored.append(asyncio.ensure_future(pipeline.process_item(_video(str(n)))))
            await asyncio.sleep(0.01)
        await asyncio.gather(*stored)
        await pipeline.close_spider()
        return stats

    stats = asyncio.run(scenario())
    assert mongo.db.videos.count_documents({}) == 100
    assert stats.get_value("mongo/batches") <= 25, stats.get_value("mongo/batches")


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
        (VideoItem(video_id=None, author_id="a"), "missing_video_id"),  # type: ignore[arg-type]
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


def _count(uri: str, collection: str) -> int:
    client: pymongo.MongoClient[dict[str, Any]] = pymongo.MongoClient(uri)
    try:
        return client["crawler"][collection].count_documents({})
    finally:
        client.close()


def _lines(path: Path) -> list[bytes]:
    """The record lines of a spill file (or of its ``.refused``), its header left out."""
    return [line for line in path.read_bytes().splitlines() if not line.startswith(b"#")]


async def _replayed_and_closed(pipeline: MongoPipeline, stats: Any) -> Any:
    """Once the spill file was replayed into MongoDB, the pipeline closed; its stats."""
    while not stats.get_value("mongo/replayed"):
        await asyncio.sleep(0.1)
    await pipeline.close_spider()
    return stats


def test_spilled_batches_are_replayed_when_mongodb_returns(
    own_mongo: Restartable, tmp_path: Path
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
        spilled = [read_line(line) for path in spill.glob("*.jsonl") for line in _lines(path)]
        assert len(spilled) == 10
        own_mongo.start()
        return await _replayed_and_closed(pipeline, stats)

    stats = asyncio.run(asyncio.wait_for(scenario(), 60))
    assert stats.get_value("mongo/replayed") == 10
    assert _count(own_mongo.uri, "videos") == 10
    assert not list(spill.glob("*.jsonl")), "the spill file outlived its replay"


def test_a_hung_mongodb_spills_the_batch_instead_of_holding_it(
    own_mongo: Restartable, tmp_path: Path
) -> None:
    """MongoDB stopped (SIGSTOP: its connections stay open, nothing answers) mid-crawl: the
    items are spilled once the answer timeout passes, instead of waiting forever (and holding
    their pages' leases with them), and are stored once it runs again."""
    spill = tmp_path / "spill"
    assert own_mongo.server is not None
    server = own_mongo.server.process

    async def scenario() -> Any:
        config = _settings(
            own_mongo.uri, "crawler", spill, batch_size=5, flush_interval=0.2, timeout_ms=300,
            answer_timeout_ms=500,
        )  # fmt: skip
        pipeline, stats = _pipeline(config)
        await pipeline.open_spider()
        await asyncio.gather(*(pipeline.process_item(_video(f"before-{n}")) for n in range(5)))
        server.send_signal(signal.SIGSTOP)
        try:
            items = (pipeline.process_item(_video(str(n))) for n in range(10))
            await asyncio.wait_for(asyncio.gather(*items), 20)
            assert stats.get_value("mongo/spilled") == 10
        finally:
            server.send_signal(signal.SIGCONT)
        return await _replayed_and_closed(pipeline, stats)

    stats = asyncio.run(asyncio.wait_for(scenario(), 60))
    assert stats.get_value("mongo/replayed") == 10
    assert _count(own_mongo.uri, "videos") == 15


def test_spill_left_by_a_dead_worker_is_replayed_at_start(
    own_mongo: Restartable, tmp_path: Path
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


SPILLED_AT = datetime(2026, 1, 1, tzinfo=UTC)


def _spilled(videos: list[str], fields: dict[str, Any]) -> list[dict[str, Any]]:
    """Spill records of ``videos`` as a worker writes them, setting ``fields``."""
    update = {"$set": {**fields, "last_seen": SPILLED_AT}}
    return [
        {"collection": "videos", "filter": {"video_id": v}, "update": update, "at": SPILLED_AT}
        for v in videos
    ]


def _replay_left(uri: str, spill: Path, records: list[dict[str, Any]]) -> tuple[Path, Any]:
    """A dead worker's spill file of ``records``, replayed by a pipeline that opens and
    closes: the file, and the pipeline's stats."""
    spill.mkdir()
    left = spill / "videos-test-99999999.jsonl"
    left.write_text("".join(json_util.dumps(record) + "\n" for record in records))

    async def scenario() -> Any:
        pipeline, stats = _pipeline(_settings(uri, "crawler", spill))
        await pipeline.open_spider()
        await pipeline.close_spider()
        return stats

    return left, asyncio.run(scenario())


def test_spilled_upserts_mongodb_refuses_are_kept_aside_not_lost(
    own_mongo: Restartable, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A dead worker's spill file whose replay MongoDB refuses in part (here another unique
    index): the rest is stored, the refused upsert kept in ``<file>.refused`` and named."""
    client: pymongo.MongoClient[dict[str, Any]] = pymongo.MongoClient(own_mongo.uri)
    client["crawler"]["videos"].create_index("sku", unique=True)
    spill = tmp_path / "spill"
    left, stats = _replay_left(own_mongo.uri, spill, _spilled(["first", "second"], {"sku": 7}))
    stored = [doc["video_id"] for doc in client["crawler"]["videos"].find()]
    client.close()
    assert stored == ["first"]
    kept = [read_line(line) for line in _lines(spill / f"{left.name}.refused")]
    assert [(record["filter"], record["update"]["$set"]["sku"]) for record in kept] == [
        ({"video_id": "second"}, 7)
    ]
    assert not left.exists()
    assert stats.get_value("mongo/replayed") == 1
    assert "MongoDB refused 1 spilled upserts" in caplog.text


def test_a_spill_file_is_replayed_only_into_the_database_it_was_for(
    own_mongo: Restartable, tmp_path: Path
) -> None:
    """A dead worker's items for database ``shop_a``: a run storing into ``crawler`` leaves the
    file (and says so); a run storing into ``shop_a`` replays it there."""
    spill = tmp_path / "spill"
    records = [record | {"db": "shop_a"} for record in _spilled(["a1"], {"digg_count": 1})]
    left, _ = _replay_left(own_mongo.uri, spill, records)
    client: pymongo.MongoClient[dict[str, Any]] = pymongo.MongoClient(own_mongo.uri)
    assert client["crawler"]["videos"].count_documents({}) == 0
    assert left.exists()

    async def scenario() -> None:
        pipeline, _ = _pipeline(_settings(own_mongo.uri, "shop_a", spill))
        await pipeline.open_spider()
        await pipeline.close_spider()

    asyncio.run(scenario())
    stored = [doc["video_id"] for doc in client["shop_a"]["videos"].find()]
    client.close()
    assert stored == ["a1"]
    assert not left.exists()


def test_a_spilled_upsert_leaves_a_document_written_since_alone(
    own_mongo: Restartable, tmp_path: Path
) -> None:
    """A worker spilled v1 of an item, MongoDB came back and another worker stored v2, then the
    spill file is replayed: v2 stays (v1 is stale), and a spilled item never stored is."""
    newer = {"video_id": "k", "digg_count": 2, "last_seen": SPILLED_AT + timedelta(minutes=5)}
    client: pymongo.MongoClient[dict[str, Any]] = pymongo.MongoClient(own_mongo.uri)
    client["crawler"]["videos"].create_index("video_id", unique=True)
    client["crawler"]["videos"].insert_one(newer)
    spill = tmp_path / "spill"
    left, stats = _replay_left(own_mongo.uri, spill, _spilled(["k", "new"], {"digg_count": 1}))
    stored = {doc["video_id"]: doc["digg_count"] for doc in client["crawler"]["videos"].find()}
    client.close()
    assert stored == {"k": 2, "new": 1}
    assert (stats.get_value("mongo/replayed"), stats.get_value("mongo/replay_stale")) == (1, 1)
    assert not left.exists()
    assert not list(spill.glob("*.re*"))  # neither .rejected nor .refused


def test_mongodb_stopped_mid_crawl_loses_nothing(
    crawl: Crawl,
    redis_client: redis.Redis,
    sandbox: Sandbox,
    own_mongo: Restartable,
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
    with crawl.background("profiles", settings=settings, log=log) as worker:
        poll(lambda: _count(own_mongo.uri, "profiles") >= 30, 30, "progress", MONGO_PAUSE)
        # Slow pages while MongoDB goes away, so the crawl cannot end before it is gone.
        sandbox.admin("config", {"latency_ms": 400})
        own_mongo.stop()
        poll(lambda: "spilling" in log.read_text(), 30, "the spill")
        sandbox.admin("config", {"latency_ms": 0})
        own_mongo.start()
        assert worker.wait(180) == 0, log.read_text()[-3000:]
    client: pymongo.MongoClient[dict[str, Any]] = pymongo.MongoClient(own_mongo.uri)
    stored = [doc["unique_id"] for doc in client["crawler"]["profiles"].find()]
    client.close()
    assert sorted(stored) == sorted(users)
    assert "Replayed" in log.read_text()


# --- items MongoDB cannot store --------------------------------------------------------------


def _stored(pipeline: MongoPipeline, *items: Any) -> list[BaseException | None]:
    """Run the items through the pipeline at once (it writes a batch 0.1 s after its first
    item); each one's exception, or None if stored."""

    async def scenario() -> list[BaseException | None]:
        await pipeline.open_spider()
        outcomes = await asyncio.gather(
            *(pipeline.process_item(item) for item in items), return_exceptions=True
        )
        await pipeline.close_spider()
        return [outcome if isinstance(outcome, BaseException) else None for outcome in outcomes]

    return asyncio.run(asyncio.wait_for(scenario(), 60))


def test_a_17_mb_bio_is_stored_trimmed_and_says_so(mongo: Mongo, tmp_path: Path) -> None:
    bio = "ab" * (17 * 1024 * 1024 // 2)
    pipeline, stats = _pipeline(_settings(mongo.uri, mongo.database, tmp_path, flush_interval=0.1))
    item = ProfileItem(unique_id="big", status="ok", nickname="Big", signature=bio)
    assert _stored(pipeline, item) == [None]
    doc = mongo.db.profiles.find_one({"unique_id": "big"})
    assert doc is not None, "the item was acknowledged but not stored"
    assert doc["_truncated"] == {"signature": len(bio)}
    assert bio.startswith(doc["signature"])
    assert len(doc["signature"]) > 15_000_000
    assert doc["nickname"] == "Big"
    assert len(bson.encode(doc)) <= 16 * 1024 * 1024
    assert stats.get_value("mongo/truncated") == 1

    # Stored again whole, it loses the mark.
    pipeline, _ = _pipeline(_settings(mongo.uri, mongo.database, tmp_path, flush_interval=0.1))
    assert _stored(pipeline, ProfileItem(unique_id="big", status="ok", signature="short")) == [None]
    doc = mongo.db.profiles.find_one({"unique_id": "big"})
    assert doc is not None
    assert doc["signature"] == "short"
    assert "_truncated" not in doc


def test_an_item_too_large_even_trimmed_fails_alone(mongo: Mongo, tmp_path: Path) -> None:
    config = _settings(
        mongo.uri, mongo.database, tmp_path, max_document_bytes=1024, flush_interval=0.1
    )
    pipeline, stats = _pipeline(config)
    huge_key, fine = _video("k" * 2000), _video("fine", description="d" * 5000)
    outcomes = _stored(pipeline, huge_key, fine)
    assert isinstance(outcomes[0], ItemNotStored)
    assert "MONGO_MAX_DOCUMENT_BYTES" in str(outcomes[0])
    assert outcomes[1] is None
    (doc,) = list(mongo.db.videos.find())
    assert doc["video_id"] == "fine"
    assert doc["_truncated"] == {"description": 5000}
    assert stats.get_value("mongo/write_errors") == 1


def test_a_document_mongodb_refuses_fails_its_item_only(mongo: Mongo, tmp_path: Path) -> None:
    mongo.db.create_collection("videos", validator={"digg_count": {"$gte": 0}})
    pipeline, stats = _pipeline(_settings(mongo.uri, mongo.database, tmp_path, flush_interval=0.1))
    outcomes = _stored(pipeline, _video("good"), _video("bad", likes=-1), _video("also-good"))
    assert outcomes[0] is None
    assert outcomes[2] is None
    assert isinstance(outcomes[1], ItemNotStored)
    assert "121" in str(outcomes[1])  # DocumentValidationFailure
    assert sorted(doc["video_id"] for doc in mongo.db.videos.find()) == ["also-good", "good"]
    assert stats.get_value("mongo/write_errors") == 1
    assert stats.get_value("mongo/items") == 2


def test_an_unstorable_item_dead_letters_its_request(
    crawl: Crawl, redis_client: redis.Redis, sandbox: Sandbox
) -> None:
    users = [author.unique_id for author in build_dataset().authors[:6]]
    refused = users[2]
    crawl.mongo.db.create_collection("profiles", validator={"unique_id": {"$ne": refused}})
    result = crawl("profiles", "-a", f"users={','.join(users)}")
    assert result.returncode == 0, result.stderr[-3000:]
    stored = {doc["unique_id"] for doc in crawl.mongo.db.profiles.find()}
    assert stored == set(users) - {refused}
    letters = [json.loads(raw) for raw in redis_client.lrange("{profiles}:dead", 0, -1)]
    assert [letter["failure"]["reason"] for letter in letters] == ["item_error:ItemNotStored"]
    assert "failed validation" in letters[0]["failure"]["error"]
    assert expand(letters[0]["request"])["url"].endswith(f"/@{refused}")
    assert redis_client.zcard("{profiles}:leases") == 0


# --- durability --------------------------------------------------------------------------------


def _kill(server: ServerProcess) -> None:
    server.process.send_signal(signal.SIGKILL)
    server.process.wait(10)


def test_acknowledged_items_survive_a_killed_mongodb(tmp_path: Path) -> None:
    """Even a MongoDB that does not sync every commit keeps what the pipeline was told is
    stored: the pipeline asks for journaled writes (MONGO_WRITE_CONCERN)."""
    port, data = free_port(), tmp_path / "mongo"
    command = [arg for arg in mongo_command(port, data) if arg != "--sync-on-commit"]
    server = start_server("mongodb", command, port)
    uri = f"mongodb://127.0.0.1:{port}"
    try:
        pipeline, _ = _pipeline(
            _settings(uri, "crawler", tmp_path / "spill", batch_size=40, flush_interval=0.1)
        )
        assert _stored(pipeline, *(_video(str(n)) for n in range(200))) == [None] * 200
        _kill(server)
        server = start_server("mongodb", command, port)
        assert _count(uri, "videos") == 200
    finally:
        server.stop()


def test_a_live_mongodb_dropping_a_batchs_connections_gets_its_retries_not_a_spill(
    tmp_path: Path,
) -> None:
    """A server that answers but closes the connection of a batch's first two writes (a
    failCommand failpoint): the batch is tried again and stored, nothing spilled. Spilling at
    the first failed attempt is for a MongoDB none of whose servers answers."""
    port, data = free_port(), tmp_path / "mongo"
    server = start_server("mongodb", [*mongo_command(port, data), "--enable-test-commands"], port)
    uri = f"mongodb://127.0.0.1:{port}"
    try:
        client: pymongo.MongoClient[dict[str, Any]] = pymongo.MongoClient(uri)
        failing = {"failCommands": ["insert", "update"], "closeConnection": True}
        client.admin.command("configureFailPoint", "failCommand", mode={"times": 2}, data=failing)
        client.close()
        spill = tmp_path / "spill"
        config = _settings(uri, "crawler", spill, batch_size=10, flush_interval=0.1, retry_times=3)
        pipeline, stats = _pipeline(config)
        assert _stored(pipeline, *(_video(str(n)) for n in range(10))) == [None] * 10
        assert _count(uri, "videos") == 10
        assert stats.get_value("mongo/retries") >= 1  # pymongo retries a write once itself
        assert not [path for path in spill.iterdir() if path.stat().st_size]
    finally:
        server.stop()


def test_the_local_mongodb_keeps_what_it_acknowledged(own_mongo: Restartable) -> None:
    client: pymongo.MongoClient[dict[str, Any]] = pymongo.MongoClient(own_mongo.uri)
    for first in range(0, 200, 40):
        client.crawler.videos.insert_many([{"n": n} for n in range(first, first + 40)])
    client.close()
    assert own_mongo.server is not None
    _kill(own_mongo.server)
    own_mongo.start()
    assert _count(own_mongo.uri, "videos") == 200


def _from_project(**changes: Any) -> MongoSettings:
    defaults = {name: getattr(project, name) for name in dir(project) if name.isupper()}
    return MongoSettings.from_crawler(get_crawler(settings_dict={**defaults, **changes}))


@pytest.mark.parametrize(
    "concern", [{"w": 0}, {"w": 1, "j": "yes"}, {"journal": True}, "not a dict"]
)
def test_a_write_concern_that_confirms_nothing_is_refused(concern: Any) -> None:
    with pytest.raises(SettingsError, match="MONGO_WRITE_CONCERN"):
        _from_project(MONGO_WRITE_CONCERN=concern)


def test_writes_are_journaled_by_default() -> None:
    config = _from_project()
    assert config.write_concern.document == {"w": 1, "j": True}
    assert config.max_document_bytes == 16_000_000
    custom = _from_project(MONGO_WRITE_CONCERN='{"w": "majority", "wtimeout": 5000}')
    assert custom.write_concern.document == {"w": "majority", "wtimeout": 5000}


# --- items nothing declares a destination for --------------------------------------------------


def test_undeclared_items_go_to_the_spiders_collection(
    mongo: Mongo, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    def crawl_once() -> list[BaseException | None]:
        config = _settings(mongo.uri, mongo.database, tmp_path, flush_interval=0.1)
        pipeline, _ = _pipeline(config)
        pages = [{"url": f"https://example.org/{n}", "title": f"page {n}"} for n in range(3)]
        return _stored(pipeline, *pages, {"title": "no url"}, {"url": "", "title": "empty url"})

    with caplog.at_level("INFO", logger="crawler.storage.destinations"):
        assert crawl_once() == [None] * 5
    said = [r.getMessage() for r in caplog.records if r.name == "crawler.storage.destinations"]
    assert said == [
        "Storing dict items of spider 'videos-test' in MongoDB collection 'videos-test', "
        "upserted on url (inserted when they have none); MONGO_COLLECTIONS sets another"
    ]
    assert crawl_once() == [None] * 5
    pages = mongo.db["videos-test"]
    # Pages with a url are upserted (one document each), the others inserted every time.
    assert pages.count_documents({"url": {"$regex": "^https"}}) == 3
    assert pages.count_documents({"title": "no url"}) == 2
    assert pages.count_documents({"title": "empty url"}) == 2
    (index,) = [i for i in pages.index_information().values() if i["key"] == [("url", 1)]]
    assert index["unique"]
    assert index["partialFilterExpression"] == {"url": {"$gt": ""}}
    page = pages.find_one({"url": "https://example.org/0"})
    assert page is not None
    assert page["first_seen"] < page["last_seen"]
    assert page["change_count"] == 0


@dataclass
class _Listing:
    kind: ClassVar[str] = "listing"
    url: str
    video: VideoItem
    tags: list[Any] = field(default_factory=list)
    note: str | None = None


@dataclass
class _DictListing(_Listing, dict[str, Any]):  # ItemAdapter reads it as a dict
    def __post_init__(self) -> None:
        self["url"] = self.url


def test_a_dataclass_is_read_into_its_document_as_itemadapter_reads_it() -> None:
    listing = _Listing("https://a.test/", _video("v"), [_video("w"), {"n": (1, 2)}], note="x")
    unset = _Listing("https://b.test/", _video("v"))
    del unset.tags  # a field the item does not have is left out
    mapping = _DictListing("https://c.test/", _video("v"))
    for item in (listing, unset, mapping, _video("v")):
        document = document_of(item)
        assert document == ItemAdapter(item).asdict()
        assert list(document) == list(ItemAdapter(item).asdict())
    assert "kind" not in document_of(listing)
    assert "tags" not in document_of(unset)
    assert document_of(mapping) == {"url": "https://c.test/"}


def test_mongo_collections_still_says_where_dicts_go(mongo: Mongo, tmp_path: Path) -> None:
    config = _settings(mongo.uri, mongo.database, tmp_path, flush_interval=0.1)
    destinations = Destinations({"dict": Destination("pages", "url")}, "videos-test")
    pipeline = MongoPipeline(config, get_crawler().stats, "videos-test", destinations)
    assert _stored(pipeline, {"url": "https://example.org/", "title": "home"}) == [None]
    assert mongo.db.pages.count_documents({}) == 1
    assert "videos-test" not in mongo.db.list_collection_names()


def test_an_idle_crawl_that_stored_nothing_closes_as_items_not_stored(
    mongo: Mongo, tmp_path: Path
) -> None:
    mongo.db.create_collection("videos", validator={"digg_count": {"$gte": 0}})
    pipeline, _ = _pipeline(_settings(mongo.uri, mongo.database, tmp_path, flush_interval=0.1))
    refused = [_video(str(n), likes=-1) for n in range(3)]
    assert all(isinstance(outcome, ItemNotStored) for outcome in _stored(pipeline, *refused))
    with pytest.raises(CloseSpider) as closing:
        pipeline.spider_idle()
    assert closing.value.reason == ITEMS_NOT_STORED
    # One stored item is enough for the crawl to finish as usual.
    pipeline, _ = _pipeline(_settings(mongo.uri, mongo.database, tmp_path, flush_interval=0.1))
    assert _stored(pipeline, *refused, _video("fine"))[-1] is None
    pipeline.spider_idle()


# --- change tracking: the plain form for unchanged documents, the pipeline form for changes ----


def _visit(mongo: Mongo, tmp_path: Path, *pages: dict[str, Any]) -> Any:
    """Store ``pages`` (dicts, in collection "pages" keyed on url) as one crawl would."""
    config = _settings(mongo.uri, mongo.database, tmp_path, flush_interval=0.1)
    destinations = Destinations({"dict": Destination("pages", "url")}, "videos-test")
    stats = get_crawler().stats
    pipeline = MongoPipeline(config, stats, "videos-test", destinations)
    assert _stored(pipeline, *pages) == [None] * len(pages)
    return stats


def _page(mongo: Mongo, url: str) -> dict[str, Any]:
    found: dict[str, Any] | None = mongo.db.pages.find_one({"url": url}, {"_id": 0})
    assert found is not None
    return found


def test_history_is_kept_whichever_form_writes_it(mongo: Mongo, tmp_path: Path) -> None:
    mongo.db.pages.insert_one({"url": "old", "price": 1})  # stored before hashes were kept
    stats = _visit(mongo, tmp_path, {"url": "new", "price": 5, "name": "$p", "fetched_at": 1})
    first = _page(mongo, "new")
    assert first["name"] == "$p"  # values are stored as given, never read as expressions
    assert first["first_seen"] == first["last_changed"] == first["last_seen"]
    assert first["change_count"] == 0
    assert not stats.get_value("mongo/changed_writes")

    # The same content (a volatile field aside): the plain form matches it, nothing counted.
    stats = _visit(
        mongo,
        tmp_path,
        {"url": "new", "price": 5, "name": "$p", "fetched_at": 2},
        {"url": "old", "price": 1},
    )
    same, old = _page(mongo, "new"), _page(mongo, "old")
    assert same["fetched_at"] == 2
    assert same["change_count"] == 0
    assert same["first_seen"] == same["last_changed"] == first["first_seen"]
    assert same["last_seen"] > first["last_seen"]
    # The old document gets its first hash and history without counting a change.
    assert old["change_count"] == 0
    assert old["first_seen"] == old["last_changed"] == old["last_seen"]
    assert "change_hash" in old
    assert stats.get_value("mongo/changed_writes") == 1  # the old one, written again

    stats = _visit(mongo, tmp_path, {"url": "new", "price": 6, "name": "$p", "fetched_at": 3})
    changed = _page(mongo, "new")
    assert changed["change_count"] == 1
    assert changed["first_seen"] == first["first_seen"]
    assert changed["last_changed"] == changed["last_seen"] > same["last_seen"]
    assert changed["price"] == 6
    assert stats.get_value("mongo/changed_writes") == 1
    assert stats.get_value("mongo/items") == 1
    assert mongo.db.pages.count_documents({}) == 2


def test_without_a_unique_index_every_write_is_the_pipeline_form(
    mongo: Mongo, tmp_path: Path
) -> None:
    """The plain form would insert a second document where the hash differs: a collection whose
    key has no unique index (here one that cannot be made) only gets the pipeline form."""
    pages = mongo.db["videos-test"]  # the spider's own collection
    pages.create_index("url")
    stats = []
    for price in (1, 2):
        pipeline, counted = _pipeline(
            _settings(mongo.uri, mongo.database, tmp_path, flush_interval=0.1)
        )
        assert _stored(pipeline, {"url": "https://a.test/", "price": price}) == [None]
        stats.append(counted)
    assert pages.count_documents({}) == 1
    stored = pages.find_one({})
    assert stored is not None
    assert stored["change_count"] == 1
    assert not stats[1].get_value("mongo/changed_writes")


class Page(dict[str, Any]):
    volatile_fields = ("seen_by",)


_PAGE = st.fixed_dictionaries(
    {
        "price": st.integers(0, 1),
        "fetched_at": st.integers(0, 3),  # volatile
        "seen_by": st.sampled_from(["x", "y"]),  # volatile for this item class
        # Bytes and the string of their hex digits, the same digest.
        "raw": st.sampled_from([b"\xab", "ab"]),
        "sizes": st.sampled_from([[1, 2], [1.0, 2], (1, 2)]),
    },
    optional={
        "first_seen": st.integers(0, 3),  # an item's own field named like the history's
        # The same keys in another order, the same digest.
        "meta": st.sampled_from([{"a": 1, "b": [2]}, {"b": [2], "a": 1}]),
    },
)


_FLIPPED = {"price": 0, "fetched_at": 0, "seen_by": "x", "raw": b"\xab", "sizes": [1, 2]}


@hypothesis.settings(
    max_examples=15,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(visits=st.lists(st.tuples(_PAGE, _PAGE), min_size=1, max_size=4))
# The values whose digest others share, each stored and then come back in its other form.
@example(visits=[(_FLIPPED, {**_FLIPPED, "meta": {"a": 1, "b": [2]}})] * 2)
@example(visits=[(_FLIPPED, _FLIPPED), ({**_FLIPPED, "raw": "ab"}, _FLIPPED)])
@example(
    visits=[
        ({**_FLIPPED, "meta": {"a": 1, "b": [2]}}, _FLIPPED),
        ({**_FLIPPED, "meta": {"b": [2], "a": 1}}, _FLIPPED),
    ]
)
def test_the_plain_form_stores_what_the_pipeline_form_stores(
    mongo: Mongo, tmp_path: Path, visits: list[tuple[dict[str, Any], dict[str, Any]]]
) -> None:
    """Whatever pages come back, with or without changes to their content or volatile fields:
    a collection written in the plain form first (unique key) ends with the documents, and
    change counts, of one written in the pipeline form alone (no unique index)."""
    for name in ("plain", "tracked"):
        mongo.db.drop_collection(name)
    mongo.db.tracked.create_index("url")  # not unique: the pipeline form alone
    for a, b in visits:  # each visit comes back to both pages, changed or not
        pages = [{**a, "url": "a"}, {**b, "url": "b"}]
        for name in ("plain", "tracked"):
            config = _settings(mongo.uri, mongo.database, tmp_path, flush_interval=0.1)
            # "tracked" is the spider's own collection: its index is made (and fails) lazily
            declared = {"Page": Destination(name, "url")} if name == "plain" else {}
            destinations = Destinations(declared, name)
            pipeline = MongoPipeline(config, get_crawler().stats, "videos-test", destinations)
            assert _stored(pipeline, *(Page(page) for page in pages)) == [None] * len(pages)
    assert _history(mongo.db.plain) == _history(mongo.db.tracked)


def _history(collection: Any) -> dict[str, dict[str, Any]]:
    """Each stored document by url (in the order of its fields, nested ones too), its times
    replaced by which of them are equal."""
    found: dict[str, dict[str, Any]] = {}
    ordered = collection.with_options(CodecOptions(document_class=SON))
    for doc in ordered.find({}, {"_id": 0}):
        times = {name: doc.pop(name) for name in ("last_seen", "last_changed")}
        doc["unchanged_since_first"] = times["last_changed"] == doc["first_seen"]
        if not isinstance(doc["first_seen"], int):  # the item's own value is kept as given
            doc.pop("first_seen")
        found[doc["url"]] = doc
    return found


def test_a_hash_stored_before_its_mark_counts_no_change(mongo: Mongo, tmp_path: Path) -> None:
    """A document holding bytes stored with its bare digest (before hashes were marked LOSSY)
    is not matched by the plain form: it is written again in the pipeline form, which
    compares digests alone, so no change is counted, and it gets its marked hash."""
    page = {"url": "u", "raw": b"\xab"}
    digest = with_change_hash(dict(page), ())["change_hash"]
    assert digest.endswith("*")
    now = datetime.now(UTC)
    history = {"first_seen": now, "last_changed": now, "last_seen": now, "change_count": 0}
    mongo.db.pages.create_index("url", unique=True)
    mongo.db.pages.insert_one({**page, **history, "change_hash": digest.removesuffix("*")})
    stats = _visit(mongo, tmp_path, page)
    stored = _page(mongo, "u")
    assert stored["change_count"] == 0
    assert stored["change_hash"] == digest
    assert stats.get_value("mongo/changed_writes") == 1


def test_the_same_content_trimmed_or_whole_is_no_change(mongo: Mongo, tmp_path: Path) -> None:
    """MONGO_MAX_DOCUMENT_BYTES lowered, then raised again: the document is trimmed, then
    whole again (the plain form does not match the trimmed one, whose hash is marked; the
    pipeline form removes its mark), and no change is counted."""
    item = _video("v", description="d" * 5000)
    for limit in (16_000_000, 1024, 16_000_000):
        config = _settings(
            mongo.uri, mongo.database, tmp_path, max_document_bytes=limit, flush_interval=0.1
        )
        pipeline, _ = _pipeline(config)
        assert _stored(pipeline, item) == [None]
        (doc,) = list(mongo.db.videos.find())
        assert ("_truncated" in doc) == (limit == 1024)
        assert doc["change_hash"].endswith("~") == (limit == 1024)
        assert doc["change_count"] == 0
    assert doc["description"] == "d" * 5000


def test_documents_that_mostly_change_are_written_in_the_pipeline_form_alone(
    mongo: Mongo, tmp_path: Path
) -> None:
    """Each changed document costs two writes in the plain form first: once a batch shows most
    documents of a collection changing, the next ones go straight to the pipeline form."""

    async def scenario() -> tuple[list[int], Any]:
        config = _settings(mongo.uri, mongo.database, tmp_path, batch_size=5)
        pipeline, stats = _pipeline(config)
        await pipeline.open_spider()
        rewritten = []
        for likes in range(4):  # new, then changed three times
            videos = [_video(str(n), likes=likes) for n in range(5)]
            await asyncio.gather(*(pipeline.process_item(video) for video in videos))
            rewritten.append(stats.get_value("mongo/changed_writes", 0))
        await pipeline.close_spider()
        return rewritten, stats

    rewritten, stats = asyncio.run(asyncio.wait_for(scenario(), 60))
    assert rewritten == [0, 5, 5, 5]  # only the first changed batch was written twice
    assert stats.get_value("mongo/items") == 20
    assert all(doc["change_count"] == 3 for doc in mongo.db.videos.find())
    assert mongo.db.videos.count_documents({}) == 5


def test_new_documents_are_inserted_and_stored_ones_upserted(mongo: Mongo, tmp_path: Path) -> None:
    """A batch is inserted first while the collection's last batch brought new documents; the
    inserts of stored keys are refused and those documents upserted (``mongo/existing_writes``),
    history kept either way. A batch of stored documents alone stops the inserts, one that
    brings new documents again starts them."""
    batches = [
        [_video(str(n)) for n in range(5)],  # new: inserted
        [_video(str(n)) for n in range(5)],  # stored: inserted first, refused, upserted
        [_video(str(n)) for n in range(5)],  # stored: upserted only
        [_video(str(n)) for n in range(5, 10)],  # new: upserted, the inserts start again
        [_video("8", likes=7), _video("9"), *(_video(str(n)) for n in range(10, 13))],
    ]

    async def scenario() -> tuple[list[int], Any]:
        config = _settings(mongo.uri, mongo.database, tmp_path, batch_size=5)
        pipeline, stats = _pipeline(config)
        await pipeline.open_spider()
        existing = []
        for videos in batches:
            await asyncio.gather(*(pipeline.process_item(video) for video in videos))
            existing.append(stats.get_value("mongo/existing_writes", 0))
        await pipeline.close_spider()
        return existing, stats

    existing, stats = asyncio.run(asyncio.wait_for(scenario(), 60))
    assert existing == [0, 5, 5, 5, 7]
    assert stats.get_value("mongo/changed_writes") == 1
    assert stats.get_value("mongo/items") == 25
    assert stats.get_value("mongo/upserted") == 13
    videos = {doc["video_id"]: doc for doc in mongo.db.videos.find()}
    assert len(videos) == 13
    for key, doc in videos.items():
        assert doc["change_count"] == (1 if key == "8" else 0)
        assert doc["first_seen"] <= doc["last_changed"] <= doc["last_seen"]
        assert (doc["first_seen"] < doc["last_seen"]) == (
            key in {"0", "1", "2", "3", "4", "8", "9"}
        )
        assert (doc["first_seen"] < doc["last_changed"]) == (key == "8")
    assert videos["8"]["digg_count"] == 7


def test_workers_storing_the_same_new_documents_at_once_count_one_change(
    mongo: Mongo, tmp_path: Path
) -> None:
    """Two workers store different content under the same new keys at the same time: one
    insert of each key wins, the other worker's document is upserted over it as a change."""

    async def scenario() -> None:
        workers = [
            _pipeline(_settings(mongo.uri, mongo.database, tmp_path / str(n), batch_size=20))[0]
            for n in range(2)
        ]
        await asyncio.gather(*(worker.open_spider() for worker in workers))
        await asyncio.gather(
            *(
                worker.process_item(_video(str(n), likes=likes))
                for likes, worker in enumerate(workers)
                for n in range(20)
            )
        )
        await asyncio.gather(*(worker.close_spider() for worker in workers))

    asyncio.run(asyncio.wait_for(scenario(), 60))
    videos = list(mongo.db.videos.find())
    assert len(videos) == 20
    assert all(video["change_count"] == 1 for video in videos)
    assert {video["digg_count"] for video in videos} <= {0, 1}


def _page_at(depth: int, title: str = "t") -> PageItem:
    return PageItem(
        "https://a.test/", "a.test", 200, "https://a.test/", depth, 1.0, "h", 1, 0, title=title
    )


def test_a_page_keeps_the_shortest_depth_it_was_stored_at(mongo: Mongo, tmp_path: Path) -> None:
    """A page fetched again by a longer path (a link to a start entry, fetched after it) keeps
    the least depth stored, whichever form writes it and within one batch too."""
    config = _settings(mongo.uri, mongo.database, tmp_path, flush_interval=0.1)

    def depth_after(*pages: PageItem) -> int:
        pipeline = MongoPipeline(config, get_crawler().stats, "links")
        assert _stored(pipeline, *pages) == [None] * len(pages)
        found = mongo.db.pages.find_one({"url": "https://a.test/"})
        assert found is not None
        return int(found["depth"])

    assert depth_after(_page_at(3)) == 3
    assert depth_after(_page_at(0)) == 0  # same content: the plain form
    assert depth_after(_page_at(2, title="changed")) == 0  # changed: the pipeline form
    assert depth_after(_page_at(5), _page_at(4)) == 0
    mongo.db.pages.delete_many({})
    assert depth_after(_page_at(4), _page_at(1), _page_at(2)) == 1  # one batch
    assert mongo.db.pages.count_documents({}) == 1
