"""A spider's Redis keys that hold another type than its workers keep there (a mistaken
``redis-cli SET`` on the start list, say), found when a report's read of them fails with
WRONGTYPE: ``scrapy status``, the fleet page, ``/metrics``, ``scrapy frontier`` and ``scrapy
fleet plan`` say which key holds what, worded as ``scrapy crawl``'s refusal
(crawler/frontier/server_check.py), and go on with the other spiders.

The pause key is not among them: one of another type pauses the crawl (crawler/frontier/pause.py).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from redis.exceptions import ResponseError

from crawler.connection import reply_text
from crawler.frontier.server_check import start_key_problem, wrong_type_problem
from crawler.keys import (
    FleetKeys,
    FrontierKeys,
    LedgerKeys,
    bans_key,
    breaker_failures_key,
    breaker_key,
    cancelled_jobs_key,
    failure_window_key,
    job_budgets_key,
    job_deadlines_key,
    job_key,
    job_sent_key,
    jobs_done_key,
    jobs_key,
    paused_jobs_key,
    reasons_key,
    revisit_keys,
    start_key,
    starts_key,
)
from crawler.storage.waiting import spilled_key

if TYPE_CHECKING:
    from scrapy.settings import BaseSettings

    from crawler.connection import RedisClient

# The minutes of the fleet's per-minute buckets looked at (the fleet page's hour).
MINUTES_CHECKED = 60
# Expected types: a Redis TYPE and what the key holds, as a problem says it.
LIST, ZSET, HASH, SET, STRING = "list", "zset", "hash", "set", "string"
# Redis keeps no empty key, so one that is absent ("none") is never of the wrong type.
ABSENT = "none"


class WrongKeyType(Exception):
    """Keys of ``spider`` that a report reads hold another type: ``found`` is each key and the
    type it holds ("" when the key could not be told: the message is Redis's own)."""

    def __init__(self, spider: str, problems: list[str], found: list[tuple[str, str]]) -> None:
        super().__init__(f"{spider}: " + "; ".join(problems))
        self.spider = spider
        self.problems = problems
        self.found = found


def is_wrong_type(exc: BaseException) -> bool:
    """Whether Redis refused a command for the type of the key it names (WRONGTYPE)."""
    return isinstance(exc, ResponseError) and "WRONGTYPE" in str(exc)


@contextmanager
def key_types_checked(server: RedisClient, settings: BaseSettings, spider: str) -> Iterator[None]:
    """Turn a WRONGTYPE refusal in the block into :class:`WrongKeyType`, naming the keys."""
    try:
        yield
    except ResponseError as exc:
        if not is_wrong_type(exc):
            raise
        raise wrong_key_types(server, settings, spider, exc) from exc


def wrong_key_types(
    server: RedisClient, settings: BaseSettings, spider: str, refusal: Exception
) -> WrongKeyType:
    """Which of the keys of ``spider`` hold another type than expected; Redis's ``refusal``
    itself, in one line, if none of the keys known here does."""
    expected = expected_types(server, settings, spider)
    kinds = _types(server, list(expected))
    found = [
        (key, kind)
        for key, kind in zip(expected, kinds, strict=True)
        if kind not in (ABSENT, expected[key][0])
    ]
    start = start_key(settings, spider)
    problems = [
        start_key_problem(key, kind)
        if key == start
        else wrong_type_problem(key, kind, f"a {expected[key][0]} of {expected[key][1]}")
        for key, kind in found
    ]
    if not problems:
        said = str(refusal).splitlines()[0]
        return WrongKeyType(spider, [f"a Redis key holds the wrong type: {said}"], [("", "")])
    return WrongKeyType(spider, problems, found)


def expected_types(
    server: RedisClient, settings: BaseSettings, spider: str
) -> dict[str, tuple[str, str]]:
    """Each key of ``spider`` the reports read -> its type and what it holds: the frontier's,
    the fleet's stats and heartbeats, bans, jobs, revisits and launches; the queue lists of the
    priorities queued, the heartbeats of the workers listed and the jobs named, when their
    index reads."""
    frontier = FrontierKeys(spider, start_key(settings, spider))
    fleet = FleetKeys.from_settings(settings, spider)
    expected = {**_frontier_types(frontier, str(settings.get("DUPEFILTER_MODE")))}
    expected.update(_fleet_types(fleet, server))
    expected.update(_job_types(spider, server))
    expected.update(_other_types(spider))
    for priority in _members(server, frontier.queues, expected):
        expected[frontier.queue_prefix + priority] = (LIST, "queued requests")
    return expected


def _frontier_types(keys: FrontierKeys, mode: str) -> dict[str, tuple[str, str]]:
    expected = {
        keys.start: (LIST, "start entries"),
        keys.queues: (ZSET, "the priorities queued"),
        keys.leases: (ZSET, "leased requests"),
        keys.owner: (HASH, "the leases' workers"),
        keys.data: (HASH, "requests"),
        keys.seq: (STRING, "a sequence number"),
        keys.delayed: (ZSET, "delayed requests"),
        keys.dead: (LIST, "dead letters"),
        keys.start_leases: (ZSET, "leased start entries"),
        keys.demand: (STRING, "the last look at the queue"),
    }
    if mode == "exact":
        expected[keys.dupefilter] = (SET, "requests seen")
        expected[keys.dupefilter_depths] = (HASH, "the depths of requests seen")
    elif mode == "bloom":
        expected[keys.dupefilter_meta] = (HASH, "the Bloom filter's counts")
    return expected


def _fleet_types(keys: FleetKeys, server: RedisClient) -> dict[str, tuple[str, str]]:
    now = int(time.time() // 60)
    expected = {
        keys.stats: (HASH, "the fleet's stats"),
        keys.domains: (SET, "the domains counted"),
        keys.workers: (ZSET, "live workers"),
        **{
            keys.minute(minute): (HASH, "one minute's counts")
            for minute in range(now - MINUTES_CHECKED, now + 1)
        },
    }
    for worker in _members(server, keys.workers, expected):
        expected[keys.worker(worker)] = (HASH, "a worker's heartbeat")
    return expected


def _job_types(spider: str, server: RedisClient) -> dict[str, tuple[str, str]]:
    done = jobs_done_key(spider)
    expected = {
        jobs_key(spider): (HASH, "the crawl jobs' numbers"),
        done: (HASH, "the jobs' ended requests"),
        f"{done}:dead": (HASH, "the jobs' dead letters"),
        cancelled_jobs_key(spider): (SET, "cancelled jobs"),
        job_deadlines_key(spider): (HASH, "the jobs' deadlines"),
        paused_jobs_key(spider): (SET, "paused jobs"),
        job_budgets_key(spider): (HASH, "the jobs' page budgets"),
        job_sent_key(spider): (HASH, "the jobs' requests sent"),
    }
    if _types(server, [jobs_key(spider)]) == [HASH]:
        names: Any = server.hkeys(jobs_key(spider))
        for name in map(reply_text, names):
            if not name.startswith(("#", ":")):
                expected[job_key(spider, name)] = (HASH, "a crawl job's state")
    return expected


def _other_types(spider: str) -> dict[str, tuple[str, str]]:
    revisits, data, absent = revisit_keys(spider)
    ledger = LedgerKeys(spider)
    return {
        failure_window_key(spider): (LIST, "the fleet's last answers"),
        revisits: (ZSET, "waiting revisits"),
        data: (HASH, "the revisits' requests"),
        absent: (HASH, "pages found absent"),
        bans_key(spider): (HASH, "ban cool-downs"),
        reasons_key(spider): (HASH, "why each cool-down started"),
        breaker_key(spider): (HASH, "the circuit breaker's hosts"),
        breaker_failures_key(spider): (HASH, "hosts' failures in a row"),
        starts_key(spider): (HASH, "the autoscaler's launches"),
        spilled_key(spider): (HASH, "spill files holding items"),
        ledger.top: (ZSET, "the hosts with most pages"),
        ledger.totals: (HASH, "the host ledger's totals"),
    }


def _members(server: RedisClient, key: str, expected: dict[str, tuple[str, str]]) -> list[str]:
    """The members of the sorted set ``key`` (none when it holds another type)."""
    if _types(server, [key]) != [expected[key][0]]:
        return []
    members: Any = server.zrange(key, 0, -1)
    return [reply_text(member, "replace") for member in members]


def _types(server: RedisClient, keys: list[str]) -> list[str]:
    pipe = server.pipeline(transaction=False)
    for key in keys:
        pipe.type(key)
    return [reply_text(kind) for kind in pipe.execute()]
