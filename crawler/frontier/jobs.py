"""Crawl jobs: a start entry names a job, and every request and item made from it carries it.

A job id is 1 to 64 letters, digits and ``._:-``, starting with a letter or digit
(``acme-2026-11``). The frontier knows a job by a number, given the first time a worker meets
the id (``{spider}:jobs``: id -> number, ``#<number>`` -> id): a request carries it in meta
``frontier_job`` and its record in Redis in front of its JSON object, ``12{"u":...}`` (as
many bytes as the number has digits), read by the scripts without decoding the record.

Per job, ``{spider}:job:<id>`` holds ``started`` and ``last`` (Unix times), the ``pages``
its workers fetched, and once cancelled ``cancelled`` (when) and ``removed``. It expires
JOB_TTL seconds after the job's last activity (a paused job's is kept until it resumes); a
job whose state expired and that has no request left in the frontier is then forgotten
(``crawler.control.jobs.sweep_ended_jobs``, every FORGET_INTERVAL seconds). Its items stored
and errors are counted by the settle script as each page's lease ends (``{spider}:jobs:done``).

Cancelling a job (``crawler.control.jobs.act_on_job``) adds its number to
``{spider}:jobs:cancelled`` and removes its queued and delayed requests and its waiting start
entries, one script call each;
from then on the pop and the schedule script drop any record of it (a lease that expires, a
request a worker schedules before it knows). Each worker reads the set every CHECK_INTERVAL
seconds (:class:`JobBook`): a request of a cancelled job is not sent, and a page of one in
flight has its items and new requests dropped.
"""

from __future__ import annotations

import itertools
import logging
import math
import re
import time
from collections import Counter, defaultdict
from typing import TYPE_CHECKING, Any, cast

from redis.exceptions import RedisError

from crawler.config import setting
from crawler.connection import crawl_redis, reply_text
from crawler.frontier import lua
from crawler.frontier.codec import JOB_FIELD
from crawler.keys import (
    cancelled_jobs_key,
    job_budgets_key,
    job_deadlines_key,
    job_failure_window_key,
    job_key,
    jobs_key,
    paused_jobs_key,
)
from crawler.meta import JOB_META

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.crawler import Crawler

    from crawler.connection import RedisClient

logger = logging.getLogger(__name__)

JOB_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,63}")
# Seconds between two reads of the cancelled jobs by a worker (and two writes of its counts).
CHECK_INTERVAL = 1.0
# Seconds a job's state is kept after its last activity (30 days; a paused job's until it
# resumes), and seconds between two sweeps for the jobs that ended (and between two times a
# worker forgets the ids and numbers it knows, to ask them again).
JOB_TTL = 30 * 86400
FORGET_INTERVAL = 3600.0
ATTRIBUTE = "_frontier_jobs"

assert JOB_FIELD == "j"  # the scripts read the JSON form '{"j":<n>,' too


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


def job_number(server: RedisClient, spider: str, job: str) -> int:
    """The job's number, given it the first time any worker or command meets the id."""
    keys = [jobs_key(spider), job_key(spider, job), paused_jobs_key(spider)]
    args = [job, f"{time.time():.3f}", JOB_TTL]
    return int(lua.queue_eval(server, lua.JOB_NUMBER, keys, args))


def job_number_of(request: Request) -> int | None:
    value = request.meta.get(JOB_META)
    return value if type(value) is int and value > 0 else None


