"""The fleet's end: whether a worker whose spider is idle may close, and start-entry leases.

:class:`FleetIdle` is the spider_idle handler the scheduler connects: the crawl stays open
while the fleet has work left, and Redis is asked only when this worker knows of none itself.
It also leases start entries for the feed (``spiders/feed.py``): an entry comes back to its
list if the worker dies before the entry's requests are in the frontier.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from redis.exceptions import RedisError
from scrapy.exceptions import DontCloseSpider

from crawler.frontier.queue import requests_left
from crawler.frontier.server_check import check_frontier

if TYPE_CHECKING:
    from scrapy import Spider

    from crawler.frontier.leases import StartLeases
    from crawler.frontier.marker import FrontierMarker
    from crawler.frontier.queue import Frontier
    from crawler.frontier.turns import EngineCalls

logger = logging.getLogger(__name__)


@dataclass
class WorkerState:
    """What FleetIdle asks of the scheduler it serves: whether it knows of work left without
    asking Redis, when its next pop is due (monotonic time), how to write all it owes (False
    while Redis is away), whether Redis was found away lately, and where an outage goes."""

    known_busy: Callable[[], bool]
    next_pop: Callable[[], float]
    drain: Callable[[], bool]
    in_backoff: Callable[[], bool]
    outage: Callable[[RedisError], None]


class FleetIdle:
    """The idle spider's view of the fleet's frontier, and this worker's start-entry leases."""

    def __init__(
        self,
        frontier: Frontier,
        worker: WorkerState,
        starts: StartLeases,
        marker: FrontierMarker,
        engine: EngineCalls,
        idle_poll: float,
        lease: tuple[str, float],
    ) -> None:
        self.frontier = frontier
        self.worker = worker
        self.starts = starts
        self.marker = marker
        self.engine = engine
        self.idle_poll = idle_poll
        self.worker_id, self.lease_seconds = lease

    def resume(self, spider: Spider) -> dict[str, int] | None:
        """Take up the fleet's frontier as the scheduler opens: checked (SettingsError), its
        sizes read and logged if it holds work. None while Redis is away."""
        frontier = self.frontier
        try:
            check_frontier(frontier.server, frontier.keys, frontier.dupefilter.mode)
            sizes = frontier.sizes()
        except RedisError as exc:
            # Redis answered before the engine was built (crawler.preflight): this is an
            # outage, ridden out like one later in the crawl.
            self.worker.outage(exc)
            return None
        if sizes["queue"] or sizes["delayed"] or sizes["leased"]:
            logger.info(
                "Resuming frontier of %s: %d queued, %d leased, %d delayed, %d dead",
                spider.name,
                sizes["queue"],
                sizes["leased"],
                sizes["delayed"],
                sizes["dead"],
                extra={"spider": spider},
            )
        return sizes

    def keep_open_while_work_left(self) -> None:
        """spider_idle handler: the crawl does not close while the fleet has work left.

        The engine looks again after IDLE_POLL_INTERVAL; while this worker holds work whose
        next pop waits, as late as that pop (the look would find it busy)."""
        waits = self.worker.next_pop() if self.worker.known_busy() else 0.0
        self.engine.look_again_soon(self.idle_poll, waits)
        sizes = self.fleet_sizes()
        if sizes is None or requests_left(sizes):
            raise DontCloseSpider

    def fleet_sizes(self) -> dict[str, int] | None:
        """The frontier's sizes in Redis once this worker has written all it owes (piggybacked
        commands too: a lease whose ack waits for one is settled now), for the idle spider's
        look at the fleet's end; None while this worker knows of work left or Redis is away."""
        if self.worker.known_busy() or self.worker.in_backoff() or not self.worker.drain():
            return None
        try:
            return self.frontier.sizes()
        except RedisError as exc:
            self.worker.outage(exc)
            return None

    def no_start_entries_known(self) -> bool:
        """Whether this worker, busy with work it knows of, saw the start list empty lately
        (the marker's read rides its pops): the feed need not ask for entries."""
        return self.worker.known_busy() and self.marker.saw_no_start_entries()

    def lease_start_entries(self, count: int) -> list[bytes]:
        """Lease up to ``count`` start entries; they come back if this worker dies first."""
        if self.worker.in_backoff():
            return []
        try:
            members = self.frontier.pop_start(count, self.lease_seconds, self.worker_id)
        except RedisError as exc:
            self.worker.outage(exc)
            return []
        self.starts.leased(members)
        return members
