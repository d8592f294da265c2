"""Extensions: the settings check (a bad setting stops the crawl before the engine is built,
under any runner), the fleet monitor (shared stats in ``{spider}:stats``, worker heartbeats,
Prometheus metrics and the progress line), the pause of a crawl most of whose answers fail
(FAILURE_PAUSE_RATIO), the stop of a worker that meets only rate limits (RATE_LIMIT_EXIT),
scrapy-redis spiders fed by the frontier, requests due later kept in the worker under another
scheduler and the start-up heap kept out of full garbage collections, from
:mod:`crawler.preflight`, :mod:`crawler.observability`, :mod:`crawler.bans`,
:mod:`crawler.spiders.redis`, :mod:`crawler.due_later` and :mod:`crawler.heap`; and
Scrapy's RemoteControl, imported only when it is turned on (:class:`RemoteControl`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from scrapy.utils.misc import build_from_crawler

from crawler.bans.failures import FailurePause
from crawler.bans.ratelimit import RateLimitExit
from crawler.config import switched_off
from crawler.due_later import DueLater
from crawler.heap import FreezeStartupHeap
from crawler.observability import FleetMonitor
from crawler.preflight import SettingsCheck
from crawler.spiders.redis import ScrapyRedisSpiders

if TYPE_CHECKING:
    from scrapy.crawler import Crawler

__all__ = [
    "DueLater",
    "FailurePause",
    "FleetMonitor",
    "FreezeStartupHeap",
    "RateLimitExit",
    "RemoteControl",
    "ScrapyRedisSpiders",
    "SettingsCheck",
]


class RemoteControl:
    """Scrapy's RemoteControl (``scrapy.extensions.remote_control``, in its place among the
    extensions) when REMOTE_CONTROL_ENABLED is on; otherwise nothing, and Scrapy's module is not
    imported: it imports aiohttp's web server as it loads, some 0.25 s of CPU at every worker's
    start for a console a worker keeps off."""

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Any:
        if not crawler.settings.getbool("REMOTE_CONTROL_ENABLED"):
            raise switched_off(cls, "REMOTE_CONTROL_ENABLED is off")
        from scrapy.extensions.remote_control import RemoteControl as ScrapyRemoteControl

        return build_from_crawler(ScrapyRemoteControl, crawler)
