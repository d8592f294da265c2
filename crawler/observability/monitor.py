"""The fleet monitor: a worker's shared stats, heartbeat, metrics endpoint, fleet page and
progress line (docs/observability.md). Every period one Redis round trip sends the stats'
deltas and the heartbeat and reads the frontier's sizes and the fleet's pace back.
"""

from __future__ import annotations

import logging
import os
import socket
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from prometheus_client import generate_latest
from redis.exceptions import RedisError
from scrapy import signals
from scrapy.utils.defer import maybe_deferred_to_future
from scrapy.utils.httpobj import urlparse_cached
from scrapy.utils.log import failure_to_exc_info
from twisted.internet import task
from twisted.internet.error import CannotListenError

from crawler.config import setting, setting_int
from crawler.connection import crawl_redis
from crawler.frontier.backoff import RedisBackoff
from crawler.frontier.jobs import JobBook
from crawler.frontier.reports import FrontierReports
from crawler.frontier.riders import Rider, Riders
from crawler.keys import FleetKeys, FrontierKeys, start_key
from crawler.observability.counters import Counters
from crawler.observability.domain_stats import domain_stat
from crawler.observability.endpoint import Listening, listen, parse_ports, site
from crawler.observability.metrics import Snapshot, WorkerInfo, registry_for
from crawler.observability.page import HISTORY_MINUTES
from crawler.observability.page_server import FleetPage
from crawler.observability.progress import BUSY_SAMPLE, BusyClock, WorkerPace, log_progress
from crawler.observability.publisher import FleetView, StatsPublisher
from crawler.observability.rates import RateWindow
from crawler.observability.report import fleet_report
from crawler.observability.sizing import BUSY_STAT, SizingInputs
from crawler.storage.health import health_of
from crawler.storage.waiting import SpillRecord

if TYPE_CHECKING:
    from scrapy import Request, Spider
    from scrapy.crawler import Crawler
    from scrapy.http import Response
    from scrapy.settings import BaseSettings
    from twisted.python.failure import Failure

    from crawler.connection import RedisClient

logger = logging.getLogger(__name__)

RIDER = "fleet-stats"
SPILLS_RIDER = "spill-record"  # the items of the spill file (crawler/storage/waiting.py)


@dataclass(frozen=True)
class MonitorSettings:
    """The monitor's settings, read and checked once (documented in crawler/settings.py)."""

    stats_key: str
    publish_interval: float
    heartbeat_ttl: int
    progress_interval: float
    pace_window: float
    metrics_ports: list[int]
    metrics_host: str
    fleet_page: str
    domain_stats_max: int

    @classmethod
    def from_settings(cls, settings: BaseSettings) -> MonitorSettings:
        return cls(
            stats_key=settings.get("STATS_REDIS_KEY"),
            publish_interval=setting(settings, "STATS_PUBLISH_INTERVAL"),
            heartbeat_ttl=setting_int(settings, "WORKER_HEARTBEAT_TTL", 1),
            progress_interval=setting(settings, "PROGRESS_INTERVAL"),
            pace_window=setting(settings, "PACE_WINDOW"),
            metrics_ports=parse_ports(settings.get("METRICS_PORT")),
            metrics_host=str(settings.get("METRICS_HOST") or "0.0.0.0").strip(),  # as checked
            fleet_page=setting(settings, "FLEET_PAGE"),
            domain_stats_max=setting(settings, "DOMAIN_STATS_MAX"),
        )

    @property
    def period(self) -> float:
        """How often the monitor runs: the publish interval, or a third of the heartbeat TTL if
        shorter, so a live worker's heartbeat never lapses."""
        return min(self.publish_interval, self.heartbeat_ttl / 3)


