"""Recrawl on real servers: a ``scrapy crawl profiles`` process revisits the sandbox's
changing profiles (sandbox/churn.py) with intervals compressed to seconds.

Freshness: a hot document is *fresh* at a check when MongoDB holds the version the sandbox
served ``TOLERANCE`` seconds before the check, or a newer one (the sandbox's change log is a
clock: each document's version is a function of time). Hot documents change every
``HOT_PERIOD`` seconds, so no schedule can hold them exactly fresh; the tolerance is four such
periods, and the minimum interval (what a user asking for that tolerance would set) well under
half of it.
"""

from __future__ import annotations

import json
import math
import statistics
import time
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from crawler.frontier.dupefilter import DupefilterConfig
from crawler.frontier.queue import Frontier
from crawler.keys import FrontierKeys, pause_key
from tests.harness import MONGO_PAUSE, Crawl, Mongo, Sandbox, Worker, poll

HOT, COLD = 20, 180
HOT_PERIOD = 0.75
TOLERANCE = 4 * HOT_PERIOD
# Cold pages' waits double from 2 s: by the end of the warm-up they wait 16 s and more.
WARM_UP = 20.0
RUN = 52.0
MIN_INTERVAL = 1.25
RECRAWL = {
    "RECRAWL_INITIAL_INTERVAL": 2,
    "RECRAWL_MIN_INTERVAL": MIN_INTERVAL,
    "RECRAWL_MAX_INTERVAL": 32,
    "RECRAWL_POLL_INTERVAL": 0.05,
    "FRONTIER_FLUSH_INTERVAL": 0.05,
    "FRONTIER_LEASE_SECONDS": 5,
    "MONGO_FLUSH_INTERVAL": 0.1,
    "MAX_IDLE_TIME_BEFORE_CLOSE": 0,
    # The shipped idle poll (the test harness looks every 0.2 s to close crawls sooner).
    "IDLE_POLL_INTERVAL": 1,
    "LOG_LEVEL": "INFO",
}


@dataclass
class Workers:
    crawl: Crawl
    logs: Path
    running: list[Worker] = field(default_factory=list)
    started: ExitStack = field(default_factory=ExitStack)

    def start(self, *args: str, **settings: Any) -> Worker:
        log = self.logs / f"worker{len(self.running)}.log"
        background = self.crawl.background(
            "profiles", *args, settings={**RECRAWL, **settings}, log=log
        )
        worker = self.started.enter_context(background)
        self.running.append(worker)
        return worker

    def log(self, index: int) -> str:
        return self.running[index].log_text()

    def stop(self) -> None:
        for worker in self.running:
            worker.terminate()
        for worker in self.running:
            worker.stop(20)
        self.started.close()


@pytest.fixture
def workers(crawl: Crawl, tmp_path: Path) -> Iterator[Workers]:
    team = Workers(crawl, tmp_path)
    yield team
    team.stop()


def _churn(sandbox: Sandbox) -> dict[str, Any]:
    churn: dict[str, Any] = sandbox.admin(
        "churn", {"hot": HOT, "cold": COLD, "hot_period": HOT_PERIOD, "cold_period": 3600}
    )
    return churn


def _stored_versions(mongo: Mongo, users: list[str]) -> dict[str, int]:
    found = mongo.db.profiles.find(
        {"unique_id": {"$in": users}}, {"unique_id": 1, "follower_count": 1}
    )
    return {doc["unique_id"]: int(doc["follower_count"]) - 1000 for doc in found}


def _live_version(document: dict[str, Any], started: float, moment: float) -> int:
    period, phase = float(document["period"]), float(document["phase"])
    return math.floor((moment - started) / period + phase)


def _fresh_share(mongo: Mongo, churn: dict[str, Any], hot: list[str]) -> float:
    """The share of hot documents MongoDB holds fresh now (see the module's docstring)."""
    moment = time.time()
    stored = _stored_versions(mongo, hot)
    fresh = sum(
        stored.get(uid, -(10**9))
        >= _live_version(churn["documents"][uid], churn["started"], moment - TOLERANCE)
        for uid in hot
    )
    return fresh / len(hot)


def _strict_share(mongo: Mongo, churn: dict[str, Any], hot: list[str]) -> float:
    moment = time.time()
    stored = _stored_versions(mongo, hot)
    live = {uid: _live_version(churn["documents"][uid], churn["started"], moment) for uid in hot}
    return sum(stored.get(uid) == live[uid] for uid in hot) / len(hot)


