"""Crawl jobs: a start entry names a job, and every request and item made from it carries it.

A job id is 1 to 64 letters, digits and ``._:-``, starting with a letter or digit
(``acme-2026-11``). The frontier knows a job by a number, given the first time a worker meets
the id (``{spider}:jobs``: id -> number, ``#<number>`` -> id): a request carries it in meta
``frontier_job`` and its record in Redis as its first field, ``{"j":<number>,``, a few bytes
that a script reads without decoding the record.

Per job, ``{spider}:job:<id>`` holds ``started`` and ``last`` (Unix times), the ``pages``,
``items`` and ``errors`` its workers counted, and once cancelled ``cancelled`` (when) and
``removed``. It expires JOB_TTL seconds after the job's last activity.

Cancelling a job (:func:`cancel_job`) adds its number to ``{spider}:jobs:cancelled`` and removes
its queued and delayed requests and its waiting start entries, in one script call each; from
then on the pop and the schedule script drop any record of it (a lease that expires, a request
a worker schedules before it knows). Each worker reads the set every CHECK_INTERVAL seconds
(:class:`JobBook`): a request of a cancelled job is not sent, and a page of one in flight has
its items and new requests dropped.
"""

from __future__ import annotations

import logging
import math
import re
import time
from collections import Counter, defaultdict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from redis.exceptions import RedisError

from crawler.connection import crawl_redis, reply_text
from crawler.frontier import lua
from crawler.frontier.codec import JOB_FIELD
from crawler.keys import (
    cancelled_jobs_key,
    job_budgets_key,
    job_deadlines_key,
    job_key,
    jobs_key,
    paused_jobs_key,
    tagged,
)
from crawler.meta import JOB_META

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.crawler import Crawler

    from crawler.connection import RedisClient
    from crawler.keys import FrontierKeys

logger = logging.getLogger(__name__)

JOB_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,63}")
# Seconds between two reads of the cancelled jobs by a worker (and two writes of its counts).
CHECK_INTERVAL = 1.0
# Seconds a job's state is kept after its last activity (30 days).
JOB_TTL = 30 * 86400
# What a worker counts per job.
COUNTS = ("pages", "items", "errors")
# The times a job's state holds (Unix times).
TIMES = ("started", "last", "paused", "cancelled", "expires")
# Jobs ``scrapy status`` and the fleet page show, the most recently active first.
JOBS_SHOWN = 20
ATTRIBUTE = "_frontier_jobs"

assert JOB_FIELD == "j"  # the scripts read '{"j":<n>,'


class InvalidJob(ValueError):
    """A job id that is not 1-64 letters, digits and ``._:-``."""


def check_job_id(value: Any) -> str:
    """``value`` if it is a job id, else InvalidJob saying what one is."""
    if isinstance(value, str) and JOB_ID.fullmatch(value):
        return value
    raise InvalidJob(
        f"a job id is 1-64 letters, digits and ._:- starting with a letter or digit, "
        f"not {repr(value)[:80]}"
    )


def job_number_of(request: Request) -> int | None:
    value = request.meta.get(JOB_META)
    return value if type(value) is int and value > 0 else None


