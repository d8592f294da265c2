"""Start entries fed through a real FrontierScheduler on a real Redis, in process: bad entries
never hold the reactor, never wedge the scheduler, are set aside once with a reason, and an
entry is never lost (not set aside: it comes back)."""

from __future__ import annotations

import base64
import json
import logging
import time
from collections.abc import Iterable, Iterator
from datetime import datetime
from types import SimpleNamespace
from typing import Any

import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scrapy import Request
from scrapy.crawler import Crawler
from scrapy.exceptions import DontCloseSpider, NotConfigured
from scrapy.utils.reactor import install_reactor, is_reactor_installed
from scrapy.utils.test import get_crawler

import crawler.settings as project_settings
from crawler.config.rules import SettingsError
from crawler.frontier.queue import Pending
from crawler.frontier.scheduler import FrontierScheduler
from crawler.spiders.feed import InvalidStartEntry, MakeRequests, StartFeed
from crawler.spiders.redis import RedisSpider
from tests.harness import poll

START = "fed:start_urls"
INVALID = START + ":invalid"
LEASES = "{" + START + "}:leases"
GOOD = "https://example.org/"


class Fed(RedisSpider):
    name = "fed"
    redis_batch_size = 2

    def parse(self, response: Any) -> None:
        return None


def make_crawler(redis_url: str, spidercls: type = Fed, **extra: Any) -> Crawler:
    values = {name: getattr(project_settings, name) for name in dir(project_settings)}
    values = {name: value for name, value in values.items() if name.isupper()}
    values.update(REDIS_URL=redis_url, FRONTIER_LEASE_SECONDS=5, URLLENGTH_LIMIT=200, **extra)
    if not is_reactor_installed():  # never run: the scheduler's loops are only set up
        install_reactor(values["TWISTED_REACTOR"])
    return get_crawler(spidercls, values)


@pytest.fixture
def fed(redis_url: str, redis_client: redis.Redis) -> Iterator[tuple[Crawler, FrontierScheduler]]:
    yield from _fed(redis_url)


@pytest.fixture
def fed_unpaced(
    redis_url: str, redis_client: redis.Redis
) -> Iterator[tuple[Crawler, FrontierScheduler]]:
    """The same, without a politeness rate: each request to the one host goes at once, not
    at the host's next turn two seconds later."""
    yield from _fed(redis_url, POLITENESS_RATE=0)


def _fed(redis_url: str, **extra: Any) -> Iterator[tuple[Crawler, FrontierScheduler]]:
    crawler = make_crawler(redis_url, **extra)
    spider = Fed.from_crawler(crawler)
    crawler.spider = spider
    scheduler = FrontierScheduler.from_crawler(crawler)
    scheduler.open(spider)
    # The engine's two parts the feed uses: its scheduler, and crawl() that enqueues.
    engine: Any = SimpleNamespace(scheduler=scheduler, crawl=scheduler.enqueue_request)
    crawler.engine = engine
    yield crawler, scheduler
    scheduler.close("finished")


def feed_of(crawler: Crawler, make: MakeRequests | None = None) -> StartFeed:
    spider: Any = crawler.spider
    feed: StartFeed = spider.feed
    if make is not None:
        feed = StartFeed(crawler, spider, feed.entries, make, 0.0)
    return feed


def aside(server: redis.Redis) -> list[dict[str, Any]]:
    return [json.loads(raw) for raw in server.lrange(INVALID, 0, -1)]


def slow_refusal(raw: bytes) -> Iterable[Request]:
    time.sleep(0.03)  # an expensive make_request_from_data
    raise InvalidStartEntry("bad_url", raw.decode())


def test_a_run_of_bad_entries_is_read_a_little_at_a_time_and_set_aside_once(
    fed: tuple[Crawler, FrontierScheduler], redis_client: redis.Redis
) -> None:
    crawler, _ = fed
    bad = [f"ftp://bad{number}.example/" for number in range(40)]
    redis_client.lpush(START, *bad)
    feed = feed_of(crawler, slow_refusal)
    started = time.monotonic()
    assert feed.next_requests() == []
    assert time.monotonic() - started < 1.0
    assert feed.fed
    assert redis_client.llen(START) > 0, "one call read every batch"
    # Each batch read is acked at once: no lease waits for a later write.
    assert redis_client.zcard(LEASES) == 0
    while feed.fed:
        feed.next_requests()
    assert sorted(record["entry"] for record in aside(redis_client)) == sorted(bad)
    assert not redis_client.exists(START, LEASES)


