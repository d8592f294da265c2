"""Seeing the fleet: shared stats in Redis, heartbeats, ``scrapy status``, ``/metrics``, progress.

Unit tests drive the publisher and the monitor against a real Redis; integration tests run two
``scrapy crawl`` workers against the sandbox and compare ``scrapy status --json`` and the
workers' metrics endpoints, scraped over HTTP, with the sandbox's own counts and MongoDB.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, ExitStack
from http.client import HTTPException
from pathlib import Path
from typing import Any, TypeVar
from urllib.request import urlopen

import pytest
import redis
import redis.cluster
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.retry import Retry
from scrapy import Request, Spider
from scrapy.http import HtmlResponse
from scrapy.settings import Settings
from scrapy.utils.test import get_crawler

import crawler.settings as project_settings
from crawler.config.rules import SettingsError
from crawler.connection import redis_from_settings
from crawler.frontier.queue import requests_per_entry
from crawler.keys import FleetKeys, FrontierKeys
from crawler.observability.counters import Counters
from crawler.observability.endpoint import parse_ports
from crawler.observability.metrics import WorkerInfo, render
from crawler.observability.monitor import FleetMonitor
from crawler.observability.publisher import FleetView, StatsPublisher
from crawler.observability.rates import RateWindow, bucket_rate, eta_seconds, format_duration
from crawler.observability.report import spider_status
from crawler.observability.report_text import render_text
from devtools.services import free_port
from sandbox.seed import build_dataset
from tests.cluster import start_cluster
from tests.harness import Crawl, Sandbox, Worker, poll, scrapy

SPIDER = "shop"
STATS = "{shop}:stats"
DATASET = build_dataset()
MISSING = [f"missing.user{index}" for index in range(20)]
USERS = [author.unique_id for author in DATASET.authors] + MISSING
SAMPLE = re.compile(r"^(?P<name>[a-z_]+)(?:\{(?P<labels>.*)\})? (?P<value>\S+)$")
LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')

T = TypeVar("T")


def _project_settings(redis_url: str, **overrides: Any) -> dict[str, Any]:
    names = {name: getattr(project_settings, name) for name in dir(project_settings)}
    return {
        **{name: value for name, value in names.items() if name.isupper()},
        "REDIS_URL": redis_url,
        **overrides,
    }


def _publisher(client: Any, worker: str = "w1", ttl: int = 30) -> StatsPublisher:
    return StatsPublisher(
        client,
        FleetKeys.for_spider(SPIDER, "{%(spider)s}:stats"),
        FrontierKeys(SPIDER, f"{SPIDER}:start_urls"),
        "bloom",
        worker,
        ttl,
    )


def _hash(client: redis.Redis, key: str) -> dict[str, str]:
    raw: Any = client.hgetall(key)
    return {name.decode(): value.decode() for name, value in raw.items()}


# --- publishing deltas (real Redis) ---------------------------------------------------------------


def test_workers_add_their_deltas_to_the_fleet_hash(redis_client: redis.Redis) -> None:
    first, second = _publisher(redis_client, "w1"), _publisher(redis_client, "w2")
    first.publish({"downloader/request_count": 3, "item_scraped_count": 2, "x": 0.5}, {})
    second.publish({"downloader/request_count": 4, "start_time": "not a number"}, {})
    first.publish(
        {"downloader/request_count": 10, "item_scraped_count": 2, "x": 1.25, "flag": True}, {}
    )

    stats = _hash(redis_client, STATS)
    assert int(stats["downloader/request_count"]) == 14
    assert int(stats["item_scraped_count"]) == 2
    assert float(stats["x"]) == pytest.approx(1.25)
    assert "start_time" not in stats
    assert "flag" not in stats
    minute = _hash(redis_client, f"{STATS}:minute:{int(time.time() // 60)}")
    assert minute == {"requests": "14", "items": "2"}
    assert 0 < int(redis_client.ttl(f"{STATS}:minute:{int(time.time() // 60)}")) <= 3900


def test_a_heartbeat_expires_and_a_clean_close_removes_it(redis_client: redis.Redis) -> None:
    publisher = _publisher(redis_client, "host:1:abc", ttl=7)
    publisher.publish({}, {"host": "host", "pid": 1, "pages_per_min": 12.5})
    beat = _hash(redis_client, "{shop}:workers:host:1:abc")
    assert beat["host"] == "host"
    assert beat["pages_per_min"] == "12.5"
    assert 0 < int(redis_client.ttl("{shop}:workers:host:1:abc")) <= 7
    assert redis_client.zrange("{shop}:workers", 0, -1) == [b"host:1:abc"]

    publisher.close({"item_scraped_count": 5}, "finished")
    assert not redis_client.exists("{shop}:workers:host:1:abc")
    assert redis_client.zcard("{shop}:workers") == 0
    stats = _hash(redis_client, STATS)
    assert stats["finish_reason"] == "finished"
    assert stats["item_scraped_count"] == "5"


class _LostReplies:
    """A client whose next pipeline runs its commands and then loses the connection."""

    def __init__(self, client: redis.Redis) -> None:
        self.client = client
        self.lose_next = True

    def pipeline(self, transaction: bool = True) -> Any:
        pipe = self.client.pipeline(transaction=transaction)
        if not self.lose_next:
            return pipe
        self.lose_next = False
        execute = pipe.execute

        def execute_and_lose(raise_on_error: bool = True) -> Any:
            execute(raise_on_error)
            raise RedisConnectionError("connection lost before the reply")

        pipe.execute = execute_and_lose  # type: ignore[method-assign]
        return pipe


def test_a_batch_resent_after_a_lost_reply_counts_once(redis_client: redis.Redis) -> None:
    publisher = _publisher(_LostReplies(redis_client))
    with pytest.raises(RedisConnectionError):
        publisher.publish({"retry/count": 2}, {})
    assert _hash(redis_client, STATS)["retry/count"] == "2"  # applied, but not acknowledged
    publisher.publish({"retry/count": 5}, {})
    assert _hash(redis_client, STATS)["retry/count"] == "5"


def test_deltas_wait_while_redis_is_away(redis_client: redis.Redis) -> None:
    away = redis.Redis(port=free_port(), retry=Retry(NoBackoff(), 0))
    publisher = _publisher(away)
    with pytest.raises(redis.RedisError):
        publisher.publish({"ban/count": 1}, {})
    with pytest.raises(redis.RedisError):
        publisher.publish({"ban/count": 3}, {})
    publisher.server = redis_client
    view = publisher.publish({"ban/count": 4}, {})
    assert _hash(redis_client, STATS)["ban/count"] == "4"
    assert view.sizes["queue"] == 0


def test_the_fleet_view_reads_sizes_seen_count_and_pace(redis_client: redis.Redis) -> None:
    redis_client.rpush("{shop}:queue:0", "1", "2", "3")
    redis_client.zadd("{shop}:queues", {"0": 0})
    redis_client.zadd("{shop}:leases", {"4": 1})
    redis_client.rpush("{shop}:dead", "{}")
    redis_client.hset("{shop}:dupefilter:meta", mapping={"filters": 2, "count:0": 7, "count:1": 3})
    minute = int(time.time() // 60)
    for ago, pages in ((3, 120), (2, 90), (1, 30)):
        redis_client.hset(f"{STATS}:minute:{minute - ago}", mapping={"pages": pages})

    view = _publisher(redis_client).publish({}, {})

    assert view.sizes == {
        "queue": 3,
        "leased": 1,
        "delayed": 0,
        "dead": 1,
        "start": 0,
        "start_leased": 0,
    }
    assert view.seen == 10
    assert view.remaining == 4
    assert view.per_minute("pages") == 60  # the whole minutes after the first one


@pytest.fixture(scope="module")
def cluster_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    cluster = start_cluster(tmp_path_factory.mktemp("cluster"))
    yield cluster.url
    cluster.stop()


def test_publishing_and_status_work_on_a_redis_cluster(cluster_url: str) -> None:
    settings = Settings(_project_settings(cluster_url, REDIS_CLUSTER=True))
    client = redis_from_settings(settings)
    assert isinstance(client, redis.cluster.RedisCluster)
    client.flushall()
    publisher = _publisher(client)
    publisher.publish({"downloader/request_count": 3, "response_received_count": 2}, {"host": "h"})
    publisher.publish({"downloader/request_count": 5, "response_received_count": 2}, {"host": "h"})

    status = spider_status(client, settings, SPIDER)
    assert status["counters"]["requests"] == 5
    assert [beat["host"] for beat in status["workers"]] == ["h"]
    assert sum(row["pages"] for row in status["rates"]["per_minute"]) == 2

    publisher.close({"downloader/request_count": 6}, "finished")
    status = spider_status(client, settings, SPIDER)
    assert (status["counters"]["requests"], status["workers"]) == (6, [])
    assert status["finish_reason"] == "finished"
    client.close()


# --- the extension, built from settings -----------------------------------------------------------


def test_the_monitor_publishes_counts_per_domain_and_serves_them(
    redis_url: str, redis_client: redis.Redis
) -> None:
    crawler = get_crawler(settings_dict=_project_settings(redis_url, WORKER_HEARTBEAT_TTL=9))
    monitor = FleetMonitor.from_crawler(crawler)
    assert monitor.config.period == 3
    monitor.open("shop", "here:42:abc")
    request = Request("https://shop.example/item/1")
    response = HtmlResponse(request.url, status=404, body=b"", request=request)
    monitor.request_reached_downloader(request)
    monitor.response_downloaded(response, request)
    monitor.item_scraped({"x": 1}, response)
    assert crawler.stats is not None
    crawler.stats.inc_value("downloader/request_count")
    crawler.stats.inc_value("downloader/response_status_count/404")
    crawler.stats.inc_value("mongo/items/things")

    monitor.tick()

    stats = _hash(redis_client, STATS)
    assert stats["domain/shop.example/request_count"] == "1"
    assert stats["domain/shop.example/response_status_count/404"] == "1"
    assert stats["domain/shop.example/item_scraped_count"] == "1"
    assert _hash(redis_client, "{shop}:workers:here:42:abc")["spider"] == "shop"
    page = monitor.metrics_page()
    assert 'crawler_responses_total{spider="shop",status="404"} 1.0' in page
    # prometheus_client writes labels in name order.
    assert 'crawler_items_total{collection="things",spider="shop"} 1.0' in page
    assert 'crawler_domain_requests_total{domain="shop.example",spider="shop"} 1.0' in page
    assert 'crawler_queue_depth{spider="shop",state="queued"} 0.0' in page
    # The process's own, from prometheus_client's collectors.
    assert "process_resident_memory_bytes " in page
    assert "process_cpu_seconds_total " in page

    asyncio.run(monitor.spider_closed(Spider("shop"), "finished"))
    assert not redis_client.exists("{shop}:workers:here:42:abc")


def _meet(monitor: FleetMonitor, *hosts: str) -> None:
    """A request, its 200 and an item for each of ``hosts``, as the signals tell the monitor."""
    for host in hosts:
        request = Request(f"https://{host}/page")
        response = HtmlResponse(request.url, status=200, body=b"", request=request)
        monitor.request_reached_downloader(request)
        monitor.response_downloaded(response, request)
        monitor.item_scraped({"x": 1}, response)


def _by_domain(stats: dict[str, Any], stat: str) -> dict[str, int]:
    return {
        name.split("/")[1]: int(value)
        for name, value in stats.items()
        if name.startswith("domain/") and name.endswith(f"/{stat}")
    }


def test_the_fleet_names_domain_stats_max_domains_and_counts_the_others_as_one(
    redis_url: str, redis_client: redis.Redis
) -> None:
    """Past DOMAIN_STATS_MAX domains, per-domain counts go to ``(other)``, in the fleet's stats
    and in the worker's own (its /metrics): they stop growing with the hosts met, and add up."""
    crawler = get_crawler(settings_dict=_project_settings(redis_url, DOMAIN_STATS_MAX=2))
    assert crawler.stats is not None
    monitor = FleetMonitor.from_crawler(crawler)
    monitor.open("shop", "here:42:abc")
    _meet(monitor, "a.example", "b.example", "c.example", "a.example", "d.example", "b.example")
    crawler.stats.inc_value("ban/domain/c.example")
    crawler.stats.inc_value("ban/domain/a.example")

    monitor.tick()

    stats = _hash(redis_client, STATS)
    for stat in ("request_count", "response_status_count/200", "item_scraped_count"):
        expected = {"a.example": 2, "b.example": 2, "(other)": 2}
        assert _by_domain(stats, stat) == expected, stat
    assert stats["ban/domain/a.example"] == stats["ban/domain/(other)"] == "1"
    own = crawler.stats.get_stats()
    assert not [name for name in own if "c.example" in name or "d.example" in name]
    assert _by_domain(own, "request_count") == {"a.example": 2, "b.example": 2, "(other)": 2}
    page = monitor.metrics_page()
    assert 'crawler_domain_requests_total{domain="(other)",spider="shop"} 2.0' in page

    # The fleet's names are full: a new host is counted as (other) at once.
    _meet(monitor, "e.example", "a.example")
    assert "domain/e.example/request_count" not in crawler.stats.get_stats()
    monitor.tick()
    expected = {"a.example": 3, "b.example": 2, "(other)": 3}
    assert _by_domain(_hash(redis_client, STATS), "request_count") == expected
    assert redis_client.smembers(STATS + ":domains") == {b"a.example", b"b.example"}
    asyncio.run(monitor.spider_closed(Spider("shop"), "finished"))


