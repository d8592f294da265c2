"""The lease middlewares: the outermost spider and downloader middlewares, which follow each
leased request to its end (its output and items handled, or its failure final) and tell the
lease book (:mod:`crawler.frontier.leases`). :mod:`crawler.middlewares` names them for the
settings."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from redis.exceptions import RedisError
from scrapy import Request, signals
from scrapy.exceptions import CloseSpider, IgnoreRequest
from scrapy.spidermiddlewares.httperror import HttpError

from crawler.frontier.chains import mark_chain
from crawler.frontier.reports import FrontierReports
from crawler.meta import filter_as_made

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from scrapy.http import Response
    from twisted.python.failure import Failure

logger = logging.getLogger(__name__)


class LeaseSpiderMiddleware:
    """Outermost spider middleware: follows a response's output, items included, to its end."""

    def __init__(self, crawler: Crawler) -> None:
        self.crawler = crawler
        self.frontier = FrontierReports(crawler)
        crawler.signals.connect(self.item_stored, signal=signals.item_scraped)
        crawler.signals.connect(self.item_left_pipelines, signal=signals.item_dropped)
        crawler.signals.connect(self.item_failed, signal=signals.item_error)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> LeaseSpiderMiddleware:
        return cls(crawler)

    async def process_spider_output(
        self, response: Response, result: AsyncIterator[Any]
    ) -> AsyncIterator[Any]:
        request = response.request
        if self.frontier.scheduler is None or request is None:
            async for output in result:
                yield output
            return
        try:
            async for output in result:
                if isinstance(output, Request):
                    mark_chain(output, request)
                elif output is not None:  # Scrapy skips a None: no item signal comes
                    self.frontier.ledger.item_started(request)
                yield output
        finally:
            self.frontier.ledger.finished(request)

    def process_spider_exception(self, response: Response, exception: Exception) -> None:
        if response.request is None:
            return
        if isinstance(exception, HttpError | IgnoreRequest | CloseSpider):
            # CloseSpider: the spider chose to stop there; its page is done, not a dead letter.
            self.frontier.ledger.finished(response.request)
        elif isinstance(exception, RedisError):
            # Redis was away while the callback handed work on: try the response again later.
            self.frontier.ledger.release(response.request)
        else:
            reason = f"spider_error:{type(exception).__name__}"
            self.frontier.ledger.failed(response.request, reason, repr(exception))

    def item_stored(self, item: Any, response: Response | None = None) -> None:
        """The item went through every pipeline: counted with its page's ack (crawl jobs)."""
        if response is not None and response.request is not None:
            self.frontier.ledger.item_finished(response.request, stored=True)

    def item_left_pipelines(self, item: Any, response: Response | None = None) -> None:
        if response is not None and response.request is not None:
            self.frontier.ledger.item_finished(response.request)

    def item_failed(self, item: Any, failure: Failure, response: Response | None = None) -> None:
        """A pipeline failed on the item: its request is a dead letter (with why), never acked,
        once its page's other items left the pipelines."""
        if response is not None and response.request is not None:
            error = failure.value
            reason = f"item_error:{type(error).__name__}"
            self.frontier.ledger.failed(response.request, reason, str(error) or repr(error))
            self.frontier.ledger.item_finished(response.request)


class LeaseDownloaderMiddleware:
    """Outermost downloader middleware: every request leaves the downloader with its lease settled
    or still followed.

    ``process_exception`` runs after every other middleware's (retries included), so what reaches it
    is final: an ignored request (offsite, robots.txt) is acked, a failed download is a dead letter.
    An exception raised on the way back (a redirect loop, a body over DOWNLOAD_MAXSIZE, a failing
    ban rule) skips every ``process_exception``: the request's errback, guarded here, settles it
    (:meth:`response_failed`). Either way, a request with an errback of its own is acked (or
    dead-lettered) once the items that errback yields are stored. Redis being away is never the
    request's failure: the lease is released untouched.
    """

    def __init__(self, crawler: Crawler) -> None:
        self.crawler = crawler
        self.frontier = FrontierReports(crawler)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> LeaseDownloaderMiddleware:
        return cls(crawler)

    def process_request(self, request: Request) -> None:
        filter_as_made(request)  # sent back through a scheduler other than the frontier
        self.frontier.ledger.guard(request, self.response_failed)

    def process_response(self, request: Request, response: Response) -> Response:
        self.frontier.ledger.downloaded(request)
        return response

    def process_exception(self, request: Request, exception: Exception) -> None:
        """The request's outcome; one with an errback of its own ends once that errback's
        output and items are through (``LeaseLedger.to_errback``)."""
        ledger = self.frontier.ledger
        if isinstance(exception, RedisError):
            ledger.release(request)
        elif isinstance(exception, IgnoreRequest):
            if not ledger.to_errback(request):
                ledger.finished(request)
        else:
            ledger.to_errback(request)
            reason = f"download_error:{type(exception).__name__}"
            ledger.failed(request, reason, str(exception) or repr(exception))

    def response_failed(self, request: Request, exception: BaseException) -> None:
        """A middleware raised on the way back: a dead letter, or again later if Redis was away."""
        if self.frontier.scheduler is None:
            return
        if isinstance(exception, RedisError):
            self.frontier.ledger.release(request)
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
        self.frontier.ledger.failed(request, reason, error)