def test_an_entry_that_cannot_be_set_aside_is_not_acked_and_comes_back(
    fed: tuple[Crawler, FrontierScheduler], redis_client: redis.Redis
) -> None:
    crawler, scheduler = fed
    redis_client.set(INVALID, "not a list")  # RPUSH answers WRONGTYPE
    redis_client.lpush(START, "ftp://bad.example/")
    feed = feed_of(crawler)
    assert feed.next_requests() == []
    assert scheduler.flush()
    assert redis_client.zcard(LEASES) == 1, "the entry was acked without being set aside"
    assert not scheduler.starts.held  # not renewed: its lease runs out
    redis_client.delete(INVALID)

    def set_aside_at_last() -> bool:
        feed.next_requests()
        return redis_client.llen(INVALID) == 1

    poll(set_aside_at_last, 15, "the entry back and set aside", pause=0.2)
    assert aside(redis_client)[0]["entry"] == "ftp://bad.example/"
    scheduler.flush()
    assert not redis_client.exists(START, LEASES)


def when_made(raw: bytes) -> Iterable[Request]:
    return [Request(GOOD, meta={"when": datetime.now()}, dont_filter=True)]


def too_long(raw: bytes) -> Iterable[Request]:
    return [Request(GOOD + "a" * 300, dont_filter=True)]


@pytest.mark.parametrize(
    ("make", "reason"), [(when_made, "not_serializable"), (too_long, "url_too_long")]
)
def test_requests_the_frontier_could_not_take_set_their_entry_aside(
    fed: tuple[Crawler, FrontierScheduler],
    redis_client: redis.Redis,
    make: MakeRequests,
    reason: str,
) -> None:
    crawler, scheduler = fed
    redis_client.lpush(START, "entry")
    assert feed_of(crawler, make).next_requests() == []
    assert [record["reason"].split(":")[0] for record in aside(redis_client)] == [reason]
    assert not scheduler.starts.held
    assert not redis_client.exists(START, LEASES)


def test_the_same_request_twice_is_one_request_and_its_entry_is_acked(
    fed: tuple[Crawler, FrontierScheduler], redis_client: redis.Redis
) -> None:
    crawler, scheduler = fed
    request = Request(GOOD, dont_filter=True)
    redis_client.lpush(START, "entry")
    made = feed_of(crawler, lambda raw: [request, request]).next_requests()
    assert made == [request]
    scheduler.enqueue_request(request)
    assert scheduler.flush()
    assert not scheduler.starts.held
    assert not redis_client.exists(START, LEASES)


def test_an_entry_whose_requests_never_reach_the_scheduler_is_set_aside_at_idle(
    fed: tuple[Crawler, FrontierScheduler], redis_client: redis.Redis
) -> None:
    crawler, scheduler = fed
    redis_client.lpush(START, GOOD)
    feed = feed_of(crawler)
    assert len(feed.next_requests()) == 1  # and a middleware drops it
    assert scheduler.starts.held
    with pytest.raises(DontCloseSpider):
        feed.on_idle()
    assert [record["reason"].split(":")[0] for record in aside(redis_client)] == [
        "requests_dropped"
    ]
    assert not scheduler.starts.held
    assert scheduler.flush()
    assert not redis_client.exists(START, LEASES)


