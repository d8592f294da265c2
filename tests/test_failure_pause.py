"""The failure threshold: once most of the fleet's last answers failed, the crawl pauses itself
and says why, and goes on, losing nothing, once resumed."""

from __future__ import annotations

import json

import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client import generate_latest
from scrapy import Request

from crawler.bans.failures import FAILURES, answers_since
from crawler.control.jobs import act_on_job, recent_jobs
from crawler.control.pause import read_pause
from crawler.frontier.jobs import JobBook
from crawler.keys import FrontierKeys, failure_window_key, pause_key
from crawler.meta import JOB_META
from crawler.observability.counters import Counters
from crawler.observability.metrics import Snapshot, WorkerInfo, registry_for
from crawler.observability.report_text import job_line
from sandbox.hosts import host_address
from sandbox.seed import build_dataset
from tests.harness import Crawl, Sandbox, poll, served_hosts
from tests.test_pause import _scrapy

WINDOW_KEY, PAUSE_KEY = failure_window_key("shop"), pause_key("shop")


def test_answers_and_failures_are_read_from_the_stats() -> None:
    before = {"downloader/response_count": 10, "downloader/response_status_count/503": 2}
    after = {
        "downloader/response_count": 20,
        "downloader/response_status_count/503": 5,
        "downloader/response_status_count/500": 1,
        "downloader/response_status_count/404": 4,
        "downloader/exception_count": 2,
        "ban/count": 1,
    }
    # 10 responses and 2 errors; 3 + 1 server errors, 2 errors, 1 ban (a 404 is an answer).
    assert answers_since(before, after) == (12, 7)
    assert answers_since(after, after) == (0, 0)
    # Never more failures than answers (a 503 that is also a ban counts twice in the stats).
    assert answers_since(
        {},
        {
            "downloader/response_count": 1,
            "ban/count": 1,
            **{"downloader/response_status_count/503": 1},
        },
    ) == (1, 1)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    st.integers(10, 40),
    st.floats(0.1, 0.9),
    st.lists(st.tuples(st.integers(0, 30), st.integers(0, 30)), min_size=1, max_size=12),
)
def test_the_window_pauses_once_too_many_of_the_last_answers_failed(
    redis_client: redis.Redis, window: int, ratio: float, batches: list[tuple[int, int]]
) -> None:
    """The script against a model: a window of the last ``window`` answers, newest first (a
    batch's failures counted as its latest); paused the first time it is full with more than
    ``ratio`` failed, emptied then, and nothing counted while paused."""
    redis_client.delete(WINDOW_KEY, PAUSE_KEY)
    model: list[str] = []
    paused = False
    for failed, fine in batches:
        reply = redis_client.eval(
            FAILURES, 2, WINDOW_KEY, PAUSE_KEY, window, failed, fine, ratio, 1.0
        )
        if paused:
            assert reply == [0, 0, 0]
            continue
        model = (["1"] * min(failed, window) + ["0"] * min(fine, window) + model)[:window]
        bad = model.count("1")
        trips = len(model) >= window and bad > ratio * window
        assert reply == [len(model), bad, int(trips)]
        if trips:
            paused = True
            pause = read_pause(redis_client, "shop")
            assert pause is not None
            assert pause.by == "failure threshold"
            assert f"{bad} of the last {window} answers failed" in pause.reason
            assert not redis_client.exists(WINDOW_KEY)
        else:
            assert redis_client.lrange(WINDOW_KEY, 0, -1) == [v.encode() for v in model]
    redis_client.delete(WINDOW_KEY, PAUSE_KEY)


USERS = [author.unique_id for author in build_dataset().authors[:80]]


