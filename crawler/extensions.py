"""Extensions."""

from __future__ import annotations

import logging
from numbers import Number
from typing import TYPE_CHECKING, Any

from scrapy import signals

from crawler.connection import redis_from_settings

if TYPE_CHECKING:
    from scrapy import Spider
    from scrapy.crawler import Crawler

    from crawler.connection import RedisClient

logger = logging.getLogger(__name__)


class RedisStatsPublisher:
    """Add a worker's numeric stats to a per-spider Redis hash when it closes.

    Counters add up across the workers of a fleet; the last finish reason is kept as text.

    Settings:
        STATS_REDIS_KEY (str, default "{%(spider)s}:stats"): the hash.
    """

    def __init__(self, crawler: Crawler, server: RedisClient, key_template: str) -> None:
        self.crawler = crawler
        self.server = server
        self.key_template = key_template

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> RedisStatsPublisher:
        extension = cls(
            crawler,
            redis_from_settings(crawler.settings),
            crawler.settings.get("STATS_REDIS_KEY"),
        )
        crawler.signals.connect(extension.spider_closed, signal=signals.spider_closed)
        return extension

    def spider_closed(self, spider: Spider, reason: str) -> None:
        assert self.crawler.stats is not None
        stats = self.crawler.stats.get_stats()
        key = self.key_template % {"spider": spider.name}
        pipe = self.server.pipeline(transaction=False)
        for name, value in stats.items():
            _add_stat(pipe, key, name, value)
        pipe.hset(key, "finish_reason", reason)
        pipe.execute()
        logger.info("Published %d stats to Redis hash %s", len(stats), key)


def _add_stat(pipe: Any, key: str, name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, Number):
        return
    if isinstance(value, int):
        pipe.hincrby(key, name, value)
    else:
        pipe.hincrbyfloat(key, name, float(value))  # type: ignore[arg-type]
