"""The idle spider and the frontier: whether the fleet has work left, and start entries.

Mixed into the scheduler (see ``scheduler.py``): the spider_idle handler keeps the crawl open
while the fleet has work, asking Redis only when this worker knows of none itself, and the
start-entry feed (``spiders/feed.py``) leases its entries here.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING

from redis.exceptions import RedisError
from scrapy.exceptions import DontCloseSpider

from crawler.frontier.queue import requests_left

if TYPE_CHECKING:
    from scrapy import Request

    from crawler.frontier.leases import StartLeases
    from crawler.frontier.marker import FrontierMarker
    from crawler.frontier.options import FrontierSettings
    from crawler.frontier.outbox import Outbox
    from crawler.frontier.queue import Frontier
    from crawler.frontier.turns import EngineCalls, HeldTurns


class IdleSpider:
    """What the idle spider asks of the frontier scheduler it is mixed into."""

    frontier: Frontier | None
    config: FrontierSettings
    marker: FrontierMarker
    outbox: Outbox
    starts: StartLeases
    worker: str
    _ready: deque[Request]
    _held: HeldTurns
    _queue_size: int
    _next_due: float
    _next_pop: float
    _engine: EngineCalls

    def flush(self) -> bool:
        raise NotImplementedError  # the scheduler's round trip

    def settle(self) -> bool:
        raise NotImplementedError  # the same, riders not due yet included

    def _in_backoff(self) -> bool:
        raise NotImplementedError

    def _outage(self, exc: RedisError) -> None:
        raise NotImplementedError

    def keep_open_while_work_left(self) -> None:
        """spider_idle handler: the crawl does not close while the fleet has work left.

        The engine looks again after IDLE_POLL_INTERVAL; while this worker holds work whose
        next pop waits, as late as that pop (the look would find it busy)."""
        waits = self._next_pop if self.known_busy() else 0.0
        self._engine.look_again_soon(self.config.idle_poll, waits)
        if self._work_left():
            raise DontCloseSpider

    def _work_left(self) -> bool:
        """Whether the fleet has work left: requests queued, leased or delayed in Redis, or
        updates of this worker not written yet (written first, riders too: a lease whose ack
        waits for a rider is settled now). While Redis is away, there may be."""
        if self.frontier is None:
            return False
        if self.known_busy():
            return True
        if self._in_backoff() or not self.settle():
            return True
        try:
            sizes = self.frontier.sizes()
        except RedisError as exc:
            self._outage(exc)
            return True
        return requests_left(sizes)

    def known_busy(self) -> bool:
        """Whether this worker knows of work left without asking Redis: requests in hand or
        buffered, requests queued at its last pop, or a delayed request due later (the pop
        due then looks again)."""
        if self._ready or self._held or self.outbox.pushes or self._queue_size > 0:
            return True
        return self._next_due > 0

    def no_start_entries_known(self) -> bool:
        """Whether this worker, busy with work it knows of, saw the start list empty lately
        (the marker's read rides its pops): the idle spider need not ask for entries."""
        return self.known_busy() and self.marker.saw_no_start_entries(2 * self.marker.interval)

    def lease_start_entries(self, count: int) -> list[bytes]:
        """Lease up to ``count`` start entries; they come back if this worker dies first."""
        assert self.frontier is not None
        if self._in_backoff():
            return []
        try:
            members = self.frontier.pop_start(count, self.config.lease_seconds, self.worker)
        except RedisError as exc:
            self._outage(exc)
            return []
        self.starts.leased(members)
        return members

    def expect_start_requests(self, member: bytes, count: int) -> None:
        """The entry ``member`` became ``count`` requests (tagged with START_META)."""
        self.starts.expect(member, count)
