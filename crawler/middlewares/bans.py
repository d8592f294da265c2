"""Ban detection and fleet-wide politeness, around every download.

Before a request goes out: its domain must not be cooling down after a ban, it gets an identity
(bind address or proxy) that is not cooling down, and it takes a token from the fleet's shared
rate for (domain, identity). Requests waiting for a token wait in this worker, in one line per
(domain, identity), while their turn comes within SHORT_WAIT seconds, or within LOCAL_WAIT
seconds and the line holds fewer than a LINE_SHARE-th of CONCURRENT_REQUESTS (other domains
keep their slots); any other goes back to the frontier's delayed set, due about when its turn
is expected (one token interval after the previous one sent back), so it is not sent back
again and again.

After a response comes in, before any other middleware or the spider sees it: the rules of
``crawler.bans.rules`` plus the spider's own ``ban_rule(response)`` classify it. A ban is never
passed on as data: the domain (or identity) cools down for every worker, its rate is halved,
and the request waits in the delayed set, or goes to the dead-letter list once it has been
banned BAN_MAX_TIMES times. A Retry-After counts up to BAN_COOLDOWN_MAX.

Redis being away is never a request's failure: a request whose check needs Redis waits in
place (pauses doubling up to REDIS_PAUSES[1]) until Redis answers, and none goes out unchecked;
only a closing engine gives it up, and its lease is then released untouched.
"""

from __future__ import annotations

import asyncio
import logging
import math
import random
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from email.utils import parsedate_to_datetime
from typing import TYPE_CHECKING, TypeVar

from redis.exceptions import RedisError
from scrapy.exceptions import IgnoreRequest
from scrapy.utils.defer import deferred_from_coro
from scrapy.utils.httpobj import urlparse_cached
from scrapy.utils.misc import load_object

from crawler.bans.identities import IDENTITY_META, Identity, IdentityPool, without_identity
from crawler.bans.politeness import FleetPoliteness, RatePolicy
from crawler.bans.rules import DEFAULT_RULES, Page, Rule, Verdict, classify
from crawler.config import setting, setting_int
from crawler.connection import redis_from_settings
from crawler.frontier.records import sent_back
from crawler.frontier.scheduler import frontier_scheduler
from crawler.settings_check.rules import SettingsError, problem

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.crawler import Crawler
    from scrapy.http import Response
    from scrapy.settings import BaseSettings

logger = logging.getLogger(__name__)

BAN_TIMES_META = "ban_times"
CRAWL_DELAY_META = "crawl_delay"
POLICIES = ("pause", "rotate", "stop")
# Waits for a token up to this long happen in place; longer ones go back to the delayed set.
LOCAL_WAIT = 10.0
# A domain's line of requests waiting in place holds at most CONCURRENT_REQUESTS / LINE_SHARE,
# but for those whose turn comes within SHORT_WAIT seconds.
LINE_SHARE = 4
SHORT_WAIT = 2.0
# While Redis is away: the first pause before a check is tried again, and the longest.
REDIS_PAUSES = (0.5, 8.0)
T = TypeVar("T")


