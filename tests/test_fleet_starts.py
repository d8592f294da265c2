"""A fleet whose instances never start (a broken install target, secrets they cannot read):
``scrapy fleet autoscale`` holds its launches back after FLEET_START_FAILURES of them in a row,
says so, tries one at a time after a growing hold, and goes on as wanted once a worker
reports (crawler/fleet/backoff.py). EC2 is moto in server mode; Redis is real."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.request import urlopen

import pytest
import redis
from hypothesis import given
from hypothesis import strategies as st

from crawler.aws.config import FleetConfig
from crawler.aws.engine import Ec2Workers
from crawler.aws.instances import Fleet
from crawler.config.rules import SettingsError
from crawler.fleet.autoscaler import Autoscaler
from crawler.fleet.backoff import MOST_HOLD, Backoff, StartGuard
from crawler.fleet.measure import RedisStarts, beats_by_host
from crawler.observability.starts import Starts, starts_from
from tests.harness import Crawl, on_free_port, scrapy, status_page
from tests.test_aws import _beat, _client, _env, _fleet, _json, _moto, _project_settings, _running

pytestmark = pytest.mark.integration

HOLD = 3600.0


@pytest.fixture(scope="module")
def aws_env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """A moto server on loopback and the environment that points boto3 (and Scrapy) at it."""
    server = on_free_port(_moto(tmp_path_factory.mktemp("moto") / "moto.log"))
    yield _env(server.port)
    server.stop()


def test_instances_that_never_start_hold_the_launches_and_it_is_said(
    crawl: Crawl, redis_client: redis.Redis, aws_env: dict[str, str], tmp_path: Path
) -> None:
    """3 instances whose workers never report were terminated past FLEET_WORKER_GRACE and 3
    more launched at every look, for ever. Now those 3 failed starts hold the launches back:
    the look says so on stderr, launches nothing (EC2 has no instance of the fleet), nor does
    the next; ``scrapy status`` and its /metrics show the hold."""
    ec2 = _client(aws_env, "ec2")
    ami = ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
    env = {**crawl.env(), **aws_env}
    name = f"starts-{tmp_path.name[-12:]}"
    settings = {
        "FLEET_NAME": name,
        "AUTOSCALE_BACKLOG_SECONDS": "0.1",
        "AUTOSCALE_WORKER_PACE": "10",
        "POLITENESS_RATE": "0",  # the API host unpaced: workers follow the entries
        "FLEET_START_FAILURES": "3",
        "FLEET_START_BACKOFF": str(HOLD),
    }

    def look(grace: float) -> Any:
        result = _fleet(env, "autoscale", "profiles", "--once", "--json", "--ami", ami,
                        settings={**settings, "FLEET_WORKER_GRACE": str(grace)})  # fmt: skip
        return {**_json(result), "stderr": result.stderr}

    redis_client.lpush(
        "profiles:start_urls", *(json.dumps({"unique_id": f"u{n}"}) for n in range(3))
    )
    first = look(3600)
    assert (first["wanted"], len(first["started"])) == (3, 3)
    held = look(0.001)  # none of the 3 ever sent a heartbeat
    assert sorted(held["gone"]) == sorted(first["started"])
    assert held["started"] == []
    assert _running(ec2, name) == set()
    assert (held["starts"], held["failed_starts"]) == ("held", 3)
    assert held["held_until"] == pytest.approx(time.time() + HOLD, abs=60)
    assert (
        "3 launches in a row sent no heartbeat within FLEET_WORKER_GRACE: no launch until"
        in (held["stderr"])
    )
    assert _running(ec2, name) == set()
    again = look(0.001)
    assert (again["wanted"], again["started"], again["starts"]) == (3, [], "")
    assert _running(ec2, name) == set()

    status = json.loads(scrapy("status", "profiles", "--json", env=env).stdout)
    starts = status["spiders"]["profiles"]["starts"]
    assert (starts["failed_starts"], starts["held"]) == (3, True)
    text = scrapy("status", "profiles", env=env).stdout
    assert "  launches  held until " in text
    assert "3 launches in a row failed to start (no heartbeat" in text
    with status_page(env) as url, urlopen(url + "metrics", timeout=30) as answer:
        metrics = answer.read().decode()
    assert 'crawler_fleet_failed_starts{spider="profiles"} 3.0' in metrics
    assert 'crawler_fleet_launches_held{spider="profiles"} 1.0' in metrics
    assert 'crawler_fleet_launches_held{spider="explore"} 0.0' in metrics


def test_after_the_hold_one_instance_tries_the_holds_grow_and_a_report_ends_them(
    redis_client: redis.Redis, aws_env: dict[str, str], tmp_path: Path
) -> None:
    """The autoscaler's loop over EC2 on a clock of its own: once the hold is over one instance
    is launched (not the 3 wanted); it never reports either, and the next hold is twice as
    long; the one after it reports, and the 2 others wanted are launched at once."""
    ec2 = _client(aws_env, "ec2")
    ami = ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
    name = f"tries-{tmp_path.name[-12:]}"
    settings = _project_settings(FLEET_NAME=name, AWS_ENDPOINT_URL=aws_env["AWS_ENDPOINT_URL"])
    fleet = Fleet(FleetConfig.from_settings(settings), client=ec2)
    launch = {"user_data": "#!/bin/bash", "ami": ami}
    rates = lambda: beats_by_host(redis_client, settings, "profiles")  # noqa: E731
    engine = Ec2Workers(fleet, "profiles", launch, rates, redis_client, 0.001)
    guard = StartGuard(Backoff(3, HOLD), RedisStarts(redis_client, "profiles"))
    clock = [time.time()]
    scaler = Autoscaler(engine, lambda: 3, 0.0, clock=lambda: clock[0], guard=guard)

    assert len(scaler.step().started) == 3
    held = scaler.step()
    assert (held.starts, held.started, held.held_until) == ("held", [], clock[0] + HOLD)
    clock[0] += HOLD - 1
    assert scaler.step().started == []
    clock[0] += 2
    tried = scaler.step()
    assert (tried.starts, len(tried.started)) == ("trying", 1)
    again = scaler.step()  # it never reported either (gone past its grace): a longer hold
    assert (again.starts, again.gone, again.started) == ("held", tried.started, [])
    assert (again.failed_starts, guard.starts.holds) == (4, 2)
    assert again.held_until == clock[0] + 2 * HOLD
    assert _running(ec2, name) == set()
    clock[0] = again.held_until
    (probe,) = scaler.step().started
    instance = next(i for i in fleet.instances("profiles") if i.id == probe)
    _beat(redis_client, "profiles", "ip-" + instance.private_ip.replace(".", "-"), 0.0)
    recovered = scaler.step()
    assert (recovered.starts, recovered.failed_starts) == ("recovered", 0)
    assert len(recovered.started) == 2
    assert len(_running(ec2, name)) == 3
    assert not redis_client.exists("{profiles}:fleet:starts")


def test_the_holds_grow_to_a_day_at_most() -> None:
    backoff = Backoff(3, 1800.0)
    assert [backoff.hold(n) for n in range(4)] == [1800.0, 3600.0, 7200.0, 14400.0]
    assert backoff.hold(6) == backoff.hold(10_000) == MOST_HOLD


@pytest.mark.parametrize(
    ("name", "value"), [("FLEET_START_FAILURES", "-1"), ("FLEET_START_BACKOFF", "0")]
)
def test_a_bad_start_setting_is_refused_naming_it(name: str, value: str) -> None:
    with pytest.raises(SettingsError, match=name):
        FleetConfig.from_settings(_project_settings(**{name: value}))


def test_start_settings_are_read_with_their_defaults() -> None:
    config = FleetConfig.from_settings(_project_settings())
    assert config.start_backoff == Backoff(3, 1800.0) == Backoff.from_settings(_project_settings())
    off = FleetConfig.from_settings(_project_settings(FLEET_START_FAILURES="0"))
    assert off.start_backoff.failures == 0  # never held


TEXT = st.one_of(st.text(max_size=20), st.binary(max_size=20))


@given(st.dictionaries(st.sampled_from(["failed", "holds", "held_until", "since", "x"]), TEXT))
def test_a_record_another_tool_wrote_reads_as_no_failure_where_it_makes_no_sense(
    raw: dict[str, Any],
) -> None:
    """``{spider}:fleet:starts`` written by hand or damaged: never an error, never a hold for
    ever (inf, nan) nor a negative count."""
    starts = starts_from(raw)
    assert min(starts.failed, starts.holds) >= 0
    for value in (starts.held_until, starts.since):
        assert 0 <= value < float("inf")
    assert starts_from({}) == Starts()
