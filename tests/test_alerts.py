"""The Prometheus alert rules (deploy/prometheus/crawler-alerts.yml) against what a worker's
/metrics exposes: every metric and label a rule reads is there, a worker with no response yet
has a responses sample, and, with promtool, the rules fire (or stay silent) on series made from
real expositions."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import redis
import yaml
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from scrapy import Request
from scrapy.settings import Settings

from crawler import settings as project_settings
from crawler.fleet.autoscaler import Member
from crawler.fleet.backoff import Backoff, StartGuard
from crawler.fleet.exporter import sizing_registry
from crawler.fleet.measure import RedisStarts
from crawler.frontier.dupefilter import DupefilterConfig
from crawler.frontier.jobs import JobBook
from crawler.frontier.pause import Pause
from crawler.frontier.queue import Frontier
from crawler.keys import FleetKeys, FrontierKeys
from crawler.meta import JOB_META
from crawler.observability.counters import Counters
from crawler.observability.metrics import Snapshot, WorkerInfo, registry_for
from crawler.observability.publisher import FleetView, StatsPublisher
from crawler.observability.sizing import Sizing
from crawler.storage.health import StorageHealth
from crawler.storage.waiting import spilled_key
from tests.harness import ROOT
from tests.test_jobs import _pending

RULES = ROOT / "deploy" / "prometheus" / "crawler-alerts.yml"
MINUTES = 40  # of series fed to promtool, one sample a minute


JobsPaused = tuple[tuple[str, str, str], ...]


def _page(
    spider: str = "profiles",
    stats: dict[str, Any] | None = None,
    queued: int = 5,
    pause: Pause | None = None,
    fleet: FleetView | None = None,
    jobs_paused: JobsPaused = (),
    storage: StorageHealth | None = None,
) -> str:
    """The /metrics page of a worker of ``spider`` with ``stats`` and ``queued`` requests (or
    the ``fleet`` its publisher read) and ``jobs_paused``."""
    if fleet is None:
        sizing = Sizing(ready=1.0, ceiling=1.0, pace=10.0, measured=False, work=queued, wanted=1)
        fleet = FleetView(time.time(), {"queue": queued}, None, sizing=sizing)
    info = WorkerInfo(spider, "w1", "host", 1, time.time())
    counters = Counters.from_stats(stats or {})
    snapshot = Snapshot(info, counters, fleet, 0.0, pause, jobs_paused, storage)
    registry = registry_for(lambda: snapshot)
    return generate_latest(registry).decode()


def _waiting_for_a_job_that_paused_itself(client: redis.Redis) -> tuple[FleetView, JobsPaused]:
    """The fleet view a worker's publisher reads, and the paused jobs it knows, of a crawl
    whose only work left is 3 requests of a job that paused itself (its answers failed past
    its threshold): parked, as the schedule script and the pop hold them."""
    spider = "waiting"
    book = JobBook(client, spider, failure_ratio=0.5, window=4)
    number = book.number("failing")
    for _ in range(4):
        book.answered(Request("http://a.test/", meta={JOB_META: number}), True)
    book.tick()  # past its threshold: the job pauses itself
    keys = FrontierKeys(spider, f"{spider}:start_urls")
    frontier = Frontier(client, keys, DupefilterConfig(mode="none"))
    frontier.schedule([_pending(n, number, 0, 0) for n in range(3)])
    assert frontier.pop(10, 60, "w1").leased == []
    book.tick()  # the worker reads who paused it and why
    fleet = FleetKeys.for_spider(spider, "{%(spider)s}:stats")
    view = StatsPublisher(client, fleet, keys, "none", "w1", 30).publish({}, {})
    assert view.sizes["queue"] == 3  # work left: the fleet stays open for it
    return view, tuple(book.paused_jobs())


def _exposed(page: str) -> dict[str, list[dict[str, str]]]:
    """The samples of ``page`` by name: each sample's labels."""
    samples: dict[str, list[dict[str, str]]] = {}
    for family in text_string_to_metric_families(page):
        for sample in family.samples:
            samples.setdefault(sample.name, []).append(dict(sample.labels))
    return samples


def _rules() -> dict[str, str]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return {rule["alert"]: rule["expr"] for group in groups for rule in group["rules"]}