def test_settings_are_checked(redis_url: str) -> None:
    for bad in (
        {"STATS_PUBLISH_INTERVAL": 0},
        {"WORKER_HEARTBEAT_TTL": 0},
        {"METRICS_PORT": "x"},
        {"PACE_WINDOW": 0},
        {"DOMAIN_STATS_MAX": -1},
    ):
        with pytest.raises(SettingsError, match=next(iter(bad))):
            FleetMonitor.from_crawler(
                get_crawler(settings_dict=_project_settings(redis_url, **bad))
            )
    assert parse_ports("0") == parse_ports("") == parse_ports(None) == []
    assert parse_ports(9410) == [9410]
    assert parse_ports("9410-9412") == [9410, 9411, 9412]
    with pytest.raises(SettingsError, match="METRICS_PORT = 70000: must be a port"):
        parse_ports("70000")


# --- pure pieces ----------------------------------------------------------------------------------


def test_metrics_are_in_the_text_format() -> None:
    counters = Counters.from_stats(
        {
            "downloader/request_count": 5,
            "downloader/response_status_count/200": 4,
            "ban/rule/akamai": 1,
            "frontier/dead/banned:akamai": 1,
            'domain/a"b/request_count': 5,
        }
    )
    fleet = FleetView(120.0, {"queue": 30, "leased": 2, "delayed": 0, "dead": 1}, None, {})
    page = render(WorkerInfo("shop", "w", "h", 1, 10.0), counters, fleet)

    samples = _parse_metrics(page)
    assert samples[("crawler_requests_total", (("spider", "shop"),))] == 5
    assert samples[("crawler_bans_total", (("rule", "akamai"), ("spider", "shop")))] == 1
    dead_key = ("crawler_dead_letters_total", (("reason", "banned:akamai"), ("spider", "shop")))
    assert samples[dead_key] == 1
    assert samples[("crawler_queue_depth", (("spider", "shop"), ("state", "queued")))] == 30
    assert 'domain="a\\"b"' in page
    assert "# TYPE crawler_responses_total counter" in page
    assert "# TYPE crawler_queue_depth gauge" in page
    assert "crawler_eta_seconds{" not in page  # nothing moves: no estimate