@pytest.mark.integration
def test_a_site_answering_only_errors_pauses_the_crawl_until_resumed(
    crawl: Crawl, redis_client: redis.Redis, sandbox: Sandbox
) -> None:
    """The site turns to 503 for every request mid-crawl: the crawl pauses itself within the
    window (20 answers), says why in the log and in `scrapy status`, and once the site is back
    and the crawl resumed, every profile is stored and nothing is dead."""
    sandbox.admin("config", {"latency_ms": 100})
    redis_client.lpush("profiles:start_urls", *(json.dumps({"unique_id": u}) for u in USERS))
    settings = {
        "FAILURE_PAUSE_WINDOW": 20,
        "FAILURE_PAUSE_RATIO": 0.5,
        "CONCURRENT_REQUESTS": 2,
        "START_BATCH_SIZE": 10,
        "MAX_IDLE_TIME_BEFORE_CLOSE": 2,
        # The host's circuit breaker would hold its requests back after the first 503s: this
        # test is about the fleet's window of answers.
        "HOST_BLOCK_START": 0,
    }
    with crawl.background("profiles", settings=settings) as worker:
        poll(lambda: crawl.mongo.db.profiles.count_documents({}) >= 10, 60, "progress")
        sandbox.admin("config", {"faults": {"error_rate": 1.0}})
        pause = poll(lambda: read_pause(redis_client, "profiles"), 60, "the crawl paused")
        assert pause.by == "failure threshold"
        assert "of the last 20 answers failed" in pause.reason
        poll(lambda: "the crawl of profiles is paused" in worker.log_text(), 10, "the log")
        status = _scrapy(crawl, "status")
        assert "failure threshold" in status.stdout, status.stdout + status.stderr
        assert worker.poll() is None, "a paused worker closed"
        sandbox.admin("config", {"faults": {"error_rate": 0.0}})
        redis_client.delete(pause_key("profiles"))
        assert worker.wait(180) == 0, worker.log_text()[-3000:]
    stored = [doc["unique_id"] for doc in crawl.mongo.db.profiles.find({}, {"unique_id": 1})]
    assert sorted(stored) == sorted(USERS)
    assert redis_client.llen("{profiles}:dead") == 0


# --- a crawl job's own threshold -----------------------------------------------------------------


def test_a_jobs_failed_answers_pause_the_job_alone(redis_client: redis.Redis) -> None:
    """Answers to job 2's requests, most failed, fill its window: the job pauses itself, says
    why in its state, and the crawl's window is left their answers; job 3's go on."""
    book = JobBook(redis_client, "shop", failure_ratio=0.5, window=10)
    failing, fine = book.number("failing"), book.number("fine")
    for n in range(12):
        book.answered(Request("http://a.test/", meta={JOB_META: failing}), n % 4 != 0)
        book.answered(Request("http://b.test/", meta={JOB_META: fine}), n % 4 == 0)
    book.answered(Request("http://b.test/"), True)  # no job: the crawl's
    book.answered(Request("http://b.test/", meta={JOB_META: fine}), True, counted=False)  # a ban
    assert book.take_answered() == (24, 13)
    book.tick()
    keys = FrontierKeys("shop", "shop:start_urls")
    state = act_on_job(redis_client, keys, "failing").to_json()
    assert state["paused_by"] == "failure threshold"
    assert "of the last 10 answers failed" in state["paused_reason"]
    assert act_on_job(redis_client, keys, "fine").to_json()["paused_by"] is None
    assert redis_client.smembers("{shop}:jobs:paused") == {str(failing).encode()}
    assert read_pause(redis_client, "shop") is None
    [line] = [job_line(job) for job in recent_jobs(redis_client, "shop") if job["job"] == "failing"]
    assert line.startswith("failing paused (failure threshold: ")
    book.tick()  # the worker reads the pause, by whom and why: its metrics show it
    [(job, by, reason)] = book.paused_jobs()
    assert (job, by) == ("failing", "failure threshold")
    info = WorkerInfo("shop", "w1", "h", 1, 0.0)
    snapshot = Snapshot(info, Counters.from_stats({}), None, jobs_paused=(("failing", by, reason),))
    page = generate_latest(registry_for(lambda: snapshot)).decode()
    assert f'crawler_job_paused{{by="failure threshold",job="failing",reason="{reason}"' in page
    act_on_job(redis_client, keys, "failing", "resume")
    assert act_on_job(redis_client, keys, "failing").to_json()["paused_by"] is None


