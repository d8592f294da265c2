"""Spiders written for scrapy-redis run on the frontier as they are.

The two spiders of scrapy-redis's example project (``example-project/example/spiders/``), copied
as written, crawl the sandbox: their start entries are leased, so killing a worker mid-crawl
loses nothing; bad entries are set aside; their dict items are stored with no setting added, in
the collection named after the spider, keyed on their URL; a crawl none of whose items could be
stored does not end as a success; scrapy-redis settings the frontier would not honour stop the
start.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest
import redis

from tests.harness import MONGO_PAUSE, ROOT, Crawl, Sandbox, background, poll

pytestmark = pytest.mark.integration

# scrapy-redis's example-project/example/spiders/myspider_redis.py, as written there.
MYSPIDER_REDIS = """\
from scrapy_redis.spiders import RedisSpider


class MySpider(RedisSpider):
    \"\"\"Spider that reads urls from redis queue (myspider:start_urls).\"\"\"
    name = 'myspider_redis'
    redis_key = 'myspider:start_urls'

    def __init__(self, *args, **kwargs):
        # Dynamically define the allowed domains list.
        domain = kwargs.pop('domain', '')
        self.allowed_domains = filter(None, domain.split(','))
        super(MySpider, self).__init__(*args, **kwargs)

    def parse(self, response):
        return {
            'name': response.css('title::text').extract_first(),
            'url': response.url,
        }
"""

# scrapy-redis's example-project/example/spiders/mycrawler_redis.py, as written there.
MYCRAWLER_REDIS = """\
from scrapy.spiders import Rule
from scrapy.linkextractors import LinkExtractor

from scrapy_redis.spiders import RedisCrawlSpider


class MyCrawler(RedisCrawlSpider):
    \"\"\"Spider that reads urls from redis queue (myspider:start_urls).\"\"\"
    name = 'mycrawler_redis'
    redis_key = 'mycrawler:start_urls'

    rules = (
        # follow all links
        Rule(LinkExtractor(), callback='parse_page', follow=True),
    )

    def __init__(self, *args, **kwargs):
        # Dynamically define the allowed domains list.
        domain = kwargs.pop('domain', '')
        self.allowed_domains = filter(None, domain.split(','))
        super(MyCrawler, self).__init__(*args, **kwargs)

    def parse_page(self, response):
        return {
            'name': response.css('title::text').extract_first(),
            'url': response.url,
        }