def _needs(expr: str) -> dict[str, set[str]]:
    """The crawler metrics ``expr`` reads, each with the labels it needs: those it matches on
    and those of the ``by (...)`` aggregations around it."""
    needs: dict[str, set[str]] = {}
    for match in re.finditer(r"\b(crawler_[a-z_]+)(\{[^}]*\})?", expr):
        matchers = match.group(2) or ""
        needs.setdefault(match.group(1), set()).update(re.findall(r"(\w+)\s*[=!]~?", matchers))
    for match in re.finditer(r"\bby\s*\(([^)]*)\)\s*\(", expr):
        labels = {label.strip() for label in match.group(1).split(",")}
        depth, end = 1, match.end()
        while depth:
            depth += {"(": 1, ")": -1}.get(expr[end], 0)
            end += 1
        for name in re.findall(r"\b(crawler_[a-z_]+)", expr[match.end() : end]):
            needs[name].update(labels)
    for match in re.finditer(r"\bon\s*\(([^)]*)\)", expr):  # every side is by (these) already
        on = {label.strip() for label in match.group(1).split(",")}
        for name, labels in needs.items():
            assert on <= labels | {"spider"}, (name, on)
    return needs


def test_a_worker_with_no_response_yet_exposes_a_zero_responses_sample() -> None:
    """Else the fleet's rate of responses is absent, not 0, and a fleet restarted into a dead
    site never looks stalled."""
    samples = _exposed(_page("links"))["crawler_responses_total"]
    assert samples == [{"spider": "links", "status": ""}]
    answered = _exposed(_page("links", {"downloader/response_status_count/200": 3}))
    assert answered["crawler_responses_total"] == [{"spider": "links", "status": "200"}]


def _exporter_page(client: redis.Redis, *spiders: str) -> str:
    """The /metrics page of ``scrapy status --serve`` for ``spiders``: their sizing, and the
    launches of their fleets (what no worker can tell)."""
    settings = Settings()
    settings.setmodule(project_settings)
    return generate_latest(sizing_registry(client, dict.fromkeys(spiders, settings))).decode()


def test_every_metric_and_label_the_alerts_read_is_exposed(redis_client: redis.Redis) -> None:
    """A worker's page (paused, so the pause's info is there too; banned, so the bans by rule
    are: labelled counters have a sample once counted) or the exporter's (``scrapy status
    --serve``: a fleet's launches) has every crawler metric each rule reads, with the labels
    the rule matches and aggregates by."""
    stats = {"ban/count": 1, "ban/rule/captcha": 1}
    paused = (("acme-1", "failure threshold", "9 of the last 10 answers failed"),)
    pause = Pause(time.time(), "ops", "db migration")
    away = StorageHealth(away=True, spilled=12)
    exposed = _exposed(_page(stats=stats, pause=pause, jobs_paused=paused, storage=away))
    redis_client.set("maps:start_urls", "oops")  # a key of the wrong type is named
    _spill_left(redis_client, "vm9", 12)  # items a killed worker spilled wait on its host
    for name, samples in _exposed(_exporter_page(redis_client, "profiles", "maps")).items():
        exposed.setdefault(name, []).extend(samples)
    rules = _rules()
    assert "CrawlerStalled" in rules
    assert "crawler_pause_info" in rules["CrawlerStalled"]  # a deliberate pause is no stall
    for alert, expr in rules.items():
        for name, labels in _needs(expr).items():
            assert name in exposed, (alert, name)
            assert any(labels <= set(sample) for sample in exposed[name]), (alert, name, labels)


def _series(page: str, instance: str, responses_per_minute: int = 0) -> list[dict[str, str]]:
    """promtool input series of the crawler metrics the rules read, from the worker's
    ``page``: constant, but the responses growing by ``responses_per_minute``."""
    read = set().union(*(_needs(expr) for expr in _rules().values()))
    series = []
    for family in text_string_to_metric_families(page):
        for sample in family.samples:
            if sample.name not in read:
                continue
            # A label with an empty value is no label to Prometheus.
            labels = {k: v for k, v in sample.labels.items() if v} | {"instance": instance}
            text = ",".join(f"{k}={json.dumps(v)}" for k, v in sorted(labels.items()))
            step = responses_per_minute if sample.name == "crawler_responses_total" else 0
            values = f"{sample.value:g}+{step}x{MINUTES}"
            series.append({"series": f"{sample.name}{{{text}}}", "values": values})
    return series


def _depths(page: str) -> dict[str, float]:
    """``crawler_queue_depth`` of ``page`` by state."""
    return {
        sample.labels["state"]: sample.value
        for family in text_string_to_metric_families(page)
        for sample in family.samples
        if sample.name == "crawler_queue_depth"
    }


