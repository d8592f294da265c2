"""The periodic progress line (PROGRESS_INTERVAL), beside Scrapy's own "Crawled N pages" line:

    Progress of profiles: this worker 1,234 pages (62/min), 1,100 items (55/min); fleet
    240 pages/min, 220 items/min; frontier 5,400 queued, 32 leased, 10 delayed, 2 dead,
    0 start entries; ETA 23m 40s

The fleet's pace comes from the per-minute buckets in Redis; the ETA is the work left at it.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from crawler.observability.rates import eta_seconds, format_duration

if TYPE_CHECKING:
    from scrapy import Spider

    from crawler.observability.publisher import FleetView

logger = logging.getLogger(__name__)

FORMAT = (
    "Progress of %(spider)s: this worker %(pages)s pages (%(pages_rate)s/min), "
    "%(items)s items (%(items_rate)s/min); fleet %(fleet_pages)s pages/min, "
    "%(fleet_items)s items/min; frontier %(queue)s queued, %(leased)s leased, "
    "%(delayed)s delayed, %(dead)s dead, %(start)s start entries; ETA %(eta)s"
)


@dataclass(frozen=True)
class WorkerPace:
    pages: int
    items: int
    pages_per_min: float
    items_per_min: float


def progress_args(spider: str, worker: WorkerPace, fleet: FleetView) -> dict[str, Any]:
    """The values of ``FORMAT``; the fleet counts as at least as fast as this worker."""
    fleet_pages = max(fleet.per_minute("pages"), worker.pages_per_min)
    fleet_items = max(fleet.per_minute("items"), worker.items_per_min)
    return {
        "spider": spider,
        "pages": f"{worker.pages:,}",
        "pages_rate": f"{worker.pages_per_min:,.0f}",
        "items": f"{worker.items:,}",
        "items_rate": f"{worker.items_per_min:,.0f}",
        "fleet_pages": f"{fleet_pages:,.0f}",
        "fleet_items": f"{fleet_items:,.0f}",
        "queue": f"{fleet.sizes.get('queue', 0):,}",
        "leased": f"{fleet.sizes.get('leased', 0):,}",
        "delayed": f"{fleet.sizes.get('delayed', 0):,}",
        "dead": f"{fleet.sizes.get('dead', 0):,}",
        "start": f"{fleet.sizes.get('start', 0) + fleet.sizes.get('start_leased', 0):,}",
        "eta": format_duration(eta_seconds(fleet.remaining, fleet_pages)),
    }


def log_progress(
    spider: str, worker: WorkerPace, fleet: FleetView, spider_object: Spider | None = None
) -> None:
    logger.info(FORMAT, progress_args(spider, worker, fleet), extra={"spider": spider_object})


# Seconds between two looks at whether the worker is busy (for the pace: BusyClock).
BUSY_SAMPLE = 0.1


class BusyClock:
    """The milliseconds a worker was busy between two laps, from samples taken every
    ``BUSY_SAMPLE`` seconds: idle when nothing is in its downloader, no answer is being
    processed and it waits for its hosts' turns or the fleet has nothing to fetch; so a worker
    waiting for its hosts' turns is not busy, and one between two batches of start entries
    is."""

    def __init__(self) -> None:
        self.samples = 0
        self.idle = 0
        self._since = time.monotonic()

    def sample(self, idle: bool) -> None:
        self.samples += 1
        self.idle += idle

    def lap(self) -> int:
        now = time.monotonic()
        share = 1.0 - self.idle / self.samples if self.samples else 1.0
        busy = (now - self._since) * share
        self.samples, self.idle, self._since = 0, 0, now
        return round(busy * 1000)
