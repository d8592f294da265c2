"""Redis bytes per queued request and per seen URL: this frontier, its previous layout and stock
scrapy-redis, side by side on one fresh Redis.

    python bench/frontier_memory.py [--requests 50000]

Each variant schedules the same profile requests (a GET with its callback and one cb_kwarg, as
the profiles spider makes them) into an empty database; the figure is the growth of Redis's
``used_memory`` divided by the number of requests. Queue and duplicate filter are measured
apart: requests queued with no filter (growth of ``used_memory``), then the filter's own keys
(``MEMORY USAGE``). The previous layout's duplicate filter is this one's (unchanged).
"""

from __future__ import annotations

import argparse
import hashlib
import pickle
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import redis  # noqa: E402
from scrapy import Request, Spider  # noqa: E402
from scrapy_redis.dupefilter import RFPDupeFilter  # noqa: E402
from scrapy_redis.queue import PriorityQueue  # noqa: E402

from bench import _legacy_frontier as frontier_legacy  # noqa: E402
from crawler.frontier import codec  # noqa: E402
from crawler.frontier.dupefilter import DupefilterConfig  # noqa: E402
from crawler.frontier.queue import Frontier, Pending  # noqa: E402
from crawler.frontier.records import pending  # noqa: E402
from crawler.keys import FrontierKeys  # noqa: E402
from devtools.services import free_port, start_redis  # noqa: E402

TARGET_BYTES = 150
TARGET_VS_STOCK = 0.4
KEYS = FrontierKeys("profiles", "profiles:start_urls")


class ProfilesLike(Spider):
    name = "profiles"

    def parse_profile(self, response: Any, unique_id: str) -> None: ...


SPIDER = ProfilesLike()


def profile_requests(count: int) -> list[Request]:
    return [
        Request(
            f"https://www.tiktok.com/@user.{index:08d}",
            callback=SPIDER.parse_profile,
            cb_kwargs={"unique_id": f"user.{index:08d}"},
        )
        for index in range(count)
    ]


def fingerprint(request: Request) -> bytes:
    return hashlib.sha1(request.url.encode()).digest()


def used_memory(server: redis.Redis) -> int:
    """Memory of the data: Redis's ``used_memory`` without client buffers, once keys deleted
    in the background are freed."""
    info = server.info("memory")
    while int(info.get("lazyfree_pending_objects", 0)):
        time.sleep(0.05)  # a plain script: nothing else waits on this process
        info = server.info("memory")
    return int(info["used_memory"]) - int(info["mem_clients_normal"])


def flush(server: redis.Redis) -> None:
    command: Any = server.execute_command
    command("FLUSHALL", "SYNC")


def grown(server: redis.Redis, fill: Callable[[], None]) -> int:
    """Bytes ``fill`` adds to an empty database."""
    flush(server)
    before = used_memory(server)
    fill()
    return used_memory(server) - before


# --- queues ------------------------------------------------------------------------------------


def project_queue(server: redis.Redis, requests: list[Request]) -> None:
    frontier = Frontier(server, KEYS, DupefilterConfig("none"))
    entries = [pending(request, fingerprint(request), SPIDER) for request in requests]
    for first in range(0, len(entries), 500):
        frontier.schedule(entries[first : first + 500])


def previous_queue(server: redis.Redis, requests: list[Request], whole: bool) -> None:
    records = [
        (0, 0.0, codec.dumps(request.to_dict(spider=SPIDER) if whole else _json(request)))
        for request in requests
    ]
    frontier_legacy.schedule(server, KEYS, records)


def _json(request: Request) -> dict[str, Any]:
    return codec.loads(pending(request, fingerprint(request), SPIDER).json)


def scrapy_redis_queue(server: redis.Redis, requests: list[Request]) -> None:
    pipe = server.pipeline(transaction=False)
    queue = PriorityQueue(pipe, SPIDER, "%(spider)s:requests", serializer=_Pickle)
    for request in requests:
        queue.push(request)
    pipe.execute()


