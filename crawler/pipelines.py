"""The item pipelines Scrapy loads (``ITEM_PIPELINES`` in crawler/settings.py; docs/storage.md):
:class:`ValidationPipeline` drops items that miss a required field, and :class:`MongoPipeline`
returns once an item is durable (stored or spilled), so the frontier acknowledges a request only
after its items are. A crawl whose items all failed closes as ``items_not_stored``.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from functools import cache
from typing import TYPE_CHECKING, Any

from scrapy import signals
from scrapy.exceptions import CloseSpider, DropItem

from crawler.config import setting
from crawler.config.values import Destination
from crawler.frontier.jobs import JobBook
from crawler.items import STORED_ITEM_CLASSES
from crawler.storage.destinations import Destinations, document_of, key_of
from crawler.storage.health import StorageHealth, watch
from crawler.storage.mongo import ItemNotStored, MongoSettings, MongoUnavailable, MongoWriter
from crawler.storage.rules import rules_of

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from scrapy.statscollectors import StatsCollector

__all__ = [
    "EXIT_ITEMS_NOT_STORED",
    "ITEMS_NOT_STORED",
    "ItemNotStored",
    "MongoPipeline",
    "MongoUnavailable",
    "ValidationPipeline",
]

logger = logging.getLogger(__name__)

# The field of a stored document naming its item's crawl job (crawler/frontier/jobs.py).
JOB_FIELD = "job"

# The finish reason of a crawl whose items all failed to store, and `scrapy crawl`'s exit status.
ITEMS_NOT_STORED = "items_not_stored"
EXIT_ITEMS_NOT_STORED = 4

# The logger of Scrapy's "Error processing <item>" record, with the item's traceback.
SCRAPER_LOGGER = "scrapy.core.scraper"


@cache
def required_fields(item_class: type) -> tuple[str, ...]:
    """Fields a stored item must have: the dataclass fields without a default."""
    return tuple(
        field.name
        for field in dataclasses.fields(item_class)
        if field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING
    )


class ValidationPipeline:
    """Drops, naming it, a stored item missing a required field or its unique key (counted)."""

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


class NotStoredTracebacks(logging.Filter):
    """Drops Scrapy's "Error processing <item>" record of an item MongoDB did not store: its
    traceback says nothing :meth:`MongoPipeline.process_item`'s line did not (Scrapy still sends
    ``item_error``, which dead-letters the item's request)."""

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        return not isinstance(error, ItemNotStored)

    @classmethod
    def install(cls) -> None:
        scraper = logging.getLogger(SCRAPER_LOGGER)
        if not any(isinstance(known, cls) for known in scraper.filters):
            scraper.addFilter(cls())


class MongoPipeline:
    """Store every item in its MongoDB collection (``storage/destinations.py``), with change
    tracking, through :class:`MongoWriter`; an item not stored fails (``item_error``)."""

    def __init__(
        self,
        config: MongoSettings,
        stats: StatsCollector,
        spider_name: str,
        destinations: Destinations | None = None,
        jobs: JobBook | None = None,
        stopping: Callable[[], bool] = lambda: False,
    ) -> None:
        self.jobs = jobs
        self.destinations = destinations or Destinations({}, spider_name)
        self.writer = MongoWriter(config, stats, spider_name, self.destinations, stopping)
        self.stored = 0
        self.failed = 0
        self.said_not_stored = False

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> MongoPipeline:
        assert crawler.stats is not None
        assert crawler.spidercls is not None
        name = crawler.spidercls.name
        declared = setting(crawler.settings, "MONGO_COLLECTIONS")
        pipeline = cls(
            MongoSettings.from_crawler(crawler),
            crawler.stats,
            name,
            Destinations(declared, name),
            JobBook.of(crawler),
            stopping=lambda: not crawler.crawling,  # told to go (SIGTERM): no more retries
        )
        crawler.signals.connect(pipeline.spider_idle, signal=signals.spider_idle)
        watch(crawler, lambda: StorageHealth.of(pipeline.writer.bulk))
        NotStoredTracebacks.install()
        return pipeline

    async def open_spider(self) -> None:
        await self.writer.open()

    async def process_item(self, item: Any) -> Any:
        destination = self.destinations.of(item)
        if destination is None:
            return item
        try:
            await self._store(item, destination)
        except ItemNotStored as error:
            self.failed += 1
            logger.error("Item not stored in MongoDB: %s", error)
            raise
        except Exception:
            self.failed += 1
            raise
        self.stored += 1
        return item

    async def _store(self, item: Any, destination: Destination) -> None:
        rules = rules_of(item.__class__)
        values = rules.values_of(item)
        key = key_of(item, destination)
        await self.writer.store(destination, key, self._with_job(item), rules, values)

    def _with_job(self, item: Any) -> Any:
        """The item, or its document with its crawl job (``job``) when it has one and no
        ``job`` field of its own."""
        job = self.jobs.job_of_item(item) if self.jobs is not None else None
        if job is None:
            return item
        document = document_of(item)
        document.setdefault(JOB_FIELD, job)
        return document

    def spider_idle(self) -> None:
        """A crawl finishing with items failed and none stored closes as ``items_not_stored``."""
        if self.stored or not self.failed:
            return
        if not self.said_not_stored:  # idle handlers run again while the fleet has work
            logger.error(
                "None of the %d items the spider yielded was stored in MongoDB (the errors "
                "above say why): the crawl ends as %s",
                self.failed,
                ITEMS_NOT_STORED,
            )
            self.said_not_stored = True
        raise CloseSpider(ITEMS_NOT_STORED)

    async def close_spider(self) -> None:
        await self.writer.close()
