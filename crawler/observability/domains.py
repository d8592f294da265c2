"""The fleet monitor of the domains spider, without FleetMonitor's per-domain counters: a sweep
touches every domain once, so they would grow with the list (20,000 domains, some 60,000 hash
fields and series). The spider counts its own bounded ``domains/status/<class>``.
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
