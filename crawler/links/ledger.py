"""Per-host state of the ``links`` spider in Redis (docs/spiders.md; keys in crawler/keys.py
LedgerKeys), bounded by TTLs: counters per host, page budgets per start entry and host, their
totals and the top hosts (trimmed to TOP_HOSTS every TRIM_EVERY pages, approximately).

A worker sends its counts in one pipeline every FLUSH_PAGES pages or FLUSH_SECONDS (and when the
spider goes idle or closes), and each page at once when its host is within FLUSH_PAGES of its
budget: with W workers a host gets at most (W - 1) x FLUSH_PAGES pages beyond its budget.
Backlinks used for link priority are the fleet's at the last flush plus the worker's own.
"""

from __future__ import annotations

import time
from collections import Counter, defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from redis.exceptions import RedisError
from scrapy.exceptions import IgnoreRequest
from scrapy.utils.httpobj import urlparse_cached

from crawler.config import setting
from crawler.connection import crawl_redis, reply_text
from crawler.keys import LedgerKeys

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.crawler import Crawler

    from crawler.connection import RedisClient

MAX_BACKLINK_HOSTS = 50
TOP_HOSTS = 1000
TRIM_EVERY = 1000
# A worker sends its counts every FLUSH_PAGES pages or FLUSH_SECONDS, whichever comes first.
FLUSH_PAGES = 100
FLUSH_SECONDS = 1.0
# Fleet-wide page budgets and backlinks a worker remembers from its flushes, at most.
KNOWN_LIMIT = 100_000


@dataclass
class _Pending:
    """Counts of a worker not sent to Redis yet."""

    pages: int = 0
    budgets: Counter[tuple[str, str]] = field(default_factory=Counter)
    hosts: defaultdict[str, Counter[str]] = field(default_factory=lambda: defaultdict(Counter))
    backlinks: Counter[str] = field(default_factory=Counter)

    def merge(self, other: _Pending) -> None:
        self.pages += other.pages
        self.budgets.update(other.budgets)
        for host, counters in other.hosts.items():
            self.hosts[host].update(counters)
        self.backlinks.update(other.backlinks)


