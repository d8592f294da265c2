"""A spider's frontier in Redis: what is queued, leased, delayed, dead, and already seen.

This module speaks Redis: requests are opaque JSON strings here, but for dead letters, shown
and requeued with their fields named in full (``codec.expand``). The scheduler
(``scheduler.py``) turns Scrapy requests into :class:`Pending` entries and back.
"""

from __future__ import annotations

import itertools
import json
import logging
import re
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from redis.cluster import RedisCluster

from crawler.connection import reply_text
from crawler.frontier import codec, lua
from crawler.frontier.dupefilter import DupefilterConfig
from crawler.frontier.pacing import NO_PACING, Pacing
from crawler.keys import FrontierKeys, start_key

if TYPE_CHECKING:
    from scrapy.settings import BaseSettings

    from crawler.connection import RedisClient

logger = logging.getLogger(__name__)

# Higher Scrapy priority first, FIFO within one priority (one list per priority, see
# scripts/queue.lua). The priorities index is a sorted set scored -priority, and a double holds
# every integer up to 2**53 exactly: priorities beyond +-PRIORITY_LIMIT are clamped to it.
PRIORITY_LIMIT = 2**53

# What Frontier.sizes reads, in this order. What work is left is answered here only:
# REQUESTS_LEFT are requests queued, leased or waiting for their due time (the scheduler keeps
# a worker open while any is left); WORK_LEFT adds start entries not yet turned into requests
# (each makes at least one), for the ETA and for `scrapy fleet` deciding the work is done. Dead
# letters are not work: they wait for `scrapy frontier SPIDER requeue`.
SIZE_NAMES = ("queue", "leased", "delayed", "dead", "start", "start_leased")
REQUESTS_LEFT = ("queue", "leased", "delayed")
WORK_LEFT = (*REQUESTS_LEFT, "start", "start_leased")


def requests_left(sizes: Mapping[str, int]) -> bool:
    """Whether requests are queued, leased or delayed."""
    return any(sizes.get(name, 0) for name in REQUESTS_LEFT)


def fleet_busy(sizes: Mapping[str, int]) -> bool:
    """Whether a worker of the fleet still holds or may get work: requests left, or start
    entries leased. The start list itself is not asked: the idle spider asking pops it first."""
    return requests_left(sizes) or bool(sizes.get("start_leased", 0))


def work_left(sizes: Mapping[str, int], per_entry: float = 1.0) -> int:
    """Work not done yet: requests left, and start entries not yet turned into requests, each
    worth ``per_entry`` requests (see :func:`requests_per_entry`)."""
    entries = sum(sizes.get(name, 0) for name in WORK_LEFT if name not in REQUESTS_LEFT)
    requests = sum(sizes.get(name, 0) for name in REQUESTS_LEFT)
    return requests + round(entries * max(1.0, per_entry))


def requests_per_entry(stats: Mapping[str, Any]) -> float:
    """The requests a start entry has made so far on average, from the fleet's stats
    (``scheduler/enqueued/redis`` over ``start/entries``); 1 before any entry was read. A site's
    entry makes a whole site's pages: an ETA that counted it as one request would be short by
    the site."""
    try:
        entries = float(stats.get("start/entries") or 0)
        requests = float(stats.get("scheduler/enqueued/redis") or 0)
    except (TypeError, ValueError):
        return 1.0
    return max(1.0, requests / entries) if entries > 0 else 1.0


@dataclass(frozen=True)
class Pending:
    """A request ready to be scheduled: its JSON and what the duplicate filter needs."""

    json: str
    fingerprint: bytes
    priority: int = 0
    dont_filter: bool = False
    due: float = 0.0
    seed: bool = False  # a start entry's: past the filter unless seeded before (schedule.lua)
    depth: int | None = None  # links from a start URL: a shorter path passes (dupefilter.lua)

    def script_args(self) -> list[Any]:
        h1 = int.from_bytes(self.fingerprint[0:4], "big")
        h2 = int.from_bytes(self.fingerprint[4:8], "big") | 1
        clamped = max(-PRIORITY_LIMIT, min(PRIORITY_LIMIT, self.priority))
        return [
            self.fingerprint.hex(),
            h1,
            h2,
            2 if self.seed and not self.dont_filter else int(self.dont_filter),
            str(clamped),
            self.due,
            self.json,
            "" if self.depth is None else self.depth,
        ]


