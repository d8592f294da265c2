"""Probes run inside a benchmark's crawl process: Redis round trips and commands counted per
kind (by wrapping redis-py's connection), and the BenchProbe extension that times the crawl and
writes what it measured to BENCH_PROBE_FILE.
"""

from __future__ import annotations

import json
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from scrapy import Spider, signals

# Where the crawl process finds BenchProbe (EXTENSIONS).
MODULE = "bench._probes"


_REDIS_COUNTS: Counter[str] = Counter()
_next_kind = ["?"]


def install_redis_counters() -> None:
    """Count round trips (socket writes a reply is waited for) and commands, per kind."""
    from redis.connection import AbstractConnection

    if getattr(AbstractConnection, "_bench_counted", False):
        return
    send_packed: Callable[..., Any] = AbstractConnection.send_packed_command
    send_command: Callable[..., Any] = AbstractConnection.send_command
    pack_commands: Callable[..., Any] = AbstractConnection.pack_commands
    counts = _REDIS_COUNTS

    def counted_send_packed(self: Any, command: Any, check_health: bool = True) -> Any:
        counts["round_trips"] += 1
        counts["rt:" + _next_kind[0]] += 1
        _next_kind[0] = "?"
        return send_packed(self, command, check_health)

    def counted_send_command(self: Any, *args: Any, **kwargs: Any) -> Any:
        name = str(args[0]).upper() if args else "?"
        counts["commands"] += 1
        counts["cmd:" + name] += 1
        _next_kind[0] = name
        return send_command(self, *args, **kwargs)

    def counted_pack_commands(self: Any, commands: Any) -> Any:
        commands = list(commands)
        names = [str(command[0]).upper() for command in commands]
        counts["commands"] += len(names)
        counts.update("cmd:" + name for name in names)
        _next_kind[0] = "pipeline[" + ",".join(sorted(set(names))) + "]"
        return pack_commands(self, commands)

    setattr(AbstractConnection, "send_packed_command", counted_send_packed)  # noqa: B010
    setattr(AbstractConnection, "send_command", counted_send_command)  # noqa: B010
    setattr(AbstractConnection, "pack_commands", counted_pack_commands)  # noqa: B010
    setattr(AbstractConnection, "_bench_counted", True)  # noqa: B010


class BenchProbe:
    """Extension: times the crawl, counts Redis traffic, writes it all to BENCH_PROBE_FILE."""

    def __init__(self, crawler: Any) -> None:
        install_redis_counters()
        self.crawler = crawler
        self.opened = 0.0
        self.first = 0.0
        self.last = 0.0
        self.responses = 0
        self.cpu_opened = 0.0
        crawler.signals.connect(self.spider_opened, signal=signals.spider_opened)
        crawler.signals.connect(self.response_received, signal=signals.response_received)
        crawler.signals.connect(self.spider_closed, signal=signals.spider_closed)

    @classmethod
    def from_crawler(cls, crawler: Any) -> BenchProbe:
        return cls(crawler)

    def spider_opened(self) -> None:
        self.opened = time.perf_counter()
        self.cpu_opened = time.process_time()

    def response_received(self) -> None:
        now = time.perf_counter()
        if not self.responses:
            self.first = now
        self.last = now
        self.responses += 1

    def spider_closed(self, spider: Spider, reason: str) -> None:
        stats = {
            key: value
            for key, value in self.crawler.stats.get_stats().items()
            if isinstance(value, int | float) and not isinstance(value, bool)
        }
        scheduler = self.crawler.engine.scheduler if self.crawler.engine else None
        result = {
            "reason": reason,
            "stats": stats,
            "pages_parsed": getattr(spider, "pages_parsed", 0),
            "responses": self.responses,
            "crawl_seconds": self.last - self.opened,
            "first_to_last_seconds": self.last - self.first,
            "cpu_seconds": time.process_time() - self.cpu_opened,
            "redis": dict(_REDIS_COUNTS),
            "process_dupefilter_bytes": _memory_dupefilter_bytes(scheduler),
        }
        Path(self.crawler.settings.get("BENCH_PROBE_FILE")).write_text(json.dumps(result))


def _memory_dupefilter_bytes(scheduler: Any) -> int:
    """Size of Scrapy's in-memory fingerprint set (the set and its bytes objects)."""
    fingerprints = getattr(getattr(scheduler, "df", None), "_fingerprints", None)
    if not isinstance(fingerprints, set):
        return 0
    return sys.getsizeof(fingerprints) + sum(sys.getsizeof(fp) for fp in fingerprints)
