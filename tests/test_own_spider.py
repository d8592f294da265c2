"""The spider of docs/own-spider.md runs as written: its code block, taken from the guide,
crawls the sandbox's sites with a real Redis frontier and MongoDB, and `scrapy status` reports
what it stored."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import redis

from tests.harness import ROOT, Crawl, Sandbox

pytestmark = pytest.mark.integration

GUIDE = ROOT / "docs" / "own-spider.md"
SITES, PAGES = 2, 6
# What crawling the sandbox takes: its sites' *.test names resolve to loopback.
SANDBOX = {
    "TWISTED_DNS_RESOLVER": "crawler.links.resolver.MappedResolver",
    "LINKS_RESOLVE": json.dumps({"test": "127.0.0.1"}),
    "MAX_IDLE_TIME_BEFORE_CLOSE": 1,
}


def guide_code() -> str:
    blocks = re.findall(r"```python\n(.*?)```", GUIDE.read_text(), re.DOTALL)
    assert len(blocks) == 1, "the guide has one Python block: the spider"
    return str(blocks[0])


def scrapy(*args: str, env: dict[str, str], **settings: object) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "scrapy", *args, "-s", "SPIDER_MODULES=myspiders"]
    for name, value in settings.items():
        command += ["-s", f"{name}={value}"]
    return subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=180)


def test_the_guide_spider_is_short() -> None:
    assert len(guide_code().strip().splitlines()) < 40


def test_the_guide_spider_runs_as_written(
    crawl: Crawl, redis_client: redis.Redis, sandbox: Sandbox, tmp_path: Path
) -> None:
    package = tmp_path / "myspiders"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "site_pages.py").write_text(guide_code())
    env = {**crawl.env(), "PYTHONPATH": f"{tmp_path}:{ROOT}"}
    sandbox.admin("web", {"sites": SITES, "pages": PAGES, "extras": False})
    port = sandbox.url.rsplit(":", 1)[1]
    homes = [f"http://site{site}.test:{port}/" for site in range(SITES)]
    redis_client.lpush("site_pages:start_urls", *homes)

    result = scrapy("crawl", "site_pages", env=env, **SANDBOX)
    assert result.returncode == 0, result.stderr[-4000:]

    expected = {home + path for home in homes for path in ["", *(f"p/{k}" for k in range(PAGES))]}
    pages = list(crawl.mongo.db.site_pages.find({}, {"_id": 0, "url": 1, "title": 1}))
    assert sorted(page["url"] for page in pages) == sorted(expected)
    assert all(page["title"] for page in pages)
    assert redis_client.llen("{site_pages}:dead") == 0
    status = scrapy("status", "site_pages", "--json", env=env)
    assert status.returncode == 0, status.stderr[-2000:]
    fleet = json.loads(status.stdout)["spiders"]["site_pages"]
    # A home is fetched as a start entry and again through a link: stored once, counted twice.
    assert fleet["counters"]["items_by_collection"]["site_pages"] >= len(expected)
    assert not any(fleet["frontier"].values()), fleet["frontier"]


# A spider of one's own on the project's RedisSpider whose make_request_from_data wants its
# URLs deduplicated: a URL pushed twice, or linked after it was pushed, is fetched once.
DEDUPLICATED = """
from scrapy import Request

from crawler.spiders.redis import RedisSpider


class Deduplicated(RedisSpider):
    name = "deduplicated"

    def make_request_from_data(self, data):
        return Request(data.decode(), dont_filter=False)

    def parse(self, response):
        yield {"url": response.url}
        yield from response.follow_all(css="a")
"""


def test_a_make_request_from_data_of_ones_own_keeps_its_dont_filter(
    crawl: Crawl, redis_client: redis.Redis, sandbox: Sandbox, tmp_path: Path
) -> None:
    """Its requests are deduplicated as it asked (dont_filter=False), not fetched again
    whatever was seen: each page was asked twice, the duplicate entry's and a link's."""
    package = tmp_path / "myspiders"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "deduplicated.py").write_text(DEDUPLICATED)
    env = {**crawl.env(), "PYTHONPATH": f"{tmp_path}:{ROOT}"}
    pages = {"/": {"links": ["/a"]}, "/a": {"links": ["/"]}}
    sandbox.admin("graph", {"pages": pages})
    home = f"http://graph.test:{sandbox.url.rsplit(':', 1)[1]}/"
    # One at a time, as a fleet's entries come: the second after the first was scheduled.
    redis_client.lpush("deduplicated:start_urls", home, home + "a", home)
    result = scrapy("crawl", "deduplicated", env=env, START_BATCH_SIZE=1, **SANDBOX)
    assert result.returncode == 0, result.stderr[-4000:]
    asked = sorted(entry["path"] for entry in sandbox.admin("graph")["log"])
    assert asked == ["/", "/a"], asked
    stored = sorted(doc["url"] for doc in crawl.mongo.db.deduplicated.find({}, {"url": 1}))
    assert stored == [home, home + "a"]
