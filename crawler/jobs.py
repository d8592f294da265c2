"""Jobs in a crawl (see crawler/frontier/jobs.py): the middleware that carries a page's job to
what its callback makes, counts each job's pages, and drops the work of a cancelled job (its
items stored and its errors are counted in the frontier as each page's lease ends, see
``scripts/settle.lua``).

As a spider middleware it gives every request a page's callback makes the page's job (unless
the request names its own) and remembers each item's job, which the MongoDB pipeline stores
in the item's document as ``job``; the items and requests of a page whose job was cancelled
are dropped. As a downloader middleware it turns away a request of a cancelled or expired job
before it is sent (its lease is acked: nothing is lost that was wanted), and sends one of a
paused job back to the frontier, which holds it until the job resumes.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from scrapy import Request, signals
from scrapy.exceptions import IgnoreRequest
from twisted.internet import task

from crawler.frontier.jobs import CHECK_INTERVAL, JobBook, job_number_of
from crawler.meta import JOB_META, send_back

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from scrapy.http import Response
    from twisted.python.failure import Failure

logger = logging.getLogger(__name__)


class JobSpiderMiddleware:
    """The spider middleware of jobs (SPIDER_MIDDLEWARES in crawler/settings.py); it also
    keeps the worker's view of the jobs fresh (JobBook.tick every CHECK_INTERVAL seconds)."""

    def __init__(self, crawler: Crawler, book: JobBook) -> None:
        self.crawler = crawler
        self.book = book
        self._loop = task.LoopingCall(book.tick)
        crawler.signals.connect(self._opened, signal=signals.spider_opened)
        crawler.signals.connect(self._closed, signal=signals.spider_closed)
        for signal in (signals.item_scraped, signals.item_dropped, signals.item_error):
            crawler.signals.connect(self._item_left, signal=signal)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> JobSpiderMiddleware:
        return cls(crawler, JobBook.of(crawler))

    def _opened(self) -> None:
        self._loop.start(CHECK_INTERVAL, now=False).addErrback(self._loop_failed)

    def _loop_failed(self, failure: Failure) -> None:
        """A tick that raised stops the loop: say why and start it again."""
        logger.error("Reading the crawl jobs failed: %s", failure.getErrorMessage())
        if not self._loop.running:
            self._loop.start(CHECK_INTERVAL, now=False).addErrback(self._loop_failed)

    def _closed(self) -> None:
        if self._loop.running:
            self._loop.stop()
        self.book.tick()  # the last counts

    # --- spider middleware ------------------------------------------------------------------

    async def process_spider_output(
        self, response: Response, result: AsyncIterator[Any]
    ) -> AsyncIterator[Any]:
        request = response.request
        number = None if request is None else job_number_of(request)
        if number is None or request is None:
            async for output in result:
                yield output
            return
        self.book.count(request, "pages")
        cancelled = number in self.book.cancelled
        async for output in result:
            if cancelled:
                self._count_dropped(output)
                continue
            if isinstance(output, Request):
                output.meta.setdefault(JOB_META, number)
            else:
                self.book.tag_item(output, number)
            yield output

    def _count_dropped(self, output: Any) -> None:
        assert self.crawler.stats is not None
        kind = "requests" if isinstance(output, Request) else "items"
        self.crawler.stats.inc_value(f"jobs/cancelled_{kind}_dropped")

    def _item_left(self, item: Any) -> None:
        """The item left the pipelines (stored, dropped or failed): its job is forgotten."""
        self.book.untag_item(item)


class JobDownloaderMiddleware:
    """The downloader middleware of jobs (DOWNLOADER_MIDDLEWARES in crawler/settings.py)."""

    def __init__(self, crawler: Crawler, book: JobBook) -> None:
        self.crawler = crawler
        self.book = book

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> JobDownloaderMiddleware:
        return cls(crawler, JobBook.of(crawler))

    def process_request(self, request: Request) -> Request | None:
        """A cancelled or expired job's request is not sent (its lease acked); a paused job's
        goes back to the frontier, where the pop parks it until the job resumes."""
        assert self.crawler.stats is not None
        if self.book.is_cancelled(request):
            self.crawler.stats.inc_value("jobs/cancelled_requests_dropped")
            job = self.book.name(job_number_of(request) or 0)
            raise IgnoreRequest(f"job {job} cancelled or past its deadline")
        if self.book.is_paused(request):
            self.crawler.stats.inc_value("jobs/paused_requests_sent_back")
            return send_back(request, dict(request.meta), time.time() + CHECK_INTERVAL)
        return None
