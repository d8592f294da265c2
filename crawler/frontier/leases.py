"""The leases one worker holds, and the one way each of them ends.

A request popped from the frontier is leased to this worker. Its lease ends exactly once: acked
when its response is handled (output consumed, items through the pipelines), released back to
the queue untouched (Redis away, the worker closing), or dead-lettered with a reason. The ledger
records each decision as an op (see ``scripts/settle.lua``); the scheduler writes them in batches.

Where a lease is: ``ready`` (popped, not yet given to the engine), ``downloading`` (in the
downloader and its middlewares), ``downloaded`` (the response left the downloader
middlewares: its callback's output and items are what the lease waits for) and ``errback``
(its download failed or was ignored, and the request's own errback is called: its output and
items are what the lease waits for, as Scrapy passes them through no spider middleware).
"""

from __future__ import annotations

import inspect
import logging
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from scrapy import Request
from scrapy.utils.asyncgen import as_async_generator
from scrapy.utils.spider import iterate_spider_output
from twisted.python.failure import Failure

from crawler.frontier import codec

if TYPE_CHECKING:
    from scrapy.crawler import Crawler

# Meta key holding the lease id of a request popped from the frontier.
LEASE_META = "frontier_lease"
logger = logging.getLogger(__name__)

Op = tuple[str, str, str]  # (op, lease id, payload), see scripts/settle.lua
# The ops, as scripts/settle.lua names them too: a lease ends acked (done), released (back to
# the queue untouched) or dead (a dead letter with its reason), or is renewed; a request this
# worker kept for itself is adopted (written as leased to it, see chains.py).
ACK, RELEASE, RENEW, DEAD, ADOPT = "a", "r", "n", "d", "l"


@dataclass
class Lease:
    """A request this worker holds: where it is and what must finish before it is acked."""

    phase: str = "ready"
    pending_items: int = 0
    stored: int = 0  # items through the pipelines that were stored (item_scraped)
    output_done: bool = False
    failure: dict[str, Any] | None = None  # why it ends dead, once its items left the pipelines
    attempts: int = 1
    url: str = ""


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


