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
from twisted.internet import task, threads

from crawler.control.jobs import sweep_ended_jobs
from crawler.frontier.jobs import CHECK_INTERVAL, FORGET_INTERVAL, JobBook, job_number_of
from crawler.frontier.reports import frontier_scheduler
from crawler.meta import JOB_META, send_back

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from scrapy.http import Response
    from twisted.internet.defer import Deferred
    from twisted.python.failure import Failure

    from crawler.keys import FrontierKeys

logger = logging.getLogger(__name__)


class JobSpiderMiddleware:
    """The spider middleware of jobs (SPIDER_MIDDLEWARES in crawler/settings.py); it also
    keeps the worker's view of the jobs fresh (JobBook.tick every CHECK_INTERVAL seconds) and
    looks for jobs that ended, to forget them, from the first job it meets on (in a thread,
    once a FORGET_INTERVAL for the fleet: ``crawler.control.jobs.sweep_ended_jobs``)."""

    def __init__(self, crawler: Crawler, book: JobBook) -> None:
        self.crawler = crawler
        self.book = book
        self._loop = task.LoopingCall(self._tick)
        self._sweeps = task.LoopingCall(self._sweep)
        self._keys: FrontierKeys | None = None
        crawler.signals.connect(self._opened, signal=signals.spider_opened)
        crawler.signals.connect(self._closed, signal=signals.spider_closed)
        for signal in (signals.item_scraped, signals.item_dropped, signals.item_error):
            crawler.signals.connect(self._item_left, signal=signal)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> JobSpiderMiddleware:
        return cls(crawler, JobBook.of(crawler))

    def _opened(self) -> None:
        self._loop.start(CHECK_INTERVAL, now=False).addErrback(self._loop_failed)
        scheduler = frontier_scheduler(self.crawler)
        if scheduler is not None and scheduler.frontier is not None:  # a crawl on the frontier
            self._keys = scheduler.frontier.keys

    def _tick(self) -> None:
        """The book's tick; the sweeps start once this worker met a job (a fleet that runs
        none asks Redis nothing for them)."""
        self.book.tick()
        if self.book.met and self._keys is not None and not self._sweeps.running:
            self._sweeps.start(FORGET_INTERVAL, now=True)

    def _sweep(self) -> Deferred[None]:
        """Forget the jobs that ended, in a thread (a job's count reads the whole queue); a
        failure is logged and the next sweep comes as planned."""
        assert self._keys is not None
        done = threads.deferToThread(sweep_ended_jobs, self.book.server, self._keys)
        return done.addCallbacks(lambda _: None, self._sweep_failed)

    def _sweep_failed(self, failure: Failure) -> None:
        logger.warning("Looking for crawl jobs that ended failed: %s", failure.getErrorMessage())

    def _loop_failed(self, failure: Failure) -> None:
        """A tick that raised stops the loop: say why and start it again."""
        logger.error("Reading the crawl jobs failed: %s", failure.getErrorMessage())
        if not self._loop.running:
            self._loop.start(CHECK_INTERVAL, now=False).addErrback(self._loop_failed)

    def _closed(self) -> None:
        for loop in (self._loop, self._sweeps):
            if loop.running:
                loop.stop()
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


class JobAnswersMiddleware:
    """Counts each answer to a crawl job's request, every attempt, for the job's failure
    threshold (FAILURE_PAUSE_RATIO, ``JobBook.answered``): a response, failed when 5xx, and a
    download error. Among the first on the way back, as Scrapy's DownloaderStats, so it counts
    what the crawl's window counts; a request turned away before it was sent is no answer."""

    def __init__(self, book: JobBook) -> None:
        self.book = book

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> JobAnswersMiddleware:
        return cls(JobBook.of(crawler))

    def process_response(self, request: Request, response: Response) -> Response:
        self.book.answered(request, response.status >= 500)
        return response

    def process_exception(self, request: Request, exception: Exception) -> None:
        if not isinstance(exception, IgnoreRequest):
            self.book.answered(request, True)
