"""The spider middleware that gives every page with items its next visit, and hands due
revisits to the frontier."""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from redis.exceptions import RedisError
from scrapy import Request, signals
from scrapy.spidermiddlewares.httperror import HttpError
from scrapy.utils.log import failure_to_exc_info
from scrapy.utils.request import request_from_dict
from twisted.internet import task

from crawler.config import setting, switched_off
from crawler.connection import crawl_redis
from crawler.frontier import codec
from crawler.frontier.options import hold_acks
from crawler.frontier.reports import FrontierReports
from crawler.frontier.riders import Rider, RiderBatch, Riders, first_error
from crawler.recrawl.failures import revisit_failed
from crawler.recrawl.moves import gone, moved, unanswered
from crawler.recrawl.policy import RecrawlPolicy
from crawler.recrawl.revisits import WAITING_META, fallback_due, plan_visit, wants_revisit
from crawler.recrawl.store import Absence, Backoff, Claim, Revisit, RevisitStore, read_claim

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from scrapy.http import Response
    from twisted.python.failure import Failure

    from crawler.recrawl.revisits import Visit

logger = logging.getLogger(__name__)

# With nothing due, a worker still asks for due revisits every this many RECRAWL_POLL_INTERVALs
# (other workers write revisits too).
QUIET_POLLS = 10
RIDER = "revisits"
CLAIM_RIDER = "revisit-claim"
COMPLETE_RIDER = "revisit-complete"
# A revisit to write, or an absence of its page to count, and the request whose lease waits
# for it (none for a redirect's: its fallback due time brings the page back should it be lost).
Write = tuple[Revisit | Absence, Request | None]


@dataclass(frozen=True)
class RecrawlSettings:
    """RECRAWL_* settings, read and checked once."""

    policy: RecrawlPolicy
    backoff: Backoff
    poll_interval: float
    batch_size: int
    flush_interval: float
    claim_seconds: float

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> RecrawlSettings:
        settings = crawler.settings
        policy = RecrawlPolicy(
            initial=setting(settings, "RECRAWL_INITIAL_INTERVAL"),
            minimum=setting(settings, "RECRAWL_MIN_INTERVAL"),
            maximum=setting(settings, "RECRAWL_MAX_INTERVAL"),
            jitter=setting(settings, "RECRAWL_JITTER"),
        )
        return cls(
            policy=policy,
            backoff=Backoff(policy.maximum, setting(settings, "RECRAWL_ABSENT_LIMIT")),
            poll_interval=setting(settings, "RECRAWL_POLL_INTERVAL"),
            batch_size=setting(settings, "RECRAWL_BATCH_SIZE"),
            flush_interval=setting(settings, "FRONTIER_FLUSH_INTERVAL"),
            claim_seconds=setting(settings, "FRONTIER_LEASE_SECONDS"),
        )