def _intervals(redis_client: Any) -> dict[str, float]:
    """The interval of each waiting revisit, by user."""
    found = {}
    for raw in redis_client.hvals("{profiles}:revisit:data"):
        request = json.loads(raw)
        found[request["url"].rsplit("@", 1)[1]] = request["meta"]["recrawl"]["interval"]
    return found


def _fetches(sandbox: Sandbox) -> dict[str, int]:
    documents = sandbox.admin("churn")["documents"]
    return {uid: document["fetches"] for uid, document in documents.items()}


def fixed_interval_for(freshness: float, period: float, tolerance: float) -> float:
    """The longest interval a fixed schedule (every document alike, no write latency) can use
    and keep ``freshness`` of documents changing every ``period`` fresh within ``tolerance``.

    A document fetched ``a`` seconds ago (uniform in [0, I)), whose next change after that
    fetch came ``b`` seconds after it (uniform in (0, period]), is stale when a >= tolerance + b.
    """
    steps = 400
    interval = tolerance
    while True:
        candidate = interval + period / 100
        stale = (
            sum(
                max(0.0, candidate - tolerance - period * (j + 0.5) / steps) / candidate
                for j in range(steps)
            )
            / steps
        )
        if stale > 1 - freshness:
            return interval
        interval = candidate


def test_fixed_interval_model() -> None:
    # Within the tolerance nothing is stale; far beyond it almost everything is.
    assert fixed_interval_for(1.0, 0.5, 1.5) == pytest.approx(1.5, abs=0.01)
    assert 1.5 < fixed_interval_for(0.9, 0.5, 1.5) < 2.2


def test_hot_documents_are_revisited_often_and_stay_fresh_cold_ones_rarely(
    workers: Workers, sandbox: Sandbox, mongo: Mongo, redis_client: Any
) -> None:
    churn = _churn(sandbox)
    hot = [uid for uid, doc in churn["documents"].items() if doc["hot"]]
    cold = [uid for uid, doc in churn["documents"].items() if not doc["hot"]]
    workers.start("-a", "users=" + ",".join(hot + cold))
    poll(
        lambda: mongo.db.profiles.count_documents({}) == HOT + COLD,
        timeout=90,
        what="every profile stored once",
        pause=MONGO_PAUSE,
    )
    started = time.monotonic()
    poll(lambda: time.monotonic() - started >= WARM_UP, timeout=WARM_UP + 1, pause=0.2)
    before = _fetches(sandbox)
    window_start = time.monotonic()
    checks: list[float] = []
    strict: list[float] = []

    def checked_enough() -> bool:
        checks.append(_fresh_share(mongo, churn, hot))
        strict.append(_strict_share(mongo, churn, hot))
        return time.monotonic() - window_start >= RUN - WARM_UP

    poll(checked_enough, timeout=RUN + 30, what="the run", pause=0.5)
    window = time.monotonic() - window_start
    after = _fetches(sandbox)
    hot_fetches = sum(after[uid] - before[uid] for uid in hot) / len(hot)
    cold_fetches = sum(after[uid] - before[uid] for uid in cold) / len(cold)
    adaptive = sum(after[uid] - before[uid] for uid in after)
    mean_fresh = sum(checks) / len(checks)
    interval = fixed_interval_for(mean_fresh, HOT_PERIOD, TOLERANCE)
    fixed = (HOT + COLD) * window / interval
    whole_hot = sum(after[uid] for uid in hot) / len(hot)
    whole_cold = sum(after[uid] for uid in cold) / len(cold)
    print(
        f"\nwindow {window:.1f}s: hot {hot_fetches:.1f} fetches/doc, cold {cold_fetches:.2f} "
        f"({hot_fetches / max(cold_fetches, 1e-9):.1f}x); whole run hot {whole_hot:.1f}, cold "
        f"{whole_cold:.2f} ({whole_hot / whole_cold:.1f}x); fresh within {TOLERANCE}s: min "
        f"{min(checks):.0%} mean {mean_fresh:.1%} over {len(checks)} checks; strictly fresh "
        f"mean {sum(strict) / len(strict):.1%}; fetches {adaptive} vs fixed every "
        f"{interval:.2f}s {fixed:.0f} ({adaptive / fixed:.0%})"
    )
    assert hot_fetches >= 10 * cold_fetches
    # Most checks find the hot documents fresh; a few may not, when the tests running beside
    # this one hold the worker's process off the cores for a few seconds.
    assert statistics.median(checks) >= 0.95, checks
    assert mean_fresh >= 0.9, checks
    assert adaptive <= 0.4 * fixed
    assert mongo.db.profiles.count_documents({}) == HOT + COLD  # no duplicates
    # Changed pages wait the minimum; unchanged ones have doubled their wait several times.
    intervals = _intervals(redis_client)
    revisit_bytes = sum(
        int(redis_client.memory_usage(key, samples=0))
        for key in ("{profiles}:revisit", "{profiles}:revisit:data")
    )
    print(f"Redis: {revisit_bytes / len(intervals):.0f} bytes per waiting revisit")
    assert all(intervals[uid] <= MIN_INTERVAL for uid in hot if uid in intervals)
    assert all(intervals[uid] >= 8 for uid in cold if uid in intervals)
    # The others are in the frontier right now (hot pages spend about half their time there).
    assert sum(uid in intervals for uid in cold) >= 0.9 * COLD
    assert any(uid in intervals for uid in hot)
    history = {doc["unique_id"]: doc for doc in mongo.db.profiles.find()}
    assert all(history[uid]["change_count"] >= 10 for uid in hot)
    # Cold pages change once an hour: the few whose change fell within the run count one.
    assert all(history[uid]["change_count"] <= 1 for uid in cold)
    unchanged = [uid for uid in cold if history[uid]["change_count"] == 0]
    assert len(unchanged) >= 0.9 * COLD
    assert all(history[uid]["last_changed"] == history[uid]["first_seen"] for uid in unchanged)
    assert workers.running[0].poll() is None, workers.log(0)[-3000:]


