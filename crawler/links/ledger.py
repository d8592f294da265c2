"""Per-host state of the ``links`` spider in Redis (docs/spiders.md; keys in crawler/keys.py
LedgerKeys), bounded by TTLs: counters per host, page budgets per start entry and host, their
totals and the top hosts (trimmed to TOP_HOSTS every TRIM_EVERY pages, approximately).

A worker (one ledger per crawl: :meth:`HostLedger.of`) sends its counts in one script call
every FLUSH_PAGES pages or FLUSH_SECONDS (and when the spider goes idle or closes), and each page
at once when its host is within FLUSH_PAGES of its budget: with W workers a host gets at most
(W - 1) x FLUSH_PAGES pages beyond its budget. A failed download's count (an error answer, no
answer) rides the frontier's next round trip (crawler/frontier/riders.py), within FLUSH_SECONDS:
no round trip of its own, and never after the trip that settles its request's lease, so a
worker killed before that trip loses neither (the request is fetched again and counted then).
Backlinks used for link priority are the fleet's at the last flush plus the worker's own. Each
batch of counts has a number, and the script applies it once: a batch sent again (its reply
lost, the client's retry after a timeout) is not counted twice.
"""

from __future__ import annotations

import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from scrapy.exceptions import IgnoreRequest
from scrapy.utils.httpobj import urlparse_cached

from crawler.config import setting
from crawler.connection import crawl_redis, reply_text
from crawler.frontier.lua import APPLIED, queue_eval
from crawler.frontier.riders import Rider, Riders, first_error
from crawler.keys import LedgerKeys

if TYPE_CHECKING:
    from redis.exceptions import RedisError
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
ATTRIBUTE = "_links_host_ledger"
RIDER = "links-ledger"

# KEYS: the worker's last batch applied, the totals, the top hosts, then the batch's keys.
# ARGV: seq, ttl, top hosts kept (0: not trimmed now), then budgets: n, n x (key index, count);
#   backlinks: n, n x (key index, count); hosts: n, n x (key index, host, m, m x (name, value)).
# Applies the batch unless this seq or a later one was applied already (applied.lua); returns
# the budgets and backlinks as they are after it.
FLUSH = (
    APPLIED
    + r"""
local ttl, kept = tonumber(ARGV[2]), tonumber(ARGV[3])
local fresh = first_time(KEYS[1], ARGV[1])
local at = 3
local function take() at = at + 1; return ARGV[at] end
local out = {}
for _ = 1, tonumber(take()) do
  local key, count = KEYS[tonumber(take())], take()
  if fresh then
    out[#out + 1] = redis.call('INCRBY', key, count)
    redis.call('EXPIRE', key, ttl)
  else
    out[#out + 1] = tonumber(redis.call('GET', key) or '0')
  end
end
for _ = 1, tonumber(take()) do
  local key, count = KEYS[tonumber(take())], take()
  if fresh then
    out[#out + 1] = redis.call('HINCRBY', key, 'backlinks', count)
    redis.call('EXPIRE', key, ttl)
  else
    out[#out + 1] = tonumber(redis.call('HGET', key, 'backlinks') or '0')
  end
end
for _ = 1, tonumber(take()) do
  local key, host = KEYS[tonumber(take())], take()
  for _ = 1, tonumber(take()) do
    local name, value = take(), take()
    if fresh then
      redis.call('HINCRBY', key, name, value)
      redis.call('HINCRBY', KEYS[2], name, value)
      if name == 'pages' then redis.call('ZINCRBY', KEYS[3], value, host) end
    end
  end
  if fresh then redis.call('EXPIRE', key, ttl) end
end
if fresh and kept > 0 then redis.call('ZREMRANGEBYRANK', KEYS[3], 0, -kept - 1) end
return out
"""
)


@dataclass
class _Pending:
    """Counts of a worker not sent to Redis yet."""

    pages: int = 0
    seq: int = 0  # the batch's number, once it was sent
    budgets: Counter[tuple[str, str]] = field(default_factory=Counter)
    hosts: defaultdict[str, Counter[str]] = field(default_factory=lambda: defaultdict(Counter))
    backlinks: Counter[str] = field(default_factory=Counter)

    def __bool__(self) -> bool:
        return bool(self.pages or self.hosts)