"""

# What crawling the sandbox takes: its web's *.test hosts resolve to loopback, no rate limit,
# workers close when the fleet idles. Nothing about storage: dicts go to the spider's collection.
SANDBOX_SETTINGS = {
    "SPIDER_MODULES": "example.spiders",
    "TWISTED_DNS_RESOLVER": "crawler.links.resolver.MappedResolver",
    "LINKS_RESOLVE": json.dumps({"test": "127.0.0.1"}),
    "MAX_IDLE_TIME_BEFORE_CLOSE": 1,
    "POLITENESS_RATE": 0,
    "FRONTIER_LEASE_SECONDS": 5,
}
SITES, PAGES = 12, 6
MODULES = "SPIDER_MODULES=example.spiders"


@pytest.fixture
def example_project(tmp_path: Path) -> Path:
    """scrapy-redis's example project's spiders package, importable as ``example.spiders``."""
    spiders = tmp_path / "project" / "example" / "spiders"
    spiders.mkdir(parents=True)
    (spiders.parent / "__init__.py").write_text("")
    (spiders / "__init__.py").write_text("")
    (spiders / "myspider_redis.py").write_text(MYSPIDER_REDIS)
    (spiders / "mycrawler_redis.py").write_text(MYCRAWLER_REDIS)
    return tmp_path / "project"


def example_command(spider: str, domain: str, **settings: Any) -> list[str]:
    command = [sys.executable, "-m", "scrapy", "crawl", spider, "-a", f"domain={domain}"]
    for name, value in {**SANDBOX_SETTINGS, **settings}.items():
        command += ["-s", f"{name}={value}"]
    return command


def example_env(crawl: Crawl, project: Path) -> dict[str, str]:
    return {**crawl.env(), "PYTHONPATH": f"{project}:{ROOT}"}


def run_example(
    crawl: Crawl, project: Path, spider: str, domain: str, timeout: int = 120, **settings: Any
) -> subprocess.CompletedProcess[str]:
    """``scrapy crawl`` of an example spider in ``project``, run to its end."""
    return subprocess.run(
        example_command(spider, domain, **settings),
        cwd=ROOT,
        env=example_env(crawl, project),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def site_url(sandbox: Sandbox, site: int, path: str = "/") -> str:
    port = sandbox.url.rsplit(":", 1)[1]
    return f"http://site{site}.test:{port}{path}"


def test_example_crawler_loses_nothing_when_a_worker_is_killed(
    crawl: Crawl,
    redis_client: redis.Redis,
    sandbox: Sandbox,
    example_project: Path,
    tmp_path: Path,
) -> None:
    sandbox.admin("web", {"sites": SITES, "pages": PAGES, "extras": False, "latency_ms": 150})
    homes = [site_url(sandbox, site) for site in range(SITES)]
    redis_client.lpush("mycrawler:start_urls", *homes)
    command = example_command("mycrawler_redis", "test", CONCURRENT_REQUESTS=2, START_BATCH_SIZE=2)
    env = example_env(crawl, example_project)
    logs = [tmp_path / f"worker{index}.log" for index in range(2)]
    pages = crawl.mongo.db.mycrawler_redis
    with ExitStack() as running:
        # The first worker, alone, is killed as it holds leases; the second one then starts.
        victim = running.enter_context(background(command, env, logs[0]))
        poll(
            lambda: (
                pages.count_documents({}) >= 10
                and redis_client.zcard("{mycrawler_redis}:leases") > 0
            ),
            90,
            "10 pages stored and requests leased",
            MONGO_PAUSE,
        )
        victim.kill()
        survivor = running.enter_context(background(command, env, logs[1]))
        assert survivor.wait(240) == 0, logs[1].read_text()[-4000:]
    expected = {
        site_url(sandbox, site, path)
        for site in range(SITES)
        for path in ["/", *(f"/p/{k}" for k in range(PAGES))]
    }
    stored = [doc["url"] for doc in pages.find({}, {"url": 1})]
    assert len(stored) == len(set(stored))
    assert set(stored) == expected, sorted(expected - set(stored))[:10]
    assert all(doc["name"] for doc in pages.find({}, {"name": 1}))
    left = ("mycrawler:start_urls", "{mycrawler:start_urls}:leases", "{mycrawler_redis}:queues")
    for key in left:
        assert not redis_client.exists(key), f"{key} still holds work"
    assert not redis_client.exists("{mycrawler_redis}:leases")
    assert redis_client.llen("{mycrawler_redis}:dead") == 0
    # The killed worker's leases ran out and the survivor took them over.
    stats = redis_client.hgetall("{mycrawler_redis}:stats")
    assert int(stats.get(b"frontier/reclaimed", 0)) >= 1, stats
    assert "scrapy-redis spider mycrawler_redis: start entries leased" in logs[1].read_text()


def test_example_spider_sets_bad_entries_aside_and_stores_the_rest(
    crawl: Crawl,
    redis_client: redis.Redis,
    sandbox: Sandbox,
    example_project: Path,
) -> None:
    sandbox.admin("web", {"sites": 3, "pages": 2, "extras": False})
    good = [site_url(sandbox, site) for site in range(3)]
    posted = json.dumps({"url": site_url(sandbox, 0, "/p/1"), "meta": {"job": "7"}})
    bad = [
        "ftp://site0.test/",
        json.dumps({"no_url": 1}),
        json.dumps({"url": good[0], "meta": {"frontier_lease": "x"}}),
        json.dumps({"url": good[0], "size": 3}),
        "http://user:pw@site1.test/",
    ]
    redis_client.lpush("myspider:start_urls", *good, posted, *bad)
    result = run_example(crawl, example_project, "myspider_redis", "test")
    assert result.returncode == 0, result.stderr[-4000:]
    pages = crawl.mongo.db.myspider_redis
    assert pages.count_documents({}) == 4
    stored = {doc["url"] for doc in pages.find({}, {"url": 1})}
    assert stored == {*good, site_url(sandbox, 0, "/p/1")}
    indexes = pages.index_information().values()
    assert any(index["key"] == [("url", 1)] and index.get("unique") for index in indexes)
    said = [line for line in result.stderr.splitlines() if "MongoDB collection" in line]
    assert len(said) == 1, result.stderr[-4000:]
    assert "INFO: Storing dict items of spider 'myspider_redis'" in said[0]
    assert "upserted on url" in said[0]
    assert "'finish_reason': 'finished'" in result.stderr
    aside = [json.loads(raw) for raw in redis_client.lrange("myspider:start_urls:invalid", 0, -1)]
    assert sorted(record["entry"] for record in aside) == sorted(bad)
    reasons = {record["entry"]: record["reason"].split(":")[0] for record in aside}
    assert reasons[bad[1]] == "missing_keys"
    assert reasons[bad[4]] == "credentials"
    assert not redis_client.exists("myspider:start_urls", "{myspider:start_urls}:leases")
    assert redis_client.llen("{myspider_redis}:dead") == 0


def test_a_crawl_whose_items_all_fail_to_store_is_no_success(
    crawl: Crawl,
    redis_client: redis.Redis,
    sandbox: Sandbox,
    example_project: Path,
) -> None:
    # A collection that refuses every document the spider yields (they all have a url).
    crawl.mongo.db.create_collection("myspider_redis", validator={"url": {"$exists": False}})
    sandbox.admin("web", {"sites": 3, "pages": 2, "extras": False})
    redis_client.lpush("myspider:start_urls", *(site_url(sandbox, site) for site in range(3)))
    result = run_example(crawl, example_project, "myspider_redis", "test")
    assert result.returncode == 4, result.stderr[-4000:]
    assert "Spider closed (items_not_stored)" in result.stderr
    assert "'finish_reason': 'items_not_stored'" in result.stderr
    said = [line for line in result.stderr.splitlines() if "None of the 3 items" in line]
    assert len(said) == 1, result.stderr[-4000:]
    assert crawl.mongo.db.myspider_redis.count_documents({}) == 0
    letters = [json.loads(raw) for raw in redis_client.lrange("{myspider_redis}:dead", 0, -1)]
    assert [letter["failure"]["reason"] for letter in letters] == ["item_error:ItemNotStored"] * 3
    published = redis_client.hget("{myspider_redis}:stats", "finish_reason")
    assert published == b"items_not_stored"


# A spider yielding items MongoDB cannot take: a lone surrogate in a value, a NUL in a key.
UNSTORABLE = """\
from scrapy_redis.spiders import RedisSpider


