"""Item pipelines."""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

from itemadapter import ItemAdapter
from pymongo import MongoClient
from pymongo.errors import PyMongoError
from scrapy.exceptions import DropItem
from scrapy.utils.defer import maybe_deferred_to_future
from twisted.internet.threads import deferToThread

from crawler.config import mask_uri, setting_int
from crawler.items import STORED_ITEM_CLASSES, StoredItem

if TYPE_CHECKING:
    from pymongo.collection import Collection
    from pymongo.database import Database
    from pymongo.results import UpdateResult
    from scrapy.crawler import Crawler
    from scrapy.statscollectors import StatsCollector

logger = logging.getLogger(__name__)


class MongoUnavailable(RuntimeError):
    """MongoDB could not be reached when the spider opened."""


class MongoUpsertPipeline:
    """Upsert each item into its collection, keyed on its unique key; a re-crawl updates.

    Every write runs in a thread, off the reactor. Documents get ``first_seen`` once and
    ``last_seen`` on every write.

    Settings:
        MONGO_URI (str), MONGO_DATABASE (str), MONGO_CONNECT_TIMEOUT_MS (int, default 5000).
    """

    def __init__(self, uri: str, database: str, timeout_ms: int, stats: StatsCollector) -> None:
        self.uri = uri
        self.database_name = database
        self.timeout_ms = timeout_ms
        self.stats = stats
        self.client: MongoClient[dict[str, Any]] | None = None
        self.database: Database[dict[str, Any]] | None = None

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> MongoUpsertPipeline:
        settings = crawler.settings
        assert crawler.stats is not None
        return cls(
            uri=settings.get("MONGO_URI"),
            database=settings.get("MONGO_DATABASE"),
            timeout_ms=setting_int(settings, "MONGO_CONNECT_TIMEOUT_MS", 1),
            stats=crawler.stats,
        )

    async def open_spider(self) -> None:
        await maybe_deferred_to_future(deferToThread(self._connect))

    def _connect(self) -> None:
        client: MongoClient[dict[str, Any]] = MongoClient(
            self.uri, serverSelectionTimeoutMS=self.timeout_ms, tz_aware=True
        )
        try:
            client.admin.command("ping")
            database = client[self.database_name]
            for item_class in STORED_ITEM_CLASSES:
                database[item_class.collection].create_index(item_class.unique_key, unique=True)
        except PyMongoError as exc:
            client.close()
            reason = str(exc).split(", Timeout:")[0]
            message = f"MongoDB at {mask_uri(self.uri)} is unavailable: {reason}"
            raise MongoUnavailable(message) from exc
        self.client, self.database = client, database
        logger.info("Storing items in %s, database %s", mask_uri(self.uri), self.database_name)

    async def close_spider(self) -> None:
        if self.client is not None:
            await maybe_deferred_to_future(deferToThread(self.client.close))

    async def process_item(self, item: Any) -> Any:
        if not isinstance(item, STORED_ITEM_CLASSES):
            return item
        collection, selector, update = self._upsert_for(item)
        result: UpdateResult = await maybe_deferred_to_future(
            deferToThread(collection.update_one, selector, update, upsert=True)
        )
        self._count(item.collection, result)
        return item

    def _upsert_for(
        self, item: StoredItem
    ) -> tuple[Collection[dict[str, Any]], dict[str, Any], dict[str, Any]]:
        assert self.database is not None
        document = ItemAdapter(item).asdict()
        key_value = document.get(item.unique_key)
        if key_value in (None, ""):
            raise DropItem(f"{type(item).__name__} has no {item.unique_key}")
        now = time.time()
        update = {"$set": {**document, "last_seen": now}, "$setOnInsert": {"first_seen": now}}
        return self.database[item.collection], {item.unique_key: key_value}, update

    def _count(self, collection: str, result: UpdateResult) -> None:
        self.stats.inc_value(f"mongo/items/{collection}")
        if result.upserted_id is not None:
            self.stats.inc_value("mongo/upserted")
        else:
            self.stats.inc_value("mongo/modified", result.modified_count)
