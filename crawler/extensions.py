"""Extensions: the settings check (a bad setting stops the crawl before the engine is built,
under any runner), the fleet monitor (shared stats in ``{spider}:stats``, worker heartbeats,
Prometheus metrics and the progress line), the pause of a crawl most of whose answers fail
(FAILURE_PAUSE_RATIO), the stop of a worker that meets only rate limits (RATE_LIMIT_EXIT),
scrapy-redis spiders fed by the frontier and the start-up heap kept out of full garbage
collections, from :mod:`crawler.preflight`, :mod:`crawler.observability`, :mod:`crawler.bans`,
:mod:`crawler.spiders.redis` and :mod:`crawler.heap`."""

from crawler.bans.failures import FailurePause
from crawler.bans.ratelimit import RateLimitExit
from crawler.heap import FreezeStartupHeap
from crawler.observability import FleetMonitor
from crawler.preflight import SettingsCheck
from crawler.spiders.redis import ScrapyRedisSpiders

__all__ = [
    "FailurePause",
    "FleetMonitor",
    "FreezeStartupHeap",
    "RateLimitExit",
    "ScrapyRedisSpiders",
    "SettingsCheck",
]