class JobBook:
    """One worker's view of its spider's jobs: their numbers and ids (asked of Redis once per
    job), the cancelled ones (read every CHECK_INTERVAL seconds by :meth:`tick`) and the counts
    it has not written yet."""

    def __init__(self, server: RedisClient, spider: str) -> None:
        self.server = server
        self.spider = spider
        self._numbers: dict[str, int] = {}
        self._names: dict[int, str] = {}
        self.cancelled: frozenset[int] = frozenset()
        self.paused: frozenset[int] = frozenset()
        self.budgeted: frozenset[int] = frozenset()  # jobs with a page budget
        self.deadlines: dict[int, float] = {}
        self._counts: defaultdict[int, Counter[str]] = defaultdict(Counter)
        self._items: dict[int, tuple[Any, str]] = {}  # id(item) -> (item, its job's id)
        self._number_script = server.register_script(lua.JOB_NUMBER)
        self.met = False  # whether this worker met a job yet (else ticks ask Redis nothing)

    @classmethod
    def of(cls, crawler: Crawler) -> JobBook:
        """The crawl's book, made the first time it is asked for."""
        book = crawler.__dict__.get(ATTRIBUTE)
        if book is None:
            assert crawler.spidercls is not None
            book = cls(crawl_redis(crawler), crawler.spidercls.name)
            setattr(crawler, ATTRIBUTE, book)
        return cast(JobBook, book)

    def number(self, job: str) -> int:
        """The job's number (given it the first time any worker meets the id)."""
        self._meet()
        known = self._numbers.get(job)
        if known is None:
            keys = [jobs_key(self.spider), job_key(self.spider, job)]
            known = int(self._number_script(keys, [job, f"{time.time():.3f}"]))
            self._numbers[job], self._names[known] = known, job
        return known

    def name(self, number: int) -> str | None:
        """The id of the job numbered ``number``; None if Redis does not know it."""
        known = self._names.get(number)
        if known is None:
            raw = self.server.hget(jobs_key(self.spider), f"#{number}")
            if raw is None:
                return None
            known = reply_text(raw)
            self._numbers[known], self._names[number] = number, known
        return known

    def is_cancelled(self, request: Request) -> bool:
        """Whether the request's job is cancelled or past its deadline."""
        number = job_number_of(request)
        if number is None:
            return False
        self._meet()
        return number in self.cancelled or time.time() >= self.deadlines.get(number, math.inf)

    def has_budget(self, request: Request) -> bool:
        number = job_number_of(request)
        if number is None:
            return False
        self._meet()
        return number in self.budgeted

    def _meet(self) -> None:
        """The first job this worker meets: the jobs' holds and budgets are read at once, not
        at the next tick (a page's next page may be kept for a turn within that second)."""
        if not self.met:
            self.met = True
            self.tick()

    def is_paused(self, request: Request) -> bool:
        number = job_number_of(request)
        return number is not None and number in self.paused

    def count(self, request: Request, what: str, value: int = 1) -> None:
        number = job_number_of(request)
        if number is not None:
            self._meet()
            self._counts[number][what] += value

    def tag_item(self, item: Any, number: int) -> None:
        """Remember the job of ``item`` until it leaves the pipelines (:meth:`untag_item`)."""
        job = self.name(number)
        if job is not None:
            self._items[id(item)] = (item, job)

    def job_of_item(self, item: Any) -> str | None:
        found = self._items.get(id(item))
        return found[1] if found is not None and found[0] is item else None

    def untag_item(self, item: Any) -> str | None:
        job = self.job_of_item(item)
        if job is not None:
            del self._items[id(item)]
        return job

    def tick(self) -> None:
        """Write the counts taken since the last tick and read the cancelled jobs; Redis away,
        the counts wait for the next tick."""
        if not self.met:
            return
        try:
            self._write_counts()
            pipe = self.server.pipeline(transaction=False)
            pipe.smembers(cancelled_jobs_key(self.spider))
            pipe.hgetall(job_deadlines_key(self.spider))
            pipe.smembers(paused_jobs_key(self.spider))
            pipe.hkeys(job_budgets_key(self.spider))
            cancelled, deadlines, paused, budgeted = pipe.execute()
            self.budgeted = frozenset(int(number) for number in budgeted)
            self._read_holds(
                frozenset(int(member) for member in cancelled),
                frozenset(int(member) for member in paused),
                {int(number): float(at) for number, at in deadlines.items()},
            )
        except RedisError as exc:
            logger.debug("Jobs not read: %s", exc)
        except ValueError as exc:  # a key written by another tool, not a job's
            logger.error("The crawl jobs' keys hold what no job does: %s", exc)

    def _read_holds(
        self, cancelled: frozenset[int], paused: frozenset[int], deadlines: dict[int, float]
    ) -> None:
        for number in cancelled - self.cancelled:
            logger.warning("Job %s cancelled: its requests are dropped", self.name(number))
        for number in paused - self.paused:
            logger.warning("Job %s paused: its requests wait until it resumes", self.name(number))
        for number in self.paused - paused:
            logger.warning("Job %s resumed", self.name(number))
        self.cancelled, self.paused, self.deadlines = cancelled, paused, deadlines

    def _write_counts(self) -> None:
        if not self._counts:
            return
        now = f"{time.time():.3f}"
        pipe = self.server.pipeline(transaction=False)
        for number, counts in self._counts.items():
            job = self.name(number)
            if job is None:
                continue
            key = job_key(self.spider, job)
            for what, value in counts.items():
                pipe.hincrby(key, what, value)
            pipe.hset(key, "last", now)
            pipe.expire(key, JOB_TTL)
        pipe.execute()
        self._counts.clear()


