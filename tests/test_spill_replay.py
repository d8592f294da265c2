"""Replaying spill files into MongoDB (crawler/storage/bulk.py, spill.py): a file of any size
replays a chunk at a time, in bounded memory, keeping its progress so a worker killed mid-replay
loses nothing and replays little again; and what was spilled is stored as it was."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import tracemalloc
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from bson import json_util
from scrapy.utils.test import get_crawler

from crawler.pipelines import MongoPipeline
from crawler.storage import spill as spill_module
from crawler.storage.bulk import Write
from crawler.storage.changes import with_change_hash
from crawler.storage.mongo import MongoSettings
from crawler.storage.spill import REPLAY_CHUNK_RECORDS, Record, SpillFile
from tests.harness import Mongo, poll
from tests.mongo_config import pipeline_settings

ROOT = Path(__file__).resolve().parent.parent
SPIDER = "links"
SPILLED_AT = datetime(2026, 1, 1, tzinfo=UTC)


def _settings(mongo: Mongo, spill: Path) -> MongoSettings:
    return pipeline_settings(mongo.uri, mongo.database, spill, flush_interval=0.1)


def _opened_and_closed(mongo: Mongo, spill: Path) -> Any:
    """A worker of ``SPIDER`` started and stopped (replaying what it finds); its stats."""

    async def scenario() -> Any:
        stats = get_crawler().stats
        pipeline = MongoPipeline(_settings(mongo, spill), stats, SPIDER)
        await pipeline.open_spider()
        await pipeline.close_spider()
        return stats

    return asyncio.run(asyncio.wait_for(scenario(), 120))


def _page(n: int, database: str, body: str = "") -> Record:
    update = {"$set": {"url": f"https://x/{n}", "n": n, "body": body, "last_seen": SPILLED_AT}}
    return {
        "collection": "pages",
        "filter": {"url": f"https://x/{n}"},
        "update": update,
        "at": SPILLED_AT,
        "db": database,
    }


def _left_by_a_dead_worker(spill: Path, records: list[Record]) -> Path:
    """A spill file of ``records`` as this version writes it, its worker gone."""
    own = SpillFile(spill, SPIDER)
    for first in range(0, len(records), 1000):
        own.append(records[first : first + 1000])
    own.close()  # pending: left for the next start
    return own.path


def test_a_large_orphan_of_stale_records_replays_at_start(mongo: Mongo, tmp_path: Path) -> None:
    """A dead worker's file of 9,000 records (2 KB URLs) whose pages were stored again since:
    the staleness of all of them was asked in one query over 16 MiB, and no worker started."""
    spill = tmp_path / "spill"
    spill.mkdir()
    pages = mongo.db["pages"]
    pages.create_index("url", unique=True)
    url = "https://example.com/{:08d}?q=" + "x" * 1900
    later = SPILLED_AT + timedelta(hours=1)
    for first in range(0, 9000, 3000):
        pages.insert_many(
            [{"url": url.format(n), "last_seen": later} for n in range(first, first + 3000)]
        )
    left = spill / f"{SPIDER}-999999-0123abcd.jsonl"
    with left.open("w") as out:  # as the previous version wrote it: extended JSON
        for n in range(9000):
            update = {"$set": {"digg_count": 1, "last_seen": SPILLED_AT}}
            record = {"collection": "pages", "filter": {"url": url.format(n)}, "update": update}
            out.write(json_util.dumps(record | {"at": SPILLED_AT, "db": mongo.database}) + "\n")

    stats = _opened_and_closed(mongo, spill)

    assert stats.get_value("mongo/replay_stale") == 9000
    assert not left.exists()
    assert pages.count_documents({"digg_count": {"$exists": True}}) == 0
    assert not list(spill.glob("*.re*"))


# Run in a process of its own: replays the spill directory argv[3] into MongoDB argv[1],
# database argv[2]; prints what it replayed.
WORKER = """
import asyncio, json, sys
from pathlib import Path
from scrapy.utils.test import get_crawler
from crawler.pipelines import MongoPipeline
from crawler.storage.mongo import MongoSettings

uri, database, spill = sys.argv[1:4]
config = MongoSettings(uri=uri, database=database, timeout_ms=2000, batch_size=500,
    flush_interval=0.1, max_pending=5000, retry_times=0, spill_dir=Path(spill))
stats = get_crawler().stats
pipeline = MongoPipeline(config, stats, "links")
async def replay():
    await pipeline.open_spider()
    await pipeline.close_spider()
asyncio.run(replay())
print(json.dumps({"replayed": stats.get_value("mongo/replayed")}))
"""


def _worker(mongo: Mongo, spill: Path) -> subprocess.Popen[str]:
    command = [sys.executable, "-c", WORKER, mongo.uri, mongo.database, str(spill)]
    return subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, text=True)


def test_a_large_spill_file_replays_in_bounded_memory(
    mongo: Mongo, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A spill file replays a chunk at a time: the memory the replay takes at its peak is a
    chunk's, a small part of the file (the whole file read into records at once took more than
    its size: 32 MB for a 12 MB file). Chunks of 256 KiB here, so a file of 15 MB shows it."""
    monkeypatch.setattr(spill_module, "REPLAY_CHUNK_BYTES", 256 << 10)
    spill = tmp_path / "spill"
    mongo.db["pages"].create_index("url", unique=True)
    body = "b" * 4500
    own = SpillFile(spill, SPIDER)
    for first in range(0, 2_500, 500):
        own.append([_page(n, mongo.database, body) for n in range(first, first + 500)])
    own.close()
    size = own.path.stat().st_size
    assert size > 11_000_000

    tracemalloc.start()
    try:
        stats = _opened_and_closed(mongo, spill)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()

    assert stats.get_value("mongo/replayed") == 2_500
    assert mongo.db["pages"].count_documents({}) == 2_500
    assert peak < size / 4, f"the replay took {peak:,} bytes at its peak for a file of {size:,}"
    assert not own.path.exists()


