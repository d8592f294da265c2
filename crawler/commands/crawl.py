"""``scrapy crawl``, with an exit status that tells a fleet manager why a worker stopped: 1, Redis
or MongoDB does not answer at start (one ERROR line names its masked URI; starting again later
may help); 2, a setting or a spider argument (``-a``) is invalid, or a spider's start file
(``-a file=``) cannot be read (one ERROR line names it; settings are checked, with what the
frontier needs from Redis, before anything is taken from Redis); 3, banned with
``BAN_POLICY = "stop"`` (replace the IP address before starting again); 4, items yielded and
none stored (``items_not_stored``); 5, only rate-limited answers for a while
(``RATE_LIMIT_EXIT``; its leases released; start it later).
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from scrapy.commands.crawl import Command as ScrapyCrawlCommand
from scrapy.exceptions import UsageError
from scrapy.utils.log import configure_logging

from crawler.addons import keep_project_addon
from crawler.bans.policy import EXIT_BANNED
from crawler.bans.ratelimit import EXIT_RATE_LIMITED, RATE_LIMITED
from crawler.config import setting
from crawler.config.rules import EXIT_BAD_SETTING, SettingsError
from crawler.config.table import BEFORE_THE_CRAWLER
from crawler.connection import RedisUnavailable
from crawler.pipelines import EXIT_ITEMS_NOT_STORED, ITEMS_NOT_STORED, MongoUnavailable
from crawler.preflight import check_frontier_server, check_settings, check_storage_server

if TYPE_CHECKING:
    import argparse

    from scrapy.settings import Settings
    from twisted.python.failure import Failure

logger = logging.getLogger(__name__)

# A server the crawl needs did not answer as it started: not a usage error (it may answer later).
EXIT_SERVER_UNAVAILABLE = 1
UNAVAILABLE = (RedisUnavailable, MongoUnavailable)

# Finish reasons that are not a success, and the exit status each gives.
FAILED_REASONS = {
    "banned": EXIT_BANNED,
    ITEMS_NOT_STORED: EXIT_ITEMS_NOT_STORED,
    RATE_LIMITED: EXIT_RATE_LIMITED,
}


def _refusal_logging(settings: Settings) -> Settings:
    """The run's logging at ERROR, in its LOG_FILE when that one can be written (a Scrapyd job's
    log: a bad LOG_LEVEL is said there, not in Scrapyd's own log), else on stderr."""
    refusal = settings.copy()
    refusal.set("LOG_LEVEL", "ERROR", priority="cmdline")
    try:
        setting(settings, "LOG_FILE")
    except SettingsError:
        refusal.set("LOG_FILE", None, priority="cmdline")
    return refusal


class Command(ScrapyCrawlCommand):
    def process_options(self, args: list[str], opts: argparse.Namespace) -> None:
        """The ``-s`` settings applied, those Scrapy's logging set-up reads are checked before
        it runs: one ERROR line (in Scrapy's own log format) and exit status 2 for a bad one."""
        super().process_options(args, opts)
        assert self.settings is not None
        try:
            for name in BEFORE_THE_CRAWLER:
                setting(self.settings, name)
        except SettingsError as exc:
            configure_logging(_refusal_logging(self.settings))
            self._refuse(exc)
            raise SystemExit(self.exitcode) from None

    def run(self, args: list[str], opts: argparse.Namespace) -> None:
        if len(args) != 1:
            raise UsageError("give exactly one spider name")
        assert self.crawler_process is not None
        try:
            crawler = self._create_crawler(args[0])
        except KeyError:  # exit status 2, as any usage error (a worker's loop does not retry it)
            known = sorted(self.crawler_process.spider_loader.list())
            raise UsageError(f"no spider {args[0]!r} in this project; spiders: {known}") from None
        keep_project_addon(crawler.settings)
        try:
            check_settings(crawler.settings)
            check_frontier_server(crawler)
            check_storage_server(crawler)
        except (SettingsError, *UNAVAILABLE) as exc:
            self._refuse(exc)
            return
        self._watch(self.crawler_process.crawl(crawler, **opts.spargs))
        self.crawler_process.start()
        if self.exitcode:
            return
        if self.crawler_process.bootstrap_failed:  # said already; the crawler may have no stats
            self.exitcode = 1
            return
        reason = crawler.stats.get_value("finish_reason") if crawler.stats is not None else None
        if reason in FAILED_REASONS:
            self.exitcode = FAILED_REASONS[reason]

    def _refuse(self, exc: Exception) -> None:
        """One ERROR line for a SettingsError (exit status 2) or a server that does not answer
        (1), without a traceback."""
        logger.error("Crawl not started: %s", exc)
        self.exitcode = (
            EXIT_SERVER_UNAVAILABLE if isinstance(exc, UNAVAILABLE) else EXIT_BAD_SETTING
        )

    def _watch(self, crawl: Any) -> None:
        """Report a SettingsError, or a server that does not answer, ending the crawl as it
        starts on one line, without its traceback."""
        if isinstance(crawl, asyncio.Future):
            crawl.add_done_callback(self._crawl_done)
        else:
            crawl.addErrback(self._crawl_failed)

    def _crawl_done(self, crawl: asyncio.Future[None]) -> None:
        error = None if crawl.cancelled() else crawl.exception()
        if isinstance(error, (SettingsError, *UNAVAILABLE)):
            self._refuse(error)
        elif error is not None:
            logger.error("Crawl failed", exc_info=error)

    def _crawl_failed(self, failure: Failure) -> Failure | None:
        if isinstance(failure.value, (SettingsError, *UNAVAILABLE)):
            self._refuse(failure.value)
            return None
        return failure
