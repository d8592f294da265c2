"""The Scrapy scheduler on the Redis frontier: leased batches, JSON, nothing lost.

A popped request is leased to this worker, not deleted. The lease is acknowledged once the
response is handled: the callback's output consumed, its items through the pipelines and its
new requests in Redis (see ``acks.py``). Requests a worker schedules are buffered and written in
one script call per batch, together with the acknowledgements they allow, so a worker that
dies at any point leaves its leases to expire and come back to the queue for another worker.
"""

from __future__ import annotations

import logging
import os
import socket
import time
import uuid
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from redis.exceptions import RedisError
from scrapy import Request
from scrapy.core.scheduler import BaseScheduler
from scrapy.utils.request import request_from_dict
from twisted.internet import task

from crawler.config import mask_uri, setting_int
from crawler.connection import RedisUnavailable, redis_from_settings
from crawler.scheduling import serializer
from crawler.scheduling.frontier import DupefilterConfig, Frontier, FrontierKeys, Pending

if TYPE_CHECKING:
    from scrapy import Spider
    from scrapy.crawler import Crawler
    from scrapy.settings import BaseSettings

    from crawler.connection import RedisClient

logger = logging.getLogger(__name__)

LEASE_META = "frontier_lease"
START_META = "frontier_start"
# Meta key holding the epoch time before which a request must not be sent (retries, cool-downs):
# it waits in the delayed set until then.
DUE_META = "frontier_due"
DUPEFILTER_MODES = ("bloom", "redisbloom", "exact", "none")


@dataclass
class Lease:
    """A request this worker holds: where it is and what must finish before it is acked."""

    phase: str = "ready"  # ready -> downloading -> scraping
    pending_items: int = 0
    output_done: bool = False


@dataclass(frozen=True)
class FrontierSettings:
    """The scheduler's settings, read and checked once."""

    batch_size: int
    lease_seconds: int
    flush_interval: float
    dupefilter: DupefilterConfig
    local_seen: int

    @classmethod
    def from_settings(cls, settings: BaseSettings) -> FrontierSettings:
        mode = settings.get("DUPEFILTER_MODE")
        if mode not in DUPEFILTER_MODES:
            raise ValueError(f"DUPEFILTER_MODE must be one of {DUPEFILTER_MODES}, got {mode!r}")
        error_rate = settings.getfloat("DUPEFILTER_ERROR_RATE")
        if not 0 < error_rate < 1:
            raise ValueError(f"DUPEFILTER_ERROR_RATE must be between 0 and 1, got {error_rate}")
        return cls(
            batch_size=setting_int(settings, "FRONTIER_BATCH_SIZE", 1, 1000),
            lease_seconds=setting_int(settings, "FRONTIER_LEASE_SECONDS", 5),
            flush_interval=settings.getfloat("FRONTIER_FLUSH_INTERVAL"),
            dupefilter=DupefilterConfig(
                mode, setting_int(settings, "DUPEFILTER_CAPACITY", 1000), error_rate
            ),
            local_seen=setting_int(settings, "DUPEFILTER_LOCAL_CACHE", 0),
        )


