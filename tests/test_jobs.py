"""Crawl jobs: a start entry's job carried by its requests and items, counted per job in the
frontier, and cancelled (crawler/frontier/jobs.py, crawler/jobs.py)."""

from __future__ import annotations

import itertools
import json
import math
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path
from typing import Any, cast

import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scrapy import Request, Spider
from scrapy.exceptions import CloseSpider, UsageError
from scrapy.http import HtmlResponse
from scrapy.utils.test import get_crawler

from crawler.commands.frontier import deadline, page_budget
from crawler.control import jobs as job_control
from crawler.control.jobs import (
    act_on_job,
    forget_ended_jobs,
    recent_jobs,
    sweep_ended_jobs,
)
from crawler.frontier import codec
from crawler.frontier.dupefilter import DupefilterConfig
from crawler.frontier.jobs import JOB_TTL, InvalidJob, JobBook, check_job_id
from crawler.frontier.leases import ACK, ADOPT, LEASE_META, LeaseLedger
from crawler.frontier.outbox import adopted
from crawler.frontier.queue import Frontier, Pending
from crawler.frontier.records import job_fingerprint
from crawler.frontier.reports import FrontierReports
from crawler.keys import FrontierKeys, cancelled_jobs_key, job_key, jobs_done_key, jobs_key
from crawler.meta import JOB_META
from crawler.middlewares import LeaseSpiderMiddleware
from crawler.spiders.entry_job import entry_job
from tests.harness import Crawl, Sandbox, Worker, poll
from tests.test_frontier import fingerprint
from tests.test_pacing import entry, pacing
from tests.test_pause import _scrapy, _wait

KEYS = FrontierKeys("jobbed", "jobbed:start_urls")
JOB_IDS = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,63}", fullmatch=True)


# --- ids, entries and records ------------------------------------------------------------------


@given(st.one_of(JOB_IDS, st.text(max_size=80), st.integers(), st.none()))
def test_a_job_id_is_letters_digits_and_few_marks(value: Any) -> None:
    valid = isinstance(value, str) and 1 <= len(value) <= 64 and value[0].isascii()
    valid = valid and all(c.isascii() and (c.isalnum() or c in "._:-") for c in value)
    valid = valid and value[0].isalnum()
    if valid:
        assert check_job_id(value) == value
    else:
        with pytest.raises(InvalidJob):
            check_job_id(value)


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=10),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner),
    max_leaves=8,
)


@given(st.dictionaries(st.text(max_size=8), JSON_VALUES, max_size=5), JOB_IDS, JOB_IDS)
def test_an_entry_names_its_job_and_the_spider_reads_the_rest(
    entry: dict[str, Any], job: str, default: str
) -> None:
    entry.pop("job", None)
    raw = json.dumps({**entry, "job": job}).encode()
    found, rest = entry_job(raw, default, 10**6)
    assert found == job
    assert json.loads(rest) == entry
    # An entry naming no job is the worker's (-a job=), left as it is.
    plain = json.dumps(entry).encode()
    assert entry_job(plain, default, 10**6) == (default, plain)
    marked = b'\xef\xbb\xbf{"category": 5, "job": "acme"}'  # a byte-order mark in front
    assert entry_job(marked, default, 10**6) == ("acme", b'{"category":5}')


@given(st.one_of(st.integers(), st.text(max_size=80).filter(lambda t: t[:1] == " "), st.none()))
def test_an_entry_naming_a_bad_job_is_refused(job: Any) -> None:
    with pytest.raises(InvalidJob):
        entry_job(json.dumps({"url": "http://a.test/", "job": job}).encode(), None, 10**6)


@given(st.integers(1, 10**6), st.dictionaries(st.text(max_size=8), JSON_VALUES, max_size=4))
def test_a_record_begins_with_its_job_and_loads_back(number: int, meta: dict[str, Any]) -> None:
    request = Request("http://a.test/p", meta={**meta, JOB_META: number})
    text = codec.dumps(codec.request_record(request, None)).encode()
    assert text.startswith(b"%d{" % number)  # the job's number, then the JSON object
    loaded = codec.expand(codec.loads(text))
    assert loaded["meta"] == {**meta, JOB_META: number}


@given(st.integers(1, 99_999_999))
def test_a_job_costs_a_queued_request_at_most_8_bytes(number: int) -> None:
    bare = codec.dumps(codec.request_record(Request("http://a.test/p"), None))
    request = Request("http://a.test/p", meta={JOB_META: number})
    assert len(codec.dumps(codec.request_record(request, None))) - len(bare) <= 8


def _json_form(record: str) -> str:
    """A record as the first jobs wrote it, ``{"j":<n>,"u":...}``."""
    return json.dumps(codec.shorten(codec.loads(record)), separators=(",", ":"))


def test_records_of_the_first_form_are_counted_held_and_paced_the_same(
    redis_client: redis.Redis,
) -> None:
    """Requests queued as ``{"j":2,...}`` by the first workers with jobs: counted as job 2's,
    parked while it is paused, paced by their URL's host, and dropped once it is cancelled."""
    frontier = Frontier(redis_client, KEYS, DupefilterConfig(mode="none"))
    redis_client.hset("{jobbed}:jobs", mapping={"j2": 2, "#2": "j2"})
    old = [_pending(n, 2, 0, 0) for n in range(4)]
    frontier.schedule([replace(p, json=_json_form(p.json)) for p in old])
    assert act_on_job(redis_client, KEYS, "j2").queued == 4
    popped = frontier.pop(10, 60, "w1", pacing(rate=0.5, burst=1.0))
    assert len(popped.leased) == 3  # one a host (h0, h1, h2): h0's second waits its turn
    assert redis_client.zcard(KEYS.delayed) == 1
    assert {_job_of(str(record).encode()) for _, record in popped.leased} == {2}
    act_on_job(redis_client, KEYS, "j2", "pause")
    frontier.schedule([replace(_pending(9, 2, 0, 0), json=_json_form(old[0].json))])
    assert act_on_job(redis_client, KEYS, "j2").parked == 1
    assert act_on_job(redis_client, KEYS, "j2", "cancel").parked == 1
    assert frontier.pop(10, 60, "w1").leased == []


def test_a_dead_letter_of_a_job_holds_its_request_and_is_requeued_with_it(
    redis_client: redis.Redis,
) -> None:
    frontier = Frontier(redis_client, KEYS, DupefilterConfig(mode="none"))
    redis_client.hset("{jobbed}:jobs", mapping={"j2": 2, "#2": "j2"})
    frontier.schedule([_pending(0, 2, 0, 0)])
    [(lease_id, _)] = frontier.pop(10, 60, "w1").leased
    frontier.settle([("d", lease_id, '{"reason":"x"}')], "w1", 60)
    [letter] = frontier.dead_letters()
    assert letter["request"]["meta"] == {JOB_META: 2}
    # A worker older than this form dead-lettered it (unreadable) with the record as it was.
    older = '{"request":2{"u":"http://h1.test/1"},"failure":{"reason":"unreadable"}}'
    redis_client.rpush(KEYS.dead, older)
    assert frontier.dead_letters()[-1]["request"]["meta"] == {JOB_META: 2}
    assert frontier.requeue_dead(10).moved == 2
    records = _queued_records(redis_client)
    assert all(record.startswith(b"2{") for record in records)
    assert act_on_job(redis_client, KEYS, "j2").queued == 2


