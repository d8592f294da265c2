"""The Redis side of a worker's fleet view, in one round trip per period: counters, per-minute
buckets and heartbeat out, frontier sizes and the fleet's pace back.

A worker adds the *deltas* of its numeric stats to ``{spider}:stats``. Each batch of deltas has a
sequence number (the last applied is kept in ``{spider}:stats:applied:<worker>``), and the
script applies a batch only once: one
resent after a lost reply is not counted twice, and one that could not be sent waits for the
next period, so Redis going away loses no counts. The script goes as EVAL (cached by Redis).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from crawler.connection import decode_counts, reply_text
from crawler.frontier.dupefilter import queue_seen, read_seen
from crawler.frontier.lua import APPLIED, queue_eval
from crawler.frontier.queue import (
    SIZE_NAMES,
    queue_parked,
    queue_sizes,
    read_sizes,
    requests_per_entry,
    work_left,
)
from crawler.frontier.riders import first_error
from crawler.keys import MINUTE_BUCKET_TTL, FleetKeys
from crawler.observability.counters import numeric
from crawler.observability.domain_stats import DomainNames, fold
from crawler.observability.rates import bucket_rate
from crawler.observability.sizing import BUSY_FIELD, BUSY_STAT, measured_pace
from crawler.settings import DOMAIN_STATS_MAX

if TYPE_CHECKING:
    from crawler.connection import RedisClient
    from crawler.keys import FrontierKeys
    from crawler.observability.sizing import Sizing, SizingInputs

# Stats counted per minute for the fleet's pace: bucket field -> stats key.
MINUTE_FIELDS = {
    "requests": "downloader/request_count",
    "pages": "response_received_count",
    "items": "item_scraped_count",
    BUSY_FIELD: BUSY_STAT,  # worker-milliseconds busy, for the pace per worker (sizing.py)
}
# Minutes of buckets the fleet's pace is measured over.
RATE_MINUTES = 5

# KEYS: stats hash, minute bucket, heartbeat hash, workers index, named domains (set), the
#       worker's last seq applied
# ARGV: worker, seq, now, heartbeat ttl, bucket ttl, most domains named, 1 to be told every
#       name once the set is full, n, n x (stat, "i"|"f", delta), m, m x (bucket field, delta),
#       heartbeat field/value pairs
# Applies the deltas unless this seq or a later one was applied already (applied.lua: kept apart
# from the heartbeat, which expires with the worker's TTL, so a batch resent after an outage
# longer than that is still applied once), those of a domain
# the fleet does not name under "(other)" (domain_stats.py): a new one is named while the set
# has room. Returns {1 if applied, 1 if the set is full, the hosts named (of the deltas, or
# all once full if asked), the hosts of the deltas not named}.
PUBLISH = (
    APPLIED
    + r"""
