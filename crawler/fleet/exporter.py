"""The sizing gauges of every spider, read from Redis at each scrape, for ``scrapy status
--serve``'s ``/metrics``: what KEDA's Prometheus trigger reads to scale a spider's workers
from zero, when no worker is there to serve its own; and the launches of ``scrapy fleet
autoscale`` whose worker never reported (``crawler.observability.starts``), which no worker
can tell."""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector
from redis.exceptions import RedisError

from crawler.fleet.measure import fleet_sizing
from crawler.keys import FleetKeys
from crawler.observability.key_types import WrongKeyType, key_types_checked
from crawler.observability.metrics import sizing_metrics
from crawler.observability.report import live_workers
from crawler.observability.spills import spills_metric, spills_status
from crawler.observability.starts import Starts, read_starts, starts_metrics

if TYPE_CHECKING:
    from prometheus_client.core import Metric
    from scrapy.settings import BaseSettings

    from crawler.connection import RedisClient
    from crawler.observability.sizing import Sizing

# Each spider's sizing; each spider's spill files holding items (spills.py).
Spiders = dict[str, "Sizing"]
SpillsOf = dict[str, list[dict[str, Any]]]


class SizingCollector(Collector):
    """``crawler_workers_wanted`` and the other sizing gauges of each spider of ``settings``
    (spider -> its settings, as its workers have them), and its launches' gauges; none when
    Redis does not answer (``crawler_fleet_redis_up`` 0). A spider a key of which holds the
    wrong type is left out and named in ``crawler_redis_wrong_type`` (the others' gauges are
    there)."""

    def __init__(self, server: RedisClient, settings: Mapping[str, BaseSettings]) -> None:
        self.server = server
        self.settings = settings

    def collect(self) -> Iterator[Metric]:
        try:
            sizings, starts, spills, unreadable = self._read_spiders()
        except RedisError:
            yield redis_up_metric(False)
            return
        yield redis_up_metric(True)
        yield from sizing_metrics(sizings)
        yield from starts_metrics(starts, time.time())
        yield spills_metric(spills)
        yield wrong_type_metric(unreadable)

    def _read_spiders(self) -> tuple[Spiders, dict[str, Starts], SpillsOf, list[WrongKeyType]]:
        """Each spider's sizing, launches and spill files holding items, but those a key of
        which holds the wrong type."""
        sizings: dict[str, Sizing] = {}
        starts: dict[str, Starts] = {}
        spills: SpillsOf = {}
        unreadable: list[WrongKeyType] = []
        for spider, settings in self.settings.items():
            try:
                with key_types_checked(self.server, settings, spider):
                    sizing = fleet_sizing(self.server, settings, spider)
                    starts[spider] = read_starts(self.server, spider)
                    workers = live_workers(self.server, FleetKeys.from_settings(settings, spider))
                    spills[spider] = spills_status(self.server, spider, workers)
                sizings[spider] = sizing
            except WrongKeyType as exc:
                unreadable.append(exc)
        return sizings, starts, spills, unreadable


def redis_up_metric(up: bool) -> Metric:
    """``crawler_fleet_redis_up``: 1 when this scrape read Redis, 0 when Redis did not answer
    (the spiders' gauges are left out then), so an answer is never empty."""
    gauge = GaugeMetricFamily(
        "crawler_fleet_redis_up", "1 when this scrape read Redis, 0 when Redis did not answer."
    )
    gauge.add_metric([], int(up))
    return gauge


def wrong_type_metric(unreadable: list[WrongKeyType]) -> Metric:
    """``crawler_redis_wrong_type{spider,key,type}``: 1 for each key of a spider that holds the
    wrong type (its other gauges are left out); no sample while every spider reads."""
    gauge = GaugeMetricFamily(
        "crawler_redis_wrong_type",
        "1 for a key of the spider that holds the wrong Redis type: its gauges are left out.",
        labels=("spider", "key", "type"),
    )
    for exc in unreadable:
        for key, kind in exc.found:
            gauge.add_metric([exc.spider, key, kind], 1)
    return gauge


def sizing_registry(server: RedisClient, settings: Mapping[str, BaseSettings]) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SizingCollector(server, settings))
    return registry
