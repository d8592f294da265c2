"""Ban detection and fleet-wide politeness, around every download.

Before a request goes out: its domain must not be cooling down after a ban, it gets an identity
(bind address or proxy) that is not cooling down, and it takes a token from the fleet's shared
rate for (domain, identity). A request that has to wait longer than a moment goes back to the
frontier's delayed set instead of holding a download slot.

After a response comes in, before any other middleware or the spider sees it: the rules of
``crawler.bans.rules`` plus the spider's own ``ban_rule(response)`` classify it. A ban is never
passed on as data: the domain (or identity) cools down for every worker, its rate is halved,
and the request waits in the delayed set, or goes to the dead-letter list once it has been
banned BAN_MAX_TIMES times.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from email.utils import parsedate_to_datetime
from typing import TYPE_CHECKING

from scrapy.exceptions import IgnoreRequest, NotConfigured
from scrapy.utils.defer import deferred_from_coro
from scrapy.utils.httpobj import urlparse_cached
from scrapy.utils.misc import load_object

from crawler.bans.fleet import FleetPoliteness, RatePolicy
from crawler.bans.identities import Identity, IdentityPool
from crawler.bans.rules import DEFAULT_RULES, Page, Rule, Verdict, classify
from crawler.config import setting_int
from crawler.connection import redis_from_settings
from crawler.scheduling.scheduler import DUE_META, frontier_scheduler

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.crawler import Crawler
    from scrapy.http import Response

logger = logging.getLogger(__name__)

IDENTITY_META = "identity"
BAN_TIMES_META = "ban_times"
POLICIES = ("pause", "rotate", "stop")
# Waits up to this long happen in place; longer ones go back to the delayed set.
LOCAL_WAIT = 2.0


class BanMiddleware:
    """Settings (crawler/settings.py): BAN_POLICY, BAN_COOLDOWN, BAN_MAX_TIMES, BAN_RULES,
    POLITENESS_RATE, POLITENESS_BURST, POLITENESS_DOMAIN_RATES, POLITENESS_RECOVERY,
    BIND_ADDRESSES, PROXY_POOL. Per request: meta ``dont_ban_check`` skips classification."""

    def __init__(self, crawler: Crawler, fleet: FleetPoliteness, pool: IdentityPool) -> None:
        settings = crawler.settings
        self.crawler = crawler
        self.fleet = fleet
        self.pool = pool
        self.policy = settings.get("BAN_POLICY")
        if self.policy not in POLICIES:
            raise NotConfigured(f"BAN_POLICY must be one of {POLICIES}, got {self.policy!r}")
        self.cooldown = settings.getfloat("BAN_COOLDOWN")
        self.max_times = setting_int(settings, "BAN_MAX_TIMES", 0)
        extra = [load_object(path) for path in settings.getlist("BAN_RULES")]
        self.rules: tuple[Rule, ...] = (*extra, *DEFAULT_RULES)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> BanMiddleware:
        settings = crawler.settings
        assert crawler.spidercls is not None
        policy = RatePolicy(
            rate=settings.getfloat("POLITENESS_RATE"),
            burst=settings.getfloat("POLITENESS_BURST"),
            per_domain={
                k: float(v) for k, v in settings.getdict("POLITENESS_DOMAIN_RATES").items()
            },
            recovery_seconds=settings.getfloat("POLITENESS_RECOVERY"),
        )
        fleet = FleetPoliteness(redis_from_settings(settings), crawler.spidercls.name, policy)
        pool = IdentityPool(settings.getlist("BIND_ADDRESSES"), settings.getlist("PROXY_POOL"))
        return cls(crawler, fleet, pool)

    # --- before the download ------------------------------------------------------------------

    async def process_request(self, request: Request) -> Request | None:
        domain = urlparse_cached(request).hostname or ""
        until = self.fleet.cooling_until(domain)
        if until:
            return self._defer(request, until, "domain_cooling")
        identity = self._identity(request, domain)
        if isinstance(identity, float):
            return self._defer(request, identity, "identities_cooling")
        self._apply(request, identity)
        return await self._take_turn(request, domain, identity)

    def _identity(self, request: Request, domain: str) -> Identity | float:
        name = request.meta.get(IDENTITY_META)
        if name and not self.fleet.cooling_until(domain, name):
            return Identity(name)
        return self.pool.choose(lambda identity: self.fleet.cooling_until(domain, identity.name))

    def _apply(self, request: Request, identity: Identity) -> None:
        request.meta[IDENTITY_META] = identity.name
        if identity.bind_address:
            request.meta["bindaddress"] = (identity.bind_address, 0)
        if identity.proxy:
            request.meta["proxy"] = identity.proxy

    async def _take_turn(self, request: Request, domain: str, identity: Identity) -> Request | None:
        waited = 0.0
        while (wait := self.fleet.acquire(domain, identity.name)) > 0:
            if waited + wait > LOCAL_WAIT:
                return self._defer(request, time.time() + wait, "rate")
            await asyncio.sleep(wait)
            waited += wait
        return None

    def _defer(self, request: Request, until: float, reason: str) -> Request:
        self._count(f"politeness/deferred/{reason}")
        meta = {k: v for k, v in request.meta.items() if k not in (IDENTITY_META, "bindaddress")}
        meta[DUE_META] = until + random.uniform(0, 1)
        return request.replace(meta=meta, dont_filter=True)

    # --- after the download -------------------------------------------------------------------

    def process_response(self, request: Request, response: Response) -> Request | Response:
        if request.meta.get("dont_ban_check"):
            return response
        verdict = self._classify(response)
        if not verdict.is_ban:
            return response
        return self._banned(request, response, verdict)

    def _classify(self, response: Response) -> Verdict:
        verdict = classify(_page(response), self.rules)
        if verdict.is_ban or response.status != 200:
            # A spider's rule judges pages; redirects, 404s and 5xx are the generic rules' job.
            return verdict
        spider_rule = getattr(self.crawler.spider, "ban_rule", None)
        rule = spider_rule(response) if spider_rule is not None else None
        return Verdict("ban", rule) if rule else verdict

    def _banned(self, request: Request, response: Response, verdict: Verdict) -> Request:
        domain = urlparse_cached(request).hostname or ""
        identity = str(request.meta.get(IDENTITY_META, "default"))
        self._count("ban/count")
        self._count(f"ban/rule/{verdict.rule}")
        self._count(f"ban/domain/{domain}")
        logger.warning(
            "Ban (%s) on %s <%d %s> via %s",
            verdict.rule,
            domain,
            response.status,
            response.url,
            identity,
            extra={"spider": self.crawler.spider},
        )
        self.fleet.penalize(domain, identity)
        seconds = retry_after(response) or self.cooldown
        scope = identity if self.policy == "rotate" else None
        until = self.fleet.ban(domain, scope, seconds)
        if self.policy == "stop":
            self._stop(domain)
        return self._again(request, verdict, until if scope is None else time.time())

    def _again(self, request: Request, verdict: Verdict, due: float) -> Request:
        times = int(request.meta.get(BAN_TIMES_META, 0)) + 1
        if self.max_times and times > self.max_times:
            scheduler = frontier_scheduler(self.crawler)
            if scheduler is not None:
                scheduler.failed(request, f"banned:{verdict.rule}", f"banned {times - 1} times")
            raise IgnoreRequest(f"banned {times - 1} times ({verdict.rule})")
        meta = {k: v for k, v in request.meta.items() if k not in (IDENTITY_META, "bindaddress")}
        meta.update({BAN_TIMES_META: times, DUE_META: due + random.uniform(0, 1)})
        return request.replace(meta=meta, dont_filter=True)

    def _stop(self, domain: str) -> None:
        engine = self.crawler.engine
        if engine is not None and engine.spider is not None:
            logger.error("Banned on %s: stopping this worker (BAN_POLICY=stop)", domain)
            deferred_from_coro(engine.close_spider_async(reason="banned"))

    def _count(self, key: str) -> None:
        if self.crawler.stats is not None:
            self.crawler.stats.inc_value(key)


def _page(response: Response) -> Page:
    headers = {
        name.decode("latin-1").lower(): b", ".join(values).decode("latin-1")
        for name, values in response.headers.items()
    }
    return Page(response.status, response.url, headers, response.body)


def retry_after(response: Response) -> float:
    """Seconds from a Retry-After header (seconds or HTTP date); 0 when absent or unreadable."""
    value = response.headers.get(b"Retry-After")
    if not value:
        return 0.0
    text = value.decode("latin-1").strip()
    if text.isdecimal() and text.isascii():
        return float(text)
    try:
        return max(0.0, parsedate_to_datetime(text).timestamp() - time.time())
    except (TypeError, ValueError):
        return 0.0
