"""A real crawl fed a long run of bad start entries among good ones: it sets each bad one aside
once, fetches the good ones, and closes (scrapy runspider against the sandbox)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import redis

from tests import forkserver
from tests.harness import ROOT, Crawl, Sandbox

pytestmark = pytest.mark.integration

FEED_SPIDER = """
from crawler.spiders.redis import RedisSpider


class FeedSpider(RedisSpider):
    name = "feedrun"
    redis_batch_size = 4

    def parse(self, response):
        return None
"""
START = "feedrun:start_urls"


def test_bad_entries_are_set_aside_once_and_the_crawl_goes_on_and_closes(
    crawl: Crawl, redis_client: redis.Redis, sandbox: Sandbox, tmp_path: Path
) -> None:
    bad = [f"ftp://bad{number}.example/" for number in range(3000)]
    too_long = f"{sandbox.url}/@feed.user9?{'q' * 2100}"
    good = [f"{sandbox.url}/@feed.user{number}" for number in range(2)]
    # LPUSH: the first pushed is read first; the good ones wait behind the bad ones.
    redis_client.lpush(START, *bad, too_long, *good)
    spider = tmp_path / "feedrun.py"
    spider.write_text(FEED_SPIDER)
    command = [sys.executable, "-m", "scrapy", "runspider", str(spider)]
    settings = {"MAX_IDLE_TIME_BEFORE_CLOSE": 1, "FRONTIER_LEASE_SECONDS": 5, "POLITENESS_RATE": 0}
    for name, value in settings.items():
        command += ["-s", f"{name}={value}"]
    done = forkserver.run(command, ROOT, crawl.env(), timeout=150)
    assert done.returncode == 0, done.stderr[-3000:]
    fetched = sandbox.admin("stats")["by_path"]
    assert {path: fetched.get(path) for path in ("/@feed.user0", "/@feed.user1")} == {
        "/@feed.user0": 1,
        "/@feed.user1": 1,
    }
    aside = [json.loads(raw) for raw in redis_client.lrange(START + ":invalid", 0, -1)]
    entries = [record["entry"] for record in aside]
    assert len(entries) == len(set(entries)), "an entry was set aside more than once"
    assert set(entries) == {*bad, too_long[:16384]}
    reasons = {record["entry"]: record["reason"].split(":")[0] for record in aside}
    assert reasons[too_long] == "url_too_long"
    assert not redis_client.exists(START, "{" + START + "}:leases")
