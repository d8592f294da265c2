"""What an operator does to a crawl job (``scrapy frontier <spider> job <id> ...``): its status
counted in the frontier, pause, resume, a deadline, a page budget and cancel, each in one script
call (``scripts/job.lua``, ``job_starts.lua``); and the jobs ``scrapy status`` and the fleet page
list. A job's ids and numbers, and what a worker does of them, are in
:mod:`crawler.frontier.jobs`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from crawler.connection import reply_hash, reply_text
from crawler.frontier.jobs import FORGET_INTERVAL, JOB_TTL, job_number
from crawler.frontier.lua import PRELUDE, read_script
from crawler.keys import (
    job_key,
    jobs_done_key,
    jobs_key,
    paused_jobs_key,
    tagged,
)

if TYPE_CHECKING:
    from crawler.connection import RedisClient
    from crawler.keys import FrontierKeys

logger = logging.getLogger(__name__)

# A job's requests counted, or removed when it is cancelled (its waiting start entries too).
_LISTS = read_script("lists", "crawler.control")
JOB = PRELUDE + _LISTS + read_script("job", "crawler.control")
JOB_STARTS = _LISTS + read_script("job_starts", "crawler.control")
# Which of some jobs have a request in a slice of the queue, the delayed set or the leases.
JOB_WORK = PRELUDE + read_script("job_work", "crawler.control")
# What is left of the jobs that ended.
FORGET_JOBS = read_script("forget_jobs", "crawler.control")

# The times a job's state holds (Unix times).
TIMES = ("started", "last", "paused", "cancelled", "expires")
# Jobs ``scrapy status`` and the fleet page show, the most recently active first.
JOBS_SHOWN = 20
# Records a script call reads when a sweep looks for the jobs that ended (about 10 ms), and
# jobs one script call forgets.
WORK_SLICE = 20_000
FORGET_CHUNK = 500


# What an operator does to a job (``act_on_job``): "status" only reads it.
JobAction = Literal["status", "cancel", "pause", "resume", "expire", "limit"]


class JobCancelled(ValueError):
    """A cancelled job is not paused (a paused job is kept until it resumes, which a cancelled
    one never does), resumed, given a deadline or a budget: its requests are dropped."""


# What an action refused on a cancelled job did not do, as its message says.
NOT_DONE = {
    "pause": "not paused",
    "resume": "not resumed",
    "expire": "no deadline set",
    "limit": "no page budget set",
}


@dataclass(frozen=True)
class JobStatus:
    """A job as the frontier and its workers know it."""

    job: str
    number: int | None
    queued: int
    delayed: int
    leased: int
    parked: int  # held while the job is paused
    sent: int  # requests the pop handed out since the job was given a page budget
    over_budget: int  # requests the pop dropped once the budget was spent
    starts: int
    state: dict[str, str]
    done: int  # requests ended as done (acked), counted in the frontier
    items: int  # items its pages stored, counted in the frontier with their acks
    errors: int  # pages whose callback or pipelines failed (dead letters), likewise
    dead: int  # requests ended as dead letters, counted in the frontier
    known: bool  # the frontier had numbered the job before (an entry or a command named it)

    def to_json(self) -> dict[str, Any]:
        numbers = {name: int(self.state.get(name, 0)) for name in ("pages", "removed")}
        numbers |= {"items": self.items, "errors": self.errors}
        times = _times(self.state)
        counted = {"queued": self.queued, "delayed": self.delayed, "leased": self.leased}
        counted |= {"paused_requests": self.parked, "start_entries": self.starts}
        counted |= {"done": self.done, "dead_letters": self.dead}
        budget = self.state.get("max_pages")
        limits = {"max_pages": int(budget) if budget else None, "sent": self.sent}
        limits |= {"over_budget": self.over_budget}
        why = {name: self.state.get(name) for name in ("paused_by", "paused_reason")}
        known = {"job": self.job, "known": self.known}
        return {**known, **counted, **numbers, **limits, **times, **why}


def act_on_job(
    server: RedisClient,
    keys: FrontierKeys,
    job: str,
    action: JobAction = "status",
    value: float = 0.0,
) -> JobStatus:
    """Do ``action`` to the job; its status: its queued, delayed, leased and paused requests
    and waiting start entries, counted in the frontier before the action, and its state after.

    - ``status``: nothing more.
    - ``cancel``: its queued, delayed and paused requests and its waiting start entries are
      removed (their counts in the status returned), its requests dropped from then on.
    - ``pause``: the pop parks its requests as it meets them, workers send none.
    - ``resume``: its parked requests go back to the end of their queue lists.
    - ``expire``: ``value`` is its deadline (Unix time): after it no request of it is fetched.
    - ``limit``: ``value`` is its page budget for the fleet: the pop hands out at most that
      many of its requests (counted from the first budget it was given), and drops the rest.

    A cancelled job is left as it is by ``pause``, ``resume``, ``expire`` and ``limit``:
    JobCancelled.
    """
    number = _known_number(server, keys.spider, job)
    known = number is not None
    if number is None and action != "status":  # numbered now, so that its entries are held too
        number = job_number(server, keys.spider, job)
    *counts, paused, cancelled = (
        [0] * 8 if number is None else _run_job(server, keys, number, action, value)
    )
    if cancelled and action in NOT_DONE:
        why = f"job {job} is cancelled: {NOT_DONE[action]} (start a new job under a new id)"
        raise JobCancelled(why)
    starts = _run_starts(server, keys.start, job, action)
    key = job_key(keys.spider, job)
    pipe = server.pipeline(transaction=True)
    if action == "cancel":
        pipe.hsetnx(key, "cancelled", f"{time.time():.3f}")
        pipe.hincrby(key, "removed", counts[0] + counts[1] + counts[3] + starts)
    elif action == "pause":
        pipe.hsetnx(key, "paused", f"{time.time():.3f}")
    elif action == "resume":
        pipe.hdel(key, "paused", "paused_by", "paused_reason")
    elif action == "expire":
        pipe.hset(key, "expires", f"{value:.3f}")
    elif action == "limit":
        pipe.hset(key, "max_pages", int(value))
    if action != "status" and paused:  # kept until it resumes, whatever else is set
        pipe.persist(key)
    elif action != "status":
        pipe.expire(key, JOB_TTL)
    pipe.hgetall(key)
    _queue_ended(pipe, keys.spider, number)
    *_, raw, ended, dead = pipe.execute()
    queued, delayed, leased, parked, sent, over_budget = counts
    state = _strings(reply_hash(raw))
    counted = (queued, delayed, leased, parked, sent, over_budget, starts)
    return JobStatus(job, number, *counted, state, *_ended(ended, dead), known=known)


def _queue_ended(pipe: Any, spider: str, number: int | None) -> None:
    """Queue the reads of the job's counts kept by the settle script (see _ended)."""
    done = jobs_done_key(spider)
    pipe.hmget(done, [str(number), f"{number}:items", f"{number}:errors"])
    pipe.hget(f"{done}:dead", str(number))


