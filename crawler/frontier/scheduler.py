"""The Scrapy scheduler on the Redis frontier: leased batches, JSON, nothing lost.

A popped request is leased to this worker, not deleted. The lease is acknowledged once the
response is handled: the callback's output consumed, its items through the pipelines and its new
requests in Redis (see the lease middlewares in ``crawler/middlewares.py``). Requests a worker
schedules are buffered and written in one script call per batch, together with the
acknowledgements they allow, so a worker that dies at any point leaves its leases to expire and
come back to the queue for another worker.
"""

from __future__ import annotations

import logging
import os
import socket
import time
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

from redis.exceptions import RedisError
from scrapy import Request, signals
from scrapy.core.scheduler import BaseScheduler
from twisted.internet import task

from crawler.connection import crawl_redis
from crawler.frontier.backoff import RedisBackoff
from crawler.frontier.chains import Credits, chain_host, keep_on_turn
from crawler.frontier.codec import RequestNotSerializable
from crawler.frontier.dupefilter import RecentlySeen
from crawler.frontier.gate import SendGate
from crawler.frontier.idle import FleetIdle, WorkerState
from crawler.frontier.jobs import JobBook
from crawler.frontier.leases import (
    ACK,
    LEASE_META,
    LeaseLedger,
    lease_id_of,
    unguarded,
)
from crawler.frontier.marker import FrontierMarker
from crawler.frontier.options import PUSH_BATCHES, FrontierSettings, hold_acks
from crawler.frontier.outbox import Outbox
from crawler.frontier.pause import Pause, PauseWatch
from crawler.frontier.queue import Frontier, Popped
from crawler.frontier.records import job_fingerprint, passes_again, pending
from crawler.frontier.riders import Rider, Riders, first_error
from crawler.frontier.trip import RoundTrips
from crawler.frontier.turns import EngineCalls, InHand, PopPlan
from crawler.keys import FrontierKeys, start_key
from crawler.meta import PACED_META, SEED_META, depth_of

if TYPE_CHECKING:
    from scrapy import Spider
    from scrapy.crawler import Crawler

    from crawler.connection import RedisClient

logger = logging.getLogger(__name__)

START_META = "frontier_start"
# Round trips an idle worker's drain makes at most (each reply may let more be written).
DRAIN_TRIPS = 4
# Seconds a request that reached the send gate while the crawl is paused is held, and held again.
PAUSED_HOLD = 0.5


