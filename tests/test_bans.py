"""Crawls of a sandbox that bans: nothing banned is stored, nothing is lost, cool-downs hold.

Every ban mode of the sandbox goes through the same handling once it is recognised (cool-down
for the fleet, request back to the delayed set): each mode's answer is checked against that
handling on a real Redis below, and three modes are crawled end to end, one per way a ban
reaches the middleware (a status with Retry-After, a redirect, a 200 that is not the page).
"""

from __future__ import annotations

import asyncio
import json
import time
from contextlib import ExitStack
from typing import Any, cast

import pytest
import redis
from scrapy import Request
from scrapy.http import Response
from scrapy.utils.test import get_crawler

from crawler.bans.policy import BAN_TIMES_META
from crawler.frontier.dupefilter import DupefilterConfig
from crawler.frontier.queue import Frontier
from crawler.frontier.records import passes_again
from crawler.keys import FrontierKeys
from crawler.meta import DUE_META
from crawler.middlewares import BanMiddleware
from crawler.spiders.profiles import ProfilesSpider
from sandbox.bans import CONCRETE_MODES
from sandbox.seed import build_dataset
from tests.harness import Crawl, Sandbox
from tests.test_ban_rules import _sandbox_answer, _settings

pytestmark = pytest.mark.integration

DATASET = build_dataset()
USERS = sorted(DATASET.popular_authors(categories=[1, 2]))[:24]
BAN_SECONDS = 3
# One mode per way a ban reaches the middleware: a status with Retry-After, a redirect to a
# challenge, a 200 whose page is a challenge (caught by the spider's own rule).
END_TO_END_MODES = ("429", "captcha_redirect", "json_error")
# The sandbox's ban answers say 43 s are left (Retry-After of the 429): more than BAN_COOLDOWN.
COOLDOWN = 30.0


def _stats(client: redis.Redis, spider: str) -> dict[str, str]:
    raw = cast(dict[bytes, bytes], client.hgetall("{" + spider + "}:stats"))
    return {key.decode(): value.decode() for key, value in raw.items()}


def _ban_sandbox(sandbox: Sandbox, mode: str, **faults: Any) -> None:
    sandbox.admin(
        "config",
        {
            "rate_limit": {
                "enabled": True,
                "max_requests": 8,
                "window_seconds": 60,
                "ban_seconds": BAN_SECONDS,
                "ban_mode": mode,
            },
            "faults": faults,
        },
    )


def _assert_cooldowns_respected(sandbox: Sandbox, concurrency: int) -> None:
    """Once banned, a client stops: per ban at most the requests already in flight got a ban
    answer, instead of every request sent until the ban ended."""
    bans = sandbox.admin("stats")["bans"]
    assert bans["issued"] >= 1
    assert bans["responses"] <= bans["issued"] * (concurrency + 1), bans


def _worker(redis_url: str) -> BanMiddleware:
    """The BanMiddleware of one profiles worker of a fleet sharing ``redis_url``."""
    settings = {**_settings(), "REDIS_URL": redis_url, "BAN_COOLDOWN": COOLDOWN}
    crawler = get_crawler(ProfilesSpider, settings_dict=settings)
    crawler.spider = crawler._create_spider()
    return BanMiddleware.from_crawler(crawler)


@pytest.mark.parametrize("mode", CONCRETE_MODES)
def test_every_ban_mode_cools_the_fleet_down_and_keeps_the_request(
    mode: str, redis_url: str, redis_client: redis.Redis
) -> None:
    banned, other = _worker(redis_url), _worker(redis_url)
    request = Request("https://www.tiktok.com/@some.user")
    before = time.time()
    answer = _sandbox_answer(mode, "/@some.user")

    again = asyncio.run(banned.process_response(request, answer))
    # Not passed on as data, not dropped: the request waits out the cool-down in the frontier.
    assert isinstance(again, Request)
    assert (again.url, again.dont_filter) == (request.url, True)  # past any duplicate filter
    assert passes_again(again)  # the frontier's: once, for its own URL only
    assert not again.dont_filter  # its record keeps its own
    assert again.meta[BAN_TIMES_META] == 1
    assert again.meta[DUE_META] >= before + COOLDOWN
    stats = banned.crawler.stats
    assert stats is not None
    assert stats.get_value("ban/count") == 1
    # Every worker pauses the domain: another worker's next request there waits too.
    assert redis_client.hexists("{profiles}:bans", "www.tiktok.com")
    deferred = asyncio.run(other.process_request(Request("https://www.tiktok.com/@other.user")))
    assert isinstance(deferred, Request)
    assert deferred.meta[DUE_META] >= before + COOLDOWN


