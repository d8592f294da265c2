"""Whom a failed answer is put down to, for the fleet: the host, or the identity it went through.

With one identity, a connection failure or a 429/503 without a usable Retry-After is the host's:
a step of its block by the circuit breaker (:mod:`crawler.bans.breaker`), and once it fails
HOST_MAX_EXCEPTIONS times in a row it is marked unreachable. With several identities
(BIND_ADDRESSES, PROXY_POOL) such a failure blocks the identity it went through on that host, or
on every host when it is the identity's own (a bind error, a proxy that refuses or cannot be
reached), and the retry goes as another identity; the host is blamed only once every identity
cools down there. A 503 with a usable Retry-After holds the host back for the fleet until then.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

from redis.exceptions import RedisError
from scrapy.utils.httpobj import urlparse_cached

from crawler.bans.breaker import (
    CONNECTION_FAILURES,
    EVERY_HOST,
    MARKS,
    UNREACHABLE,
    Block,
    HostBreaker,
    HostMarked,
    identity_at_fault,
    mark_scope,
    site_of,
)
from crawler.frontier.reports import FrontierReports
from crawler.meta import (
    BREAKER_BLOCK_META,
    BREAKER_COUNTS_META,
    IDENTITY_FAILED_META,
    IDENTITY_META,
    SENT_AT_META,
)

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.crawler import Crawler

    from crawler.bans.identities import Identity, IdentityPool
    from crawler.bans.politeness import FleetPoliteness
    from crawler.bans.waits import RedisWait

logger = logging.getLogger(__name__)


class Blame:
    """The ban middleware's view of hosts and identities that failed (see the module's text)."""

    def __init__(
        self, crawler: Crawler, fleet: FleetPoliteness, pool: IdentityPool, redis: RedisWait
    ) -> None:
        self.crawler = crawler
        self.fleet = fleet
        self.pool = pool
        self.redis = redis
        self.breaker = HostBreaker.of(crawler)
        self.breaker.noted = fleet.note_ban
        self.frontier = FrontierReports(crawler)

    # --- before a request goes ---------------------------------------------------------------

    def cooling(self, domain: str, site: str) -> float:
        """The end of the domain's cool-down (a ban's) or of its site's block (the breaker's,
        per host and port), the later; 0 when neither holds."""
        return self._latest((domain, site))

    def identity_cooling(self, domain: str, site: str, name: str) -> float:
        """The end of the identity's cool-down on the domain (a ban's under ``rotate``), on the
        site or on every host (the breaker's blocks of an identity), the latest; 0 when none."""
        return self._latest((domain, EVERY_HOST, site), name)

    def _latest(self, hosts: tuple[str, ...], name: str | None = None) -> float:
        """The latest end of a cool-down of ``hosts`` (each once), for identity ``name``."""
        return max(self.fleet.cooling_until(host, name) for host in dict.fromkeys(hosts))

    def refuse_marked(self, request: Request, site: str) -> None:
        """A host marked unreachable (or its robots.txt unavailable): a dead letter."""
        for mark in MARKS:
            if self.fleet.cooling_until(site, mark_scope(mark)):
                error = f"{site} is marked {mark} for the fleet"
                self.frontier.ledger.failed(request, mark, error)
                self._count(f"breaker/dead/{mark}")
                raise HostMarked(mark, error)

    # --- after it failed -----------------------------------------------------------------------

    def rotates(self, request: Request) -> bool:
        """Whether the request went as one of several identities: a failure through it blocks
        the identity, and its host only once every identity failed there."""
        named = str(request.meta.get(IDENTITY_META, ""))
        return len(self.pool.identities) > 1 and self.pool.get(named) is not None

    async def connection_failed(self, request: Request, exception: Exception) -> None:
        """A connection-level failure: a step of the block of the identity it went through, or
        of its host; once the host is marked unreachable, this request is its first dead letter
        (not retried)."""
        if not self.breaker.enabled or not isinstance(exception, CONNECTION_FAILURES):
            return
        site = site_of(request)
        why = type(exception).__name__
        try:
            if self.rotates(request):
                own = identity_at_fault(exception, bool(request.meta.get("proxy")))
                held = await self.redis.wait_for(
                    lambda: self.identity_failed(request, site, why, own)
                )
                if held is not None:
                    # Its retry goes as the next identity not cooling down on the host.
                    if (other := held[1]) is not None:
                        other.apply(request.meta)
                    request.meta[IDENTITY_FAILED_META] = True
                    return
            counted = (UNREACHABLE, *request.meta.get(BREAKER_COUNTS_META, ()))
            block = await self.redis.wait_for(lambda: self.failed(request, site, why, counted))
        except RedisError:
            return  # the engine is closing: the lease is released untouched
        if BREAKER_COUNTS_META in request.meta:
            request.meta[BREAKER_BLOCK_META] = block
        if UNREACHABLE in block.marks:
            request.meta["dont_retry"] = True
            self.frontier.ledger.failed(request, UNREACHABLE, f"{why}: {exception}")
            self._count(f"breaker/dead/{UNREACHABLE}")

    async def identity_failed(
        self, request: Request, site: str, why: str, own: bool = False
    ) -> tuple[float, Identity | None] | None:
        """The site failed through the request's identity (``own``: the identity's own failure,
        whatever the host): the identity is blocked there (or on every host). The end of its
        block and the next identity not cooling down on the host; None when there is none and
        the failure is the host's: the host is blocked as with one identity."""
        name = str(request.meta.get(IDENTITY_META, ""))
        sent = float(request.meta.get(SENT_AT_META) or time.time())
        where = EVERY_HOST if own else site
        block = self.breaker.identity_failed(where, name, sent, why)
        if block.fresh:
            self._count("breaker/identity_blocks")
            self._say_blocked(f"{name} blocked on {'every host' if own else site}", block, why)
        other = self._other_identity(request, site)
        if other is None and not own:
            return None
        return block.until, other

    def _other_identity(self, request: Request, site: str) -> Identity | None:
        """The next identity after the request's not cooling down on its host; None if none."""
        domain = urlparse_cached(request).hostname or ""
        name = str(request.meta.get(IDENTITY_META, ""))
        return self.pool.other_than(
            name, lambda identity: self.identity_cooling(domain, site, identity.name)
        )

    async def failed(
        self, request: Request, site: str, why: str, counted: tuple[str, ...] = ()
    ) -> Block:
        """A step of the host's block (counted towards the marks ``counted``)."""
        sent = float(request.meta.get(SENT_AT_META) or time.time())
        block = self.breaker.failed(site, sent, why, counted)
        if block.fresh:
            self._count("breaker/blocks")
            self._say_blocked(f"{site} blocked", block, why)
        return block

    async def wait_out(self, site: str, seconds: float, status: int) -> None:
        """The host asked for ``seconds`` (its Retry-After, capped): it cools down for the fleet
        until then, as the breaker's blocks do."""
        fresh = not self.fleet.cooling_until(site)
        until = self.fleet.ban(site, None, seconds, f"HTTP {status} Retry-After {seconds:g} s")
        if fresh:
            self._count("breaker/retry_after")
            logger.warning(
                "%s held back for the fleet until %s (HTTP %d, Retry-After %g s)",
                site,
                time.strftime("%H:%M:%S", time.localtime(until)),
                status,
                seconds,
                extra={"spider": self.crawler.spider},
            )

    def _say_blocked(self, what: str, block: Block, why: str) -> None:
        logger.warning(
            "%s for the fleet until %s (step %d: %s)",
            what,
            time.strftime("%H:%M:%S", time.localtime(block.until)),
            block.level,
            why,
            extra={"spider": self.crawler.spider},
        )

    def _count(self, key: str) -> None:
        if self.crawler.stats is not None:
            self.crawler.stats.inc_value(key)