class FrontierScheduler(BaseScheduler):
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
        self.gate: SendGate | None = None
        self.idle: FleetIdle | None = None
        self.pause: PauseWatch | None = None
        self.trips: RoundTrips | None = None
        self.ledger = LeaseLedger(crawler, self.worker)
        self._engine = EngineCalls(crawler)
        self.hand = InHand(crawler, self.ledger, self._engine)
        self.plan = PopPlan(base=min(1.0, config.flush_interval * 4))
        self.credits = Credits()
        self.starts = self.ledger.starts
        self.outbox = Outbox(self.ledger)
        self._seen_here = RecentlySeen(config.local_seen, config.dupefilter.mode)
        self._backoff = RedisBackoff()
        self._loops: list[task.LoopingCall] = []
        self.riders = Riders.of(crawler)
        # Called when the work this worker may send now runs short, or the fleet's queue is
        # short of START_READ_AHEAD (see _want_start_entries).
        self.when_short: Callable[[], None] | None = None
        self._short_call: Any = None

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> FrontierScheduler:
        return cls(
            crawler,
            crawl_redis(crawler),
            FrontierSettings.from_settings(crawler.settings),
        )

    # --- Scrapy's scheduler interface ------------------------------------------------------------

    def open(self, spider: Spider) -> None:
        settings = self.crawler.settings
        keys = FrontierKeys(spider.name, start_key(settings, spider))
        self.frontier = Frontier(self.server, keys, self.config.dupefilter)
        self.marker = FrontierMarker(self.frontier, self.crawler.stats)
        self.pause = PauseWatch(spider.name, self.crawler.stats, self._pause_turned)
        self.pause.look(self.server)
        if (pacing := self.config.pacing) is not None:
            self.gate = SendGate(self.server, keys.buckets, pacing)
        self.plan.rated = pacing if pacing is not None and pacing.limited else None
        self.trips = RoundTrips(
            self.frontier, self.outbox, self.credits, self.riders, self.worker, self.config
        )
        self.riders.carried = True
        self.idle = FleetIdle(
            self.frontier,
            WorkerState(
                self.known_busy, lambda: self.plan.at, self.drain, self.in_backoff, self._outage
            ),
            self.starts,
            self.marker,
            self._engine,
            self.config.idle_poll,
            (self.worker, self.config.lease_seconds),
        )
        self.crawler.signals.connect(
            self.idle.keep_open_while_work_left, signal=signals.spider_idle
        )
        if (sizes := self.idle.resume(spider)) is not None:
            self.plan.queue_size = sizes["queue"] + sizes["delayed"]
        self._start_loop(self._tick, self.config.flush_interval)
        self._start_loop(self.renew, self.config.lease_seconds / 3)

    def close(self, reason: str) -> None:
        for loop in self._loops:
            if loop.running:
                loop.stop()
        self._engine.cancel()
        if self._short_call is not None and self._short_call.active():
            self._short_call.cancel()
        if self.idle is not None:
            self.crawler.signals.disconnect(
                self.idle.keep_open_while_work_left, signal=signals.spider_idle
            )
        self.hand.clear()
        self.credits.clear()
        self.ledger.release_all()
        self._backoff.lift()
        # Twice: riders of the first round trip (revisits) may let more leases be settled.
        if not (self.flush() and self.flush()):
            logger.error(
                "Could not reach Redis at close: %d requests and %d lease updates not written; "
                "their leases expire and other workers take them over",
                len(self.outbox.pushes),
                len(self.ledger.ops),
            )

    def known_busy(self) -> bool:
        """Whether this worker knows of work left without asking Redis: requests in hand or
        buffered, requests queued at its last pop, or a delayed request due later (the pop
        due then looks again)."""
        in_hand = self.hand or self.outbox.pushes
        return bool(in_hand) or self.plan.queue_size > 0 or self.plan.next_due > 0

    def waiting_for_turns(self) -> bool:
        """Whether this worker has nothing to send now for politeness: no request ready, and
        its hosts' turns held for later, or its last paced pop found requests queued but none
        whose host had a turn to give (the pace's busy time: FleetMonitor)."""
        return not self.hand.ready and (bool(self.hand.held) or self.plan.paced_out())

    def has_pending_requests(self) -> bool:
        """Requests this worker can get now or at its next pop. Delayed requests and other
        workers' leases keep the crawl open through ``FleetIdle.keep_open_while_work_left``, so an
        idle spider still runs its idle handlers (new start entries) while they wait. While
        the crawl is paused, always: it never closes as idle."""
        in_hand = self.hand or self.outbox.pushes
        return self.paused() or bool(in_hand or self.plan.queue_size > 0)

    def enqueue_request(self, request: Request) -> bool:
        if self.hand.hold_back(request):
            self._count("politeness/gate_held")
            return True
        request.errback = unguarded(request.errback)
        lease_id = request.meta.pop(LEASE_META, None)
        start_member = request.meta.pop(START_META, None)
        host = chain_host(request)
        fingerprint = self._fingerprint(request)
        again = passes_again(request)
        seed = bool(request.meta.pop(SEED_META, False))
        depth = depth_of(request.meta)
        scheduled = request.dont_filter or again or self._seen_here.passes(fingerprint, seed, depth)
        if not scheduled:
            self._count("dupefilter/filtered")
        own = lease_id is None and not again  # made by a page here, not sent back or retried
        if scheduled and not (own and self._keep(request, host)):
            booked = own and host is not None and self.credits.booked(host)
            try:
                entry = pending(request, fingerprint, self.crawler.spider, again, seed)
            except RequestNotSerializable as exc:
                return self._refuse(request, fingerprint, lease_id, exc)
            self.outbox.push(entry, not booked)
            if booked:
                self._count("frontier/pushes_waited")
            else:
                self.plan.soon()  # the engine's next ask writes it and may get it straight back
        if scheduled:
            self._count("scheduler/enqueued/redis")
        if lease_id is not None:
            self.ledger.replaces(lease_id)
        if start_member is not None:
            self.starts.pushed(start_member)
        if len(self.outbox.pushes) >= PUSH_BATCHES * self.config.batch_size:
            self.flush()
        return scheduled

    def _refuse(
        self, request: Request, fingerprint: bytes, lease_id: str | None, exc: ValueError
    ) -> bool:
        """A request whose meta Redis cannot hold as JSON is not scheduled (dropped, as Scrapy
        counts a scheduler's refusal): named in an ERROR, counted, and not noted as scheduled
        here (the page may be asked again); a retry's lease ends as a dead letter, the request
        it was kept whole there."""
        logger.error("%s not scheduled: %s", request, exc, extra={"spider": self.crawler.spider})
        self._count("scheduler/unserializable")
        self._seen_here.forget(fingerprint)
        if lease_id is not None:
            self.ledger.dead(lease_id, "not_serializable", str(exc), 1)
        return False

    def _keep(self, request: Request, host: str | None) -> bool:
        """Keep a request a page made for its own host on a turn of that host this worker took
        ahead (see chains.py): held until then, written as leased to it with the next trip. Not
        one of a crawl job with a page budget, which only the pop hands out."""
        if JobBook.of(self.crawler).has_budget(request):
            return False  # the pop counts a budgeted job's requests
        kept = keep_on_turn(self.credits, self.config.pacing, request, host, self.crawler.spider)
        if kept is None:
            return False
        adopted, due = kept
        self.outbox.adopted.append(adopted)
        self.hand.take(adopted.lease_id, adopted.record, paced=True, due=due)
        self._count("frontier/chained")
        return True

    def next_request(self) -> Request | None:
        if self.paused():
            return None
        now, ready = time.monotonic(), self.hand.ready
        self.hand.come()
        if not ready and self.plan.due(now):
            self._refill()
            self.hand.come()
        if self.paused():  # read with the pop: what it leased waits, its leases renewed
            return None
        while ready and self._superseded(ready[0]):
            ready.popleft()
        if not ready:
            if self.plan.rated is not None and self.plan.at > now and self.has_pending_requests():
                self._engine.wake_in(self.plan.at - now)  # not only at the 5 s heartbeat
            self.hand.wake_for_held()
            return None
        request = ready.popleft()
        self.ledger.move(lease_id_of(request), "downloading")
        self._count("scheduler/dequeued/redis")
        return request

    def _superseded(self, request: Request) -> bool:
        """A request whose page this worker scheduled since by a shorter path is not sent: the
        shorter one fetches the page (once) and follows its links from there. Its lease ends as
        done (counted under dupefilter/superseded). Only with a fleet filter that lets a shorter
        path through ("bloom", "exact"): another one may have dropped the shorter request."""
        depth = depth_of(request.meta)
        if not depth or request.dont_filter or not self._seen_here.by_depth:
            return False
        if not self._seen_here.superseded(self._fingerprint(request), depth):
            return False
        self.ledger.end(lease_id_of(request), ACK)
        self._count("dupefilter/superseded")
        return True

    def _fingerprint(self, request: Request) -> bytes:
        """The request's fingerprint in the duplicate filter: each crawl job's is its own."""
        assert self.crawler.request_fingerprinter is not None
        return job_fingerprint(self.crawler.request_fingerprinter.fingerprint(request), request)

    async def gate_wait(self, request: Request) -> float:
        """0 when ``request``, whose turn the pop planned, may go to its host now (the host's
        sent token is taken, see ``gate.py``), else the seconds to hold it: until the host's
        next token, or, Redis away, until the backoff ends (no request goes unchecked)."""
        if self.paused():  # had before the pause was seen: held until resumed
            return PAUSED_HOLD
        if self.gate is None or PACED_META not in request.meta:
            return 0.0
        try:
            return self._backoff.remaining() or await self.gate.wait(request)
        except RedisError as exc:
            self._outage(exc)
            return max(0.1, self._backoff.remaining())

    def gate_sent(self, request: Request, answered: bool = False) -> None:
        """``request``, which took its host's token at the send gate, reached the downloader
        (or, ``answered``, its answer's headers arrived): if later than its token counted, its
        host's bucket is told (``SendGate.sent_late``)."""
        if self.gate is not None and self.gate.sent_late(request, time.time(), answered):
            self._count("politeness/sent_late")

    # --- internals -------------------------------------------------------------------------------

    def flush(self) -> bool:
        """Write buffered requests, then the lease updates they allow, and whatever rides
        along (see ``riders.py``), in one round trip; False if Redis is away."""
        return self._trip(pop=False)[0]

    def drain(self) -> bool:
        """Write everything waiting, the riders not due yet too, then what their replies let
        be written (a revisit written lets its page be acked): an idle worker's look at the
        fleet's end need not wait for riders' latest times. False if Redis is away."""
        for _ in range(DRAIN_TRIPS):  # a revisit or hand-off written, then its page acked
            if not (self.outbox or self.riders):
                return True
            if not self._trip(pop=False, everything=True)[0]:
                return False
        return True

    def _trip(self, pop: bool, everything: bool = False) -> tuple[bool, Popped | None]:
        """One round trip (``trip.py``), when it has anything to carry and Redis is not in
        backoff. Returns whether it went (or had nothing to carry), and what the pop leased."""
        if self.in_backoff() or self.trips is None:  # Redis away, or never opened
            return not self.outbox, None
        if not self.trips.needed(pop, everything):
            return True, None
        trip = self.trips.go(pop, self._backoff, self._outage)
        if trip is None:
            return False, None
        self._count("frontier/turns_ahead", trip.turns)
        self._count("dupefilter/filtered", trip.filtered)
        self.plan.queue_size += trip.pushed - trip.filtered
        if trip.pushed and not pop and trip.eager:  # a pop in the same trip saw them
            self.plan.soon()
        return True, trip.popped

    def renew(self) -> None:
        """Extend the leases this worker holds, so only a dead worker's leases expire: with
        the next round trip, at the latest a sixth of a lease from now."""
        if self.frontier is not None:
            frontier, worker, seconds = self.frontier, self.worker, self.config.lease_seconds
            rider = Rider(
                lambda pipe: self.outbox.queue_renewals(pipe, frontier, worker, seconds),
                self._renewed,
                self._outage,
            )
            self.riders.add("renew", rider, seconds / 6)

    def _renewed(self, replies: list[Any]) -> None:
        if (error := first_error(replies)) is not None:
            self._outage(error)

    def _tick(self) -> None:
        """Every FRONTIER_FLUSH_INTERVAL: new requests go to Redis; acknowledgements alone
        wait for the next round trip, at most HOLD_ACKS seconds; riders go when due."""
        self.ledger.dead_letter_orphans()
        if self.pause is not None:
            self.pause.ride(self.riders)
        if self.outbox.due(hold_acks(self.config.lease_seconds)) or self.riders.due():
            self.flush()

    def _refill(self) -> None:
        self.marker.ride(self.riders, lambda: len(self.ledger.held))
        if self.pause is not None:
            self.pause.ride(self.riders)
        sent, popped = self._trip(pop=True)
        if not sent or popped is None:
            return
        self._count("frontier/reclaimed", popped.reclaimed)
        self._count("frontier/promoted", popped.promoted)
        self._count("politeness/paced", len(popped.paced))
        for lease_id, data in popped.leased:
            self.hand.take(lease_id, data, lease_id in popped.paced, popped.dues.get(lease_id))
        ready = len(popped.leased) - len(popped.dues)
        if ready < self.config.batch_size or popped.queue_size < self.config.read_ahead:
            self._want_start_entries()
        wake = self.plan.after(popped, self.config.batch_size, bool(self.hand.held))
        if wake is not None:
            self._engine.wake_in(wake)

    def paused(self) -> bool:
        """Whether the crawl is paused (``scrapy frontier SPIDER pause``), as last read."""
        return self.pause is not None and self.pause.paused

    def _pause_turned(self, pause: Pause | None) -> None:
        """Resumed: pop at the engine's next ask, and have it ask now."""
        if pause is None:
            self.plan.now()
            self._engine.wake_in(0)

    def _want_start_entries(self) -> None:
        """The pop found less than a batch this worker may send now, or the fleet's queue short
        of START_READ_AHEAD: the start feed reads its next entries (new hosts, whose turns are
        free; seeds at depth 0 before links reach them) at once, not only once the spider is
        idle, which a polite queue, full of work waiting for its turn, never is."""
        if self.when_short is None or (self._short_call and self._short_call.active()):
            return
        from twisted.internet import reactor  # the one Scrapy installed, imported once running

        self._short_call = cast(Any, reactor).callLater(0, self.when_short)

    def _count(self, key: str, value: int = 1) -> None:
        if value and self.crawler.stats is not None:
            self.crawler.stats.inc_value(key, value)

    def _start_loop(self, function: Any, interval: float) -> None:
        loop = task.LoopingCall(function)
        loop.start(interval, now=False)
        self._loops.append(loop)

    def in_backoff(self) -> bool:
        """Whether Redis was found down lately: callers skip their calls until it is over."""
        return self._backoff.active()

    def _outage(self, exc: RedisError) -> None:
        self._count("frontier/redis_errors")
        self._backoff.failed(exc)