@dataclass(frozen=True)
class Popped:
    """The outcome of one pop: leased (id, json) pairs and housekeeping counts."""

    leased: list[tuple[str, str]]
    promoted: int
    reclaimed: int
    queue_size: int
    next_due: float = 0.0  # earliest due time (Unix) left in the delayed set; 0 when empty
    paced: frozenset[str] = frozenset()  # leased ids whose host's token the pop took
    unscanned: bool = False  # paced, the pop looked at as many as it may and more are queued
    dues: dict[str, float] = field(default_factory=dict)  # leased ids whose turn is to come


@dataclass(frozen=True)
class Requeued:
    """What :meth:`Frontier.requeue_dead` did: the dead letters moved back to the queue, and
    those removed because their job is cancelled or past its deadline (job number -> letters),
    whose requests the frontier drops."""

    moved: int
    dropped: dict[int, int]


class Frontier:
    """The Redis side of one spider's frontier, shared by every worker of the fleet."""

    def __init__(
        self, server: RedisClient, keys: FrontierKeys, dupefilter: DupefilterConfig
    ) -> None:
        self.server = server
        self.keys = keys
        self.dupefilter = dupefilter

    # --- requests ----------------------------------------------------------------------------

    def schedule(self, batch: Sequence[Pending], client: Any = None) -> list[int]:
        """Add requests not seen before (1) and report duplicates (0) and those dropped, their
        job cancelled or past its deadline (2), atomically per batch."""
        keys = self.keys
        args: list[Any] = [
            keys.queue_prefix,
            self.dupefilter.mode,
            self.dupefilter.capacity,
            self.dupefilter.error_rate,
        ]
        for pending in batch:
            args.extend(pending.script_args())
        result = self._run(
            lua.SCHEDULE,
            keys.script_keys(keys.delayed, keys.dupefilter, *keys.job_keys()),
            args,
            client,
        )
        return [int(flag) for flag in result] if client is None else []

    def pop(
        self, count: int, lease_seconds: float, worker: str, pacing: Pacing | None = None
    ) -> Popped:
        """Lease up to ``count`` requests to ``worker`` (after requeueing due and expired ones);
        with ``pacing``, only requests whose host has a token now."""
        return popped(self.queue_pop(self.server, count, lease_seconds, worker, pacing))

    def queue_pop(
        self,
        client: Any,
        count: int,
        lease_seconds: float,
        worker: str,
        pacing: Pacing | None = None,
    ) -> Any:
        """The pop of :meth:`pop`, run now (``client`` the server: its raw reply) or queued on
        the pipeline ``client`` (its reply read with :func:`popped`)."""
        now = time.time()
        keys = self.keys
        paced = NO_PACING if pacing is None else pacing.script_args(keys.buckets)
        return self._run(
            lua.POP,
            keys.script_keys(keys.delayed, keys.leases, keys.owner, *keys.job_keys()),
            [keys.queue_prefix, now, count, now + lease_seconds, worker, *paced],
            client,
        )

    def settle(
        self,
        ops: Sequence[tuple[str, str, str]],
        worker: str,
        lease_seconds: float,
        client: Any = None,
    ) -> int:
        """Apply ack/release/renew/dead ops (op, id, payload) to leases ``worker`` still holds."""
        keys = self.keys
        args: list[Any] = [keys.queue_prefix, worker, time.time() + lease_seconds]
        for op in ops:
            args.extend(op)
        result = self._run(
            lua.SETTLE,
            keys.script_keys(keys.leases, keys.owner, keys.dead, *keys.job_counts()),
            args,
            client,
        )
        return int(result) if client is None else 0

    # --- start entries -------------------------------------------------------------------------

    def pop_start(self, count: int, lease_seconds: float, worker: str) -> list[bytes]:
        """Lease up to ``count`` start entries; each comes back if not acked in time."""
        now = time.time()
        keys = [self.keys.start, self.keys.start_leases]
        members = self._run(lua.POP_START, keys, [now, count, now + lease_seconds, worker])
        return [bytes(member) for member in members or []]

    def ack_start(self, members: Iterable[bytes], client: Any = None) -> None:
        members = list(members)
        if members:
            (client or self.server).zrem(self.keys.start_leases, *members)

    def renew_start(self, members: Iterable[bytes], lease_seconds: float, client: Any) -> None:
        deadline = time.time() + lease_seconds
        mapping = dict.fromkeys(members, deadline)
        if mapping:
            client.zadd(self.keys.start_leases, mapping, xx=True)

    # --- inspection ----------------------------------------------------------------------------

    def sizes(self) -> dict[str, int]:
        """Queue, leased, delayed, dead and start sizes in one round trip (two on a cluster,
        whose pipeline would first ask a node to parse the queue's script)."""
        on_cluster = isinstance(self.server, RedisCluster)
        queued = [self.queued()] if on_cluster else []
        pipe = self.server.pipeline(transaction=False)
        queue_sizes(pipe, self.keys, with_queued=not on_cluster)
        return read_sizes(queued + pipe.execute())

    def queued(self) -> int:
        """How many requests are queued."""
        return int(queue_queued(self.server, self.keys))

    def _run(self, script: str, keys: list[str], args: list[Any], client: Any = None) -> Any:
        """Run ``script`` as EVAL on the server, or queue it on the pipeline ``client`` (see
        lua.queue_eval): never a NOSCRIPT answer and two more round trips to load it."""
        return lua.queue_eval(self.server if client is None else client, script, keys, args)

    def dead_letters(self, limit: int = 100) -> list[dict[str, Any]]:
        """The newest dead letters, each {"request": {...}, "failure": {...}}, the request with
        its whole field names (``Request.to_dict()``)."""
        raws = self.server.lrange(self.keys.dead, 0, limit - 1)
        return [_dead_letter(raw) for raw in raws]

    def make_due(self, wanted: Callable[[str, float], bool], now: float, chunk: int = 500) -> int:
        """Delayed requests that ``wanted`` accepts by their URL and due time become due at
        ``now`` (lifting a ban's cool-down, say); returns how many. One taken meanwhile is left
        alone (ZADD XX)."""
        moved, members = 0, self.server.zscan_iter(self.keys.delayed, count=chunk)
        while pairs := list(itertools.islice(members, chunk)):
            batch = [member for member, _ in pairs]
            records: Any = self.server.hmget(self.keys.data, batch)
            due = {
                member: now
                for (member, at), raw in zip(pairs, records, strict=True)
                if raw and wanted(str(codec.loads(raw).get("url", "")), float(at))
            }
            if due:
                changed: Any = self.server.zadd(self.keys.delayed, due, xx=True, ch=True)
                moved += int(changed)
        return moved

    def requeue_dead(self, limit: int) -> Requeued:
        """Move up to ``limit`` dead letters back to the queue (oldest first). A letter of a job
        cancelled or past its deadline is removed, counted by job (requeued, the pop would drop
        it: put a deadline off first to have its letters requeued); one whose request cannot be
        read back is named in an ERROR and left where it is."""
        dropped, moved, left = Counter[int](), 0, 0
        while moved < limit:
            raw: Any = self.server.lindex(self.keys.dead, -1 - left)
            if raw is None:
                break
            try:
                pending = _requeued(raw)
            except (ValueError, KeyError, TypeError, AttributeError) as exc:
                logger.error("Dead letter %.300r cannot be requeued (%r): left", raw, exc)
                left += 1
                continue
            if self.schedule([pending]) == [2]:  # scheduled before it leaves the dead list
                dropped[codec.split_job(pending.json)[0] or 0] += 1
            else:
                moved += 1
            self.server.lrem(self.keys.dead, -1, raw)
        return Requeued(moved, dict(dropped))


