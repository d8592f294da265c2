"""The sizing gauges of every spider, read from Redis at each scrape, for ``scrapy status
--serve``'s ``/metrics``: what KEDA's Prometheus trigger reads to scale a spider's workers
from zero, when no worker is there to serve its own; and the launches of ``scrapy fleet
autoscale`` whose worker never reported (``crawler.observability.starts``), which no worker
can tell."""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry
from prometheus_client.registry import Collector
from redis.exceptions import RedisError

from crawler.fleet.measure import fleet_sizing
from crawler.observability.metrics import sizing_metrics
from crawler.observability.starts import read_starts, starts_metrics

if TYPE_CHECKING:
    from prometheus_client.core import Metric
    from scrapy.settings import BaseSettings

    from crawler.connection import RedisClient


class SizingCollector(Collector):
    """``crawler_workers_wanted`` and the other sizing gauges of each spider of ``settings``
    (spider -> its settings, as its workers have them), and its launches' gauges; none when
    Redis does not answer."""

    def __init__(self, server: RedisClient, settings: Mapping[str, BaseSettings]) -> None:
        self.server = server
        self.settings = settings

    def collect(self) -> Iterator[Metric]:
        try:
            sizings = {
                spider: fleet_sizing(self.server, settings, spider)
                for spider, settings in self.settings.items()
            }
            starts = {spider: read_starts(self.server, spider) for spider in self.settings}
        except RedisError:
            return
        yield from sizing_metrics(sizings)
        yield from starts_metrics(starts, time.time())


def sizing_registry(server: RedisClient, settings: Mapping[str, BaseSettings]) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SizingCollector(server, settings))
    return registry
