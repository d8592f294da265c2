"""The failure threshold: a crawl most of whose answers fail pauses itself, fleet-wide (and a
crawl job, its own: ``JobBook.answered``; the crawl's window leaves a job's answers out).

With FAILURE_PAUSE_RATIO r and FAILURE_PAUSE_WINDOW n, once more than r of the fleet's last n
answers failed (a download error, a 5xx status, a ban), the crawl is paused as ``scrapy frontier
SPIDER pause`` pauses it, ``by`` "failure threshold" with the count as its reason, and waits for
``scrapy frontier SPIDER resume`` (a site down, a block, a broken proxy: a person looks first).
Every second each worker adds the answers it received since (from its own stats: Scrapy's
``downloader/response_count``, ``downloader/response_status_count/5xx`` and
``downloader/exception_count``, and ``ban/count``) to the fleet's window in Redis
(``{spider}:answers``, ``scripts/failures.lua``), riding the frontier's next round trip. A ratio
of 0 turns it off; a spider whose failures are its results (``domains``) turns it off itself.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

from redis.exceptions import RedisError
from scrapy import signals
from twisted.internet import task

from crawler.config import setting, switched_off
from crawler.connection import crawl_redis
from crawler.frontier.jobs import JobBook
from crawler.frontier.lua import ANSWERS, queue_eval, read_script
from crawler.frontier.riders import Rider, Riders, first_error
from crawler.keys import failure_window_key, pause_key

if TYPE_CHECKING:
    from scrapy.crawler import Crawler

    from crawler.connection import RedisClient

logger = logging.getLogger(__name__)

RIDER = "failure-window"
# The fleet's window of answers, and the pause once too many of them failed.
FAILURES = ANSWERS + read_script("failures", "crawler.bans")
# Seconds between two counts of a worker's answers.
INTERVAL = 1.0


def answers_since(before: dict[str, Any], now: dict[str, Any]) -> tuple[int, int]:
    """The answers (responses and download errors) and the failed ones among them between two
    snapshots of a crawl's stats."""

    def grown(key: str) -> int:
        return int(now.get(key, 0) or 0) - int(before.get(key, 0) or 0)

    prefix = "downloader/response_status_count/5"
    errors = grown("downloader/exception_count")
    answers = grown("downloader/response_count") + errors
    server_errors = sum(grown(key) for key in set(now) | set(before) if key.startswith(prefix))
    return answers, min(answers, errors + server_errors + grown("ban/count"))


class FailurePause:
    """The extension (see the module): counts this worker's answers into the fleet's window."""

    def __init__(self, crawler: Crawler, server: RedisClient, ratio: float, window: int) -> None:
        self.crawler = crawler
        self.server = server
        self.ratio = ratio
        self.window = window
        self._seen: dict[str, Any] = {}
        self._loop: task.LoopingCall | None = None  # made once running: it takes the reactor
        self._pending = (0, 0)  # answers and failed ones not written yet

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> FailurePause:
        ratio: float = setting(crawler.settings, "FAILURE_PAUSE_RATIO")
        if ratio <= 0:
            raise switched_off(cls, "FAILURE_PAUSE_RATIO is 0")
        window: int = setting(crawler.settings, "FAILURE_PAUSE_WINDOW")
        extension = cls(crawler, crawl_redis(crawler), ratio, window)
        crawler.signals.connect(extension.spider_opened, signal=signals.spider_opened)
        crawler.signals.connect(extension.spider_closed, signal=signals.spider_closed)
        return extension

    def spider_opened(self) -> None:
        self._loop = task.LoopingCall(self.count)
        self._loop.start(INTERVAL, now=False)

    def spider_closed(self) -> None:
        if self._loop is not None and self._loop.running:
            self._loop.stop()

    def count(self) -> None:
        """Add the answers received since the last count to those waiting to be written, and
        have them written with the frontier's next round trip (within INTERVAL)."""
        stats = self.crawler.stats.get_stats() if self.crawler.stats is not None else {}
        answers, failed = answers_since(self._seen, stats)
        self._seen = dict(stats)
        # Answers to crawl jobs' requests go to their jobs' windows (each job pauses itself).
        jobs_answers, jobs_failed = JobBook.of(self.crawler).take_answered()
        answers = max(0, answers - jobs_answers)
        failed = min(answers, max(0, failed - jobs_failed))
        self._pending = (self._pending[0] + answers, self._pending[1] + failed)
        if not self._pending[0]:
            return
        riders = Riders.of(self.crawler)
        rider = Rider(self._queue_write, self._written, self._lost)
        riders.add(RIDER, rider, INTERVAL if riders.carried else 0)
        if not riders.carried:
            riders.send(self.server)

    def _queue_write(self, pipe: Any) -> None:
        spider = self.crawler.spider.name if self.crawler.spider is not None else ""
        answers, failed = self._pending
        self._written_now = self._pending
        self._pending = (0, 0)
        keys = [failure_window_key(spider), pause_key(spider)]
        args = [self.window, failed, answers - failed, self.ratio, f"{time.time():.3f}"]
        queue_eval(pipe, FAILURES, keys, args)

    def _written(self, replies: list[Any]) -> None:
        if (error := first_error(replies)) is not None:
            self._lost(error)
            return
        answers, failed, paused = (int(value) for value in replies[0])
        if paused:
            spider = self.crawler.spider.name if self.crawler.spider is not None else ""
            logger.error(
                "%d of the fleet's last %d answers failed (FAILURE_PAUSE_RATIO %g): the crawl "
                "of %s is paused; `scrapy frontier %s resume` once the cause is fixed",
                failed,
                answers,
                self.ratio,
                spider,
                spider,
            )

    def _lost(self, exc: RedisError) -> None:
        """Redis away: the answers wait for the next write (the frontier reports the outage)."""
        answers, failed = self._written_now
        self._pending = (self._pending[0] + answers, self._pending[1] + failed)
        self._written_now = (0, 0)