class BanMiddleware:
    """Settings (crawler/settings.py): BAN_POLICY, BAN_COOLDOWN, BAN_COOLDOWN_MAX, BAN_MAX_TIMES,
    BAN_RULES, POLITENESS_RATE, POLITENESS_BURST, POLITENESS_DOMAIN_RATES, POLITENESS_RECOVERY,
    BIND_ADDRESSES, PROXY_POOL. Per request: meta ``dont_ban_check`` skips classification;
    meta ``crawl_delay`` (seconds) spaces the domain's requests for the fleet, as a robots.txt
    Crawl-delay asks."""

    def __init__(self, crawler: Crawler, fleet: FleetPoliteness, pool: IdentityPool) -> None:
        settings = crawler.settings
        self.crawler = crawler
        self.fleet = fleet
        self.pool = pool
        self.policy: str = setting(settings, "BAN_POLICY")
        self.cooldown: float = setting(settings, "BAN_COOLDOWN")
        self.cooldown_max = cooldown_max(settings)
        self.redis = RedisWait(crawler)
        self.lines = TokenLines(max(1, settings.getint("CONCURRENT_REQUESTS") // LINE_SHARE))
        self.max_times = setting_int(settings, "BAN_MAX_TIMES", 0)
        extra = [load_object(path) for path in settings.getlist("BAN_RULES")]
        self.rules: tuple[Rule, ...] = (*extra, *DEFAULT_RULES)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> BanMiddleware:
        settings = crawler.settings
        assert crawler.spidercls is not None
        policy = RatePolicy(
            rate=setting(settings, "POLITENESS_RATE"),
            burst=setting(settings, "POLITENESS_BURST"),
            per_domain=setting(settings, "POLITENESS_DOMAIN_RATES"),
            recovery_seconds=setting(settings, "POLITENESS_RECOVERY"),
        )
        fleet = FleetPoliteness(redis_from_settings(settings), crawler.spidercls.name, policy)
        pool = IdentityPool(settings.getlist("BIND_ADDRESSES"), settings.getlist("PROXY_POOL"))
        return cls(crawler, fleet, pool)

    # --- before the download ------------------------------------------------------------------

    async def process_request(self, request: Request) -> Request | None:
        return await self.redis.wait_for(lambda: self._admit(request))

    async def _admit(self, request: Request) -> Request | None:
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
        identity = self.pool.get(str(request.meta.get(IDENTITY_META, "")))
        if identity is not None and not self.fleet.cooling_until(domain, identity.name):
            return identity
        return self.pool.choose(lambda identity: self.fleet.cooling_until(domain, identity.name))

    def _apply(self, request: Request, identity: Identity) -> None:
        request.meta[IDENTITY_META] = identity.name
        if identity.bind_address:
            request.meta["bindaddress"] = (identity.bind_address, 0)
        if identity.proxy:
            request.meta["proxy"] = identity.proxy

    async def _take_turn(self, request: Request, domain: str, identity: Identity) -> Request | None:
        delay, key = crawl_delay(request), (domain, identity.name)
        if self.lines.waiting(key):
            wait = self.fleet.next_token_in(domain, identity.name)
        elif (wait := self.fleet.acquire(domain, identity.name, delay)) <= 0:
            return None
        interval = self.fleet.interval(domain, delay)
        turn = self.lines.turn_in(key, wait, interval)
        if turn > LOCAL_WAIT or (turn > SHORT_WAIT and self.lines.full(key)):
            due = self.lines.book(key, time.time() + turn, interval)
            return self._defer(request, due, "rate", jitter=0.0)
        async with self.lines.place(key):
            while (wait := self.fleet.acquire(domain, identity.name, delay)) > 0:
                if wait > LOCAL_WAIT:
                    due = self.lines.book(key, time.time() + wait, interval)
                    return self._defer(request, due, "rate", jitter=0.0)
                if self.redis.engine_closing():
                    raise RedisError("the engine is closing: the request goes back untouched")
                await asyncio.sleep(wait)
        return None

    def _defer(self, request: Request, until: float, reason: str, jitter: float = 1.0) -> Request:
        self._count(f"politeness/deferred/{reason}")
        meta = without_identity(request.meta, IDENTITY_META)
        return sent_back(request, meta, until + random.uniform(0, jitter))

    # --- after the download -------------------------------------------------------------------

    async def process_response(self, request: Request, response: Response) -> Request | Response:
        if request.meta.get("dont_ban_check"):
            return response
        verdict = self._classify(response)
        if not verdict.is_ban:
            return response
        return await self._banned(request, response, verdict)

    def _classify(self, response: Response) -> Verdict:
        verdict = classify(_page(response), self.rules)
        if verdict.is_ban or response.status != 200:
            # A spider's rule judges pages; redirects, 404s and 5xx are the generic rules' job.
            return verdict
        spider_rule = getattr(self.crawler.spider, "ban_rule", None)
        rule = spider_rule(response) if spider_rule is not None else None
        return Verdict("ban", rule) if rule else verdict

    async def _banned(self, request: Request, response: Response, verdict: Verdict) -> Request:
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
        seconds = retry_after(response, self.cooldown_max) or self.cooldown
        scope = identity if self.policy == "rotate" else None
        why = f"{verdict.rule} (HTTP {response.status})"
        until = await self.redis.wait_for(
            lambda: self._cool_down(domain, identity, scope, seconds, why)
        )
        if self.policy == "stop":
            self._stop(domain)
        return self._again(request, verdict, until if scope is None else time.time())

    async def _cool_down(
        self, domain: str, identity: str, scope: str | None, seconds: float, why: str
    ) -> float:
        """Start the cool-down and halve the rate of (domain, identity); returns the cool-down's
        end. Both may be done again when Redis goes away in between: a cool-down keeps the
        later end."""
        until = self.fleet.ban(domain, scope, seconds, why)
        self.fleet.penalize(domain, identity)
        return until

    def _again(self, request: Request, verdict: Verdict, due: float) -> Request:
        times = int(request.meta.get(BAN_TIMES_META, 0)) + 1
        if self.max_times and times > self.max_times:
            scheduler = frontier_scheduler(self.crawler)
            if scheduler is not None:
                scheduler.failed(request, f"banned:{verdict.rule}", f"banned {times - 1} times")
            raise IgnoreRequest(f"banned {times - 1} times ({verdict.rule})")
        meta = without_identity(request.meta, IDENTITY_META)
        meta[BAN_TIMES_META] = times
        return sent_back(request, meta, due + random.uniform(0, 1))

    def _stop(self, domain: str) -> None:
        engine = self.crawler.engine
        if engine is not None and engine.spider is not None:
            logger.error("Banned on %s: stopping this worker (BAN_POLICY=stop)", domain)
            deferred_from_coro(engine.close_spider_async(reason="banned"))

    def _count(self, key: str) -> None:
        if self.crawler.stats is not None:
            self.crawler.stats.inc_value(key)


class RedisWait:
    """Calls that need Redis, tried again while Redis is away, as long as the engine runs.

    Waiting calls share one pause, so a worker tries Redis once per pause, not once per waiting
    request. The first failure of an outage is logged once; the wait ends with RedisError only
    when the engine closes (the request's lease is then released).
    """

    def __init__(self, crawler: Crawler) -> None:
        self.crawler = crawler
        self.retry_at = 0.0
        self.pause = REDIS_PAUSES[0]
        self.away_since: float | None = None

    async def wait_for(self, attempt: Callable[[], Awaitable[T]]) -> T:
        while True:
            wait = self.retry_at - time.monotonic()
            if wait <= 0:
                try:
                    result = await attempt()
                except RedisError as exc:
                    self._failed(exc)
                    continue
                self._answered()
                return result
            if self.engine_closing():
                raise RedisError("Redis unavailable and the engine is closing")
            await asyncio.sleep(wait)

    def _failed(self, exc: RedisError) -> None:
        if self.engine_closing():
            raise exc
        now = time.monotonic()
        if self.away_since is None:
            self.away_since = now
            self.pause = REDIS_PAUSES[0]
            logger.warning("Ban-check waits for Redis (%s); no request goes out unchecked", exc)
        if self.crawler.stats is not None:
            self.crawler.stats.inc_value("politeness/redis_errors")
        self.retry_at = now + self.pause
        self.pause = min(REDIS_PAUSES[1], self.pause * 2)

    def _answered(self) -> None:
        if self.away_since is not None:
            logger.info(
                "Ban-check reached Redis again after %.1fs", time.monotonic() - self.away_since
            )
            self.away_since = None
            self.retry_at = 0.0

    def engine_closing(self) -> bool:
        engine = self.crawler.engine
        slot = getattr(engine, "_slot", None)
        return engine is None or not engine.running or slot is None or slot.closing is not None


class TokenLines:
    """This worker's requests waiting for a token: one first-come line per (domain, identity),
    and per line the time up to which requests sent back to the delayed set are booked."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._locks: dict[tuple[str, str], asyncio.Lock] = {}
        self._waiting: Counter[tuple[str, str]] = Counter()
        self._booked: dict[tuple[str, str], float] = {}
        self._groups: dict[tuple[str, str], tuple[float, int]] = {}

    def waiting(self, key: tuple[str, str]) -> int:
        return self._waiting[key]

    def full(self, key: tuple[str, str]) -> bool:
        return self._waiting[key] >= self.capacity

    def turn_in(self, key: tuple[str, str], first: float, interval: float) -> float:
        """Seconds until a request joining the line now gets its token: the first token in
        ``first`` seconds, then one each ``interval``."""
        return first + self._waiting[key] * interval

    @asynccontextmanager
    async def place(self, key: tuple[str, str]) -> AsyncIterator[None]:
        """Wait for the front of the line (asyncio's lock wakes waiters in order)."""
        lock = self._locks.setdefault(key, asyncio.Lock())
        self._waiting[key] += 1
        try:
            async with lock:
                yield
        finally:
            self._waiting[key] -= 1
            if not self._waiting[key]:
                del self._waiting[key]
                self._locks.pop(key, None)

    def book(self, key: tuple[str, str], earliest: float, interval: float) -> float:
        """When a request sent back now should be due (Unix time). Its turn is at ``earliest``,
        and one ``interval`` after the previous one of its line sent back; such turns come back
        in groups of a line's worth less one, due together a turn before the first of them, so
        one pop brings a group back to a line that is not empty yet."""
        now = time.time()
        if len(self._booked) > 10_000:
            self._booked = {k: t for k, t in self._booked.items() if t > now}
            self._groups = {k: g for k, g in self._groups.items() if k in self._booked}
        turn = max(earliest, self._booked.get(key, 0.0))
        self._booked[key] = turn + interval
        first, size = self._groups.get(key, (0.0, self.capacity))
        if size >= max(1, self.capacity - 1) or turn > first + size * interval + interval / 2:
            first, size = turn, 0
        self._groups[key] = (first, size + 1)
        early = interval if self.capacity > 1 else 0.0
        return max(now, first - early)


def cooldown_max(settings: BaseSettings) -> float:
    """BAN_COOLDOWN_MAX, the longest wait a Retry-After can ask for; at least BAN_COOLDOWN."""
    raw = settings.get("BAN_COOLDOWN_MAX")
    try:
        value = float(raw)
    except (TypeError, ValueError):
        value = math.nan
    if not value >= settings.getfloat("BAN_COOLDOWN") or math.isinf(value):
        allowed = "a number of seconds, finite and at least BAN_COOLDOWN"
        raise SettingsError(problem("BAN_COOLDOWN_MAX", raw, allowed))
    return value


def crawl_delay(request: Request) -> float:
    """Meta ``crawl_delay``: seconds between two requests to the request's domain for the whole
    fleet (the links spider sets it from robots.txt); 0 when absent or not a positive number."""
    value = request.meta.get(CRAWL_DELAY_META)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return 0.0
    return float(value) if 0 < value < math.inf else 0.0


def _page(response: Response) -> Page:
    headers = {
        name.decode("latin-1").lower(): b", ".join(values).decode("latin-1")
        for name, values in response.headers.items()
    }
    return Page(response.status, response.url, headers, response.body)


def retry_after(response: Response, maximum: float = math.inf) -> float:
    """Seconds from a Retry-After header (seconds or HTTP date), at most ``maximum``; 0 when
    absent or unreadable."""
    value = response.headers.get(b"Retry-After")
    if not value:
        return 0.0
    text = value.decode("latin-1").strip()
    if text.isdecimal() and text.isascii():
        return min(maximum, float(text))
    try:
        return min(maximum, max(0.0, parsedate_to_datetime(text).timestamp() - time.time()))
    except (TypeError, ValueError, OverflowError):
        return 0.0
