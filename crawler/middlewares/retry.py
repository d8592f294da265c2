"""Retries that wait with exponential backoff in the frontier's delayed set, not in a worker.

Replaces Scrapy's RetryMiddleware. Attempt n waits ``RETRY_BACKOFF_BASE ** n`` seconds (default
base e: about 2.7 s, 7.4 s, 20 s, ...), with +-RETRY_BACKOFF_JITTER, at most RETRY_BACKOFF_MAX;
a ``Retry-After`` header wins when present, counted up to BAN_COOLDOWN_MAX as for bans. The
retry is a new request due at that time: it waits in Redis, so no worker sleeps and a worker
dying does not lose it. A request out of attempts goes to the dead-letter list with its reason.
"""

from __future__ import annotations

import random
import time
from typing import TYPE_CHECKING

from scrapy.downloadermiddlewares.retry import get_retry_request
from scrapy.utils.misc import load_object
from scrapy.utils.response import response_status_message

from crawler.frontier.scheduler import DUE_META, frontier_scheduler
from crawler.middlewares.bans import cooldown_max, retry_after

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.crawler import Crawler
    from scrapy.http import Response


class BackoffRetryMiddleware:
    """Settings: RETRY_ENABLED, RETRY_TIMES, RETRY_HTTP_CODES, RETRY_EXCEPTIONS,
    RETRY_PRIORITY_ADJUST (Scrapy's names), RETRY_BACKOFF_BASE, RETRY_BACKOFF_MAX,
    RETRY_BACKOFF_JITTER; BAN_COOLDOWN_MAX caps a Retry-After. Per request: meta
    ``dont_retry``, ``max_retry_times``."""

    def __init__(self, crawler: Crawler) -> None:
        settings = crawler.settings
        self.crawler = crawler
        self.enabled = settings.getbool("RETRY_ENABLED")
        self.codes = {int(code) for code in settings.getlist("RETRY_HTTP_CODES")}
        self.exceptions = tuple(
            load_object(path) if isinstance(path, str) else path
            for path in settings.getlist("RETRY_EXCEPTIONS")
        )
        self.base = settings.getfloat("RETRY_BACKOFF_BASE")
        self.maximum = settings.getfloat("RETRY_BACKOFF_MAX")
        self.jitter = settings.getfloat("RETRY_BACKOFF_JITTER")
        self.retry_after_max = cooldown_max(settings)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> BackoffRetryMiddleware:
        return cls(crawler)

    def process_response(self, request: Request, response: Response) -> Request | Response:
        if not self.enabled or request.meta.get("dont_retry") or response.status not in self.codes:
            return response
        reason = response_status_message(response.status)
        retry = self._retry(request, reason, retry_after(response, self.retry_after_max))
        if retry is None:
            self._dead(request, f"retries_exhausted:http_{response.status}", reason)
            return response
        return retry

    def process_exception(self, request: Request, exception: Exception) -> Request | None:
        if not self.enabled or request.meta.get("dont_retry"):
            return None
        if not isinstance(exception, self.exceptions):
            return None
        return self._retry(request, exception.__class__.__name__, 0.0)

    def delay(self, attempt: int, server_asked: float = 0.0) -> float:
        """Seconds before retry number ``attempt`` (1-based)."""
        if server_asked > 0:
            return min(server_asked, self.retry_after_max)
        spread = 1 + random.uniform(-self.jitter, self.jitter)
        try:
            wait = min(self.maximum, self.base**attempt)
        except OverflowError:
            wait = self.maximum
        return min(self.maximum, wait * spread)

    def _retry(self, request: Request, reason: str, server_asked: float) -> Request | None:
        assert self.crawler.spider is not None
        retry = get_retry_request(
            request,
            spider=self.crawler.spider,
            reason=reason,
            priority_adjust=self.crawler.settings.getint("RETRY_PRIORITY_ADJUST"),
        )
        if retry is not None:
            retry.meta[DUE_META] = time.time() + self.delay(retry.meta["retry_times"], server_asked)
        return retry

    def _dead(self, request: Request, reason: str, error: str) -> None:
        scheduler = frontier_scheduler(self.crawler)
        if scheduler is not None:
            scheduler.failed(request, reason, error)
