"""scrapy-redis start entries and settings, without servers: what an entry becomes, what is
refused, which scrapy-redis settings pass."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from scrapy import FormRequest, Request, Spider
from scrapy.downloadermiddlewares.redirect import RedirectMiddleware
from scrapy.http import Response
from scrapy.settings import Settings
from scrapy.utils.test import get_crawler

from crawler.config.rules import SettingsError
from crawler.connection import Redis as ReconnectingRedis
from crawler.connection import redis_from_settings
from crawler.frontier.records import passes_again, pending
from crawler.meta import DUE_META, send_back
from crawler.middlewares import LeaseDownloaderMiddleware
from crawler.preflight import check_settings
from crawler.preflight.scrapy_redis import scrapy_redis_problems
from crawler.spiders.feed import EntryLimits, InvalidStartEntry
from crawler.spiders.redis import RedisCrawlSpider, RedisSpider, as_requests, request_from_data

LIMITS = EntryLimits()


def project_settings(**values: Any) -> Settings:
    settings = Settings()
    settings.setmodule("crawler.settings")
    settings.update(values)
    return settings


def test_a_url_is_a_get_request_fetched_even_if_seen() -> None:
    request = request_from_data(b"https://example.org/a?b=1", "utf-8", LIMITS)
    assert (request.url, request.method, request.dont_filter) == (
        "https://example.org/a?b=1",
        "GET",
        True,
    )


def test_json_carries_method_meta_and_form_data_as_in_scrapy_redis() -> None:
    data = {"url": "https://example.org/s", "method": "post", "meta": {"job": 7}, "q": "shoes"}
    request = request_from_data(json.dumps(data).encode(), "utf-8", LIMITS)
    assert isinstance(request, FormRequest)
    assert (request.method, request.meta["job"], request.body) == ("POST", 7, b"q=shoes")


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b'{"method": "GET"}', "missing_keys"),
        (b"ftp://example.org/", "bad_url"),
        (b"https://user:secret@example.org/", "credentials"),
        (b'{"url": "https://example.org/", "meta": {"frontier_lease": "x"}}', "bad_meta"),
        (b'{"url": "https://example.org/", "meta": []}', "bad_meta"),
        (b'{"url": "https://example.org/", "method": "GET /x"}', "bad_value"),
        (b'{"url": "https://example.org/", "page": 2}', "bad_value"),
        (b"[1, 2]", "not_an_object"),
        (b"\xff\xfe", "not_utf8"),
        (b"", "empty"),
    ],
)
def test_entries_scrapy_redis_would_drop_are_refused_with_a_reason(
    data: bytes, reason: str
) -> None:
    with pytest.raises(InvalidStartEntry) as refused:
        request_from_data(data, "utf-8", LIMITS)
    assert refused.value.reason == reason


def test_another_encoding_decodes_entries() -> None:
    request = request_from_data("https://example.org/caf\xe9".encode("latin-1"), "latin-1", LIMITS)
    assert request.url == "https://example.org/caf%C3%A9"


@given(st.binary(max_size=300))
def test_any_bytes_make_a_request_or_a_refusal(data: bytes) -> None:
    try:
        request = request_from_data(data, "utf-8", LIMITS)
    except InvalidStartEntry:
        return
    assert isinstance(request, Request)
    assert request.url.startswith(("http://", "https://"))


@pytest.mark.parametrize("made", [None, [], (), "https://example.org/", {"url": "x"}])
def test_no_request_made_is_a_refusal(made: Any) -> None:
    with pytest.raises(InvalidStartEntry) as refused:
        as_requests(made)
    assert refused.value.reason == "no_requests"


def test_requests_made_one_or_many() -> None:
    one = Request("https://example.org/")
    assert as_requests(one) == [one]
    assert as_requests(iter([one, one])) == [one, one]
    with pytest.raises(InvalidStartEntry):
        as_requests([one, "https://example.org/b"])


def test_same_named_bases_carry_scrapy_redis_attributes() -> None:
    for base in (RedisSpider, RedisCrawlSpider):
        assert base.redis_key is None
        assert base.redis_batch_size is None
        assert base.redis_encoding == "utf-8"
        assert callable(base.make_request_from_data)


def test_scrapy_redis_example_settings_pass() -> None:
    check_settings(
        project_settings(
            DUPEFILTER_CLASS="scrapy_redis.dupefilter.RFPDupeFilter",
            SCHEDULER_PERSIST=True,
            SCHEDULER_QUEUE_CLASS="scrapy_redis.queue.PriorityQueue",
            REDIS_ENCODING="UTF8",
        )
    )


def test_every_refused_scrapy_redis_setting_is_listed() -> None:
    settings = project_settings(SCHEDULER_PERSIST=False, REDIS_HOST="h", REDIS_DB=2)
    with pytest.raises(SettingsError) as refused:
        check_settings(settings)
    assert [line.split(" = ")[0] for line in refused.value.problems] == [
        "REDIS_HOST",
        "REDIS_DB",
        "SCHEDULER_PERSIST",
    ]


def test_scheduling_settings_are_scrapy_redis_own_under_its_scheduler() -> None:
    stock = project_settings(
        SCHEDULER="scrapy_redis.scheduler.Scheduler",
        SCHEDULER_PERSIST=False,
        SCHEDULER_SERIALIZER="scrapy_redis.picklecompat",
    )
    assert scrapy_redis_problems(stock) == []
    stock.set("REDIS_PORT", 6380)
    assert [line.split(" = ")[0] for line in scrapy_redis_problems(stock)] == ["REDIS_PORT"]


@pytest.mark.parametrize(
    "meta",
    [
        {"dont_obey_robotstxt": True},
        {"dont_ban_check": True},
        {"proxy": "http://evil.example:8080"},
        {"bindaddress": ["127.0.0.1", 0]},
        {"identity": "x"},
        {"crawl_delay": 0},
        {"download_slot": "other"},
        {"retry_times": "x"},
        {"_private": 1},
        {"playwright": True},
        {"playwright_page_methods": [{"method": "evaluate"}]},
        {"max_retry_times": "3"},
        {"download_timeout": -1},
        {"handle_httpstatus_list": [404, "x"]},
        {"dont_redirect": "yes"},
    ],
)
def test_meta_that_steers_the_crawl_or_has_the_wrong_type_is_refused(meta: dict[str, Any]) -> None:
    data = json.dumps({"url": "https://example.org/", "meta": meta}).encode()
    with pytest.raises(InvalidStartEntry) as refused:
        request_from_data(data, "utf-8", LIMITS)
    assert refused.value.reason == "bad_meta"


def test_meta_of_the_spider_and_typed_instructions_pass() -> None:
    meta = {"job": {"id": [1, "a"]}, "max_retry_times": 1, "dont_redirect": True}
    data = json.dumps({"url": "https://example.org/", "meta": meta}).encode()
    assert request_from_data(data, "utf-8", LIMITS).meta == meta


def test_a_method_in_other_scripts_letters_is_refused() -> None:
    data = json.dumps({"url": "https://example.org/", "method": "\uff27ET"}).encode()
    with pytest.raises(InvalidStartEntry) as refused:
        request_from_data(data, "utf-8", LIMITS)
    assert refused.value.reason == "bad_value"


def test_pipelines_without_mongodb_storage_are_refused_while_collections_are_named() -> None:
    pipelines = {"scrapy_redis.pipelines.RedisPipeline": 400}
    with pytest.raises(SettingsError) as refused:
        check_settings(
            project_settings(MONGO_COLLECTIONS={"dict": "pages:url"}, ITEM_PIPELINES=pipelines)
        )
    assert "ITEM_PIPELINES" in str(refused.value)
    assert "MongoPipeline" in str(refused.value)


def test_the_readme_migration_keeps_mongodb_storage() -> None:
    from crawler.settings import ITEM_PIPELINES

    pipelines = {**ITEM_PIPELINES, "scrapy_redis.pipelines.RedisPipeline": 400}
    check_settings(
        project_settings(MONGO_COLLECTIONS={"dict": "pages:url"}, ITEM_PIPELINES=pipelines)
    )
    check_settings(project_settings(ITEM_PIPELINES={}))


@pytest.mark.parametrize(
    ("params", "key"),
    [({"decode_responses": True}, "decode_responses"), ({"encoding": "latin-1"}, "encoding")],
)
def test_redis_params_cannot_do_what_the_refused_settings_do(
    params: dict[str, Any], key: str
) -> None:
    with pytest.raises(SettingsError) as refused:
        check_settings(project_settings(REDIS_PARAMS=params))
    assert f"REDIS_PARAMS[{key!r}]" in str(refused.value)


def test_redis_params_that_agree_pass() -> None:
    check_settings(project_settings(REDIS_PARAMS={"decode_responses": False, "encoding": "utf8"}))


@pytest.mark.parametrize(
    ("params", "timeout"),
    [
        ('{"ssl_ca_certs": "/etc/ssl/redis-ca.pem"}', 5),  # -s REDIS_PARAMS=..., a CA file
        ({"socket_timeout": 1, "ssl_ca_certs": "/etc/ssl/redis-ca.pem"}, 1),
    ],
)
def test_a_runs_redis_params_are_laid_over_the_projects(params: Any, timeout: int) -> None:
    """A run that gives REDIS_PARAMS of its own (a CA file, a password) keeps the client that
    reconnects with backoff and the short timeouts, unless it names them."""
    settings = project_settings(REDIS_URL="rediss://127.0.0.1:6380/0", REDIS_PARAMS=params)
    client = redis_from_settings(settings)
    assert isinstance(client, ReconnectingRedis)
    arguments = client.connection_pool.connection_kwargs
    assert arguments["socket_timeout"] == timeout
    assert arguments["socket_connect_timeout"] == 2
    assert arguments["ssl_ca_certs"] == "/etc/ssl/redis-ca.pem"


def test_a_ca_file_without_tls_is_refused_before_any_command() -> None:
    """redis-py takes ``ssl_ca_certs`` only for a rediss:// URL: with redis:// it failed the
    crawl's first command with a TypeError."""
    settings = project_settings(REDIS_PARAMS={"ssl_ca_certs": "/etc/ssl/redis-ca.pem"})
    with pytest.raises(SettingsError, match=r"REDIS_PARAMS = .*rediss://.*'ssl_ca_certs'"):
        redis_from_settings(settings)