@pytest.mark.parametrize("mode", END_TO_END_MODES)
def test_ban_modes_end_with_every_profile_stored(
    mode: str, crawl: Crawl, redis_client: redis.Redis, sandbox: Sandbox
) -> None:
    _ban_sandbox(sandbox, mode)
    redis_client.lpush("profiles:start_urls", *(json.dumps({"unique_id": u}) for u in USERS))
    result = crawl(
        "profiles",
        settings={
            "BAN_COOLDOWN": BAN_SECONDS + 1,
            "CONCURRENT_REQUESTS": 2,
            "BAN_MAX_TIMES": 0,
        },
        timeout=240,
    )
    assert result.returncode == 0, result.stderr[-3000:]

    stored = {doc["unique_id"]: doc for doc in crawl.mongo.db.profiles.find()}
    assert set(stored) == set(USERS)
    for unique_id, doc in stored.items():
        assert doc["status"] == DATASET.authors_by_unique_id[unique_id].state
    stats = _stats(redis_client, "profiles")
    assert int(stats["ban/count"]) >= 1
    _assert_cooldowns_respected(sandbox, concurrency=2)
    assert redis_client.llen("{profiles}:dead") == 0


def test_stop_policy_exits_with_status_3_and_keeps_the_work(
    crawl: Crawl, redis_client: redis.Redis, sandbox: Sandbox
) -> None:
    _ban_sandbox(sandbox, "403")
    redis_client.lpush("profiles:start_urls", *(json.dumps({"unique_id": u}) for u in USERS))
    result = crawl("profiles", settings={"BAN_POLICY": "stop", "CONCURRENT_REQUESTS": 1})
    assert result.returncode == 3, result.stderr[-3000:]
    assert "stopping this worker" in result.stderr
    stored = crawl.mongo.db.profiles.count_documents({})
    sizes = Frontier(redis_client, FrontierKeys("profiles", ""), DupefilterConfig()).sizes()
    queued = sizes["queue"] + sizes["delayed"]
    left = redis_client.llen("profiles:start_urls")
    assert stored < len(USERS)
    assert stored + queued + left >= len(USERS), "work was lost when the worker stopped"
    assert redis_client.zcard("{profiles}:leases") == 0


