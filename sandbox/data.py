"""The sandbox's dataset: categories, authors and videos, and the JSON shapes the real API
gives them. The dataset is generated from a seed (:func:`sandbox.seed.build_dataset`), so the
same seed always yields the same authors, videos, counts and special states. Tests build the
same ``Dataset`` (or fetch ``/__admin__/dataset``) to compute what a crawl must find.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

DEFAULT_SEED = 7
ALL_CATEGORY = 120
CATEGORIES: dict[int, str] = {
    1: "comedy & drama",
    2: "dance & music",
    3: "relationship",
    4: "pet & nature",
    5: "lifestyle",
    6: "society",
    7: "fashion",
    8: "entertainment",
    10: "informative",
    11: "sport",
    12: "auto",
}
POPULAR_LIKES = 250_000
POPULAR_FOLLOWERS = 10_000

LAYOUT_UNIVERSAL = "universal"
LAYOUT_SIGI = "sigi"
STATE_OK = "ok"
STATE_PRIVATE = "private"
STATE_BANNED = "banned"


@dataclass(frozen=True)
class AuthorStats:
    """Profile counters, as ``userInfo.stats`` and the feed's ``authorStats`` show them."""

    follower_count: int
    following_count: int
    heart: int
    heart_count: int
    video_count: int
    digg_count: int
    friend_count: int

    def to_json(self) -> dict[str, int]:
        """Return the counters under their camelCase names."""
        return {
            "followerCount": self.follower_count,
            "followingCount": self.following_count,
            "heart": self.heart,
            "heartCount": self.heart_count,
            "videoCount": self.video_count,
            "diggCount": self.digg_count,
            "friendCount": self.friend_count,
        }

    def to_json_v2(self) -> dict[str, str]:
        """Return the counters as strings, the way ``statsV2`` carries them."""
        return {key: str(value) for key, value in self.to_json().items()}

    def feed_json(self) -> dict[str, int]:
        """Return the subset the explore feed puts in ``authorStats``."""
        stats = self.to_json()
        del stats["friendCount"]
        return stats


@dataclass(frozen=True)
class Author:
    """One account; ``layout`` and ``state`` decide how its profile page renders."""

    id: str
    unique_id: str
    nickname: str
    signature: str
    verified: bool
    sec_uid: str
    private_account: bool
    region: str
    avatar_larger: str
    create_time: int
    stats: AuthorStats
    layout: str = LAYOUT_UNIVERSAL
    state: str = STATE_OK

    def user_json(self) -> dict[str, Any]:
        """Return ``userInfo.user`` as the profile page carries it."""
        return {
            "id": self.id,
            "uniqueId": self.unique_id,
            "nickname": self.nickname,
            "signature": self.signature,
            "verified": self.verified,
            "secUid": self.sec_uid,
            "privateAccount": self.private_account,
            "region": self.region,
            "avatarLarger": self.avatar_larger,
            "createTime": self.create_time,
        }

    def feed_json(self) -> dict[str, Any]:
        """Return the ``author`` object of an explore feed item."""
        return {
            "id": self.id,
            "uniqueId": self.unique_id,
            "nickname": self.nickname,
            "secUid": self.sec_uid,
            "verified": self.verified,
            "privateAccount": self.private_account,
        }

    def to_json(self) -> dict[str, Any]:
        """Return every field, for the admin dataset document."""
        return {
            **self.user_json(),
            "stats": self.stats.to_json(),
            "statsV2": self.stats.to_json_v2(),
            "layout": self.layout,
            "state": self.state,
        }