class Unstorable(RedisSpider):
    name = 'unstorable'
    redis_key = 'unstorable:start_urls'

    def parse(self, response):
        for n in range(10):
            yield {'url': f'{response.url}#value{n}', 'name': 'lone \\ud800'}
            yield {'url': f'{response.url}#key{n}', 'nul\\x00key': n}
        yield {'url': response.url, 'name': 'fine'}
"""


def test_an_unstorable_item_is_one_log_line_and_a_dead_letter(
    crawl: Crawl,
    redis_client: redis.Redis,
    sandbox: Sandbox,
    example_project: Path,
) -> None:
    (example_project / "example" / "spiders" / "unstorable.py").write_text(UNSTORABLE)
    sandbox.admin("web", {"sites": 2, "pages": 1, "extras": False})
    homes = [site_url(sandbox, site) for site in range(2)]
    redis_client.lpush("unstorable:start_urls", *homes)
    result = run_example(crawl, example_project, "unstorable", "test")
    assert result.returncode == 0, result.stderr[-4000:]
    log = result.stderr
    assert "Traceback" not in log, log[-6000:]
    assert "Error processing" not in log, log[-6000:]
    said = [line for line in log.splitlines() if "Item not stored in MongoDB" in line]
    assert len(said) == 40, log[-6000:]
    assert all("ERROR" in line for line in said)
    assert "'mongo/unstorable': 40" in log
    stored = {doc["url"] for doc in crawl.mongo.db.unstorable.find({}, {"url": 1})}
    assert stored == set(homes)
    letters = [json.loads(raw) for raw in redis_client.lrange("{unstorable}:dead", 0, -1)]
    assert [letter["failure"]["reason"] for letter in letters] == ["item_error:ItemNotStored"] * 2
    assert redis_client.zcard("{unstorable}:leases") == 0


def test_the_example_crawler_on_the_project_bases_reads_its_own_key(
    crawl: Crawl,
    redis_client: redis.Redis,
    sandbox: Sandbox,
    example_project: Path,
) -> None:
    ours = (
        MYCRAWLER_REDIS.replace("scrapy_redis.spiders import", "crawler.spiders.redis import")
        .replace("'mycrawler_redis'", "'ours'")
        .replace("'mycrawler:start_urls'", "'%(name)s:seeds'")
    )
    (example_project / "example" / "spiders" / "ours.py").write_text(ours)
    sandbox.admin("web", {"sites": 3, "pages": 2, "extras": False})
    redis_client.lpush("ours:seeds", site_url(sandbox, 0), "not a url")
    shown = subprocess.run(
        [sys.executable, "-m", "scrapy", "frontier", "ours", "--json", "-s", MODULES],
        cwd=ROOT,
        env=example_env(crawl, example_project),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert json.loads(shown.stdout)["start"] == 2, shown.stderr[-2000:]
    result = run_example(crawl, example_project, "ours", "test")
    assert result.returncode == 0, result.stderr[-4000:]
    stored = {doc["url"] for doc in crawl.mongo.db.ours.find({}, {"url": 1})}
    assert stored == {
        site_url(sandbox, site, path) for site in range(3) for path in ("/", "/p/0", "/p/1")
    }
    aside = [json.loads(raw) for raw in redis_client.lrange("ours:seeds:invalid", 0, -1)]
    assert [record["entry"] for record in aside] == ["not a url"]
    assert not redis_client.exists("ours:seeds", "{ours:seeds}:leases", "{ours}:dead")


# A spider whose callback makes requests the frontier cannot store (meta keyed by numbers, as
# pickle would have kept them), then the same pages asked again as they should have been.
REFUSED = """
import scrapy