class FleetMonitor:
    """Extension: shared stats, heartbeat, Prometheus endpoint and progress line of a worker.
    Settings: STATS_*, WORKER_HEARTBEAT_TTL, PROGRESS_INTERVAL, PACE_WINDOW, METRICS_*, FLEET_PAGE.
    """

    # Requests, responses and items counted per domain (``domain/<host>/...``), from signals;
    # DOMAIN_STATS_MAX domains of the fleet by name, the others as one (domain_stats.py).
    per_domain_counters = True

    def __init__(self, crawler: Crawler, server: RedisClient, config: MonitorSettings) -> None:
        self.crawler = crawler
        self.server = server
        self.config = config
        self.publisher: StatsPublisher | None = None
        self.info: WorkerInfo | None = None
        self.fleet: FleetView | None = None
        self.metrics_port: int | None = None
        self._pages = RateWindow(config.pace_window)
        self._items = RateWindow(config.pace_window)
        self._loop: task.LoopingCall | None = None
        self._endpoint: Listening | None = None
        self._spider: Spider | None = None
        self._next_progress = 0.0
        self._backoff = RedisBackoff(
            1.0,
            30.0,
            "Fleet stats not published, Redis unavailable (%s); will retry",
            "Fleet stats published again after %.1fs; nothing was lost",
            logging.WARNING,
        )
        self._read: Callable[[list[Any]], FleetView] | None = None  # of the publish out
        self._busy = BusyClock()
        self._sampler: task.LoopingCall | None = None
        self.spills: SpillRecord | None = None

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> FleetMonitor:
        monitor = cls(
            crawler,
            crawl_redis(crawler),
            MonitorSettings.from_settings(crawler.settings),
        )
        connect = crawler.signals.connect
        connect(monitor.spider_opened, signal=signals.spider_opened)
        connect(monitor.spider_closed, signal=signals.spider_closed)
        if cls.per_domain_counters:
            connect(monitor.request_reached_downloader, signal=signals.request_reached_downloader)
            connect(monitor.response_downloaded, signal=signals.response_downloaded)
            connect(monitor.item_scraped, signal=signals.item_scraped)
        return monitor

    def spider_opened(self, spider: Spider) -> None:
        self._spider = spider
        self.open(spider.name, _worker_id(self.crawler))
        if self.config.metrics_ports:
            self._serve_metrics()
        self._loop = task.LoopingCall(self.tick)
        self._loop.start(self.config.period, now=True).addErrback(self._stopped, spider)
        self._sampler = task.LoopingCall(self._sample_busy)
        self._sampler.start(BUSY_SAMPLE, now=False).addErrback(self._stopped, spider)

    def open(self, spider: str, worker: str) -> None:
        """Set up the publisher for ``spider`` as ``worker`` (no I/O yet)."""
        settings = self.crawler.settings
        start = start_key(settings, self._spider or spider)
        self.publisher = StatsPublisher(
            self.server,
            FleetKeys.for_spider(spider, self.config.stats_key),
            FrontierKeys(spider, start),
            str(settings.get("DUPEFILTER_MODE")),
            worker,
            self.config.heartbeat_ttl,
            SizingInputs.from_settings(settings, spider) if self.config.metrics_ports else None,
            self.config.domain_stats_max,
        )
        self.info = WorkerInfo(spider, worker, socket.gethostname(), os.getpid(), time.time())
        self.spills = SpillRecord(spider, self.info.host)
        self.registry = registry_for(self.snapshot)
        self._next_progress = time.monotonic() + self.config.progress_interval

    async def spider_closed(self, spider: Spider, reason: str) -> None:
        for loop in (self._loop, self._sampler):
            if loop is not None and loop.running:
                loop.stop()
        if self.spills is not None:  # the items left in the spill file (an outage), or none
            self.spills.write(self.server, health_of(self.crawler))
        if self.publisher is not None:
            try:
                self.publisher.close(self._stats(), reason)
            except RedisError as exc:
                logger.warning(
                    "Could not add this worker's last stats to the fleet's: %s",
                    exc,
                    extra={"spider": spider},
                )
        if self._endpoint is not None:
            endpoint, self._endpoint = self._endpoint, None
            await maybe_deferred_to_future(endpoint.stop())

    # --- the periodic task -----------------------------------------------------------------------

    def tick(self) -> None:
        """Publish stats and heartbeat, refresh the fleet view, log progress when due: in the
        frontier's next round trip (within two periods), or at once without a frontier."""
        assert self.publisher is not None
        now = time.monotonic()
        stats = self._stats()
        self._pages.add(now, stats.get("response_received_count", 0))
        self._items.add(now, stats.get("item_scraped_count", 0))
        self._count(BUSY_STAT, self._busy.lap())
        if self._backoff.active():
            return
        riders = Riders.of(self.crawler)
        rider = Rider(self._queue_publish, self._published, self._backoff.failed)
        within = 2 * self.config.period if riders.carried else 0
        riders.add(RIDER, rider, within)
        if (spills := self.spills) is not None:
            write = lambda pipe: spills.queue(pipe, health_of(self.crawler))  # noqa: E731
            riders.add(SPILLS_RIDER, Rider(write, spills.sent), within)
        if not riders.carried:
            riders.send(self.server)

    def _queue_publish(self, pipe: Any) -> None:
        assert self.publisher is not None
        stats = self._stats()
        self._read = self.publisher.queue_publish(pipe, stats, self._heartbeat(stats))

    def _published(self, replies: list[Any]) -> None:
        try:
            if self._read is not None:
                self.fleet = self._read(replies)
        except RedisError as exc:
            self._backoff.failed(exc)
            return
        self._backoff.recovered()
        if self.publisher is not None and self.crawler.stats is not None:
            self.publisher.fold_into(self.crawler.stats.get_stats())
        if self.config.progress_interval and time.monotonic() >= self._next_progress:
            self._next_progress = time.monotonic() + self.config.progress_interval
            if self.fleet is not None and self.info is not None:
                log_progress(self.info.spider, self.pace(self._stats()), self.fleet, self._spider)

    def pace(self, stats: dict[str, Any]) -> WorkerPace:
        return WorkerPace(
            int(stats.get("response_received_count", 0)),
            int(stats.get("item_scraped_count", 0)),
            self._pages.per_minute(),
            self._items.per_minute(),
        )

    def snapshot(self) -> Snapshot:
        """What a scrape of ``/metrics`` shows (called on the endpoint's own thread)."""
        assert self.info is not None
        stats = self._stats()
        counters = Counters.from_stats(stats)
        scheduler = FrontierReports(self.crawler).scheduler
        watch = scheduler.pause if scheduler is not None else None
        pause = watch.state if watch is not None else None
        jobs = tuple(JobBook.of(self.crawler).paused_jobs())
        pace = self.pace(stats).pages_per_min
        storage = health_of(self.crawler)
        return Snapshot(self.info, counters, self.fleet, pace, pause, jobs, storage)

    def metrics_page(self) -> str:
        """``/metrics`` as text."""
        return generate_latest(self.registry).decode()

    def fleet_page(self) -> dict[str, Any]:
        """This spider's fleet page report, read from Redis (blocking: called off the reactor)."""
        assert self.info is not None
        spiders = {self.info.spider: self.crawler.spidercls}
        return fleet_report(self.server, self.crawler.settings, spiders, history=HISTORY_MINUTES)

    def _sample_busy(self) -> None:
        """One sample of :class:`BusyClock`: is the worker idle now?"""
        engine: Any = self.crawler.engine
        downloader = getattr(engine, "downloader", None)
        slot = getattr(getattr(engine, "scraper", None), "slot", None)
        working = getattr(downloader, "active", None) or getattr(slot, "active", None)
        self._busy.sample(not working and self._waiting())

    def _waiting(self) -> bool:
        """Whether the worker waits for its hosts' turns or for the crawl to resume, or the
        fleet has nothing to fetch (no request queued, no start entry) as of the last look."""
        scheduler = FrontierReports(self.crawler).scheduler
        if scheduler is not None and (scheduler.waiting_for_turns() or scheduler.paused()):
            return True
        sizes = self.fleet.sizes if self.fleet is not None else None
        return sizes is not None and not sizes.get("queue") and not sizes.get("start")

    # --- per-domain counters -------------------------------------------------------------------

    def request_reached_downloader(self, request: Request) -> None:
        self._count_domain(request, "request_count")

    def response_downloaded(self, response: Response, request: Request) -> None:
        self._count_domain(request, f"response_status_count/{response.status}")

    def item_scraped(self, item: Any, response: Any = None) -> None:
        request = getattr(response, "request", None)
        if request is not None:
            self._count_domain(request, "item_scraped_count")

    def _count_domain(self, request: Request, name: str) -> None:
        """Count ``name`` for the request's domain, as DOMAIN_STATS_MAX allows."""
        host = urlparse_cached(request).hostname or ""
        if self.publisher is not None:
            host = self.publisher.domains(host)
        self._count(domain_stat(host, name))

    def _stats(self) -> dict[str, Any]:
        assert self.crawler.stats is not None
        # A copy: pipelines count from their writer threads while this reads.
        return self.crawler.stats.get_stats().copy()

    def _count(self, key: str, count: int = 1) -> None:
        if self.crawler.stats is not None:
            self.crawler.stats.inc_value(key, count)

    def _heartbeat(self, stats: dict[str, Any]) -> dict[str, Any]:
        assert self.info is not None
        pace = self.pace(stats)
        return {
            "worker": self.info.worker,
            "spider": self.info.spider,
            "host": self.info.host,
            "pid": self.info.pid,
            "started": round(self.info.started, 3),
            "beat": round(time.time(), 3),
            "ttl": self.config.heartbeat_ttl,
            "pages": pace.pages,
            "items": pace.items,
            "pages_per_min": round(pace.pages_per_min, 1),
            "items_per_min": round(pace.items_per_min, 1),
            "metrics_port": self.metrics_port or "",
            **self._storage_beat(),
        }

    def _storage_beat(self) -> dict[str, int]:
        """The heartbeat's storage fields (``scrapy status``): none without a MongoPipeline."""
        storage = health_of(self.crawler)
        if storage is None:
            return {}
        return {"mongo_away": int(storage.away), "spilled": storage.spilled}

    def _serve_metrics(self) -> None:
        mode = self.config.fleet_page
        page = None if mode == "off" else FleetPage(self.fleet_page, local_only=mode == "local")
        try:
            self._endpoint = listen(
                self.config.metrics_host, self.config.metrics_ports, site(self.registry, page)
            )
        except CannotListenError as exc:
            logger.error(
                "Metrics not served: cannot listen on %s at a port of METRICS_PORT (%s)",
                self.config.metrics_host,
                exc,
            )
            return
        self.metrics_port = self._endpoint.port
        logger.info("Metrics at http://%s:%d/metrics", self.config.metrics_host, self.metrics_port)
        if page is not None:
            logger.info("Fleet page at http://%s:%d/", _shown_host(self.config), self.metrics_port)

    def _stopped(self, failure: Failure, spider: Spider) -> None:
        logger.error(
            "Fleet monitor stopped: no more stats, heartbeats or progress from this worker",
            exc_info=failure_to_exc_info(failure),
            extra={"spider": spider},
        )


def _worker_id(crawler: Crawler) -> str:
    """The frontier scheduler's worker id (the owner of this worker's leases), or a new one."""
    scheduler = FrontierReports(crawler).scheduler
    return (
        scheduler.worker
        if scheduler is not None
        else f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
    )


def _shown_host(config: MonitorSettings) -> str:
    """Where a browser on this machine finds the endpoint."""
    host = config.metrics_host
    if host in ("0.0.0.0", ""):
        return "127.0.0.1"
    if host == "::":
        return "[::1]"
    return f"[{host}]" if ":" in host else host