def test_dead_letters_of_a_cancelled_or_expired_job_are_dropped_and_counted(
    redis_client: redis.Redis,
) -> None:
    """Requeue brings back the dead letters of a running job and of none; those of a
    cancelled job and of one past its deadline are dropped, counted by job (requeued, the pop
    would drop them); a deadline put off first has its job's letters requeued."""
    frontier = Frontier(redis_client, KEYS, DupefilterConfig(mode="none"))
    book = JobBook(redis_client, KEYS.spider)
    cut, late, runs = (book.number(name) for name in ("cut", "late", "runs"))
    frontier.schedule(
        [_pending(n, job, 0, 0) for n, job in enumerate([cut, late, late, runs, None])]
    )
    ids = [lease_id for lease_id, _ in frontier.pop(10, 60, "w1").leased]
    frontier.settle([("d", lease_id, '{"reason":"timeout"}') for lease_id in ids], "w1", 60)
    act_on_job(redis_client, KEYS, "cut", "cancel")
    act_on_job(redis_client, KEYS, "late", "expire", time.time() - 1)
    act_on_job(redis_client, KEYS, "late", "expire", time.time() + 600)  # put off: requeued
    act_on_job(redis_client, KEYS, "runs", "expire", time.time() - 1)

    requeued = frontier.requeue_dead(10)
    assert (requeued.moved, requeued.dropped) == (3, {cut: 1, runs: 1})
    assert sorted(map(str, (_job_of(r) for r in _queued_records(redis_client)))) == sorted(
        map(str, [late, late, None])
    )
    assert frontier.dead_letters() == []


# --- the frontier's counts and cancel ----------------------------------------------------------


def _pending(index: int, job: int | None, priority: int, due: float) -> Pending:
    meta = {} if job is None else {JOB_META: job}
    request = Request(f"http://h{index % 3}.test/{index}", meta=meta, priority=priority)
    record = codec.dumps(codec.request_record(request, None))
    return Pending(record, fingerprint(request.url), priority, False, due)


def _job_of(record: bytes) -> int | None:
    meta = codec.expand(codec.loads(record)).get("meta") or {}
    value = meta.get(JOB_META)
    return value if isinstance(value, int) else None


def _queued_records(client: redis.Redis) -> list[bytes]:
    records: list[bytes] = []
    priorities: Any = client.zrange(KEYS.queues, 0, -1)
    for priority in priorities:
        records += cast(list[bytes], client.lrange(KEYS.queue_prefix + priority.decode(), 0, -1))
    return records


def _records(client: redis.Redis, key: str) -> list[bytes]:
    """The records of the ids in the sorted set ``key`` (delayed, leases)."""
    ids: Any = client.zrange(key, 0, -1)
    return [cast(bytes, client.hget(KEYS.data, i)) for i in ids]


