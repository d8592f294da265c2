"""The failure threshold: once most of the fleet's last answers failed, the crawl pauses itself
and says why, and goes on, losing nothing, once resumed."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from crawler.bans.failures import answers_since
from crawler.frontier.lua import FAILURES
from crawler.frontier.pause import read_pause
from crawler.keys import failure_window_key, pause_key
from sandbox.seed import build_dataset
from tests.harness import ROOT, Crawl, Sandbox, poll

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
        status = subprocess.run(
            [sys.executable, "-m", "scrapy", "status"],
            cwd=ROOT,
            env=crawl.env(),
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert "failure threshold" in status.stdout, status.stdout + status.stderr
        assert worker.poll() is None, "a paused worker closed"
        sandbox.admin("config", {"faults": {"error_rate": 0.0}})
        redis_client.delete(pause_key("profiles"))
        assert worker.wait(180) == 0, worker.log_text()[-3000:]
    stored = [doc["unique_id"] for doc in crawl.mongo.db.profiles.find({}, {"unique_id": 1})]
    assert sorted(stored) == sorted(USERS)
    assert redis_client.llen("{profiles}:dead") == 0
