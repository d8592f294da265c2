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
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from scrapy import Request

    from crawler.frontier.queue import Popped

# Seconds of turns one paced pop leases ahead, at most a quarter of FRONTIER_LEASE_SECONDS.
LOOKAHEAD = 10.0
# Seconds between two pops that wait for paced turns: turns due meanwhile go out together, this
# much late at most (a turn is given up only when a whole interval late).
PACED_GATHER = 0.05


def lookahead(lease_seconds: float) -> float:
    return min(LOOKAHEAD, lease_seconds / 4)


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


def paced_pause(popped: Popped, base: float, ahead: float, holding: bool) -> float:
    """Seconds before a paced worker pops again once its pop left requests for later: just
    before the delayed set's first turn (all turns within the look-ahead then come in one
    pop), at most ``ahead`` seconds while it holds turns, else 4 ``base`` (other workers' new
    work is seen that soon)."""
    cap = max(4 * base, ahead) if holding else 4 * base
    early = base / 4 if ahead else 0.0
    return min(cap, max(PACED_GATHER, popped.next_due - time.time() - early))
