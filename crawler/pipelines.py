"""The item pipelines Scrapy loads (``ITEM_PIPELINES`` in crawler/settings.py names them here),
as ``scrapy startproject`` lays them out: :class:`ValidationPipeline` drops items that miss a
required field, with the reason, before anything is stored; :class:`MongoPipeline` hands every
item (any kind: dataclasses, dicts, ``scrapy.Item``s, read through ``ItemAdapter``) to the
batched MongoDB writer of :mod:`crawler.storage` and returns once it is durable, so the frontier
acknowledges a request only after its items are stored or spilled.
"""

from __future__ import annotations

import dataclasses
import logging
from functools import cache
from typing import TYPE_CHECKING, Any

from scrapy.exceptions import DropItem

from crawler.config import setting
from crawler.config.values import Destination
from crawler.items import STORED_ITEM_CLASSES
from crawler.storage.changes import with_change_hash
from crawler.storage.destinations import (
    QUIET_UNDECLARED,
    SCRAPER_LOGGER,
    Destinations,
    UndeclaredItem,
    document_of,
)
from crawler.storage.mongo import ItemNotStored, MongoSettings, MongoUnavailable, MongoWriter

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from scrapy.statscollectors import StatsCollector

__all__ = ["ItemNotStored", "MongoPipeline", "MongoUnavailable", "ValidationPipeline"]

logger = logging.getLogger(__name__)


@cache
def required_fields(item_class: type) -> tuple[str, ...]:
    """Fields a stored item must have: the dataclass fields without a default."""
    return tuple(
        field.name
        for field in dataclasses.fields(item_class)
        if field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING
    )


class ValidationPipeline:
    """Drops stored items whose required fields are None (or whose unique key is empty).

    Counted as ``validation/dropped/missing_<field>``; the drop reason names the item and fields.
    """

    def __init__(self, stats: StatsCollector) -> None:
        self.stats = stats

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> ValidationPipeline:
        assert crawler.stats is not None
        return cls(crawler.stats)

    def process_item(self, item: Any) -> Any:
        if not isinstance(item, STORED_ITEM_CLASSES):
            return item
        missing = [name for name in required_fields(type(item)) if getattr(item, name) is None]
        if getattr(item, item.unique_key) == "" and item.unique_key not in missing:
            missing.append(item.unique_key)
        if missing:
            for name in missing:
                self.stats.inc_value(f"validation/dropped/missing_{name}")
            raise DropItem(f"{type(item).__name__} is missing {', '.join(missing)}")
        return item


class MongoPipeline:
    """Store every item in its MongoDB collection (MONGO_COLLECTIONS, or the item's own
    ``collection``/``unique_key``), with change tracking, through :class:`MongoWriter` (batches,
    writer thread, spill file; MONGO_* settings). An item of a kind no collection is declared
    for fails (``item_error``: its request goes to the dead letters), logged once per kind."""

    def __init__(
        self,
        config: MongoSettings,
        stats: StatsCollector,
        spider_name: str,
        destinations: Destinations | None = None,
    ) -> None:
        self.config = config
        self.stats = stats
        self.spider_name = spider_name
        self.destinations = destinations or Destinations({}, spider_name)
        self.writer = MongoWriter(config, stats, spider_name, self.destinations)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> MongoPipeline:
        assert crawler.stats is not None
        assert crawler.spidercls is not None
        name = crawler.spidercls.name
        declared = setting(crawler.settings, "MONGO_COLLECTIONS")
        return cls(
            MongoSettings.from_crawler(crawler), crawler.stats, name, Destinations(declared, name)
        )

    async def open_spider(self) -> None:
        logging.getLogger(SCRAPER_LOGGER).addFilter(QUIET_UNDECLARED)
        await self.writer.open()

    async def process_item(self, item: Any) -> Any:
        destination = self._destination(item)
        if destination is None:
            return item
        volatile = getattr(type(item), "volatile_fields", ())
        document = with_change_hash(document_of(item, destination), volatile)
        await self.writer.store(destination, document)
        return item

    def _destination(self, item: Any) -> Destination | None:
        try:
            return self.destinations.of(item)
        except UndeclaredItem as exc:
            name = type(item).__name__
            if not self.stats.get_value(f"mongo/undeclared/{name}"):
                logger.error("%s; their requests go to the dead letters", exc)
            self.stats.inc_value(f"mongo/undeclared/{name}")
            raise

    async def close_spider(self) -> None:
        logging.getLogger(SCRAPER_LOGGER).removeFilter(QUIET_UNDECLARED)
        await self.writer.close()
