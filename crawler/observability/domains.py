"""The fleet monitor of the domains spider, without per-domain counters.

FleetMonitor counts requests, responses and items per domain (``domain/<host>/...`` stats,
published to ``{spider}:stats`` and to Prometheus as one series per domain). A sweep touches
every domain once, so those counters would grow with the list: 20,000 domains, some 60,000
hash fields and series. This monitor keeps everything else (shared stats, heartbeats, metrics,
progress) and the spider's own bounded counters (``domains/status/<class>``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from crawler.observability.monitor import FleetMonitor

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.http import Response


class DomainsFleetMonitor(FleetMonitor):
    def request_reached_downloader(self, request: Request) -> None:
        return None

    def response_downloaded(self, response: Response, request: Request) -> None:
        return None

    def item_scraped(self, item: Any, response: Any = None) -> None:
        return None