class FrontierScheduler(BaseScheduler):
    """Scheduler whose queue, leases, delayed set, dead letters and duplicate filter are in Redis.

    Settings (crawler/settings.py): REDIS_URL, FRONTIER_BATCH_SIZE, FRONTIER_LEASE_SECONDS,
    FRONTIER_FLUSH_INTERVAL, DUPEFILTER_MODE, DUPEFILTER_CAPACITY, DUPEFILTER_ERROR_RATE,
    DUPEFILTER_LOCAL_CACHE,
    REDIS_START_URLS_KEY. Closing never clears the frontier (see ``scrapy frontier purge``).
    """

    def __init__(self, crawler: Crawler, server: RedisClient, config: FrontierSettings) -> None:
        self.crawler = crawler
        self.server = server
        self.config = config
        self.worker = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
        self.frontier: Frontier | None = None
        self._ready: deque[Request] = deque()
        self._held: dict[str, Lease] = {}
        self._pushes: list[Pending] = []
        self._ops: list[tuple[str, str, str]] = []
        self._start_held: dict[bytes, int] = {}
        self._start_acks: list[bytes] = []
        self._seen_here: set[bytes] = set()
        self._queue_size = 0
        self._next_pop = 0.0
        self._backoff = 0.0
        self._outage_since: float | None = None
        self._loops: list[task.LoopingCall] = []

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
        keys = FrontierKeys(
            spider.name, settings.get("REDIS_START_URLS_KEY") % {"name": spider.name}
        )
        self.frontier = Frontier(self.server, keys, self.config.dupefilter)
        try:
            sizes = self.frontier.sizes()
        except RedisError as exc:
            url = mask_uri(settings.get("REDIS_URL") or "")
            raise RedisUnavailable(f"Redis at {url} is unreachable: {exc}") from exc
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
        self._start_loop(self.flush, self.config.flush_interval)
        self._start_loop(self.renew, self.config.lease_seconds / 3)

    def close(self, reason: str) -> None:
        for loop in self._loops:
            if loop.running:
                loop.stop()
        for request in self._ready:
            self._ops.append(("r", request.meta.pop(LEASE_META), ""))
        self._ready.clear()
        for lease_id in list(self._held):
            self._ops.append(("r", lease_id, ""))
        self._held.clear()
        self._backoff = 0.0
        if not self.flush():
            logger.error(
                "Could not reach Redis at close: %d requests and %d lease updates not written; "
                "their leases expire and other workers take them over",
                len(self._pushes),
                len(self._ops),
            )

    def has_pending_requests(self) -> bool:
        return bool(self._ready or self._pushes or self._queue_size > 0)

    def enqueue_request(self, request: Request) -> bool:
        lease_id = request.meta.pop(LEASE_META, None)
        start_member = request.meta.pop(START_META, None)
        assert self.crawler.request_fingerprinter is not None
        fingerprint = self.crawler.request_fingerprinter.fingerprint(request)
        scheduled = request.dont_filter or self._first_time_here(fingerprint)
        if scheduled:
            self._pushes.append(self._pending(request, fingerprint))
            self._next_pop = 0.0  # the engine's next ask writes it and may get it straight back
            self._count("scheduler/enqueued/redis")
        if lease_id is not None and self._replaces(lease_id):
            self._ops.append(("a", lease_id, ""))
        if start_member is not None:
            self._start_pushed(start_member)
        if len(self._pushes) >= self.config.batch_size:
            self.flush()
        return scheduled

    def _first_time_here(self, fingerprint: bytes) -> bool:
        """False for a fingerprint this worker scheduled before: the fleet's filter has it, so
        it is dropped here without serializing it or asking Redis."""
        if not self.config.local_seen or self.config.dupefilter.mode == "none":
            return True
        if fingerprint in self._seen_here:
            self._count("dupefilter/filtered")
            return False
        if len(self._seen_here) >= self.config.local_seen:
            self._seen_here.clear()
        self._seen_here.add(fingerprint)
        return True

    def next_request(self) -> Request | None:
        if not self._ready and time.monotonic() >= self._next_pop:
            self._refill()
        if not self._ready:
            return None
        request = self._ready.popleft()
        self._held[request.meta[LEASE_META]].phase = "downloading"
        self._count("scheduler/dequeued/redis")
        return request

    # --- lease lifecycle, reported by crawler.scheduling.acks ----------------------------------

    def scraping(self, request: Request) -> None:
        lease = self._lease(request)
        if lease is not None:
            lease.phase = "scraping"

    def item_started(self, request: Request) -> None:
        lease = self._lease(request)
        if lease is not None:
            lease.pending_items += 1

    def item_finished(self, request: Request) -> None:
        lease = self._lease(request)
        if lease is not None:
            lease.pending_items -= 1
            self._ack_if_done(request)

    def output_finished(self, request: Request) -> None:
        lease = self._lease(request)
        if lease is not None:
            lease.output_done = True
            self._ack_if_done(request)

    def finished(self, request: Request) -> None:
        """The request was handled without output to wait for (filtered, ignored)."""
        lease_id = _lease_id(request)
        if self._held.pop(lease_id, None) is not None:
            self._ops.append(("a", lease_id, ""))

    def release(self, request: Request) -> None:
        """Hand the request back to the queue untouched, for any worker to try again."""
        lease_id = _lease_id(request)
        if self._held.pop(lease_id, None) is not None:
            self._ops.append(("r", lease_id, ""))
            self._count("frontier/released")

    def failed(self, request: Request, reason: str, error: str) -> None:
        """Give the request up: it goes to the dead-letter list with the reason."""
        lease_id = _lease_id(request)
        if self._held.pop(lease_id, None) is None:
            return
        failure = {
            "reason": reason,
            "error": error[:2000],
            "time": time.time(),
            "worker": self.worker,
            "attempts": int(request.meta.get("retry_times", 0)) + 1,
        }
        self._ops.append(("d", lease_id, serializer.dumps(failure)))
        self._count("frontier/dead")
        self._count(f"frontier/dead/{reason}")

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
        for member in members:
            self._start_held[member] = 0
        return members

    def expect_start_requests(self, member: bytes, count: int) -> None:
        """The entry ``member`` became ``count`` requests (tagged with START_META)."""
        self._start_held[member] = count
        if count == 0:
            self._release_start(member)

    # --- internals -------------------------------------------------------------------------------

    def flush(self) -> bool:
        """Write buffered requests, then lease updates they allow, in one round trip."""
        if not (self._pushes or self._ops or self._start_acks) or self._in_backoff():
            return not (self._pushes or self._ops or self._start_acks)
        assert self.frontier is not None
        pushes, ops, start_acks = self._pushes, self._ops, self._start_acks
        try:
            pipe = self.server.pipeline(transaction=False)
            for first in range(0, len(pushes), 500):
                self.frontier.schedule(pushes[first : first + 500], client=pipe)
            if ops:
                self.frontier.settle(ops, self.worker, self.config.lease_seconds, client=pipe)
            self.frontier.ack_start(start_acks, client=pipe)
            results = pipe.execute()
        except RedisError as exc:
            self._outage(exc)
            return False
        self._pushes, self._ops, self._start_acks = [], [], []
        self._recovered()
        self._count_filtered(results[: (len(pushes) + 499) // 500])
        if pushes:
            self._queue_size += len(pushes)
            self._next_pop = 0.0
        return True

    def renew(self) -> None:
        """Extend the leases this worker holds, so only a dead worker's leases expire."""
        if self.frontier is None or self._in_backoff():
            return
        ops = [("n", lease_id, "") for lease_id in self._held]
        try:
            pipe = self.server.pipeline(transaction=False)
            if ops:
                self.frontier.settle(ops, self.worker, self.config.lease_seconds, client=pipe)
            self.frontier.renew_start(self._start_held, self.config.lease_seconds, pipe)
            pipe.execute()
        except RedisError as exc:
            self._outage(exc)

    def _refill(self) -> None:
        if not self.flush():
            return
        assert self.frontier is not None
        try:
            popped = self.frontier.pop(
                self.config.batch_size, self.config.lease_seconds, self.worker
            )
        except RedisError as exc:
            self._outage(exc)
            return
        self._recovered()
        self._queue_size = popped.queue_size
        self._count("frontier/reclaimed", popped.reclaimed)
        self._count("frontier/promoted", popped.promoted)
        for lease_id, data in popped.leased:
            self._ready.append(self._request(lease_id, data))
        if not popped.leased:
            # Nothing ready: look again after a short pause instead of once per engine loop.
            self._next_pop = time.monotonic() + min(1.0, self.config.flush_interval * 4)

    def _request(self, lease_id: str, data: str) -> Request:
        request = request_from_dict(serializer.loads(data), spider=self.crawler.spider)
        request.meta[LEASE_META] = lease_id
        self._held[lease_id] = Lease()
        return request

    def _pending(self, request: Request, fingerprint: bytes) -> Pending:
        return Pending(
            json=serializer.dumps(_request_dict(request, self.crawler.spider)),
            fingerprint=fingerprint,
            priority=request.priority,
            dont_filter=request.dont_filter,
            due=float(request.meta.pop(DUE_META, 0.0)),
        )

    def _replaces(self, lease_id: str) -> bool:
        """A request carrying a lease that is still downloading replaces it (redirect, retry)."""
        lease = self._held.get(lease_id)
        if lease is None or lease.phase == "scraping":
            return False
        del self._held[lease_id]
        return True

    def _lease(self, request: Request) -> Lease | None:
        return self._held.get(_lease_id(request))

    def _ack_if_done(self, request: Request) -> None:
        lease_id = _lease_id(request)
        lease = self._held[lease_id]
        if lease.output_done and lease.pending_items <= 0:
            del self._held[lease_id]
            self._ops.append(("a", lease_id, ""))

    def _start_pushed(self, member: bytes) -> None:
        remaining = self._start_held.get(member)
        if remaining is None:
            return
        if remaining <= 1:
            self._release_start(member)
        else:
            self._start_held[member] = remaining - 1

    def _release_start(self, member: bytes) -> None:
        del self._start_held[member]
        self._start_acks.append(member)

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


def _lease_id(request: Request) -> str:
    return str(request.meta.get(LEASE_META, ""))


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


def _request_dict(request: Request, spider: Spider | None) -> dict[str, Any]:
    """``request.to_dict(spider=spider)``, without Scrapy's scan of every spider attribute to
    name the callbacks when they are the spider's own methods (the usual case)."""
    callback = _method_name(spider, request.callback)
    errback = _method_name(spider, request.errback)
    if type(request) is not Request or callback is False or errback is False:
        return request.to_dict(spider=spider)
    return {
        "url": request.url,
        "callback": callback,
        "errback": errback,
        "headers": dict(request.headers),
        "body": request.body,
        "cookies": request.cookies,
        "meta": request.meta,
        "encoding": request.encoding,
        "flags": request.flags,
        "cb_kwargs": request.cb_kwargs,
        "dont_filter": request.dont_filter,
        "method": request.method,
        "priority": request.priority,
    }


def _method_name(spider: Spider | None, function: Any) -> str | bool | None:
    """The name of ``function`` on ``spider``, None without one, False when Scrapy must look."""
    if function is None:
        return None
    name = getattr(function, "__name__", None)
    if spider is None or name is None or getattr(spider, name, None) != function:
        return False
    return str(name)
