"""Waits of the ban and retry middlewares (docs/politeness.md): for Redis while it is away, for
a token in line, and a retry's backoff (:class:`RetryBackoff`).

A request waits for its token in this worker, in one line per (domain, identity)
(:class:`TokenLines`), while its turn comes within SHORT_WAIT seconds, or within LOCAL_WAIT and
the line holds fewer than a LINE_SHARE-th of CONCURRENT_REQUESTS; any other goes back to the
delayed set, due about when its turn comes, so it is not sent back again and again. A request
whose check needs Redis waits in place while Redis is away (:class:`RedisWait`): none goes out
unchecked, and only a closing engine gives it up, its lease released untouched.
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
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from redis.exceptions import RedisError

from crawler.bans.identities import without_identity
from crawler.bans.politeness import KNOWN_BUCKETS
from crawler.config.rules import SettingsError, problem
from crawler.meta import IDENTITY_META, send_back

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.crawler import Crawler
    from scrapy.settings import BaseSettings

    from crawler.bans.politeness import FleetPoliteness

logger = logging.getLogger(__name__)

# Waits for a token up to this long happen in place; longer ones go back to the delayed set.
LOCAL_WAIT = 10.0
# A domain's line of requests waiting in place holds at most CONCURRENT_REQUESTS / LINE_SHARE,
# but for those whose turn comes within SHORT_WAIT seconds.
LINE_SHARE = 4
SHORT_WAIT = 2.0
# While Redis is away: the first pause before a check is tried again, and the longest.
REDIS_PAUSES = (0.5, 8.0)
T = TypeVar("T")


class RedisWait:
    """Calls that need Redis, tried again while Redis is away, as long as the engine runs. Waiting
    calls share one pause (Redis is tried once per pause, not per request); an outage is logged
    once; the wait ends with RedisError only when the engine closes (the lease is then released)."""

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


def send_back_counted(crawler: Crawler, request: Request, due: float, reason: str) -> Request:
    """``request`` back to the delayed set until ``due``, without its identity, counted as
    ``politeness/deferred/<reason>``."""
    if crawler.stats is not None:
        crawler.stats.inc_value(f"politeness/deferred/{reason}")
    return send_back(request, without_identity(request.meta, IDENTITY_META), due)


class TokenLines:
    """This worker's requests waiting for a token: one first-come line per (domain, identity),
    and per line the time up to which requests sent back to the delayed set are spaced."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._locks: dict[tuple[str, str], asyncio.Lock] = {}
        self._waiting: Counter[tuple[str, str]] = Counter()
        self._spaced: dict[tuple[str, str], float] = {}
        self._groups: dict[tuple[str, str], tuple[float, int]] = {}

    @classmethod
    def sharing(cls, concurrent_requests: int) -> TokenLines:
        """Lines of at most a LINE_SHARE-th of CONCURRENT_REQUESTS each."""
        return cls(max(1, concurrent_requests // LINE_SHARE))

    def waiting(self, key: tuple[str, str]) -> int:
        return self._waiting[key]

    def full(self, key: tuple[str, str]) -> bool:
        return self._waiting[key] >= self.capacity

    def turn_in(self, key: tuple[str, str], first: float, interval: float) -> float:
        """Seconds until a request joining the line gets its token (first, then each interval)."""
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

    def due_back(self, key: tuple[str, str], earliest: float, interval: float) -> float:
        """When a request sent back now should be due (Unix time). Its turn is at ``earliest``,
        and one ``interval`` after the previous one of its line sent back; such turns come back
        in groups of a line's worth less one, due together a turn before the first of them, so
        one pop brings a group back to a line that is not empty yet."""
        now = time.time()
        if len(self._spaced) > KNOWN_BUCKETS:  # a line per bucket: forget the passed ones
            self._spaced = {k: t for k, t in self._spaced.items() if t > now}
            self._groups = {k: g for k, g in self._groups.items() if k in self._spaced}
        turn = max(earliest, self._spaced.get(key, 0.0))
        self._spaced[key] = turn + interval
        first, size = self._groups.get(key, (0.0, self.capacity))
        if size >= max(1, self.capacity - 1) or turn > first + size * interval + interval / 2:
            first, size = turn, 0
        self._groups[key] = (first, size + 1)
        early = interval if self.capacity > 1 else 0.0
        return max(now, first - early)


class TokenTurns:
    """A request's turn for a token of (domain, identity) taken in this worker (with several
    identities): it waits in its line, or is told when to come back."""

    def __init__(self, fleet: FleetPoliteness, lines: TokenLines, redis: RedisWait) -> None:
        self.fleet = fleet
        self.lines = lines
        self.redis = redis

    async def wait(self, domain: str, identity: str, delay: float) -> float | None:
        """None once the request may go, else when it comes back; ``delay``: Crawl-delay."""
        key = (domain, identity)
        if self.lines.waiting(key):
            wait = self.fleet.next_token_in(domain, identity)
        elif (wait := self.fleet.acquire(domain, identity, delay)) <= 0:
            return None
        interval = self.fleet.interval(domain, delay)
        turn = self.lines.turn_in(key, wait, interval)
        if turn > LOCAL_WAIT or (turn > SHORT_WAIT and self.lines.full(key)):
            return self.lines.due_back(key, time.time() + turn, interval)
        async with self.lines.place(key):
            while (wait := self.fleet.acquire(domain, identity, delay)) > 0:
                if wait > LOCAL_WAIT:
                    return self.lines.due_back(key, time.time() + wait, interval)
                if self.redis.engine_closing():
                    raise RedisError("the engine is closing: the request goes back untouched")
                await asyncio.sleep(wait)
        return None


@dataclass(frozen=True)
class RetryBackoff:
    """How long a retry waits in the frontier's delayed set: attempt n waits ``base ** n`` seconds
    (RETRY_BACKOFF_BASE, e: 2.7 s, 7.4 s, 20 s...), +-``jitter``, at most ``maximum``; a
    ``Retry-After`` wins, up to ``retry_after_max`` (BAN_COOLDOWN_MAX)."""

    base: float
    maximum: float
    jitter: float
    retry_after_max: float

    @classmethod
    def from_settings(cls, settings: BaseSettings) -> RetryBackoff:
        return cls(
            base=settings.getfloat("RETRY_BACKOFF_BASE"),
            maximum=settings.getfloat("RETRY_BACKOFF_MAX"),
            jitter=settings.getfloat("RETRY_BACKOFF_JITTER"),
            retry_after_max=cooldown_max(settings),
        )

    def delay(self, attempt: int, server_asked: float = 0.0) -> float:
        """Seconds before retry number ``attempt`` (1-based); ``server_asked``: a Retry-After."""
        if server_asked > 0:
            return min(server_asked, self.retry_after_max)
        spread = 1 + random.uniform(-self.jitter, self.jitter)
        try:
            wait = min(self.maximum, self.base**attempt)
        except OverflowError:
            wait = self.maximum
        return min(self.maximum, wait * spread)


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
