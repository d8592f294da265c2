"""A spilled write replayed after a newer write of the same document (crawler/storage/replay.py,
changes.py's stale_update): the newer write wins, but what the spilled one's least, kept and
union fields add to the document is not lost, whichever of the two came first."""

from __future__ import annotations

import asyncio
import base64
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import bson
import pymongo
from hypothesis import given
from hypothesis import strategies as st
from scrapy.statscollectors import StatsCollector
from scrapy.utils.test import get_crawler

from crawler.items import PageItem, VideoItem
from crawler.pipelines import MongoPipeline
from crawler.storage.changes import stale_update
from crawler.storage.rules import rules_of
from crawler.storage.spill import Replay
from tests.harness import Restartable
from tests.mongo_config import pipeline_settings

SPIDER = "explore"
VIDEO = "7301"
URL = "https://shop.test/p"


def _pipeline(mongo: Restartable, spill: Path) -> tuple[MongoPipeline, StatsCollector]:
    """A worker's pipeline, spilling into ``spill`` (its machine's MONGO_SPILL_DIR)."""
    config = pipeline_settings(mongo.uri, "crawler", spill, flush_interval=0.1, timeout_ms=300)
    stats = get_crawler().stats
    assert stats is not None
    return MongoPipeline(config, stats, SPIDER), stats


async def _run(pipeline: MongoPipeline, *items: Any) -> None:
    """Open the pipeline (replaying what its machine left), store ``items``, close it."""
    await pipeline.open_spider()
    await asyncio.gather(*(pipeline.process_item(item) for item in items))
    await pipeline.close_spider()


def _video(**fields: Any) -> VideoItem:
    return VideoItem(VIDEO, description="a dance", **fields)


def _page(depth: int) -> PageItem:
    return PageItem(URL, "shop.test", 200, URL, depth, 1.0, "h", 1, 0, title="t")


def test_a_spilled_write_replayed_after_a_newer_one_still_adds_what_its_rules_keep(
    own_mongo: Restartable, tmp_path: Path
) -> None:
    """A worker of machine A stores a video found under category 2 with its play count, and a
    page found at depth 1, while MongoDB is away: both spilled, and A stops before MongoDB is
    back. A worker of machine B then stores them newer: under category 120, no play count (the
    feed answered null), another like count, the page at depth 3. A starts again and replays
    its file: the newer writes win (the like count, the category, when they were seen), but the
    video keeps category 2 and the play count only A knew, and the page its least depth. They
    were dropped as stale: categories [120], play count None, depth 3."""
    machine_a, machine_b = tmp_path / "a", tmp_path / "b"

    newer_at: list[datetime] = []

    async def scenario() -> StatsCollector:
        first, first_stats = _pipeline(own_mongo, machine_a)
        await first.open_spider()
        own_mongo.stop()
        older = _video(play_count=100, digg_count=7, category=2, categories=[2])
        await asyncio.gather(first.process_item(older), first.process_item(_page(1)))
        await first.close_spider()  # MongoDB still away: the file is left for A's next start
        assert first_stats.get_value("mongo/spilled") == 2
        own_mongo.start()
        newer_at.append(datetime.now(UTC))
        newer = _video(play_count=None, digg_count=5, category=120, categories=[120])
        await _run(_pipeline(own_mongo, machine_b)[0], newer, _page(3))
        restarted, stats = _pipeline(own_mongo, machine_a)
        await _run(restarted)
        return stats

    stats = asyncio.run(asyncio.wait_for(scenario(), 60))

    client: pymongo.MongoClient[dict[str, Any]] = pymongo.MongoClient(own_mongo.uri, tz_aware=True)
    database = client["crawler"]
    video = database.videos.find_one({"video_id": VIDEO}, {"_id": 0})
    assert video is not None
    assert video["categories"] == [120, 2]
    assert (video["play_count"], video["digg_count"], video["category"]) == (100, 5, 120)
    assert video["change_count"] == 0
    page = database.pages.find_one({"url": URL})
    assert page is not None
    assert page["depth"] == 1
    assert min(video["last_seen"], page["last_seen"]) > newer_at[0]  # the newer writes' own
    client.close()
    assert stats.get_value("mongo/replay_stale") == 2
    assert stats.get_value("mongo/replay_stale_added") == 2
    assert not list(machine_a.glob("*.re*"))  # nothing rejected nor refused


def test_a_stale_replay_adds_nothing_a_write_without_those_values_would_not() -> None:
    """A video without categories, counts or a least field contributes no update at all."""
    assert stale_update({"video_id": VIDEO, "description": "d"}, rules_of(VideoItem)) is None
    update = stale_update(
        {"video_id": VIDEO, "categories": [], "play_count": 3}, rules_of(VideoItem)
    )
    assert update == [{"$set": {"play_count": {"$ifNull": ["$play_count", {"$literal": 3}]}}}]


# What a spill file's line may hold where a record's "stale" update goes.
KEYS = st.sampled_from(["$set", "$min", "a", ""]) | st.text(
    st.characters(blacklist_characters="\x00", blacklist_categories=["Cs"]), max_size=4
)  # BSON keys: no NUL, no lone surrogate (no spill file can hold either)
ANYTHING = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 5) | st.text(max_size=4),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(KEYS, inner, max_size=3),
    max_leaves=8,
)


@given(ANYTHING)
def test_a_records_stale_update_that_cannot_be_read_is_dropped_never_the_record(
    stale: Any,
) -> None:
    """A spill file written by hand or damaged: whatever its "stale" holds, the record's own
    upsert is replayed, with a "stale" update only when it is one MongoDB takes (operators, or
    a pipeline of stages)."""
    record = {
        "collection": "videos",
        "filter": {"video_id": VIDEO},
        "update": [{"$set": {"n": 1}}],
        "stale": stale,
        "at": datetime(2026, 1, 1, tzinfo=UTC),
    }
    with tempfile.TemporaryFile() as file:
        file.write(base64.b64encode(bson.encode(record)) + b"\n")
        (read,) = [each for chunk in Replay(file, Path("left.jsonl")).chunks() for each in chunk]
    assert read["update"] == record["update"]
    if "stale" in read:
        stages = read["stale"] if isinstance(read["stale"], list) else [read["stale"]]
        assert stages
        assert all(isinstance(stage, dict) and stage for stage in stages)
        assert all(str(key).startswith("$") for stage in stages for key in stage)
