"""One Redis key of a spider holding the wrong type (``redis-cli SET maps:start_urls oops``)
is shown as that spider's one line, naming the key and its type as ``scrapy crawl``'s refusal
does; the other spiders' status, metrics and fleet page are unaffected, and Redis is never said
to be unreachable."""

from __future__ import annotations

import json
import os
import time
from urllib.request import urlopen

import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client import generate_latest
from scrapy.settings import Settings

from crawler import settings as project_settings
from crawler.fleet.exporter import sizing_registry
from crawler.keys import (
    FleetKeys,
    FrontierKeys,
    bans_key,
    failure_window_key,
    jobs_key,
    reasons_key,
    revisit_keys,
    starts_key,
)
from crawler.observability.page import render_page
from crawler.observability.report import fleet_report, spider_settings
from crawler.observability.report_text import render_text
from crawler.spiders.explore import ExploreSpider
from crawler.spiders.profiles import ProfilesSpider
from tests.harness import scrapy, status_page

START_REFUSAL = "REDIS_START_URLS_KEY: the Redis key maps:start_urls holds a string: must be a list"


def _env(redis_url: str) -> dict[str, str]:
    return {**os.environ, "REDIS_URL": redis_url}


def _broken_maps(client: redis.Redis) -> None:
    """The tester's mistake, beside a profiles spider with one start entry waiting."""
    client.set("maps:start_urls", "oops")
    client.lpush("profiles:start_urls", "someone")


def _not_unreachable(*outputs: str) -> None:
    for output in outputs:
        assert "unreachable" not in output
        assert "Traceback" not in output


def test_status_shows_the_other_spiders_and_names_the_key(
    redis_url: str, redis_client: redis.Redis
) -> None:
    _broken_maps(redis_client)
    every = scrapy("status", env=_env(redis_url))
    _not_unreachable(every.stdout, every.stderr)
    assert every.returncode == 2, every.stderr[-2000:]
    assert f"maps\n  UNREADABLE {START_REFUSAL}" in every.stdout
    assert "profiles\n  frontier  0 queued" in every.stdout
    assert "start entries 1 " in every.stdout
    assert "explore\n  frontier" in every.stdout
    own = scrapy("status", "profiles", env=_env(redis_url))
    assert own.returncode == 0, own.stderr[-2000:]
    as_json = scrapy("status", "maps", "--json", env=_env(redis_url))
    assert as_json.returncode == 2
    assert json.loads(as_json.stdout)["spiders"]["maps"]["error"].startswith(START_REFUSAL)


def test_frontier_and_fleet_plan_refuse_in_one_line(
    redis_url: str, redis_client: redis.Redis
) -> None:
    _broken_maps(redis_client)
    for command in (["frontier", "maps"], ["fleet", "plan", "maps", "--deadline", "1h"]):
        ran = scrapy(*command, env=_env(redis_url))
        _not_unreachable(ran.stdout, ran.stderr)
        assert ran.returncode == 2, (command, ran.stderr[-2000:])
        assert ran.stderr.startswith(f"maps: {START_REFUSAL}"), ran.stderr[-2000:]
        assert ran.stderr.count("\n") == 1
    other = scrapy("frontier", "profiles", env=_env(redis_url))
    assert other.returncode == 0, other.stderr[-2000:]


def test_served_metrics_and_page_keep_the_other_spiders(
    redis_url: str, redis_client: redis.Redis
) -> None:
    _broken_maps(redis_client)
    with status_page(_env(redis_url)) as url:
        with urlopen(url + "metrics", timeout=30) as answer:
            metrics = answer.read().decode()
        with urlopen(url, timeout=30) as answer:
            assert answer.status == 200
            page = answer.read().decode()
    assert 'crawler_workers_wanted{spider="profiles"}' in metrics
    assert 'crawler_workers_wanted{spider="explore"}' in metrics
    samples = [line for line in metrics.splitlines() if 'spider="maps"' in line]
    wrong = 'crawler_redis_wrong_type{key="maps:start_urls",spider="maps",type="string"} 1.0'
    assert samples == [wrong]  # its other gauges are left out
    assert "crawler_fleet_redis_up 1.0" in metrics
    assert START_REFUSAL in page
    assert 'id="profiles"' in page
    assert page.index('id="maps"') < page.index('id="profiles"')  # shown first
    assert "unreachable" not in page


