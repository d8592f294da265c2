"""The explore feed as the real API answers it: null and absent counts, the exact statsV2,
soft blocks, pages without items and the cursorless recommend feed (TARGETS.md §1, §4)."""

from __future__ import annotations

from typing import Any, cast

import pytest
import redis

from crawler.extractors.explore import popular_author, video_fields
from crawler.extractors.jsondata import NULL, FieldReader, field
from sandbox.data import rounded_count
from sandbox.seed import build_dataset
from tests.harness import Crawl, Sandbox

COUNTS = ("digg_count", "play_count", "share_count", "comment_count", "collect_count")


def _item(**fields: Any) -> dict[str, Any]:
    item: dict[str, Any] = {
        "id": "7301",
        "desc": "a dance",
        "createTime": 1700000000,
        "author": {"id": "66", "uniqueId": "dancer.one"},
        "stats": {
            "diggCount": 10,
            "playCount": 20,
            "shareCount": 30,
            "commentCount": 40,
            "collectCount": 50,
        },
    }
    item.update(fields)
    return item


# --- null and absent values ------------------------------------------------------------------


def test_field_tells_a_null_from_an_absent_key() -> None:
    assert field({"a": None}, "a") is NULL
    assert field({}, "a") is None
    assert field({"a": 0}, "a") == 0


def test_a_null_count_is_stored_as_null_and_counted() -> None:
    """A video whose diggCount is null has unknown likes, not 0."""
    item = _item(desc=None, createTime=None, author={"id": None, "uniqueId": None})
    item["stats"]["diggCount"] = None
    reader = FieldReader()
    fields = video_fields(item, 2, reader)
    assert fields["digg_count"] is None
    assert fields["play_count"] == 20
    assert fields["created_at"] is None
    assert (fields["description"], fields["author_id"], fields["author_unique_id"]) == (None,) * 3
    assert sorted(reader.bad) == [
        "author_id",
        "author_unique_id",
        "created_at",
        "description",
        "digg_count",
    ]


def test_absent_counts_and_time_are_null_not_zero() -> None:
    """An item without stats or createTime: its counts and time are unknown (null), never 0
    likes or a video of 1970; an absent value is not a bad one (not counted)."""
    reader = FieldReader()
    fields = video_fields({"id": "7302"}, 2, reader)
    assert fields["video_id"] == "7302"
    assert all(fields[name] is None for name in COUNTS)
    assert fields["created_at"] is None
    assert fields["description"] is fields["author_id"] is fields["author_unique_id"] is None
    assert reader.bad == []


def test_zero_is_a_count() -> None:
    item = _item()
    item["stats"]["diggCount"] = 0
    assert video_fields(item, 2)["digg_count"] == 0


# --- stats and statsV2 -----------------------------------------------------------------------


def test_the_exact_statsv2_wins_over_the_rounded_stats() -> None:
    """TikTok rounds ``stats`` from 10,000 up (22600 for 22609): ``statsV2`` holds the exact
    counts as strings."""
    item = _item(
        stats={"diggCount": 22600, "playCount": 1800000, "shareCount": 5},
        statsV2={"diggCount": "22609", "playCount": "1776621"},
    )
    fields = video_fields(item, 2)
    assert (fields["digg_count"], fields["play_count"]) == (22609, 1776621)
    assert fields["share_count"] == 5  # statsV2 lacks it: stats, field by field


def test_a_bad_statsv2_value_falls_back_to_stats() -> None:
    item = _item(statsV2={"diggCount": "lots", "playCount": None, "shareCount": "31"})
    reader = FieldReader()
    fields = video_fields(item, 2, reader)
    assert (fields["digg_count"], fields["play_count"], fields["share_count"]) == (10, 20, 31)
    assert reader.bad == []


def test_a_count_bad_in_both_copies_is_null_and_counted() -> None:
    item = _item(statsV2={"diggCount": "lots"})
    item["stats"]["diggCount"] = None
    reader = FieldReader()
    assert video_fields(item, 2, reader)["digg_count"] is None
    assert reader.bad == ["digg_count"]


def test_popular_authors_are_judged_by_the_exact_counts() -> None:
    item = _item(stats={"diggCount": 250_000}, statsV2={"diggCount": "249999"})
    assert popular_author(item, 250_000, 10_000) is None
    followed = _item(
        authorStats={"followerCount": 10_000}, authorStatsV2={"followerCount": "10049"}
    )
    assert popular_author(followed, 10**9, 10_040) == "dancer.one"


# --- crawls of the sandbox -------------------------------------------------------------------

DATASET = build_dataset()


def _stats(client: redis.Redis, spider: str) -> dict[str, str]:
    raw = cast(dict[bytes, bytes], client.hgetall("{" + spider + "}:stats"))
    return {key.decode(): value.decode() for key, value in raw.items()}


@pytest.mark.integration
def test_a_crawl_stores_the_exact_counts(crawl: Crawl, sandbox: Sandbox) -> None:
    """The sandbox's feed, as the real one, rounds ``stats`` and keeps ``statsV2`` exact."""
    videos = DATASET.videos_by_category[2]
    assert any(video.stats.digg_count != rounded_count(video.stats.digg_count) for video in videos)
    result = crawl("explore", "-a", "categories=2", settings={"EXPLORE_HANDOFF_SPIDER": ""})
    assert result.returncode == 0, result.stderr[-3000:]
    stored = {doc["video_id"]: doc for doc in crawl.mongo.db.videos.find({}, {"_id": 0})}
    assert set(stored) == {video.id for video in videos}
    for video in videos:
        doc = stored[video.id]
        assert (doc["digg_count"], doc["play_count"]) == (
            video.stats.digg_count,
            video.stats.play_count,
        )
