"""Pausing a fleet: ``scrapy frontier SPIDER pause|resume`` and the ``{spider}:paused`` key."""

from __future__ import annotations

import json
import subprocess
import time
import unicodedata
import urllib.request
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from crawler.control.pause import pause_crawl, read_pause, resume_crawl
from crawler.frontier.pause import MAX_TEXT, Pause, clean_text
from crawler.keys import pause_key
from devtools.services import free_port
from sandbox.hosts import fetched_pages, host_address, site_pages
from sandbox.seed import build_dataset
from tests.harness import Crawl, Sandbox, Worker, poll, scrapy, served_hosts

KEY = pause_key("profiles")


def _scrapy(crawl: Crawl, *args: str) -> subprocess.CompletedProcess[str]:
    return scrapy(*args, env=crawl.env())


# --- the text a pause carries ----------------------------------------------------------------


@given(st.text())
def test_a_reason_is_kept_as_one_clean_line(text: str) -> None:
    cleaned = clean_text(text)
    assert len(cleaned) <= MAX_TEXT
    assert cleaned == cleaned.strip()
    assert "  " not in cleaned
    assert all(unicodedata.category(char)[0] not in "CZ" or char == " " for char in cleaned)
    assert clean_text(cleaned) == cleaned
    cleaned.encode("utf-8")  # storable as Redis holds it


@given(st.text(st.characters(codec="utf-8", categories=["L", "N", "P", "S"]), max_size=MAX_TEXT))
def test_a_plain_reason_is_kept_as_written(text: str) -> None:
    assert clean_text(text) == text


@given(st.dictionaries(st.binary(max_size=12), st.binary(max_size=40)))
def test_any_hash_another_tool_wrote_reads_as_a_pause(raw: dict[bytes, bytes]) -> None:
    pause = Pause.from_hash(raw)
    assert pause.since is None or 0 <= pause.since < 1e11
    assert pause.describe().startswith("paused since ")


@settings(max_examples=40, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(by=st.text(max_size=400), reason=st.text(max_size=400))
def test_pause_and_resume_round_trip_through_redis(
    redis_client: redis.Redis, by: str, reason: str
) -> None:
    redis_client.delete(KEY)
    before = time.time()
    written = pause_crawl(redis_client, "profiles", by, reason)
    assert written == Pause(written.since, clean_text(by), clean_text(reason))
    assert written.since is not None
    assert before - 0.01 <= written.since <= time.time() + 0.01
    assert read_pause(redis_client, "profiles") == written
    again = pause_crawl(redis_client, "profiles", "other", "later")
    assert again.since == written.since  # paused since the first pause
    assert resume_crawl(redis_client, "profiles") == again
    assert read_pause(redis_client, "profiles") is None
    assert resume_crawl(redis_client, "profiles") is None


def test_any_value_of_the_key_pauses(redis_client: redis.Redis) -> None:
    redis_client.set(KEY, "1")
    pause = read_pause(redis_client, "profiles")
    assert pause is not None
    assert "is not a hash" in pause.reason
    assert resume_crawl(redis_client, "profiles") is not None
    assert not redis_client.exists(KEY)
    redis_client.hset(KEY, mapping={"since": "soon", "by": "ops\n", "reason": "db\tupgrade"})
    assert read_pause(redis_client, "profiles") == Pause(None, "ops", "db upgrade")


# --- the commands ----------------------------------------------------------------------------


@pytest.mark.integration
def test_pause_and_resume_commands_and_status(crawl: Crawl, redis_client: redis.Redis) -> None:
    paused = _scrapy(
        crawl, "frontier", "profiles", "pause", "--reason", "db upgrade\n(ticket 7)", "--by", "ops"
    )
    assert paused.returncode == 0, paused.stderr
    assert "profiles paused since " in paused.stdout
    assert "by ops (db upgrade (ticket 7))" in paused.stdout
    fields = redis_client.hgetall(KEY)
    assert fields[b"by"] == b"ops"
    assert fields[b"reason"] == b"db upgrade (ticket 7)"
    since = float(fields[b"since"])

    shown = _scrapy(crawl, "frontier", "profiles")
    assert shown.returncode == 0, shown.stderr
    assert "paused since" in shown.stdout
    assert "(db upgrade (ticket 7))" in shown.stdout
    as_json = json.loads(_scrapy(crawl, "frontier", "profiles", "--json").stdout)
    assert as_json["paused"] == {"since": since, "by": "ops", "reason": "db upgrade (ticket 7)"}

    status = _scrapy(crawl, "status", "profiles")
    assert status.returncode == 0, status.stderr
    when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(since))
    assert f"PAUSED    paused since {when} by ops (db upgrade (ticket 7))" in status.stdout
    report = json.loads(_scrapy(crawl, "status", "profiles", "--json").stdout)
    assert report["spiders"]["profiles"]["paused"]["reason"] == "db upgrade (ticket 7)"

    wrong = _scrapy(crawl, "frontier", "profiles", "status", "--reason", "x")
    assert wrong.returncode != 0
    assert "--reason and --by go with pause" in wrong.stderr

    resumed = _scrapy(crawl, "frontier", "profiles", "resume")
    assert resumed.returncode == 0, resumed.stderr
    assert "profiles resumed (was paused since" in resumed.stdout
    assert not redis_client.exists(KEY)
    assert "was not paused" in _scrapy(crawl, "frontier", "profiles", "resume").stdout
    status = _scrapy(crawl, "status", "profiles")
    assert "PAUSED" not in status.stdout


