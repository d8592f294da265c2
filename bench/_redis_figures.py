"""What a benchmark reads from the Redis server itself: CPU used, commands processed (Lua
scripts' inner commands included) and bytes held by keys."""

from __future__ import annotations

from typing import Any

import redis


def redis_cpu(client: redis.Redis) -> float:
    """CPU seconds the Redis server has used (user + system, all its threads)."""
    info: dict[str, Any] = client.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def redis_commands(client: redis.Redis) -> int:
    """Commands the server has processed (``total_commands_processed``)."""
    info: dict[str, Any] = client.info("stats")
    return int(info["total_commands_processed"])


def redis_bytes(client: redis.Redis, *patterns: str) -> int:
    """Bytes held by the keys matching the glob ``patterns`` (braces matched literally)."""
    total = 0
    for pattern in patterns:
        escaped = pattern.replace("{", "\\{").replace("}", "\\}")
        for key in client.scan_iter(match=escaped, count=1000):
            total += int(client.memory_usage(key, samples=0) or 0)
    return total


def frontier_leftovers(client: redis.Redis, spider: str) -> dict[str, int]:
    """What a finished crawl on the project's frontier should not leave behind: requests
    queued, leased, delayed, or dead letters."""
    from crawler.frontier.dupefilter import DupefilterConfig
    from crawler.frontier.queue import Frontier
    from crawler.keys import FrontierKeys

    sizes = Frontier(client, FrontierKeys(spider, ""), DupefilterConfig()).sizes()
    return {name: sizes[size] for name, size in _LEFTOVER_SIZES.items()}


_LEFTOVER_SIZES = {"queue": "queue", "leases": "leased", "delayed": "delayed", "dead": "dead"}