def _ended(ended: list[Any], dead: Any) -> tuple[int, int, int, int]:
    """Requests done, items stored, errors and dead letters of a job (_queue_ended's replies)."""
    done, items, errors = (int(value or 0) for value in ended)
    return done, items, errors, int(dead or 0)


def _known_number(server: RedisClient, spider: str, job: str) -> int | None:
    raw = server.hget(jobs_key(spider), job)
    return None if raw is None else int(raw)


def _run_job(
    server: RedisClient, keys: FrontierKeys, number: int, action: JobAction, value: float
) -> list[int]:
    spare = tagged(keys.spider, "jobs:sweep")
    script_keys = keys.script_keys(keys.delayed, keys.leases, *keys.job_keys(), spare)
    shown = str(int(value)) if action == "limit" else f"{value:.3f}"
    args: list[str | int] = [keys.queue_prefix, number, action, shown]
    reply = server.eval(JOB, len(script_keys), *script_keys, *args)
    return [int(value) for value in reply]


def _run_starts(server: RedisClient, start: str, job: str, action: JobAction) -> int:
    return int(server.eval(JOB_STARTS, 2, start, f"{{{start}}}:sweep", job, action))


def _strings(raw: dict[Any, Any]) -> dict[str, str]:
    return {reply_text(name): reply_text(value) for name, value in raw.items()}


def _times(state: Mapping[str, str]) -> dict[str, float | None]:
    """A job's times (TIMES) as its state hash holds them, None where it has none."""
    return {name: _time(state.get(name)) for name in TIMES}


def _time(value: str | None) -> float | None:
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


def recent_jobs(server: RedisClient, spider: str) -> list[dict[str, Any]]:
    """The spider's jobs whose state is kept, the most recently active first (at most
    JOBS_SHOWN): id, state (running, paused, expired, cancelled), its pages (counted by its
    workers), items stored and errors (counted in the frontier as each page's lease ends)."""
    numbers = _strings(server.hgetall(jobs_key(spider)))
    names = [name for name in numbers if not name.startswith(("#", ":"))]
    pipe = server.pipeline(transaction=False)
    for name in names:
        pipe.hgetall(job_key(spider, name))
        _queue_ended(pipe, spider, int(numbers[name]))
    replies = pipe.execute()
    now, jobs = time.time(), list[dict[str, Any]]()
    for index, name in enumerate(names):
        raw, ended, dead = replies[3 * index : 3 * index + 3]
        if not raw:
            continue  # its state expired
        state = _strings(raw)
        _, items, errors, _ = _ended(ended, dead)
        counts = {"pages": int(state.get("pages", 0)), "items": items, "errors": errors}
        times = _times(state)
        why = state.get("paused_by") and f"{state['paused_by']}: {state.get('paused_reason')}"
        jobs.append(
            {"job": name, "state": _state(times, now), **counts, **times, "why": why or None}
        )
    jobs.sort(key=lambda job: -(job["last"] or job["started"] or 0))
    return jobs[:JOBS_SHOWN]


