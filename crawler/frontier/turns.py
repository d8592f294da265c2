"""The leased requests a worker holds (ready, or held until their turn), and when it pops next.

A paced pop leases the turns due within its look-ahead at once (see ``scripts/pop.lua``):
the worker holds each request until its turn and hands it to the engine then, so a host
crawled at one request every few seconds costs one pop per look-ahead, not one per request.
A held request is leased until its turn plus a lease, so one whose worker dies comes back
like any other.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import time
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from crawler.frontier.leases import LEASE_META, lease_id_of
from crawler.frontier.records import leased_request
from crawler.meta import HOLD_META

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.crawler import Crawler
    from twisted.internet.base import DelayedCall

    from crawler.frontier.leases import LeaseLedger
    from crawler.frontier.pacing import Pacing
    from crawler.frontier.queue import Popped

logger = logging.getLogger(__name__)

# Seconds between two pops that wait for paced turns: turns due meanwhile go out together, this
# much late at most (a turn is given up only when a whole interval late).
PACED_GATHER = 0.05


class InHand:
    """The leased requests this worker holds: ready for the engine, or held until their host's
    turn (the engine is woken then). A record no request can be rebuilt from is dead-lettered
    (``unreadable``): one bad record never stops the others."""

    def __init__(self, crawler: Crawler, ledger: LeaseLedger, engine: EngineCalls) -> None:
        self.crawler = crawler
        self.ledger = ledger
        self.engine = engine
        self.ready: deque[Request] = deque()
        # Requests held until their turn (Unix time), earliest first: a heap.
        self.held: list[tuple[float, int, Request]] = []
        self._order = itertools.count()

    def __bool__(self) -> bool:
        return bool(self.ready or self.held)

    def take(self, lease_id: str, data: str, paced: bool = False, due: float | None = None) -> None:
        """Ready the request leased as ``lease_id`` (or hold it until its turn is ``due``)."""
        try:
            request = self._rebuilt(lease_id, data, paced)
        except Exception as exc:
            error = f"{type(exc).__name__}: {exc}"
            logger.error(
                "Request record %s cannot be rebuilt (%s): dead-lettered (unreadable)",
                lease_id,
                error[:300],
                extra={"spider": self.crawler.spider},
            )
            self.ledger.take(lease_id, 1, "")
            self.ledger.dead(lease_id, "unreadable", error, 1)
            return
        if due is None:
            self.ready.append(request)
        else:
            self.hold(request, due)

    def hold(self, request: Request, due: float) -> None:
        """Hold ``request`` until ``due`` (Unix time), the engine woken then."""
        heapq.heappush(self.held, (due, next(self._order), request))
        self.engine.wake_in(max(0.0, due - time.time()))

    def hold_back(self, request: Request) -> bool:
        """Hold a leased request the send gate turned away (meta HOLD_META: until when), its
        lease kept, until then: waiting for its host's token holds no download slot. False for
        any other request, or one no longer leased to this worker (scheduled as a new one)."""
        due = request.meta.pop(HOLD_META, None)
        if due is None or lease_id_of(request) not in self.ledger.held:
            return False
        self.ledger.move(lease_id_of(request), "ready")
        self.hold(request, float(due))
        return True

    def come(self) -> None:
        """The held requests whose turn has come join the ready ones, in turn order (never
        one before its turn)."""
        now = time.time()
        while self.held and self.held[0][0] <= now:
            self.ready.append(heapq.heappop(self.held)[2])

    def wake_for_held(self) -> None:
        """Have the engine ask again when the next held turn comes, if one is held."""
        if self.held:
            self.engine.wake_in(max(0.0, self.held[0][0] - time.time()))

    def clear(self) -> None:
        self.ready.clear()
        self.held.clear()

    def _rebuilt(self, lease_id: str, data: str, paced: bool) -> Request:
        request = leased_request(data, self.crawler.spider, paced)
        request.meta[LEASE_META] = lease_id
        attempts = int(request.meta.get("retry_times", 0)) + 1
        self.ledger.take(lease_id, attempts, request.url)
        return request


@dataclass
class PopPlan:
    """What this worker's last pop found of the fleet's queue, and when it pops next (monotonic
    time ``at``). ``rated``: paced at a rate (not only by the Crawl-delays of some hosts), pops
    gather new work and wait between them, as a host's next turn is rarely now."""

    rated: Pacing | None = None
    base: float = 1.0  # seconds: the pause after one empty pop
    queue_size: int = 0
    next_due: float = 0.0
    at: float = 0.0
    empty_pops: int = 0

    def due(self, now: float) -> bool:
        return now >= self.at

    def now(self) -> None:
        """Pop at the engine's next ask."""
        self.at = 0.0

    def soon(self) -> None:
        """New work: the next pop at the engine's next ask, or, paced, within PACED_GATHER (a
        new request rarely has its host's turn now, and the requests of several pages go in
        one flush and are looked at in one pop)."""
        if self.rated is None:
            self.at = 0.0
        else:
            self.at = min(self.at, time.monotonic() + PACED_GATHER)

    def paced_out(self) -> bool:
        """The last paced pop found requests queued but none whose host had a turn to give."""
        return self.rated is not None and self.empty_pops > 0 and self.queue_size > 0

    def after(self, popped: Popped, batch_size: int, holding: bool) -> float | None:
        """Read what a pop found; when it brought less than a batch to send now and the queue
        is empty (or the worker paced), the next pop waits (:func:`pause_after`). The seconds
        after which the engine must ask again when the wait ends on a due time (0 when the pop
        left queued requests unlooked at), else None."""
        self.queue_size, self.next_due = popped.queue_size, popped.next_due
        if len(popped.leased) - len(popped.dues) >= batch_size or not (
            popped.queue_size == 0 or self.rated is not None
        ):
            return None
        self.empty_pops = 0 if popped.leased else min(self.empty_pops + 1, 3)
        pause = pause_after(popped, self.base, self.rated, self.empty_pops, holding)
        self.at = time.monotonic() + pause
        return pause if popped.next_due or popped.unscanned else None