def popped(raw: Any) -> Popped:
    """A pop's reply (see scripts/pop.lua) read."""
    pairs = [(reply_text(raw[i]), reply_text(raw[i + 1])) for i in range(7, len(raw), 2)]
    flags = reply_text(raw[4])
    taken = frozenset(pair[0] for pair, flag in zip(pairs, flags, strict=True) if flag == "1")
    times = reply_text(raw[6]).split(",") if pairs else []
    dues = {pair[0]: float(at) for pair, at in zip(pairs, times, strict=True) if at != "0"}
    counts = int(raw[0]), int(raw[1]), int(raw[2])
    return Popped(pairs, *counts, float(raw[3]), taken, bool(int(raw[5])), dues)


# A dead letter written by a worker older than records with their job's number in front
# ('{"request":12{"u":...'), which it could not read: its request in the JSON form.
_OLD_LETTER = re.compile(r'^\{"request":(\d+)\{')


def _requeued(raw: bytes | str) -> Pending:
    """A dead letter's request to schedule again: past the duplicate filter, without its retries."""
    request = _dead_letter(raw, decoded=True)["request"]
    request["dont_filter"] = True
    (request.get("meta") or {}).pop("retry_times", None)
    record = codec.dumps(codec.shorten(request))
    return Pending(record, b"\0" * 8, request.get("priority", 0), True)