class HostLedger:
    """A worker's counts (see the module); ``riders``: the crawl's, which carry error counts."""

    def __init__(
        self,
        server: RedisClient,
        spider: str,
        ttl: int,
        flush_pages: int = FLUSH_PAGES,
        flush_seconds: float = FLUSH_SECONDS,
        riders: Riders | None = None,
    ) -> None:
        self.server = server
        self.keys = LedgerKeys(spider)
        self.ttl = ttl
        self.flush_pages = flush_pages
        self.flush_seconds = flush_seconds
        self.riders = riders
        self._counted = 0
        self._pending = _Pending()
        self._unsent: list[_Pending] = []  # batches sent whose reply did not come, oldest first
        self._riding: list[_Pending] = []  # the batches on the round trip now going
        self._worker = uuid.uuid4().hex
        self._seq = 0
        self._flushed_at = time.monotonic()
        # Fleet-wide values read at the last flushes (bounded: cleared past KNOWN_LIMIT).
        self._budgets: dict[tuple[str, str], int] = {}
        self._backlinks: dict[str, int] = {}

    @classmethod
    def of(cls, crawler: Crawler) -> HostLedger:
        """The crawl's ledger (one per crawler, made on first use): the spider's pages and the
        middleware's errors go in the same batches."""
        ledger = getattr(crawler, ATTRIBUTE, None)
        if not isinstance(ledger, HostLedger):
            assert crawler.spidercls is not None
            ttl = setting(crawler.settings, "LINKS_STATE_TTL")
            riders = Riders.of(crawler)
            ledger = cls(crawl_redis(crawler), crawler.spidercls.name, ttl, riders=riders)
            setattr(crawler, ATTRIBUTE, ledger)
        return ledger

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
            bool(self._pending) and time.monotonic() - self._flushed_at >= self.flush_seconds
        )

    def flush(self) -> None:
        """Send the counts kept since the last flush, with any batch whose reply did not come,
        in one round trip."""
        pipe = self.server.pipeline(transaction=False)
        batches = self._board(pipe)
        if batches:
            self._applied(batches, pipe.execute())  # RedisError: they go with the next flush

    def _board(self, pipe: Any) -> list[_Pending]:
        """Queue the counts kept as a new batch, and every batch not applied yet, on ``pipe``."""
        pending, self._pending = self._pending, _Pending()
        self._flushed_at = time.monotonic()
        if pending:
            self._seq += 1
            pending.seq = self._seq
            self._unsent.append(pending)
        for batch in self._unsent:
            self._queue_flush(pipe, batch)
        return list(self._unsent)

    def _applied(self, batches: list[_Pending], results: list[Any]) -> None:
        for batch, values in zip(batches, results, strict=True):
            budgets, backlinks = list(batch.budgets), list(batch.backlinks)
            self._remember(self._budgets, budgets, values[: len(budgets)])
            self._remember(self._backlinks, backlinks, values[len(budgets) :])
            self._counted += batch.pages
        self._unsent = []

    def _queue_flush(self, pipe: Any, batch: _Pending) -> None:
        keys = [self.keys.applied(self._worker), self.keys.totals, self.keys.top]

        def index(key: str) -> int:
            keys.append(key)
            return len(keys)

        args: list[Any] = [batch.seq, self.ttl]
        trim = self._counted // TRIM_EVERY != (self._counted + batch.pages) // TRIM_EVERY
        args.append(TOP_HOSTS if trim else 0)
        args.append(len(batch.budgets))
        for (start, host), count in batch.budgets.items():
            args += [index(self.keys.budget(start, host)), count]
        args.append(len(batch.backlinks))
        for target, count in batch.backlinks.items():
            args += [index(self.keys.host(target)), count]
        args.append(len(batch.hosts))
        for host, counters in batch.hosts.items():
            args += [index(self.keys.host(host)), host, len(counters)]
            args += [part for pair in counters.items() for part in pair]
        queue_eval(pipe, FLUSH, keys, args)

    @staticmethod
    def _remember(known: dict[Any, int], sent: list[Any], values: list[Any]) -> None:
        if len(known) + len(sent) > KNOWN_LIMIT:
            known.clear()
        for name, value in zip(sent, values, strict=True):
            known[name] = int(value)

    def error(self, host: str, kind: str) -> None:
        """Count a failed download of ``host`` by its kind: it rides the frontier's next round
        trip, before or with its request's settling; without a frontier, with the next flush
        due."""
        self._pending.hosts[host][f"errors:{kind}"] += 1
        if self.riders is not None and self.riders.carried:
            if not self.riders.waiting(RIDER):  # one waiting carries every count boarded
                self._ride()
        elif self.due():
            self.flush()

    def _ride(self) -> None:
        rider = Rider(self._board_riding, self._riding_arrived, self._riding_lost)
        assert self.riders is not None
        self.riders.add(RIDER, rider, self.flush_seconds)

    def _board_riding(self, pipe: Any) -> None:
        self._riding = self._board(pipe)

    def _riding_arrived(self, replies: list[Any]) -> None:
        if (error := first_error(replies)) is not None:
            self._riding_lost(error)
            return
        batches, self._riding = self._riding, []
        self._applied(batches, replies)

    def _riding_lost(self, exc: RedisError) -> None:
        """The trip failed: its batches wait, not applied, for the next one."""
        self._riding = []
        self._ride()

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
        return cls(HostLedger.of(crawler))

    def process_exception(self, request: Request, exception: Exception) -> None:
        if "links" not in request.meta or isinstance(exception, IgnoreRequest):
            return
        self.ledger.error(urlparse_cached(request).netloc, type(exception).__name__)