@dataclass(frozen=True)
class VideoStats:
    """Engagement counters of one video."""

    digg_count: int
    play_count: int
    share_count: int
    comment_count: int
    collect_count: int

    def to_json(self) -> dict[str, int]:
        """Return the counters under their camelCase names."""
        return {
            "diggCount": self.digg_count,
            "playCount": self.play_count,
            "shareCount": self.share_count,
            "commentCount": self.comment_count,
            "collectCount": self.collect_count,
        }

    def to_json_v2(self) -> dict[str, str]:
        """Return the counters as strings (``statsV2``)."""
        return {key: str(value) for key, value in self.to_json().items()}

    def rounded_json(self) -> dict[str, int]:
        """Return the counters as the feed's ``stats`` has them: rounded as the app shows them
        (22609 as 22600, "22.6K"; 1776621 as 1800000, "1.8M"); ``statsV2`` is exact."""
        return {key: rounded_count(value) for key, value in self.to_json().items()}


def with_counts(record: dict[str, Any], keys: Iterable[str], mode: str) -> dict[str, Any]:
    """``record`` with its count objects at ``keys`` as the configuration's ``counts_mode``
    shows them: as they are ("shown"), each count null ("null"), left out ("absent"), as the
    real API answers a video's or a profile's counts at times."""
    if mode == "shown":
        return record
    shown = {key: value for key, value in record.items() if mode != "absent" or key not in keys}
    if mode == "null":
        for key in keys:
            if isinstance(record.get(key), dict):
                shown[key] = dict.fromkeys(record[key])
    return shown


def rounded_count(value: int) -> int:
    """``value`` to the precision the app shows: exact below 10,000, then to a tenth of a
    thousand ("22.6K") below a million, then to a tenth of a million ("1.8M")."""
    if value < 10_000:
        return value
    step = 100 if value < 1_000_000 else 100_000
    return (value + step // 2) // step * step


@dataclass(frozen=True)
class Video:
    """One video of the explore feed."""

    id: str
    desc: str
    create_time: int
    category: int
    author: Author
    stats: VideoStats

    def item_json(self) -> dict[str, Any]:
        """Return the video as one element of the feed's ``itemList``."""
        return {
            "id": self.id,
            "desc": self.desc,
            "createTime": self.create_time,
            "author": self.author.feed_json(),
            "authorStats": self.author.stats.feed_json(),
            "stats": self.stats.rounded_json(),
            "statsV2": self.stats.to_json_v2(),
        }


@dataclass(frozen=True)
class Dataset:
    """All generated data; ``videos_by_category`` also holds the merged ``ALL_CATEGORY`` list."""

    seed: int
    categories: dict[int, str]
    authors: list[Author]
    videos_by_category: dict[int, list[Video]]
    authors_by_unique_id: dict[str, Author] = field(init=False)

    def __post_init__(self) -> None:
        by_unique_id = {author.unique_id: author for author in self.authors}
        object.__setattr__(self, "authors_by_unique_id", by_unique_id)

    @property
    def videos(self) -> list[Video]:
        """Every video once, category by category."""
        return [video for cat in self.categories for video in self.videos_by_category[cat]]

    def popular_authors(
        self,
        min_likes: int = POPULAR_LIKES,
        min_followers: int = POPULAR_FOLLOWERS,
        categories: Iterable[int] | None = None,
    ) -> set[str]:
        """Return uniqueIds of authors seen in the feed of ``categories`` (default: all) who
        have a video with at least ``min_likes`` likes or at least ``min_followers`` followers."""
        chosen = list(self.categories) if categories is None else list(categories)
        return {
            video.author.unique_id
            for cat in chosen
            for video in self.videos_by_category.get(cat, [])
            if video.stats.digg_count >= min_likes
            or video.author.stats.follower_count >= min_followers
        }

    def to_json(self) -> dict[str, Any]:
        """Return the whole dataset as one JSON-ready document."""
        return {
            "seed": self.seed,
            "categories": {str(cat): name for cat, name in self.categories.items()},
            "all_category": ALL_CATEGORY,
            "authors": [author.to_json() for author in self.authors],
            "videos": [
                {**video.item_json(), "categoryType": video.category} for video in self.videos
            ],
            "videos_by_category": {
                str(cat): [video.id for video in videos]
                for cat, videos in self.videos_by_category.items()
            },
            "popular_authors": sorted(self.popular_authors()),
        }
