"""The seeded generator of the sandbox's dataset (:mod:`sandbox.data`).

Everything is drawn once from ``random.Random(seed)`` in a fixed order, so the same seed always
yields the same authors, videos, counts and special states.
"""

from __future__ import annotations

import random
import string
from dataclasses import dataclass, field

from sandbox.data import (
    ALL_CATEGORY,
    CATEGORIES,
    DEFAULT_SEED,
    LAYOUT_SIGI,
    LAYOUT_UNIVERSAL,
    POPULAR_FOLLOWERS,
    POPULAR_LIKES,
    STATE_BANNED,
    STATE_OK,
    STATE_PRIVATE,
    Author,
    AuthorStats,
    Dataset,
    Video,
    VideoStats,
)

AUTHOR_COUNT = 300
VIDEOS_PER_CATEGORY = 55
FOLLOWER_POPULAR_SHARE = 0.16
VIRAL_VIDEO_SHARE = 0.05
VIRAL_BY_POPULAR_SHARE = 0.2
SIGI_LAYOUT_SHARE = 0.10

SEC_UID_PREFIX = "MS4wLjABAAAA"
_SEC_UID_ALPHABET = string.ascii_letters + string.digits + "-_"
_YEAR_2016 = 1_451_606_400
_YEAR_2024 = 1_704_067_200
_YEAR_2025 = 1_735_689_600
_YEAR_2026 = 1_767_225_600

_ADJECTIVES = (
    "sunny", "lazy", "wild", "tiny", "cosmic", "urban", "happy", "silent", "golden", "neon",
    "rusty", "velvet", "salty", "fuzzy", "brave", "lucky", "mellow", "spicy", "frosty", "daily",
)  # fmt: skip
_NOUNS = (
    "fox", "panda", "chef", "rider", "dancer", "gamer", "cat", "wave", "garden", "pixel",
    "tiger", "otter", "baker", "drifter", "coder", "singer", "hiker", "maker", "poet", "diver",
)  # fmt: skip
_FIRST_NAMES = (
    "Maria", "Jürgen", "Zoë", "Ayşe", "Đức", "李雷", "Sakura", "Omar", "Priya", "Lucas",
    "Chloé", "Nia", "Mateo", "Ingrid", "Kwame", "Yuki", "Sofía", "Ivan", "Amara", "Leo",
)  # fmt: skip
_SIGNATURES = (
    "", "📍 Lisbon", "business: hello@mail.example", "link below ⬇️", "new video every day",
    "just vibes ✨", "I write <b>HTML</b> & </script> tags for fun", "🐾 + ☕ = me",
    "he/him · 22", "DM for collabs", "follow for part 2", "「毎日更新」",
)  # fmt: skip
_PHRASES = (
    "wait for the end", "pov: monday again", "tried this for a week", "best day ever",
    "nobody asked but", "part 2 🔥", "this took 3 hours", "can't stop laughing 😂",
    "rate it 1-10", "how it started vs how it's going", "tutorial in comments", "storytime",
)  # fmt: skip
_REGIONS = ("US", "GB", "DE", "FR", "BR", "JP", "ID", "MX", "TR", "VN", "IN", "PH", "ES", "IT")


def build_dataset(seed: int = DEFAULT_SEED) -> Dataset:
    """Generate the dataset for ``seed``."""
    return _Generator(seed).build()


@dataclass
class _Draft:
    """An author while the dataset is generated; turned into an ``Author`` at the end."""

    id: str
    unique_id: str
    nickname: str
    signature: str
    sec_uid: str
    region: str
    create_time: int
    follower_count: int
    verified: bool = False
    videos: list[VideoStats] = field(default_factory=list)
    layout: str = LAYOUT_UNIVERSAL
    state: str = STATE_OK