class JobBook:
    """One worker's view of its spider's jobs: their numbers and ids (asked of Redis once per
    job), the cancelled ones (read every CHECK_INTERVAL seconds by :meth:`tick`) and the counts
    it has not written yet."""

    def __init__(
        self, server: RedisClient, spider: str, failure_ratio: float = 0.0, window: int = 0
    ) -> None:
        self.server = server
        self.spider = spider
        # The failure threshold of each job (FAILURE_PAUSE_RATIO, FAILURE_PAUSE_WINDOW; 0: off).
        self.failure_ratio, self.window = failure_ratio, window
        self._answers: defaultdict[int, list[int]] = defaultdict(lambda: [0, 0])
        self._answered = [0, 0]  # jobs' answers and failed ones the crawl's window leaves out
        self._numbers: dict[str, int] = {}
        self._names: dict[int, str | None] = {}  # None: a number Redis does not know (any more)
        self.cancelled: frozenset[int] = frozenset()
        self.paused: frozenset[int] = frozenset()
        # The paused jobs' ids, by whom and why, as read at the pause.
        self.paused_why: dict[int, tuple[str, str, str]] = {}
        self.budgeted: frozenset[int] = frozenset()  # jobs with a page budget
        self.deadlines: dict[int, float] = {}
        self._counts: defaultdict[int, Counter[str]] = defaultdict(Counter)
        self._items: dict[int, tuple[Any, str]] = {}  # id(item) -> (item, its job's id)
        self._forget_cache_at = time.monotonic() + FORGET_INTERVAL
        self.met = False  # whether this worker met a job yet (else ticks ask Redis nothing)

    @classmethod
    def of(cls, crawler: Crawler) -> JobBook:
        """The crawl's book, made the first time it is asked for."""
        book = crawler.__dict__.get(ATTRIBUTE)
        if book is None:
            assert crawler.spidercls is not None
            ratio: float = setting(crawler.settings, "FAILURE_PAUSE_RATIO")
            window: int = setting(crawler.settings, "FAILURE_PAUSE_WINDOW")
            book = cls(crawl_redis(crawler), crawler.spidercls.name, ratio, window)
            setattr(crawler, ATTRIBUTE, book)
        return cast(JobBook, book)

    def number(self, job: str) -> int:
        """The job's number (given it the first time any worker meets the id)."""
        self._meet()
        known = self._numbers.get(job)
        if known is None:
            known = job_number(self.server, self.spider, job)
            self._numbers[job], self._names[known] = known, job
        return known

    def name(self, number: int) -> str | None:
        """The id of the job numbered ``number``; None if Redis does not know it."""
        if number in self._names:
            return self._names[number]
        raw = self.server.hget(jobs_key(self.spider), f"#{number}")
        known = None if raw is None else reply_text(raw)
        self._names[number] = known
        if known is not None:
            self._numbers[known] = number
        return known

    def is_cancelled(self, request: Request) -> bool:
        """Whether the request's job is cancelled or past its deadline."""
        number = self._met(request)
        if number is None:
            return False
        return number in self.cancelled or time.time() >= self.deadlines.get(number, math.inf)

    def has_budget(self, request: Request) -> bool:
        number = self._met(request)
        return number is not None and number in self.budgeted

    def is_paused(self, request: Request) -> bool:
        number = job_number_of(request)
        return number is not None and number in self.paused

    def _met(self, request: Request) -> int | None:
        """The request's job number, met by this worker (see :meth:`_meet`)."""
        number = job_number_of(request)
        if number is not None:
            self._meet()
        return number

    def _meet(self) -> None:
        """The first job this worker meets: the jobs' holds and budgets are read at once, not
        at the next tick (a page's next page may be kept for a turn within that second)."""
        if not self.met:
            self.met = True
            self.tick()

    def count(self, request: Request, what: str, value: int = 1) -> None:
        if (number := self._met(request)) is not None:
            self._counts[number][what] += value

    def answered(self, request: Request, failed: bool, counted: bool = True) -> None:
        """An answer to a job's request, for the job's failure threshold: a response (failed
        when 5xx) or a download error (failed), ``counted``; a ban found in a response already
        counted, not ``counted`` (only failed), as the crawl's window counts them."""
        if not self.failure_ratio or (number := self._met(request)) is None:
            return
        self._answers[number][0] += counted
        self._answers[number][1] += failed
        self._answered[0] += counted
        self._answered[1] += failed

    def take_answered(self) -> tuple[int, int]:
        """The answers to jobs' requests, and the failed ones, since last asked: the crawl's
        window leaves them to their jobs' windows."""
        answers, failed = self._answered
        self._answered = [0, 0]
        return answers, failed

    def tag_item(self, item: Any, number: int) -> None:
        """Remember the job of ``item`` until it leaves the pipelines (:meth:`untag_item`)."""
        job = self.name(number)
        if job is not None:
            self._items[id(item)] = (item, job)

    def job_of_item(self, item: Any) -> str | None:
        found = self._items.get(id(item))  # holds the item: its id is not another's meanwhile
        return None if found is None else found[1]

    def untag_item(self, item: Any) -> None:
        self._items.pop(id(item), None)

    def tick(self) -> None:
        """Write the counts and answers taken since the last tick and read the jobs' holds, in
        one round trip; Redis away, the counts wait for the next tick."""
        if not self.met:
            return
        if time.monotonic() >= self._forget_cache_at:
            # Ids and numbers asked again: a job forgotten meanwhile is not named after it.
            self._forget_cache_at = time.monotonic() + FORGET_INTERVAL
            self._numbers.clear()
            self._names.clear()
        try:
            pipe = self.server.pipeline(transaction=False)
            now = f"{time.time():.3f}"
            written = self._queue_ticks(pipe, now)
            pipe.smembers(cancelled_jobs_key(self.spider))
            pipe.hgetall(job_deadlines_key(self.spider))
            pipe.smembers(paused_jobs_key(self.spider))
            pipe.hkeys(job_budgets_key(self.spider))
            *writes, cancelled, deadlines, paused, budgeted = pipe.execute()
            self._counts.clear()
            self._answers.clear()
            self._say_paused(written, writes)
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
        self.paused_why.update(self._why_paused(paused - self.paused))
        for number in self.paused - paused:
            logger.warning("Job %s resumed", self.name(number))
            self.paused_why.pop(number, None)
        self.cancelled, self.paused, self.deadlines = cancelled, paused, deadlines

    def _why_paused(self, numbers: frozenset[int]) -> dict[int, tuple[str, str, str]]:
        """The id of each of the jobs ``numbers``, by whom and why it was paused (empty: by a
        command), read in one round trip."""
        named = [(number, job) for number in numbers if (job := self.name(number)) is not None]
        if not named:
            return {}
        pipe = self.server.pipeline(transaction=False)
        for _, job in named:
            pipe.hmget(job_key(self.spider, job), ["paused_by", "paused_reason"])
        return {
            number: (job, reply_text(by) if by else "", reply_text(reason) if reason else "")
            for (number, job), (by, reason) in zip(named, pipe.execute(), strict=True)
        }

    def paused_jobs(self) -> list[tuple[str, str, str]]:
        """The jobs paused as this worker last read them: id, by whom and why."""
        # Read from the metrics thread: an entry may go meanwhile (a resume seen by a tick).
        return [why for number in self.paused if (why := self.paused_why.get(number))]

    def _queue_ticks(self, pipe: Any, now: str) -> list[str]:
        """Queue each job's counts and answers (to its window: a job past its threshold is
        paused) taken since the last tick, a script call a job; returns the jobs written, in
        order."""
        written = []
        for number in self._counts.keys() | self._answers.keys():
            if (job := self.name(number)) is None:
                continue
            keys = [job_key(self.spider, job), paused_jobs_key(self.spider)]
            keys += [cancelled_jobs_key(self.spider), job_failure_window_key(self.spider, number)]
            answers, failed = self._answers.get(number, (0, 0))
            failed = min(failed, answers)
            window = self.window if number in self._answers else 0
            args: list[Any] = [number, now, JOB_TTL, window, failed, answers - failed]
            args += [self.failure_ratio, *itertools.chain(*self._counts.get(number, {}).items())]
            lua.queue_eval(pipe, lua.JOB_TICK, keys, args)
            written.append(job)
        return written

    def _say_paused(self, written: list[str], replies: list[Any]) -> None:
        for job, (seen, bad, paused) in zip(written, replies, strict=True):
            if int(paused):
                logger.error(
                    "%d of the last %d answers of job %s failed (FAILURE_PAUSE_RATIO %g): the "
                    "job is paused; `scrapy frontier %s job %s resume` once the cause is fixed",
                    int(bad),
                    int(seen),
                    job,
                    self.failure_ratio,
                    self.spider,
                    job,
                )
