"""A worker that meets only rate limits stops, so whoever runs it backs off (RATE_LIMIT_EXIT).

With RATE_LIMIT_EXIT "M/S", a worker that received M rate-limited answers (429, or 503 with a
Retry-After) within S seconds, and no successful answer (a status below 400) in those S
seconds, closes with the finish reason ``rate_limited``: the scheduler releases the leases it
holds as it closes, so other workers (or this one, started again later) take them over, and
``scrapy crawl`` exits with status EXIT_RATE_LIMITED, so Kubernetes, Scrapyd or the EC2 fleet
back off instead of restarting it in a loop. Answers are counted as the downloader receives
them, before the ban and retry middlewares see them. "" (the default) leaves it off.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from typing import TYPE_CHECKING

from scrapy import signals
from scrapy.utils.defer import deferred_from_coro

from crawler.config import setting, switched_off

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.crawler import Crawler
    from scrapy.http import Response

logger = logging.getLogger(__name__)

RATE_LIMITED = "rate_limited"
# The exit status of `scrapy crawl` when RATE_LIMIT_EXIT stopped the worker.
EXIT_RATE_LIMITED = 5


def rate_limited(response: Response) -> bool:
    """Whether ``response`` says the client sends too much: 429, or 503 with a Retry-After."""
    return response.status == 429 or (response.status == 503 and b"Retry-After" in response.headers)


class RateLimitExit:
    """The extension: counts answers and closes the spider as RATE_LIMITED (see the module)."""

    def __init__(self, crawler: Crawler, answers: int, seconds: float) -> None:
        self.crawler = crawler
        self.answers = answers
        self.seconds = seconds
        self._limited: deque[float] = deque()
        self._succeeded = -float("inf")  # when the last successful answer came (monotonic)
        self._stopping = False

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> RateLimitExit:
        window: tuple[int, float] | None = setting(crawler.settings, "RATE_LIMIT_EXIT")
        if window is None:
            raise switched_off(cls, "RATE_LIMIT_EXIT is not set")
        extension = cls(crawler, *window)
        crawler.signals.connect(extension.response_downloaded, signal=signals.response_downloaded)
        return extension

    def response_downloaded(self, response: Response, request: Request) -> None:
        if self.saw(response, time.monotonic()):
            self._stop()

    def saw(self, response: Response, now: float) -> bool:
        """Count ``response``, received at ``now`` (monotonic); whether the worker should stop."""
        if response.status < 400:
            self._succeeded = now
            self._limited.clear()
            return False
        if not rate_limited(response):
            return False
        self._limited.append(now)
        while self._limited[0] < now - self.seconds:
            self._limited.popleft()
        return len(self._limited) >= self.answers and now - self._succeeded > self.seconds

    def _stop(self) -> None:
        if self._stopping or self.crawler.engine is None:
            return
        self._stopping = True
        logger.error(
            "%d rate-limited answers in %g s and none successful: stopping this worker "
            "(RATE_LIMIT_EXIT), its leases released for the fleet",
            len(self._limited),
            self.seconds,
        )
        deferred_from_coro(self.crawler.engine.close_spider_async(reason=RATE_LIMITED))
