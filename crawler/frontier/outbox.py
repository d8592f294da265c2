"""What a worker owes Redis: the requests it scheduled, the lease updates and start-entry
acknowledgements its pages allow, and the renewals of the leases it holds.

Each round trip of the scheduler (see ``scheduler.py``) takes the whole outbox: new requests
first, then the acknowledgements they allow, then the pop and the riders. New requests go at
the next tick (other workers may be waiting for them); acknowledgements alone wait for a trip
that goes anyway, at most :func:`~crawler.frontier.options.hold_acks` seconds, and so do new
requests whose host has no turn free before then (see :meth:`Outbox.push`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from crawler.frontier.leases import ADOPT
from crawler.frontier.queue import PRIORITY_LIMIT

if TYPE_CHECKING:
    from crawler.frontier.leases import LeaseLedger, Op
    from crawler.frontier.queue import Frontier, Pending

# Requests per schedule script call.
SCHEDULE_CHUNK = 500


@dataclass(frozen=True)
class Adopted:
    """A request a worker kept for itself: its lease id (its priority in it) and record."""

    lease_id: str
    record: str


def adopted(seq: int, priority: int, record: str) -> Adopted:
    """A request of ``priority`` kept on the turn numbered ``seq``, with the lease id the queue
    gives a request leased as that number (see ``new_id`` in scripts/queue.lua)."""
    clamped = max(-PRIORITY_LIMIT, min(PRIORITY_LIMIT, priority))
    lease_id = str(seq) if clamped == 0 else f"{seq}:{clamped}"
    return Adopted(lease_id, record)


@dataclass
class Sealed:
    """The outbox's content as one round trip took it."""

    pushes: list[Pending] = field(default_factory=list)
    ops: list[Op] = field(default_factory=list)
    start_acks: list[bytes] = field(default_factory=list)
    adopted: list[Adopted] = field(default_factory=list)
    eager: bool = False  # whether a push among them could not wait

    def schedule_replies(self, replies: list[Any]) -> list[Any]:
        """The replies of the schedule calls among a trip's ``replies`` (they come first)."""
        return replies[: (len(self.pushes) + SCHEDULE_CHUNK - 1) // SCHEDULE_CHUNK]


class Outbox:
    """Requests to schedule, and the lease ledger whose updates go with them."""

    def __init__(self, ledger: LeaseLedger) -> None:
        self.pushes: list[Pending] = []
        self.leases = ledger
        self.starts = ledger.starts
        self.adopted: list[Adopted] = []  # requests kept for this worker (see chains.py)
        self._held_since: float | None = None
        self._eager = False  # a push waits that should go at the next tick

    def push(self, request: Pending, eager: bool = True) -> None:
        """Schedule ``request`` with the next round trip: at the next tick, or, not ``eager``
        (its host's turns were all taken for the look-ahead when last asked), with a trip that
        goes anyway, as acknowledgements do: sent sooner it would most likely wait in Redis
        behind the host's other requests all the same."""
        self.pushes.append(request)
        self._eager = self._eager or eager

    def __bool__(self) -> bool:
        return bool(self.pushes or self.leases.ops or self.starts.acks or self.adopted)

    def due(self, hold: float) -> bool:
        """Whether a round trip should go now for the outbox: requests wait (but those that
        may wait), or updates have waited ``hold`` seconds."""
        if self._eager:
            return True
        if not self:
            return False
        now = time.monotonic()
        self._held_since = self._held_since or now
        return now - self._held_since >= hold

    def seal(self, pipe: Any, frontier: Frontier, worker: str, lease_seconds: float) -> Sealed:
        """Queue everything on ``pipe`` and empty the outbox (what comes meanwhile waits for
        the next trip)."""
        sealed = Sealed(self.pushes, self.leases.ops, self.starts.acks, self.adopted, self._eager)
        self.pushes, self.leases.ops, self.starts.acks, self.adopted = [], [], [], []
        self._eager = False
        for first in range(0, len(sealed.pushes), SCHEDULE_CHUNK):
            frontier.schedule(sealed.pushes[first : first + SCHEDULE_CHUNK], client=pipe)
        # The requests kept for this worker are leased to it before any ack (theirs too).
        ops = [(ADOPT, entry.lease_id, entry.record) for entry in sealed.adopted] + sealed.ops
        if ops:
            frontier.settle(ops, worker, lease_seconds, client=pipe)
        frontier.ack_start(sealed.start_acks, client=pipe)
        return sealed

    def sent(self) -> None:
        self._held_since = None

    def unsent(self, sealed: Sealed) -> None:
        """Put back what a failed round trip did not write, ahead of what came since."""
        self.pushes = sealed.pushes + self.pushes
        self.leases.ops = sealed.ops + self.leases.ops
        self.starts.acks = sealed.start_acks + self.starts.acks
        self.adopted = sealed.adopted + self.adopted
        self._eager = self._eager or sealed.eager

    def queue_renewals(
        self, pipe: Any, frontier: Frontier, worker: str, lease_seconds: float
    ) -> None:
        """Queue on ``pipe`` the renewal of every lease held."""
        ops = self.leases.renewals()
        if ops:
            frontier.settle(ops, worker, lease_seconds, client=pipe)
        frontier.renew_start(list(self.starts.held), lease_seconds, pipe)