local worker, now = ARGV[1], tonumber(ARGV[3])
local ttl, bucket_ttl, most = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
local fresh = first_time(KEYS[6], ARGV[2])
local known, named, folded = {}, {}, {}
local function name_of(host)
  if host == '(other)' then return host end
  if known[host] == nil then
    local is_named = redis.call('SISMEMBER', KEYS[5], host) == 1
    if not is_named and fresh and redis.call('SCARD', KEYS[5]) < most then
      is_named = redis.call('SADD', KEYS[5], host) == 1
    end
    known[host] = is_named
    if is_named then named[#named + 1] = host else folded[#folded + 1] = host end
  end
  return known[host] and host or '(other)'
end
local function field_of(stat)
  local host, rest = string.match(stat, '^domain/([^/]*)(/.*)$')
  if host then return 'domain/' .. name_of(host) .. rest end
  host = string.match(stat, '^ban/domain/(.*)$')
  if host then return 'ban/domain/' .. name_of(host) end
  return stat
end
local i = 9
for _ = 1, tonumber(ARGV[8]) do
  local stat = field_of(ARGV[i])
  if fresh then
    local command = ARGV[i + 1] == 'f' and 'HINCRBYFLOAT' or 'HINCRBY'
    redis.call(command, KEYS[1], stat, ARGV[i + 2])
  end
  i = i + 3
end
local buckets = tonumber(ARGV[i])
i = i + 1
for _ = 1, buckets do
  if fresh then redis.call('HINCRBY', KEYS[2], ARGV[i], ARGV[i + 1]) end
  i = i + 2
end
if fresh and buckets > 0 then redis.call('EXPIRE', KEYS[2], bucket_ttl) end
if i <= #ARGV then redis.call('HSET', KEYS[3], unpack(ARGV, i)) end
redis.call('EXPIRE', KEYS[3], ttl)
redis.call('ZADD', KEYS[4], now + ttl, worker)
redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', now - ttl)
if redis.call('TTL', KEYS[4]) < 2 * ttl then redis.call('EXPIRE', KEYS[4], 2 * ttl) end
local full = redis.call('SCARD', KEYS[5]) >= most
if full and ARGV[7] == '1' then named = redis.call('SMEMBERS', KEYS[5]) end
return {fresh and 1 or 0, full and 1 or 0, named, folded}
"""
)


# The fleet's stats that tell what a start entry is worth (``requests_per_entry``).
ENTRY_STATS = ("start/entries", "scheduler/enqueued/redis")


@dataclass(frozen=True)
class FleetView:
    """What one round trip read back: frontier sizes, seen count and the fleet's minutes."""

    time: float
    sizes: dict[str, int]
    seen: int | None
    minutes: dict[int, dict[str, int]] = field(default_factory=dict)

    def per_minute(self, name: str) -> float:
        """The fleet's pages (or requests, items) per minute over the last minutes."""
        counts = {minute: bucket.get(name, 0) for minute, bucket in self.minutes.items()}
        return bucket_rate(counts, self.time)

    per_entry: float = 1.0  # requests a start entry makes (``requests_per_entry``)
    sizing: Sizing | None = None  # what the work allows (when the publisher was asked to look)
    parked: int = 0  # of ``sizes["queue"]``, requests of paused jobs, held until they resume

    @property
    def remaining(self) -> int:
        """Work not done yet (``crawler.frontier.queue.work_left``)."""
        return work_left(self.sizes, self.per_entry)


@dataclass
class _Batch:
    seq: int
    deltas: dict[str, int | float]


class StatsPublisher:
    """Publishes one worker's stats and heartbeat, and reads the fleet back."""

    def __init__(
        self,
        server: RedisClient,
        keys: FleetKeys,
        frontier: FrontierKeys,
        dupefilter_mode: str,
        worker: str,
        heartbeat_ttl: int,
        sizing: SizingInputs | None = None,
        most_domains: int = DOMAIN_STATS_MAX,
    ) -> None:
        self.server = server
        self.keys = keys
        self.frontier = frontier
        self.dupefilter_mode = dupefilter_mode
        self.worker = worker
        self.heartbeat_ttl = heartbeat_ttl
        self.sizing = sizing
        self.most_domains = most_domains
        self.domains = DomainNames()  # the fleet's named domains, as the last publish said
        self._sent: dict[str, int | float] = {}
        self._unacked: list[_Batch] = []
        self._seq = 0
        self._folded: set[str] = set()  # hosts the fleet does not name, not folded here yet

    def publish(self, stats: Mapping[str, Any], heartbeat: Mapping[str, Any]) -> FleetView:
        """Send the stats' deltas and the heartbeat, read sizes and pace; raises RedisError."""
        pipe = self.server.pipeline(transaction=False)
        read = self.queue_publish(pipe, stats, heartbeat)
        return read(pipe.execute(raise_on_error=False))

    def queue_publish(
        self, pipe: Any, stats: Mapping[str, Any], heartbeat: Mapping[str, Any]
    ) -> Callable[[list[Any]], FleetView]:
        """Queue :meth:`publish` on ``pipe``; what reads the replies (raising the first error)."""
        now = time.time()
        self._batch(stats)
        self._queue_batches(pipe, now, heartbeat)
        minutes = _recent_minutes(now)
        self._queue_reads(pipe, minutes)
        sent = len(self._unacked)

        def read(replies: list[Any]) -> FleetView:
            if (error := first_error(replies)) is not None:
                raise error
            del self._unacked[:sent]
            for _, full, named, folded in replies[:sent]:
                self.domains.heard(map(reply_text, named), bool(full))
                self._folded.update(map(reply_text, folded))
            return self._view(now, minutes, replies[sent:])

        return read

    def fold_into(self, stats: dict[str, Any]) -> None:
        """Move the counts of the hosts the fleet does not name to ``(other)`` in this
        worker's live ``stats`` (see ``domain_stats.py``)."""
        if self._folded:
            fold(stats, self._sent, self._folded)
            self._folded.clear()

    def close(self, stats: Mapping[str, Any], reason: str) -> None:
        """Send the last deltas and the finish reason, and remove the heartbeat."""
        self._batch(stats)
        pipe = self.server.pipeline(transaction=False)
        self._queue_batches(pipe, time.time(), {})
        pipe.hset(self.keys.stats, "finish_reason", reason)
        pipe.delete(self.keys.worker(self.worker))
        pipe.delete(self.keys.applied(self.worker))
        pipe.zrem(self.keys.workers, self.worker)
        pipe.execute()
        self._unacked.clear()

    def _batch(self, stats: Mapping[str, Any]) -> None:
        current = numeric(stats)
        deltas = {
            name: value - self._sent.get(name, 0)
            for name, value in current.items()
            if value != self._sent.get(name, 0)
        }
        self._sent.update(current)
        if deltas or not self._unacked:  # a batch without deltas still beats the heartbeat
            self._seq += 1
            self._unacked.append(_Batch(self._seq, deltas))

    def _queue_batches(self, pipe: Any, now: float, heartbeat: Mapping[str, Any]) -> None:
        minute = int(now // 60)
        keys = [
            self.keys.stats,
            self.keys.minute(minute),
            self.keys.worker(self.worker),
            self.keys.workers,
            self.keys.domains,
            self.keys.applied(self.worker),
        ]
        beat = [str(part) for pair in heartbeat.items() for part in pair]
        for batch in self._unacked:
            args: list[Any] = [self.worker, batch.seq, now, self.heartbeat_ttl, MINUTE_BUCKET_TTL]
            args += [self.most_domains, int(not self.domains.full)]
            args += _increments(batch.deltas) + _bucket(batch.deltas) + beat
            queue_eval(pipe, PUBLISH, keys, args)

    def _queue_reads(self, pipe: Any, minutes: list[int]) -> None:
        queue_sizes(pipe, self.frontier)
        queue_parked(pipe, self.frontier)
        queue_seen(pipe, self.frontier, self.dupefilter_mode)
        pipe.hmget(self.keys.stats, *ENTRY_STATS)
        for minute in minutes:
            pipe.hgetall(self.keys.minute(minute))
        if self.sizing is not None:
            self.sizing.queue_look(pipe, self.frontier, self.sizing.fresh)

    def _view(self, now: float, minutes: list[int], results: list[Any]) -> FleetView:
        sizes = read_sizes(results[: len(SIZE_NAMES)])
        parked, raw_seen, raw_entry_stats = results[len(SIZE_NAMES) : len(SIZE_NAMES) + 3]
        seen = read_seen(raw_seen, self.dupefilter_mode)
        entry_stats = dict(zip(ENTRY_STATS, raw_entry_stats, strict=True))
        first = len(SIZE_NAMES) + 3
        buckets = results[first : first + len(minutes)]
        view = FleetView(
            now,
            sizes,
            seen,
            {minute: decode_counts(raw) for minute, raw in zip(minutes, buckets, strict=True)},
            requests_per_entry(entry_stats),
            parked=int(parked),
        )
        return self._sized(view, results[first + len(minutes) :])

    def _sized(self, view: FleetView, replies: list[Any]) -> FleetView:
        """``view`` with what the work allows, from the look at the queue's ``replies``."""
        if self.sizing is None:
            return view
        pace = measured_pace(view.minutes)
        sizing = self.sizing.size_from(replies, view.sizes, view.remaining, pace)
        return replace(view, sizing=sizing)


def _recent_minutes(now: float) -> list[int]:
    current = int(now // 60)
    return list(range(current - RATE_MINUTES + 1, current + 1))


def _increments(deltas: Mapping[str, int | float]) -> list[Any]:
    args: list[Any] = [len(deltas)]
    for name, delta in deltas.items():
        if isinstance(delta, int):
            args += [name, "i", delta]
        else:
            args += [name, "f", repr(float(delta))]
    return args


def _bucket(deltas: Mapping[str, int | float]) -> list[Any]:
    fields = [(name, int(deltas.get(stat, 0))) for name, stat in MINUTE_FIELDS.items()]
    fields = [(name, delta) for name, delta in fields if delta]
    return [len(fields), *(part for pair in fields for part in pair)]
