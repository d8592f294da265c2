"""A bad setting stops the worker before it takes a lease: one ERROR line, exit status 2."""

from __future__ import annotations

import json
import logging
import math
import socket
import subprocess
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
import redis
from hypothesis import given
from hypothesis import strategies as st
from scrapy import Request
from scrapy.downloadermiddlewares.httpproxy import HttpProxyMiddleware
from scrapy.settings import Settings
from scrapy.utils.project import get_project_settings
from scrapy.utils.test import get_crawler

from crawler import settings as project_settings
from crawler.config.rules import SettingsError, shown
from crawler.config.table import RULES
from crawler.frontier.scheduler import FrontierScheduler
from crawler.frontier.server_check import check_frontier
from crawler.keys import FrontierKeys
from crawler.middlewares import BanMiddleware
from crawler.observability.monitor import FleetMonitor
from crawler.pipelines import MongoPipeline
from crawler.preflight import SettingsCheck, check_settings
from crawler.spiders.maps import MapsSpider
from crawler.spiders.profiles import ProfilesSpider
from tests import forkserver
from tests.harness import ROOT, Crawl, closed_port, scrapy

pytestmark = pytest.mark.timeout(120)


def _settings(**overrides: Any) -> Settings:
    settings = get_project_settings()
    settings.setdict(overrides, priority="cmdline")
    return settings


def _project(**overrides: Any) -> dict[str, Any]:
    """The project's settings for get_crawler, without the extensions it would build."""
    project = {name: getattr(project_settings, name) for name in dir(project_settings)}
    settings = {k: v for k, v in project.items() if k.isupper()}
    return {**settings, "EXTENSIONS": dict.fromkeys(project_settings.EXTENSIONS), **overrides}


def _problems(**overrides: Any) -> tuple[str, ...]:
    with pytest.raises(SettingsError) as raised:
        check_settings(_settings(**overrides))
    return raised.value.problems


# --- the table -----------------------------------------------------------------------------------


def test_every_setting_of_the_project_has_a_rule() -> None:
    names = {name for name in dir(project_settings) if name.isupper()}
    assert names - set(RULES) == set()


def test_the_project_defaults_pass() -> None:
    check_settings(get_project_settings())
    check_settings(_settings(**MapsSpider.custom_settings))


def test_every_bad_setting_is_listed_with_its_value_and_what_is_allowed() -> None:
    problems = _problems(MONGO_BATCH_SIZE="-1", BAN_POLICY="foo", POLITENESS_RATE="abc")
    assert problems == (
        "BAN_POLICY = foo: must be one of pause, rotate, stop",
        "POLITENESS_RATE = abc: must be a finite number >= 0",
        "MONGO_BATCH_SIZE = -1: must be an integer from 1 to 100000",
    )


