"""Prometheus metrics of one worker, in the text exposition format (version 0.0.4).

Served on ``http://<METRICS_HOST>:<METRICS_PORT>/metrics`` when ``METRICS_PORT`` is set. Counters
are this worker's since it started: sum them over the fleet's workers, e.g.
``sum by (spider) (rate(crawler_responses_total[5m]))``; a restarted worker starts again from
zero, which ``rate()`` and ``increase()`` take in their stride. Gauges of the frontier are the
fleet's, read from Redis every ``STATS_PUBLISH_INTERVAL`` (not per scrape), so every worker of a
spider reports the same values: take ``max by (spider, state)``.

Counters (labels):

- ``crawler_requests_total{spider}``: requests sent to the downloader.
- ``crawler_responses_total{spider,status}``: responses received, by HTTP status.
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

Gauges:

- ``crawler_queue_depth{spider,state}``: the fleet's frontier; state ``queued``, ``leased``,
  ``delayed``, ``dead``, ``start`` (start entries waiting) and ``start_leased``.
- ``crawler_seen_requests{spider}``: requests the duplicate filter has seen (approximate with
  the Bloom filter; absent in ``redisbloom`` and ``none`` modes).
- ``crawler_fleet_pages_per_minute{spider}``, ``crawler_fleet_items_per_minute{spider}``: the
  whole fleet's pace over the last minutes, from the per-minute buckets in Redis.
- ``crawler_eta_seconds{spider}``: the work left (queued, leased and delayed requests, and
  start entries) at the fleet's pace, or this worker's if faster (absent while nothing moves).
- ``crawler_worker_start_time_seconds{spider}``: when this worker started (Unix time).
- ``crawler_worker_info{spider,worker,host,pid}``: always 1; names this worker.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from crawler.observability.rates import eta_seconds

if TYPE_CHECKING:
    from crawler.observability.counters import Counters
    from crawler.observability.publisher import FleetView

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
QUEUE_STATES = {
    "queue": "queued",
    "leased": "leased",
    "delayed": "delayed",
    "dead": "dead",
    "start": "start",
    "start_leased": "start_leased",
}


@dataclass(frozen=True)
class Family:
    name: str
    kind: str
    help: str


REQUESTS = Family("crawler_requests_total", "counter", "Requests sent to the downloader.")
RESPONSES = Family("crawler_responses_total", "counter", "Responses received, by HTTP status.")
DOWNLOAD_ERRORS = Family(
    "crawler_download_errors_total", "counter", "Downloads that failed without a response."
)
ITEMS_SCRAPED = Family(
    "crawler_items_scraped_total", "counter", "Items that went through the item pipelines."
)
ITEMS = Family("crawler_items_total", "counter", "Items written to MongoDB, by collection.")
ITEMS_DROPPED = Family(
    "crawler_items_dropped_total", "counter", "Items dropped by an item pipeline."
)
RETRIES = Family("crawler_retries_total", "counter", "Retries scheduled.")
BANS = Family("crawler_bans_total", "counter", "Responses classified as bans, by ban rule.")
BANS_BY_DOMAIN = Family(
    "crawler_bans_by_domain_total", "counter", "Responses classified as bans, by domain."
)
DEAD_LETTERS = Family(
    "crawler_dead_letters_total", "counter", "Requests given up on (dead letters), by reason."
)
DUPLICATES = Family(
    "crawler_duplicates_total", "counter", "Requests dropped by the duplicate filter."
)
DOMAIN_REQUESTS = Family(
    "crawler_domain_requests_total", "counter", "Requests sent to the downloader, by domain."
)
DOMAIN_RESPONSES = Family(
    "crawler_domain_responses_total", "counter", "Responses received, by domain and status."
)
DOMAIN_ITEMS = Family(
    "crawler_domain_items_total", "counter", "Items scraped, by the domain of their page."
)
QUEUE_DEPTH = Family("crawler_queue_depth", "gauge", "Requests in the fleet's frontier, by state.")
SEEN = Family(
    "crawler_seen_requests", "gauge", "Requests the fleet's duplicate filter has seen (approx)."
)
FLEET_PAGES = Family(
    "crawler_fleet_pages_per_minute", "gauge", "Pages per minute of the whole fleet, recently."
)
FLEET_ITEMS = Family(
    "crawler_fleet_items_per_minute", "gauge", "Items per minute of the whole fleet, recently."
)
ETA = Family(
    "crawler_eta_seconds", "gauge", "Seconds until the frontier is done at the fleet's pace."
)
START_TIME = Family(
    "crawler_worker_start_time_seconds", "gauge", "When this worker started, in Unix time."
)
INFO = Family("crawler_worker_info", "gauge", "This worker: always 1.")


@dataclass(frozen=True)
class WorkerInfo:
    spider: str
    worker: str
    host: str
    pid: int
    started: float


class Exposition:
    """Samples grouped by family, written in the text format."""

    def __init__(self) -> None:
        self._samples: dict[Family, list[str]] = {}

    def add(self, family: Family, value: float, **labels: str) -> None:
        self._samples.setdefault(family, []).append(
            f"{family.name}{_labels(labels)} {_number(value)}"
        )

    def declare(self, family: Family) -> None:
        self._samples.setdefault(family, [])

    def text(self) -> str:
        lines: list[str] = []
        for family, samples in self._samples.items():
            lines.append(f"# HELP {family.name} {family.help}")
            lines.append(f"# TYPE {family.name} {family.kind}")
            lines.extend(samples)
        return "\n".join(lines) + "\n"


def render(
    info: WorkerInfo, counters: Counters, fleet: FleetView | None, own_pace: float = 0.0
) -> str:
    """The worker's metrics page; ``own_pace`` is this worker's pages per minute."""
    out = Exposition()
    _counters(out, info.spider, counters)
    _domains(out, info.spider, counters)
    _fleet(out, info.spider, fleet, own_pace)
    out.add(START_TIME, info.started, spider=info.spider)
    out.add(INFO, 1, spider=info.spider, worker=info.worker, host=info.host, pid=str(info.pid))
    return out.text()


def _counters(out: Exposition, spider: str, counters: Counters) -> None:
    out.add(REQUESTS, counters.requests, spider=spider)
    _labelled(out, RESPONSES, spider, "status", counters.responses_by_status)
    out.add(DOWNLOAD_ERRORS, counters.download_errors, spider=spider)
    out.add(ITEMS_SCRAPED, counters.items, spider=spider)
    _labelled(out, ITEMS, spider, "collection", counters.items_by_collection)
    out.add(ITEMS_DROPPED, counters.items_dropped, spider=spider)
    out.add(RETRIES, counters.retries, spider=spider)
    _labelled(out, BANS, spider, "rule", counters.bans_by_rule)
    _labelled(out, BANS_BY_DOMAIN, spider, "domain", counters.bans_by_domain)
    _labelled(out, DEAD_LETTERS, spider, "reason", counters.dead_letters_by_reason)
    out.add(DUPLICATES, counters.duplicates, spider=spider)


def _domains(out: Exposition, spider: str, counters: Counters) -> None:
    for family in (DOMAIN_REQUESTS, DOMAIN_RESPONSES, DOMAIN_ITEMS):
        out.declare(family)
    for domain, numbers in counters.domains.items():
        out.add(DOMAIN_REQUESTS, numbers.requests, spider=spider, domain=domain)
        for status, count in numbers.responses_by_status.items():
            out.add(DOMAIN_RESPONSES, count, spider=spider, domain=domain, status=status)
        out.add(DOMAIN_ITEMS, numbers.items, spider=spider, domain=domain)


def _fleet(out: Exposition, spider: str, fleet: FleetView | None, own_pace: float) -> None:
    for family in (QUEUE_DEPTH, SEEN, FLEET_PAGES, FLEET_ITEMS, ETA):
        out.declare(family)
    if fleet is None:
        return
    for name, state in QUEUE_STATES.items():
        out.add(QUEUE_DEPTH, fleet.sizes.get(name, 0), spider=spider, state=state)
    if fleet.seen is not None:
        out.add(SEEN, fleet.seen, spider=spider)
    pages = fleet.per_minute("pages")
    out.add(FLEET_PAGES, pages, spider=spider)
    out.add(FLEET_ITEMS, fleet.per_minute("items"), spider=spider)
    eta = eta_seconds(fleet.remaining, max(pages, own_pace))
    if eta is not None:
        out.add(ETA, eta, spider=spider)


def _labelled(
    out: Exposition, family: Family, spider: str, label: str, values: dict[str, int]
) -> None:
    out.declare(family)
    for name, value in values.items():
        out.add(family, value, spider=spider, **{label: name})


def _labels(labels: dict[str, str]) -> str:
    if not labels:
        return ""
    inner = ",".join(f'{name}="{_escape(value)}"' for name, value in labels.items())
    return "{" + inner + "}"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _number(value: float) -> str:
    if isinstance(value, int):
        return str(value)
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(float(value))