def pause_after(
    popped: Popped, base: float, pacing: Pacing | None, empty_pops: int, holding: bool
) -> float:
    """Seconds before the next pop once the queue is empty (or, paced, has nothing to send
    now): until the delayed set's first request is due, at most 4 ``base`` (other workers'
    new work is seen that soon); with nothing delayed, after ``empty_pops`` empty pops in a
    row ``base``, twice, then four times that (and at once after a pop that found work, but
    for a paced queue, and 4 ``base`` while turns are ``holding``, paced up to its look-ahead:
    the turns held come without a pop; paced, ``base`` after a pop that found work, as after
    one empty pop: a request it schedules itself pops sooner); at once while a paced pop
    leaves requests it did not look at. Paced, see :func:`paced_pause`."""
    if popped.unscanned:
        return 0.0
    if popped.next_due and pacing is not None:
        return paced_pause(popped, base, pacing.ahead, holding)
    if popped.next_due:
        return min(4 * base, max(0.0, popped.next_due - time.time()))
    if popped.queue_size and pacing is not None:
        return base / 4
    if holding:  # its turns come without a pop; new work of its own pops sooner
        return max(4 * base, pacing.ahead) if pacing is not None else 4 * base
    if popped.leased:  # paced, not at once: its own new work pops sooner (``PopPlan.soon``)
        return 0.0 if pacing is None else base
    return base * 2.0 ** (empty_pops - 1)


def paced_pause(popped: Popped, base: float, ahead: float, holding: bool) -> float:
    """Seconds before a paced worker pops again once its pop left requests for later: just
    before the delayed set's first turn (all turns within the look-ahead then come in one
    pop), at most ``ahead`` seconds while it holds turns, else 4 ``base`` (other workers' new
    work is seen that soon)."""
    cap = max(4 * base, ahead) if holding else 4 * base
    early = base / 4 if ahead else 0.0
    return min(cap, max(PACED_GATHER, popped.next_due - time.time() - early))


class EngineCalls:
    """Has the engine ask for requests or look at the idle spider at a given time, not only at
    its 5-second heartbeat or when a download ends."""

    def __init__(self, crawler: Crawler) -> None:
        self.crawler = crawler
        self._wake: DelayedCall | None = None
        self._wake_at = 0.0

    def wake_in(self, seconds: float) -> None:
        """Have the engine ask for requests again in ``seconds`` (a delayed request or a held
        turn is due then): a host's turn is taken on time, so turns do not bunch up."""
        when = time.monotonic() + seconds
        if self._wake is not None and self._wake.active():
            if self._wake_at <= when:
                return
            self._wake.cancel()
        from twisted.internet import reactor  # the one Scrapy installed, imported once running

        self._wake_at = when
        self._wake = cast(Any, reactor).callLater(seconds, self._next_call)

    def look_again_soon(self, poll: float, next_pop: float) -> None:
        """Have the engine look at the idle spider again after ``poll`` seconds (the
        IDLE_POLL_INTERVAL): new start entries and the fleet's end are noticed sooner. While
        the next pop waits (monotonic time ``next_pop``: a delayed request's due time, or after
        empty pops), it looks again when that pop is due, at most four polls later."""
        slot = getattr(self.crawler.engine, "_slot", None)
        if slot is not None and slot.closing is None:
            slot.nextcall.schedule(min(4 * poll, max(poll, next_pop - time.monotonic())))

    def cancel(self) -> None:
        if self._wake is not None and self._wake.active():
            self._wake.cancel()

    def _next_call(self) -> None:
        slot = getattr(self.crawler.engine, "_slot", None)
        if slot is not None and slot.closing is None:
            slot.nextcall.schedule()
