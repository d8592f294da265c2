"""The Bloom duplicate filter keeps its promises: bitmaps sized as designed, growth at capacity,
no URL forgotten. Its memory per URL and false-positive rates are measured in bench/bloom.py.

Fingerprints are SHA-1 digests (20 bytes), as Scrapy's request fingerprinter makes them, of
fixed strings: every count below is reproducible from run to run.
"""

from __future__ import annotations

import hashlib
import math
from typing import Any

import redis

from crawler.frontier.dupefilter import DupefilterConfig
from crawler.frontier.queue import Frontier, Pending
from crawler.keys import FrontierKeys

SPIDER = "shop"
KEYS = FrontierKeys(SPIDER, f"{SPIDER}:start_urls")
META = f"{KEYS.dupefilter}:meta"
BATCH = 500


def fingerprints(tag: str, start: int, count: int) -> list[bytes]:
    return [
        hashlib.sha1(f"https://example.com/{tag}/{number}".encode()).digest()
        for number in range(start, start + count)
    ]


def schedule(frontier: Frontier, batch: list[bytes]) -> list[int]:
    """Schedule in batches as the scheduler does; 1 = added, 0 = reported as seen."""
    flags: list[int] = []
    for first in range(0, len(batch), BATCH):
        chunk = batch[first : first + BATCH]
        flags.extend(frontier.schedule([Pending("{}", fingerprint) for fingerprint in chunk]))
    return flags


class Filler:
    """Adds never-seen fingerprints until the filter holds a given number of them.

    A new fingerprint the filter wrongly reports as seen (a false positive) is not added, so
    the filter's count of items is the count of 1s, not of fingerprints sent.
    """

    def __init__(self, frontier: Frontier, tag: str) -> None:
        self.frontier = frontier
        self.tag = tag
        self.sent = 0
        self.added: list[bytes] = []
        self.false_positives = 0

    def fill_to(self, items: int) -> None:
        while len(self.added) < items:
            batch = fingerprints(self.tag, self.sent, min(BATCH, items - len(self.added)))
            self.sent += len(batch)
            flags = self.frontier.schedule([Pending("{}", fingerprint) for fingerprint in batch])
            self.added.extend(fp for fp, flag in zip(batch, flags, strict=True) if flag)
            self.false_positives += flags.count(0)


def meta(server: redis.Redis) -> dict[str, int]:
    raw: Any = server.hgetall(META)
    return {key.decode(): int(value) for key, value in raw.items() if key != b"error_rate"}


def bitmap_bytes(capacity: int, error_rate: float, j: int) -> int:
    """The length of filter j's bitmap as the filter sizes it: filter j holds capacity * 2^j
    URLs at error_rate / 2 * 2^-j, with -ln(p) / ln(2)^2 bits per URL."""
    p = math.ldexp(error_rate / 2, -j)
    bits = math.ceil((capacity << j) * -math.log(p) / math.log(2) ** 2)
    return math.ceil(bits / 8)


def strlen(server: redis.Redis, j: int) -> int:
    return int(server.strlen(f"{KEYS.dupefilter}:{j}"))


def false_positive_rate(frontier: Frontier, probes: int) -> float:
    """Schedule fingerprints never seen before; each reported as seen is a false positive."""
    flags = schedule(frontier, fingerprints("fresh", 0, probes))
    return flags.count(0) / probes


def test_the_bitmap_is_allocated_whole_with_its_first_url(redis_client: redis.Redis) -> None:
    capacity = 20_000
    frontier = Frontier(redis_client, KEYS, DupefilterConfig("bloom", capacity, 1e-7))
    # The first URL's bits all sit at the start of the bitmap (h1 = 0, h2 = 1): a bitmap grown
    # bit by bit would be a few bytes long now, and over-allocated once full.
    low = b"\0" * 7 + b"\1" + hashlib.sha1(b"low").digest()[8:]
    assert frontier.schedule([Pending("{}", low)]) == [1]
    assert strlen(redis_client, 0) == bitmap_bytes(capacity, 1e-7, 0)
    # What the README promises per URL at a 1e-7 error rate (bench/bloom.py measures it).
    assert strlen(redis_client, 0) / capacity <= 4.4


def test_growth_starts_at_capacity(redis_client: redis.Redis) -> None:
    capacity = 2_000
    frontier = Frontier(redis_client, KEYS, DupefilterConfig("bloom", capacity, 1e-7))
    filler = Filler(frontier, "memory")
    filler.fill_to(capacity - 1)
    assert meta(redis_client)["filters"] == 1  # no growth before capacity
    filler.fill_to(capacity)
    assert meta(redis_client) == {
        "capacity": capacity, "filters": 2, "count:0": capacity, "count:1": 0,
    }  # fmt: skip

    # Filled to capacity: the next filter is counted but holds nothing yet.
    assert redis_client.exists(f"{KEYS.dupefilter}:1") == 0

    # The next new URL goes to the second filter, the first one no longer changes.
    filler.fill_to(capacity + 1)
    assert meta(redis_client)["count:1"] == 1
    assert meta(redis_client)["filters"] == 2


def test_growth_keeps_every_url(redis_client: redis.Redis) -> None:
    capacity, error_rate = 2_000, 1e-3
    frontier = Frontier(redis_client, KEYS, DupefilterConfig("bloom", capacity, error_rate))
    filler = Filler(frontier, "grow")

    filler.fill_to(capacity)
    assert meta(redis_client)["filters"] == 2
    filler.fill_to(3 * capacity - 1)
    assert meta(redis_client)["filters"] == 2
    filler.fill_to(3 * capacity)  # capacity, then twice that in the second filter
    assert meta(redis_client) == {
        "capacity": capacity, "filters": 3, "count:0": capacity, "count:1": 2 * capacity,
        "count:2": 0,
    }  # fmt: skip
    # Twice the items at a tighter rate, each bitmap as long as its shape says.
    assert [strlen(redis_client, j) for j in (0, 1)] == [
        bitmap_bytes(capacity, error_rate, j) for j in (0, 1)
    ]

    # No false negatives: every URL added is still seen, whichever filter holds it.
    assert schedule(frontier, filler.added) == [0] * len(filler.added)
    # New URLs are still new. A coarse bound (the rate itself is measured in bench/bloom.py):
    # 5,000 probes at 1e-3 expect 5 false positives.
    assert false_positive_rate(frontier, 5_000) <= 0.01
