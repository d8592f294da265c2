"""Prometheus metrics of one worker, collected for ``prometheus_client``.

Served on ``http://<METRICS_HOST>:<METRICS_PORT>/metrics`` when ``METRICS_PORT`` is set. Counters
are this worker's since it started: sum them over the fleet's workers, e.g.
``sum by (spider) (rate(crawler_responses_total[5m]))``; a restarted worker starts again from
zero, which ``rate()`` and ``increase()`` take in their stride. Gauges of the frontier are the
fleet's, read from Redis every ``STATS_PUBLISH_INTERVAL`` (not per scrape), so every worker of a
spider reports the same values: take ``max by (spider, state)``.

Counters (labels):

- ``crawler_requests_total{spider}``: requests sent to the sites (``downloader/request_count``,
  counted past the send gate: a request it held back counts once, when it goes).
- ``crawler_responses_total{spider,status}``: responses received, by HTTP status; until the
  worker's first response one sample ``status=""`` (no status) at 0, so the fleet's rate of
  responses is 0, not absent, for a worker that gets none (the ``CrawlerStalled`` alert).
- ``crawler_download_errors_total{spider}``: downloads that failed without a response.
- ``crawler_items_scraped_total{spider}``: items that went through the item pipelines.
- ``crawler_items_total{spider,collection}``: items written to MongoDB, by collection.
- ``crawler_items_dropped_total{spider}``: items dropped by a pipeline (validation).
- ``crawler_retries_total{spider}``: retries scheduled (5xx, network errors).
- ``crawler_bans_total{spider,rule}``: responses classified as bans, by ban rule.
- ``crawler_bans_by_domain_total{spider,domain}``: the same bans, by domain.
- ``crawler_dead_letters_total{spider,reason}``: requests given up on, by reason.
- ``crawler_duplicates_total{spider}``: requests dropped by the duplicate filter.
- ``crawler_domain_requests_total{spider,domain}``: requests sent, by domain.
- ``crawler_domain_responses_total{spider,domain,status}``: responses, by domain and status.
- ``crawler_domain_items_total{spider,domain}``: items scraped, by the domain of their page.
  The fleet names DOMAIN_STATS_MAX domains in these and in the bans by domain, the first its
  workers publish; the others are counted as the domain ``(other)``.

Gauges:

- ``crawler_queue_depth{spider,state}``: the fleet's frontier, each request in one state:
  ``queued`` (a pop may hand it out), ``parked`` (of a paused crawl job, held until the job
  resumes: ``scrapy frontier SPIDER`` counts it in its ``queue``), ``leased``, ``delayed``,
  ``dead``, ``start`` (start entries waiting) and ``start_leased``.
- ``crawler_seen_requests{spider}``: requests the duplicate filter has seen (approximate with
  the Bloom filter; absent in ``redisbloom`` and ``none`` modes).
- ``crawler_fleet_pages_per_minute{spider}``, ``crawler_fleet_items_per_minute{spider}``: the
  whole fleet's pace over the last minutes, from the per-minute buckets in Redis.
- ``crawler_eta_seconds{spider}``: the work left (queued, leased and delayed requests, and
  start entries) at the fleet's pace, or this worker's if faster (absent while nothing moves).
- ``crawler_queue_ready{spider}``: requests that may go now (of hosts unlimited, or with tokens
  to spare), ``crawler_politeness_ceiling{spider}``: the requests per second the sites allow
  the work (per host the lesser of its rate and its backlog's need),
  ``crawler_worker_pace{spider}``: the fleet's pages per busy worker-second (measured, else
  AUTOSCALE_WORKER_PACE), and ``crawler_workers_wanted{spider}``: the workers the work allows
  (docs/scaling.md, "An elastic fleet"); a worker serving metrics reads them every period from
  the head of the queue (AUTOSCALE_SAMPLE requests at most).
- ``crawler_paused{spider}``: 1 while this worker sees its crawl paused (``scrapy frontier
  SPIDER pause``), else 0; ``crawler_paused_since_seconds{spider}`` (Unix time, when the pause
  says) and ``crawler_pause_info{spider,by,reason}`` (always 1) while paused.
- ``crawler_job_paused{spider,job,by,reason}``: 1 for each crawl job paused, as this worker
  last read (within a second); ``by`` "failure threshold" with the count as ``reason`` when
  the job paused itself, empty when a command paused it.
- ``crawler_mongo_away{spider}``: 1 while this worker holds MongoDB away (a batch found it
  unavailable and no ping found it back since: batches go to the spill file at once), else 0;
  ``crawler_mongo_spilled_items{spider}``: items in this worker's spill file waiting to be
  replayed (0 once it is replayed whole). Absent without the MongoDB pipeline.
- ``crawler_worker_start_time_seconds{spider}``: when this worker started (Unix time).
- ``crawler_worker_info{spider,worker,host,pid}``: always 1; names this worker.

And prometheus_client's own: ``process_cpu_seconds_total``, ``process_resident_memory_bytes``,
``process_open_fds`` and the rest of the ``process_*`` family, ``python_gc_*`` and
``python_info``.

``scrapy status --serve``'s ``/metrics`` (no worker's) has the sizing gauges of every spider
and the launches of its fleet (``crawler_fleet_*``, crawler/observability/starts.py),
``crawler_fleet_redis_up`` (1, or 0 when Redis did not answer) and
``crawler_redis_wrong_type{spider,key,type}`` (1 for a key of a spider that holds the wrong
type, whose other gauges are left out: crawler/fleet/exporter.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.gc_collector import GCCollector
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.registry import Collector

from crawler.observability.rates import eta_seconds

if TYPE_CHECKING:
    from crawler.frontier.pause import Pause
    from crawler.observability.counters import Counters
    from crawler.observability.publisher import FleetView
    from crawler.observability.sizing import Sizing
    from crawler.storage.health import StorageHealth

QUEUE_STATES = {
    "queue": "queued",
    "leased": "leased",
    "delayed": "delayed",
    "dead": "dead",
    "start": "start",
    "start_leased": "start_leased",
}


@dataclass(frozen=True)
class WorkerInfo:
    spider: str
    worker: str
    host: str
    pid: int
    started: float


@dataclass(frozen=True)
class Snapshot:
    """What one scrape shows: the worker, its counters, the fleet view and its own pace."""

    info: WorkerInfo
    counters: Counters
    fleet: FleetView | None
    own_pace: float = 0.0
    pause: Pause | None = None  # the crawl's pause, as this worker last read it
    jobs_paused: tuple[tuple[str, str, str], ...] = ()  # (job, by, reason) as last read
    storage: StorageHealth | None = None  # MongoDB away, items spilled (no MongoPipeline: None)


class WorkerCollector(Collector):
    """Metric families of the snapshot ``sample()`` returns at each scrape."""

    def __init__(self, sample: Callable[[], Snapshot]) -> None:
        self.sample = sample

    def collect(self) -> Iterator[Metric]:
        snapshot = self.sample()
        spider = snapshot.info.spider
        yield from _counters(spider, snapshot.counters)
        yield from _domains(spider, snapshot.counters)
        yield from _fleet(spider, snapshot.fleet, snapshot.own_pace)
        yield from _sizing(spider, snapshot.fleet)
        yield from _pause(spider, snapshot.pause)
        yield from _jobs_paused(spider, snapshot.jobs_paused)
        yield from _storage(spider, snapshot.storage)
        yield from _worker(snapshot.info)


def registry_for(sample: Callable[[], Snapshot]) -> CollectorRegistry:
    """A registry of this worker's metrics and the process, platform and GC collectors."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(WorkerCollector(sample))
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    GCCollector(registry=registry)
    return registry