def test_rates_and_estimates() -> None:
    window = RateWindow(window=60)
    for second in range(0, 121, 5):
        window.add(float(second), second * 2.0)  # 2 per second
    assert window.per_minute() == pytest.approx(120)
    assert bucket_rate({}, 600.0) == 0
    # Whole minutes after the first active one, without the current one.
    assert bucket_rate({6: 0, 7: 10, 8: 60, 9: 80, 10: 5}, 630.0) == pytest.approx(70)
    # Too young for that: from the start of its first minute, over 10 s at least.
    assert bucket_rate({8: 0, 9: 60, 10: 30}, 630.0) == pytest.approx(60)
    assert bucket_rate({10: 30}, 630.0) == pytest.approx(60)
    assert bucket_rate({10: 5}, 601.0) == pytest.approx(30)
    assert eta_seconds(0, 0) == 0
    assert eta_seconds(10, 0) is None
    assert eta_seconds(300, 60) == 300
    assert [format_duration(s) for s in (None, 9, 250, 7500, 200_000)] == [
        "unknown",
        "9s",
        "4m 10s",
        "2h 05m",
        "2d 07h",
    ]


def test_status_text_never_shows_a_password(tmp_path: Path) -> None:
    env = {**os.environ, "REDIS_URL": f"redis://:s3cret@127.0.0.1:{free_port()}/0"}
    result = scrapy("status", "profiles", env=env)
    assert result.returncode == 1
    assert "s3cret" not in result.stdout + result.stderr
    assert "redis://:***@127.0.0.1" in result.stderr
    report = {"redis": "redis://:***@h/0", "time": 0.0, "spiders": {}}
    assert render_text(report).startswith("Redis redis://:***@h/0")


