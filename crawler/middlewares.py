"""The middlewares Scrapy loads (``DOWNLOADER_MIDDLEWARES``/``SPIDER_MIDDLEWARES`` in
crawler/settings.py name them here), as ``scrapy startproject`` lays them out. Each is a thin
adapter of machinery in its own room: :mod:`crawler.bans` (bans, politeness, retries, requests
in flight per domain), :mod:`crawler.frontier.gate` (the send gate) and
:mod:`crawler.lease_middlewares` (when a leased request is fully handled: the lease book of
:mod:`crawler.frontier.leases`).
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from typing import TYPE_CHECKING

from scrapy import Request, signals
from scrapy.utils.httpobj import urlparse_cached
from scrapy.utils.misc import load_object
from scrapy.utils.response import response_status_message

from crawler.bans.blame import Blame
from crawler.bans.breaker import (
    healthy,
    site_of,
)
from crawler.bans.concurrency import HostAdmission, HostSlots, full_hosts, send_back_if_full
from crawler.bans.identities import IdentityPool
from crawler.bans.policy import BanPolicy, retry_after, retry_later
from crawler.bans.politeness import FleetPoliteness
from crawler.bans.waits import RedisWait, RetryBackoff, TokenLines, TokenTurns, send_back_counted
from crawler.config import setting, switched_off
from crawler.connection import crawl_redis
from crawler.frontier.leases import LEASE_META
from crawler.frontier.pacing import RatePolicy
from crawler.frontier.reports import FrontierReports
from crawler.frontier.riders import Riders
from crawler.lease_middlewares import LeaseDownloaderMiddleware, LeaseSpiderMiddleware
from crawler.meta import (
    HOLD_META,
    PACED_META,
    SENT_AT_META,
    crawl_delay_of,
    send_back,
)

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from scrapy.http import Response

__all__ = [
    "BackoffRetryMiddleware",
    "BanMiddleware",
    "HostConcurrencyMiddleware",
    "HostFullMiddleware",
    "LeaseDownloaderMiddleware",
    "LeaseSpiderMiddleware",
    "SendGateMiddleware",
]

logger = logging.getLogger(__name__)


# --- bans and politeness ---------------------------------------------------------------------


class BanMiddleware:
    """Before a request goes out: its domain must not be cooling down after a ban, it gets an
    identity (bind address or proxy) not cooling down, and it takes a token of the fleet's rate for
    (domain, identity): SendGateMiddleware takes it when the frontier's pop planned its turn (one
    identity), else it waits here or in the delayed set (:mod:`crawler.bans.waits`). After the
    response: a ban is handled as :mod:`crawler.bans.policy` says, a failure put down to its host
    or its identity as :mod:`crawler.bans.blame` says.

    Settings: BAN_*, POLITENESS_*, BIND_ADDRESSES, PROXY_POOL. Meta ``dont_ban_check`` skips
    classification; ``crawl_delay`` (seconds) spaces the domain's requests for the fleet.
    """

    # The frontier paces the fleet while this middleware is enabled (crawler/frontier/pacing.py).
    paces_fleet = True

    def __init__(self, crawler: Crawler, fleet: FleetPoliteness, pool: IdentityPool) -> None:
        settings = crawler.settings
        self.crawler = crawler
        self.fleet = fleet
        self.pool = pool
        self.redis = RedisWait(crawler)
        lines = TokenLines.sharing(settings.getint("CONCURRENT_REQUESTS"))
        self.turns = TokenTurns(fleet, lines, self.redis)
        self.bans = BanPolicy(crawler, fleet, self.redis)
        self.blame = Blame(crawler, fleet, pool, self.redis)
        self.breaker = self.blame.breaker

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> BanMiddleware:
        settings = crawler.settings
        assert crawler.spidercls is not None
        policy = RatePolicy.from_settings(settings)
        server, riders = crawl_redis(crawler), Riders.of(crawler)
        fleet = FleetPoliteness(server, crawler.spidercls.name, policy, riders=riders)
        pool = IdentityPool(setting(settings, "BIND_ADDRESSES"), setting(settings, "PROXY_POOL"))
        return cls(crawler, fleet, pool)

    async def process_request(self, request: Request) -> Request | None:
        return await self.redis.wait_for(lambda: self._admit(request))

    async def _admit(self, request: Request) -> Request | None:
        domain = urlparse_cached(request).hostname or ""
        site = site_of(request)
        self.blame.refuse_marked(request, site)
        until = self.blame.cooling(domain, site)
        if until:
            self.breaker.watched.add(site)
            return self._defer(request, until, "domain_cooling")
        identity = self.pool.keep_or_choose(
            request.meta, lambda identity: self.blame.identity_cooling(domain, site, identity.name)
        )
        if isinstance(identity, float):
            return self._defer(request, identity, "identities_cooling")
        identity.apply(request.meta)
        if PACED_META in request.meta:
            # A turn the frontier planned: SendGateMiddleware takes its token as it goes.
            return None
        due = await self.turns.wait(domain, identity.name, crawl_delay_of(request.meta))
        if due is None and (until := self.blame.cooling(domain, site)):
            return self._defer(request, until, "domain_cooling")  # blocked while it waited
        return None if due is None else self._defer(request, due, "rate", jitter=0.0)

    def _defer(self, request: Request, until: float, reason: str, jitter: float = 1.0) -> Request:
        return send_back_counted(self.crawler, request, until + random.uniform(0, jitter), reason)

    async def process_response(self, request: Request, response: Response) -> Request | Response:
        if request.meta.get("dont_ban_check"):
            return response
        site = site_of(request)
        verdict = self.bans.classify(response)
        asked = retry_after(response, self.bans.cooldown_max)
        blame = self.blame
        if self.breaker.trips(response, asked):
            why = f"HTTP {response.status} without Retry-After"
            if verdict.is_ban and self.bans.policy == "rotate" and blame.rotates(request):
                # A 429 under rotate: the identity's block, the host's once every one has one.
                held = await self.redis.wait_for(lambda: blame.identity_failed(request, site, why))
                if held is not None:
                    return await self.bans.banned(request, response, verdict, held[0], rotated=True)
            block = await self.redis.wait_for(lambda: blame.failed(request, site, why))
            if not verdict.is_ban:
                return response  # retried: its turn comes once the block ends
            return await self.bans.banned(request, response, verdict, block.until)
        if self.breaker.waits(response, asked) and not verdict.is_ban:
            # A 503 saying how long (a 429's ban cools down for its Retry-After already).
            await self.redis.wait_for(lambda: blame.wait_out(site, asked, response.status))
        elif healthy(response.status):
            self.breaker.succeeded(site)
        if not verdict.is_ban:
            return response
        return await self.bans.banned(request, response, verdict)

    async def process_exception(self, request: Request, exception: Exception) -> None:
        """A connection-level failure: see :meth:`Blame.connection_failed`."""
        await self.blame.connection_failed(request, exception)


class SendGateMiddleware:
    """Downloader middleware at 950, after every other ``process_request``: a request whose turn the
    frontier's pop planned (meta ``frontier_paced``) takes its host's token as it leaves
    (:mod:`crawler.frontier.gate`), however long it took on its way. Turned away, a leased request
    is held by the scheduler (lease kept, no download slot) until the host's next token; another one
    (robots.txt) waits here. One that went on later than its token counted (a stall, or a slow
    first connection) moves its host's next token as it reaches the downloader (or its answer's
    headers arrive)."""

    def __init__(self, crawler: Crawler) -> None:
        self.crawler = crawler
        self.frontier = FrontierReports(crawler)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> SendGateMiddleware:
        middleware = cls(crawler)
        crawler.signals.connect(
            middleware.request_reached_downloader, signal=signals.request_reached_downloader
        )
        crawler.signals.connect(middleware.headers_received, signal=signals.headers_received)
        return middleware

    async def process_request(self, request: Request) -> Request | None:
        scheduler = self.frontier.scheduler
        if scheduler is not None:
            while (wait := await scheduler.gate_wait(request)) > 0:
                if request.meta.get(LEASE_META):
                    request.meta[HOLD_META] = time.time() + wait
                    return request
                if scheduler.paused() and not self.crawler.crawling:
                    # Told to go while paused: waiting here would keep the engine from closing
                    # (robots.txt is asked again later, see links/robots.py).
                    return send_back(request, dict(request.meta), time.time() + wait)
                await asyncio.sleep(wait)
            request.meta.pop(PACED_META, None)
        request.meta[SENT_AT_META] = time.time()
        return None

    def request_reached_downloader(self, request: Request) -> None:
        """A request later than its token counted tells its host's bucket now, before the next."""
        if (scheduler := self.frontier.scheduler) is not None:
            scheduler.gate_sent(request)

    def headers_received(self, request: Request) -> None:
        """A worker's first request to a host reached it by the time its answer's headers
        arrive: if that is later than its token counted (a slow first connection), its host's
        bucket is told now."""
        if (scheduler := self.frontier.scheduler) is not None:
            scheduler.gate_sent(request, answered=True)


