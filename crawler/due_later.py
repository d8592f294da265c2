"""Requests due later under a SCHEDULER other than the frontier (scrapy-redis's, Scrapy's own).

The frontier keeps a request sent back (a ban's cool-down, a host's turn, a paused crawl job) or
retried after a backoff in its delayed set until its due time (meta ``frontier_due``). Another
scheduler knows no due time: it would hand the request straight back, and the middleware that
sent it back would send it back again, over and over until it is due (some thousand times a
second per worker). :class:`DueLater` keeps such a request in the worker until it is due, then
schedules it; the spider does not close as idle while it holds one. A worker that stops holding
some says how many in a WARNING: they are not kept, as scrapy-redis keeps nothing it popped.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

from scrapy import signals
from scrapy.exceptions import DontCloseSpider, IgnoreRequest
from scrapy.utils.asyncio import CallLaterResult, call_later

from crawler.config import switched_off
from crawler.frontier.reports import on_the_frontier
from crawler.meta import DUE_META

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.crawler import Crawler

logger = logging.getLogger(__name__)


def seconds_to_due(request: Request, now: float) -> float:
    """Seconds until the request's due time (meta ``frontier_due``), 0 when due or none."""
    due = request.meta.get(DUE_META)
    if isinstance(due, bool) or not isinstance(due, int | float):
        return 0.0
    return max(0.0, due - now)


class DueLater:
    """Extension: under another SCHEDULER, a request scheduled before its due time waits in the
    worker (counted ``scheduler/due_later``) and is scheduled once due. Off with the frontier's
    scheduler, whose delayed set in Redis keeps them."""

    def __init__(self, crawler: Crawler) -> None:
        self.crawler = crawler
        self.waiting: dict[Request, CallLaterResult] = {}
        crawler.signals.connect(self.request_scheduled, signal=signals.request_scheduled)
        crawler.signals.connect(self.spider_idle, signal=signals.spider_idle)
        crawler.signals.connect(self.spider_closed, signal=signals.spider_closed)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> DueLater:
        if on_the_frontier(crawler.settings):
            raise switched_off(cls, "the frontier's scheduler keeps requests until due")
        return cls(crawler)

    def request_scheduled(self, request: Request, spider: Any) -> None:
        wait = seconds_to_due(request, time.time())
        if not wait:
            return
        self.waiting[request] = call_later(wait, self._schedule, request)
        if self.crawler.stats is not None:
            self.crawler.stats.inc_value("scheduler/due_later")
        raise IgnoreRequest(f"due in {wait:.1f}s: waits in this worker until then")

    def _schedule(self, request: Request) -> None:
        self.waiting.pop(request, None)
        engine = self.crawler.engine
        if engine is not None and engine.spider is not None:
            engine.crawl(request)

    def spider_idle(self) -> None:
        if self.waiting:
            raise DontCloseSpider

    def spider_closed(self) -> None:
        for call in self.waiting.values():
            call.cancel()
        if self.waiting:
            logger.warning(
                "%d requests due later are not kept: SCHEDULER is not the frontier's, which "
                "keeps them in Redis",
                len(self.waiting),
                extra={"spider": self.crawler.spider},
            )
        self.waiting.clear()
