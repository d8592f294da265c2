"""The duplicate filter with depths (scripts/dupefilter.lua, through ``Frontier.schedule``) and
the worker's cache in front of it, against a model: a request that carries a depth is a
duplicate only if its URL was scheduled at that depth or less, so a URL found again by a
shorter path is scheduled again, and the least depth is kept; without a depth, as before."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from crawler.frontier.dupefilter import DupefilterConfig, RecentlySeen, queue_seen, read_seen
from crawler.frontier.queue import Frontier, Pending
from crawler.keys import FrontierKeys
from crawler.meta import DEPTH_LIMIT, DEPTH_META, depth_of

KEYS = FrontierKeys("site", "site:start_urls")
URLS = [f"https://site.test/{n}" for n in range(24)]
# A low error rate, so no false positive shows in the runs (the model has none); on bitmaps of
# a few hundred bits, two of a few dozen URLs could share all their positions (the chains'
# growth is tested below, on fixed URLs).
CAPACITY, ERROR_RATE = 1000, 1e-10


def filter_meta(server: redis.Redis) -> dict[str, str]:
    raw: Any = server.hgetall(KEYS.dupefilter_meta)
    return {key.decode(): value.decode() for key, value in raw.items()}


def fingerprint(url: str) -> bytes:
    return hashlib.sha1(url.encode()).digest()


@dataclass
class Model:
    """What the filter must answer: the least depth each URL was scheduled at, the URLs
    scheduled at depth 0 or without a depth (a duplicate at any depth after that) and the
    seeds."""

    least: dict[str, int] = field(default_factory=dict)
    plain: set[str] = field(default_factory=set)

    def schedule(self, url: str, depth: int | None, kind: str) -> int:
        if kind == "dont_filter":
            return 1
        if kind == "seed":
            seeded = f"seed:{url}" in self.plain
            self.plain.add(f"seed:{url}")
            self.seen_or_add(url, depth)
            return int(not seeded)
        return int(not self.seen_or_add(url, depth))

    def seen_or_add(self, url: str, depth: int | None) -> bool:
        if not depth:  # the plain filter is depth 0's
            seen = url in self.plain
            self.plain.add(url)
            return seen
        if url in self.plain or self.least.get(url, depth + 1) <= depth:
            return True
        self.least[url] = depth
        return False


DEPTHS = st.none() | st.integers(0, 7) | st.just(DEPTH_LIMIT)
REQUESTS = st.tuples(
    st.sampled_from(URLS), DEPTHS, st.sampled_from(["filter"] * 6 + ["seed", "dont_filter"])
)


def pending(url: str, depth: int | None, kind: str) -> Pending:
    record = json.dumps({"u": url})
    return Pending(
        record,
        fingerprint(url),
        dont_filter=kind == "dont_filter",
        seed=kind == "seed",
        depth=depth,
    )


@pytest.mark.parametrize("mode", ["exact", "bloom"])
@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(batches=st.lists(st.lists(REQUESTS, min_size=1, max_size=12), min_size=1, max_size=12))
def test_the_filter_keeps_the_least_depth_of_each_url(
    redis_client: redis.Redis, mode: str, batches: list[list[tuple[str, int | None, str]]]
) -> None:
    redis_client.flushdb()
    frontier = Frontier(redis_client, KEYS, DupefilterConfig(mode, CAPACITY, ERROR_RATE))
    model = Model()
    scheduled = 0
    for batch in batches:
        flags = frontier.schedule([pending(*request) for request in batch])
        assert flags == [model.schedule(*request) for request in batch], batch
        scheduled += sum(flags)
    assert frontier.sizes()["queue"] == scheduled


def test_a_url_found_again_by_a_shorter_path_passes_once_per_shorter_path(
    redis_client: redis.Redis,
) -> None:
    """The issue's case in each mode: scheduled at 4, then found at 2 (passes), 3 and 2
    (duplicates), then 1 (passes). A request without a depth is filtered by the plain filter
    alone, as before: scheduled once, then a duplicate."""
    for mode in ("exact", "bloom"):
        redis_client.flushdb()
        frontier = Frontier(redis_client, KEYS, DupefilterConfig(mode, 1000, 1e-7))
        url = "https://site.test/deep"
        flags = [frontier.schedule([pending(url, depth, "filter")]) for depth in (4, 2, 3, 2, 1)]
        assert flags == [[1], [1], [0], [0], [1]], mode
        assert frontier.schedule([pending(url, None, "filter")]) == [1], mode
        assert frontier.schedule([pending(url, None, "filter")]) == [0], mode


@pytest.mark.parametrize("mode", ["exact", "bloom"])
def test_urls_seen_before_depths_were_kept_stay_seen(redis_client: redis.Redis, mode: str) -> None:
    """A crawl whose filter was filled without depths (before this version) keeps its URLs
    seen: a request with a depth for one of them is a duplicate at any depth."""
    frontier = Frontier(redis_client, KEYS, DupefilterConfig(mode, 1000, 1e-7))
    old, new = "https://site.test/old", "https://site.test/new"
    assert frontier.schedule([pending(old, None, "filter")]) == [1]
    assert frontier.schedule([pending(old, 0, "filter"), pending(new, 3, "filter")]) == [0, 1]
    assert frontier.schedule([pending(new, 3, "filter"), pending(new, 0, "filter")]) == [0, 1]


@pytest.mark.parametrize(("mode", "count"), [("exact", 6), ("bloom", 8)])
def test_the_seen_count_counts_urls_with_a_depth(
    redis_client: redis.Redis, mode: str, count: int
) -> None:
    """5 URLs at depth 3, 2 of them found again at 1, one more without a depth: 6 URLs, which
    the "bloom" chains hold as 8 entries (one more for each shorter path)."""
    frontier = Frontier(redis_client, KEYS, DupefilterConfig(mode, 1000, 1e-7))
    urls = [f"https://site.test/{n}" for n in range(5)]
    frontier.schedule([pending(url, 3, "filter") for url in urls])
    frontier.schedule([pending(url, 1, "filter") for url in urls[:2]])
    frontier.schedule([pending("https://site.test/plain", None, "filter")])
    pipe = redis_client.pipeline(transaction=False)
    queue_seen(pipe, KEYS, mode)
    (raw,) = pipe.execute()
    assert read_seen(raw, mode) == count


def test_each_depth_has_its_own_bloom_chain(redis_client: redis.Redis) -> None:
    """A URL costs one entry in the chain of the depth it was first scheduled at, and one more
    for each shorter path found; each chain is a scalable Bloom filter of its own, its first
    bitmap as large as the plain one (allocated whole with its first URL)."""
    frontier = Frontier(redis_client, KEYS, DupefilterConfig("bloom", 1000, 1e-7))
    urls = [f"https://site.test/{n}" for n in range(100)]
    assert frontier.schedule([pending(url, 3, "filter") for url in urls]) == [1] * 100
    assert frontier.schedule([pending(url, 1, "filter") for url in urls[:10]]) == [1] * 10
    assert frontier.schedule([pending(url, 2, "filter") for url in urls]) == [0] * 10 + [1] * 90
    assert frontier.schedule([pending("https://site.test/", None, "filter")]) == [1]
    meta = filter_meta(redis_client)
    assert {key: value for key, value in meta.items() if key.startswith("count:")} == {
        "count:0": "1", "count:d1:0": "10", "count:d2:0": "90", "count:d3:0": "100",
    }  # fmt: skip
    plain = redis_client.strlen(f"{KEYS.dupefilter}:0")
    assert plain > 1000 * 4
    for depth in (1, 2, 3):
        assert redis_client.strlen(f"{KEYS.dupefilter}:d{depth}:0") == plain


def test_a_depth_chain_grows_and_keeps_every_url(redis_client: redis.Redis) -> None:
    frontier = Frontier(redis_client, KEYS, DupefilterConfig("bloom", 50, 1e-7))
    urls = [f"https://site.test/grow/{n}" for n in range(400)]
    assert frontier.schedule([pending(url, 4, "filter") for url in urls]) == [1] * 400
    meta = filter_meta(redis_client)
    assert meta["d4:filters"] == "4"  # 50 + 100 + 200, then the fourth
    assert [meta[f"count:d4:{j}"] for j in range(4)] == ["50", "100", "200", "50"]
    assert "filters" not in meta  # no plain chain
    for depth in (4, 5, 9):
        assert frontier.schedule([pending(url, depth, "filter") for url in urls]) == [0] * 400
    assert frontier.schedule([pending(url, 2, "filter") for url in urls]) == [1] * 400
    assert frontier.schedule([pending(url, 3, "filter") for url in urls]) == [0] * 400


def test_a_depth_out_of_bounds_is_no_depth() -> None:
    assert [depth_of({DEPTH_META: value}) for value in (0, 7, DEPTH_LIMIT)] == [0, 7, DEPTH_LIMIT]
    for value in (-1, DEPTH_LIMIT + 1, True, 2.0, "3", None):
        assert depth_of({DEPTH_META: value}) is None, value
    assert depth_of({}) is None


@given(st.lists(st.tuples(st.sampled_from(URLS), DEPTHS), max_size=40), st.integers(0, 8))
def test_the_worker_cache_never_drops_what_the_filter_would_pass(
    requests: list[tuple[str, int | None]], size: int
) -> None:
    """The worker's cache of fingerprints it scheduled drops a request before Redis sees it:
    only one the fleet's filter drops too (each request the cache lets through goes to the
    fleet's filter: the model), and, while it forgets nothing, every one of those."""
    cache, model = RecentlySeen(size, "bloom"), Model()
    for n, (url, depth) in enumerate(requests):
        first = cache.first_time(fingerprint(url), depth)
        fleet = model.schedule(url, depth, "filter")
        if not first:
            assert not fleet, (url, depth)
        elif n < size:  # the cache is full only past ``size`` requests
            assert fleet, (url, depth)


@given(st.lists(st.tuples(st.sampled_from(URLS), DEPTHS), max_size=40), st.integers(1, 50))
def test_a_request_is_superseded_only_by_a_shorter_path_this_worker_scheduled(
    requests: list[tuple[str, int | None]], size: int
) -> None:
    """A leased request at depth d is not sent when this worker scheduled its URL at a depth
    below d since: never for the least depth scheduled, nor once the cache forgot the URL."""
    cache = RecentlySeen(size, "bloom")
    least: dict[str, int] = {}
    for url, depth in requests:
        if len(least) >= size and url not in least:
            least.clear()  # the cache forgets all at once when full
        cache.first_time(fingerprint(url), depth)
        least[url] = min(least.get(url, depth or 0), depth or 0)
        for asked in range(0, 8):
            expected = url in least and least[url] < asked
            assert cache.superseded(fingerprint(url), asked) == expected, (url, asked, least)
    assert not cache.superseded(fingerprint("https://never.test/"), 7)
