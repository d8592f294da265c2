"""Hostile answers never stall a worker or blow up its memory: compressed pages are read as
pages, every lease is settled (retried, acked or dead-lettered with its reason) and the worker
closes."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import pytest
import redis
from scrapy import Request, Spider, signals
from scrapy.crawler import Crawler
from scrapy.exceptions import IgnoreRequest

from crawler import settings as project_settings
from crawler.bans.rules import Page, Verdict
from crawler.frontier.codec import expand
from sandbox.seed import build_dataset
from tests.harness import Crawl, Sandbox

pytestmark = pytest.mark.integration

DATASET = build_dataset()
OK_USERS = [author.unique_id for author in DATASET.authors if author.state == "ok"][:12]
# Quick to give up: a stalled worker shows as a timeout, not as a slow test.
QUICK = {"BAN_COOLDOWN": 1, "BAN_MAX_TIMES": 1, "RETRY_TIMES": 0, "EXPLORE_HANDOFF_SPIDER": ""}
TIMEOUT = 60


def _stats(client: redis.Redis, spider: str) -> dict[str, str]:
    raw = cast(dict[bytes, bytes], client.hgetall("{" + spider + "}:stats"))
    return {key.decode(): value.decode() for key, value in raw.items()}


def _dead(client: redis.Redis, spider: str) -> list[dict[str, Any]]:
    letters = [json.loads(raw) for raw in client.lrange("{" + spider + "}:dead", 0, -1)]
    return [{**letter, "request": expand(letter["request"])} for letter in letters]


def _assert_nothing_held(client: redis.Redis, spider: str) -> None:
    for name in ("queues", "leases", "delayed"):
        assert not client.exists("{" + spider + "}:" + name), f"{name} still holds work"
    assert not client.keys("{" + spider + "}:queue:*"), "a priority's list still holds work"


def _run(
    crawl: Crawl, spider: str, *args: str, settings: dict[str, Any], log: Path
) -> tuple[int, int]:
    """Run ``scrapy crawl`` to its end; (exit status, peak resident memory in MiB)."""
    peak = 0
    deadline = time.monotonic() + TIMEOUT
    with crawl.background(spider, *args, settings={**QUICK, **settings}, log=log) as worker:
        while worker.poll() is None:
            peak = max(peak, _peak_rss_kib(worker.pid))
            assert time.monotonic() < deadline, "the worker did not close: " + _tail(log)
            time.sleep(0.05)
    return worker.wait(), peak // 1024


def _peak_rss_kib(pid: int) -> int:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0
    for line in status.splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return 0


def _tail(log: Path) -> str:
    return log.read_text(errors="replace")[-3000:]


# --- compressed answers --------------------------------------------------------------------


def test_compressed_profile_pages_and_feeds_are_stored(
    crawl: Crawl, redis_client: redis.Redis, sandbox: Sandbox, tmp_path: Path
) -> None:
    assert sandbox.admin("config")["compression"] is True
    status, _ = _run(
        crawl,
        "profiles",
        "-a",
        "users=" + ",".join(OK_USERS),
        settings={},
        log=tmp_path / "profiles.log",
    )
    assert status == 0, _tail(tmp_path / "profiles.log")
    status, _ = _run(
        crawl,
        "explore",
        "-a",
        "categories=2",
        settings={"EXPLORE_MAX_PAGES": 1},
        log=tmp_path / "explore.log",
    )
    assert status == 0, _tail(tmp_path / "explore.log")

    assert set(crawl.mongo.db.profiles.distinct("unique_id")) == set(OK_USERS)
    assert crawl.mongo.db.videos.count_documents({}) > 0
    for spider in ("profiles", "explore"):
        stats = _stats(redis_client, spider)
        assert int(stats["httpcompression/response_count"]) >= 1, "nothing came compressed"
        assert "ban/count" not in stats
        assert _dead(redis_client, spider) == []


# --- answers that used to stall a worker ---------------------------------------------------


def test_a_redirect_loop_is_a_dead_letter_and_the_worker_closes(
    crawl: Crawl, redis_client: redis.Redis, sandbox: Sandbox, tmp_path: Path
) -> None:
    log = tmp_path / "crawl.log"
    status, _ = _run(
        crawl,
        "profiles",
        "-a",
        "users=loop.one,loop.two",
        settings={"PROFILES_BASE_URL": f"{sandbox.url}/hostile/redirect-loop"},
        log=log,
    )
    assert status == 0, _tail(log)
    letters = _dead(redis_client, "profiles")
    assert sorted(letter["request"]["url"].rsplit("/", 1)[1] for letter in letters) == [
        "@loop.one",
        "@loop.two",
    ]
    for letter in letters:
        assert letter["failure"]["reason"] == "response_ignored"
        assert "max redirections" in letter["failure"]["error"]
    _assert_nothing_held(redis_client, "profiles")


def exploding_rule(page: Page) -> Verdict | None:
    """A ban rule (BAN_RULES) that fails on every page."""
    raise RuntimeError(f"rule failed on {page.url}")


class DropRedirects:
    """An extension whose request_scheduled handler drops redirected requests: the request
    they stand for leaves the engine with nothing left to settle its lease."""

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> DropRedirects:
        extension = cls()
        crawler.signals.connect(extension.scheduled, signal=signals.request_scheduled)
        return extension

    def scheduled(self, request: Request, spider: Spider) -> None:
        if request.meta.get("redirect_times"):
            raise IgnoreRequest("redirects are not followed here")


# --- answers that each leave one dead letter -----------------------------------------------

# A worker crawling a handful of small pages peaks at about 130 MiB; one holding a body of
# 200 MiB, or 1 GiB decompressed, does not stay under this.
PEAK_RSS_MIB = 250


@dataclass(frozen=True)
class OneDeadLetter:
    """A crawl of ``spider`` given ``argument`` that sets one request aside for ``reason``."""

    spider: str
    argument: str
    path: str | None  # the sandbox's page under /hostile/ it reads, instead of its usual ones
    reason: str
    error: str = ""  # what the dead letter's error says
    settings: dict[str, Any] = field(default_factory=dict)
    bounded: bool = False  # the worker's peak memory stays under PEAK_RSS_MIB
    not_in_log: str = ""


ONE_DEAD_LETTER = [
    pytest.param(
        OneDeadLetter(
            "explore",
            "categories=2",
            "deep-json",
            "retries_exhausted:feed_malformed",
            not_in_log="RecursionError",
        ),
        id="deeply-nested-json",
    ),
    pytest.param(
        OneDeadLetter(
            "profiles",
            "users=" + OK_USERS[0],
            None,
            "response_error:RuntimeError",
            error="rule failed on",
            settings={"BAN_RULES": f"{__name__}.exploding_rule"},
        ),
        id="a-failing-ban-rule",
    ),
    pytest.param(
        OneDeadLetter(
            "profiles",
            "users=dropped.one",
            "redirect-loop",
            "unsettled",
            settings={
                "EXTENSIONS": json.dumps(
                    {**project_settings.EXTENSIONS, f"{__name__}.DropRedirects": 0}
                )
            },
        ),
        id="a-lease-nothing-settles",
    ),
    pytest.param(
        OneDeadLetter(
            "profiles",
            "users=bomb.one",
            "gzip-bomb",
            "response_ignored",
            error="DOWNLOAD_MAXSIZE",
            bounded=True,
        ),
        id="a-gzip-bomb",
    ),
    pytest.param(
        OneDeadLetter(
            "profiles",
            "users=huge.one",
            "huge",
            "download_error:DownloadCancelledError",
            bounded=True,
        ),
        id="a-huge-body",
    ),
]


@pytest.mark.parametrize("case", ONE_DEAD_LETTER)
def test_a_hostile_answer_is_one_dead_letter_and_the_worker_closes(
    crawl: Crawl,
    redis_client: redis.Redis,
    sandbox: Sandbox,
    tmp_path: Path,
    case: OneDeadLetter,
) -> None:
    log = tmp_path / "crawl.log"
    settings = dict(case.settings)
    if case.path is not None:
        settings[f"{case.spider.upper()}_BASE_URL"] = f"{sandbox.url}/hostile/{case.path}"
    status, peak = _run(crawl, case.spider, "-a", case.argument, settings=settings, log=log)
    assert status == 0, _tail(log)
    if case.not_in_log:
        assert case.not_in_log not in log.read_text()
    (letter,) = _dead(redis_client, case.spider)
    assert letter["failure"]["reason"] == case.reason
    if case.error:
        assert case.error in letter["failure"]["error"]
    if case.bounded:
        assert peak < PEAK_RSS_MIB
    _assert_nothing_held(redis_client, case.spider)


# --- a cool-down asked for ten years -------------------------------------------------------


def test_a_retry_after_of_ten_years_is_capped(
    crawl: Crawl, redis_client: redis.Redis, sandbox: Sandbox, tmp_path: Path
) -> None:
    log = tmp_path / "crawl.log"
    started = time.time()
    status, _ = _run(
        crawl,
        "profiles",
        "-a",
        "users=patient.one",
        settings={
            "PROFILES_BASE_URL": f"{sandbox.url}/hostile/retry-after",
            "BAN_COOLDOWN_MAX": 2,
        },
        log=log,
    )
    assert status == 0, _tail(log)
    (letter,) = _dead(redis_client, "profiles")
    assert letter["failure"]["reason"] == "banned:http_429"
    # BAN_MAX_TIMES (1): banned once, the request is a dead letter, not sent again.
    asked = [
        entry
        for entry in sandbox.admin("stats")["requests"]
        if entry["path"].startswith("/hostile/retry-after/")
    ]
    assert len(asked) == QUICK["BAN_MAX_TIMES"], asked
    bans = cast(dict[bytes, bytes], redis_client.hgetall("{profiles}:bans"))
    assert bans, "no cool-down recorded"
    assert all(float(until) <= time.time() + 2 for until in bans.values())
    assert all(float(until) >= started for until in bans.values())