def _state(times: dict[str, Any], now: float) -> str:
    if times["cancelled"] is not None:
        return "cancelled"
    if times["expires"] is not None and now >= times["expires"]:
        return "expired"
    return "paused" if times["paused"] is not None else "running"


def sweep_ended_jobs(server: RedisClient, keys: FrontierKeys) -> list[str]:
    """:func:`forget_ended_jobs`, by the first worker of the fleet to ask in a FORGET_INTERVAL
    (the others find it done); returns the ids forgotten."""
    mark = tagged(keys.spider, "jobs:swept")
    if not server.set(mark, f"{time.time():.3f}", nx=True, ex=int(FORGET_INTERVAL)):
        return []
    return forget_ended_jobs(server, keys)


def forget_ended_jobs(server: RedisClient, keys: FrontierKeys) -> list[str]:
    """Forget the jobs that ended: their state expired (JOB_TTL after their last activity),
    they are not paused, and none of their requests is queued, delayed or leased (their start
    entries still waiting are not looked for). Their ids and numbers, holds, budgets and counts
    go; an id forgotten is a new job the next time an entry names it. A job whose state expired
    with requests left gets a state again (``started`` now) and is looked at again JOB_TTL
    later. Returns the ids forgotten."""
    spider = keys.spider
    numbers = _strings(server.hgetall(jobs_key(spider)))
    names = [name for name in numbers if not name.startswith(("#", ":"))]
    pipe = server.pipeline(transaction=False)
    for name in names:
        pipe.exists(job_key(spider, name))
    pipe.smembers(paused_jobs_key(spider))
    *alive, paused = pipe.execute()
    held = {reply_text(member) for member in paused}
    gone = [n for n, a in zip(names, alive, strict=True) if not a and numbers[n] not in held]
    busy = _jobs_with_work(server, keys, {numbers[name] for name in gone})
    for name in gone:
        if numbers[name] in busy:  # its state again, as when an entry names it (not if paused)
            job_number(server, spider, name)
    ended = [name for name in gone if numbers[name] not in busy]
    forgotten: list[str] = []
    for first in range(0, len(ended), FORGET_CHUNK):
        forgotten += _forget(server, keys, ended[first : first + FORGET_CHUNK])
    last = int(numbers.get(":seq", 0))
    known = {numbers[name] for name in names if name not in forgotten}
    _forget_stray_counts(server, spider, known, last)
    if forgotten:
        logger.info("Forgot %d crawl jobs that ended: %s", len(forgotten), ", ".join(forgotten))
    return forgotten


def _jobs_with_work(server: RedisClient, keys: FrontierKeys, numbers: set[str]) -> set[str]:
    """Of the jobs ``numbers``, those with a request queued, delayed or leased, read a slice of
    WORK_SLICE records a script call (not at one instant: a request moving meanwhile from the
    queue to the leases may be missed)."""
    found: set[str] = set()
    priorities: Any = server.zrange(keys.queues, 0, -1)
    lists = [keys.queue_prefix + reply_text(priority) for priority in priorities]
    targets = [(key, "list") for key in lists] + [(keys.delayed, "ids"), (keys.leases, "ids")]
    for key, kind in targets:
        size = int(server.llen(key) if kind == "list" else server.zcard(key))
        for first in range(0, size, WORK_SLICE):
            if not (left := numbers - found):
                return found
            args: list[str | int] = [keys.queue_prefix, kind, first, WORK_SLICE, *sorted(left)]
            script_keys = keys.script_keys(key)
            reply = server.eval(JOB_WORK, len(script_keys), *script_keys, *args)
            found |= {reply_text(number) for number in reply}
    return found


def _forget(server: RedisClient, keys: FrontierKeys, names: list[str]) -> list[str]:
    """``forget_jobs.lua`` over ``names`` (each checked again there: state gone, not paused)."""
    held = [jobs_key(keys.spider), *keys.job_keys(), *keys.job_counts()]
    states = [job_key(keys.spider, name) for name in names]
    reply = server.eval(FORGET_JOBS, len(held) + len(names), *held, *states, *names)
    return [reply_text(name) for name in reply]


def _forget_stray_counts(server: RedisClient, spider: str, known: set[str], last: int) -> None:
    """Counts of numbers no job holds any more (written as a requeued dead letter of a
    forgotten job ended): only numbers given before this sweep read the jobs (up to ``last``)."""
    done = jobs_done_key(spider)
    for key in (done, f"{done}:dead"):
        stray = []
        for field in server.hkeys(key):
            number = reply_text(field).split(":")[0]
            if number.isdigit() and int(number) <= last and number not in known:
                stray.append(field)
        if stray:
            server.hdel(key, *stray)