# --- a fleet ---------------------------------------------------------------------------------

DATASET = build_dataset()
MISSING = [f"missing.user{index}" for index in range(60)]
USERS = [author.unique_id for author in DATASET.authors[::2]] + MISSING
# 3 workers of 2 requests at once against answers 0.25 s late: about 24 pages a second, so the
# crawl of 210 profiles is well under way, not over, when it is paused.
LATENCY = 0.25
WORKER = {
    "FRONTIER_LEASE_SECONDS": 5,
    "START_BATCH_SIZE": 20,
    "CONCURRENT_REQUESTS": 2,
    "MAX_IDLE_TIME_BEFORE_CLOSE": 2,
}
# The sandbox stamps a request as it starts handling it, on the same clock as the test.
SLACK = 0.05


def _arrivals(sandbox: Sandbox) -> list[tuple[float, str]]:
    """(arrival time, path) of every profile request the sandbox answered."""
    served = sandbox.admin("stats")["requests"]
    return [(entry["arrived"], entry["path"]) for entry in served if entry["path"].startswith("/@")]


@pytest.mark.integration
@pytest.mark.parametrize("killed", [False, True], ids=["all_resume", "one_killed_while_paused"])
def test_a_paused_fleet_sends_nothing_loses_nothing_and_closes_after_resume(
    crawl: Crawl, redis_client: redis.Redis, sandbox: Sandbox, tmp_path: Path, killed: bool
) -> None:
    """Three workers paused mid-crawl; with ``killed``, one of them is killed (-9) while paused:
    what it held comes back once its leases expire, and the two others take it after the
    resume."""
    sandbox.admin("config", {"latency_ms": int(LATENCY * 1000)})
    redis_client.lpush("profiles:start_urls", *(json.dumps({"unique_id": u}) for u in USERS))
    logs = [tmp_path / f"worker-{index}.log" for index in range(3)]
    with ExitStack() as running:
        workers = [
            running.enter_context(crawl.background("profiles", settings=WORKER, log=log))
            for log in logs
        ]
        poll(lambda: crawl.mongo.db.profiles.count_documents({}) >= 40, 60, "progress")
        paused_at = time.time()
        redis_client.hset(KEY, mapping={"since": paused_at, "by": "test", "reason": "check"})
        # Paused longer than a lease (5 s): leases held are renewed, none comes back.
        poll(lambda: time.time() > paused_at + 8, 20, "the pause to last", pause=0.2)
        stored_while_paused = crawl.mongo.db.profiles.count_documents({})
        assert stored_while_paused < len(USERS), "the crawl ended before the pause"
        for log in logs:
            assert "paused since" in log.read_text(), log.read_text()[-3000:]
        assert all(worker.poll() is None for worker in workers), "a paused worker closed"
        if killed:
            workers[0].kill()
        resumed_at = time.time()
        redis_client.delete(KEY)
        for worker, log in list(zip(workers, logs, strict=True))[killed:]:
            assert worker.wait(120) == 0, log.read_text()[-3000:]

    arrivals = _arrivals(sandbox)
    during = [path for when, path in arrivals if paused_at + 2 + SLACK < when < resumed_at]
    assert during == [], f"{len(during)} requests reached the site while paused"
    after = sorted(when for when, _ in arrivals if when >= resumed_at)
    assert after, "nothing was fetched after the resume"
    assert after[0] - resumed_at < 2.0 + SLACK, "the fleet went on late"
    # Nothing lost, nothing fetched twice: each profile once at the site and in MongoDB.
    paths = [path for _, path in arrivals]
    assert sorted(paths) == sorted(f"/@{user}" for user in USERS)
    stored = [doc["unique_id"] for doc in crawl.mongo.db.profiles.find({}, {"unique_id": 1})]
    assert sorted(stored) == sorted(USERS)
    assert redis_client.zcard("{profiles}:leases") == 0
    assert redis_client.llen("{profiles}:dead") == 0
    for log in logs[killed:]:
        assert "resumed after" in log.read_text()


