"""The periodic progress line (PROGRESS_INTERVAL), beside Scrapy's own "Crawled N pages" line:

    Progress of profiles: this worker 1,234 pages (62/min), 1,100 items (55/min); fleet
    240 pages/min, 220 items/min; frontier 5,400 queued, 32 leased, 10 delayed, 2 dead,
    0 start entries; ETA 23m 40s

The fleet's pace comes from the per-minute buckets in Redis; the ETA is the work left at it.
"""

from __future__ import annotations

import logging
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