class LeaseLedger:
    """The leases one worker holds, where each stands, and the ops of those that ended, waiting
    for the scheduler's next round trip; ``starts``, the start entries it leased. The lease
    middlewares (``crawler.middlewares.Lease*Middleware``), the middlewares that give requests
    up and the start-entry feed tell it what happened to a request, through
    ``crawler.frontier.reports.FrontierReports``; the scheduler, what it took and handed on."""

    def __init__(self, crawler: Crawler, worker: str) -> None:
        self.crawler = crawler
        self.worker = worker
        self.held: dict[str, Lease] = {}
        self.ops: list[Op] = []
        self.starts = StartLeases()
        self._suspects: set[str] = set()

    # --- the scheduler's side, by lease id ---------------------------------------------------

    def take(self, lease_id: str, attempts: int, url: str) -> None:
        self.held[lease_id] = Lease(attempts=attempts, url=url)

    def move(self, lease_id: str, phase: str) -> None:
        if (lease := self.held.get(lease_id)) is not None:
            lease.phase = phase

    def end(self, lease_id: str, op: str, payload: str = "") -> bool:
        """End the lease with ``op`` (ACK, RELEASE, DEAD with its failure's JSON); False when
        this worker does not hold it (any more)."""
        if self.held.pop(lease_id, None) is None:
            return False
        self.ops.append((op, lease_id, payload))
        return True

    def replaces(self, lease_id: str) -> bool:
        """A request carrying the lease of one still in the downloader replaces it (redirect,
        retry, deferral): the lease is acked in the same write that schedules the new one."""
        lease = self.held.get(lease_id)
        return lease is not None and lease.phase == "downloading" and self.end(lease_id, ACK)

    def release_all(self) -> None:
        for lease_id in list(self.held):
            self.end(lease_id, RELEASE)

    def renewals(self) -> list[Op]:
        return [(RENEW, lease_id, "") for lease_id in self.held]

    # --- what happened to a request, by request ----------------------------------------------

    def guard(self, request: Request, on_failure: Callable[[Request, BaseException], None]) -> None:
        """Have ``on_failure`` called with a failure of the leased ``request`` that reaches the
        spider while the request is still in the downloader's hands (see LeaseErrback)."""
        if lease_id_of(request) in self.held and not isinstance(request.errback, LeaseErrback):
            request.errback = LeaseErrback(self, on_failure, request.errback)

    def in_downloader(self, request: Request) -> bool:
        lease = self.held.get(lease_id_of(request))
        return lease is not None and lease.phase == "downloading"

    def to_errback(self, request: Request) -> bool:
        """The request's failure goes on to its own errback (guarded, see LeaseErrback): its
        lease waits for the errback's output and items, ended by :meth:`finished` once they are
        through (acked, or dead for a failure said meanwhile). False, nothing changed, for a
        request without an errback of its own, or whose lease is not held."""
        errback, lease = request.errback, self.held.get(lease_id_of(request))
        if lease is None or not isinstance(errback, LeaseErrback) or errback.errback is None:
            return False
        lease.phase = "errback"
        return True

    def awaits_errback(self, request: Request) -> bool:
        lease = self.held.get(lease_id_of(request))
        return lease is not None and lease.phase == "errback" and not lease.output_done

    def downloaded(self, request: Request) -> None:
        """The response went through every downloader middleware."""
        self.move(lease_id_of(request), "downloaded")

    def item_started(self, request: Request) -> None:
        if (lease := self.held.get(lease_id_of(request))) is not None:
            lease.pending_items += 1

    def item_finished(self, request: Request, stored: bool = False) -> None:
        if (lease := self.held.get(lease_id_of(request))) is not None:
            lease.pending_items -= 1
            lease.stored += stored
            self._ack_if_done(lease_id_of(request), lease)

    def finished(self, request: Request) -> None:
        """The request's output is done (its callback's output went through, or there was none to
        wait for: filtered, ignored): acked, or dead for a failed item, once its items left the
        pipelines."""
        if (lease := self.held.get(lease_id_of(request))) is not None:
            lease.output_done = True
            self._ack_if_done(lease_id_of(request), lease)

    def release(self, request: Request) -> None:
        """Hand the request back to the queue untouched, for any worker to try again."""
        if self.end(lease_id_of(request), RELEASE):
            self._count("frontier/released")

    def failed(self, request: Request, reason: str, error: str) -> None:
        """Give the request up: it goes to the dead-letter list with the reason."""
        attempts = int(request.meta.get("retry_times", 0)) + 1
        self.dead(lease_id_of(request), reason, error, attempts)

    def dead(self, lease_id: str, reason: str, error: str, attempts: int) -> None:
        """Dead-letter the lease ``lease_id`` with the reason: at once, or, with items of its
        page still in the pipelines, once they left them (the first failure is kept)."""
        failure: dict[str, Any] = {
            "reason": reason,
            "error": error[:2000],
            "time": time.time(),
            "worker": self.worker,
            "attempts": attempts,
        }
        lease = self.held.get(lease_id)
        if lease is not None:
            lease.failure = failure = lease.failure or failure
            if lease.pending_items > 0 or (lease.phase == "errback" and not lease.output_done):
                return
        self._end_dead(lease_id, failure)

    def _end_dead(self, lease_id: str, failure: dict[str, Any]) -> None:
        lease = self.held.get(lease_id)
        if lease is not None and lease.stored:
            failure["items_stored"] = lease.stored
        if self.end(lease_id, DEAD, codec.dumps(failure)):
            self._count("frontier/dead")
            self._count(f"frontier/dead/{failure['reason']}")

    def dead_letter_orphans(self) -> None:
        """Dead-letter leases given to the engine whose request left it with nothing left to
        report on them (no item in the pipelines), seen so at two checks in a row: no worker
        waits on a lease nothing will settle."""
        in_engine = engine_leases(self.crawler)
        if in_engine is None:
            return
        orphans = {
            lease_id: lease
            for lease_id, lease in self.held.items()
            if lease.phase != "ready" and lease.pending_items <= 0 and lease_id not in in_engine
        }
        for lease_id in self._suspects & orphans.keys():
            lease = orphans[lease_id]
            logger.error(
                "%s left the engine without an outcome: dead-lettered (unsettled)",
                lease.url,
                extra={"spider": self.crawler.spider},
            )
            self.dead(lease_id, "unsettled", "left the engine without an outcome", lease.attempts)
        self._suspects = set(orphans) - self._suspects

    def _ack_if_done(self, lease_id: str, lease: Lease) -> None:
        if lease.output_done and lease.pending_items <= 0:
            if lease.failure is not None:
                self._end_dead(lease_id, lease.failure)
            else:
                # The items the page stored, counted for its crawl job.
                self.end(lease_id, ACK, str(lease.stored) if lease.stored else "")

    def _count(self, key: str, value: int = 1) -> None:
        if value and self.crawler is not None and self.crawler.stats is not None:
            self.crawler.stats.inc_value(key, value)