def _scrape(port: int) -> str | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as answer:
            return str(answer.read().decode())
    except OSError:
        return None


@pytest.mark.integration
def test_a_paused_idle_fleet_stays_open_and_shows_why(
    crawl: Crawl, redis_client: redis.Redis, sandbox: Sandbox, tmp_path: Path
) -> None:
    redis_client.hset(KEY, mapping={"since": time.time(), "by": "ops", "reason": "quiet hours"})
    redis_client.lpush("profiles:start_urls", json.dumps({"unique_id": USERS[0]}))
    port = free_port()
    log = tmp_path / "worker.log"
    settings = {"MAX_IDLE_TIME_BEFORE_CLOSE": 1, "METRICS_PORT": port}
    with crawl.background("profiles", settings=settings, log=log) as worker:
        page = poll(lambda: _scrape(port), 30, "the metrics endpoint")
        assert 'crawler_paused{spider="profiles"} 1.0' in page
        assert 'crawler_pause_info{by="ops",reason="quiet hours",spider="profiles"} 1.0' in page
        opened = time.monotonic()
        # Idle for far longer than MAX_IDLE_TIME_BEFORE_CLOSE: still open, nothing read.
        poll(lambda: time.monotonic() > opened + 5, 10, "a while", pause=0.2)
        assert worker.poll() is None, log.read_text()[-3000:]
        assert redis_client.llen("profiles:start_urls") == 1, "a start entry was read"
        assert sandbox.admin("stats")["total"] == 0
        # Waiting for the resume is not busy time (the autoscaler's pace per busy second).
        stats = "{profiles}:stats"
        poll(
            lambda: int(redis_client.hget(stats, "frontier/pause_reads") or 0) >= 5,
            30,
            "a stats publish 5 s into the pause",
        )
        assert int(redis_client.hget(stats, "fleet/busy_ms") or 0) < 2000
        resumed = time.monotonic()
        redis_client.delete(KEY)
        assert worker.wait(60) == 0, log.read_text()[-3000:]
        assert time.monotonic() - resumed < 30
    assert crawl.mongo.db.profiles.count_documents({}) == 1
    assert "resumed after" in log.read_text()


# --- any sequence of pause, resume, kill and start ----------------------------------------------

SEQUENCE_USERS = USERS[:200]
# Steps: a pause holds 3 s before the next step (so each has a stretch past its first 2 s to
# check); the others hold 0.3, 1 or 2.5 s. At least one pause.
Step = tuple[str, float]
steps = st.lists(
    st.one_of(
        st.just(("pause", 3.0)),
        st.tuples(st.sampled_from(["resume", "kill", "start"]), st.sampled_from([0.3, 1.0, 2.5])),
    ),
    min_size=2,
    max_size=5,
).filter(lambda sequence: ("pause", 3.0) in sequence)


def _wait(seconds: float) -> None:
    """Let the fleet run ``seconds`` before the next step of a sequence."""
    until = time.time() + seconds
    poll(lambda: time.time() > until, seconds + 5, "the step's time", pause=0.1)


