"""The frontier as middlewares, spiders and extensions see it: one object, whatever scheduler
the crawl runs.

Middlewares are built before the engine's scheduler, and a crawl may run another scheduler (a
benchmark's, Scrapy's): :class:`FrontierReports` tells the crawl's FrontierScheduler what
happened to a request (its ``LeaseLedger``, ``leases.py``), writes what it buffered, says
whether Redis is away and how much is queued, and does nothing without one. Periodic Redis
work rides the frontier's round trips through ``riders.py``. The start-entry feed
(``spiders/feed.py``) is the one other user of the scheduler itself (start-entry leases).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

from scrapy.utils.misc import load_object

from crawler.config.rules import BAD_VALUE
from crawler.frontier.leases import LeaseLedger
from crawler.frontier.scheduler import FrontierScheduler

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from scrapy.settings import BaseSettings


class FrontierReports:
    """What happened to a leased request, for the crawl's FrontierScheduler if it has one."""

    def __init__(self, crawler: Crawler) -> None:
        self.crawler = crawler
        self._empty: LeaseLedger | None = None

    @property
    def scheduler(self) -> FrontierScheduler | None:
        return frontier_scheduler(self.crawler)

    def in_backoff(self) -> bool:
        """Whether Redis was found down lately: skip calls that would block the reactor."""
        scheduler = self.scheduler
        return scheduler is not None and scheduler.in_backoff()

    def flush(self) -> bool:
        """Write what the frontier buffered now; False if Redis is away."""
        scheduler = self.scheduler
        return scheduler is None or scheduler.flush()

    def queued(self) -> int | None:
        """Requests queued for the fleet (one round trip), None without a frontier; raises
        RedisError."""
        scheduler = self.scheduler
        if scheduler is None or scheduler.frontier is None:
            return None
        return scheduler.frontier.queued()

    @property
    def ledger(self) -> LeaseLedger:
        """The crawl's lease ledger: what happened to a leased request is told to it. Without
        a FrontierScheduler, an empty one, to which no request is leased: told nothing."""
        if (scheduler := self.scheduler) is not None:
            return scheduler.ledger
        if self._empty is None:
            self._empty = LeaseLedger(self.crawler, "")
        return self._empty


def frontier_scheduler(crawler: Crawler) -> FrontierScheduler | None:
    """The crawl's scheduler if it is a FrontierScheduler, else None (also before the engine
    exists). ``isinstance`` cannot tell: Scrapy's scheduler metaclass accepts any class that has
    the scheduler methods."""
    try:
        scheduler = crawler.engine.scheduler if crawler.engine is not None else None
    except RuntimeError:
        return None
    if FrontierScheduler in type(scheduler).__mro__:
        return cast(FrontierScheduler, scheduler)
    return None


def on_the_frontier(settings: BaseSettings) -> bool:
    """Whether SCHEDULER is the frontier scheduler (or a subclass)."""
    try:
        # Scrapy's scheduler metaclass makes issubclass() true for any scheduler-like class.
        return FrontierScheduler in load_object(settings.get("SCHEDULER")).__mro__
    except BAD_VALUE:
        return False