class Refused(scrapy.Spider):
    name = 'refused'

    def __init__(self, domain='', *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.home = domain

    async def start(self):
        yield scrapy.Request(self.home)

    def parse(self, response):
        for n in range(12):
            yield scrapy.Request(response.urljoin(f'/p/{n}?v=2'), meta={'pages': {n: 'x'}},
                                 callback=self.parse_page)
        for n in (0, 1):  # the same pages again, as they should have been asked
            yield scrapy.Request(response.urljoin(f'/p/{n}?v=2'), callback=self.parse_page)

    def parse_page(self, response):
        return {'url': response.url}
"""


def test_requests_redis_cannot_hold_are_refused_by_name_and_the_crawl_goes_on(
    crawl: Crawl, sandbox: Sandbox, example_project: Path
) -> None:
    """Each is named in an ERROR and counted, the spider's other requests are fetched and
    stored (the same pages asked again with good meta too: a refused request is not taken for
    one scheduled), and the crawl ends."""
    (example_project / "example" / "spiders" / "refused.py").write_text(REFUSED)
    sandbox.admin("web", {"sites": 1, "pages": 2, "extras": False})
    result = run_example(crawl, example_project, "refused", site_url(sandbox, 0), timeout=90)
    assert result.returncode == 0, result.stderr[-4000:]
    stored = {doc["url"] for doc in crawl.mongo.db.refused.find({}, {"url": 1})}
    assert stored == {site_url(sandbox, 0, "/p/0?v=2"), site_url(sandbox, 0, "/p/1?v=2")}
    refusals = re.findall(
        r"ERROR: <GET (\S+)> not scheduled: meta\['pages'\]: key (\d+)", result.stderr
    )
    assert sorted(int(n) for _, n in refusals) == list(range(12)), result.stderr[-4000:]
    assert "'scheduler/unserializable': 12" in result.stderr


# scrapy-redis settings the frontier would not honour, a value of each, and what the refusal
# names instead.
NOT_HONOURED = [
    ("SCHEDULER_PERSIST", "False", "scrapy frontier <spider> purge"),
    ("SCHEDULER_FLUSH_ON_START", "True", "purge --yes"),
    ("SCHEDULER_IDLE_BEFORE_CLOSE", "10", "MAX_IDLE_TIME_BEFORE_CLOSE"),
    ("SCHEDULER_QUEUE_CLASS", "scrapy_redis.queue.LifoQueue", "DEPTH_PRIORITY"),
    ("DUPEFILTER_CLASS", "scrapy.dupefilters.BaseDupeFilter", "DUPEFILTER_MODE"),
    ("REDIS_HOST", "redis.internal", "REDIS_URL"),
    ("REDIS_PORT", "6380", "REDIS_URL"),
    ("REDIS_START_URLS_AS_SET", "True", "lpush"),
    ("REDIS_START_URLS_BATCH_SIZE", "10", "START_BATCH_SIZE"),
    ("REDIS_ENCODING", "latin-1", "redis_encoding"),
]


def test_scrapy_redis_settings_the_frontier_would_not_honour_stop_the_start(
    crawl: Crawl, redis_client: redis.Redis, example_project: Path
) -> None:
    """Every one of them is refused, each named with its value and what to use instead, on the
    one line of a start that stops before it leases anything (the check lists every setting
    it refuses, so one start shows each refusal)."""
    redis_client.lpush("myspider:start_urls", "http://site0.test/")
    settings = {name: value for name, value, _ in NOT_HONOURED}
    result = run_example(crawl, example_project, "myspider_redis", "test", timeout=60, **settings)
    assert result.returncode == 2, result.stderr[-3000:]
    said = [line for line in result.stderr.splitlines() if "Crawl not started" in line]
    assert len(said) == 1, result.stderr[-3000:]
    starts = {name: said[0].find(f"{name} = {value}: must be ") for name, value, _ in NOT_HONOURED}
    assert all(at >= 0 for at in starts.values()), said[0]
    ends = sorted([*starts.values(), len(said[0])])
    for name, _, named in NOT_HONOURED:
        refusal = said[0][starts[name] : ends[ends.index(starts[name]) + 1]]
        assert named in refusal, (name, refusal)
    assert redis_client.llen("myspider:start_urls") == 1


def test_requests_sent_back_under_scrapy_redis_scheduler_are_kept_and_wait_until_due(
    crawl: Crawl,
    redis_client: redis.Redis,
    sandbox: Sandbox,
    example_project: Path,
) -> None:
    """A user who kept scrapy-redis's SCHEDULER and DUPEFILTER_CLASS: a request the politeness
    sends back (its host's one slot busy) passes scrapy-redis's duplicate filter again, so every
    page is asked for once and stored (3 of 33 were, the others filtered as seen), and it waits
    in the worker until due rather than coming straight back out of scrapy-redis's queue (sent
    back 2,720 times in a 2 s crawl)."""
    sandbox.admin("web", {"sites": 3, "pages": 10, "extras": False, "latency_ms": 100})
    redis_client.lpush("mycrawler:start_urls", *(site_url(sandbox, site) for site in range(3)))
    stock: dict[str, Any] = {
        "SCHEDULER": "scrapy_redis.scheduler.Scheduler",
        "DUPEFILTER_CLASS": "scrapy_redis.dupefilter.RFPDupeFilter",
        "SCHEDULER_PERSIST": True,
        "POLITENESS_CONCURRENCY": 1,
    }
    result = run_example(crawl, example_project, "mycrawler_redis", "test", **stock)
    assert result.returncode == 0, result.stderr[-4000:]
    paths = ["/", *(f"/p/{k}" for k in range(10))]
    expected = {site_url(sandbox, site, path) for site in range(3) for path in paths}
    stored = {doc["url"] for doc in crawl.mongo.db.mycrawler_redis.find({}, {"url": 1})}
    assert stored == expected, (len(stored), result.stderr[-3000:])
    counts = sandbox.admin("web")["counts"]
    asked = {(host, path): n for host, seen in counts.items() for path, n in seen.items()}
    # A home twice: its start request (dont_filter) and a page's link to it, as scrapy-redis does.
    once = {(f"site{site}.test", path): 1 + (path == "/") for site in range(3) for path in paths}
    assert asked == once
    sent_back = re.search(r"'politeness/deferred/concurrency': (\d+)", result.stderr)
    assert sent_back is not None, result.stderr[-3000:]
    assert int(sent_back[1]) <= 3 * len(expected), result.stderr[-3000:]
