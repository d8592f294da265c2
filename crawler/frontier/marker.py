"""Noticing a frontier that vanished under a running worker.

A Redis without persistence that restarts comes back empty, and so does one that is flushed:
the queue, the leases, the delayed set, the start entries, the dead letters and the duplicate
filter are gone, and the workers would carry on as if the crawl had simply finished. So the
frontier carries a marker, ``{spider}:frontier``, holding a random token written when the
frontier is created (by the first worker that finds none). Each worker remembers the token it
found and, when it pops requests, reads it back together with the frontier's sizes, at most
every CHECK_INTERVAL seconds, riding the pop's round trip (see ``riders.py``). A marker gone, or
holding another token, means the frontier is gone. If it held work when last seen, or this
worker holds leases, the worker logs one ERROR naming what was lost (the sizes it last saw) and
counts it (``frontier/lost``, ``frontier/lost/<queued|delayed|leased|start>``); a frontier that
was empty anyway is only a WARNING. The worker then writes a new marker (or takes the one
another worker wrote first), so the crawl goes on with whatever is pushed next, and a later loss
is noticed again.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from redis.exceptions import RedisError

from crawler.frontier.queue import SIZE_NAMES, WORK_LEFT, queue_sizes, read_sizes
from crawler.frontier.riders import Rider, Riders, first_error
from crawler.keys import frontier_marker_key

if TYPE_CHECKING:
    from scrapy.statscollectors import StatsCollector

    from crawler.frontier.queue import Frontier

logger = logging.getLogger(__name__)

# Seconds between two reads of the marker by one worker.
CHECK_INTERVAL = 2.0
RIDER = "frontier-marker"


class FrontierMarker:
    """The marker of one spider's frontier, as one worker sees it."""

    def __init__(
        self, frontier: Frontier, stats: StatsCollector | None, interval: float = CHECK_INTERVAL
    ) -> None:
        self.frontier = frontier
        self.stats = stats
        self.interval = interval
        self.key = frontier_marker_key(frontier.keys.spider)
        self.token: bytes | None = None
        self.seen: dict[str, int] = dict.fromkeys(SIZE_NAMES, 0)
        self._seen_at = 0.0
        self._next_check = 0.0

    def ride(self, riders: Riders, leased_here: Callable[[], int]) -> None:
        """Have the marker read with the next round trip (a pop), at most every ``interval``
        seconds, and no later than five intervals from now."""
        now = time.monotonic()
        if now < self._next_check or riders.waiting(RIDER):
            return
        self._next_check = now + self.interval

        def read(replies: list[Any]) -> None:
            if first_error(replies) is not None:
                self._next_check = 0.0
            else:
                self._compare(replies, leased_here())

        riders.add(RIDER, Rider(self._queue_read, read, self._failed), 5 * self.interval)

    def saw_no_start_entries(self) -> bool:
        """Whether the start list was empty at a read less than two intervals ago."""
        return self.seen["start"] == 0 and time.monotonic() - self._seen_at < 2 * self.interval

    def _failed(self, exc: RedisError) -> None:
        self._next_check = 0.0

    def _compare(self, replies: list[Any], leased_here: int) -> None:
        now = time.monotonic()
        token = replies[1]  # bytes (responses are not decoded), None without a marker
        sizes = read_sizes(replies[2:])
        if self.token is not None and token != self.token:
            self._lost(leased_here, now)
        self.token = token
        self.seen, self._seen_at = sizes, now

    def _queue_read(self, pipe: Any) -> None:
        """Queue the read of the marker (written first when there is none: a worker finding
        none, or another than its own, adopts the one it reads) and of the sizes."""
        pipe.set(self.key, f"{time.time():.0f}:{uuid.uuid4().hex}", nx=True)
        pipe.get(self.key)
        queue_sizes(pipe, self.frontier.keys)

    def _lost(self, leased_here: int, now: float) -> None:
        spider, seen = self.frontier.keys.spider, self.seen
        self._count("frontier/lost", 1)
        if not (leased_here or any(seen[name] for name in WORK_LEFT)):
            logger.warning(
                "Frontier of %s was reset in Redis (restarted without persistence, flushed or "
                "purged); it held no requests when last seen. Its duplicate filter and dead "
                "letters are gone.",
                spider,
            )
            return
        for name, stat in (("queue", "queued"), ("delayed", "delayed"), ("leased", "leased")):
            self._count(f"frontier/lost/{stat}", seen[name])
        self._count("frontier/lost/start", seen["start"] + seen["start_leased"])
        logger.error(
            "Frontier of %s vanished from Redis (restarted without persistence, flushed or "
            "purged). Lost, as last seen %.0f s before: %d queued, %d delayed and %d leased "
            "requests, %d start entries (+%d leased), the duplicate filter and the dead letters. "
            "The %d requests leased by this worker are finished here; push the start entries "
            "again to crawl the rest.",
            spider,
            now - self._seen_at,
            seen["queue"],
            seen["delayed"],
            seen["leased"],
            seen["start"],
            seen["start_leased"],
            leased_here,
        )

    def _count(self, key: str, value: int) -> None:
        if value and self.stats is not None:
            self.stats.inc_value(key, value)