def test_scrapy_redis_default_filter_passes_under_either_name() -> None:
    default = "scrapy_redis.dupefilter.RFPDupeFilter"
    check_settings(project_settings(SCHEDULER_DUPEFILTER_CLASS=default))
    with pytest.raises(SettingsError, match="SCHEDULER_DUPEFILTER_CLASS"):
        check_settings(project_settings(SCHEDULER_DUPEFILTER_CLASS="scrapy.Spider"))


@given(own=st.booleans(), twice=st.booleans())
def test_a_request_sent_back_passes_any_filter_and_its_frontier_record_is_unchanged(
    own: bool, twice: bool
) -> None:
    """Sent back (once or twice), a request passes a duplicate filter that reads no frontier
    mark, as scrapy-redis's; the frontier's record of it is the record of the request as made
    (no dont_filter it did not have, no mark), and the frontier lets it through once."""
    made = Request("https://example.org/a", meta={"k": 1}, dont_filter=own)
    back = send_back(made, dict(made.meta), 5.0)
    if twice:
        back = send_back(back, dict(back.meta), 5.0)
    assert back.dont_filter  # what scrapy-redis's scheduler reads, not the frontier's mark
    again = passes_again(back)
    assert (again, back.dont_filter) == (True, own)
    record = pending(back, b"\0" * 8, None, again)
    expected = pending(made.replace(meta={**made.meta, DUE_META: 5.0}), b"\0" * 8, None)
    assert (record.json, record.due, record.dont_filter) == (expected.json, 5.0, True)


def test_a_request_sent_back_comes_out_of_another_scheduler_as_made() -> None:
    """Out of scrapy-redis's queue, the request is again as made before any middleware sees it:
    a redirect of it is filtered (and checked for offsite) as any request."""
    crawler = get_crawler(settings_dict={"SCHEDULER": "scrapy_redis.scheduler.Scheduler"})
    made = Request("https://example.org/old")
    back = send_back(made, dict(made.meta), 0.0)
    LeaseDownloaderMiddleware(crawler).process_request(back)
    assert not back.dont_filter
    crawler.spider = Spider(name="s")
    redirect = RedirectMiddleware.from_crawler(crawler)
    moved = Response(back.url, status=301, headers={"Location": "/new"}, request=back)
    followed = redirect.process_response(back, moved)
    assert isinstance(followed, Request)
    assert (followed.url, followed.dont_filter) == ("https://example.org/new", False)
