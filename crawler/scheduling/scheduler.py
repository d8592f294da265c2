"""The scrapy-redis scheduler, persistent by default and fitted to Scrapy 2.13+ APIs."""

from __future__ import annotations

from typing import TYPE_CHECKING

from redis.exceptions import RedisError
from scrapy_redis.scheduler import Scheduler

from crawler.config import mask_uri
from crawler.connection import RedisUnavailable

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.crawler import Crawler


class RedisScheduler(Scheduler):  # type: ignore[misc]
    """scrapy-redis's Scheduler that counts stats without the deprecated ``spider`` argument.

    Settings (scrapy-redis names): SCHEDULER_PERSIST, SCHEDULER_QUEUE_KEY, SCHEDULER_QUEUE_CLASS,
    SCHEDULER_DUPEFILTER_KEY, SCHEDULER_SERIALIZER, DUPEFILTER_CLASS; see crawler/settings.py.
    """

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> RedisScheduler:
        try:
            scheduler: RedisScheduler = super().from_crawler(crawler)
        except RedisError as exc:
            url = mask_uri(crawler.settings.get("REDIS_URL") or "")
            raise RedisUnavailable(f"Redis at {url} is unreachable: {exc}") from exc
        return scheduler

    def enqueue_request(self, request: Request) -> bool:
        if not request.dont_filter and self.df.request_seen(request):
            self.df.log(request, self.spider)
            return False
        self.queue.push(request)
        if self.stats:
            self.stats.inc_value("scheduler/enqueued/redis")
        return True

    def next_request(self) -> Request | None:
        request: Request | None = self.queue.pop(self.idle_before_close)
        if request is not None and self.stats:
            self.stats.inc_value("scheduler/dequeued/redis")
        return request