def test_a_cancelled_jobs_failed_answers_do_not_pause_it(redis_client: redis.Redis) -> None:
    """Answers to a cancelled job's requests that were in flight, all failed, do not pause it:
    paused, a job is kept until it resumes, which a cancelled one never does."""
    book = JobBook(redis_client, "shop", failure_ratio=0.5, window=10)
    number = book.number("gone")
    keys = FrontierKeys("shop", "shop:start_urls")
    act_on_job(redis_client, keys, "gone", "cancel")
    for _ in range(12):
        book.answered(Request("http://a.test/", meta={JOB_META: number}), True)
    book.tick()
    assert act_on_job(redis_client, keys, "gone").to_json()["paused_by"] is None
    assert redis_client.smembers("{shop}:jobs:paused") == set()
    assert redis_client.ttl("{shop}:job:gone") > 0  # forgotten in time


@pytest.mark.integration
def test_a_job_whose_host_answers_only_errors_pauses_itself_and_the_other_goes_on(
    crawl: Crawl, redis_client: redis.Redis
) -> None:
    """Job A's host answers 503 to everything, job B's answers: A pauses itself within its
    window (20 answers), says why in `scrapy status`, the crawl is not paused and B is crawled
    whole; once the host is back and A resumed, A is crawled whole and nothing is dead."""
    with served_hosts(2, 30) as web:
        pages = {
            job: [f"http://{host_address(h)}:{web.port}/p/{k}" for k in range(1, 30)]
            for job, h in (("A", 0), ("B", 1))
        }
        entries = [json.dumps({"url": url, "job": job}) for job in pages for url in pages[job]]
        redis_client.lpush("links:start_urls", *entries)
        web.faults[host_address(0)] = "503"
        settings = {
            "FAILURE_PAUSE_WINDOW": 20,
            "FAILURE_PAUSE_RATIO": 0.5,
            "HOST_BLOCK_START": 0,  # this test is about the job's window, not the breaker
            "LINKS_SCOPE": "host",
            "LINKS_SITEMAPS": False,
            "LINKS_ROBOTS_OBEY": False,
            # A's requests wait, retried, until the job pauses: none is given up.
            "RETRY_TIMES": 50,
            "RETRY_BACKOFF_BASE": 1.0,
            "RETRY_BACKOFF_MAX": 1.0,
            "POLITENESS_RATE": 20,
            "MAX_IDLE_TIME_BEFORE_CLOSE": 2,
        }
        keys = FrontierKeys("links", "links:start_urls")
        with crawl.background("links", settings=settings) as worker:
            poll(
                lambda: act_on_job(redis_client, keys, "A").to_json()["paused_by"],
                60,
                "job A paused itself",
            )

            def b_whole() -> bool:
                return {p for _, p in web.arrivals[host_address(1)]} >= {
                    url.split(str(web.port), 1)[1] for url in pages["B"]
                }

            poll(b_whole, 60, "job B crawled whole")
            assert read_pause(redis_client, "links") is None
            status = _scrapy(crawl, "status", "links")
            assert "A paused (failure threshold: " in status.stdout, status.stdout
            poll(lambda: "answers of job A failed" in worker.log_text(), 10, "the log")
            assert worker.poll() is None, "the worker closed with job A paused"
            web.faults.clear()
            act_on_job(redis_client, keys, "A", "resume")
            assert worker.wait(180) == 0, worker.log_text()[-3000:]
        a_fetched = {p for _, p in web.arrivals[host_address(0)] if p != "/robots.txt"}
        assert a_fetched >= {url.split(str(web.port), 1)[1] for url in pages["A"]}
    assert redis_client.llen("{links}:dead") == 0