class RecrawlMiddleware:
    """Schedule a revisit of every page whose callback gives items (unless meta ``dont_recrawl``)
    and hand due revisits to the frontier (RECRAWL_*). A revisit is written before the page's lease
    is acknowledged, so a worker that dies loses none. A revisit that finds its page gone or
    moved, or its host not answering, backs its revisits off or ends them
    (crawler/recrawl/moves.py)."""

    def __init__(self, crawler: Crawler, store: RevisitStore, config: RecrawlSettings) -> None:
        self.crawler = crawler
        self.store = store
        self.config = config
        self.frontier = FrontierReports(crawler)
        riders = Riders.of(crawler)
        # Revisits to write and absences to count; their pages' leases wait for them.
        self._revisits: RiderBatch[Write] = RiderBatch(
            riders, RIDER, self._queue_revisits, self._written, self._hold, self._not_written
        )
        self._next_claim = 0.0
        self._loops: list[task.LoopingCall] = []
        # Claims handed to the engine whose requests the frontier did not take yet: completed
        # once it has, so the claim is not handed over again when it expires meanwhile.
        self._unsettled: RiderBatch[tuple[Claim, dict[str, float]]] = RiderBatch(
            riders,
            COMPLETE_RIDER,
            self._queue_completes,
            self._completed,
            self._hold,
            self._not_completed,
        )
        self._quiet = False
        self._claim_deadline = 0.0
        crawler.signals.connect(self.spider_opened, signal=signals.spider_opened)
        crawler.signals.connect(self.spider_closed, signal=signals.spider_closed)
        crawler.signals.connect(self.request_scheduled, signal=signals.request_scheduled)
        crawler.signals.connect(self.revisit_failed, signal=revisit_failed)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> RecrawlMiddleware:
        if not setting(crawler.settings, "RECRAWL_ENABLED"):
            raise switched_off(cls, "RECRAWL_ENABLED is off")
        assert crawler.spidercls is not None
        config = RecrawlSettings.from_crawler(crawler)
        store = RevisitStore(crawl_redis(crawler), crawler.spidercls.name)
        return cls(crawler, store, config)

    # --- pages and their next visit --------------------------------------------------------------

    async def process_spider_output(
        self, response: Response, result: AsyncIterator[Any]
    ) -> AsyncIterator[Any]:
        items: list[Any] = []
        async for output in result:
            if output is not None and not isinstance(output, Request):  # Scrapy skips a None
                items.append(output)
            yield output
        request = response.request
        if request is None or not wants_revisit(request, self.crawler.spider):
            return
        if not items:
            self._absent(gone(request, response.status, self.config.policy), "gone", request)
            return
        try:
            visit = plan_visit(request, items, self.config.policy, self.crawler)
        except (TypeError, ValueError) as exc:  # not an item; meta JSON cannot hold
            self._not_revisited(request, exc)
        else:
            self._schedule(visit, request)

    def process_spider_exception(self, response: Response, exception: Exception) -> None:
        """A revisit's 404 or 410 its callback never saw (Scrapy's HttpErrorMiddleware)."""
        request = response.request
        if isinstance(exception, HttpError) and request is not None:
            self._absent(gone(request, response.status, self.config.policy), "gone", request)

    def request_scheduled(self, request: Request) -> None:
        """A revisit's redirect, scheduled: its page is at another address now."""
        if WAITING_META in request.meta:
            self._absent(moved(request, self.crawler, self.config.policy), "moved", None)

    def revisit_failed(self, request: Request, exception: Exception) -> None:
        """A revisit's download failed for good (RecrawlFailureMiddleware): an absence when its
        host did not answer. Its dead letter does not wait for it: the fallback due time brings
        the page back should it be lost."""
        self._absent(unanswered(request, exception, self.config.policy), "unanswered", None)

    def _absent(self, absence: Absence | None, kind: str, request: Request | None) -> None:
        """Count ``absence`` (``kind`` gone, moved or unanswered) against its waiting revisit,
        with the next revisits written; ``request``'s lease waits for it."""
        if absence is None:
            return
        if request is not None:
            self.frontier.ledger.item_started(request)
        self._revisits.items.append((absence, request))
        self._count(f"recrawl/{kind}_for_good" if absence.final else f"recrawl/{kind}")

    def _schedule(self, visit: Visit, request: Request) -> None:
        self.frontier.ledger.item_started(request)  # the lease waits for the revisit to be written
        self._revisits.items.append((visit.revisit, request))
        self._count("recrawl/scheduled")
        if visit.changed is not None:
            self._count("recrawl/changed" if visit.changed else "recrawl/unchanged")

    def _not_revisited(self, request: Request, exc: Exception) -> None:
        if not self.crawler.stats or not self.crawler.stats.get_value("recrawl/not_revisited"):
            logger.error("%s will not be revisited: %s", request.url, exc)
        self._count("recrawl/not_revisited")

    def flush(self) -> bool:
        """Write the buffered revisits, then let their pages' leases be acknowledged."""
        buffered = self._revisits.take()
        if not buffered:
            return True
        pipe = self.store.server.pipeline(transaction=False)
        self._queue_revisits(pipe, buffered)  # one round trip, as the riding path's
        try:
            replies = pipe.execute()
        except RedisError as exc:
            self._revisits.put_back(buffered)
            self._not_written(buffered, exc)
            return False
        self._written(buffered, replies)
        return True

    def _flush_unless_down(self) -> None:
        """Have the revisits written: with the frontier's next round trip, or now without one."""
        if self._revisits.riders.carried:
            if self._revisits.items:
                self._revisits.ride()
            return
        if not self.frontier.in_backoff():  # else a call blocks the reactor
            self.flush()

    def _hold(self) -> float:
        """How long a revisit may wait for a round trip: well within the shortest interval (a
        claimed revisit comes due again one interval after its claim unless rewritten) and
        a sixth of a lease (its page's acknowledgement waits for it)."""
        config = self.config
        hold = min(hold_acks(config.claim_seconds), config.policy.minimum / 8)
        return max(config.flush_interval, hold)

    def _queue_revisits(self, pipe: Any, buffered: list[Write]) -> None:
        revisits, absences = _split(buffered)
        self.store.queue_add(pipe, revisits)
        self.store.queue_absent(pipe, absences, self.config.backoff)

    def _written(self, buffered: list[Write], replies: list[Any]) -> None:
        """The revisits written, the absences counted (ABSENT's reply, the last, says how many
        revisits ended): the pages' leases may be acknowledged."""
        revisits, absences = _split(buffered)
        if revisits:
            self._next_claim = min(self._next_claim, *(revisit.due for revisit in revisits))
        if absences:
            self._count("recrawl/ended", int(replies[-1]))
        for _, request in buffered:
            if request is not None:
                self.frontier.ledger.item_finished(request)

    def _not_written(self, buffered: list[Write], exc: RedisError) -> None:
        logger.warning("Could not write %d revisits yet: %s", len(buffered), exc)

    # --- due revisits to the frontier --------------------------------------------------------

    def promote(self) -> None:
        """Claim due revisits and crawl their requests; once queued they wait one interval again."""
        engine, scheduler = self.crawler.engine, self.frontier.scheduler
        if scheduler is None or engine is None or engine.spider is None:
            return
        if self.frontier.in_backoff():  # Redis is down: a call would block the reactor
            return
        if scheduler.paused() and not self._unsettled.items:
            return  # paused: a revisit claimed now would wait, and come due again meanwhile
        if not self._unsettled.items and time.time() < self._next_claim:
            return  # nothing due yet, as far as this worker knows
        riders = Riders.of(self.crawler)
        if riders.carried:
            self._ride_claims(riders)
            return
        try:
            if self._unsettled.items and not self._write_unsettled():
                return
            claim = self.store.claim(self.config.batch_size, self.config.claim_seconds)
            self._claim_again(claim)
            if claim.revisits:
                self._unsettled.items.append((claim, self._hand_over_claim(engine, claim)))
                self._write_unsettled()
        except RedisError as exc:
            logger.warning("Could not hand due revisits to the frontier yet: %s", exc)

    def _claim_again(self, claim: Claim) -> None:
        """When to claim again: at once after a full batch, else when the earliest revisit left is
        due, and at least every QUIET_POLLS polls (other workers' new revisits)."""
        now = time.time()
        if len(claim.revisits) >= self.config.batch_size:
            self._next_claim, self._quiet = now, False
            return
        latest = now + QUIET_POLLS * self.config.poll_interval
        self._quiet = not claim.next_due or claim.next_due > latest
        self._next_claim = latest if self._quiet else claim.next_due

    # --- the same, in the frontier's round trips -------------------------------------------

    def _ride_claims(self, riders: Riders) -> None:
        """Claim with the frontier's next round trip (within a poll when revisits are due,
        within QUIET_POLLS polls when only other workers' new ones may be), and complete the
        claims handed over in the trip after (the one that writes their requests first)."""
        if self._unsettled.items and not riders.waiting(COMPLETE_RIDER):
            self._unsettled.ride()
        if time.time() >= self._next_claim and not riders.waiting(CLAIM_RIDER):
            polls = QUIET_POLLS if self._quiet else 1
            rider = Rider(self._queue_claim, self._claimed, self._claim_lost)
            riders.add(CLAIM_RIDER, rider, polls * self.config.poll_interval)

    def _queue_claim(self, pipe: Any) -> None:
        config = self.config
        self._claim_deadline = self.store.queue_claim(pipe, config.batch_size, config.claim_seconds)

    def _claimed(self, replies: list[Any]) -> None:
        engine = self.crawler.engine
        if (error := first_error(replies)) is not None or engine is None:
            self._claim_lost(error or RedisError("no engine"))
            return
        claim = read_claim(replies[0], self._claim_deadline)
        self._claim_again(claim)
        if claim.revisits:
            self._unsettled.items.append((claim, self._hand_over_claim(engine, claim)))
            self._ride_claims(self._unsettled.riders)

    def _claim_lost(self, exc: RedisError) -> None:
        logger.warning("Could not claim due revisits yet: %s", exc)

    def _queue_completes(self, pipe: Any, claims: list[tuple[Claim, dict[str, float]]]) -> None:
        for claim, next_due in claims:
            self.store.queue_complete(pipe, claim, next_due)

    def _completed(self, claims: list[tuple[Claim, dict[str, float]]], replies: object) -> None:
        self._count("recrawl/promoted", sum(len(next_due) for _, next_due in claims))

    def _not_completed(self, claims: list[tuple[Claim, dict[str, float]]], exc: RedisError) -> None:
        logger.warning("Could not settle %d revisit claims yet: %s", len(claims), exc)

    def _hand_over_claim(self, engine: Any, claim: Claim) -> dict[str, float]:
        """Give the claim's revisits to the engine; when each is due again (:meth:`_hand_over`)."""
        next_due: dict[str, float] = {}
        for fingerprint, record in claim.revisits:
            due = self._hand_over(engine, fingerprint, record)
            if due is not None:
                next_due[fingerprint] = due
        return next_due

    def _hand_over(self, engine: Any, fingerprint: str, record: str) -> float | None:
        """Give one revisit's request to the engine and return when it comes due again unless
        its visit writes a new one. One that cannot be loaded (its callback renamed since, its
        JSON damaged) is logged, counted and dropped: None."""
        try:
            request = request_from_dict(codec.loads(record), spider=self.crawler.spider)
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            logger.error("Revisit %s dropped, its request cannot be loaded: %s", fingerprint, exc)
            self._count("recrawl/unreadable")
            return None
        request.meta[WAITING_META] = fingerprint
        engine.crawl(request)
        return fallback_due(request, self.config.policy, time.time(), self.config.claim_seconds)

    def _write_unsettled(self) -> bool:
        """Complete the claims handed over once the frontier holds their requests."""
        if not self.frontier.flush():
            return False
        while self._unsettled.items:
            claim, next_due = self._unsettled.items[0]
            self.store.complete(claim, next_due)
            self._unsettled.items.pop(0)
            self._count("recrawl/promoted", len(next_due))
        return True

    def spider_opened(self) -> None:
        self._start_loop(self._flush_unless_down, self.config.flush_interval)
        self._start_loop(self.promote, self.config.poll_interval)

    def spider_closed(self) -> None:
        for loop in self._loops:
            if loop.running:
                loop.stop()
        if not self.flush():
            logger.error(
                "Could not reach Redis at close: %d revisits not written; their pages' leases "
                "expire and the pages are fetched again",
                len(self._revisits.items),
            )

    def _start_loop(self, function: Any, interval: float) -> None:
        loop = task.LoopingCall(function)
        self._loops.append(loop)
        self._run(loop, interval)

    def _run(self, loop: task.LoopingCall, interval: float) -> None:
        loop.start(interval, now=False).addErrback(self._loop_failed, loop, interval)

    def _loop_failed(self, failure: Failure, loop: task.LoopingCall, interval: float) -> None:
        """An unexpected error must not stop revisits for the rest of the crawl: log, go on."""
        logger.error(
            "Revisit loop failed, restarted", exc_info=failure_to_exc_info(failure) or None
        )
        self._run(loop, interval)

    def _count(self, key: str, value: int = 1) -> None:
        if value and self.crawler.stats is not None:
            self.crawler.stats.inc_value(key, value)


def _split(buffered: list[Write]) -> tuple[list[Revisit], list[Absence]]:
    """The revisits to write and the absences to count, each in their order."""
    revisits = [write for write, _ in buffered if isinstance(write, Revisit)]
    return revisits, [write for write, _ in buffered if isinstance(write, Absence)]