def test_revisits_survive_a_killed_worker(
    workers: Workers, sandbox: Sandbox, mongo: Mongo, redis_client: Any
) -> None:
    """A worker killed with SIGKILL mid-crawl loses no revisit: the next worker revisits
    every page (claimed revisits and leased pages come back after the lease), and no page
    is stored twice."""
    churn = sandbox.admin("churn", {"hot": 5, "cold": 15, "hot_period": HOT_PERIOD})
    users = sorted(churn["documents"])
    fast = {"RECRAWL_INITIAL_INTERVAL": MIN_INTERVAL, "RECRAWL_MAX_INTERVAL": 4}
    first = workers.start("-a", "users=" + ",".join(users), **fast)
    poll(
        lambda: mongo.db.profiles.count_documents({"change_count": {"$gte": 2}}) >= 5,
        timeout=40,
        what="hot profiles revisited",
        pause=MONGO_PAUSE,
    )
    first.kill()
    killed_at = datetime.now(UTC).replace(tzinfo=None)
    workers.start(**fast)  # no start entries: everything comes from Redis
    poll(
        lambda: mongo.db.profiles.count_documents({"last_seen": {"$gt": killed_at}}) == 20,
        timeout=60,
        what="every profile revisited after the kill",
        pause=MONGO_PAUSE,
    )
    assert mongo.db.profiles.count_documents({}) == 20
    assert set(_intervals(redis_client)) <= set(users)


def test_a_paused_crawl_queues_no_copies_of_its_due_revisits(
    workers: Workers, sandbox: Sandbox, mongo: Mongo, redis_client: Any
) -> None:
    """Paused longer than twice the pages' intervals, a worker hands the frontier no revisit:
    before, each one due was claimed, queued (where it waited, the crawl paused) and due again
    twice its interval later, so a long pause queued copy after copy of every page."""
    churn = sandbox.admin("churn", {"hot": 4, "cold": 0, "hot_period": HOT_PERIOD})
    users = sorted(churn["documents"])
    fast = {"RECRAWL_INITIAL_INTERVAL": MIN_INTERVAL, "RECRAWL_MAX_INTERVAL": 2}
    workers.start("-a", "users=" + ",".join(users), **fast)
    poll(
        lambda: mongo.db.profiles.count_documents({}) == len(users),
        timeout=40,
        what="every profile stored",
        pause=MONGO_PAUSE,
    )
    redis_client.hset(pause_key("profiles"), mapping={"since": time.time(), "by": "test"})
    until = time.time() + 2 + 3 * 2 * fast["RECRAWL_MAX_INTERVAL"]  # seen, then 3 fallbacks
    poll(lambda: time.time() > until, until - time.time() + 5, "the pause's time", pause=0.2)
    keys = FrontierKeys("profiles", "profiles:start_urls")
    sizes = Frontier(redis_client, keys, DupefilterConfig(mode="none")).sizes()
    assert sizes["queue"] + sizes["delayed"] + sizes["leased"] <= len(users), sizes
