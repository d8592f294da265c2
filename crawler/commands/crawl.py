"""``scrapy crawl``, with an exit status that tells a fleet manager why a worker stopped.

Exit status 3: the worker stopped because it was banned (``BAN_POLICY = "stop"``), so whoever
runs it can replace the machine's IP address before starting it again.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from scrapy.commands.crawl import Command as ScrapyCrawlCommand
from scrapy.exceptions import UsageError

if TYPE_CHECKING:
    import argparse

EXIT_BANNED = 3


class Command(ScrapyCrawlCommand):
    def run(self, args: list[str], opts: argparse.Namespace) -> None:
        if len(args) != 1:
            raise UsageError("give exactly one spider name")
        assert self.crawler_process is not None
        crawler = self._create_crawler(args[0])
        self.crawler_process.crawl(crawler, **opts.spargs)
        self.crawler_process.start()
        if self.crawler_process.bootstrap_failed:
            self.exitcode = 1
        elif crawler.stats is not None and crawler.stats.get_value("finish_reason") == "banned":
            self.exitcode = EXIT_BANNED