def test_rotate_policy_cools_down_only_the_banned_address(
    crawl: Crawl, redis_client: redis.Redis, sandbox: Sandbox
) -> None:
    _ban_sandbox(sandbox, "429")
    sandbox.admin("config", {"rate_limit": {"max_requests": 5}})
    addresses = [f"127.0.0.{n}" for n in range(2, 5)]
    redis_client.lpush("profiles:start_urls", *(json.dumps({"unique_id": u}) for u in USERS))
    result = crawl(
        "profiles",
        settings={
            "BAN_POLICY": "rotate",
            "BIND_ADDRESSES": ", ".join(addresses),  # as a command line writes a list
            "BAN_COOLDOWN": BAN_SECONDS + 1,
            "CONCURRENT_REQUESTS": 1,
            "BAN_MAX_TIMES": 0,
        },
        timeout=240,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert {doc["unique_id"] for doc in crawl.mongo.db.profiles.find()} == set(USERS)
    served = sandbox.admin("stats")
    assert set(served["by_client"]) == set(addresses)
    cooled = {
        key.decode() for key in cast(dict[bytes, bytes], redis_client.hgetall("{profiles}:bans"))
    }
    assert cooled, "no address was cooled down"
    assert all("|bind:127.0.0." in key for key in cooled), cooled  # never the whole domain
    _assert_cooldowns_respected(sandbox, concurrency=1)


def test_a_429_without_retry_after_under_rotate_blocks_the_identity_not_the_host(
    redis_url: str, redis_client: redis.Redis
) -> None:
    """BAN_POLICY=rotate with two identities: a 429 without Retry-After (a step of the circuit
    breaker) blocks the identity it went through on the host; the request goes again at once,
    as the other identity."""
    settings = {**_settings(), "REDIS_URL": redis_url, "BAN_POLICY": "rotate"}
    settings["BIND_ADDRESSES"] = ["127.0.0.2", "127.0.0.3"]
    crawler = get_crawler(ProfilesSpider, settings_dict=settings)
    crawler.spider = crawler._create_spider()
    middleware = BanMiddleware.from_crawler(crawler)
    request = Request("https://www.tiktok.com/@some.user", meta={"identity": "bind:127.0.0.2"})
    answer = Response(request.url, status=429, request=request)
    again = asyncio.run(middleware.process_response(request, answer))
    assert isinstance(again, Request)
    assert again.meta[DUE_META] <= time.time() + 2
    cooled = {key.decode() for key in cast(list[bytes], redis_client.hkeys("{profiles}:bans"))}
    assert cooled == {"www.tiktok.com|bind:127.0.0.2"}, "never the whole host"
    admitted = asyncio.run(middleware.process_request(again))
    assert admitted is None
    assert again.meta["identity"] == "bind:127.0.0.3"


def test_transient_errors_slow_answers_and_dropped_connections(
    crawl: Crawl, redis_client: redis.Redis, sandbox: Sandbox
) -> None:
    sandbox.admin(
        "config",
        {
            "faults": {
                "error_rate": 0.15,
                "drop_rate": 0.1,
                "slow_rate": 0.1,
                "slow_seconds": 1.5,
                "seed": 5,
            }
        },
    )
    redis_client.lpush("profiles:start_urls", *(json.dumps({"unique_id": u}) for u in USERS))
    result = crawl(
        "profiles",
        settings={
            "RETRY_BACKOFF_BASE": 1.5,
            "RETRY_TIMES": 6,
            "DOWNLOAD_TIMEOUT": 5,
            # Each 503 or dropped connection blocks the host briefly (the circuit breaker).
            "HOST_BLOCK_START": 0.2,
            "HOST_BLOCK_MAX": 1.0,
        },
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert {doc["unique_id"] for doc in crawl.mongo.db.profiles.find()} == set(USERS)
    stats = _stats(redis_client, "profiles")
    assert int(stats["retry/count"]) >= 3
    faults = sandbox.admin("stats")["faults"]
    assert faults["error"] >= 1
    assert faults["drop"] >= 1


def test_two_workers_share_one_rate(
    crawl: Crawl, redis_client: redis.Redis, sandbox: Sandbox
) -> None:
    rate = 4.0
    redis_client.lpush("profiles:start_urls", *(json.dumps({"unique_id": u}) for u in USERS))
    settings = {"POLITENESS_RATE": rate, "POLITENESS_BURST": 1}
    with ExitStack() as running:
        workers = [
            running.enter_context(crawl.background("profiles", settings=settings)) for _ in range(2)
        ]
        for worker in workers:
            assert worker.wait(120) == 0
    assert {doc["unique_id"] for doc in crawl.mongo.db.profiles.find()} == set(USERS)
    times = sorted(
        entry["arrived"]
        for entry in sandbox.admin("stats")["requests"]
        if entry["path"].startswith("/@")
    )
    # Any two seconds of the crawl hold at most 2 * rate requests (+ the burst), across both.
    worst = max(sum(1 for t in times if start <= t < start + 2.0) for start in times)
    assert worst <= 2 * rate + 2, worst