class _Generator:
    """Draws the dataset from one ``random.Random`` in a fixed order."""

    def __init__(self, seed: int) -> None:
        self.seed = seed
        self.rng = random.Random(seed)
        self.used_ids: set[str] = set()
        self.used_unique_ids: set[str] = set()

    def build(self) -> Dataset:
        drafts = self.draw_authors()
        slots = self.assign_authors(drafts)
        viral = self.choose_viral_slots(drafts, slots)
        video_stats = [self.draw_video_stats(index in viral) for index in range(len(slots))]
        for index, stats in zip(slots, video_stats, strict=True):
            drafts[index].videos.append(stats)
        self.assign_states(drafts)
        authors = [self.finish_author(draft) for draft in drafts]
        videos = self.draw_videos(authors, slots, video_stats)
        return Dataset(self.seed, dict(CATEGORIES), authors, videos)

    def draw_authors(self) -> list[_Draft]:
        popular_count = round(AUTHOR_COUNT * FOLLOWER_POPULAR_SHARE)
        popular = set(self.rng.sample(range(AUTHOR_COUNT), popular_count))
        return [self.draw_author(index in popular) for index in range(AUTHOR_COUNT)]

    def draw_author(self, popular: bool) -> _Draft:
        rng = self.rng
        if popular:
            followers = int(POPULAR_FOLLOWERS * 10 ** rng.uniform(0.0, 3.0))
        else:
            followers = int(10 ** rng.uniform(1.0, 3.99))
        return _Draft(
            id=self.draw_id(6_800_000_000_000_000_000, 7_300_000_000_000_000_000),
            unique_id=self.draw_unique_id(),
            nickname=self.draw_nickname(),
            signature=rng.choice(_SIGNATURES),
            sec_uid=SEC_UID_PREFIX + "".join(rng.choices(_SEC_UID_ALPHABET, k=64)),
            region=rng.choice(_REGIONS),
            create_time=rng.randrange(_YEAR_2016, _YEAR_2024),
            follower_count=followers,
            verified=rng.random() < (0.5 if popular else 0.03),
        )

    def draw_id(self, low: int, high: int) -> str:
        while True:
            candidate = str(self.rng.randrange(low, high))
            if candidate not in self.used_ids:
                self.used_ids.add(candidate)
                return candidate

    def draw_unique_id(self) -> str:
        rng = self.rng
        while True:
            adjective, noun = rng.choice(_ADJECTIVES), rng.choice(_NOUNS)
            number = rng.randrange(1, 1000)
            candidate = rng.choice(
                (
                    f"{adjective}{noun}{number}",
                    f"{adjective}_{noun}",
                    f"{noun}.{adjective}{number}",
                    f"the{noun}{number}",
                    f"{noun}_{number}_{adjective}",
                )
            )[:20]
            if len(candidate) >= 4 and candidate not in self.used_unique_ids:
                self.used_unique_ids.add(candidate)
                return candidate

    def draw_nickname(self) -> str:
        rng = self.rng
        name = rng.choice(_FIRST_NAMES)
        return rng.choice((name, f"{name} {rng.choice(_NOUNS).title()}", f"{name} ✨"))

    def assign_authors(self, drafts: list[_Draft]) -> list[int]:
        total = VIDEOS_PER_CATEGORY * len(CATEGORIES)
        slots = list(range(len(drafts)))
        slots += [self.rng.randrange(len(drafts)) for _ in range(total - len(drafts))]
        self.rng.shuffle(slots)
        return slots

    def choose_viral_slots(self, drafts: list[_Draft], slots: list[int]) -> set[int]:
        count = round(len(slots) * VIRAL_VIDEO_SHARE)
        by_popular = round(count * VIRAL_BY_POPULAR_SHARE)
        popular = [i for i, a in enumerate(slots) if _is_follower_popular(drafts[a])]
        others = [i for i, a in enumerate(slots) if not _is_follower_popular(drafts[a])]
        chosen = self.rng.sample(popular, by_popular) + self.rng.sample(others, count - by_popular)
        return set(chosen)

    def draw_video_stats(self, viral: bool) -> VideoStats:
        rng = self.rng
        if viral:
            likes = int(POPULAR_LIKES * 10 ** rng.uniform(0.0, 1.5))
        else:
            likes = int(10 ** rng.uniform(0.0, 5.3))
        return VideoStats(
            digg_count=likes,
            play_count=int(likes * rng.uniform(4.0, 40.0)) + rng.randrange(1000),
            share_count=int(likes * rng.uniform(0.002, 0.08)),
            comment_count=int(likes * rng.uniform(0.005, 0.05)),
            collect_count=int(likes * rng.uniform(0.01, 0.12)),
        )

    def assign_states(self, drafts: list[_Draft]) -> None:
        by_followers = [d for d in drafts if _is_follower_popular(d)]
        by_likes = [d for d in drafts if not _is_follower_popular(d) and _has_viral_video(d)]
        unpopular = [d for d in drafts if not _is_follower_popular(d) and not _has_viral_video(d)]
        private = [self.rng.choice(by_followers), self.rng.choice(unpopular)]
        banned_pool = [d for d in by_likes if d not in private]
        banned = [self.rng.choice(banned_pool), self.rng.choice(unpopular)]
        for draft in private:
            draft.state = STATE_PRIVATE
        for draft in banned:
            draft.state = STATE_BANNED
        regular = [d for d in drafts if d.state == STATE_OK]
        for draft in self.rng.sample(regular, round(len(drafts) * SIGI_LAYOUT_SHARE)):
            draft.layout = LAYOUT_SIGI

    def finish_author(self, draft: _Draft) -> Author:
        rng = self.rng
        likes_received = sum(stats.digg_count for stats in draft.videos)
        heart = max(likes_received, int(draft.follower_count * rng.uniform(1.5, 25.0)))
        following = rng.randrange(0, 2000)
        stats = AuthorStats(
            follower_count=draft.follower_count,
            following_count=following,
            heart=heart,
            heart_count=heart,
            video_count=rng.randrange(len(draft.videos), 800),
            digg_count=rng.randrange(0, 50_000),
            friend_count=rng.randrange(0, min(following, 500) + 1),
        )
        return Author(
            id=draft.id,
            unique_id=draft.unique_id,
            nickname=draft.nickname,
            signature=draft.signature,
            verified=draft.verified,
            sec_uid=draft.sec_uid,
            private_account=draft.state == STATE_PRIVATE,
            region=draft.region,
            avatar_larger=f"/avatar/{draft.id}.jpeg",
            create_time=draft.create_time,
            stats=stats,
            layout=draft.layout,
            state=draft.state,
        )

    def draw_videos(
        self, authors: list[Author], slots: list[int], stats: list[VideoStats]
    ) -> dict[int, list[Video]]:
        by_category: dict[int, list[Video]] = {}
        for position, category in enumerate(CATEGORIES):
            start = position * VIDEOS_PER_CATEGORY
            by_category[category] = [
                self.draw_video(category, authors[slots[index]], stats[index])
                for index in range(start, start + VIDEOS_PER_CATEGORY)
            ]
        by_category[ALL_CATEGORY] = _interleave([by_category[cat] for cat in CATEGORIES])
        return by_category

    def draw_video(self, category: int, author: Author, stats: VideoStats) -> Video:
        rng = self.rng
        tag = CATEGORIES[category].split(" ")[0]
        desc = f"{rng.choice(_PHRASES)} #{tag} #fyp #{rng.choice(_NOUNS)}"
        return Video(
            id=self.draw_id(7_300_000_000_000_000_000, 7_600_000_000_000_000_000),
            desc=desc,
            create_time=rng.randrange(_YEAR_2025, _YEAR_2026),
            category=category,
            author=author,
            stats=stats,
        )


def _is_follower_popular(draft: _Draft) -> bool:
    return draft.follower_count >= POPULAR_FOLLOWERS


def _has_viral_video(draft: _Draft) -> bool:
    return any(stats.digg_count >= POPULAR_LIKES for stats in draft.videos)


def _interleave(lists: list[list[Video]]) -> list[Video]:
    merged: list[Video] = []
    for row in range(max(len(videos) for videos in lists)):
        merged.extend(videos[row] for videos in lists if row < len(videos))
    return merged
