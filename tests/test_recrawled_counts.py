"""What a re-crawl of the explore feed and of profiles leaves in MongoDB: a count the site
answers null or leaves out keeps the count stored before, and a video keeps every category it
was found under (docs/storage.md, docs/spiders.md)."""

from __future__ import annotations

from typing import Any

import pytest
import redis

from sandbox.data import ALL_CATEGORY, Author
from sandbox.seed import build_dataset
from tests.harness import Crawl, Sandbox

DATASET = build_dataset()
VIDEO_COUNTS = ("digg_count", "play_count", "share_count", "comment_count", "collect_count")
PROFILE_COUNTS = (
    "follower_count",
    "following_count",
    "heart_count",
    "video_count",
    "digg_count",
    "friend_count",
)
NO_HANDOFF = {"EXPLORE_HANDOFF_SPIDER": ""}


def _videos(crawl: Crawl) -> dict[str, dict[str, Any]]:
    return {doc["video_id"]: doc for doc in crawl.mongo.db.videos.find({}, {"_id": 0})}


def _profiles(crawl: Crawl) -> dict[str, dict[str, Any]]:
    return {doc["unique_id"]: doc for doc in crawl.mongo.db.profiles.find({}, {"_id": 0})}


def _crawled(crawl: Crawl, spider: str, *args: str, **settings: Any) -> None:
    result = crawl(spider, *args, settings=settings)
    assert result.returncode == 0, result.stderr[-3000:]


@pytest.mark.integration
@pytest.mark.parametrize("mode", ["null", "absent"])
def test_a_recrawl_without_counts_keeps_the_stored_videos_counts(
    crawl: Crawl, sandbox: Sandbox, mode: str
) -> None:
    """Category 2 crawled with its counts, then again with every count null (or left out): each
    video keeps the exact counts of the first crawl, the second crawl stored it all the same
    (``last_seen``), and no change is counted."""
    videos = DATASET.videos_by_category[2]
    _crawled(crawl, "explore", "-a", "categories=2", **NO_HANDOFF)
    first = _videos(crawl)
    sandbox.admin("config", {"counts_mode": mode})
    _crawled(crawl, "explore", "-a", "categories=2", **NO_HANDOFF)
    second = _videos(crawl)
    assert set(second) == {video.id for video in videos}
    for video in videos:
        doc, stats = second[video.id], video.stats
        exact = (
            stats.digg_count,
            stats.play_count,
            stats.share_count,
            stats.comment_count,
            stats.collect_count,
        )
        assert tuple(doc[name] for name in VIDEO_COUNTS) == exact, video.id
        assert doc["last_seen"] > first[video.id]["last_seen"]
        assert doc["change_count"] == 0


def _two_authors() -> list[Author]:
    """An ok author of each layout."""
    return [
        next(a for a in DATASET.authors if (a.state, a.layout) == ("ok", layout))
        for layout in ("universal", "sigi")
    ]


def _counts(author: Author) -> tuple[int, ...]:
    stats = author.stats
    return (
        stats.follower_count,
        stats.following_count,
        stats.heart_count,
        stats.video_count,
        stats.digg_count,
        stats.friend_count,
    )


@pytest.mark.integration
def test_a_recrawl_without_counts_keeps_the_stored_profiles_counts(
    crawl: Crawl, redis_client: redis.Redis, sandbox: Sandbox
) -> None:
    """Profiles of both layouts crawled with their counts, then again with their counts left
    out, as a private profile shows them: each keeps the counts of the first crawl, and no
    change is counted."""
    authors = _two_authors()
    users = "users=" + ",".join(author.unique_id for author in authors)
    _crawled(crawl, "profiles", "-a", users)
    first = _profiles(crawl)
    redis_client.flushdb()  # the same pages again: not filtered as seen
    sandbox.admin("config", {"counts_mode": "absent"})
    _crawled(crawl, "profiles", "-a", users)
    second = _profiles(crawl)
    for author in authors:
        doc = second[author.unique_id]
        assert tuple(doc[name] for name in PROFILE_COUNTS) == _counts(author), author.unique_id
        assert doc["last_seen"] > first[author.unique_id]["last_seen"]
        assert doc["change_count"] == 0


@pytest.mark.integration
def test_a_video_keeps_every_category_it_was_found_under(crawl: Crawl) -> None:
    """Two pages of category 2 and of "All" (120) walked in one crawl, then two pages of
    category 2 again: a video of both walks lists both categories, once each, and keeps both
    after the re-crawl of one; ``category`` is the last walk's, and neither counts as a change."""
    pages = {"EXPLORE_MAX_PAGES": 2, **NO_HANDOFF}
    size = 2 * 16  # EXPLORE_PAGE_SIZE
    found = {
        category: {video.id for video in DATASET.videos_by_category[category][:size]}
        for category in (2, ALL_CATEGORY)
    }
    both = found[2] & found[ALL_CATEGORY]
    assert both  # "All" interleaves every category from its first videos on
    _crawled(crawl, "explore", "-a", f"categories=2,{ALL_CATEGORY}", **pages)
    stored = _videos(crawl)
    assert set(stored) == found[2] | found[ALL_CATEGORY]
    for video_id, doc in stored.items():
        expected = [c for c in (2, ALL_CATEGORY) if video_id in found[c]]
        assert sorted(doc["categories"]) == expected, video_id
    _crawled(crawl, "explore", "-a", "categories=2", **pages)
    again = _videos(crawl)
    for video_id in both:
        assert sorted(again[video_id]["categories"]) == [2, ALL_CATEGORY], video_id
        assert again[video_id]["category"] == 2
    for video_id in found[ALL_CATEGORY] - found[2]:
        assert (again[video_id]["category"], again[video_id]["categories"]) == (120, [120])
    assert {doc["change_count"] for doc in again.values()} == {0}
