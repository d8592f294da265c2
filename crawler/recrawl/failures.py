"""The downloader middleware that tells the recrawl of a revisit whose download failed for good:
its host may be gone (crawler/recrawl/moves.py, ``unanswered``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from crawler.config import setting, switched_off
from crawler.recrawl.revisits import WAITING_META

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.crawler import Crawler

# Sent with ``request`` and ``exception`` for a revisit's download that failed, every other
# middleware's ``process_exception`` done (retries spent): RecrawlMiddleware counts it.
revisit_failed = object()


class RecrawlFailureMiddleware:
    """Downloader middleware at 2, just inside LeaseDownloaderMiddleware: what reaches its
    ``process_exception`` is final (a retry, a request sent back to the frontier, ends the
    chain before it), so a revisit's failure it sees is the one its dead letter records.
    Only with RECRAWL_ENABLED."""

    def __init__(self, crawler: Crawler) -> None:
        self.crawler = crawler

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> RecrawlFailureMiddleware:
        if not setting(crawler.settings, "RECRAWL_ENABLED"):
            raise switched_off(cls, "RECRAWL_ENABLED is off")
        return cls(crawler)

    def process_exception(self, request: Request, exception: Exception) -> None:
        if WAITING_META in request.meta:
            self.crawler.signals.send_catch_log(
                revisit_failed, request=request, exception=exception
            )