class LeaseErrback:
    """The errback of a leased request in the engine: a failure that reaches it while the
    request is still in the downloader's hands (raised by a ``process_response``, which skips
    every ``process_exception``) is handed to ``settle`` first; then the request's own errback
    runs, or the failure goes on as if there were none. The output of the request's own errback,
    which Scrapy passes through no spider middleware, is followed here: its items counted on
    the lease, which ends once they are through the pipelines (``LeaseLedger.to_errback``).

    The scheduler takes it off again before a request is written to Redis.
    """

    def __init__(
        self,
        ledger: LeaseLedger,
        on_failure: Callable[[Request, BaseException], None],
        errback: Callable[..., Any] | None,
    ) -> None:
        self.ledger = ledger
        self.on_failure = on_failure
        self.errback = errback
        self.__name__ = getattr(errback, "__name__", "lease_errback")

    def __call__(self, failure: Failure) -> Any:
        request = getattr(failure, "request", None)
        if request is not None and failure.value is not None and self.ledger.in_downloader(request):
            self.ledger.to_errback(request)
            self.on_failure(request, failure.value)
        if self.errback is None:
            return failure
        if request is None or not self.ledger.awaits_errback(request):
            return self.errback(failure)
        return self._followed(request, failure)

    def _followed(self, request: Request, failure: Failure) -> Any:
        """The errback's output, as Scrapy reads it, its items counted on the lease, which ends
        once it is read (or the errback raised, or let the failure go on)."""
        assert self.errback is not None
        try:
            output = self.errback(failure)
        except BaseException:
            self.ledger.finished(request)
            raise
        if isinstance(output, Failure):
            self.ledger.finished(request)
            return output
        if inspect.iscoroutine(output):
            return self._awaited(request, output)
        return self._counted(request, iterate_spider_output(output))

    async def _awaited(self, request: Request, output: Any) -> Any:
        """The output of an ``async def`` errback, once it returned (its exception raised as
        Scrapy would meet it)."""
        try:
            result = await output
        except BaseException:
            self.ledger.finished(request)
            raise
        return self._counted(request, iterate_spider_output(result))

    async def _counted(self, request: Request, output: Any) -> AsyncIterator[Any]:
        try:
            async for each in as_async_generator(output):
                if each is not None and not isinstance(each, Request):  # an item, not skipped
                    self.ledger.item_started(request)
                yield each
        finally:
            self.ledger.finished(request)


def unguarded(errback: Callable[..., Any] | None) -> Callable[..., Any] | None:
    """The request's own errback, without the LeaseErrback around it."""
    while isinstance(errback, LeaseErrback):
        errback = errback.errback
    return errback


def lease_id_of(request: Request) -> str:
    """The lease a request popped from the frontier carries ("" for one not leased)."""
    return str(request.meta.get(LEASE_META, ""))


def engine_leases(crawler: Crawler) -> set[str] | None:
    """Lease ids of the requests the engine is working on, from their download to the end of
    their output; None when the engine cannot tell (not running)."""
    slot = getattr(crawler.engine, "_slot", None)
    requests = getattr(slot, "inprogress", None)
    if requests is None:
        return None
    return {lease_id_of(request) for request in requests}