def _dead_letter(raw: bytes | str, decoded: bool = False) -> dict[str, Any]:
    """A dead letter read; ``decoded``: its request's bytes and page methods as they were
    (to schedule it again), else as stored in JSON (to show it)."""
    text = raw.decode("utf-8") if isinstance(raw, bytes) else raw
    text = _OLD_LETTER.sub(r'{"request":{"j":\1,', text, count=1)
    letter: dict[str, Any] = json.loads(text, object_hook=codec.decode_tags if decoded else None)
    if isinstance(letter.get("request"), dict):
        letter["request"] = codec.expand(letter["request"])
    return letter


def queue_queued(client: Any, keys: FrontierKeys) -> Any:
    """How many requests are queued, asked on ``client`` (its answer), or queued on a pipeline
    (see ``Frontier.queued``)."""
    args = [keys.queue_prefix]
    return lua.queue_eval(client, lua.QUEUED, keys.script_keys(keys.job_keys()[2]), args)


def queue_parked(client: Any, keys: FrontierKeys) -> Any:
    """How many of the queued requests are parked (of paused jobs, held until they resume),
    asked on ``client`` or queued on a pipeline, as :func:`queue_queued`."""
    return lua.queue_eval(client, lua.PARKED, [keys.job_keys()[2]], [])


def read_sizes(replies: Sequence[Any]) -> dict[str, int]:
    """The replies of :func:`queue_sizes` (the queued count first), by SIZE_NAMES."""
    return dict(zip(SIZE_NAMES, (int(reply) for reply in replies), strict=True))


def queue_sizes(pipe: Any, keys: FrontierKeys, with_queued: bool = True) -> None:
    """Queue the commands of ``Frontier.sizes`` on ``pipe`` (results in SIZE_NAMES order;
    without the queue's, the first, when not ``with_queued``)."""
    if with_queued:
        queue_queued(pipe, keys)
    pipe.zcard(keys.leases)
    pipe.zcard(keys.delayed)
    pipe.llen(keys.dead)
    pipe.llen(keys.start)
    pipe.zcard(keys.start_leases)


def spider_frontier(server: RedisClient, settings: BaseSettings, spider: str) -> Frontier:
    """The frontier of the spider named ``spider`` as the project's settings lay it out (its
    start list, its duplicate filter): what the commands and ``scrapy status`` read."""
    keys = FrontierKeys(spider, start_key(settings, spider))
    return Frontier(server, keys, DupefilterConfig.from_settings(settings))