def test_a_worker_killed_mid_replay_loses_nothing_and_replays_at_most_a_chunk_again(
    mongo: Mongo, tmp_path: Path
) -> None:
    spill = tmp_path / "spill"
    total = 8_000
    left = _left_by_a_dead_worker(spill, [_page(n, mongo.database) for n in range(total)])
    pages = mongo.db["pages"]
    pages.create_index("url", unique=True)

    # The file replays in order: its 3,000th record stored, 3 chunks are. Looked up by its key
    # (a count reads every document of the test's MongoDB, about 10 ms of its CPU a count).
    third_chunk_end = {"url": f"https://x/{3 * REPLAY_CHUNK_RECORDS - 1}"}
    worker = _worker(mongo, spill)
    try:
        poll(lambda: pages.find_one(third_chunk_end, {"_id": 1}), 120, "a part of the replay",
             pause=0.01)  # fmt: skip
    finally:
        worker.kill()
        worker.wait(30)
    stored_before = pages.count_documents({})
    assert stored_before < total, "the replay ended before the kill: make the file larger"
    assert left.exists()

    stats = _opened_and_closed(mongo, spill)

    assert pages.count_documents({}) == total
    assert sorted(doc["n"] for doc in pages.find({}, {"n": 1})) == list(range(total))
    replayed_again = stats.get_value("mongo/replayed")
    assert replayed_again <= total - stored_before + REPLAY_CHUNK_RECORDS
    assert not left.exists()
    assert not list(spill.glob("*.re*"))


# Values an item may hold that extended JSON reads as something else.
LOOKALIKES = [
    {"$date": 0},
    {"$oid": "not-an-id"},
    {"$numberLong": "7"},
    {"$regex": "a", "$options": ""},
    {"$binary": {"base64": "AA==", "subType": "00"}},
]


def test_spilled_values_that_look_like_extended_json_are_stored_as_they_were(
    mongo: Mongo, tmp_path: Path
) -> None:
    """Items spilled (MongoDB away) then replayed: each stored ``meta`` is the item's dict."""
    spill = tmp_path / "spill"
    own = SpillFile(spill, SPIDER)
    now = datetime.now(UTC)
    documents = [{"url": f"https://x/{n}", "meta": meta} for n, meta in enumerate(LOOKALIKES)]
    writes = [Write(n, {"url": d["url"]}, with_change_hash(d, ())) for n, d in enumerate(documents)]
    own.append(
        [
            {"collection": "pages", "filter": w.selector, "update": w.history(now)}
            | {"at": now, "db": mongo.database}
            for w in writes
        ]
    )  # as BulkWrites spills a batch
    own.close()

    stats = _opened_and_closed(mongo, spill)

    stored = {doc["url"]: doc["meta"] for doc in mongo.db["pages"].find()}
    assert stored == {f"https://x/{n}": meta for n, meta in enumerate(LOOKALIKES)}
    assert stats.get_value("mongo/replayed") == len(LOOKALIKES)
    assert list(spill.iterdir()) == []  # no .rejected, nor .refused


def test_a_file_the_previous_version_spilled_still_replays(mongo: Mongo, tmp_path: Path) -> None:
    """One line of extended JSON per upsert, no header: what a worker of the previous version
    left in a shared MONGO_SPILL_DIR."""
    spill = tmp_path / "spill"
    spill.mkdir()
    left = spill / f"{SPIDER}-4242-0123abcd.jsonl"
    records = [_page(n, mongo.database) for n in range(3)]
    left.write_text("".join(json_util.dumps(record) + "\n" for record in records))

    stats = _opened_and_closed(mongo, spill)

    assert sorted(doc["n"] for doc in mongo.db["pages"].find()) == [0, 1, 2]
    assert stats.get_value("mongo/replayed") == 3
    assert list(spill.iterdir()) == []


def test_the_own_file_replayed_whole_starts_empty_and_keeps_what_is_spilled_after(
    tmp_path: Path,
) -> None:
    own = SpillFile(tmp_path, SPIDER)
    own.append([_page(1, "d")])
    replay = own.own()
    assert [record["filter"] for chunk in replay.chunks() for record in chunk] == [
        {"url": "https://x/1"}
    ]
    replay.done()
    own.replayed(replay)
    assert not own.pending()
    own.append([_page(2, "d")])
    replay = own.own()
    assert [record["filter"] for chunk in replay.chunks() for record in chunk] == [
        {"url": "https://x/2"}
    ]
    own.close()  # not replayed: kept for the next start
    assert own.path.exists()