@pytest.mark.parametrize(
    ("name", "value", "allowed"),
    [
        ("METRICS_PORT", "abc", "a port 1-65535, a range like 9410-9419, or 0 (off)"),
        ("DUPEFILTER_ERROR_RATE", "1", "a number > 0 and < 1"),
        ("BAN_COOLDOWN", "inf", "BAN_COOLDOWN = inf: must be a finite number >= 0"),
        ("REDIS_CLUSTER", "maybe", "True or False"),
        ("BIND_ADDRESSES", "127.0.0.2,localhost", "of IP addresses"),
        ("RETRY_HTTP_CODES", "500,abc", "of HTTP status codes"),
        ("BAN_RULES", "no.such.rule", "of importable rule functions"),
        ("STATS_REDIS_KEY", "%(name)s:stats", "may use %(spider)s"),
        ("MONGO_DATABASE", "a.b", "a MongoDB database name"),
        ("MONGO_COLLECTIONS", '{"dict": "system.users:url"}', '"collection:unique key field"'),
        ("MONGO_COLLECTIONS", '{"dict": "pro$iles:url"}', '"collection:unique key field"'),
        ("ITEM_PIPELINES", '{"no.such.Pipeline": 1}', "loadable components"),
        ("POLITENESS_DOMAIN_RATES", '{"a.example": -1}', "to rates >= 0"),
        # A URL or host:port never matches a request's host: refused, not ignored.
        ("POLITENESS_DOMAIN_RATES", '{"https://www.tiktok.com": 0.2}', "host or domain names"),
        ("POLITENESS_DOMAIN_RATES", '{"host.test:8080": 1}', "host or domain names"),
        # One host twice (two spellings, two rates): which rate held was left to chance.
        (
            "POLITENESS_DOMAIN_RATES",
            '{"bücher.de": 0.2, "XN--BCHER-KVA.DE": 0.5}',
            "rates >= 0 ('bücher.de' and 'XN--BCHER-KVA.DE' are both 'xn--bcher-kva.de')",
        ),
        ("ALLOWED_START_HOSTS", "ftp://host", "scheme://host[:port]"),
        ("MAPS_BROWSER_DRAIN_SECONDS", "0", "an integer >= 1"),
        # scrapy-redis's spiders take int() of it: "1.5" stopped them with a traceback.
        ("MAX_IDLE_TIME_BEFORE_CLOSE", "1.5", "an integer >= 0"),
        # A typo left the crawl running without its metrics endpoint.
        ("METRICS_HOST", "locahost.invalid", "an IP address or a name of this machine"),
        # Authors went to "None:start_urls", which no spider reads, and nothing was said.
        ("EXPLORE_HANDOFF_SPIDER", "None", "a spider's name"),
        ("EXPLORE_HANDOFF_SPIDER", "my spider", "a spider's name"),
        # Pages in German: no end of the list found, the consent click waited 30 s and failed.
        ("MAPS_LANGUAGE", "de", "English (en, or en-GB"),
        ("MAPS_LANGUAGE", "", "English (en, or en-GB"),
        ("MAPS_REGION", "Germany", "a region code of 2 letters"),
        # redis-py took the path as database 0, or failed at the first command with a traceback.
        ("REDIS_URL", "redis://127.0.0.1:6379/crawl", "a database number as its path"),
        ("REDIS_URL", "redis://127.0.0.1:6379/0?socket_timeout=5s", "redis-py's options"),
        ("REDIS_URL", "redis://127.0.0.1:6379/0?sockettimeout=5", "redis-py's options"),
    ],
)
def test_a_bad_value_is_named(name: str, value: str, allowed: str) -> None:
    (line,) = _problems(**{name: value})
    assert line.startswith(f"{name} = {shown(_settings(**{name: value})[name])}: must be ")
    assert allowed in line


def test_secrets_in_bad_values_are_not_shown() -> None:
    (url_line,) = _problems(REDIS_URL="http://:s3cret@127.0.0.1:6379")
    assert url_line.startswith("REDIS_URL = http://:***@127.0.0.1:6379: must be a redis://")
    (params_line,) = _problems(REDIS_PARAMS='{"password": "s3cret"')
    assert "s3cret" not in params_line
    assert params_line.startswith("REDIS_PARAMS = (str, not shown): must be a dict")


def test_settings_are_checked_against_each_other() -> None:
    (line,) = _problems(BAN_COOLDOWN="100", BAN_COOLDOWN_MAX="10")
    assert line == "BAN_COOLDOWN_MAX = 10: must be a number >= BAN_COOLDOWN (100)"


def test_the_fewest_workers_wanted_are_not_more_than_the_most() -> None:
    (line,) = _problems(AUTOSCALE_MIN_WORKERS="5", AUTOSCALE_MAX_WORKERS="2")
    assert line == "AUTOSCALE_MIN_WORKERS = 5: must be an integer <= AUTOSCALE_MAX_WORKERS (2)"
    check_settings(_settings(AUTOSCALE_MIN_WORKERS="2", AUTOSCALE_MAX_WORKERS="2"))
    (low,) = _problems(AUTOSCALE_BACKLOG_SECONDS="0")
    assert low.startswith("AUTOSCALE_BACKLOG_SECONDS = 0: must be a finite number > 0")


def test_the_fleet_concurrency_cap_fits_what_one_worker_downloads_before_its_lease_ends() -> None:
    check_settings(_settings(POLITENESS_CONCURRENCY="8", CONCURRENT_REQUESTS_PER_DOMAIN="8"))
    (line,) = _problems(POLITENESS_CONCURRENCY="9", CONCURRENT_REQUESTS_PER_DOMAIN="8")
    assert line.startswith("POLITENESS_CONCURRENCY = 9: must be 0 or at most 8")
    (delayed,) = _problems(POLITENESS_CONCURRENCY="8", DOWNLOAD_DELAY="5")
    assert delayed.startswith("POLITENESS_CONCURRENCY = 8: must be 0 or at most 4")
    check_settings(_settings(POLITENESS_CONCURRENCY="0", DOWNLOAD_DELAY="60"))


