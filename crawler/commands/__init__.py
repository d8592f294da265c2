"""Custom scrapy commands: `scrapy frontier` (queue, dead letters, requeue, purge),
`scrapy status` (the fleet at a glance) and `scrapy fleet` (EC2 workers); `scrapy crawl` exits
with a status that says why it stopped."""

from __future__ import annotations

import argparse
import functools
import os
import sys
from typing import TYPE_CHECKING, Any, ClassVar

from redis.exceptions import RedisError
from scrapy.commands import ScrapyHelpFormatter
from scrapy.exceptions import UsageError
from scrapy.spiderloader import get_spider_loader

from crawler.config.rules import SettingsError
from crawler.connection import redis_from_settings
from crawler.frontier.queue import spider_frontier
from crawler.observability.key_types import WrongKeyType, is_wrong_type, wrong_key_types
from crawler.uris import mask_uri

if TYPE_CHECKING:
    from collections.abc import Callable

    from scrapy.settings import Settings

    from crawler.connection import RedisClient
    from crawler.frontier.queue import Frontier


class LayoutKeepingFormatter(argparse.RawDescriptionHelpFormatter, ScrapyHelpFormatter):
    """Scrapy's help layout, with a command's description (its examples) printed as written."""


def keep_description_layout(parser: argparse.ArgumentParser) -> None:
    """For a command's ``add_options``: its description is printed as written."""
    parser.formatter_class = LayoutKeepingFormatter


class ProjectCommand:
    """What the project's commands share (a mixin, so Scrapy does not list it as a command): quiet
    logs, the spider-name check, a Redis client and a spider's frontier."""

    requires_project = True
    requires_crawler_process = False
    default_settings: ClassVar[dict[str, Any]] = {"LOG_ENABLED": False}
    settings: Settings | None
    exitcode: int

    def long_desc(self) -> str:
        return sys.modules[type(self).__module__].__doc__ or ""

    def spider_names(self) -> list[str]:
        assert self.settings is not None
        return sorted(get_spider_loader(self.settings).list())

    def known_spider(self, name: str) -> str:
        """``name``, or UsageError when the project has no such spider. The project's loader
        finds a spider named after its module without importing every other spider module."""
        assert self.settings is not None
        try:
            get_spider_loader(self.settings).load(name)
        except KeyError:
            known = self.spider_names()
            raise UsageError(f"no spider {name!r} in this project; spiders: {known}") from None
        return name

    def redis(self) -> RedisClient:
        """The Redis client of the settings; a setting it reads that is refused (REDIS_CLUSTER=on)
        is a UsageError: one line, exit status 2."""
        assert self.settings is not None
        try:
            return redis_from_settings(self.settings)
        except SettingsError as exc:
            raise UsageError(str(exc), print_help=False) from None

    def redis_url(self) -> str:
        """REDIS_URL as shown: its secrets masked."""
        assert self.settings is not None
        return mask_uri(self.settings.get("REDIS_URL") or "")

    def redis_unreachable(self, exc: Exception) -> None:
        print(f"Redis at {self.redis_url()} is unreachable: {exc}", file=sys.stderr)
        self.exitcode = 1

    def redis_failed(self, exc: RedisError, spider: str) -> None:
        """What a command says when Redis fails it: a key of ``spider`` of the wrong type, or
        Redis unreachable."""
        if not is_wrong_type(exc):
            self.redis_unreachable(exc)
            return
        assert self.settings is not None
        self.wrong_key_type(wrong_key_types(self.redis(), self.settings, spider, exc))

    def wrong_key_type(self, exc: WrongKeyType) -> None:
        """Keys of a spider that hold the wrong type, in one line: exit status 2, as ``scrapy
        crawl`` refuses to start on them."""
        print(str(exc), file=sys.stderr)
        self.exitcode = 2

    def frontier(self, server: RedisClient, spider: str) -> Frontier:
        assert self.settings is not None
        return spider_frontier(server, self.settings, spider)


def quiet_on_broken_pipe(run: Callable[..., None]) -> Callable[..., None]:
    """For a command's ``run``: output read by a reader that stops early (``| head``) ends
    there, quietly, with exit status 1, as a command-line tool's does, not with a traceback;
    stdout then points at /dev/null, so that its flush at exit fails no more (Python's recipe)."""

    @functools.wraps(run)
    def running(*args: Any, **kwargs: Any) -> None:
        try:
            run(*args, **kwargs)
            sys.stdout.flush()
        except BrokenPipeError:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            raise SystemExit(1) from None

    return running
