"""The Bloom duplicate filter keeps its promises: memory per URL, false-positive rate, growth.

Fingerprints are SHA-1 digests (20 bytes), as Scrapy's request fingerprinter makes them, of
fixed strings: every count below is reproducible from run to run.
"""

from __future__ import annotations

import hashlib
from typing import Any

import redis

from crawler.scheduling.frontier import DupefilterConfig, Frontier, FrontierKeys, Pending

SPIDER = "shop"
KEYS = FrontierKeys(SPIDER, f"{SPIDER}:start_urls")
META = f"{KEYS.dupefilter}:meta"
BATCH = 500
PROBES = 50_000
# A measured rate is a count of rare events: 50 000 probes at a rate of 1e-3 expect 50 false
# positives with a standard deviation of about 7 (Poisson). 1.3x the configured rate is 2 such
# deviations above it, so only a filter that is really worse than configured fails. The chain
# of filters is designed to stay at or below the configured rate (its first filter alone is
# sized for half of it), and the fingerprints are fixed, so the outcome is deterministic.
MARGIN = 1.3


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


def filter_memory(server: redis.Redis) -> int:
    """Bytes Redis uses for the filter: every bitmap and the meta hash."""
    keys: Any = list(server.scan_iter(match=f"{KEYS.dupefilter}:*"))
    return sum(int(server.memory_usage(key) or 0) for key in keys)


def false_positive_rate(frontier: Frontier) -> float:
    """Schedule fingerprints never seen before; each reported as seen is a false positive."""
    flags = schedule(frontier, fingerprints("fresh", 0, PROBES))
    return flags.count(0) / PROBES


def test_memory_at_capacity(redis_client: redis.Redis) -> None:
    capacity = 200_000
    frontier = Frontier(redis_client, KEYS, DupefilterConfig("bloom", capacity, 1e-7))
    # The first URL's bits all sit at the start of the bitmap (h1 = 0, h2 = 1): later URLs set
    # ever higher bits, and the bitmap must not end up over-allocated by growing step by step.
    low = b"\0" * 7 + b"\1" + hashlib.sha1(b"low").digest()[8:]
    assert frontier.schedule([Pending("{}", low)]) == [1]
    filler = Filler(frontier, "memory")
    filler.added.append(low)

    filler.fill_to(capacity - 1)
    assert meta(redis_client)["filters"] == 1  # no growth before capacity
    filler.fill_to(capacity)
    assert meta(redis_client) == {
        "capacity": capacity, "filters": 2, "count:0": capacity, "count:1": 0,
    }  # fmt: skip

    # Filled to capacity: the next filter is counted but holds nothing yet.
    assert redis_client.exists(f"{KEYS.dupefilter}:1") == 0
    bytes_per_url = filter_memory(redis_client) / capacity
    assert bytes_per_url <= 4.5, bytes_per_url

    # The next new URL goes to the second filter, the first one no longer changes.
    filler.fill_to(capacity + 1)
    assert meta(redis_client)["count:1"] == 1
    assert meta(redis_client)["filters"] == 2


def test_false_positive_rate_at_capacity(redis_client: redis.Redis) -> None:
    capacity, error_rate = 50_000, 1e-3
    frontier = Frontier(redis_client, KEYS, DupefilterConfig("bloom", capacity, error_rate))
    Filler(frontier, "seen").fill_to(capacity)
    assert meta(redis_client)["count:0"] == capacity

    # The probes are added as they go (to the second filter: the first stays at capacity).
    rate = false_positive_rate(frontier)
    assert rate <= error_rate * MARGIN, rate


def test_growth_keeps_every_url_and_the_error_rate(redis_client: redis.Redis) -> None:
    capacity, error_rate = 20_000, 1e-3
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
    sizes = [int(redis_client.strlen(f"{KEYS.dupefilter}:{j}")) for j in (0, 1)]
    assert sizes[1] > 2 * sizes[0]  # twice the items at a tighter rate

    # No false negatives: every URL added is still seen, whichever filter holds it.
    assert schedule(frontier, filler.added) == [0] * len(filler.added)

    rate = false_positive_rate(frontier)
    assert rate <= error_rate * MARGIN, rate