def test_the_browser_must_be_an_executable_for_spiders_that_use_it() -> None:
    maps = {"DOWNLOAD_HANDLERS": {"https": "crawler.browser.BrowserHandler"}}
    options = {**project_settings.PLAYWRIGHT_LAUNCH_OPTIONS, "executable_path": "/nonexistent"}
    (line,) = _problems(**maps, PLAYWRIGHT_LAUNCH_OPTIONS=options)
    assert line.startswith("CHROMIUM_PATH (PLAYWRIGHT_LAUNCH_OPTIONS executable_path) = ")
    assert "/nonexistent: must be an executable browser file" in line
    check_settings(_settings(PLAYWRIGHT_LAUNCH_OPTIONS=options))  # no browser, no check


# --- hypothesis over bad values ----------------------------------------------------------------

_NOT_A_NUMBER = st.text().filter(lambda s: not _parses(float, s))


def _parses(kind: Any, text: str) -> bool:
    try:
        kind(text)
    except ValueError:
        return False
    return True


@given(st.one_of(st.integers(max_value=0), st.integers(min_value=100_001), _NOT_A_NUMBER))
def test_integers_outside_their_range_are_refused(value: Any) -> None:
    with pytest.raises(SettingsError, match=r"^MONGO_BATCH_SIZE = .*: must be an integer from 1"):
        RULES["MONGO_BATCH_SIZE"].read("MONGO_BATCH_SIZE", value)


@given(st.integers(min_value=1, max_value=100_000))
def test_integers_in_range_read_as_integers(value: int) -> None:
    assert RULES["MONGO_BATCH_SIZE"].read("MONGO_BATCH_SIZE", str(value)) == value


@given(
    st.one_of(
        st.floats(max_value=-1e-9),
        st.sampled_from(["nan", "inf", "-inf"]),
        _NOT_A_NUMBER,
    )
)
def test_numbers_below_zero_or_not_numbers_are_refused(value: Any) -> None:
    refused = r"^POLITENESS_RATE = .*: must be a finite number >= 0$"
    with pytest.raises(SettingsError, match=refused):
        RULES["POLITENESS_RATE"].read("POLITENESS_RATE", value)


_REDIS_OPTIONS = st.sampled_from(
    ["db", "socket_timeout", "ssl_cert_reqs", "client_name", "max_connections", "path", "dbname"]
)


@given(
    st.sampled_from(["redis", "rediss", "unix"]),
    st.one_of(st.just(""), st.from_regex(r"/[0-9]{1,3}", fullmatch=True), st.text(max_size=8)),
    st.lists(st.tuples(_REDIS_OPTIONS, st.text(max_size=6)), max_size=3),
)
def test_a_redis_url_read_is_one_redis_py_connects_with(
    scheme: str, path: str, options: list[tuple[str, str]]
) -> None:
    """Whatever the URL, the rule accepts it only if redis-py builds its connection from it (no
    command sent), and refuses it with the setting named, never another error."""
    query = "&".join(f"{quote(key)}={quote(value)}" for key, value in options)
    value = f"{scheme}://{'' if scheme == 'unix' else '127.0.0.1:6379'}{quote(path)}?{query}"
    try:
        redis.Redis.from_url(value).connection_pool.make_connection()
    except (redis.RedisError, ValueError, TypeError):
        with pytest.raises(SettingsError, match=r"^REDIS_URL = "):
            RULES["REDIS_URL"].read("REDIS_URL", value)
    else:
        path = value.split("://", 1)[1].partition("?")[0].partition("/")[2]
        if value.startswith("unix:") or not path or path.isdigit():
            assert RULES["REDIS_URL"].read("REDIS_URL", value) == value
        else:  # redis-py would take it as database 0
            with pytest.raises(SettingsError, match="a database number as its path"):
                RULES["REDIS_URL"].read("REDIS_URL", value)


@given(
    st.sampled_from(["http", "https", "socks5", ""]),
    st.one_of(st.none(), st.text("abc%:@", max_size=4)),
    st.one_of(st.none(), st.text("xyz%:@", max_size=4)),
)
def test_a_proxy_url_read_is_one_scrapys_proxy_middleware_uses(
    scheme: str, user: str | None, password: str | None
) -> None:
    """Whatever the URL, the rule accepts a PROXY_POOL proxy only if Scrapy's HttpProxyMiddleware
    sends a request through it without an error, and refuses it with the setting named."""
    userinfo = "" if user is None else user + ("" if password is None else f":{password}") + "@"
    value = f"{scheme}://{userinfo}127.0.0.1:8080"
    request = Request("http://example.com/", meta={"proxy": value})
    try:
        HttpProxyMiddleware.from_crawler(get_crawler()).process_request(request)
        usable = scheme in ("http", "https")
    except (ValueError, TypeError):
        usable = False
    if usable:
        assert RULES["PROXY_POOL"].read("PROXY_POOL", value) == [value]
    else:
        with pytest.raises(SettingsError, match=r"^PROXY_POOL = "):
            RULES["PROXY_POOL"].read("PROXY_POOL", value)


