"""Paced turns a worker holds until they come, and when a paced worker pops next.

A paced pop leases the turns due within its look-ahead at once (see ``scripts/pop.lua``):
the worker holds each request until its turn and hands it to the engine then, so a host
crawled at one request every few seconds costs one pop per look-ahead, not one per request.
A held request is leased until its turn plus a lease, so one whose worker dies comes back
like any other.
"""

from __future__ import annotations

import heapq
import itertools
import time
from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.crawler import Crawler
    from twisted.internet.base import DelayedCall

    from crawler.frontier.pacing import Pacing
    from crawler.frontier.queue import Popped

# Seconds between two pops that wait for paced turns: turns due meanwhile go out together, this
# much late at most (a turn is given up only when a whole interval late).
PACED_GATHER = 0.05


class HeldTurns:
    """Requests leased ahead of their turn, earliest first."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, Request]] = []
        self._order = itertools.count()

    def __len__(self) -> int:
        return len(self._heap)

    def hold(self, request: Request, due: float) -> None:
        """Hold ``request`` until ``due`` (Unix time)."""
        heapq.heappush(self._heap, (due, next(self._order), request))

    def come(self) -> list[Request]:
        """The requests whose turn has come, in turn order (never one before its turn)."""
        ready = []
        now = time.time()
        while self._heap and self._heap[0][0] <= now:
            ready.append(heapq.heappop(self._heap)[2])
        return ready

    def next_in(self) -> float | None:
        """Seconds until the next held turn, None when none is held."""
        return max(0.0, self._heap[0][0] - time.time()) if self._heap else None

    def clear(self) -> None:
        self._heap.clear()


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
    if popped.leased:  # paced, not at once: its own new work pops sooner (``_pop_soon``)
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
