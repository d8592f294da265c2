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
import yaml
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from crawler.frontier.pause import Pause
from crawler.observability.counters import Counters
from crawler.observability.metrics import Snapshot, WorkerInfo, registry_for
from crawler.observability.publisher import FleetView
from crawler.observability.sizing import Sizing
from tests.harness import ROOT

RULES = ROOT / "deploy" / "prometheus" / "crawler-alerts.yml"
MINUTES = 40  # of series fed to promtool, one sample a minute


def _page(
    spider: str = "profiles",
    stats: dict[str, Any] | None = None,
    queued: int = 5,
    pause: Pause | None = None,
) -> str:
    """The /metrics page of a worker of ``spider`` with ``stats`` and ``queued`` requests."""
    sizing = Sizing(ready=1.0, ceiling=1.0, pace=10.0, measured=False, work=queued, wanted=1)
    fleet = FleetView(time.time(), {"queue": queued}, None, sizing=sizing)
    info = WorkerInfo(spider, "w1", "host", 1, time.time())
    counters = Counters.from_stats(stats or {})
    registry = registry_for(lambda: Snapshot(info, counters, fleet, 0.0, pause))
    return generate_latest(registry).decode()


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


def test_every_metric_and_label_the_alerts_read_is_exposed() -> None:
    """A worker's page (paused, so the pause's info is there too; banned, so the bans by rule
    are: labelled counters have a sample once counted) has every crawler metric each rule
    reads, with the labels the rule matches and aggregates by."""
    stats = {"ban/count": 1, "ban/rule/captcha": 1}
    exposed = _exposed(_page(stats=stats, pause=Pause(time.time(), "ops", "db migration")))
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


# `make test` installs promtool (scripts/ensure-tool.sh); CI never skips the rules' test.
@pytest.mark.skipif(
    shutil.which(os.environ.get("PROMTOOL_PATH", "promtool")) is None and not os.environ.get("CI"),
    reason="promtool not installed (make promtool)",
)
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
    summary = "{}: work is queued but no page was fetched for 15 minutes"
    expected = [
        {
            "exp_labels": {"severity": "warning", "spider": spider},
            "exp_annotations": {"summary": summary.format(spider)},
        }
        for spider in ("dead", "failing")
    ]
    tests = {
        "rule_files": [str(RULES)],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": series,
                "alert_rule_test": [
                    {"eval_time": "10m", "alertname": "CrawlerStalled", "exp_alerts": []},
                    {"eval_time": "35m", "alertname": "CrawlerStalled", "exp_alerts": expected},
                ],
            }
        ],
    }
    path = tmp_path / "stalled.test.yml"
    path.write_text(yaml.safe_dump(tests))
    result = subprocess.run(
        [os.environ.get("PROMTOOL_PATH", "promtool"), "test", "rules", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