@dataclass(frozen=True)
class JobStatus:
    """A job as the frontier and its workers know it."""

    job: str
    number: int | None
    queued: int
    delayed: int
    leased: int
    parked: int  # held while the job is paused
    starts: int
    state: dict[str, str]
    sent: int = 0  # requests the pop handed out since the job was given a page budget
    done: int = 0  # requests ended as done (acked), counted in the frontier
    dead: int = 0  # requests ended as dead letters, counted in the frontier

    def to_json(self) -> dict[str, Any]:
        numbers = {name: int(self.state.get(name, 0)) for name in (*COUNTS, "removed")}
        times = {name: _time(self.state.get(name)) for name in TIMES}
        counted = {"queued": self.queued, "delayed": self.delayed, "leased": self.leased}
        counted |= {"paused_requests": self.parked, "start_entries": self.starts}
        counted |= {"done": self.done, "dead_letters": self.dead}
        budget = self.state.get("max_pages")
        limits = {"max_pages": int(budget) if budget else None, "sent": self.sent}
        return {"job": self.job, **counted, **numbers, **limits, **times}


def job_status(server: RedisClient, keys: FrontierKeys, job: str) -> JobStatus:
    """The job's queued, delayed, leased and paused requests and waiting start entries,
    counted in the frontier, and its state."""
    return _act(server, keys, job, "count")


def cancel_job(server: RedisClient, keys: FrontierKeys, job: str) -> JobStatus:
    """Cancel the job: its queued, delayed and paused requests and its waiting start entries
    removed (their counts in the status returned), its requests dropped from then on."""
    return _act(server, keys, job, "cancel")


def pause_job(server: RedisClient, keys: FrontierKeys, job: str) -> JobStatus:
    """Pause the job: the pop parks its requests as it meets them, workers send none."""
    return _act(server, keys, job, "pause")


def resume_job(server: RedisClient, keys: FrontierKeys, job: str) -> JobStatus:
    """Resume the job: its parked requests go back to the end of their queue lists."""
    return _act(server, keys, job, "resume")


def expire_job(server: RedisClient, keys: FrontierKeys, job: str, deadline: float) -> JobStatus:
    """Give the job a deadline (Unix time): after it no request of the job is fetched."""
    return _act(server, keys, job, "expire", deadline)


def limit_job(server: RedisClient, keys: FrontierKeys, job: str, max_pages: int) -> JobStatus:
    """Give the job a page budget for the fleet: the pop hands out at most ``max_pages`` of
    its requests (counted from the first budget it was given), and drops the rest."""
    return _act(server, keys, job, "limit", max_pages)


