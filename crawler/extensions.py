"""Extensions: the settings check (a bad setting stops the crawl before the engine is built,
under any runner), the fleet monitor (shared stats in ``{spider}:stats``, worker heartbeats,
Prometheus metrics and the progress line) and scrapy-redis spiders fed by the frontier, from
:mod:`crawler.preflight`, :mod:`crawler.observability` and :mod:`crawler.spiders.redis`."""

from crawler.observability import FleetMonitor
from crawler.preflight import SettingsCheck
from crawler.spiders.redis import ScrapyRedisSpiders

__all__ = ["FleetMonitor", "ScrapyRedisSpiders", "SettingsCheck"]
