"""Tell the frontier scheduler when a leased request is fully handled, so its lease is acked.

A lease is acknowledged when the callback's output is consumed, every item it produced has
left the item pipelines (stored, dropped or failed) and every request it produced is in Redis.
Requests that fail for good go to the dead-letter list with the reason.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from redis.exceptions import RedisError
from scrapy import Request, signals
from scrapy.exceptions import IgnoreRequest
from scrapy.spidermiddlewares.httperror import HttpError

from crawler.scheduling.scheduler import frontier_scheduler

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from scrapy.http import Response


class LeaseSpiderMiddleware:
    """Outermost spider middleware: follows a response's output to its end.

    Also connects the item signals, which fire once an item has left the pipelines.
    """

    def __init__(self, crawler: Crawler) -> None:
        self.crawler = crawler
        for signal in (signals.item_scraped, signals.item_dropped, signals.item_error):
            crawler.signals.connect(self.item_left_pipelines, signal=signal)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> LeaseSpiderMiddleware:
        return cls(crawler)

    async def process_spider_output(
        self, response: Response, result: AsyncIterator[Any]
    ) -> AsyncIterator[Any]:
        scheduler = frontier_scheduler(self.crawler)
        request = response.request
        if scheduler is None or request is None:
            async for output in result:
                yield output
            return
        scheduler.scraping(request)
        try:
            async for output in result:
                if not isinstance(output, Request):
                    scheduler.item_started(request)
                yield output
        finally:
            scheduler.output_finished(request)

    def process_spider_exception(self, response: Response, exception: Exception) -> None:
        scheduler = frontier_scheduler(self.crawler)
        if scheduler is None or response.request is None:
            return
        if isinstance(exception, HttpError | IgnoreRequest):
            scheduler.finished(response.request)
        elif isinstance(exception, RedisError):
            # Redis was away while the callback handed work on: try the response again later.
            scheduler.release(response.request)
        else:
            reason = f"spider_error:{type(exception).__name__}"
            scheduler.failed(response.request, reason, repr(exception))

    def item_left_pipelines(self, item: Any, response: Response | None = None) -> None:
        scheduler = frontier_scheduler(self.crawler)
        if scheduler is not None and response is not None and response.request is not None:
            scheduler.item_finished(response.request)


class LeaseDownloaderMiddleware:
    """Outermost downloader middleware: a download that failed for good is a dead letter.

    Runs after every other middleware's ``process_exception`` (retries included), so what
    reaches it is final. An ignored request (offsite, robots.txt) is acked, not dead-lettered.
    """

    def __init__(self, crawler: Crawler) -> None:
        self.crawler = crawler

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> LeaseDownloaderMiddleware:
        return cls(crawler)

    def process_exception(self, request: Request, exception: Exception) -> None:
        scheduler = frontier_scheduler(self.crawler)
        if scheduler is None:
            return
        if isinstance(exception, IgnoreRequest):
            scheduler.finished(request)
        else:
            reason = f"download_error:{type(exception).__name__}"
            scheduler.failed(request, reason, str(exception) or repr(exception))