class _Pickle:
    """scrapy-redis's default serializer (scrapy_redis.picklecompat)."""

    @staticmethod
    def dumps(obj: Any) -> bytes:
        return pickle.dumps(obj, protocol=-1)

    @staticmethod
    def loads(data: bytes) -> Any:
        return pickle.loads(data)


# --- duplicate filters -------------------------------------------------------------------------


def project_seen(server: redis.Redis, requests: list[Request], config: DupefilterConfig) -> int:
    flush(server)
    frontier = Frontier(server, KEYS, config)
    entries = [
        Pending("", fingerprint(request), due=1e18)  # delayed: only the filter is measured
        for request in requests
    ]
    for first in range(0, len(entries), 500):
        frontier.schedule(entries[first : first + 500])
    return key_bytes(server, KEYS.dupefilter + "*")


def scrapy_redis_seen(server: redis.Redis, requests: list[Request]) -> int:
    flush(server)
    pipe = server.pipeline(transaction=False)
    dupefilter = RFPDupeFilter(pipe, "profiles:dupefilter")
    for request in requests:
        dupefilter.request_seen(request)
    pipe.execute()
    return key_bytes(server, "profiles:dupefilter")


def key_bytes(server: redis.Redis, pattern: str) -> int:
    """What Redis counts for the keys matching ``pattern`` (MEMORY USAGE, every element)."""
    command: Any = server.execute_command
    return sum(int(command("MEMORY", "USAGE", key, "SAMPLES", 0)) for key in server.keys(pattern))


# --- report ------------------------------------------------------------------------------------


def measure(server: redis.Redis, count: int) -> tuple[dict[str, float], dict[str, float]]:
    requests = profile_requests(count)
    queued = {
        "this frontier": grown(server, lambda: project_queue(server, requests)),
        "previous (compact JSON)": grown(server, lambda: previous_queue(server, requests, False)),
        "previous (whole JSON)": grown(server, lambda: previous_queue(server, requests, True)),
        "scrapy-redis (pickle)": grown(server, lambda: scrapy_redis_queue(server, requests)),
    }
    bloom = DupefilterConfig("bloom", capacity=count)
    seen = {  # the filter's keys alone (MEMORY USAGE): the requests wait in other keys here
        "this frontier, bloom 1e-7 (full)": project_seen(server, requests, bloom),
        "this frontier, exact": project_seen(server, requests, DupefilterConfig("exact")),
        "scrapy-redis (hex SHA1 set)": scrapy_redis_seen(server, requests),
    }
    return (
        {name: value / count for name, value in queued.items()},
        {name: value / count for name, value in seen.items()},
    )


def print_table(title: str, figures: dict[str, float], peer: str) -> None:
    print(f"\n{title}")
    for name, value in figures.items():
        print(f"  {name:36} {value:8.1f} B   {value / figures[peer]:5.2f}x {peer}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=50_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as data:
        process = start_redis(free_port(), Path(data), "--appendonly", "no")
        try:
            server = redis.Redis(port=process.port)
            version = server.info("server").get("valkey_version") or server.info()["redis_version"]
            queued, seen = measure(server, args.requests)
        finally:
            process.stop()
    sample = pending(profile_requests(1)[0], b"\0" * 8, SPIDER).json
    print(f"{args.requests:,} profile requests, server {version}; record: {sample}")
    stock = "scrapy-redis (pickle)"
    print_table("Bytes per queued request", queued, stock)
    print_table("Bytes per seen URL", seen, "scrapy-redis (hex SHA1 set)")
    ours = queued["this frontier"]
    ok = ours <= TARGET_BYTES and ours <= TARGET_VS_STOCK * queued[stock]
    verdict = "met" if ok else "MISSED"
    print(f"\nTarget <= {TARGET_BYTES} B and <= {TARGET_VS_STOCK}x scrapy-redis: {verdict}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