class HostLedger:
    def __init__(
        self,
        server: RedisClient,
        spider: str,
        ttl: int,
        flush_pages: int = FLUSH_PAGES,
        flush_seconds: float = FLUSH_SECONDS,
    ) -> None:
        self.server = server
        self.keys = LedgerKeys(spider)
        self.ttl = ttl
        self.flush_pages = flush_pages
        self.flush_seconds = flush_seconds
        self._counted = 0
        self._pending = _Pending()
        self._flushed_at = time.monotonic()
        # Fleet-wide values read at the last flushes (bounded: cleared past KNOWN_LIMIT).
        self._budgets: dict[tuple[str, str], int] = {}
        self._backlinks: dict[str, int] = {}

    def page(
        self,
        start: str,
        host: str,
        size: int,
        external: Mapping[str, int],
        max_pages: int = 0,
        revisit: bool = False,
    ) -> tuple[int, dict[str, int]]:
        """Count one HTML page of ``host`` and its links to other hosts; the pages of ``host``
        fetched for ``start`` so far, fleet-wide, and the backlinks of each linked host (the first
        MAX_BACKLINK_HOSTS). A page whose host is within ``flush_pages`` of ``max_pages`` (0: none)
        is sent at once; a ``revisit`` counts its fetch and bytes only, neither the budget nor its
        links."""
        pending = self._pending
        budget = (start, host)
        counters = pending.hosts[host]
        counters["pages"] += 1
        counters["bytes"] += size
        targets = list(external.items())[:MAX_BACKLINK_HOSTS]
        if not revisit:
            pending.budgets[budget] += 1
            counters["external_links"] += sum(external.values())
            for target, count in targets:
                pending.backlinks[target] += count
        pending.pages += 1
        fetched = self._budgets.get(budget, 0) + pending.budgets[budget]
        near = bool(max_pages) and fetched + self.flush_pages > max_pages
        if near or self.due():
            self.flush()
            fetched = self._budgets.get(budget, 0)
        backlinks = {
            target: self._backlinks.get(target, 0) + pending.backlinks.get(target, 0)
            for target, _ in targets
        }
        return fetched, backlinks

    def due(self) -> bool:
        return self._pending.pages >= self.flush_pages or (
            self._pending.pages > 0 and time.monotonic() - self._flushed_at >= self.flush_seconds
        )

    def flush(self) -> None:
        """Send the counts kept since the last flush, in one round trip."""
        pending, self._pending = self._pending, _Pending()
        self._flushed_at = time.monotonic()
        if not pending.pages:
            return
        pipe = self.server.pipeline(transaction=False)
        budgets = list(pending.budgets.items())
        for (start, host), count in budgets:
            pipe.incrby(self.keys.budget(start, host), count)
            pipe.expire(self.keys.budget(start, host), self.ttl)
        backlinks = list(pending.backlinks.items())
        for target, count in backlinks:
            pipe.hincrby(self.keys.host(target), "backlinks", count)
            pipe.expire(self.keys.host(target), self.ttl)
        totals: Counter[str] = Counter()
        for host, counters in pending.hosts.items():
            key = self.keys.host(host)
            for name, value in counters.items():
                pipe.hincrby(key, name, value)
            pipe.expire(key, self.ttl)
            pipe.zincrby(self.keys.top, counters["pages"], host)
            totals.update(counters)
        for name, value in totals.items():
            pipe.hincrby(self.keys.totals, name, value)
        if self._counted // TRIM_EVERY != (self._counted + pending.pages) // TRIM_EVERY:
            pipe.zremrangebyrank(self.keys.top, 0, -TOP_HOSTS - 1)
        try:
            results: list[Any] = pipe.execute()
        except RedisError:
            self._pending.merge(pending)  # sent again with the next flush
            raise
        self._counted += pending.pages
        self._remember(self._budgets, budgets, results[0 : 2 * len(budgets) : 2])
        offset = 2 * len(budgets)
        self._remember(
            self._backlinks, backlinks, results[offset : offset + 2 * len(backlinks) : 2]
        )

    @staticmethod
    def _remember(known: dict[Any, int], sent: list[tuple[Any, int]], values: list[Any]) -> None:
        if len(known) + len(sent) > KNOWN_LIMIT:
            known.clear()
        for (name, _), value in zip(sent, values, strict=True):
            known[name] = int(value)

    def error(self, host: str, kind: str) -> None:
        pipe = self.server.pipeline(transaction=False)
        pipe.hincrby(self.keys.host(host), f"errors:{kind}", 1)
        pipe.expire(self.keys.host(host), self.ttl)
        pipe.hincrby(self.keys.totals, f"errors:{kind}", 1)
        pipe.execute()

    def host(self, host: str) -> dict[str, int]:
        """The counters of ``host`` (what ``scrapy status`` and tests read)."""
        raw: Any = self.server.hgetall(self.keys.host(host))
        return _ints(raw)

    def summary(self, top: int = 10) -> dict[str, Any]:
        """The fleet's totals over every host and the ``top`` hosts by pages, each with its
        counters: ``{"totals": {...}, "hosts": {"host": {...}, ...}}`` (two round trips)."""
        pipe = self.server.pipeline(transaction=False)
        pipe.hgetall(self.keys.totals)
        pipe.zrevrange(self.keys.top, 0, top - 1)
        raw_totals, names = pipe.execute()
        hosts = [reply_text(name) for name in names]
        pipe = self.server.pipeline(transaction=False)
        for host in hosts:
            pipe.hgetall(self.keys.host(host))
        counters = pipe.execute() if hosts else []
        return {
            "totals": _ints(raw_totals),
            "hosts": {host: _ints(raw) for host, raw in zip(hosts, counters, strict=True)},
        }


def _ints(raw: Mapping[Any, Any]) -> dict[str, int]:
    return {reply_text(name): int(value) for name, value in raw.items()}


class HostErrorsMiddleware:
    """Downloader middleware of the ``links`` spider at 90, within the retry middleware's reach (it
    sees only a download's final failure): counts it in the host's ``errors:<exception class>``; a
    request dropped on purpose (IgnoreRequest) is no error."""

    def __init__(self, ledger: HostLedger) -> None:
        self.ledger = ledger

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> HostErrorsMiddleware:
        assert crawler.spidercls is not None
        ttl = setting(crawler.settings, "LINKS_STATE_TTL")
        return cls(HostLedger(crawl_redis(crawler), crawler.spidercls.name, ttl))

    def process_exception(self, request: Request, exception: Exception) -> None:
        if "links" not in request.meta or isinstance(exception, IgnoreRequest):
            return
        self.ledger.error(urlparse_cached(request).netloc, type(exception).__name__)
