"""What the fleet's commands read from Redis: the sizing of a spider now (frontier sizes, the
fleet's minutes and the queue's head, in three round trips) and this machine's live workers."""

from __future__ import annotations

import socket
import time
from typing import TYPE_CHECKING, Any

from crawler.connection import decode_counts
from crawler.frontier.queue import requests_per_entry, spider_frontier
from crawler.keys import FleetKeys, autoscaled_key
from crawler.observability.publisher import ENTRY_STATS, RATE_MINUTES
from crawler.observability.report import live_workers
from crawler.observability.sizing import Sizing, read_sizing
from crawler.observability.starts import Starts, read_starts, write_starts

if TYPE_CHECKING:
    from scrapy.settings import BaseSettings

    from crawler.connection import RedisClient


def fleet_sizing(
    server: RedisClient,
    settings: BaseSettings,
    spider: str,
) -> Sizing:
    """What the work of ``spider`` allows now (``crawler.observability.sizing``)."""
    sizes = spider_frontier(server, settings, spider).sizes()
    keys = FleetKeys.from_settings(settings, spider)
    current = int(time.time() // 60)
    window = range(current - RATE_MINUTES + 1, current + 1)
    pipe = server.pipeline(transaction=False)
    pipe.hmget(keys.stats, *ENTRY_STATS)
    for minute in window:
        pipe.hgetall(keys.minute(minute))
    replies: list[Any] = pipe.execute()
    minutes = {minute: decode_counts(raw) for minute, raw in zip(window, replies[1:], strict=True)}
    per_entry = requests_per_entry(dict(zip(ENTRY_STATS, replies[0], strict=True)))
    return read_sizing(server, settings, spider, sizes, minutes, per_entry)


def local_beats(
    server: RedisClient, settings: BaseSettings, spider: str
) -> dict[int, tuple[int, float]]:
    """The live workers of ``spider`` on this machine by pid: the pages each reported in its
    heartbeat and when it started (Unix time)."""
    host = socket.gethostname()
    beats = live_workers(server, FleetKeys.from_settings(settings, spider))
    return {
        beat["pid"]: (int(beat.get("pages", 0)), float(beat.get("started", 0)))
        for beat in beats
        if beat.get("host") == host and isinstance(beat.get("pid"), int)
    }


class RedisMark:
    """When the autoscaler last changed the fleet of ``spider``, kept in Redis (a day)."""

    def __init__(self, server: RedisClient, spider: str) -> None:
        self.server = server
        self.key = autoscaled_key(spider)

    def read(self) -> float:
        raw: Any = self.server.get(self.key)
        return float(raw) if raw else float("-inf")

    def write(self, when: float) -> None:
        self.server.set(self.key, repr(when), ex=86_400)


class RedisStarts:
    """The record of the launches of ``spider`` (crawler/fleet/backoff.py), kept in Redis."""

    def __init__(self, server: RedisClient, spider: str) -> None:
        self.server = server
        self.spider = spider

    def read(self) -> Starts:
        return read_starts(self.server, self.spider)

    def write(self, starts: Starts) -> None:
        write_starts(self.server, self.spider, starts)


def beats_by_host(server: RedisClient, settings: BaseSettings, spider: str) -> dict[str, float]:
    """Pages per minute of the live workers of ``spider``, by the host they run on."""
    beats = live_workers(server, FleetKeys.from_settings(settings, spider))
    rates: dict[str, float] = {}
    for beat in beats:
        host = str(beat.get("host", ""))
        rates[host] = rates.get(host, 0.0) + float(beat.get("pages_per_min", 0) or 0)
    return rates