def test_a_stored_record_that_cannot_be_rebuilt_is_dead_lettered_not_raised(
    fed: tuple[Crawler, FrontierScheduler], redis_client: redis.Redis
) -> None:
    _, scheduler = fed
    assert scheduler.frontier is not None
    bad = {"url": GOOD + "bad", "meta": {"retry_times": "x"}, "dont_filter": True}
    good = {"url": GOOD + "good", "dont_filter": True}
    scheduler.frontier.schedule(
        [Pending(json.dumps(record), b"f" * 20, 0, True, 0.0) for record in (bad, good)]
    )
    scheduler.plan.queue_size = 2
    request = poll(scheduler.next_request, 5, "the good request")
    assert request.url == GOOD + "good"
    assert scheduler.flush()
    dead = [json.loads(raw) for raw in redis_client.lrange("{fed}:dead", 0, -1)]
    assert len(dead) == 1
    assert "unreadable" in json.dumps(dead[0])


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=6,
)
META_KEYS = st.sampled_from(["retry_times", "max_retry_times", "download_timeout", "proxy", "job"])


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.dictionaries(META_KEYS | st.text(max_size=12), JSON, max_size=3))
def test_any_json_meta_is_refused_or_crawled_never_wedging_the_worker(
    fed_unpaced: tuple[Crawler, FrontierScheduler], redis_client: redis.Redis, meta: dict[str, Any]
) -> None:
    crawler, scheduler = fed_unpaced
    redis_client.delete(START, INVALID, LEASES)
    redis_client.lpush(START, json.dumps({"url": GOOD, "meta": meta}))
    feed = feed_of(crawler)
    made = feed.next_requests()
    if not made:
        reasons = [record["reason"].split(":")[0] for record in aside(redis_client)]
        assert reasons in (["bad_meta"], ["not_serializable"], ["control_characters"])
        return
    for request in made:
        scheduler.enqueue_request(request)
    request = poll(scheduler.next_request, 5, "the entry's request back from the frontier")
    assert request.url == GOOD
    scheduler.ledger.finished(request)
    assert scheduler.flush()
    assert not scheduler.starts.held


