"""The Scrapy scheduler on the Redis frontier: leased batches, JSON, nothing lost.

A popped request is leased to this worker, not deleted. The lease is acknowledged once the
response is handled: the callback's output consumed, its items through the pipelines and its new
requests in Redis (see the lease middlewares in ``crawler/middlewares.py``). Requests a worker
schedules are buffered and written in one script call per batch, together with the
acknowledgements they allow, so a worker that dies at any point leaves its leases to expire and
come back to the queue for another worker.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import socket
import time
import uuid
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from redis.exceptions import RedisError
from scrapy import Request, signals
from scrapy.core.scheduler import BaseScheduler
from scrapy.exceptions import DontCloseSpider
from scrapy.utils.request import request_from_dict
from twisted.internet import task
from twisted.internet.base import DelayedCall

from crawler.config import setting, setting_int
from crawler.connection import redis_from_settings
from crawler.frontier import codec as serializer
from crawler.frontier.dupefilter import DupefilterConfig, RecentlySeen
from crawler.frontier.leases import (
    LEASE_META,
    LeaseBook,
    LeaseReports,
    Op,
    StartLeases,
    lease_id_of,
    unguarded,
)
from crawler.frontier.marker import FrontierMarker
from crawler.frontier.queue import Frontier, Pacing, Pending, Popped, popped, requests_left
from crawler.frontier.records import DUE_META as DUE_META  # where callers import it from
from crawler.frontier.records import PACED_META, crawl_delay_of, passes_again, pending
from crawler.frontier.riders import Rider, Riders, first_error
from crawler.frontier.turns import PACED_GATHER, HeldTurns, lookahead, paced_pause
from crawler.keys import FrontierKeys, start_key
from crawler.settings_check import check_frontier

if TYPE_CHECKING:
    from scrapy import Spider
    from scrapy.crawler import Crawler
    from scrapy.settings import BaseSettings

    from crawler.connection import RedisClient

logger = logging.getLogger(__name__)

START_META = "frontier_start"
# New requests are written to Redis every FRONTIER_FLUSH_INTERVAL, before each pop, or once this
# many FRONTIER_BATCH_SIZEs of them wait (the page whose links they are is acknowledged after).
PUSH_BATCHES = 8
# Seconds acknowledgements (and other lease updates) may wait for a round trip that goes anyway
# (a pop, new requests), at most a sixth of FRONTIER_LEASE_SECONDS.
HOLD_ACKS = 5.0


@dataclass(frozen=True)
class FrontierSettings:
    """The scheduler's settings, read and checked once."""

    batch_size: int
    lease_seconds: int
    flush_interval: float
    dupefilter: DupefilterConfig
    local_seen: int
    idle_poll: float = 1.0

    @classmethod
    def from_settings(cls, settings: BaseSettings) -> FrontierSettings:
        return cls(
            batch_size=setting_int(settings, "FRONTIER_BATCH_SIZE", 1, 1000),
            lease_seconds=setting_int(settings, "FRONTIER_LEASE_SECONDS", 5),
            flush_interval=setting(settings, "FRONTIER_FLUSH_INTERVAL"),
            dupefilter=DupefilterConfig.from_settings(settings),
            local_seen=setting_int(settings, "DUPEFILTER_LOCAL_CACHE", 0),
            idle_poll=setting(settings, "IDLE_POLL_INTERVAL"),
        )