# --- a fleet of two workers against the sandbox ---------------------------------------------------


def _parse_metrics(page: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    samples = {}
    for line in page.splitlines():
        if not line or line.startswith("#"):
            continue
        match = SAMPLE.match(line)
        assert match, line
        labels = tuple(sorted(LABEL.findall(match["labels"] or "")))
        samples[(match["name"], labels)] = float(match["value"])
    return samples


def _total(samples: dict[Any, float], name: str, **labels: str) -> float:
    return sum(
        value
        for (metric, sample_labels), value in samples.items()
        if metric == name and set(labels.items()) <= set(sample_labels)
    )


def _scrape(port: int) -> tuple[str, dict[Any, float]] | None:
    try:
        with urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as response:
            return response.headers["Content-Type"], _parse_metrics(response.read().decode())
    except (OSError, HTTPException):
        # Refused, timed out, or cut short by the worker exiting mid-answer.
        return None


def _still_running(workers: list[Worker], logs: list[Path]) -> str:
    """Which workers had not exited by the deadline, and how each log ends (closed or not),
    with the stacks of its threads where it was stuck."""
    alive = [(log, w) for w, log in zip(workers, logs, strict=True) if w.poll() is None]
    for _, worker in alive:
        worker.dump_stacks()
    tails = [f"== {log.name} (pid {w.pid}):\n{log.read_text()[-6000:]}" for log, w in alive]
    return f"the crawl took too long: {len(alive)} worker(s) still running\n" + "\n".join(tails)


def _worker(crawl: Crawl, log: Path, **settings: Any) -> AbstractContextManager[Worker]:
    """A profiles worker exporting its metrics on loopback, logging to ``log``."""
    defaults = {
        "START_BATCH_SIZE": 20,
        "CONCURRENT_REQUESTS": 4,
        "FRONTIER_LEASE_SECONDS": 5,
        "METRICS_HOST": "127.0.0.1",
        "MONGO_SPILL_DIR": log.parent / "spill",
    }
    return crawl.background("profiles", settings={**defaults, **settings}, log=log)


def _status(crawl: Crawl, *args: str) -> subprocess.CompletedProcess[str]:
    return scrapy("status", *args, env=crawl.env())


def _status_json(crawl: Crawl) -> dict[str, Any]:
    result = _status(crawl, "profiles", "--json")
    assert result.returncode == 0, result.stderr[-3000:]
    report: dict[str, Any] = json.loads(result.stdout)["spiders"]["profiles"]
    return report


@pytest.mark.integration
def test_status_and_metrics_of_two_workers_match_the_sandbox(
    crawl: Crawl, redis_client: redis.Redis, sandbox: Sandbox, tmp_path: Path
) -> None:
    fleet_logs = [tmp_path / "worker-a.log", tmp_path / "worker-b.log"]
    sandbox.admin("config", {"latency_ms": 80})
    redis_client.lpush("profiles:start_urls", *(json.dumps({"unique_id": u}) for u in USERS))
    ports = [free_port(), free_port()]
    last: list[dict[Any, float]] = [{}, {}]
    checked_mid_crawl = False
    with ExitStack() as running:
        workers = [
            running.enter_context(
                _worker(
                    crawl,
                    log,
                    METRICS_PORT=port,
                    STATS_PUBLISH_INTERVAL=0.5,
                    PROGRESS_INTERVAL=2,
                    MAX_IDLE_TIME_BEFORE_CLOSE=3,
                )
            )
            for log, port in zip(fleet_logs, ports, strict=True)
        ]
        deadline = time.monotonic() + 90
        while any(worker.poll() is None for worker in workers):
            assert time.monotonic() < deadline, _still_running(workers, fleet_logs)
            for index, port in enumerate(ports):
                scraped = _scrape(port)
                if scraped is None:
                    continue
                content_type, last[index] = scraped
                assert content_type.startswith("text/plain; version=0.0.4")
            responses = _total(last[0], "crawler_responses_total")
            if not checked_mid_crawl and 0 < responses < len(USERS) / 2:
                served = sandbox.admin("stats")["total"]
                assert responses <= served
                depth = _total(last[0], "crawler_queue_depth")
                assert 0 < depth <= len(USERS)
                checked_mid_crawl = True
            time.sleep(0.2)
    for worker, log in zip(workers, fleet_logs, strict=True):
        assert worker.returncode == 0, log.read_text()[-3000:]
    assert checked_mid_crawl

    served = sandbox.admin("stats")
    stored = crawl.mongo.db.profiles.count_documents({})
    assert stored == len(USERS)

    # Each worker's endpoint counted its own share; together they make the sandbox's counts.
    requests = [_total(samples, "crawler_requests_total") for samples in last]
    assert all(count > 0 for count in requests), requests
    assert sum(requests) == served["total"]
    for status, count in served["by_status"].items():
        assert sum(_total(s, "crawler_responses_total", status=status) for s in last) == count
    assert sum(_total(s, "crawler_items_total", collection="profiles") for s in last) == stored
    assert _total(last[0], "crawler_queue_depth", state="queued") == 0
    assert _total(last[0], "crawler_queue_depth", state="leased") == 0
    assert _total(last[0], "crawler_domain_requests_total", domain="127.0.0.1") == requests[0]

    status = _status_json(crawl)
    counters = status["counters"]
    assert counters["requests"] == served["total"]
    assert counters["responses_by_status"] == served["by_status"]
    assert counters["items"] == stored
    assert counters["items_by_collection"] == {"profiles": stored}
    assert counters["domains"]["127.0.0.1"]["requests"] == served["total"]
    assert counters["bans"] == counters["dead_letters"] == 0
    assert status["frontier"] == dict.fromkeys(status["frontier"], 0)
    # Start entries are fetched even if seen before: none went through the duplicate filter.
    assert status["seen"] == {"count": 0, "mode": "bloom", "approximate": True}
    assert status["rates"]["items_per_min"] > 0
    assert sum(row["items"] for row in status["rates"]["per_minute"]) == stored
    assert status["eta_seconds"] == 0
    assert status["workers"] == []  # both closed cleanly
    assert status["finish_reason"] == "finished"

    progress = fleet_logs[0].read_text()
    assert re.search(r"Progress of profiles: this worker [\d,]+ pages .* ETA ", progress)

    text = _status(crawl)
    assert text.returncode == 0, text.stderr
    assert "profiles" in text.stdout
    assert "explore" in text.stdout
    assert f"requests  {served['total']:,}" in text.stdout


def _beating(client: redis.Redis, pid: int) -> bool:
    """Whether a heartbeat of the profiles worker with this pid is in Redis."""
    keys: Any = client.scan_iter(match="{profiles}:workers:*")
    return any(client.hget(key, "pid") == str(pid).encode() for key in keys)


@pytest.mark.integration
def test_a_killed_worker_leaves_status_within_its_heartbeat_ttl(
    crawl: Crawl, redis_client: redis.Redis, tmp_path: Path
) -> None:
    ttl = 3
    with _worker(
        crawl, tmp_path / "worker.log", WORKER_HEARTBEAT_TTL=ttl, MAX_IDLE_TIME_BEFORE_CLOSE=0
    ) as worker:

        def listed() -> list[dict[str, Any]]:
            workers: list[dict[str, Any]] = _status_json(crawl)["workers"]
            return [beat for beat in workers if beat.get("pid") == worker.pid]

        poll(lambda: _beating(redis_client, worker.pid), 60, "the worker's heartbeat")
        beat = poll(listed, 30, "the worker in status")[0]
        assert beat["spider"] == "profiles"
        assert beat["host"]
        assert beat["started"] <= time.time()
        assert beat["ttl"] == ttl
        assert _beating(redis_client, worker.pid)
        worker.kill()
        killed = time.monotonic()
        poll(lambda: not _beating(redis_client, worker.pid), ttl + 10, "the heartbeat to expire")
        # Expired within the TTL of its last beat (timed in Redis: one `scrapy status` run can
        # take seconds on a busy machine), and status lists it no longer.
        assert time.monotonic() - killed <= ttl + 1
        assert not listed()


@pytest.mark.parametrize(
    ("stats", "per_entry"),
    [
        ({"start/entries": 80, "scheduler/enqueued/redis": 2000}, 25.0),
        ({"start/entries": 10, "scheduler/enqueued/redis": 4}, 1.0),  # never below one
        ({}, 1.0),  # no entry read yet
        ({"start/entries": "x", "scheduler/enqueued/redis": 5}, 1.0),  # not a number
    ],
)
def test_an_unread_start_entry_counts_in_the_eta_as_the_requests_an_entry_made(
    stats: dict[str, Any], per_entry: float
) -> None:
    """A site's entry makes the site's pages: 320 entries unread behind 10 queued requests are
    8,010 requests of work when entries made 25 requests each so far, not 330."""
    assert requests_per_entry(stats) == per_entry
    sizes = {"queue": 10, "leased": 0, "delayed": 0, "dead": 5, "start": 300, "start_leased": 20}
    fleet = FleetView(0.0, sizes, None, {}, requests_per_entry(stats))
    assert fleet.remaining == 10 + round(320 * per_entry)