def render(
    info: WorkerInfo, counters: Counters, fleet: FleetView | None, own_pace: float = 0.0
) -> str:
    """The worker's metrics page in the text format; ``own_pace`` is its pages per minute."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(WorkerCollector(lambda: Snapshot(info, counters, fleet, own_pace)))
    return generate_latest(registry).decode()


def _counter(name: str, documentation: str, labels: tuple[str, ...]) -> CounterMetricFamily:
    return CounterMetricFamily(name, documentation, labels=("spider", *labels))


def _gauge(name: str, documentation: str, labels: tuple[str, ...] = ()) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, documentation, labels=("spider", *labels))


def _counters(spider: str, counters: Counters) -> Iterator[Metric]:
    plain = (
        ("crawler_requests_total", "Requests sent to the sites.", counters.requests),
        ("crawler_download_errors_total", "Downloads that failed without a response.",
         counters.download_errors),
        ("crawler_items_scraped_total", "Items that went through the item pipelines.",
         counters.items),
        ("crawler_items_dropped_total", "Items dropped by an item pipeline.",
         counters.items_dropped),
        ("crawler_retries_total", "Retries scheduled.", counters.retries),
        ("crawler_duplicates_total", "Requests dropped by the duplicate filter.",
         counters.duplicates),
    )  # fmt: skip
    for name, documentation, value in plain:
        family = _counter(name, documentation, ())
        family.add_metric([spider], value)
        yield family
    # No response yet: a zero without a status, so a rate of responses is 0, not absent.
    responses = counters.responses_by_status or {"": 0}
    labelled = (
        ("crawler_responses_total", "Responses received, by HTTP status.", "status",
         responses),
        ("crawler_items_total", "Items written to MongoDB, by collection.", "collection",
         counters.items_by_collection),
        ("crawler_bans_total", "Responses classified as bans, by ban rule.", "rule",
         counters.bans_by_rule),
        ("crawler_bans_by_domain_total", "Responses classified as bans, by domain.", "domain",
         counters.bans_by_domain),
        ("crawler_dead_letters_total", "Requests given up on (dead letters), by reason.",
         "reason", counters.dead_letters_by_reason),
    )  # fmt: skip
    for name, documentation, label, values in labelled:
        family = _counter(name, documentation, (label,))
        for value_label, value in values.items():
            family.add_metric([spider, value_label], value)
        yield family


def _domains(spider: str, counters: Counters) -> Iterator[Metric]:
    requests = _counter(
        "crawler_domain_requests_total", "Requests sent to the sites, by domain.", ("domain",)
    )
    responses = _counter(
        "crawler_domain_responses_total",
        "Responses received, by domain and status.",
        ("domain", "status"),
    )
    items = _counter(
        "crawler_domain_items_total", "Items scraped, by the domain of their page.", ("domain",)
    )
    for domain, numbers in counters.domains.items():
        requests.add_metric([spider, domain], numbers.requests)
        for status, count in numbers.responses_by_status.items():
            responses.add_metric([spider, domain, status], count)
        items.add_metric([spider, domain], numbers.items)
    yield from (requests, responses, items)


def queue_depths(fleet: FleetView) -> dict[str, int]:
    """The fleet's frontier by state (QUEUE_STATES), each request in one: the parked requests
    of paused jobs apart from the queued ones a pop may hand out."""
    depths = {state: fleet.sizes.get(name, 0) for name, state in QUEUE_STATES.items()}
    depths["queued"] = max(0, depths["queued"] - fleet.parked)
    return {**depths, "parked": fleet.parked}


def _fleet(spider: str, fleet: FleetView | None, own_pace: float) -> Iterator[Metric]:
    depth = _gauge("crawler_queue_depth", "Requests in the fleet's frontier, by state.", ("state",))
    seen = _gauge(
        "crawler_seen_requests", "Requests the fleet's duplicate filter has seen (approx)."
    )
    pages = _gauge(
        "crawler_fleet_pages_per_minute", "Pages per minute of the whole fleet, recently."
    )
    items = _gauge(
        "crawler_fleet_items_per_minute", "Items per minute of the whole fleet, recently."
    )
    eta = _gauge("crawler_eta_seconds", "Seconds until the frontier is done at the fleet's pace.")
    if fleet is not None:
        for state, value in queue_depths(fleet).items():
            depth.add_metric([spider, state], value)
        if fleet.seen is not None:
            seen.add_metric([spider], fleet.seen)
        fleet_pages = fleet.per_minute("pages")
        pages.add_metric([spider], fleet_pages)
        items.add_metric([spider], fleet.per_minute("items"))
        left = eta_seconds(fleet.remaining, max(fleet_pages, own_pace))
        if left is not None:
            eta.add_metric([spider], left)
    yield from (depth, seen, pages, items, eta)


def _sizing(spider: str, fleet: FleetView | None) -> Iterator[Metric]:
    sizing = None if fleet is None else fleet.sizing
    if sizing is not None:
        yield from sizing_metrics({spider: sizing})


def sizing_metrics(sizings: Mapping[str, Sizing]) -> list[Metric]:
    """The sizing gauges of each spider of ``sizings`` (spider -> its sizing): a worker's
    own spider, or every spider of ``scrapy status --serve``."""
    figures = (
        ("crawler_queue_ready", "Requests that may go now (their host has rate to spare).",
         "ready"),
        ("crawler_politeness_ceiling", "Requests per second the sites allow the work.",
         "ceiling"),
        ("crawler_worker_pace", "Pages per busy worker-second, the fleet's.", "pace"),
        ("crawler_workers_wanted", "Workers the work allows, within AUTOSCALE_*_WORKERS.",
         "wanted"),
    )  # fmt: skip
    families: list[Metric] = []
    for name, documentation, field in figures:
        gauge = _gauge(name, documentation)
        for spider, sizing in sizings.items():
            gauge.add_metric([spider], getattr(sizing, field))
        families.append(gauge)
    return families


def _pause(spider: str, pause: Pause | None) -> Iterator[Metric]:
    paused = _gauge("crawler_paused", "1 while the crawl is paused (scrapy frontier pause).")
    paused.add_metric([spider], int(pause is not None))
    since = _gauge("crawler_paused_since_seconds", "When the crawl was paused, in Unix time.")
    info = _gauge("crawler_pause_info", "The crawl's pause: by whom and why.", ("by", "reason"))
    if pause is not None:
        if pause.since is not None:
            since.add_metric([spider], pause.since)
        info.add_metric([spider, pause.by, pause.reason], 1)
    yield from (paused, since, info)


def _jobs_paused(spider: str, jobs: tuple[tuple[str, str, str], ...]) -> Iterator[Metric]:
    labels = ("job", "by", "reason")
    paused = _gauge("crawler_job_paused", "1 for each paused crawl job: by whom and why.", labels)
    for job, by, reason in jobs:
        paused.add_metric([spider, job, by, reason], 1)
    yield paused


def _storage(spider: str, storage: StorageHealth | None) -> Iterator[Metric]:
    if storage is None:
        return
    away = _gauge("crawler_mongo_away", "1 while this worker holds MongoDB away (spilling).")
    away.add_metric([spider], int(storage.away))
    spilled = _gauge("crawler_mongo_spilled_items", "Items spilled, waiting to be replayed.")
    spilled.add_metric([spider], storage.spilled)
    yield from (away, spilled)


def _worker(info: WorkerInfo) -> Iterator[Metric]:
    started = _gauge("crawler_worker_start_time_seconds", "When this worker started, in Unix time.")
    started.add_metric([info.spider], info.started)
    worker = GaugeMetricFamily(
        "crawler_worker_info", "This worker: always 1.", labels=("spider", "worker", "host", "pid")
    )
    worker.add_metric([info.spider, info.worker, info.host, str(info.pid)], 1)
    yield from (started, worker)