# --- retries ---------------------------------------------------------------------------------


class BackoffRetryMiddleware:
    """Replaces Scrapy's RetryMiddleware: a retry is a new request due after the backoff
    (:class:`~crawler.bans.waits.RetryBackoff`; a ``Retry-After`` wins) in the frontier's delayed
    set, so no worker sleeps and a worker dying loses none; one out of attempts is a dead letter.
    Settings: RETRY_*, BAN_COOLDOWN_MAX (caps a Retry-After); meta ``dont_retry``,
    ``max_retry_times``."""

    def __init__(self, crawler: Crawler) -> None:
        settings = crawler.settings
        self.crawler = crawler
        self.enabled = settings.getbool("RETRY_ENABLED")
        self.codes = {int(code) for code in settings.getlist("RETRY_HTTP_CODES")}
        self.exceptions = tuple(
            load_object(path) if isinstance(path, str) else path
            for path in settings.getlist("RETRY_EXCEPTIONS")
        )
        self.backoff = RetryBackoff.from_settings(settings)
        self.frontier = FrontierReports(crawler)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> BackoffRetryMiddleware:
        return cls(crawler)

    def process_response(self, request: Request, response: Response) -> Request | Response:
        if not self.enabled or request.meta.get("dont_retry") or response.status not in self.codes:
            return response
        reason = response_status_message(response.status)
        asked = retry_after(response, self.backoff.retry_after_max)
        retry = retry_later(self.crawler, request, reason, self.backoff, asked)
        if retry is None:
            self.frontier.ledger.failed(
                request, f"retries_exhausted:http_{response.status}", reason
            )
            return response
        return retry

    def process_exception(self, request: Request, exception: Exception) -> Request | None:
        if not self.enabled or request.meta.get("dont_retry"):
            return None
        if not isinstance(exception, self.exceptions):
            return None
        return retry_later(self.crawler, request, exception.__class__.__name__, self.backoff)

    def delay(self, attempt: int, server_asked: float = 0.0) -> float:
        """Seconds before retry number ``attempt`` (1-based)."""
        return self.backoff.delay(attempt, server_asked)


