"""The leases one worker holds, and the one way each of them ends.

A request popped from the frontier is leased to this worker. Its lease ends exactly once: acked
when its response is handled (output consumed, items through the pipelines), released back to
the queue untouched (Redis away, the worker closing), or dead-lettered with a reason. The book
records each decision as an op (see ``lua.SETTLE``); the scheduler writes them in batches.

Where a lease is: ``ready`` (popped, not yet given to the engine), ``downloading`` (in the
downloader and its middlewares), ``downloaded`` (the response left the downloader middlewares)
and ``scraping`` (the callback's output is being consumed).
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from scrapy import Request
    from twisted.python.failure import Failure

Op = tuple[str, str, str]  # (op, lease id, payload), see lua.SETTLE
PHASES = ("ready", "downloading", "downloaded", "scraping")


@dataclass
class Lease:
    """A request this worker holds: where it is and what must finish before it is acked."""

    phase: str = "ready"
    pending_items: int = 0
    output_done: bool = False
    attempts: int = 1
    url: str = ""


class LeaseBook:
    """The leases this worker holds and the ops that settled leases wait in until written."""

    def __init__(self) -> None:
        self.held: dict[str, Lease] = {}
        self.ops: list[Op] = []

    def take(self, lease_id: str, attempts: int, url: str) -> None:
        self.held[lease_id] = Lease(attempts=attempts, url=url)

    def move(self, lease_id: str, phase: str) -> None:
        lease = self.held.get(lease_id)
        if lease is not None:
            lease.phase = phase

    def phase(self, lease_id: str) -> str | None:
        lease = self.held.get(lease_id)
        return lease.phase if lease is not None else None

    def item_started(self, lease_id: str) -> None:
        lease = self.held.get(lease_id)
        if lease is not None:
            lease.pending_items += 1

    def item_finished(self, lease_id: str) -> None:
        lease = self.held.get(lease_id)
        if lease is not None:
            lease.pending_items -= 1
            self._ack_if_done(lease_id, lease)

    def output_finished(self, lease_id: str) -> None:
        lease = self.held.get(lease_id)
        if lease is not None:
            lease.output_done = True
            self._ack_if_done(lease_id, lease)

    def ack(self, lease_id: str) -> bool:
        return self._end(lease_id, "a")

    def release(self, lease_id: str) -> bool:
        return self._end(lease_id, "r")

    def dead(self, lease_id: str, failure: str) -> bool:
        """Dead-letter the lease; ``failure`` is the JSON object stored with the request."""
        return self._end(lease_id, "d", failure)

    def replaces(self, lease_id: str) -> bool:
        """A request carrying the lease of one still in the downloader replaces it (redirect,
        retry, deferral): the lease is acked in the same write that schedules the new one."""
        lease = self.held.get(lease_id)
        return lease is not None and lease.phase == "downloading" and self.ack(lease_id)

    def release_all(self) -> None:
        for lease_id in list(self.held):
            self.release(lease_id)

    def renewals(self) -> list[Op]:
        return [("n", lease_id, "") for lease_id in self.held]

    def orphans(self, in_engine: Collection[str]) -> list[tuple[str, Lease]]:
        """Leases given to the engine whose request the engine no longer has, with nothing
        left to report on them (no item in the pipelines): nothing else will settle them."""
        return [
            (lease_id, lease)
            for lease_id, lease in self.held.items()
            if lease.phase != "ready" and lease.pending_items <= 0 and lease_id not in in_engine
        ]

    def _ack_if_done(self, lease_id: str, lease: Lease) -> None:
        if lease.output_done and lease.pending_items <= 0:
            self.ack(lease_id)

    def _end(self, lease_id: str, op: str, payload: str = "") -> bool:
        if self.held.pop(lease_id, None) is None:
            return False
        self.ops.append((op, lease_id, payload))
        return True


class StartLeases:
    """Start entries this worker leased, each with the number of its requests not yet in the
    frontier; an entry whose requests are all there waits in ``acks`` to be acked."""

    def __init__(self) -> None:
        self.held: dict[bytes, int] = {}
        self.acks: list[bytes] = []

    def leased(self, members: list[bytes]) -> None:
        self.held.update(dict.fromkeys(members, 0))

    def expect(self, member: bytes, count: int) -> None:
        self.held[member] = count
        if count == 0:
            self._done(member)

    def pushed(self, member: bytes) -> None:
        remaining = self.held.get(member)
        if remaining is None:
            return
        if remaining <= 1:
            self._done(member)
        else:
            self.held[member] = remaining - 1

    def forget(self, member: bytes) -> None:
        """Stop renewing the entry without acking it: its lease expires and it comes back."""
        self.held.pop(member, None)

    def finish(self, member: bytes) -> None:
        """Ack the entry whatever its count (it was set aside)."""
        if member in self.held:
            self._done(member)

    def _done(self, member: bytes) -> None:
        del self.held[member]
        self.acks.append(member)


class LeaseErrback:
    """The errback of a leased request in the engine: a failure that reaches it while the
    request is still in the downloader's hands (raised by a ``process_response``, which skips
    every ``process_exception``) is handed to ``settle`` first; then the request's own errback
    runs, or the failure goes on as if there were none.

    The scheduler takes it off again before a request is written to Redis.
    """

    def __init__(
        self,
        in_downloader: Callable[[Request], bool],
        settle: Callable[[Request, BaseException], None],
        errback: Callable[..., Any] | None,
    ) -> None:
        self.in_downloader = in_downloader
        self.settle = settle
        self.errback = errback
        self.__name__ = getattr(errback, "__name__", "lease_errback")

    def __call__(self, failure: Failure) -> Any:
        request = getattr(failure, "request", None)
        if request is not None and failure.value is not None and self.in_downloader(request):
            self.settle(request, failure.value)
        return self.errback(failure) if self.errback is not None else failure


def unguarded(errback: Callable[..., Any] | None) -> Callable[..., Any] | None:
    """The request's own errback, without the LeaseErrback around it."""
    while isinstance(errback, LeaseErrback):
        errback = errback.errback
    return errback
