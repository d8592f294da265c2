"""The idle spider and the frontier: whether the fleet has work left, and start entries.

Mixed into the scheduler (see ``scheduler.py``): the spider_idle handler keeps the crawl open
while the fleet has work, asking Redis only when this worker knows of none itself, and the
start-entry feed (``spiders/feed.py``) leases its entries here. Once the feed has asked, the
next batch is leased ahead with the pop that leaves this worker's queue short of a batch
(stat ``frontier/start_entries_ahead``), so reading start entries costs no round trip of its
own while the crawl goes on.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from redis.cluster import RedisCluster
from redis.exceptions import RedisError
from scrapy.exceptions import DontCloseSpider

from crawler.frontier.queue import queue_sizes, read_sizes, requests_left, start_members
from crawler.frontier.riders import Rider, first_error
from crawler.frontier.server_check import check_frontier, checked_frontier

logger = logging.getLogger(__name__)

if TYPE_CHECKING:
    from scrapy import Request, Spider
    from scrapy.crawler import Crawler

    from crawler.frontier.leases import StartLeases
    from crawler.frontier.marker import FrontierMarker
    from crawler.frontier.options import FrontierSettings
    from crawler.frontier.outbox import Outbox
    from crawler.frontier.queue import Frontier
    from crawler.frontier.riders import Riders
    from crawler.frontier.turns import EngineCalls, HeldTurns

START_RIDER = "start-entries"
START_READ_RIDER = "start-read"  # an idle worker's start entries
SIZES_RIDER = "sizes"  # the frontier's sizes, last in each round trip of an idle worker's drain


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
    riders: Riders
    _start_batch: int  # the feed's batch size (0: no feed)
    _none_ahead: float  # when a batch leased ahead came back empty
    _read_ahead_answered: float  # when the start-up read ahead came back (0: looked at)
    _trips: int  # round trips so far
    _sizes_read: tuple[int, float, dict[str, int]] | None  # trips then, when, sizes

    def flush(self) -> bool:
        raise NotImplementedError  # the scheduler's round trip

    def drain(self, before_trip: Callable[[], None] | None = None) -> bool:
        raise NotImplementedError  # the same, riders not due yet included

    def _in_backoff(self) -> bool:
        raise NotImplementedError

    def _outage(self, exc: RedisError) -> None:
        raise NotImplementedError

    def _count(self, key: str, value: int = 1) -> None:
        raise NotImplementedError

    def _resume(self, spider: Spider, crawler: Crawler) -> None:
        """Take up the fleet's frontier as the scheduler opens: checked (SettingsError) and
        its sizes read in one round trip, unless ``scrapy crawl`` did that on this client (a
        cluster reads the sizes apart); logged if it holds work."""
        frontier, mode = self.frontier, self.config.dupefilter.mode
        assert frontier is not None
        try:
            checked, sizes = checked_frontier(crawler, frontier.server, frontier.keys, mode)
            if not checked:
                sizes = check_frontier(frontier.server, frontier.keys, mode)
            if sizes is None:
                sizes = frontier.sizes()
        except RedisError as exc:
            # Redis answered before the engine was built (crawler.settings_check): this is an
            # outage, ridden out like one later in the crawl.
            self._outage(exc)
            return
        self._resumed(spider, sizes)

    def _resumed(self, spider: Spider, sizes: dict[str, int]) -> None:
        self._queue_size = sizes["queue"] + sizes["delayed"]
        if self._queue_size or sizes["leased"]:
            logger.info(
                "Resuming frontier of %s: %d queued, %d leased, %d delayed, %d dead",
                spider.name,
                sizes["queue"],
                sizes["leased"],
                sizes["delayed"],
                sizes["dead"],
                extra={"spider": spider},
            )

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
        sizes = self.fleet_sizes()
        return sizes is None or requests_left(sizes)

    def fleet_sizes(self) -> dict[str, int] | None:
        """The frontier's sizes in Redis once this worker has written all it owes, for the
        idle spider's look at the fleet's end; None while this worker knows of work left or
        Redis is away. The idle handlers of one look (this scheduler's, the start feed's)
        share one read: a read from this look is used again while no round trip went since."""
        if self.frontier is None:
            return {}
        if self.known_busy() or self._in_backoff() or not self._drain_reading_sizes():
            return None
        now, last = time.monotonic(), self._sizes_read
        fresh = last is not None and now - last[1] < self.config.idle_poll / 2
        if last is not None and fresh and last[0] == self._trips:
            return last[2]
        try:
            sizes = self.frontier.sizes()
        except RedisError as exc:
            self._outage(exc)
            return None
        self._sizes_read = (self._trips, now, sizes)
        return sizes

    def _drain_reading_sizes(self) -> bool:
        """:meth:`drain`, each of its round trips reading the frontier's sizes last: the read
        of the last one (kept in ``_sizes_read``) sees all this worker wrote, and the idle
        look needs no round trip of its own. On a cluster, a plain drain (a pipeline there
        would first ask a node to parse the queue's script)."""
        frontier = self.frontier
        assert frontier is not None
        if isinstance(frontier.server, RedisCluster):
            return self.drain()

        def write(pipe: Any) -> None:
            queue_sizes(pipe, frontier.keys)

        def arrived(replies: list[Any]) -> None:
            if first_error(replies) is None:
                self._sizes_read = (self._trips, time.monotonic(), read_sizes(replies))

        def board() -> None:  # after the riders waiting: their writes are counted
            self.riders.add(SIZES_RIDER, Rider(write, arrived), 0)

        try:
            return self.drain(before_trip=board)
        finally:
            self.riders.cancel(SIZES_RIDER)  # not sent (Redis away)

    def known_busy(self) -> bool:
        """Whether this worker knows of work left without asking Redis: requests in hand or
        buffered, requests queued at its last pop, or a delayed request due later (the pop
        due then looks again)."""
        in_hand = self._ready or self._held or self.outbox.pushes or self.starts.ahead
        return bool(in_hand) or self._queue_size > 0 or self._next_due > 0

    def no_start_entries_known(self) -> bool:
        """Whether this worker, busy with work it knows of, saw the start list empty lately
        (the marker's read rides its pops): the idle spider need not ask for entries."""
        if self.starts.ahead:
            return False
        return self.known_busy() and self.marker.saw_no_start_entries(2 * self.marker.interval)

    def lease_start_entries(self, count: int) -> list[bytes]:
        """Lease up to ``count`` start entries; they come back if this worker dies first. The
        ones leased ahead with a round trip (:meth:`prefetch_start_entries`) come first."""
        assert self.frontier is not None
        self._start_batch = count
        answered, self._read_ahead_answered = self._read_ahead_answered, 0.0
        if self.starts.ahead or time.monotonic() - answered < self.config.idle_poll:
            return self.starts.take_ahead()  # what a read since the last look found
        if self._in_backoff():
            return []
        try:
            members = self._pop_start(self.frontier, count)
        except RedisError as exc:
            self._outage(exc)
            return []
        self.starts.leased(members)
        return members

    def _pop_start(self, frontier: Frontier, count: int) -> list[bytes]:
        """Lease start entries. An idle worker (no work in hand) leases them with the round
        trips that write all it owes, riders included, and read the frontier's sizes last,
        for :meth:`fleet_sizes` in this look."""
        seconds, worker = self.config.lease_seconds, self.worker
        if self.known_busy() or isinstance(frontier.server, RedisCluster):
            return frontier.pop_start(count, seconds, worker)
        read: list[list[Any]] = []
        self.riders.add(START_READ_RIDER, Rider(self._start_lease(count), read.append), 0)
        self._drain_reading_sizes()  # an outage is the scheduler's to note
        self.riders.cancel(START_READ_RIDER)  # not sent (Redis away): nothing was leased
        if not read:
            return []
        if (error := first_error(read[0])) is not None:
            raise error
        return start_members(read[0][0])

    def expect_start_requests(self, member: bytes, count: int) -> None:
        """The entry ``member`` became ``count`` requests (tagged with START_META)."""
        self.starts.expect(member, count)

    def read_start_entries_ahead(self, count: int) -> None:
        """At start, before the spider's own requests (its arguments) are written: the round
        trip that writes them also leases the first ``count`` start entries, and the feed's
        first look, if within ``IDLE_POLL_INTERVAL`` of that read, takes what it found, or
        that it found none, without a round trip."""
        if self.frontier is None or count < 1:
            return
        self._start_batch = count

        def read(replies: list[Any]) -> None:
            self._start_prefetched(replies)
            if replies and first_error(replies) is None:
                self._read_ahead_answered = time.monotonic()

        self.riders.add(START_RIDER, Rider(self._start_lease(count), read), self.config.idle_poll)

    def prefetch_start_entries(self) -> None:
        """Have the next round trip lease the feed's next batch of start entries once this
        worker's queue holds less than a batch: the feed finds them at its next look, without
        a round trip of its own. Not while the start list was seen empty lately."""
        if not self._start_batch or self.starts.ahead or self.riders.waiting(START_RIDER):
            return
        if self._queue_size >= self._start_batch or self.frontier is None:
            return
        within = 2 * self.marker.interval
        if self.marker.saw_no_start_entries(within) or time.monotonic() - self._none_ahead < within:
            return
        lease = self._start_lease(self._start_batch)
        self.riders.add(START_RIDER, Rider(lease, self._start_prefetched), self.config.idle_poll)

    def _start_lease(self, count: int) -> Callable[[Any], None]:
        """A rider's write: the lease of up to ``count`` start entries, queued on a pipeline."""
        frontier, seconds, worker = self.frontier, self.config.lease_seconds, self.worker
        assert frontier is not None

        def write(pipe: Any) -> None:
            frontier.pop_start(count, seconds, worker, client=pipe)

        return write

    def _start_prefetched(self, replies: list[Any]) -> None:
        if not replies or first_error(replies) is not None:
            return  # Redis refused the pop: the feed asks on its own
        members = start_members(replies[0])
        if not members:
            self._none_ahead = time.monotonic()
        self.starts.ahead.extend(members)
        self._count("frontier/start_entries_ahead", len(members))

    def give_back_start_entries(self) -> None:
        """At close: the start entries leased ahead and not taken by the feed go back to the
        list at once (else they would wait for their leases to expire)."""
        members, self.starts.ahead = self.starts.ahead, []
        if members and self.frontier is not None and not self._in_backoff():
            try:
                self.frontier.give_back_start(members)
            except RedisError as exc:
                logger.warning("Could not give back %d start entries: %s", len(members), exc)
