"""The scrapy-redis scheduler, persistent by default and fitted to Scrapy 2.13+ APIs."""

from __future__ import annotations

from typing import TYPE_CHECKING

from scrapy_redis.scheduler import Scheduler

if TYPE_CHECKING:
    from scrapy import Request


class RedisScheduler(Scheduler):  # type: ignore[misc]
    """scrapy-redis's Scheduler that counts stats without the deprecated ``spider`` argument.

    Settings (scrapy-redis names): SCHEDULER_PERSIST, SCHEDULER_QUEUE_KEY, SCHEDULER_QUEUE_CLASS,
    SCHEDULER_DUPEFILTER_KEY, SCHEDULER_SERIALIZER, DUPEFILTER_CLASS; see crawler/settings.py.
    """

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
