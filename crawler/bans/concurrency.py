"""Requests in flight per domain for a whole fleet (POLITENESS_CONCURRENCY), not per worker:
leases in Redis that free themselves.

Off by default: with POLITENESS_CONCURRENCY = 0 the middlewares (``HostFullMiddleware``,
``HostConcurrencyMiddleware`` in crawler/middlewares.py) are not loaded and cost nothing. On,
each request takes a lease of its domain in Redis (:class:`HostSlots`, one round trip) just
after the ban middleware has admitted it, and gives it back (one more) as it leaves the
downloader (Scrapy's request_left_downloader signal, whatever happens to its answer next), or
when a later middleware answers or fails it before it got there. A request whose domain has
every slot taken goes back to the frontier's delayed set for a moment instead of holding a
download slot while it waits.

``{spider}:inflight:<domain>`` is a sorted set of leases (a random token scored by the time it
expires, on the Redis server's clock). A request may go out when the set, its expired leases
dropped, holds fewer than the cap; it adds its lease and removes it once its answer or error
is back. A worker killed with requests in flight cannot keep the domain's slots: their leases
expire (the request's download timeout plus LEASE_SLACK seconds) and the key with them.
"""

from __future__ import annotations

import secrets
from typing import TYPE_CHECKING
from weakref import WeakKeyDictionary

from crawler.keys import inflight_prefix

if TYPE_CHECKING:
    from scrapy.crawler import Crawler

    from crawler.connection import RedisClient

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


# Seconds a lease outlives its request's download timeout (time spent between this middleware
# and the download handler, and clocks).
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
        """A lease token for one request to ``domain`` lasting ``seconds``; None when the
        domain already has ``cap`` requests in flight."""
        token = secrets.token_hex(8)
        taken = self._take(keys=[self.key(domain)], args=[self.cap, seconds, token])
        return token if int(taken) else None

    def give_back(self, domain: str, token: str) -> None:
        self.server.zrem(self.key(domain), token)

    def in_flight(self, domain: str) -> int:
        """Leases of ``domain`` (expired ones included until the next take)."""
        return int(self.server.zcard(self.key(domain)))
