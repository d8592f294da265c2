"""``scrapy status`` on input it does not control: a ``--watch`` that is no usable number of
seconds is a usage error (exit 2), and a worker's heartbeat whose fields are not numbers (another
tool's, damaged) is shown with those fields ignored, never an error."""

from __future__ import annotations

import os
import time

import pytest
import redis
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from scrapy.settings import Settings

from crawler import settings as project_settings
from crawler.keys import FleetKeys
from crawler.observability.page import render_page
from crawler.observability.report import WORKER_NUMBERS, WORKER_RATES, fleet_report
from crawler.observability.report_text import render_text
from crawler.spiders.profiles import ProfilesSpider
from tests.harness import Crawl, scrapy

FIELDS = (*WORKER_NUMBERS, *WORKER_RATES, "metrics_port", "worker", "host", "seq")


@pytest.mark.parametrize("watch", ["nan", "inf", "-inf", "-1", "0", "1e300"])
def test_watch_takes_a_finite_number_of_seconds_above_zero(watch: str) -> None:
    result = scrapy("status", "profiles", f"--watch={watch}", env=dict(os.environ))
    assert result.returncode == 2, result.stderr[-2000:]
    assert "--watch takes a number of seconds above 0" in result.stderr
    assert "Traceback" not in result.stderr


def _settings() -> Settings:
    own = Settings()
    own.setmodule(project_settings)
    return own


def _beat(client: redis.Redis, fields: dict[str, bytes]) -> None:
    """A live worker of ``profiles`` whose heartbeat hash holds ``fields``."""
    keys = FleetKeys.from_settings(_settings(), "profiles")
    client.zadd(keys.workers, {"w1": time.time() + 60})
    client.delete(keys.worker("w1"))
    for name, value in fields.items():
        client.hset(keys.worker("w1"), name, value)


def test_a_heartbeat_rate_that_is_no_number_is_ignored(
    crawl: Crawl, redis_client: redis.Redis
) -> None:
    _beat(redis_client, {"pages_per_min": b"", "items_per_min": b"12", "host": b"h"})
    result = scrapy("status", "profiles", env=crawl.env())
    assert result.returncode == 0, result.stderr[-3000:]
    assert "now 0 pages/min, 12 items/min" in result.stdout
    assert "1 live" in result.stdout


values = st.one_of(
    st.binary(max_size=12),
    st.text(max_size=12).map(str.encode),
    st.sampled_from([b"", b"nan", b"inf", b"-inf", b"1e309", b"-0", b"1_0", b" 7 ", b"9" * 5000]),
    st.floats().map(lambda number: repr(number).encode()),
    st.integers().map(lambda number: str(number).encode()),
)


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.dictionaries(st.sampled_from(FIELDS), values, min_size=1))
@example({"metrics_port": b"9" * 5000})  # past Python's limit for reading digits
@example({"metrics_port": b"70000"})
def test_any_heartbeat_fields_are_shown_never_an_error(
    redis_client: redis.Redis, fields: dict[str, bytes]
) -> None:
    _beat(redis_client, fields)
    report = fleet_report(redis_client, _settings(), {"profiles": ProfilesSpider})
    render_text(report)
    render_page(report)
    (worker,) = report["spiders"]["profiles"]["workers"]
    for name in (*WORKER_NUMBERS, *WORKER_RATES):
        assert name not in worker or isinstance(worker[name], int | float), (name, worker)
    assert worker["metrics_port"] is None or 0 < worker["metrics_port"] < 65536