def test_an_adopted_spider_under_scrapy_redis_scheduler_is_told_entries_are_not_leased(
    redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    from scrapy_redis.spiders import RedisSpider as ScrapyRedisSpider

    from crawler.spiders.redis import ScrapyRedisSpiders

    class Adopted(ScrapyRedisSpider):  # type: ignore[misc]
        name = "adopted"

    crawler = make_crawler(redis_url, Adopted, SCHEDULER="scrapy_redis.scheduler.Scheduler")
    crawler.spider = Adopted.from_crawler(crawler)
    with caplog.at_level(logging.INFO, "crawler.spiders.redis"):
        ScrapyRedisSpiders(crawler, crawler.spider)
    assert "start entries popped (not leased" in caplog.text


def test_an_adopted_spider_whose_start_requests_would_be_skipped_is_refused(
    redis_url: str,
) -> None:
    """A scrapy-redis spider overriding start_requests (a login first) without start():
    Scrapy's start() never calls it, and the crawl went on without it, silently."""
    from scrapy import Request
    from scrapy_redis.spiders import RedisSpider as ScrapyRedisSpider

    from crawler.spiders.redis import ScrapyRedisSpiders

    class LoginFirst(ScrapyRedisSpider):  # type: ignore[misc]
        name = "login_first"

        def start_requests(self) -> Any:
            yield Request("http://127.0.0.1/login")

    crawler = make_crawler(redis_url, LoginFirst)
    crawler.spider = LoginFirst.from_crawler(crawler)
    with pytest.raises(SettingsError, match="overrides start_requests"):
        ScrapyRedisSpiders(crawler, crawler.spider)


def test_scrapy_redis_attributes_are_taken_as_arguments_and_a_misspelt_one_refused(
    redis_url: str,
) -> None:
    """``-a redis_key=...`` (and the other scrapy-redis attributes) works on the project's
    RedisSpider as on scrapy-redis's; it was refused as an argument the spider does not take."""
    spider = Fed.from_crawler(
        make_crawler(redis_url), redis_key="other:start_urls", redis_batch_size="3"
    )
    assert (spider.feed.entries.key, spider.feed.entries.batch_size) == ("other:start_urls", 3)
    with pytest.raises(SettingsError, match="takes no argument redis_kye"):
        Fed.from_crawler(make_crawler(redis_url), redis_kye="other:start_urls")


def test_a_class_max_idle_time_wins_over_the_setting(redis_url: str) -> None:
    class Patient(Fed):
        max_idle_time = 7

    crawler = make_crawler(redis_url, Patient, MAX_IDLE_TIME_BEFORE_CLOSE=2)
    assert Patient.from_crawler(crawler).feed.max_idle_time == 7
    assert (
        Fed.from_crawler(make_crawler(redis_url, MAX_IDLE_TIME_BEFORE_CLOSE=2)).feed.max_idle_time
        == 2
    )


def test_a_bad_max_idle_time_is_named(redis_url: str) -> None:
    class Impatient(Fed):
        max_idle_time = -1

    with pytest.raises(SettingsError, match=r"Impatient\.max_idle_time"):
        Impatient.from_crawler(make_crawler(redis_url, Impatient))


def test_an_argument_redis_batch_size_of_an_adopted_spider_is_used(redis_url: str) -> None:
    from scrapy_redis.spiders import RedisSpider as ScrapyRedisSpider

    from crawler.spiders.redis import ScrapyRedisSpiders

    class Adopted(ScrapyRedisSpider):  # type: ignore[misc]
        name = "adopted"

    crawler = make_crawler(redis_url, Adopted, START_BATCH_SIZE=16)
    crawler.spider = Adopted.from_crawler(crawler, redis_batch_size="3")
    assert ScrapyRedisSpiders(crawler, crawler.spider).feed.entries.batch_size == 3


def test_a_misspelt_redis_encoding_stops_the_start(redis_url: str) -> None:
    from scrapy_redis.spiders import RedisSpider as ScrapyRedisSpider

    from crawler.spiders.redis import ScrapyRedisSpiders

    class Latin(Fed):
        redis_encoding = "latin-one"

    with pytest.raises(SettingsError, match="latin-one"):
        Latin.from_crawler(make_crawler(redis_url, Latin))

    class Adopted(ScrapyRedisSpider):  # type: ignore[misc]
        name = "adopted"
        redis_encoding = "utf-88"

    crawler = make_crawler(redis_url, Adopted)
    crawler.spider = Adopted.from_crawler(crawler)
    with pytest.raises(SettingsError, match="utf-88"):
        ScrapyRedisSpiders(crawler, crawler.spider)


def test_other_spiders_disable_the_adopter_without_a_warning(redis_url: str) -> None:
    from crawler.spiders.redis import ScrapyRedisSpiders

    crawler = make_crawler(redis_url)
    crawler.spider = Fed.from_crawler(crawler)
    with pytest.raises(NotConfigured) as disabled:
        ScrapyRedisSpiders.from_crawler(crawler)
    assert disabled.value.args == ()  # Scrapy logs a WARNING for a NotConfigured with a message


@pytest.mark.parametrize("hook", ["next_requests", "schedule_next_requests", "spider_idle"])
def test_an_adopted_spider_overriding_a_start_list_hook_is_refused(
    redis_url: str, hook: str
) -> None:
    from scrapy_redis.spiders import RedisSpider as ScrapyRedisSpider

    from crawler.spiders.redis import ScrapyRedisSpiders

    adopted: Any = type("Adopted", (ScrapyRedisSpider,), {"name": "adopted", hook: lambda self: []})
    crawler = make_crawler(redis_url, adopted)
    crawler.spider = adopted.from_crawler(crawler)
    with pytest.raises(SettingsError, match=hook):
        ScrapyRedisSpiders(crawler, crawler.spider)


@pytest.mark.parametrize("hook", ["next_requests", "start_requests"])
def test_a_project_spider_overriding_a_hook_its_feed_skips_is_refused(
    redis_url: str, hook: str
) -> None:
    spidercls: Any = type("Hooked", (Fed,), {hook: lambda self: []})
    with pytest.raises(SettingsError, match=hook):
        spidercls.from_crawler(make_crawler(redis_url, spidercls))


def test_a_project_spider_with_its_own_start_may_keep_start_requests(redis_url: str) -> None:
    async def start(self: Any) -> Any:
        for request in self.start_requests():
            yield request

    spidercls: Any = type("Own", (Fed,), {"start": start, "start_requests": lambda self: []})
    assert spidercls.from_crawler(make_crawler(redis_url, spidercls)).name == "fed"


def test_an_adopted_spider_without_its_own_key_sets_entries_aside_where_purge_looks(
    redis_url: str,
) -> None:
    from scrapy_redis.spiders import RedisSpider as ScrapyRedisSpider

    from crawler.keys import invalid_key

    class Adopted(ScrapyRedisSpider):  # type: ignore[misc]
        name = "adopted"

    crawler = make_crawler(redis_url, Adopted, START_INVALID_KEY="bad:%(name)s")
    spider = Adopted.from_crawler(crawler)
    assert spider.redis_key == "adopted:start_urls"  # set by scrapy-redis's setup_redis
    assert invalid_key(crawler.settings, spider) == "bad:adopted"
    assert invalid_key(crawler.settings, "adopted") == "bad:adopted"


@given(st.binary(min_size=1, max_size=64))
@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
def test_a_set_aside_entry_can_be_pushed_back_byte_for_byte(
    fed: tuple[Crawler, FrontierScheduler], redis_client: redis.Redis, raw: bytes
) -> None:
    crawler, _ = fed
    redis_client.delete(START, INVALID, LEASES)
    redis_client.lpush(START, raw)

    def refuse(data: bytes) -> Iterable[Request]:
        raise InvalidStartEntry("bad_url")

    feed_of(crawler, refuse).next_requests()
    (record,) = aside(redis_client)
    kept = record["entry"].encode()
    if "entry_base64" in record:
        kept = base64.b64decode(record["entry_base64"])
    assert kept == raw


def test_long_urls_are_kept_while_url_length_middleware_is_off(redis_url: str) -> None:
    from crawler.spiders.feed import url_length_limit

    off = {"scrapy.spidermiddlewares.urllength.UrlLengthMiddleware": None}
    assert url_length_limit(make_crawler(redis_url, SPIDER_MIDDLEWARES=off).settings) == 0
    assert url_length_limit(make_crawler(redis_url).settings) == 200


def test_at_no_rate_new_work_goes_at_the_next_ask(
    redis_url: str, redis_client: redis.Redis
) -> None:
    """POLITENESS_RATE 0 (no per-domain rate): a request scheduled after a pop is handed out at
    the engine's next ask, not after the pause a paced pop takes to gather its hosts' turns."""
    crawler = make_crawler(redis_url, POLITENESS_RATE=0, POLITENESS_DOMAIN_RATES={})
    spider = Fed.from_crawler(crawler)
    crawler.spider = spider
    scheduler = FrontierScheduler.from_crawler(crawler)
    scheduler.open(spider)
    try:
        assert scheduler.config.pacing is not None  # Crawl-delays still pace their hosts
        for path in ("a", "b", "c"):
            scheduler.enqueue_request(Request(f"https://example.org/{path}", dont_filter=True))
            request = scheduler.next_request()
            assert request is not None
            assert request.url == f"https://example.org/{path}"
    finally:
        scheduler.close("finished")


def test_an_idle_worker_says_where_it_waits_at_info_once(
    fed: tuple[Crawler, FrontierScheduler],
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each idle spell of the fleet is said, at INFO the first time only: the spells between a
    fleet's revisits or retries falling due (every few seconds) are no news."""
    crawler, _ = fed
    feed = feed_of(crawler)
    caplog.set_level(logging.DEBUG, logger="crawler.spiders.feed")
    for fleet_idle in (True, False, True, False, True):
        monkeypatch.setattr(feed, "fleet_idle", lambda idle=fleet_idle: idle)
        with pytest.raises(DontCloseSpider):
            feed.on_idle()
    said = [record for record in caplog.records if "waiting for start" in record.getMessage()]
    assert [record.levelno for record in said] == [logging.INFO, logging.DEBUG, logging.DEBUG]
    assert "the fleet's frontier is empty" in said[0].getMessage()
    assert START in said[0].getMessage()