# --- requests in flight per domain (POLITENESS_CONCURRENCY) -------------------------------------


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
            raise switched_off(cls, "POLITENESS_CONCURRENCY is 0")
        return cls(crawler)

    def process_request(self, request: Request) -> Request | None:
        return send_back_if_full(self.crawler, request, self.full_until)


class HostConcurrencyMiddleware:
    """Downloader middleware at 660: after BanMiddleware (650), so a request Ban defers never held a
    lease, and before Cookies (700), so one it defers carries no Cookie header into the frontier. A
    lease whose give-back is lost expires by itself."""

    def __init__(self, crawler: Crawler, slots: HostSlots) -> None:
        self.crawler = crawler
        self.admission = HostAdmission(crawler, slots)
        self.redis = RedisWait(crawler)
        crawler.signals.connect(self._give_back, signal=signals.request_left_downloader)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> HostConcurrencyMiddleware:
        cap: int = setting(crawler.settings, "POLITENESS_CONCURRENCY")
        if not cap:
            raise switched_off(cls, "POLITENESS_CONCURRENCY is 0")
        assert crawler.spidercls is not None
        server = crawl_redis(crawler)
        return cls(crawler, HostSlots(server, crawler.spidercls.name, cap))

    async def process_request(self, request: Request) -> Request | None:
        return await self.redis.wait_for(lambda: self._admit(request))

    async def _admit(self, request: Request) -> Request | None:
        return self.admission.admit(request)

    def process_response(self, request: Request, response: Response) -> Response:
        self._give_back(request)
        return response

    def process_exception(self, request: Request, exception: Exception) -> None:
        self._give_back(request)

    def _give_back(self, request: Request, **kwargs: object) -> None:
        if not self.admission.give_back(request) and self.crawler.stats is not None:
            self.crawler.stats.inc_value("politeness/concurrency/unreleased")  # it expires