def _act(
    server: RedisClient, keys: FrontierKeys, job: str, mode: str, deadline: float = 0.0
) -> JobStatus:
    number = _known_number(server, keys.spider, job)
    if number is None and mode != "count":  # numbered now, so that its entries are held too
        number = JobBook(server, keys.spider).number(job)
    counts = [0] * 5 if number is None else _run_job(server, keys, number, mode, deadline)
    starts = _run_starts(server, keys.start, job, "cancel" if mode == "cancel" else "count")
    key = job_key(keys.spider, job)
    pipe = server.pipeline(transaction=True)
    if mode == "cancel":
        pipe.hsetnx(key, "cancelled", f"{time.time():.3f}")
        pipe.hincrby(key, "removed", counts[0] + counts[1] + counts[3] + starts)
    elif mode == "pause":
        pipe.hsetnx(key, "paused", f"{time.time():.3f}")
    elif mode == "resume":
        pipe.hdel(key, "paused")
    elif mode == "expire":
        pipe.hset(key, "expires", f"{deadline:.3f}")
    elif mode == "limit":
        pipe.hset(key, "max_pages", int(deadline))
    if mode != "count":
        pipe.expire(key, JOB_TTL)
    pipe.hgetall(key)
    done, dead = keys.job_counts()
    pipe.hget(done, str(number))
    pipe.hget(dead, str(number))
    *_, raw, done_count, dead_count = pipe.execute()
    queued, delayed, leased, parked, sent = counts
    ended = int(done_count or 0), int(dead_count or 0)
    state = _strings(raw)
    return JobStatus(job, number, queued, delayed, leased, parked, starts, state, sent, *ended)


def _known_number(server: RedisClient, spider: str, job: str) -> int | None:
    raw = server.hget(jobs_key(spider), job)
    return None if raw is None else int(raw)


def _run_job(
    server: RedisClient, keys: FrontierKeys, number: int, mode: str, deadline: float
) -> list[int]:
    spare = tagged(keys.spider, "jobs:sweep")
    script_keys = keys.script_keys(keys.delayed, keys.leases, *keys.job_keys(), spare)
    value = str(int(deadline)) if mode == "limit" else f"{deadline:.3f}"
    args: list[str | int] = [keys.queue_prefix, number, mode, value]
    reply = server.eval(lua.JOB, len(script_keys), *script_keys, *args)
    return [int(value) for value in reply]


def _run_starts(server: RedisClient, start: str, job: str, mode: str) -> int:
    return int(server.eval(lua.JOB_STARTS, 2, start, f"{{{start}}}:sweep", job, mode))


def _strings(raw: dict[Any, Any]) -> dict[str, str]:
    return {reply_text(name): reply_text(value) for name, value in raw.items()}


def _time(value: str | None) -> float | None:
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


def recent_jobs(server: RedisClient, spider: str, limit: int = JOBS_SHOWN) -> list[dict[str, Any]]:
    """The spider's jobs whose state is kept, the most recently active first (at most
    ``limit``): id, state (running, paused, expired, cancelled) and what workers counted."""
    names = [
        text
        for field in server.hkeys(jobs_key(spider))
        if not (text := reply_text(field)).startswith(("#", ":"))
    ]
    pipe = server.pipeline(transaction=False)
    for name in names:
        pipe.hgetall(job_key(spider, name))
    now, jobs = time.time(), []
    for name, raw in zip(names, pipe.execute(), strict=True):
        if not raw:
            continue  # its state expired
        shown = JobStatus(name, None, 0, 0, 0, 0, 0, _strings(raw)).to_json()
        counts = {key: shown[key] for key in COUNTS}
        times = {key: shown[key] for key in TIMES}
        jobs.append({"job": name, "state": _state(times, now), **counts, **times})
    jobs.sort(key=lambda job: -(job["last"] or job["started"] or 0))
    return jobs[:limit]


def job_line(job: dict[str, Any]) -> str:
    """``acme-1 paused: 120 pages, 118 items, 0 errors``."""
    return (
        f"{job['job']} {job['state']}: {job['pages']:,} pages, {job['items']:,} items, "
        f"{job['errors']:,} errors"
    )


def _state(times: dict[str, Any], now: float) -> str:
    if times["cancelled"] is not None:
        return "cancelled"
    if times["expires"] is not None and now >= times["expires"]:
        return "expired"
    return "paused" if times["paused"] is not None else "running"