class Fleet:
    """Workers started and killed (-9) as a sequence says, and the times the crawl was paused."""

    def __init__(self, crawl: Crawl, redis_client: redis.Redis, stack: ExitStack, logs: Path):
        self.crawl, self.redis, self.stack, self.logs = crawl, redis_client, stack, logs
        self.workers: list[Worker] = []
        self.paused: list[list[float]] = []  # [since, until] of each pause, until inf while on
        self.paused_with_work = 0  # pauses that began before the last profile was stored

    def start(self) -> None:
        log = self.logs / f"worker-{len(self.workers)}.log"
        self.workers.append(
            self.stack.enter_context(self.crawl.background("profiles", settings=WORKER, log=log))
        )

    def alive(self) -> list[Worker]:
        return [worker for worker in self.workers if worker.poll() is None]

    def do(self, action: str) -> None:
        now = time.time()
        if action == "pause":
            self.redis.hset(KEY, mapping={"since": now, "by": "test", "reason": "sequence"})
            if not self.paused or self.paused[-1][1] < now:
                self.paused.append([now, float("inf")])
                stored = self.crawl.mongo.db.profiles.count_documents({})
                self.paused_with_work += stored < len(SEQUENCE_USERS)
        elif action == "resume":
            self.redis.delete(KEY)
            if self.paused and self.paused[-1][1] > now:
                self.paused[-1][1] = now
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
@given(sequence=steps)
def test_any_sequence_of_pause_resume_kill_and_start_loses_nothing(
    crawl: Crawl, redis_client: redis.Redis, sandbox: Sandbox, tmp_path_factory: Any,
    sequence: list[Step],
) -> None:  # fmt: skip
    """Two workers crawling; then pauses, resumes, kills (-9) and new workers in any order;
    then a resume and a worker if none is left. No request reaches the site from 2 s into a
    pause until its resume, every profile is stored once, and the fleet closes with nothing
    leased nor dead."""
    redis_client.flushdb()
    crawl.mongo.db.profiles.drop()
    sandbox.admin("reset", {})
    sandbox.admin("config", {"latency_ms": int(LATENCY * 1000)})
    redis_client.lpush(
        "profiles:start_urls", *(json.dumps({"unique_id": u}) for u in SEQUENCE_USERS)
    )
    with ExitStack() as stack:
        fleet = Fleet(crawl, redis_client, stack, tmp_path_factory.mktemp("sequence"))
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
    arrivals = _arrivals(sandbox)
    during = [
        (round(when - since, 2), path)
        for since, until in fleet.paused
        for when, path in arrivals
        if since + 2 + SLACK < when < until
    ]
    assert during == [], f"requests reached the site while paused: {during[:5]}"
    assert fleet.paused_with_work, "every pause came after the crawl's end"
    stored = [doc["unique_id"] for doc in crawl.mongo.db.profiles.find({}, {"unique_id": 1})]
    assert sorted(stored) == sorted(SEQUENCE_USERS)
    assert {path for _, path in arrivals} == {f"/@{user}" for user in SEQUENCE_USERS}
    assert redis_client.zcard("{profiles}:leases") == 0
    assert redis_client.llen("{profiles}:dead") == 0


def test_a_links_worker_told_to_go_while_paused_exits_at_once_and_loses_nothing(
    crawl: Crawl, redis_client: redis.Redis, tmp_path: Path
) -> None:
    """Paused as it starts on 200 sites, a worker holds robots.txt requests no page waits for
    in its downloader; told to go (what an autoscaler does to a paused crawl's workers), it
    gives them up to be asked again and exits 0 at once, instead of waiting for a resume. A
    worker started after the resume fetches every page."""
    settings = {"LINKS_SCOPE": "host", "LINKS_SITEMAPS": False, "MAX_IDLE_TIME_BEFORE_CLOSE": 0}
    with served_hosts(200, 2) as web:
        homes = [f"http://{host_address(h)}:{web.port}/" for h in range(200)]
        first = tmp_path / "first.log"
        with crawl.background("links", settings=settings, log=first) as worker:
            redis_client.lpush("links:start_urls", *homes)
            poll(lambda: len(web.arrivals) >= 1, 60, "the first arrival")
            assert _scrapy(crawl, "frontier", "links", "pause").returncode == 0
            poll(lambda: "Crawl of links paused" in first.read_text(), 30, "the pause seen")
            worker.terminate()
            assert worker.wait(20) == 0, first.read_text()[-3000:]
        assert redis_client.zcard("{links}:leases") == 0
        assert redis_client.zcard("{links:start_urls}:leases") == 0
        assert _scrapy(crawl, "frontier", "links", "resume").returncode == 0
        settings["MAX_IDLE_TIME_BEFORE_CLOSE"] = 1
        with crawl.background("links", settings=settings, log=tmp_path / "second.log") as again:
            assert again.wait(120) == 0, (tmp_path / "second.log").read_text()[-3000:]
        assert site_pages(200, 2, web.port) <= fetched_pages(dict(web.arrivals))
