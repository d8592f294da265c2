"""Per-host state of the ``links`` spider in Redis, bounded by TTLs, written in one pipeline.

``{links}:host:<host>`` (hash, expires LINKS_STATE_TTL after its last change): ``pages``,
``bytes``, ``external_links`` (links from this host to other hosts), ``backlinks`` (links from
other hosts to this one, at most MAX_BACKLINK_HOSTS target hosts counted per page) and
``errors:<class>`` (``http_404``, ``DNSLookupError``, ...; HostErrorsMiddleware below).
``{links}:pages:<start>:<host>`` (string, same TTL): HTML pages fetched on ``host`` for the
start entry ``<start>``; the spider stores and follows nothing on a host past its budget.
``{links}:hosts:totals`` (hash): the same counters summed over every host, and
``{links}:hosts:top`` (sorted set, host -> pages): the hosts with the most pages, trimmed to
TOP_HOSTS every TRIM_EVERY pages a worker counts (approximate: a trimmed host starts again
from its next page). :meth:`HostLedger.summary` reads both, for ``scrapy status``.
State per host is a hash and a counter per start, both expiring: it stays bounded whatever the
number of hosts a fleet has met over time.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from scrapy.exceptions import IgnoreRequest
from scrapy.utils.httpobj import urlparse_cached

from crawler.config import setting
from crawler.connection import redis_from_settings, reply_text

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.crawler import Crawler

    from crawler.connection import RedisClient

MAX_BACKLINK_HOSTS = 50
TOP_HOSTS = 1000
TRIM_EVERY = 1000


class HostLedger:
    def __init__(self, server: RedisClient, spider: str, ttl: int) -> None:
        self.server = server
        self.prefix = "{" + spider + "}:"
        self.ttl = ttl
        self.top_key = self.prefix + "hosts:top"
        self.totals_key = self.prefix + "hosts:totals"
        self._counted = 0

    def host_key(self, host: str) -> str:
        return f"{self.prefix}host:{host}"

    def budget_key(self, start: str, host: str) -> str:
        return f"{self.prefix}pages:{start}:{host}"

    def page(
        self, start: str, host: str, size: int, external: Mapping[str, int]
    ) -> tuple[int, dict[str, int]]:
        """Count one HTML page of ``host`` and its links to other hosts, in one round trip.
        Returns the pages of ``host`` fetched for ``start`` so far (this one included) and
        the backlinks each linked host has now (the first MAX_BACKLINK_HOSTS of them)."""
        pipe = self.server.pipeline(transaction=False)
        pipe.incr(self.budget_key(start, host))
        pipe.expire(self.budget_key(start, host), self.ttl)
        key = self.host_key(host)
        pipe.hincrby(key, "pages", 1)
        pipe.hincrby(key, "bytes", size)
        pipe.hincrby(key, "external_links", sum(external.values()))
        pipe.expire(key, self.ttl)
        targets = list(external.items())[:MAX_BACKLINK_HOSTS]
        for target, count in targets:
            pipe.hincrby(self.host_key(target), "backlinks", count)
            pipe.expire(self.host_key(target), self.ttl)
        pipe.zincrby(self.top_key, 1, host)
        pipe.hincrby(self.totals_key, "pages", 1)
        pipe.hincrby(self.totals_key, "bytes", size)
        pipe.hincrby(self.totals_key, "external_links", sum(external.values()))
        self._counted += 1
        if self._counted % TRIM_EVERY == 0:
            pipe.zremrangebyrank(self.top_key, 0, -TOP_HOSTS - 1)
        results: list[Any] = pipe.execute()
        backlinks = {target: int(results[6 + 2 * i]) for i, (target, _) in enumerate(targets)}
        return int(results[0]), backlinks

    def error(self, host: str, kind: str) -> None:
        pipe = self.server.pipeline(transaction=False)
        pipe.hincrby(self.host_key(host), f"errors:{kind}", 1)
        pipe.expire(self.host_key(host), self.ttl)
        pipe.hincrby(self.totals_key, f"errors:{kind}", 1)
        pipe.execute()

    def host(self, host: str) -> dict[str, int]:
        """The counters of ``host`` (what ``scrapy status`` and tests read)."""
        raw: Any = self.server.hgetall(self.host_key(host))
        return _ints(raw)

    def summary(self, top: int = 10) -> dict[str, Any]:
        """The fleet's totals over every host and the ``top`` hosts by pages, each with its
        counters: ``{"totals": {...}, "hosts": {"host": {...}, ...}}`` (two round trips)."""
        pipe = self.server.pipeline(transaction=False)
        pipe.hgetall(self.totals_key)
        pipe.zrevrange(self.top_key, 0, top - 1)
        raw_totals, names = pipe.execute()
        hosts = [reply_text(name) for name in names]
        pipe = self.server.pipeline(transaction=False)
        for host in hosts:
            pipe.hgetall(self.host_key(host))
        counters = pipe.execute() if hosts else []
        return {
            "totals": _ints(raw_totals),
            "hosts": {host: _ints(raw) for host, raw in zip(hosts, counters, strict=True)},
        }


def _ints(raw: Mapping[Any, Any]) -> dict[str, int]:
    return {reply_text(name): int(value) for name, value in raw.items()}


class HostErrorsMiddleware:
    """Downloader middleware of the ``links`` spider (order 90, inside the retry middleware's
    reach: it sees only a download's final failure): counts it in the host's
    ``errors:<exception class>`` (DNSLookupError, TimeoutError, ConnectionRefusedError, ...).
    A request dropped on purpose (IgnoreRequest: robots.txt, offsite) is no error."""

    def __init__(self, ledger: HostLedger) -> None:
        self.ledger = ledger

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> HostErrorsMiddleware:
        assert crawler.spidercls is not None
        ttl = setting(crawler.settings, "LINKS_STATE_TTL")
        return cls(HostLedger(redis_from_settings(crawler.settings), crawler.spidercls.name, ttl))

    def process_exception(self, request: Request, exception: Exception) -> None:
        if "links" not in request.meta or isinstance(exception, IgnoreRequest):
            return
        self.ledger.error(urlparse_cached(request).netloc, type(exception).__name__)