def test_a_paused_jobs_parked_requests_are_parked_not_queued(redis_client: redis.Redis) -> None:
    """A crawl whose only work left is the parked requests of a job that paused itself: a
    worker's /metrics says them parked, and nothing queued (no pop hands them out)."""
    view, jobs = _waiting_for_a_job_that_paused_itself(redis_client)
    depths = _depths(_page("waiting", fleet=view, jobs_paused=jobs))
    assert (depths["queued"], depths["parked"]) == (0, 3)
    assert sum(depths.values()) == 3  # each request in one state
    assert [(job, by) for job, by, _ in jobs] == [("failing", "failure threshold")]


# `make test` installs promtool (scripts/ensure-tool.sh); CI never skips the rules' test.
needs_promtool = pytest.mark.skipif(
    shutil.which(os.environ.get("PROMTOOL_PATH", "promtool")) is None and not os.environ.get("CI"),
    reason="promtool not installed (make promtool)",
)


def _promtool(tmp_path: Path, series: list[dict[str, str]], checks: list[dict[str, Any]]) -> None:
    """Run the rules over ``series`` (one sample a minute) with promtool: ``checks`` (its
    alert_rule_test entries) hold."""
    tests = {
        "rule_files": [str(RULES)],
        "evaluation_interval": "1m",
        "tests": [{"interval": "1m", "input_series": series, "alert_rule_test": checks}],
    }
    path = tmp_path / "rules.test.yml"
    path.write_text(yaml.safe_dump(tests))
    result = subprocess.run(
        [os.environ.get("PROMTOOL_PATH", "promtool"), "test", "rules", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def _fired(summary: str, **labels: str) -> dict[str, Any]:
    """An alert promtool expects: a warning with ``labels`` and ``summary``."""
    labelled = {"severity": "warning", **labels}
    return {"exp_labels": labelled, "exp_annotations": {"summary": summary}}


STALLED = "{}: work is queued but no page was fetched for 15 minutes"


@needs_promtool
def test_crawler_stalled_fires_for_a_dead_site_not_for_a_deliberate_pause(tmp_path: Path) -> None:
    """Workers restarted into a dead site (no response since they started) alert; a crawl
    paused on purpose does not, one the failure threshold paused does (a person looks first),
    and one fetching pages does not."""
    answered = {"downloader/response_status_count/200": 100}
    now = time.time()
    series = [
        *_series(_page("dead"), "a"),
        *_series(_page("held", answered, pause=Pause(now, "ops", "db migration")), "b"),
        *_series(_page("failing", answered, pause=Pause(now, "failure threshold", "9/10")), "c"),
        *_series(_page("busy", answered), "d", responses_per_minute=30),
    ]
    expected = [_fired(STALLED.format(spider), spider=spider) for spider in ("dead", "failing")]
    _promtool(
        tmp_path,
        series,
        [
            {"eval_time": "10m", "alertname": "CrawlerStalled", "exp_alerts": []},
            {"eval_time": "35m", "alertname": "CrawlerStalled", "exp_alerts": expected},
        ],
    )


@needs_promtool
def test_a_crawl_waiting_for_a_job_that_paused_itself_is_no_stall_the_job_alerts(
    redis_client: redis.Redis, tmp_path: Path
) -> None:
    """Its parked requests were counted as queued: CrawlerStalled fired for a crawl that only
    waits for a paused job. Now the job that paused itself alerts (a person resumes it), not
    the crawl; a job paused by a command does not alert, and a crawl with queued work beside a
    paused job and no page fetched is still stalled."""
    view, jobs = _waiting_for_a_job_that_paused_itself(redis_client)
    [(job, _, reason)] = jobs
    answered = {"downloader/response_status_count/200": 100}
    by_hand = (("later", "", ""),)
    series = [
        *_series(_page("waiting", answered, fleet=view, jobs_paused=jobs), "a"),
        *_series(_page("resting", answered, queued=0, jobs_paused=by_hand), "b"),
        *_series(_page("stuck", answered, jobs_paused=by_hand), "c"),
    ]
    paused = (
        f"waiting: job {job} paused itself: {reason}; scrapy frontier waiting job {job} "
        "resume once the cause is fixed"
    )
    fired = _fired(paused, spider="waiting", job=job, reason=reason)
    stuck = _fired(STALLED.format("stuck"), spider="stuck")
    _promtool(
        tmp_path,
        series,
        [
            {"eval_time": "35m", "alertname": "CrawlerStalled", "exp_alerts": [stuck]},
            {"eval_time": "35m", "alertname": "CrawlerJobPausedItself", "exp_alerts": [fired]},
        ],
    )


def _failed_starts(client: redis.Redis, spider: str, count: int) -> None:
    """``count`` instances of ``spider``'s fleet gone without their worker ever reporting, as
    ``scrapy fleet autoscale`` counts them (3 hold its launches)."""
    guard = StartGuard(Backoff(3, 3600.0), RedisStarts(client, spider))
    gone = [Member(f"i-{n}", time.time(), gone=True, reported=False) for n in range(count)]
    guard.look(gone, [], time.time())


@needs_promtool
def test_a_fleet_whose_instances_never_start_alerts(
    redis_client: redis.Redis, tmp_path: Path
) -> None:
    """3 instances in a row that never sent a heartbeat hold the launches of ``profiles``: it
    alerts at once, from the exporter's page (no worker runs); 2 (``links``, not held yet) and
    none (``explore``) do not."""
    _failed_starts(redis_client, "profiles", 3)
    _failed_starts(redis_client, "links", 2)
    series = _series(_exporter_page(redis_client, "profiles", "links", "explore"), "status")
    summary = (
        "profiles: 3 workers in a row never started; scrapy fleet autoscale holds its launches "
        "(install target? secrets? a setting?)"
    )
    check = {"alertname": "CrawlerFleetCannotStart"}
    _promtool(
        tmp_path,
        series,
        [{**check, "eval_time": "1m", "exp_alerts": [_fired(summary, spider="profiles")]}],
    )


@needs_promtool
def test_a_key_of_the_wrong_type_alerts_for_its_spider_only(
    redis_client: redis.Redis, tmp_path: Path
) -> None:
    """``redis-cli SET maps:start_urls oops``: it alerts at once for ``maps``, naming the key,
    from the exporter's page; ``profiles`` beside it does not."""
    redis_client.set("maps:start_urls", "oops")
    series = _series(_exporter_page(redis_client, "profiles", "maps"), "status")
    summary = (
        "maps: the Redis key maps:start_urls holds a string, not what its workers keep there; "
        "its sizing is left out (scrapy status maps)"
    )
    labels = {"spider": "maps", "key": "maps:start_urls", "type": "string"}
    check = {"alertname": "CrawlerRedisKeyWrongType"}
    _promtool(
        tmp_path, series, [{**check, "eval_time": "1m", "exp_alerts": [_fired(summary, **labels)]}]
    )


@needs_promtool
def test_workers_holding_mongodb_away_alert_after_three_minutes(tmp_path: Path) -> None:
    """Two workers of ``profiles`` hold MongoDB away: it alerts once that lasted 3 minutes,
    counting them; a worker whose MongoDB answers (``links``, its spill replaying) does not."""
    series = [
        *_series(_page("profiles", storage=StorageHealth(True, 40)), "a"),
        *_series(_page("profiles", storage=StorageHealth(True, 3)), "b"),
        *_series(_page("links", storage=StorageHealth(False, 7)), "c"),
    ]
    summary = (
        "profiles: 2 workers find MongoDB away for 3 minutes; their items are spilled to "
        "MONGO_SPILL_DIR until it answers"
    )
    check = {"alertname": "CrawlerMongoDBAway"}
    _promtool(
        tmp_path,
        series,
        [
            {**check, "eval_time": "2m", "exp_alerts": []},
            {**check, "eval_time": "4m", "exp_alerts": [_fired(summary, spider="profiles")]},
        ],
    )


def _spill_left(client: redis.Redis, host: str, items: int) -> None:
    """The fleet's record of a spill file a worker of ``profiles`` that is gone left on
    ``host`` (crawler/storage/waiting.py)."""
    field = json.dumps([host, "/var/spill/profiles-4242-0123abcd.jsonl"])
    client.hset(spilled_key("profiles"), field, json.dumps({"items": items, "at": time.time()}))


@needs_promtool
def test_items_a_gone_worker_spilled_alert_after_ten_minutes(
    redis_client: redis.Redis, tmp_path: Path
) -> None:
    """A killed worker's spill file holds 30 items on ``vm9``: ``scrapy status --serve``
    exports them and it alerts once they waited 10 minutes, naming the host; ``maps``, with
    none, does not."""
    _spill_left(redis_client, "vm9", 30)
    series = _series(_exporter_page(redis_client, "profiles", "maps"), "status")
    summary = (
        "profiles: 30 items spilled on vm9 wait for a worker there for 10 minutes; start one "
        "on that host with its MONGO_SPILL_DIR"
    )
    check = {"alertname": "CrawlerSpilledItemsWaiting"}
    fired = _fired(summary, spider="profiles", host="vm9")
    _promtool(
        tmp_path,
        series,
        [
            {**check, "eval_time": "5m", "exp_alerts": []},
            {**check, "eval_time": "11m", "exp_alerts": [fired]},
        ],
    )
