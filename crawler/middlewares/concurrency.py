"""Requests in flight per domain for the whole fleet (POLITENESS_CONCURRENCY), not per worker.

Off by default: with POLITENESS_CONCURRENCY = 0 the middleware is not loaded and costs nothing.
On, each request takes a lease of its domain in Redis (crawler/bans/concurrency.py, one round
trip) just after the ban middleware has admitted it, and gives it back (one more) as it leaves
the downloader (Scrapy's request_left_downloader signal, whatever happens to its answer next),
or when a later middleware answers or fails it before it got there. A request whose domain
has every slot taken goes back to the frontier's delayed set for a moment instead of holding a
download slot while it waits.
"""

from __future__ import annotations

import random
import time
from typing import TYPE_CHECKING
from weakref import WeakKeyDictionary

from redis.exceptions import RedisError
from scrapy import signals
from scrapy.exceptions import NotConfigured
from scrapy.utils.httpobj import urlparse_cached

from crawler.bans.concurrency import LEASE_SLACK, HostSlots
from crawler.bans.identities import IDENTITY_META, without_identity
from crawler.config import setting
from crawler.connection import redis_from_settings
from crawler.frontier.records import sent_back
from crawler.middlewares.bans import RedisWait

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.crawler import Crawler
    from scrapy.http import Response

SLOT_META = "fleet_slot"
# A request of a domain at its cap is due again after this many seconds (spread at random);
# each further refusal in a row doubles the wait, up to FULL_WAIT_MAX. Until then this worker
# takes the domain as full and sends its requests back without asking Redis.
RETRY_WINDOW = (0.2, 0.8)
FULL_WAIT_MAX = 10.0
# Per crawler: domain -> monotonic time until which this worker takes the domain as full.
_FULL_UNTIL: WeakKeyDictionary[Crawler, dict[str, float]] = WeakKeyDictionary()


def full_hosts(crawler: Crawler) -> dict[str, float]:
    """The full domains this worker knows of, shared by HostFull (640) and HostConcurrency."""
    return _FULL_UNTIL.setdefault(crawler, {})


class HostFullMiddleware:
    """Downloader middleware at 640, before BanMiddleware (650) takes a rate token: a request
    of a domain this worker has just found full goes back at once, spending neither a token of
    the fleet's rate nor a round trip to Redis."""

    def __init__(self, crawler: Crawler) -> None:
        self.crawler = crawler
        self.full_until = full_hosts(crawler)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> HostFullMiddleware:
        if not setting(crawler.settings, "POLITENESS_CONCURRENCY"):
            raise NotConfigured("POLITENESS_CONCURRENCY is 0")
        return cls(crawler)

    def process_request(self, request: Request) -> Request | None:
        full = self.full_until.get(_domain(request), 0.0) - time.monotonic()
        if full <= 0:
            return None
        return _send_back(self.crawler, request, full + random.uniform(*RETRY_WINDOW))


class HostConcurrencyMiddleware:
    """Downloader middleware at 660: after BanMiddleware (650), so a request Ban defers never
    held a lease, and before Cookies (700), so a request it defers carries no Cookie header into
    the frontier. Nothing between it and the download hands a request back (to be scheduled
    again with the lease on it); a lease whose give-back is lost expires by itself."""

    def __init__(self, crawler: Crawler, slots: HostSlots) -> None:
        self.crawler = crawler
        self.slots = slots
        self.timeout = crawler.settings.getfloat("DOWNLOAD_TIMEOUT")
        self.redis = RedisWait(crawler)
        self._full_until = full_hosts(crawler)
        self._refusals: dict[str, int] = {}
        crawler.signals.connect(self._give_back, signal=signals.request_left_downloader)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> HostConcurrencyMiddleware:
        cap: int = setting(crawler.settings, "POLITENESS_CONCURRENCY")
        if not cap:
            raise NotConfigured("POLITENESS_CONCURRENCY is 0")
        assert crawler.spidercls is not None
        server = redis_from_settings(crawler.settings)
        return cls(crawler, HostSlots(server, crawler.spidercls.name, cap))

    async def process_request(self, request: Request) -> Request | None:
        return await self.redis.wait_for(lambda: self._admit(request))

    async def _admit(self, request: Request) -> Request | None:
        domain = _domain(request)
        full = self._full_until.get(domain, 0.0) - time.monotonic()
        if full > 0:
            return self._defer(request, full + random.uniform(*RETRY_WINDOW))
        timeout = float(request.meta.get("download_timeout", self.timeout))
        token = self.slots.take(domain, timeout + LEASE_SLACK)
        if token is None:
            return self._defer(request, self._refused(domain))
        self._refusals.pop(domain, None)
        request.meta[SLOT_META] = token
        return None

    def _refused(self, domain: str) -> float:
        """Seconds this worker takes ``domain`` as full, doubling with each refusal in a row."""
        refusals = self._refusals.get(domain, 0) + 1
        self._refusals[domain] = refusals
        wait = min(FULL_WAIT_MAX, random.uniform(*RETRY_WINDOW) * 2.0 ** min(refusals - 1, 16))
        self._full_until[domain] = time.monotonic() + wait
        return wait

    def _defer(self, request: Request, wait: float) -> Request:
        return _send_back(self.crawler, request, wait)

    def process_response(self, request: Request, response: Response) -> Response:
        self._give_back(request)
        return response

    def process_exception(self, request: Request, exception: Exception) -> None:
        self._give_back(request)

    def _give_back(self, request: Request, **kwargs: object) -> None:
        token = request.meta.pop(SLOT_META, None)
        if token is None:
            return
        self._full_until.pop(_domain(request), None)  # a slot is free: worth asking again
        try:
            self.slots.give_back(_domain(request), str(token))
        except RedisError:
            self._count("politeness/concurrency/unreleased")  # it expires by itself

    def _count(self, key: str) -> None:
        if self.crawler.stats is not None:
            self.crawler.stats.inc_value(key)


def _send_back(crawler: Crawler, request: Request, wait: float) -> Request:
    """``request`` going back to the frontier for ``wait`` seconds, without its identity."""
    if crawler.stats is not None:
        crawler.stats.inc_value("politeness/deferred/concurrency")
    meta = without_identity(request.meta, IDENTITY_META)
    return sent_back(request, meta, time.time() + wait)


def _domain(request: Request) -> str:
    return urlparse_cached(request).hostname or ""