@given(st.text().filter(lambda s: s not in ("pause", "rotate", "stop")))
def test_choices_outside_their_options_are_refused(value: str) -> None:
    with pytest.raises(SettingsError, match=r"must be one of pause, rotate, stop$"):
        RULES["BAN_POLICY"].read("BAN_POLICY", value)


@given(st.text().filter(lambda s: s not in ("True", "true", "False", "false")))
def test_booleans_are_what_scrapy_reads_as_booleans(value: str) -> None:
    rule = RULES["REDIS_CLUSTER"]
    if _parses(int, value):
        assert rule.read("REDIS_CLUSTER", value) is bool(int(value))
    else:
        with pytest.raises(SettingsError, match="must be True or False"):
            rule.read("REDIS_CLUSTER", value)


# --- components refuse bad values instead of switching themselves off --------------------------


@pytest.mark.parametrize(
    ("component", "name", "value"),
    [
        (MongoPipeline, "MONGO_BATCH_SIZE", -1),
        (BanMiddleware, "BAN_POLICY", "foo"),
        (BanMiddleware, "POLITENESS_RATE", "abc"),
        (FleetMonitor, "METRICS_PORT", "abc"),
        (FleetMonitor, "PROGRESS_INTERVAL", -1),
        (FleetMonitor, "DOMAIN_STATS_MAX", -1),
        (FleetMonitor, "DOMAIN_STATS_MAX", "many"),
        (SettingsCheck, "FRONTIER_LEASE_SECONDS", 1),
    ],
)
def test_components_raise_settings_error(component: Any, name: str, value: Any) -> None:
    crawler = get_crawler(ProfilesSpider, settings_dict=_project(**{name: value}))
    with pytest.raises(SettingsError, match=f"^{name} = {value}: must be "):
        component.from_crawler(crawler)


