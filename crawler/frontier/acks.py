"""Tell the frontier scheduler when a leased request is fully handled, so its lease is acked.

A lease is acknowledged when the callback's output is consumed, every item it produced has
left the item pipelines (stored, dropped or failed) and every request it produced is in Redis.
Requests that fail for good go to the dead-letter list with the reason.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from redis.exceptions import RedisError
from scrapy import Request, signals
from scrapy.exceptions import IgnoreRequest
from scrapy.spidermiddlewares.httperror import HttpError

from crawler.frontier.scheduler import frontier_scheduler

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from scrapy.http import Response
    from twisted.python.failure import Failure

logger = logging.getLogger(__name__)


class LeaseSpiderMiddleware:
    """Outermost spider middleware: follows a response's output to its end.

    Also connects the item signals, which fire once an item has left the pipelines.
    """

    def __init__(self, crawler: Crawler) -> None:
        self.crawler = crawler
        for signal in (signals.item_scraped, signals.item_dropped):
            crawler.signals.connect(self.item_left_pipelines, signal=signal)
        crawler.signals.connect(self.item_failed, signal=signals.item_error)

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

    def item_failed(self, item: Any, failure: Failure, response: Response | None = None) -> None:
        """A pipeline failed on the item, so it is not stored: its request is a dead letter
        with the reason, never acknowledged as done."""
        scheduler = frontier_scheduler(self.crawler)
        if scheduler is not None and response is not None and response.request is not None:
            error = failure.value
            reason = f"item_error:{type(error).__name__}"
            scheduler.failed(response.request, reason, str(error) or repr(error))


class LeaseDownloaderMiddleware:
    """Outermost downloader middleware: every request leaves the downloader with its lease
    settled or still followed.

    ``process_exception`` runs after every other middleware's (retries included), so what
    reaches it is final: an ignored request (offsite, robots.txt) is acked, a failed download
    is a dead letter. An exception raised on the way back (a ``process_response``: a redirect
    loop, a body over DOWNLOAD_MAXSIZE once decompressed, a failing ban rule) skips every
    ``process_exception``; the request's errback, guarded here, settles it instead (see
    :meth:`response_failed`). Redis being away is never the request's failure: its lease is
    released untouched.
    """

    def __init__(self, crawler: Crawler) -> None:
        self.crawler = crawler

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> LeaseDownloaderMiddleware:
        return cls(crawler)

    def process_request(self, request: Request) -> None:
        scheduler = frontier_scheduler(self.crawler)
        if scheduler is not None:
            scheduler.guard(request, self.response_failed)

    def process_response(self, request: Request, response: Response) -> Response:
        scheduler = frontier_scheduler(self.crawler)
        if scheduler is not None:
            scheduler.downloaded(request)
        return response

    def process_exception(self, request: Request, exception: Exception) -> None:
        scheduler = frontier_scheduler(self.crawler)
        if scheduler is None:
            return
        if isinstance(exception, RedisError):
            scheduler.release(request)
        elif isinstance(exception, IgnoreRequest):
            scheduler.finished(request)
        else:
            reason = f"download_error:{type(exception).__name__}"
            scheduler.failed(request, reason, str(exception) or repr(exception))

    def response_failed(self, request: Request, exception: BaseException) -> None:
        """A downloader middleware raised on the way back: the response is given up (dead
        letter with the reason), or tried again later if Redis was away."""
        scheduler = frontier_scheduler(self.crawler)
        if scheduler is None:
            return
        if isinstance(exception, RedisError):
            scheduler.release(request)
            return
        reason = (
            "response_ignored"
            if isinstance(exception, IgnoreRequest)
            else f"response_error:{type(exception).__name__}"
        )
        error = str(exception) or repr(exception)
        logger.warning(
            "Gave up on %s (%s): %s",
            request.url,
            reason,
            error[:300],
            extra={"spider": self.crawler.spider},
        )
        scheduler.failed(request, reason, error)