def _settings() -> Settings:
    own = Settings()
    own.setmodule(project_settings)
    return own


def _read_keys() -> dict[str, str]:
    """Keys of ``profiles`` that scrapy status and /metrics read -> the type its workers keep."""
    frontier = FrontierKeys("profiles", "profiles:start_urls")
    fleet = FleetKeys.from_settings(_settings(), "profiles")
    return {
        frontier.start: "list",
        frontier.queues: "zset",
        frontier.leases: "zset",
        frontier.delayed: "zset",
        frontier.dead: "list",
        frontier.start_leases: "zset",
        frontier.dupefilter_meta: "hash",
        frontier.queue_prefix + "0": "list",
        fleet.stats: "hash",
        fleet.minute(0): "hash",  # this minute's, as the test runs (_now)
        fleet.workers: "zset",
        failure_window_key("profiles"): "list",
        revisit_keys("profiles")[0]: "zset",
        bans_key("profiles"): "hash",
        reasons_key("profiles"): "hash",
        starts_key("profiles"): "hash",
        jobs_key("profiles"): "hash",
    }


def _write(client: redis.Redis, key: str, kind: str) -> None:
    if kind == "string":
        client.set(key, "oops")
    elif kind == "list":
        client.rpush(key, "oops")
    elif kind == "hash":
        client.hset(key, "oops", "1")
    elif kind == "set":
        client.sadd(key, "oops")
    else:
        client.zadd(key, {"oops": 1})


def _now(key: str) -> str:
    """``key``, or for the minute's key written as minute 0, that of the minute the test runs
    in: WRONG is made as the module is collected, and the reports read the last minutes only."""
    fleet = FleetKeys.from_settings(_settings(), "profiles")
    return fleet.minute(int(time.time() // 60)) if key == fleet.minute(0) else key


KINDS = ("string", "list", "hash", "set", "zset")
WRONG = [(key, kind) for key, right in _read_keys().items() for kind in KINDS if kind != right]


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.sampled_from(WRONG))
def test_any_read_key_of_the_wrong_type_is_named_and_the_others_are_shown(
    redis_client: redis.Redis, wrong: tuple[str, str]
) -> None:
    key, kind = _now(wrong[0]), wrong[1]
    redis_client.flushdb()
    if key.startswith("{profiles}:queue:"):
        redis_client.zadd("{profiles}:queues", {"0": 0})  # the priority whose list it is
    _write(redis_client, key, kind)
    spiders = {"profiles": ProfilesSpider, "explore": ExploreSpider}
    report = fleet_report(redis_client, _settings(), spiders)
    error = report["spiders"]["profiles"]["error"]
    assert f"the Redis key {key} holds a {kind}: must be " in error
    assert "error" not in report["spiders"]["explore"]
    assert key in render_text(report)
    assert "unreadable" in render_page(report)
    own = {name: spider_settings(_settings(), cls) for name, cls in spiders.items()}
    metrics = generate_latest(sizing_registry(redis_client, own)).decode()
    assert 'crawler_workers_wanted{spider="explore"}' in metrics
    # Either the sizing's reads meet the key (the spider's gauges left out, the key named) or
    # they do not read it (only scrapy status does): never both, never neither.
    sized = 'crawler_workers_wanted{spider="profiles"}' in metrics
    named = f'crawler_redis_wrong_type{{key="{key}",spider="profiles",type="{kind}"}} 1.0'
    assert sized != (named in metrics)


@pytest.mark.parametrize("kind", ["string", "list", "set", "zset"])
def test_a_pause_key_of_another_type_still_pauses(redis_client: redis.Redis, kind: str) -> None:
    _write(redis_client, "{profiles}:paused", kind)
    report = fleet_report(redis_client, _settings(), {"profiles": ProfilesSpider})
    assert "error" not in report["spiders"]["profiles"]
    assert report["spiders"]["profiles"]["paused"]