def test_item_pipelines_without_the_mongodb_pipeline_say_items_are_not_stored(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A project that keeps its own ITEM_PIPELINES (a scrapy-redis example's) stores nothing in
    MongoDB: not an error, never silent."""
    own = {"scrapy_redis.pipelines.RedisPipeline": 400}
    SettingsCheck.from_crawler(get_crawler(ProfilesSpider, settings_dict=_project()))
    assert "items are not stored" not in caplog.text
    SettingsCheck.from_crawler(
        get_crawler(ProfilesSpider, settings_dict=_project(ITEM_PIPELINES=own))
    )
    assert "ITEM_PIPELINES has no crawler.pipelines.MongoPipeline" in caplog.text


def test_frontier_checks_need_a_list_at_the_start_key(redis_client: redis.Redis) -> None:
    keys = FrontierKeys("profiles", "profiles:start_urls")
    check_frontier(redis_client, keys, "bloom")
    redis_client.sadd(keys.start, "someone")
    with pytest.raises(SettingsError, match="profiles:start_urls holds a set: must be a list"):
        check_frontier(redis_client, keys, "bloom")


def test_the_scheduler_refuses_a_start_key_of_another_type_when_it_opens(
    redis_url: str, redis_client: redis.Redis
) -> None:
    redis_client.sadd("profiles:start_urls", "someone")
    crawler = get_crawler(ProfilesSpider, settings_dict=_project(REDIS_URL=redis_url))
    scheduler = FrontierScheduler.from_crawler(crawler)
    with pytest.raises(SettingsError, match="REDIS_START_URLS_KEY: the Redis key profiles:"):
        scheduler.open(ProfilesSpider())
    assert redis_client.smembers("profiles:start_urls") == {b"someone"}


# --- `scrapy crawl` as a worker runs it ---------------------------------------------------------


def _run(crawl: Crawl, spider: str, settings: dict[str, Any], **env: str) -> Any:
    return forkserver.run(
        crawl.command(spider, settings=settings), ROOT, {**crawl.env(), **env}, timeout=60
    )


def _assert_refused(result: Any, *expected: str) -> None:
    output = result.stdout + result.stderr
    errors = [line for line in output.splitlines() if " ERROR: " in line]
    assert result.returncode == 2, output[-3000:]
    assert len(errors) == 1, output[-3000:]
    assert "Traceback" not in output
    for part in expected:
        assert part in errors[0]


# Bad values, each with the problem it is refused with: the check lists every one it refuses,
# so one start shows each refusal on the one ERROR line.
BAD_VALUES = {
    "MONGO_BATCH_SIZE": (-1, "MONGO_BATCH_SIZE = -1: must be an integer from 1 to 100000"),
    "BAN_POLICY": ("foo", "BAN_POLICY = foo: must be one of pause, rotate, stop"),
    "METRICS_PORT": ("abc", "METRICS_PORT = abc: must be a port 1-65535"),
    "POLITENESS_RATE": ("abc", "POLITENESS_RATE = abc: must be a finite number >= 0"),
}


@pytest.mark.parametrize(
    ("settings", "expected"),
    [
        pytest.param(
            {name: value for name, (value, _) in BAD_VALUES.items()},
            [refused for _, refused in BAD_VALUES.values()],
            id="bad-values",
        ),
        pytest.param(
            {"DUPEFILTER_MODE": "redisbloom"},
            ["DUPEFILTER_MODE = redisbloom: must be bloom"],
            id="redisbloom-without-its-module",
        ),
        pytest.param(
            {
                "ADDONS": '{"crawler.addons.ProjectComponents": null}',
                "DOWNLOADER_MIDDLEWARES": '{"tests.depth_header.DepthHeaderMiddleware": 990}',
            },
            ["DOWNLOADER_MIDDLEWARES = ", "must be a dict that keeps LeaseDownloaderMiddleware on"],
            id="leases-dropped-by-a-run-dict-with-the-add-on-turned-off",
        ),
        pytest.param(
            {"SPIDER_MIDDLEWARES": '{"crawler.middlewares.LeaseSpiderMiddleware": null}'},
            ["SPIDER_MIDDLEWARES = ", "must be a dict that keeps LeaseSpiderMiddleware on"],
            id="lease-spider-middleware-turned-off",
        ),
        pytest.param(
            {
                "POLITENESS_RATE": 1,
                "DOWNLOADER_MIDDLEWARES": '{"crawler.middlewares.SendGateMiddleware": null}',
            },
            ["must be a dict that keeps SendGateMiddleware on"],
            id="send-gate-turned-off-while-paced",
        ),
    ],
)
def test_a_bad_setting_stops_the_crawl_before_any_lease(
    crawl: Crawl, redis_client: redis.Redis, settings: dict[str, Any], expected: list[str]
) -> None:
    redis_client.lpush("profiles:start_urls", "someone")
    _assert_refused(_run(crawl, "profiles", settings), *expected)
    assert redis_client.lrange("profiles:start_urls", 0, -1) == [b"someone"]
    assert redis_client.keys("*") == [b"profiles:start_urls"]
    assert crawl.mongo.db.list_collection_names() == []


@pytest.mark.parametrize(
    ("name", "value", "refusal"),
    [
        # Taken for "no": the worker then failed on a cluster node's MOVED replies.
        ("REDIS_CLUSTER", "on", "must be True or False"),
        # Failed at the first command, with a traceback.
        ("REDIS_URL", "redis://127.0.0.1:1/0?sockettimeout=5", "redis-py's options as its query"),
    ],
)
def test_a_redis_setting_the_environment_gets_wrong_is_refused(
    crawl: Crawl, redis_client: redis.Redis, name: str, value: str, refusal: str
) -> None:
    """A Redis setting from a worker's environment is refused at start with one line, by the
    crawl and by the commands that read the frontier."""
    redis_client.lpush("profiles:start_urls", "someone")
    _assert_refused(_run(crawl, "profiles", {}, **{name: value}), f"{name} = {value}")
    assert redis_client.lrange("profiles:start_urls", 0, -1) == [b"someone"]
    for command in (["status"], ["frontier", "profiles"]):
        shown = scrapy(*command, env={**crawl.env(), name: value})
        assert shown.returncode == 2, shown.stderr
        assert f"error: {name} = {value}: must be " in shown.stderr
        assert refusal in shown.stderr
        assert "Traceback" not in shown.stderr


@pytest.mark.parametrize("spider", ["links", "domains"])
@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("{tmp}/sites.txt", "no such file"),
        # A directory was "no such file" (domains), an empty name "Is a directory" (links).
        ("{tmp}", "a directory, not a file"),
        ("", "no file named"),
    ],
)
def test_a_start_file_that_is_not_there_is_refused_in_one_line(
    crawl: Crawl, spider: str, tmp_path: Any, name: str, why: str
) -> None:
    file = name.format(tmp=tmp_path)
    command = [*crawl.command(spider, settings={}), "-a", f"file={file}"]
    result = forkserver.run(command, ROOT, crawl.env(), timeout=60)
    _assert_refused(result, f"-a file={file}: {why}")
    assert "Crawler.stats" not in result.stderr


def test_a_set_at_the_start_key_is_named_with_its_type(
    crawl: Crawl, redis_client: redis.Redis
) -> None:
    redis_client.sadd("profiles:start_urls", "someone")
    result = _run(crawl, "profiles", {})
    _assert_refused(result, "the Redis key profiles:start_urls holds a set: must be a list")
    assert "unreachable" not in result.stderr
    assert redis_client.smembers("profiles:start_urls") == {b"someone"}


def test_maps_without_its_browser_does_not_start(crawl: Crawl, redis_client: redis.Redis) -> None:
    redis_client.lpush("maps:start_urls", "shop near 00501")
    result = _run(crawl, "maps", {"MAPS_BASE_URL": crawl.sandbox_url}, CHROMIUM_PATH="/nonexistent")
    _assert_refused(result, "CHROMIUM_PATH", "= /nonexistent: must be an executable browser file")
    assert redis_client.lrange("maps:start_urls", 0, -1) == [b"shop near 00501"]


# --- the outside tester's cases: one line at start, nothing taken -------------------------------


def _redis_db(url: str, database: int) -> str:
    return url.rsplit("/", 1)[0] + f"/{database}"


# Start entries given with -a: refused whole, as a setting is, when one of them is bad.
ENTRY_ARGUMENTS = {
    "unknown-category": ("explore", ["-a", "categories=999"]),
    "category-not-a-url": ("explore", ["-a", "categories=abc"]),
    "empty-categories": ("explore", ["-a", "categories="]),
    "one-bad-category": ("explore", ["-a", "categories=1,999,2"]),
    "bad-user": ("profiles", ["-a", "users=good.user,bad!user"]),
    "empty-users": ("profiles", ["-a", "users= , "]),
    "bad-url": ("links", ["-a", "urls=https://example.org/,ftp://example.org/"]),
    "bad-domain": ("domains", ["-a", "domains=example.com,127.0.0.1"]),
    "empty-domains": ("domains", ["-a", "domains="]),
    "long-maps-query": ("maps", ["-a", f"category={'shop' * 60}", "-a", "postal_codes=00501"]),
    "empty-maps-arguments": ("maps", ["-a", "category=", "-a", "postal_codes="]),
}


@pytest.mark.parametrize(
    ("case", "status", "expected"),
    [
        # A traceback (ResponseError), exit 1: Redis refused SELECT 99.
        pytest.param(
            "db-out-of-range", 2, ["REDIS_URL = ", "/99: must be ", "DB index is out of range"]
        ),
        # NotADirectoryError as the pipeline made it, then CoreStats' AssertionError.
        pytest.param("spill-dir-under-a-file", 2, ["MONGO_SPILL_DIR = /dev/null/x: must be "]),
        # ValueError from socket.settimeout() at the first command.
        pytest.param("negative-redis-timeout", 2, ["REDIS_PARAMS = ", "socket_timeout"]),
        pytest.param("string-redis-timeout", 2, ["REDIS_PARAMS = ", "socket_connect_timeout"]),
        # TypeErrors at the first command: a string added to the clock, an unknown argument.
        pytest.param("string-health-check", 2, ["REDIS_PARAMS = ", "health_check_interval"]),
        pytest.param("unknown-redis-param", 2, ["REDIS_PARAMS = ", "keyword argument 'ssl'"]),
        # "Crawl failed" and a UsageError's traceback, exit 1.
        pytest.param("bad-job", 2, ["-a job: a job id is 1-64", "not 'bad!job'"]),
        # ValueError's traceback from the maps spider's __init__.
        pytest.param("category-alone", 2, ["-a category alone: give both -a category="]),
        pytest.param("bad-postal-codes", 2, ["-a postal_codes: expected codes such as 00501"]),
        # Exit 0 having crawled nothing, a WARNING for the entry set aside (none for the empty
        # value); under Scrapyd the job idled, waiting for start entries, and never ended.
        pytest.param("unknown-category", 2, ["-a categories: '999' is invalid (unknown_category"]),
        pytest.param("category-not-a-url", 2, ["-a categories: 'abc' is invalid (bad_url: "]),
        pytest.param("empty-categories", 2, ["-a categories: no entries; give -a categories="]),
        pytest.param("one-bad-category", 2, ["-a categories: '999' is invalid"]),
        pytest.param("bad-user", 2, ["-a users: 'bad!user' is invalid (bad_unique_id: "]),
        pytest.param("empty-users", 2, ["-a users: no entries"]),
        pytest.param("bad-url", 2, ["-a urls: 'ftp://example.org/' is invalid (bad_url: "]),
        pytest.param("bad-domain", 2, ["-a domains: '127.0.0.1' is invalid (bad_domain:"]),
        pytest.param("empty-domains", 2, ["-a domains: no entries"]),
        pytest.param("long-maps-query", 2, ["-a category: ", "is invalid (bad_query: a query is "]),
        pytest.param("empty-maps-arguments", 2, ["-a category and -a postal_codes are empty"]),
        # ValueError and FileNotFoundError tracebacks from Scrapy's logging set-up, exit 1.
        pytest.param("bad-log-level", 2, ["LOG_LEVEL = BOGUS: must be one of CRITICAL, "]),
        pytest.param("log-file-nowhere", 2, ["LOG_FILE = /dev/null/x.log: must be a file "]),
        # Servers that do not answer: not a usage error (they may answer later), exit 1, one line.
        pytest.param("redis-not-listening", 1, ["Redis at redis://127.0.0.1:", "unreachable"]),
        pytest.param("mongo-not-listening", 1, ["MongoDB at mongodb://u:***@127.0.0.1:"]),
    ],
)
def test_a_bad_start_is_one_line_and_takes_nothing(
    crawl: Crawl, redis_client: redis.Redis, case: str, status: int, expected: list[str]
) -> None:
    spider, args = "profiles", list[str]()
    settings: dict[str, Any] = {}
    env: dict[str, str] = {}
    with closed_port() as port:
        if case == "db-out-of-range":
            env["REDIS_URL"] = _redis_db(crawl.redis_url, 99)
        elif case == "spill-dir-under-a-file":
            env["MONGO_SPILL_DIR"] = "/dev/null/x"
        elif case == "negative-redis-timeout":
            settings["REDIS_PARAMS"] = '{"socket_timeout": -1}'
        elif case == "string-redis-timeout":
            settings["REDIS_PARAMS"] = '{"socket_connect_timeout": "5"}'
        elif case == "string-health-check":
            settings["REDIS_PARAMS"] = '{"health_check_interval": "30"}'
        elif case == "unknown-redis-param":
            settings["REDIS_PARAMS"] = '{"ssl": true, "password": "s3cret"}'
        elif case == "bad-log-level":
            settings["LOG_LEVEL"] = "BOGUS"
        elif case == "log-file-nowhere":
            settings["LOG_FILE"] = "/dev/null/x.log"
        elif case == "bad-job":
            args = ["-a", "users=x", "-a", "job=bad!job"]
        elif case == "category-alone":
            spider, args = "maps", ["-a", "category=shop"]
        elif case == "bad-postal-codes":
            spider, args = "maps", ["-a", "category=shop", "-a", "postal_codes=0,!"]
        elif case in ENTRY_ARGUMENTS:
            spider, args = ENTRY_ARGUMENTS[case]
        elif case == "redis-not-listening":
            env["REDIS_URL"] = f"redis://127.0.0.1:{port}/0"
        else:
            env["MONGO_URI"] = f"mongodb://u:s3cret@127.0.0.1:{port}/"
            settings["MONGO_CONNECT_TIMEOUT_MS"] = 500
        key = f"{spider}:start_urls"
        redis_client.lpush(key, "someone")
        command = crawl.command(spider, *args, settings=settings)
        result = forkserver.run(command, ROOT, {**crawl.env(), **env}, 60)
    output = result.stdout + result.stderr
    errors = [line for line in output.splitlines() if " ERROR: " in line]
    assert result.returncode == status, output[-3000:]
    assert len(errors) == 1, output[-3000:]
    assert "Traceback" not in output, output[-3000:]
    assert " ERROR: Crawl not started: " in errors[0]
    for part in expected:
        assert part in errors[0], errors[0]
    assert "s3cret" not in output
    assert redis_client.lrange(key, 0, -1) == [b"someone"]
    assert redis_client.keys("*") == [key.encode()]
    assert crawl.mongo.db.list_collection_names() == []


def test_purge_without_an_answer_deletes_nothing_in_one_line(
    crawl: Crawl, redis_client: redis.Redis
) -> None:
    redis_client.lpush("profiles:start_urls", "someone")
    result = subprocess.run(
        [*forkserver.SCRAPY, "frontier", "profiles", "purge"],
        cwd=ROOT,
        env=crawl.env(),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1, result.stderr[-3000:]
    assert "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines()[-1] == "nothing deleted: no answer (use --yes)"
    assert redis_client.lrange("profiles:start_urls", 0, -1) == [b"someone"]


@pytest.mark.parametrize(
    ("action", "limit"),
    [
        *(("dead", "-5"), ("dead", "0"), ("requeue", "-1")),
        *(("dead", "99999999999999999999"), ("requeue", "1000000001")),
    ],
)
def test_a_limit_below_one_or_past_a_billion_is_a_usage_error(
    crawl: Crawl, redis_client: redis.Redis, action: str, limit: str
) -> None:
    redis_client.lpush("{profiles}:dead", json.dumps({"request": {"u": "http://a.test/"}}))
    result = scrapy("frontier", "profiles", action, "--limit", limit, env=crawl.env())
    assert result.returncode == 2, result.stdout + result.stderr
    assert f"--limit: {limit} is not a whole number from 1 to 1,000,000,000" in result.stderr
    assert "Traceback" not in result.stderr
    assert redis_client.llen("{profiles}:dead") == 1


@given(
    st.sampled_from(["socket_timeout", "socket_connect_timeout"]),
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-5, 5),
        st.floats(allow_nan=True, allow_infinity=True),
        st.just(1e10),
        st.text(max_size=4),
    ),
)
def test_a_redis_timeout_read_is_one_a_socket_takes(name: str, value: Any) -> None:
    """REDIS_PARAMS' timeouts go to socket.settimeout() as redis-py connects: the rule takes one
    only if a socket takes it as a timeout (None: blocking; a number > 0), naming the setting
    otherwise, never another error."""
    usable = value is None or (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(value)
        and value > 0
    )
    if usable:
        with socket.socket() as sock:
            try:
                sock.settimeout(value)
            except OverflowError:  # beyond the platform's time_t
                usable = False
    if usable:
        assert RULES["REDIS_PARAMS"].read("REDIS_PARAMS", {name: value}) == {name: value}
    else:
        with pytest.raises(SettingsError, match=r"^REDIS_PARAMS = \(dict, not shown\): must be"):
            RULES["REDIS_PARAMS"].read("REDIS_PARAMS", {name: value})


@pytest.mark.parametrize(
    ("path", "usable"),
    [
        ("/dev/null/x", False),  # under a file: cannot be made
        ("/dev/null", False),  # a file
        ("{tmp}/a/b/c", True),  # made when missing
        ("{tmp}/file/c", False),
        ("{tmp}", True),
        ("", False),
        # Writable to root by their permission bits; no directory can be made there.
        ("/proc/nope", False),
        ("/sys/spill", False),
    ],
)
def test_the_spill_directory_is_one_that_can_be_made(
    tmp_path: Any, path: str, usable: bool
) -> None:
    (tmp_path / "file").write_text("x")
    value = path.format(tmp=tmp_path)
    if usable:
        RULES["MONGO_SPILL_DIR"].read("MONGO_SPILL_DIR", value)
        assert Path(value).is_dir()
    else:
        with pytest.raises(SettingsError, match="must be a writable directory path"):
            RULES["MONGO_SPILL_DIR"].read("MONGO_SPILL_DIR", value)


@pytest.mark.parametrize(
    ("path", "usable"),
    [
        ("{tmp}/crawl.log", True),  # made
        ("{tmp}/file", True),  # appended to
        ("{tmp}/missing/crawl.log", False),  # Scrapy's log handler makes no directory
        ("{tmp}", False),  # a directory
        ("/dev/null/x.log", False),
        ("/sys/crawl.log", False),
        ("", False),
    ],
)
def test_the_log_file_is_one_scrapys_log_handler_can_open(
    tmp_path: Any, path: str, usable: bool
) -> None:
    (tmp_path / "file").write_text("x")
    value = path.format(tmp=tmp_path)
    if usable:
        RULES["LOG_FILE"].read("LOG_FILE", value)
        logging.FileHandler(value).close()
    else:
        with pytest.raises(SettingsError, match="must be a file this process can write"):
            RULES["LOG_FILE"].read("LOG_FILE", value)
        # ... as Scrapy's handler would have failed on it, with a traceback.
        refused = (FileNotFoundError, IsADirectoryError, NotADirectoryError, PermissionError)
        with pytest.raises(refused):
            logging.FileHandler(value, delay=False).close()


def test_purge_yes_json_says_what_it_deleted_as_json(
    crawl: Crawl, redis_client: redis.Redis
) -> None:
    redis_client.lpush("profiles:start_urls", "someone")
    result = scrapy("frontier", "profiles", "purge", "--yes", "--json", env=crawl.env())
    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads(result.stdout) == {"deleted": ["profiles:start_urls"]}
    assert redis_client.exists("profiles:start_urls") == 0
