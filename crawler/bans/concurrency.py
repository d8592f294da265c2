"""Requests in flight per domain for a whole fleet (POLITENESS_CONCURRENCY, docs/politeness.md):
leases in Redis that free themselves. ``{spider}:inflight:<domain>`` is a sorted set of random
tokens scored by their expiry on the Redis server's clock, so a killed worker's leases expire
(download timeout plus LEASE_SLACK seconds), and the key with them. Off (0): not loaded at all.
"""

from __future__ import annotations

import random
import secrets
import time
from typing import TYPE_CHECKING
from weakref import WeakKeyDictionary

from redis.exceptions import RedisError
from scrapy.utils.httpobj import urlparse_cached

from crawler.bans.waits import send_back_counted
from crawler.keys import inflight_prefix

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.crawler import Crawler

    from crawler.connection import RedisClient

SLOT_META = "fleet_slot"
# A request of a domain at its cap is due again after this many seconds (spread at random);
# each further refusal in a row doubles the wait, up to FULL_WAIT_MAX. Until then this worker
# takes the domain as full and sends its requests back without asking Redis.
RETRY_WINDOW = (0.2, 0.8)
FULL_WAIT_MAX = 10.0
# Domains a worker remembers as full, or refused in a row, before it forgets the ended ones.
KNOWN_FULL = 10_000
# Per crawler: domain -> monotonic time until which this worker takes the domain as full.
_FULL_UNTIL: WeakKeyDictionary[Crawler, dict[str, float]] = WeakKeyDictionary()


def full_hosts(crawler: Crawler) -> dict[str, float]:
    """The full domains this worker knows of, shared by HostFull (640) and HostConcurrency."""
    return _FULL_UNTIL.setdefault(crawler, {})


# Seconds a lease outlives its request's download timeout (the way to the handler, clocks).
LEASE_SLACK = 30.0

# KEYS: the domain's set. ARGV: cap, lease seconds, token. Returns 1 when the lease is taken.
TAKE = r"""
local clock = redis.call('TIME')
local now = tonumber(clock[1]) + tonumber(clock[2]) / 1000000
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[1]) then return 0 end
local seconds = tonumber(ARGV[2])
redis.call('ZADD', KEYS[1], now + seconds, ARGV[3])
if redis.call('TTL', KEYS[1]) < seconds then redis.call('EXPIRE', KEYS[1], math.ceil(seconds)) end
return 1
"""


class HostSlots:
    """At most ``cap`` leases per domain at once for every worker of ``spider``."""

    def __init__(self, server: RedisClient, spider: str, cap: int) -> None:
        self.server = server
        self.prefix = inflight_prefix(spider)
        self.cap = cap
        self._take = server.register_script(TAKE)

    def key(self, domain: str) -> str:
        return self.prefix + domain

    def take(self, domain: str, seconds: float) -> str | None:
        """A lease token of ``domain`` for ``seconds``; None when it has ``cap`` in flight."""
        token = secrets.token_hex(8)
        taken = self._take(keys=[self.key(domain)], args=[self.cap, seconds, token])
        return token if int(taken) else None

    def give_back(self, domain: str, token: str) -> None:
        self.server.zrem(self.key(domain), token)

    def in_flight(self, domain: str) -> int:
        """Leases of ``domain`` (expired ones included until the next take)."""
        return int(self.server.zcard(self.key(domain)))


class HostAdmission:
    """This worker's side of the host slots: a lease per request, full domains remembered."""

    def __init__(self, crawler: Crawler, slots: HostSlots) -> None:
        self.crawler = crawler
        self.slots = slots
        self.timeout = crawler.settings.getfloat("DOWNLOAD_TIMEOUT")
        self.full_until = full_hosts(crawler)
        self.refusals: dict[str, int] = {}

    def admit(self, request: Request) -> Request | None:
        """None once ``request`` holds a lease (meta SLOT_META), else it going back for a while.
        One that comes holding a lease already (a later middleware sent it back before its
        download: the send gate, a paused job) gives that one back first."""
        self.give_back(request)
        domain = request_domain(request)
        full = full_wait(self.full_until, domain)
        if full is not None:
            return send_back_after(self.crawler, request, full)
        timeout = float(request.meta.get("download_timeout", self.timeout))
        token = self.slots.take(domain, timeout + LEASE_SLACK)
        if token is None:
            return send_back_after(self.crawler, request, self._refused(domain))
        self.refusals.pop(domain, None)
        request.meta[SLOT_META] = token
        return None

    def _refused(self, domain: str) -> float:
        """Seconds this worker takes ``domain`` as full, doubling with each refusal in a row."""
        if len(self.refusals) >= KNOWN_FULL:
            self._forget_ended()
        refusals = self.refusals.get(domain, 0) + 1
        self.refusals[domain] = refusals
        wait = min(FULL_WAIT_MAX, random.uniform(*RETRY_WINDOW) * 2.0 ** min(refusals - 1, 16))
        self.full_until[domain] = time.monotonic() + wait
        return wait

    def _forget_ended(self) -> None:
        """Forget the domains whose full time ended (a broad crawl meets each one once)."""
        now = time.monotonic()
        for domain in [d for d, until in self.full_until.items() if until <= now]:
            del self.full_until[domain]
        self.refusals = {d: n for d, n in self.refusals.items() if d in self.full_until}

    def give_back(self, request: Request) -> bool:
        """Give back the lease ``request`` holds; False if Redis did not answer (it expires)."""
        token = request.meta.pop(SLOT_META, None)
        if token is None:
            return True
        domain = request_domain(request)
        self.full_until.pop(domain, None)  # a slot is free: worth asking again
        try:
            self.slots.give_back(domain, str(token))
        except RedisError:
            return False
        return True


def send_back_if_full(
    crawler: Crawler, request: Request, full_until: dict[str, float]
) -> Request | None:
    """``request`` going back while this worker takes its domain as full; else None."""
    wait = full_wait(full_until, request_domain(request))
    return None if wait is None else send_back_after(crawler, request, wait)


def full_wait(full_until: dict[str, float], domain: str) -> float | None:
    """Seconds (spread) a request waits while this worker takes ``domain`` as full; else None."""
    full = full_until.get(domain, 0.0) - time.monotonic()
    return full + random.uniform(*RETRY_WINDOW) if full > 0 else None


def send_back_after(crawler: Crawler, request: Request, wait: float) -> Request:
    """``request`` going back to the frontier for ``wait`` seconds, without its identity."""
    return send_back_counted(crawler, request, time.time() + wait, "concurrency")


def request_domain(request: Request) -> str:
    return urlparse_cached(request).hostname or ""