REQUESTS = st.lists(
    st.tuples(st.sampled_from([None, 1, 2, 3]), st.integers(-2, 2), st.booleans()),
    max_size=40,
)


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(requests=REQUESTS, leased=st.integers(0, 10))
def test_a_jobs_counts_are_exact_and_cancel_removes_it_alone(
    redis_client: redis.Redis, requests: list[tuple[int | None, int, bool]], leased: int
) -> None:
    """Requests of jobs 1-3 and of none, queued at several priorities, delayed and leased: the
    job's counts are those of its records, and cancelling job 2 removes its queued and delayed
    ones, leaves the others in their order, and drops it from every later pop."""
    redis_client.flushdb()
    frontier = Frontier(redis_client, KEYS, DupefilterConfig(mode="none"))
    redis_client.hset("{jobbed}:jobs", mapping={"j2": 2, "#2": "j2"})
    batch = [
        _pending(index, job, priority, time.time() + 600 if delayed else 0)
        for index, (job, priority, delayed) in enumerate(requests)
    ]
    frontier.schedule(batch)
    frontier.pop(leased, 60, "w1")
    queued = _queued_records(redis_client)
    delayed, held = _records(redis_client, KEYS.delayed), _records(redis_client, KEYS.leases)
    expected = [
        sum(1 for record in records if _job_of(record) == 2) for records in (queued, delayed, held)
    ]
    status = act_on_job(redis_client, KEYS, "j2")
    assert [status.queued, status.delayed, status.leased] == expected

    cancelled = act_on_job(redis_client, KEYS, "j2", "cancel")
    assert [cancelled.queued, cancelled.delayed, cancelled.leased] == expected
    assert _queued_records(redis_client) == [r for r in queued if _job_of(r) != 2]
    left = act_on_job(redis_client, KEYS, "j2")
    assert (left.queued, left.delayed, left.leased) == (0, 0, expected[2])
    assert int(left.state["removed"]) == expected[0] + expected[1]
    # Nothing of job 2 is leased or scheduled from now on; the others come out whole.
    frontier.schedule([_pending(1000, 2, 0, 0), _pending(1001, 1, 0, 0)])
    popped = frontier.pop(1000, 60, "w1")
    jobs = [_job_of(str(record).encode()) for _, record in popped.leased]
    assert 2 not in jobs
    others = sum(1 for r in queued if _job_of(r) != 2) + 1
    assert len(jobs) == others


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(requests=REQUESTS, expired=st.booleans())
def test_a_paused_job_waits_parked_and_comes_back_whole_an_expired_one_is_dropped(
    redis_client: redis.Redis, requests: list[tuple[int | None, int, bool]], expired: bool
) -> None:
    """Job 2 paused and job 3 given a deadline (past or to come): pops hand out neither job 2's
    requests (parked, counted) nor, once past its deadline, job 3's; after the resume every
    request of job 2 is popped once, with its priority, and nothing else is lost."""
    redis_client.flushdb()
    frontier = Frontier(redis_client, KEYS, DupefilterConfig(mode="none"))
    redis_client.hset("{jobbed}:jobs", mapping={"j2": 2, "#2": "j2", "j3": 3, "#3": "j3"})
    act_on_job(redis_client, KEYS, "j2", "pause")
    act_on_job(redis_client, KEYS, "j3", "expire", time.time() + (-1 if expired else 600))
    now = [_pending(i, job, priority, 0) for i, (job, priority, _) in enumerate(requests)]
    frontier.schedule(now[: len(now) // 2])
    first = frontier.pop(1000, 60, "w1")
    frontier.schedule(now[len(now) // 2 :])  # the schedule script parks these
    second = frontier.pop(1000, 60, "w1")
    popped = [_job_of(str(record).encode()) for _, record in first.leased + second.leased]
    wanted = [job for job, _, _ in requests if job != 2 and not (expired and job == 3)]
    assert sorted(popped, key=str) == sorted(wanted, key=str)
    assert act_on_job(redis_client, KEYS, "j2").parked == sum(1 for j, _, _ in requests if j == 2)

    act_on_job(redis_client, KEYS, "j2", "resume")
    back = frontier.pop(1000, 60, "w1")
    back_jobs = [_job_of(str(record).encode()) for _, record in back.leased]
    assert back_jobs == [2] * sum(1 for job, _, _ in requests if job == 2)
    priorities = sorted(int(i.split(":")[1]) if ":" in i else 0 for i, _ in back.leased)
    assert priorities == sorted(priority for job, priority, _ in requests if job == 2)
    assert act_on_job(redis_client, KEYS, "j2").parked == 0


@pytest.mark.parametrize("job", [None, 7])
def test_a_jobs_requests_are_paced_as_any(redis_client: redis.Redis, job: int | None) -> None:
    """Five requests of one host at 0.5/s, of a job or of none: the pop leases one and gives
    the others their turns."""
    frontier = Frontier(redis_client, KEYS, DupefilterConfig(mode="none"))
    meta = {} if job is None else {JOB_META: job}
    frontier.schedule([entry(f"http://slow.test/{n}", meta) for n in range(5)])
    popped = frontier.pop(10, 60, "w1", pacing(rate=0.5, burst=1.0))
    assert len(popped.leased) == 1
    assert redis_client.zcard(KEYS.delayed) == 4


def test_each_job_has_its_own_duplicate_filter(redis_client: redis.Redis) -> None:
    """A page job 1 queued is queued again for job 2 and for no job; cancelling job 1 leaves
    the others whole, and a request of a cancelled job marks nothing seen."""
    frontier = Frontier(redis_client, KEYS, DupefilterConfig(mode="exact"))
    redis_client.hset("{jobbed}:jobs", mapping={"j1": 1, "#1": "j1", "j3": 3, "#3": "j3"})
    plain = fingerprint("http://a.test/x")

    def scheduled(job: int | None, url: str = "http://a.test/x") -> int:
        request = Request(url, meta={} if job is None else {JOB_META: job})
        record = codec.dumps(codec.request_record(request, None))
        own = job_fingerprint(fingerprint(url), request)
        return frontier.schedule([Pending(record, own, 0, False, 0)])[0]

    assert job_fingerprint(plain, Request("http://a.test/x")) == plain
    assert [scheduled(1), scheduled(2), scheduled(None), scheduled(1)] == [1, 1, 1, 0]
    act_on_job(redis_client, KEYS, "j1", "cancel")
    assert len(_queued_records(redis_client)) == 2
    act_on_job(redis_client, KEYS, "j3", "cancel")
    assert scheduled(3, "http://a.test/y") == 2  # dropped, and not marked seen:
    redis_client.srem(cancelled_jobs_key(KEYS.spider), 3)
    assert scheduled(3, "http://a.test/y") == 1
    assert len(_queued_records(redis_client)) == 3


def test_a_paused_jobs_parked_requests_are_work_left(redis_client: redis.Redis) -> None:
    frontier = Frontier(redis_client, KEYS, DupefilterConfig(mode="none"))
    redis_client.hset("{jobbed}:jobs", mapping={"j2": 2, "#2": "j2"})
    act_on_job(redis_client, KEYS, "j2", "pause")
    frontier.schedule([_pending(n, 2, 0, 0) for n in range(3)])
    assert frontier.pop(10, 60, "w1").leased == []
    assert frontier.sizes()["queue"] == 3
    act_on_job(redis_client, KEYS, "j2", "resume")
    assert len(frontier.pop(10, 60, "w1").leased) == 3
    assert frontier.sizes()["queue"] == 0


def test_a_worker_reads_on_past_keys_no_job_wrote(redis_client: redis.Redis) -> None:
    """Another tool's member in the cancelled set: the worker says so and keeps reading."""
    book = JobBook(redis_client, KEYS.spider)
    number = book.number("j1")
    redis_client.sadd(cancelled_jobs_key(KEYS.spider), "not-a-number")
    book.tick()
    assert book.cancelled == frozenset()
    redis_client.srem(cancelled_jobs_key(KEYS.spider), "not-a-number")
    redis_client.sadd(cancelled_jobs_key(KEYS.spider), number)
    book.tick()
    assert book.cancelled == {number}


@settings(
    max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    budget=st.integers(0, 12),
    requests=st.lists(st.sampled_from([None, 2]), max_size=20),
    paced=st.booleans(),
)
def test_a_jobs_page_budget_holds_for_the_fleet(
    redis_client: redis.Redis, budget: int, requests: list[int | None], paced: bool
) -> None:
    """Job 2 given a budget: pops by two workers, paced or not, until the queue and the turns
    are drained, hand out exactly that many of its requests (its turns included, however late
    a turn comes on a busy machine) and every request of no job."""
    redis_client.flushdb()
    frontier = Frontier(redis_client, KEYS, DupefilterConfig(mode="none"))
    redis_client.hset("{jobbed}:jobs", mapping={"j2": 2, "#2": "j2"})
    act_on_job(redis_client, KEYS, "j2", "limit", budget)
    frontier.schedule([_pending(i, job, 0, 0) for i, job in enumerate(requests)])
    rules = pacing(rate=1000.0, burst=1000.0) if paced else None
    handed: list[int | None] = []
    workers = itertools.cycle(["w1", "w2"])

    def drained() -> bool:
        popped = frontier.pop(7, 60, next(workers), rules)
        handed.extend(_job_of(str(record).encode()) for _, record in popped.leased)
        return not _queued_records(redis_client) and not redis_client.zcard(KEYS.delayed)

    poll(drained, 10, "the queue and the turns drained", pause=0.005)
    wanted = min(budget, requests.count(2))
    assert handed.count(2) == wanted
    assert handed.count(None) == requests.count(None)
    assert act_on_job(redis_client, KEYS, "j2").sent == wanted


def test_a_spent_budgets_backlog_is_dropped_a_slice_a_pop_and_counted(
    redis_client: redis.Redis,
) -> None:
    """Job 2 given a budget of 3 with 5,000 requests queued: a pop hands out 3 and drops a
    slice of the rest, not the whole backlog at once; the job's status counts what was dropped
    (``over_budget``), and once the pops drained it every request is accounted for and the
    request of no job behind them was handed out."""
    frontier = Frontier(redis_client, KEYS, DupefilterConfig(mode="none"))
    redis_client.hset("{jobbed}:jobs", mapping={"j2": 2, "#2": "j2"})
    act_on_job(redis_client, KEYS, "j2", "limit", 3)
    frontier.schedule([_pending(i, 2, 0, 0) for i in range(5000)] + [_pending(5000, None, 0, 0)])
    handed = [_job_of(str(r).encode()) for _, r in frontier.pop(10, 60, "w1").leased]
    first = act_on_job(redis_client, KEYS, "j2").to_json()
    assert handed == [2, 2, 2]
    assert 0 < first["over_budget"] < 4997 / 2
    assert first["queued"] + first["over_budget"] + first["sent"] == 5000
    for _ in range(20):
        handed += [_job_of(str(r).encode()) for _, r in frontier.pop(10, 60, "w1").leased]
    drained = act_on_job(redis_client, KEYS, "j2").to_json()
    assert (drained["queued"], drained["sent"], drained["over_budget"]) == (0, 3, 4997)
    assert handed == [2, 2, 2, None]


def test_a_jobs_pages_done_and_dead_letters_are_counted_as_their_leases_end(
    redis_client: redis.Redis,
) -> None:
    frontier = Frontier(redis_client, KEYS, DupefilterConfig(mode="none"))
    redis_client.hset("{jobbed}:jobs", mapping={"j2": 2, "#2": "j2"})
    frontier.schedule([_pending(n, 2 if n < 5 else None, 0, 0) for n in range(7)])
    ids = [lease_id for lease_id, _ in frontier.pop(10, 60, "w1").leased]
    ops = [("a", ids[0], "3"), ("a", ids[1], ""), ("d", ids[2], '{"reason":"timeout"}')]
    ops += [("d", ids[3], '{"reason":"spider_error:KeyError","items_stored":2}')]
    ops += [("a", ids[5], "4"), ("a", ids[1], "5")]  # no job; an ack of an ended lease
    frontier.settle(ops, "w1", 60)
    status = act_on_job(redis_client, KEYS, "j2")
    assert (status.done, status.dead, status.leased) == (2, 2, 1)
    assert (status.items, status.errors) == (5, 1)


def test_a_page_is_acked_with_the_items_it_stored_and_dead_lettered_with_them() -> None:
    """The lease ledger's ops carry the items a page stored, the way the settle script counts
    them: items that went through every pipeline, not those dropped; a page whose item failed
    is dead-lettered once its other items left the pipelines, with those stored."""
    ledger = LeaseLedger(cast(Any, None), "w1")
    requests = [Request(f"http://a.test/{n}", meta={LEASE_META: f"id{n}"}) for n in range(2)]
    for n, request in enumerate(requests):
        ledger.take(f"id{n}", 1, request.url)
        ledger.downloaded(request)
        for _ in range(3):
            ledger.item_started(request)
        ledger.finished(request)
    first, second = requests
    ledger.item_finished(first, stored=True)
    ledger.item_finished(first)  # dropped
    ledger.item_finished(second, stored=True)
    ledger.failed(second, "item_error:ValueError", "bad")  # as LeaseSpiderMiddleware does
    ledger.item_finished(second)
    assert ledger.ops == []  # its third item is still in the pipelines
    ledger.item_finished(second, stored=True)
    assert ledger.ops[0][:2] == ("d", "id1")
    failure = json.loads(ledger.ops[0][2])
    assert (failure["reason"], failure["items_stored"]) == ("item_error:ValueError", 2)
    ledger.item_finished(first, stored=True)
    assert ledger.ops[1] == ("a", "id0", "2")
    # An item failed, then the callback gave the page up (IgnoreRequest): still dead, once its
    # last item left the pipelines.
    third = Request("http://a.test/3", meta={LEASE_META: "id2"})
    ledger.take("id2", 1, third.url)
    ledger.item_started(third)
    ledger.item_started(third)
    ledger.failed(third, "item_error:ValueError", "bad")
    ledger.item_finished(third)
    ledger.finished(third)
    assert len(ledger.ops) == 2
    ledger.item_finished(third, stored=True)
    assert ledger.ops[2][:2] == ("d", "id2")


def test_a_job_that_ended_is_forgotten_whole_a_paused_or_busy_one_kept(
    redis_client: redis.Redis,
) -> None:
    """Jobs whose state expired and that have no request left leave nothing in the spider's
    job keys (a paused-then-cancelled one too); a paused job's state does not expire, a job
    with requests queued gets its state back, and a running one is kept. A forgotten id is a
    new job, and a job's state expires unless it is paused."""
    frontier = Frontier(redis_client, KEYS, DupefilterConfig(mode="none"))
    book = JobBook(redis_client, KEYS.spider)
    names = ("gone", "cut", "waits", "asleep", "busy", "runs", "stopped")
    numbers = {name: book.number(name) for name in names}
    assert 0 < redis_client.ttl(job_key(KEYS.spider, "runs")) <= JOB_TTL
    act_on_job(redis_client, KEYS, "cut", "cancel")
    act_on_job(redis_client, KEYS, "gone", "expire", time.time() + 600)
    act_on_job(redis_client, KEYS, "gone", "limit", 1)  # its second request dropped, counted
    frontier.schedule([_pending(n, numbers["gone"], 0, 0) for n in (0, 3)])
    [(lease_id, _)] = frontier.pop(10, 60, "w1").leased
    frontier.settle([("a", lease_id, "3")], "w1", 60)
    frontier.schedule([_pending(1, numbers["busy"], 0, 0)])
    for name in ("waits", "asleep", "stopped"):
        act_on_job(redis_client, KEYS, name, "pause")
    act_on_job(redis_client, KEYS, "stopped", "cancel")
    book.count(Request("http://a.test/", meta={JOB_META: numbers["waits"]}), "pages")
    book.tick()  # a page of the paused job counted: its state is still kept
    assert redis_client.ttl(job_key(KEYS.spider, "waits")) == -1
    for name in ("gone", "cut", "asleep", "busy", "stopped"):  # 30 days without activity
        redis_client.delete(job_key(KEYS.spider, name))

    assert sorted(forget_ended_jobs(redis_client, KEYS)) == ["cut", "gone", "stopped"]
    found: Any = redis_client.keys("{jobbed}:jobs*")
    for key in found:
        kind = cast(bytes, redis_client.type(key)).decode()
        members: Any = redis_client.smembers(key) if kind == "set" else redis_client.hkeys(key)
        held = {member.decode().split(":")[0] for member in members}
        for name in ("gone", "cut", "stopped"):
            assert not held & {name, f"#{numbers[name]}", str(numbers[name])}, key
    for name in ("waits", "asleep", "busy", "runs"):
        assert act_on_job(redis_client, KEYS, name).number == numbers[name]
    assert redis_client.ttl(job_key(KEYS.spider, "busy")) > 0  # looked at again in 30 days
    act_on_job(redis_client, KEYS, "waits", "resume")
    assert redis_client.ttl(job_key(KEYS.spider, "waits")) > 0
    again = JobBook(redis_client, KEYS.spider).number("cut")
    assert again > max(numbers.values())
    frontier.schedule([_pending(2, again, 0, 0)])
    assert len(frontier.pop(10, 60, "w1").leased) == 2  # busy's, and cut's anew


def _thirty_days_pass(client: redis.Redis) -> None:
    """Every job state that expires is gone, as 30 days without activity leave it."""
    for key in cast(list[bytes], client.keys(job_key(KEYS.spider, "*"))):
        if client.ttl(key) != -1:
            client.delete(key)


def test_a_paused_job_is_kept_whatever_deadline_or_budget_it_is_given(
    redis_client: redis.Redis,
) -> None:
    """A paused job given a deadline and a budget is still listed, paused, with its requests
    parked, 30 days on; resumed, it ends as any job."""
    frontier = Frontier(redis_client, KEYS, DupefilterConfig(mode="none"))
    number = JobBook(redis_client, KEYS.spider).number("asleep")
    act_on_job(redis_client, KEYS, "asleep", "pause")
    frontier.schedule([_pending(n, number, 0, 0) for n in range(3)])
    act_on_job(redis_client, KEYS, "asleep", "expire", time.time() + 90 * 86400)
    act_on_job(redis_client, KEYS, "asleep", "limit", 10)
    _thirty_days_pass(redis_client)
    listed = {job["job"]: job["state"] for job in recent_jobs(redis_client, KEYS.spider)}
    assert listed == {"asleep": "paused"}
    assert act_on_job(redis_client, KEYS, "asleep").parked == 3
    act_on_job(redis_client, KEYS, "asleep", "resume")
    assert len(frontier.pop(10, 60, "w1").leased) == 3
    _thirty_days_pass(redis_client)
    assert recent_jobs(redis_client, KEYS.spider) == []


def test_a_cancelled_job_is_not_paused_and_is_still_forgotten(redis_client: redis.Redis) -> None:
    """Pausing a cancelled job is refused and changes nothing: once its state expired, the job
    is forgotten."""
    act_on_job(redis_client, KEYS, "cut", "cancel")
    with pytest.raises(ValueError, match="job cut is cancelled: not paused"):
        act_on_job(redis_client, KEYS, "cut", "pause")
    assert act_on_job(redis_client, KEYS, "cut").to_json()["paused"] is None
    _thirty_days_pass(redis_client)
    assert forget_ended_jobs(redis_client, KEYS) == ["cut"]


def test_a_command_on_a_new_job_says_nothing_of_the_others(
    redis_client: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    """Pausing, cancelling or budgeting a job the frontier never met numbers it without
    reading (and logging) the holds of the jobs cancelled or paused before it."""
    act_on_job(redis_client, KEYS, "old-1", "cancel")
    act_on_job(redis_client, KEYS, "old-2", "pause")
    caplog.clear()
    act_on_job(redis_client, KEYS, "new-3", "pause")
    act_on_job(redis_client, KEYS, "new-4", "cancel")
    act_on_job(redis_client, KEYS, "new-5", "limit", 10)
    assert [r.getMessage() for r in caplog.records if r.levelname == "WARNING"] == []
    assert act_on_job(redis_client, KEYS, "new-3").to_json()["paused"] is not None


def test_a_job_no_entry_named_is_said_unknown_and_an_action_on_it_new(
    redis_client: redis.Redis,
) -> None:
    """A job no worker met and no command named is unknown, and stays so while it is only
    looked at; an action numbers it (numbering ahead of its entries) and says it was new."""
    JobBook(redis_client, KEYS.spider).number("acme-2026-11")
    assert act_on_job(redis_client, KEYS, "acme-2026-11").to_json()["known"] is True
    assert act_on_job(redis_client, KEYS, "acme-2026-1").to_json()["known"] is False
    assert act_on_job(redis_client, KEYS, "acme-2026-1").to_json()["known"] is False
    assert act_on_job(redis_client, KEYS, "acme-2026-1", "pause").to_json()["known"] is False
    assert act_on_job(redis_client, KEYS, "acme-2026-1").to_json()["known"] is True
    assert act_on_job(redis_client, KEYS, "acme-2026-1", "limit", 5).to_json()["known"] is True


def test_a_paused_job_stays_listed_after_the_worker_forgets_its_ids(
    redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The worker's metrics name a paused job for as long as it stays paused, also after the
    hourly forgetting of the ids and numbers it knows."""
    book = JobBook(redis_client, KEYS.spider)
    book.number("asleep")
    act_on_job(redis_client, KEYS, "asleep", "pause")
    book.tick()
    assert [job for job, _, _ in book.paused_jobs()] == ["asleep"]
    monkeypatch.setattr(book, "_forget_cache_at", 0.0)
    book.tick()
    book.tick()
    assert [job for job, _, _ in book.paused_jobs()] == ["asleep"]


def test_an_id_whose_state_expired_goes_on_under_its_number_until_forgotten(
    redis_client: redis.Redis,
) -> None:
    number = JobBook(redis_client, KEYS.spider).number("acme")
    redis_client.delete(job_key(KEYS.spider, "acme"))
    assert JobBook(redis_client, KEYS.spider).number("acme") == number
    assert 0 < redis_client.ttl(job_key(KEYS.spider, "acme")) <= JOB_TTL
    assert forget_ended_jobs(redis_client, KEYS) == []  # its state is back


def test_close_spider_raised_by_a_callback_acks_its_page(monkeypatch: pytest.MonkeyPatch) -> None:
    """A spider that stops the crawl from a callback (CloseSpider) chose to: the page that
    raised it is done, not a dead letter."""
    crawler = get_crawler(Spider)
    ledger = LeaseLedger(crawler, "w1")
    monkeypatch.setattr(FrontierReports, "ledger", property(lambda self: ledger))
    middleware = LeaseSpiderMiddleware(crawler)
    request = Request("http://a.test/", meta={LEASE_META: "l1"})
    ledger.take("l1", 1, request.url)
    ledger.downloaded(request)
    response = HtmlResponse(request.url, body=b"<p>", request=request)
    middleware.process_spider_exception(response, CloseSpider("enough"))
    assert ledger.ops == [("a", "l1", "")]


def test_a_kept_request_acked_before_it_was_written_is_settled_in_one_call(
    redis_client: redis.Redis,
) -> None:
    """A request kept on a turn taken ahead and acked before the next round trip: adopted then
    acked in the same settle call, nothing left leased, a job's page counted for the job."""
    frontier = Frontier(redis_client, KEYS, DupefilterConfig(mode="none"))
    number = JobBook(redis_client, KEYS.spider).number("kept")
    plain = adopted(7, 0, codec.dumps({"u": "http://a.test/1"}))
    jobbed = adopted(8, 0, codec.dumps({"j": number, "u": "http://a.test/2"}))
    ops = [(ADOPT, entry.lease_id, entry.record) for entry in (plain, jobbed)]
    frontier.settle([*ops, (ACK, "7", ""), (ACK, "8", "2")], "w1", 60)
    assert frontier.sizes()["leased"] == 0
    assert redis_client.hgetall(KEYS.data) == {}
    done = redis_client.hgetall(jobs_done_key(KEYS.spider))
    assert (done[str(number).encode()], done[f"{number}:items".encode()]) == (b"1", b"2")


@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(requests=REQUESTS, leased=st.integers(0, 10))
def test_a_sweep_finds_every_job_with_a_request_left_slice_by_slice(
    redis_client: redis.Redis,
    requests: list[tuple[int | None, int, bool]],
    leased: int,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Jobs 1-3 whose state expired, with requests queued at several priorities, delayed and
    leased, read two records a script call: exactly those with none left are forgotten."""
    redis_client.flushdb()
    monkeypatch.setattr(job_control, "WORK_SLICE", 2)
    frontier = Frontier(redis_client, KEYS, DupefilterConfig(mode="none"))
    book = JobBook(redis_client, KEYS.spider)
    assert [book.number(f"j{n}") for n in (1, 2, 3)] == [1, 2, 3]
    batch = [
        _pending(index, job, priority, time.time() + 600 if delayed else 0)
        for index, (job, priority, delayed) in enumerate(requests)
    ]
    frontier.schedule(batch)
    frontier.pop(leased, 60, "w1")
    for n in (1, 2, 3):
        redis_client.delete(job_key(KEYS.spider, f"j{n}"))
    left = {job for job, _, _ in requests if job is not None}
    forgotten = forget_ended_jobs(redis_client, KEYS)
    assert sorted(forgotten) == [f"j{n}" for n in (1, 2, 3) if n not in left]
    for n in left:
        assert redis_client.ttl(job_key(KEYS.spider, f"j{n}")) > 0  # its state again


def test_one_worker_a_sweep_looks_for_jobs_that_ended(redis_client: redis.Redis) -> None:
    book = JobBook(redis_client, KEYS.spider)
    book.number("old")
    redis_client.delete(job_key(KEYS.spider, "old"))
    assert sweep_ended_jobs(redis_client, KEYS) == ["old"]
    book.number("older")
    redis_client.delete(job_key(KEYS.spider, "older"))
    assert sweep_ended_jobs(redis_client, KEYS) == []  # another worker's, within the hour
    assert redis_client.hget(jobs_key(KEYS.spider), "older") is not None


def test_cancel_removes_the_jobs_start_entries_alone(redis_client: redis.Redis) -> None:
    entries = [
        json.dumps({"url": "http://a.test/1", "job": "acme"}),
        "http://a.test/2",
        json.dumps({"url": "http://a.test/3", "job": "acme-2"}),
        ' {"job": "acme", "url": "http://a.test/4"}',
        json.dumps({"url": "http://a.test/5", "job": "acme", "deep": [[[[1]]]]}),
        '{"broken json',
    ]
    redis_client.lpush(KEYS.start, *entries)
    assert act_on_job(redis_client, KEYS, "acme").starts == 3
    assert act_on_job(redis_client, KEYS, "acme", "cancel").starts == 3
    stored: Any = redis_client.lrange(KEYS.start, 0, -1)
    left = [raw.decode() for raw in reversed(stored)]
    assert left == [entries[1], entries[2], entries[5]]
    assert JobBook(redis_client, KEYS.spider).number("acme") in {
        int(n) for n in redis_client.smembers(cancelled_jobs_key(KEYS.spider))
    }


# --- a crawl -------------------------------------------------------------------------------------

LATENCY = 0.25
WORKER = {
    "FRONTIER_LEASE_SECONDS": 5,
    "START_BATCH_SIZE": 10,
    "CONCURRENT_REQUESTS": 2,
    "MAX_IDLE_TIME_BEFORE_CLOSE": 2,
}
USERS = {"A": [f"missing.a{n}" for n in range(150)], "B": [f"missing.b{n}" for n in range(150)]}


@given(st.text(max_size=30))
def test_a_deadline_or_a_budget_is_read_or_refused_with_usage(text: str) -> None:
    """Whatever an operator types after ``expires`` or ``max-pages``: a finite time or a whole
    number, or a usage error naming the value."""
    for read in (deadline, page_budget):
        value = _read_or_refused(read, text)
        if isinstance(value, str):
            assert repr(text) in value
        else:
            assert math.isfinite(value)
            assert value >= (0 if read is page_budget else -1e12)


def _read_or_refused(read: Callable[[str], float], text: str) -> float | str:
    try:
        return read(text)
    except UsageError as exc:
        return str(exc)


@pytest.mark.integration
@pytest.mark.parametrize(
    ("args", "said"),
    [
        (("crawl", "profiles", "-a", "job=no spaces"), "-a job: a job id is 1-64"),
        (("crawl", "profiles", "-a", "job=" + "x" * 65), "-a job: a job id is 1-64"),
        (("frontier", "profiles", "job", "A", "expires", "soon"), "expires: 'soon' is neither"),
        (("frontier", "profiles", "job", "A", "expires", "+inf"), "expires: '+inf' is neither"),
        (("frontier", "profiles", "job", "A", "max-pages", "-1"), "max-pages: '-1' is not"),
        (("frontier", "profiles", "job", "A", "max-pages", "1e3"), "max-pages: '1e3' is not"),
        (("frontier", "profiles", "job", "a b"), "a job id is 1-64"),
        (("frontier", "profiles", "job", "A", "stop"), "scrapy frontier SPIDER job ID ["),
    ],
)
def test_a_bad_job_value_is_refused_before_anything_changes(
    crawl: Crawl, redis_client: redis.Redis, args: tuple[str, ...], said: str
) -> None:
    """A bad ``-a job=`` stops the worker before it takes anything; a bad job command changes
    nothing in Redis. Both say what is wrong."""
    redis_client.lpush("profiles:start_urls", "alice")
    before = sorted(cast(list[bytes], redis_client.keys("*")))
    done = _scrapy(crawl, *args)
    assert done.returncode != 0
    assert said in done.stderr + done.stdout
    assert sorted(cast(list[bytes], redis_client.keys("*"))) == before
    assert redis_client.llen("profiles:start_urls") == 1


@pytest.mark.integration
@pytest.mark.parametrize(
    ("action", "said"),
    [
        (["pause"], "not paused"),
        (["resume"], "not resumed"),
        (["max-pages", "10"], "no page budget set"),
        (["expires", "+60"], "no deadline set"),
    ],
)
def test_an_action_on_a_cancelled_job_is_refused_with_why(
    crawl: Crawl, action: list[str], said: str
) -> None:
    _job_command(crawl, "profiles", "acme-1", "cancel")
    before = _status(crawl, "profiles", "acme-1")
    done = _scrapy(crawl, "frontier", "profiles", "job", "acme-1", *action)
    assert done.returncode == 1
    assert done.stdout == ""
    assert done.stderr.strip() == (
        f"job acme-1 is cancelled: {said} (start a new job under a new id); nothing changed"
    )
    assert _status(crawl, "profiles", "acme-1") == before


@pytest.mark.integration
def test_requeue_says_which_dead_letters_it_dropped_and_why(
    crawl: Crawl, redis_client: redis.Redis
) -> None:
    book = JobBook(redis_client, "profiles")
    cut, runs = book.number("acme-1"), book.number("acme-2")
    act_on_job(redis_client, FrontierKeys("profiles", "profiles:start_urls"), "acme-1", "cancel")
    for n, job in enumerate([cut, runs, cut]):
        letter = {"request": {"j": job, "u": f"http://a.test/{n}"}, "failure": {"reason": "x"}}
        redis_client.lpush("{profiles}:dead", json.dumps(letter))
    done = _scrapy(crawl, "frontier", "profiles", "requeue")
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.splitlines() == [
        "requeued 1 dead letters of profiles",
        "dropped 2 dead letters of jobs cancelled or past their deadline (acme-1: 2); put a "
        "deadline off before a requeue to have its letters requeued",
    ]
    assert redis_client.llen("{profiles}:dead") == 0


@pytest.mark.integration
def test_an_action_on_a_new_job_warns_and_a_status_says_unknown(crawl: Crawl) -> None:
    """A typo in a job id: the action is done (an operator may number a job ahead of its
    entries) with a one-line warning on stderr; a status of an id never named says so."""
    shown = _scrapy(crawl, "frontier", "profiles", "job", "acme-2026-1")
    assert shown.returncode == 0, shown.stderr[-3000:]
    assert "unknown to the frontier: no entry naming it was read yet" in shown.stdout
    assert _status(crawl, "profiles", "acme-2026-1")["known"] is False
    paused = _scrapy(crawl, "frontier", "profiles", "job", "acme-2026-1", "pause")
    assert paused.returncode == 0, paused.stderr[-3000:]
    warnings = [line for line in paused.stderr.splitlines() if "warning" in line]
    assert warnings == [
        "warning: job acme-2026-1 of profiles is new: no entry naming it was read yet and "
        "nothing was counted; `pause` holds for the entries that name it later (is the id right?)"
    ]
    again = _scrapy(crawl, "frontier", "profiles", "job", "acme-2026-1", "resume")
    assert "warning" not in again.stderr
    assert _status(crawl, "profiles", "acme-2026-1")["known"] is True


@pytest.mark.integration
def test_two_jobs_cancel_one_mid_crawl_and_the_other_completes(
    crawl: Crawl, redis_client: redis.Redis, sandbox: Sandbox, tmp_path: Path
) -> None:
    """Two workers crawl jobs A and B (150 profiles each, interleaved); A is cancelled mid-crawl:
    from 5 s after the cancel the site gets no request of A, B is stored whole with its job,
    A's stored profiles carry A, and the counts add up. A job that ended a month ago is
    forgotten by the fleet as it starts."""
    sandbox.admin("config", {"latency_ms": int(LATENCY * 1000)})
    redis_client.lpush("profiles:start_urls", *_interleaved())
    JobBook(redis_client, "profiles").number("last-month")
    redis_client.delete(job_key("profiles", "last-month"))  # its state expired
    with ExitStack() as running:
        workers = _two_workers(running, crawl, tmp_path)
        poll(lambda: redis_client.hget(jobs_key("profiles"), "last-month") is None, 30, "forgot")
        poll(lambda: crawl.mongo.db.profiles.count_documents({}) >= 30, 60, "progress")
        removed = _cancel(crawl, "profiles", "A")
        cancelled_at = time.time()  # once the command has written to Redis
        for worker in workers:
            assert worker.wait(120) == 0, worker.log.read_text()[-3000:]

    served = sandbox.admin("stats")["requests"]
    arrivals = [(entry["arrived"], entry["path"][2:]) for entry in served]
    late = [user for when, user in arrivals if user in USERS["A"] and when > cancelled_at + 5]
    assert late == [], f"{len(late)} requests of the cancelled job reached the site"
    stored = {doc["unique_id"]: doc.get("job") for doc in crawl.mongo.db.profiles.find({})}
    assert {user for user, job in stored.items() if job == "B"} == set(USERS["B"])
    assert all(stored[user] == "A" for user in USERS["A"] if user in stored)
    fetched_a = {user for _, user in arrivals if user in USERS["A"]}
    taken = removed["queued"] + removed["delayed"] + removed["start_entries"]
    assert taken > 0, removed
    assert len(fetched_a) + taken <= len(USERS["A"]), "a request of A removed and fetched"
    after = _status(crawl, "profiles", "A")
    assert (after["queued"], after["delayed"], after["start_entries"]) == (0, 0, 0)
    b = _status(crawl, "profiles", "B")
    assert (b["pages"], b["items"], b["errors"]) == (150, 150, 0)
    assert (b["done"], b["dead_letters"]) == (150, 0)
    shown = _scrapy(crawl, "status", "profiles").stdout
    assert "job       B running: 150 pages, 150 items, 0 errors" in shown, shown
    assert "job       A cancelled: " in shown, shown
    assert b["cancelled"] is None
    assert b["started"] <= b["last"]
    assert redis_client.zcard("{profiles}:leases") == 0
    assert redis_client.llen("{profiles}:dead") == 0


@pytest.mark.integration
def test_a_paused_job_waits_while_the_other_goes_on_and_ends_whole_after_resume(
    crawl: Crawl, redis_client: redis.Redis, sandbox: Sandbox, tmp_path: Path
) -> None:
    """Job A paused mid-crawl for 8 s: from 3 s after the pause the site gets no request of A
    while B's keep coming; after the resume every profile of both is fetched and stored once."""
    sandbox.admin("config", {"latency_ms": int(LATENCY * 1000)})
    redis_client.lpush("profiles:start_urls", *_interleaved())
    with ExitStack() as running:
        workers = _two_workers(running, crawl, tmp_path)
        poll(lambda: crawl.mongo.db.profiles.count_documents({}) >= 30, 60, "progress")
        paused = _job_command(crawl, "profiles", "A", "pause")["pause"]
        paused_at = time.time()  # once the command has written to Redis
        assert paused["paused"] is not None
        poll(lambda: time.time() > paused_at + 8, 20, "the pause to last", pause=0.2)
        resumed_at = time.time()
        _job_command(crawl, "profiles", "A", "resume")
        for worker in workers:
            assert worker.wait(120) == 0, worker.log.read_text()[-3000:]

    served = sandbox.admin("stats")["requests"]
    arrivals = [(entry["arrived"], entry["path"][2:]) for entry in served]
    window = [user for when, user in arrivals if paused_at + 3 < when < resumed_at]
    early = [
        (round(when - paused_at, 2), user)
        for when, user in arrivals
        if user in USERS["A"] and paused_at + 3 < when < resumed_at
    ]
    seen = [line for w in workers for line in w.log.read_text().splitlines() if " paused" in line]
    assert [user for user in window if user in USERS["A"]] == [], (
        f"A fetched while paused (seconds after the pause, user): {early}; workers saw: {seen}"
    )
    assert any(user in USERS["B"] for user in window), "B waited for A"
    assert sorted(user for _, user in arrivals) == sorted(USERS["A"] + USERS["B"])
    stored = {doc["unique_id"]: doc["job"] for doc in crawl.mongo.db.profiles.find({})}
    assert stored == {user: job for job, users in USERS.items() for user in users}
    assert _status(crawl, "profiles", "A")["paused_requests"] == 0
    assert redis_client.zcard("{profiles}:leases") == 0
    assert redis_client.llen("{profiles}:dead") == 0


@pytest.mark.integration
def test_a_jobs_max_pages_holds_for_the_fleet(
    crawl: Crawl, redis_client: redis.Redis, sandbox: Sandbox, tmp_path: Path
) -> None:
    """Job A given 20 pages before its 60 entries come; two workers: the site gets exactly 20
    of A's requests, B is stored whole."""
    limited = _job_command(crawl, "profiles", "A", "max-pages", "20")["max-pages"]
    assert limited["max_pages"] == 20
    users = {"A": USERS["A"][:60], "B": USERS["B"][:60]}
    redis_client.lpush("profiles:start_urls", *_interleaved(users))
    with ExitStack() as running:
        workers = _two_workers(running, crawl, tmp_path)
        for worker in workers:
            assert worker.wait(120) == 0, worker.log.read_text()[-3000:]
    fetched = [entry["path"][2:] for entry in sandbox.admin("stats")["requests"]]
    assert len([user for user in fetched if user in users["A"]]) == 20
    stored = {doc["unique_id"]: doc["job"] for doc in crawl.mongo.db.profiles.find({})}
    assert {user for user, job in stored.items() if job == "B"} == set(users["B"])
    limited_status = _status(crawl, "profiles", "A")
    assert (limited_status["sent"], limited_status["done"]) == (20, 20)


def _interleaved(users: dict[str, list[str]] = USERS) -> list[str]:
    return [
        json.dumps({"unique_id": user, "job": job})
        for pair in zip(users["A"], users["B"], strict=True)
        for job, user in zip("AB", pair, strict=True)
    ]


@pytest.mark.integration
def test_every_page_and_item_made_from_an_entry_carries_its_job(
    crawl: Crawl, redis_client: redis.Redis, sandbox: Sandbox
) -> None:
    """explore: an entry naming job "feed-5" and a worker's ``-a job=rest`` for the entry
    naming none: every feed page of each (the next page made from the last) is counted under
    its job, every video stored with it, every author handed to profiles names it; an entry
    naming a bad job is set aside."""
    redis_client.lpush(
        "explore:start_urls",
        json.dumps({"category": 5, "max_pages": 3, "job": "feed-5"}),
        json.dumps({"category": 6, "max_pages": 2}),
        json.dumps({"category": 7, "job": "no spaces allowed"}),
    )
    result = crawl("explore", "-a", "job=rest")
    assert result.returncode == 0, result.stderr[-3000:]
    handed = [json.loads(raw) for raw in redis_client.lrange("profiles:start_urls", 0, -1)]
    assert handed, "no author handed to profiles"
    assert {entry["job"] for entry in handed} <= {"feed-5", "rest"}

    videos = list(crawl.mongo.db.videos.find({}, {"category": 1, "job": 1}))
    assert {doc["category"] for doc in videos} == {5, 6}
    assert all(doc["job"] == ("feed-5" if doc["category"] == 5 else "rest") for doc in videos)
    invalid = [json.loads(raw) for raw in redis_client.lrange("explore:start_urls:invalid", 0, -1)]
    assert [record["reason"].split(":")[0] for record in invalid] == ["bad_job"]
    feed = sandbox.admin("stats")["by_path"]
    pages = sum(count for path, count in feed.items() if "item_list" in path)
    status = {job: _status(crawl, "explore", job) for job in ("feed-5", "rest")}
    assert status["feed-5"]["pages"] == 3
    assert status["feed-5"]["pages"] + status["rest"]["pages"] == pages
    assert status["feed-5"]["items"] == sum(1 for doc in videos if doc["category"] == 5)
    assert status["rest"]["items"] == sum(1 for doc in videos if doc["category"] == 6)
    for job in status.values():
        assert (job["queued"], job["delayed"], job["leased"], job["errors"]) == (0, 0, 0, 0)


@pytest.mark.integration
def test_a_jobs_max_pages_holds_for_a_chain_of_feed_pages(
    crawl: Crawl, redis_client: redis.Redis, sandbox: Sandbox
) -> None:
    """explore's next feed page is made from the last (a chain, kept on a turn taken ahead when
    the job has no budget): a job given 2 pages gets 2 feed pages fetched of the 5 its entry
    asks for."""
    _job_command(crawl, "explore", "E", "max-pages", "2")
    redis_client.lpush(
        "explore:start_urls", json.dumps({"category": 5, "max_pages": 5, "job": "E"})
    )
    chained = {"POLITENESS_RATE": 5.0, "POLITENESS_BURST": 1, "EXPLORE_PAGE_SIZE": 4}
    result = crawl("explore", settings={**chained, "EXPLORE_HANDOFF_SPIDER": ""})
    assert result.returncode == 0, result.stderr[-3000:]
    feed = sandbox.admin("stats")["by_path"]
    assert sum(count for path, count in feed.items() if "categoryType" in path) == 2
    assert _status(crawl, "explore", "E")["sent"] == 2


def _status(crawl: Crawl, spider: str, job: str) -> dict[str, Any]:
    return dict(_job_command(crawl, spider, job)["status"])


def _cancel(crawl: Crawl, spider: str, job: str) -> dict[str, Any]:
    return dict(_job_command(crawl, spider, job, "cancel")["cancel"])


def _job_command(crawl: Crawl, spider: str, job: str, *action: str) -> Any:
    done = _scrapy(crawl, "frontier", spider, "job", job, *action, "--json")
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


def _two_workers(running: ExitStack, crawl: Crawl, tmp_path: Path) -> list[Worker]:
    return [
        running.enter_context(
            crawl.background("profiles", settings=WORKER, log=tmp_path / f"worker-{n}.log")
        )
        for n in range(2)
    ]


# --- sequences -----------------------------------------------------------------------------

SEQUENCE_USERS = {"A": USERS["A"][:60], "B": USERS["B"][:60]}
Step = tuple[str, float]
job_steps = st.lists(
    st.tuples(
        st.sampled_from(["pause", "resume", "cancel", "kill", "start"]),
        st.sampled_from([0.5, 1.5, 3.0]),
    ),
    min_size=2,
    max_size=5,
).filter(lambda sequence: any(action in ("pause", "cancel") for action, _ in sequence))


class JobFleet:
    """Workers started and killed (-9), and job A paused, resumed and cancelled, as a sequence
    says; the times A could not be fetched (from 3 s into a pause until its resume, from 5 s
    after a cancel on)."""

    def __init__(self, crawl: Crawl, stack: ExitStack, logs: Path) -> None:
        self.crawl, self.stack, self.logs = crawl, stack, logs
        self.workers: list[Worker] = []
        self.quiet: list[list[float]] = []  # [from, until] A may not be fetched
        self.cancelled = False

    def start(self) -> None:
        log = self.logs / f"worker-{len(self.workers)}.log"
        self.workers.append(
            self.stack.enter_context(self.crawl.background("profiles", settings=WORKER, log=log))
        )

    def alive(self) -> list[Worker]:
        return [worker for worker in self.workers if worker.poll() is None]

    def do(self, action: str) -> None:
        """The quiet times start once the command has written to Redis (a ``scrapy frontier``
        process takes a second or more to start on a busy machine) and end as the resume's
        command starts."""
        now = time.time()
        if action == "cancel" and not self.cancelled:
            _cancel(self.crawl, "profiles", "A")
            self.cancelled = True
            self.quiet.append([time.time() + 5, float("inf")])
        elif action in ("pause", "resume") and not self.cancelled:
            _job_command(self.crawl, "profiles", "A", action)
            if action == "pause" and not (self.quiet and self.quiet[-1][1] == float("inf")):
                self.quiet.append([time.time() + 3, float("inf")])
            elif action == "resume" and self.quiet and self.quiet[-1][1] == float("inf"):
                self.quiet[-1][1] = now
        elif action == "kill" and (alive := self.alive()):
            alive[0].kill()
        elif action == "start" and len(self.alive()) < 3:
            self.start()


@pytest.mark.integration
@settings(
    max_examples=3,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(sequence=job_steps)
def test_any_sequence_of_job_pause_resume_cancel_and_kill_loses_nothing_else(
    crawl: Crawl, redis_client: redis.Redis, sandbox: Sandbox, tmp_path_factory: Any,
    sequence: list[Step],
) -> None:  # fmt: skip
    """Jobs A and B crawled by two workers; then A paused, resumed and cancelled, workers
    killed (-9) and started, in any order; then A resumed unless cancelled. No request of A
    reaches the site while it may not; B is stored whole, once; A whole unless cancelled; the
    fleet closes with nothing leased, dead or parked."""
    redis_client.flushdb()
    crawl.mongo.db.profiles.drop()
    sandbox.admin("reset", {})
    sandbox.admin("config", {"latency_ms": int(LATENCY * 1000)})
    redis_client.lpush("profiles:start_urls", *_interleaved(SEQUENCE_USERS))
    with ExitStack() as stack:
        fleet = JobFleet(crawl, stack, tmp_path_factory.mktemp("jobs"))
        fleet.start()
        fleet.start()
        _wait(1.0)
        for action, after in sequence:
            fleet.do(action)
            _wait(after)
        fleet.do("resume")
        if not fleet.alive():
            fleet.start()
        for worker in fleet.alive():
            assert worker.wait(120) == 0, worker.log.read_text()[-3000:]
    served = sandbox.admin("stats")["requests"]
    arrivals = [(entry["arrived"], entry["path"][2:]) for entry in served]
    early = [
        (round(when - start, 2), user)
        for start, until in fleet.quiet
        for when, user in arrivals
        if user in SEQUENCE_USERS["A"] and start < when < until
    ]
    assert early == [], f"requests of A reached the site when they may not: {early[:5]}"
    stored = [(doc["unique_id"], doc["job"]) for doc in crawl.mongo.db.profiles.find({})]
    assert len(stored) == len(set(stored)), "a profile stored twice"
    assert {user for user, job in stored if job == "B"} == set(SEQUENCE_USERS["B"])
    a_stored = {user for user, job in stored if job == "A"}
    assert a_stored <= set(SEQUENCE_USERS["A"])
    if not fleet.cancelled:
        assert a_stored == set(SEQUENCE_USERS["A"])
    assert redis_client.zcard("{profiles}:leases") == 0
    assert redis_client.llen("{profiles}:dead") == 0
    assert not redis_client.keys("{profiles}:jobs:paused:*"), "requests left parked"
    b = act_on_job(redis_client, FrontierKeys("profiles", "profiles:start_urls"), "B")
    whole = len(SEQUENCE_USERS["B"])  # each acked once, whatever worker was killed
    assert (b.done, b.items, b.errors, b.dead) == (whole, whole, 0, 0)