class FrontierScheduler(LeaseReports, BaseScheduler):
    """Scheduler whose queue, leases, delayed set, dead letters and duplicate filter are in Redis.

    Settings (crawler/settings.py): REDIS_URL, FRONTIER_BATCH_SIZE, FRONTIER_LEASE_SECONDS,
    FRONTIER_FLUSH_INTERVAL, DUPEFILTER_MODE, DUPEFILTER_CAPACITY, DUPEFILTER_ERROR_RATE,
    DUPEFILTER_LOCAL_CACHE, IDLE_POLL_INTERVAL, REDIS_START_URLS_KEY (or the spider's
    ``redis_key``). Closing never clears the frontier (see ``scrapy frontier purge``).

    The crawl closes only when the fleet has no work left: queue, leases and delayed set empty
    (the spider's own idle rule may keep it open longer). Redis being away is never a
    request's failure: buffers wait and nothing is dropped.
    """

    def __init__(self, crawler: Crawler, server: RedisClient, config: FrontierSettings) -> None:
        self.crawler = crawler
        self.server = server
        self.config = config
        self.worker = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
        self.frontier: Frontier | None = None
        self.pacing: Pacing | None = None
        self.leases = LeaseBook()
        self._ready: deque[Request] = deque()
        self._held = HeldTurns()
        self._pushes: list[Pending] = []
        self.starts = StartLeases()
        self._seen_here = RecentlySeen(config.local_seen)
        self._suspects: set[str] = set()
        self._queue_size = 0
        self._next_pop = 0.0
        self._empty_pops = 0
        self._backoff = 0.0
        self._outage_since: float | None = None
        self._loops: list[task.LoopingCall] = []
        self._wake: DelayedCall | None = None
        self._wake_at = 0.0
        self._next_due = 0.0
        self._held_since: float | None = None
        self.riders = Riders.of(crawler)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> FrontierScheduler:
        return cls(
            crawler,
            redis_from_settings(crawler.settings),
            FrontierSettings.from_settings(crawler.settings),
        )

    # --- Scrapy's scheduler interface ------------------------------------------------------------

    def open(self, spider: Spider) -> None:
        settings = self.crawler.settings
        keys = FrontierKeys(spider.name, start_key(settings, spider))
        self.frontier = Frontier(self.server, keys, self.config.dupefilter)
        self.marker = FrontierMarker(self.frontier, self.crawler.stats)
        pacing = downloader_pacing(self.crawler)
        ahead = lookahead(self.config.lease_seconds)
        self.pacing = None if pacing is None else dataclasses.replace(pacing, ahead=ahead)
        self.riders.carried = True
        self.crawler.signals.connect(self.keep_open_while_work_left, signal=signals.spider_idle)
        try:
            check_frontier(self.server, keys, self.config.dupefilter.mode)
            sizes = self.frontier.sizes()
        except RedisError as exc:
            # Redis answered before the engine was built (crawler.settings_check): this is an
            # outage, ridden out like one later in the crawl.
            self._outage(exc)
        else:
            self._resume(spider, sizes)
        self._start_loop(self._tick, self.config.flush_interval)
        self._start_loop(self.renew, self.config.lease_seconds / 3)

    def close(self, reason: str) -> None:
        for loop in self._loops:
            if loop.running:
                loop.stop()
        if self._wake is not None and self._wake.active():
            self._wake.cancel()
        self.crawler.signals.disconnect(self.keep_open_while_work_left, signal=signals.spider_idle)
        self._ready.clear()
        self._held.clear()
        self.leases.release_all()
        self._backoff = 0.0
        # Twice: riders of the first round trip (revisits) may let more leases be settled.
        if not (self.flush() and self.flush()):
            logger.error(
                "Could not reach Redis at close: %d requests and %d lease updates not written; "
                "their leases expire and other workers take them over",
                len(self._pushes),
                len(self.leases.ops),
            )

    def has_pending_requests(self) -> bool:
        """Requests this worker can get now or at its next pop. Delayed requests and other
        workers' leases keep the crawl open through :meth:`keep_open_while_work_left`, so an
        idle spider still runs its idle handlers (new start entries) while they wait."""
        return bool(self._ready or self._held or self._pushes or self._queue_size > 0)

    def enqueue_request(self, request: Request) -> bool:
        request.errback = unguarded(request.errback)
        lease_id = request.meta.pop(LEASE_META, None)
        start_member = request.meta.pop(START_META, None)
        assert self.crawler.request_fingerprinter is not None
        fingerprint = self.crawler.request_fingerprinter.fingerprint(request)
        again = passes_again(request)
        scheduled = request.dont_filter or again or self._first_time_here(fingerprint)
        if scheduled:
            self._pushes.append(pending(request, fingerprint, self.crawler.spider, again))
            self._pop_soon()  # the engine's next ask writes it and may get it straight back
            self._count("scheduler/enqueued/redis")
        if lease_id is not None:
            self.leases.replaces(lease_id)
        if start_member is not None:
            self.starts.pushed(start_member)
        if len(self._pushes) >= PUSH_BATCHES * self.config.batch_size:
            self.flush()
        return scheduled

    def _first_time_here(self, fingerprint: bytes) -> bool:
        """False for a fingerprint this worker scheduled before: the fleet's filter has it, so
        it is dropped here without serializing it or asking Redis."""
        if self.config.dupefilter.mode == "none" or self._seen_here.first_time(fingerprint):
            return True
        self._count("dupefilter/filtered")
        return False

    def next_request(self) -> Request | None:
        now = time.monotonic()
        self._ready.extend(self._held.come())
        if not self._ready and now >= self._next_pop:
            self._refill()
            self._ready.extend(self._held.come())
        if not self._ready:
            if self.pacing is not None and self._next_pop > now and self.has_pending_requests():
                self._wake_engine_in(self._next_pop - now)  # not only at the 5 s heartbeat
            if (held := self._held.next_in()) is not None:
                self._wake_engine_in(held)
            return None
        request = self._ready.popleft()
        self.leases.move(lease_id_of(request), "downloading")
        self._count("scheduler/dequeued/redis")
        return request

    def keep_open_while_work_left(self) -> None:
        """spider_idle handler: the crawl does not close while the fleet has work left."""
        self._look_again_soon()
        if self._work_left():
            raise DontCloseSpider

    def _look_again_soon(self) -> None:
        """Have the engine look at the idle spider again after IDLE_POLL_INTERVAL, not only at
        its 5-second heartbeat: new start entries and the fleet's end are noticed sooner. While
        the next pop waits (for a delayed request's due time, or after empty pops), it looks
        again when that pop is due, at most four IDLE_POLL_INTERVALs later."""
        slot = getattr(self.crawler.engine, "_slot", None)
        if slot is not None and slot.closing is None:
            poll = self.config.idle_poll
            slot.nextcall.schedule(min(4 * poll, max(poll, self._next_pop - time.monotonic())))

    # --- start entries ---------------------------------------------------------------------------

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

    # --- internals -------------------------------------------------------------------------------

    def flush(self) -> bool:
        """Write buffered requests, then the lease updates they allow, and whatever rides
        along (see ``riders.py``), in one round trip; False if Redis is away."""
        return self._trip(pop=False)[0]

    def _trip(self, pop: bool) -> tuple[bool, Popped | None]:
        """One round trip: buffered requests, lease and start-entry updates, then the pop if
        ``pop``, then the riders waiting. Returns whether it went, and what the pop leased."""
        buffered = bool(self._pushes or self.leases.ops or self.starts.acks)
        if self._in_backoff():
            return not buffered, None
        if not (buffered or pop or self.riders.due()):
            return True, None
        assert self.frontier is not None
        pushes, ops, start_acks = self._pushes, self.leases.ops, self.starts.acks
        pipe = self.server.pipeline(transaction=False)
        for first in range(0, len(pushes), 500):
            self.frontier.schedule(pushes[first : first + 500], client=pipe)
        if ops:
            self.frontier.settle(ops, self.worker, self.config.lease_seconds, client=pipe)
        self.frontier.ack_start(start_acks, client=pipe)
        if pop:
            config = self.config
            args = (config.batch_size, config.lease_seconds, self.worker, self.pacing)
            self.frontier.queue_pop(pipe, *args)
        own = len(pipe)
        boarded = self.riders.board(pipe)
        # Riders' replies may add to the buffers (a revisit written lets its page be acked).
        self._pushes, self.leases.ops, self.starts.acks = [], [], []
        try:
            replies = pipe.execute(raise_on_error=False)
        except RedisError as exc:
            self._unsent(pushes, ops, start_acks)
            boarded.lost(exc)
            self._outage(exc)
            return False, None
        boarded.arrived(replies)
        if (error := first_error(replies[:own])) is not None:
            self._unsent(pushes, ops, start_acks)
            self._outage(error)
            return False, None
        self._held_since = None
        self._recovered()
        self._count_filtered(replies[: (len(pushes) + 499) // 500])
        if pushes:
            self._queue_size += len(pushes)
            self._pop_soon()
        return True, popped(replies[own - 1]) if pop else None

    def _unsent(self, pushes: list[Pending], ops: list[Op], start_acks: list[bytes]) -> None:
        """Put back what a failed round trip did not write, ahead of what came since."""
        self._pushes = pushes + self._pushes
        self.leases.ops = ops + self.leases.ops
        self.starts.acks = start_acks + self.starts.acks

    def _pop_soon(self) -> None:
        """New work: the next pop at the engine's next ask, or, paced, within PACED_GATHER (a
        new request rarely has its host's turn now, and the requests of several pages go in
        one flush and are looked at in one pop)."""
        if self.pacing is None:
            self._next_pop = 0.0
        else:
            self._next_pop = min(self._next_pop, time.monotonic() + PACED_GATHER)

    def renew(self) -> None:
        """Extend the leases this worker holds, so only a dead worker's leases expire: with
        the next round trip, at the latest a sixth of a lease from now."""
        if self.frontier is not None:
            rider = Rider(self._queue_renewals, self._renewed, self._outage)
            self.riders.add("renew", rider, self.config.lease_seconds / 6)

    def _queue_renewals(self, pipe: Any) -> int:
        assert self.frontier is not None
        before = len(pipe)
        ops = self.leases.renewals()
        if ops:
            self.frontier.settle(ops, self.worker, self.config.lease_seconds, client=pipe)
        self.frontier.renew_start(self.starts.held, self.config.lease_seconds, pipe)
        return len(pipe) - before

    def _renewed(self, replies: list[Any]) -> None:
        if (error := first_error(replies)) is not None:
            self._outage(error)

    def _tick(self) -> None:
        """Every FRONTIER_FLUSH_INTERVAL: new requests go to Redis; acknowledgements alone
        wait for the next round trip, at most HOLD_ACKS seconds; riders go when due."""
        self._settle_orphans()
        now = time.monotonic()
        if self.leases.ops or self.starts.acks:
            self._held_since = self._held_since or now
        held = self._held_since is not None and now - self._held_since >= self._hold_acks()
        if self._pushes or held or self.riders.due():
            self.flush()

    def _hold_acks(self) -> float:
        return min(HOLD_ACKS, self.config.lease_seconds / 6)

    def _work_left(self) -> bool:
        """Whether the fleet has work left: requests queued, leased or delayed in Redis, or
        updates of this worker not written yet. While Redis is away, there may be."""
        if self.frontier is None:
            return False
        if self.known_busy():
            return True
        if self._in_backoff() or not self.flush():
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
        if self._ready or self._held or self._pushes or self._queue_size > 0:
            return True
        return self._next_due > 0

    def no_start_entries_known(self) -> bool:
        """Whether this worker, busy with work it knows of, saw the start list empty lately
        (the marker's read rides its pops): the idle spider need not ask for entries."""
        return self.known_busy() and self.marker.saw_no_start_entries(2 * self.marker.interval)

    def _resume(self, spider: Spider, sizes: dict[str, int]) -> None:
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

    def _refill(self) -> None:
        self.marker.ride(self.riders, lambda: len(self.leases.held))
        sent, popped = self._trip(pop=True)
        if not sent or popped is None:
            return
        self._queue_size = popped.queue_size
        self._next_due = popped.next_due
        self._count("frontier/reclaimed", popped.reclaimed)
        self._count("frontier/promoted", popped.promoted)
        self._count("politeness/paced", len(popped.paced))
        for lease_id, data in popped.leased:
            self._take(lease_id, data, lease_id in popped.paced, popped.dues.get(lease_id))
        if len(popped.leased) - len(popped.dues) < self.config.batch_size and (
            popped.queue_size == 0 or self.pacing is not None
        ):
            pause = self._pause(popped)
            self._next_pop = time.monotonic() + pause
            if popped.next_due or popped.unscanned:
                self._wake_engine_in(pause)

    def _pause(self, popped: Popped) -> float:
        """Seconds before the next pop once the queue is empty (or, paced, has nothing to send
        now): until the delayed set's first request is due, at most 4 s (other workers' new
        work is seen that soon); with nothing delayed, after empty pops in a row 1, 2, then 4 s
        (and at once after a pop that found work, but for a paced queue, and 4 s while turns are
        held); at once while a paced pop leaves requests it did not look at. Paced, see
        :func:`~crawler.frontier.turns.paced_pause`."""
        base = min(1.0, self.config.flush_interval * 4)
        self._empty_pops = 0 if popped.leased else min(self._empty_pops + 1, 3)
        if popped.unscanned:
            return 0.0
        if popped.next_due and self.pacing is not None:
            return paced_pause(popped, base, self.pacing.ahead, bool(self._held))
        if popped.next_due:
            return min(4 * base, max(0.0, popped.next_due - time.time()))
        if popped.queue_size and self.pacing is not None:
            return base / 4
        if self._held:
            return 4 * base  # its turns come without a pop; new work of its own pops sooner
        return 0.0 if popped.leased else base * 2 ** (self._empty_pops - 1)

    def _wake_engine_in(self, seconds: float) -> None:
        """Have the engine ask for requests again in ``seconds`` (when the next delayed request
        is due), not only when a download ends or the spider idles: a host's turn is taken on
        time, so turns do not bunch up."""
        when = time.monotonic() + seconds
        if self._wake is not None and self._wake.active():
            if self._wake_at <= when:
                return
            self._wake.cancel()
        from twisted.internet import reactor  # the one Scrapy installed, imported once running

        self._wake_at = when
        self._wake = cast(Any, reactor).callLater(seconds, self._engine_next_call)

    def _engine_next_call(self) -> None:
        slot = getattr(self.crawler.engine, "_slot", None)
        if slot is not None and slot.closing is None:
            slot.nextcall.schedule()

    def _take(
        self, lease_id: str, data: str, paced: bool = False, due: float | None = None
    ) -> None:
        """Ready the leased request (or hold it until its turn is ``due``), or dead-letter a
        record it cannot be rebuilt from: one bad record never stops the others."""
        try:
            request = self._request(lease_id, data, paced)
        except Exception as exc:
            error = f"{type(exc).__name__}: {exc}"
            logger.error(
                "Request record %s cannot be rebuilt (%s): dead-lettered (unreadable)",
                lease_id,
                error[:300],
                extra={"spider": self.crawler.spider},
            )
            self.leases.take(lease_id, 1, "")
            self._dead(lease_id, "unreadable", error, 1)
            return
        if due is None:
            self._ready.append(request)
        else:
            self._held.hold(request, due)
            self._wake_engine_in(max(0.0, due - time.time()))

    def _request(self, lease_id: str, data: str, paced: bool) -> Request:
        request = request_from_dict(serializer.loads(data), spider=self.crawler.spider)
        request.meta[LEASE_META] = lease_id
        if paced:
            # The Crawl-delay the pop spaced it by: one learnt later is the worker's to apply.
            request.meta[PACED_META] = crawl_delay_of(request.meta)
        else:
            request.meta.pop(PACED_META, None)
        attempts = int(request.meta.get("retry_times", 0)) + 1
        self.leases.take(lease_id, attempts, request.url)
        return request

    def _count_filtered(self, results: list[Any]) -> None:
        filtered = sum(flag == 0 for batch in results for flag in batch)
        self._count("dupefilter/filtered", filtered)
        self._queue_size -= filtered

    def _count(self, key: str, value: int = 1) -> None:
        if value and self.crawler.stats is not None:
            self.crawler.stats.inc_value(key, value)

    def _start_loop(self, function: Any, interval: float) -> None:
        loop = task.LoopingCall(function)
        loop.start(interval, now=False)
        self._loops.append(loop)

    def _in_backoff(self) -> bool:
        return time.monotonic() < self._backoff

    def in_backoff(self) -> bool:
        """Whether Redis was found down lately: callers skip their calls until it is over."""
        return self._in_backoff()

    def _outage(self, exc: RedisError) -> None:
        now = time.monotonic()
        if self._outage_since is None:
            self._outage_since = now
            logger.error("Redis unavailable (%s); backing off, nothing is dropped", exc)
        self._count("frontier/redis_errors")
        waited = now - self._outage_since
        self._backoff = now + min(10.0, 0.5 + waited / 2)

    def _recovered(self) -> None:
        if self._outage_since is not None:
            logger.warning(
                "Redis reachable again after %.1fs", time.monotonic() - self._outage_since
            )
            self._outage_since = None
            self._backoff = 0.0


def downloader_pacing(crawler: Crawler) -> Pacing | None:
    """The politeness the pop is to take for the downloader: asked of the downloader
    middlewares that offer ``frontier_pacing()`` (the ban middleware), None when none does."""
    try:
        downloader = getattr(crawler.engine, "downloader", None)
    except RuntimeError:  # no engine yet (a scheduler opened on its own)
        return None
    for middleware in getattr(getattr(downloader, "middleware", None), "middlewares", ()):
        offer = getattr(middleware, "frontier_pacing", None)
        if callable(offer) and isinstance(pacing := offer(), Pacing):
            return pacing
    return None


def frontier_scheduler(crawler: Crawler) -> FrontierScheduler | None:
    """The crawl's scheduler if it is a FrontierScheduler, else None (also before the engine
    exists). ``isinstance`` cannot tell: Scrapy's scheduler metaclass accepts any class that has
    the scheduler methods."""
    try:
        scheduler = crawler.engine.scheduler if crawler.engine is not None else None
    except RuntimeError:
        return None
    if FrontierScheduler in type(scheduler).__mro__:
        return cast(FrontierScheduler, scheduler)
    return None
