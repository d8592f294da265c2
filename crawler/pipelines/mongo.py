"""Batched MongoDB upserts, written off the reactor, that lose nothing when MongoDB goes away.

Items are buffered per collection and written as one unordered ``bulk_write`` of upserts keyed
on each item's unique key: ``$set`` the fields and ``last_seen``, ``$setOnInsert`` ``first_seen``.
``process_item`` returns only once its item is written (or spilled to the local spill file), so
the frontier acknowledges a request only after its items are durable.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pymongo import MongoClient, UpdateOne
from pymongo.errors import BulkWriteError, ConnectionFailure, PyMongoError

from crawler.config import mask_uri, setting_int
from crawler.items import STORED_ITEM_CLASSES, StoredItem
from crawler.pipelines.spill import Record, SpillFile

if TYPE_CHECKING:
    from pymongo.database import Database
    from pymongo.results import BulkWriteResult
    from scrapy.crawler import Crawler
    from scrapy.statscollectors import StatsCollector

logger = logging.getLogger(__name__)

DUPLICATE_KEY = 11000
# Waiters woken per event-loop turn when a batch is written, so the loop keeps serving I/O and
# timers between groups instead of running every item's continuation in one turn.
WAKE_CHUNK = 64
Upsert = tuple[dict[str, Any], dict[str, Any]]  # (filter, fields to $set)


class MongoUnavailable(RuntimeError):
    """MongoDB could not be reached when the spider opened."""


@dataclass(frozen=True)
class MongoSettings:
    """The pipeline's settings, read and checked once (documented in crawler/settings.py)."""

    uri: str
    database: str
    timeout_ms: int
    batch_size: int
    flush_interval: float
    max_pending: int
    retry_times: int
    spill_dir: Path

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> MongoSettings:
        settings = crawler.settings
        return cls(
            uri=settings.get("MONGO_URI"),
            database=settings.get("MONGO_DATABASE"),
            timeout_ms=setting_int(settings, "MONGO_CONNECT_TIMEOUT_MS", 1),
            batch_size=setting_int(settings, "MONGO_BATCH_SIZE", 1, 100_000),
            flush_interval=settings.getfloat("MONGO_FLUSH_INTERVAL"),
            max_pending=setting_int(settings, "MONGO_MAX_PENDING", 1),
            retry_times=setting_int(settings, "MONGO_RETRY_TIMES", 0),
            spill_dir=Path(settings.get("MONGO_SPILL_DIR")),
        )


@dataclass
class Batch:
    """Upserts waiting for one collection; an item seen twice keeps its latest fields."""

    updates: dict[Any, Upsert] = field(default_factory=dict)
    waiters: list[asyncio.Future[None]] = field(default_factory=list)
    started: float = field(default_factory=time.monotonic)


class MongoPipeline:
    """Buffer items per collection and upsert them in batches from a writer thread.

    A batch is written when it holds MONGO_BATCH_SIZE items, when its oldest item is older than
    MONGO_FLUSH_INTERVAL, and when the spider closes. Transient errors are retried with backoff
    MONGO_RETRY_TIMES times; after that the batch goes to the spill file in MONGO_SPILL_DIR and
    is replayed when MongoDB answers again or on the next start. At most MONGO_MAX_PENDING items
    wait at once: beyond that the crawl waits, so memory stays bounded.
    """

    def __init__(self, config: MongoSettings, stats: StatsCollector, spider_name: str) -> None:
        self.config = config
        self.stats = stats
        self.spider_name = spider_name
        self.client: MongoClient[dict[str, Any]] | None = None
        self.database: Database[dict[str, Any]] | None = None
        self.spill: SpillFile | None = None
        self._batches: dict[str, Batch] = {}
        self._pending = 0
        self._room = asyncio.Event()
        self._writes: set[asyncio.Task[None]] = set()
        self._ticker: asyncio.Task[None] | None = None
        # One writer thread: batches are written in order, one at a time.
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="mongo-writer")

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> MongoPipeline:
        assert crawler.stats is not None
        assert crawler.spidercls is not None
        return cls(MongoSettings.from_crawler(crawler), crawler.stats, crawler.spidercls.name)

    # --- Scrapy's pipeline interface --------------------------------------------------------------

    async def open_spider(self) -> None:
        await self._in_thread(self._connect)
        self.spill = SpillFile(self.config.spill_dir, self.spider_name)
        await self._in_thread(self._replay_orphans)
        await self._in_thread(self._replay_own)
        self._room.set()
        self._ticker = asyncio.create_task(self._flush_old_batches())

    async def process_item(self, item: Any) -> Any:
        if not isinstance(item, STORED_ITEM_CLASSES):
            return item
        while self._pending >= self.config.max_pending:
            self._room.clear()
            self.stats.inc_value("mongo/backpressure_waits")
            await self._room.wait()
        waiter = self._buffer(item)
        await waiter
        return item

    async def close_spider(self) -> None:
        if self._ticker is not None:
            self._ticker.cancel()
        for collection in list(self._batches):
            self._flush(collection)
        if self._writes:
            await asyncio.gather(*self._writes, return_exceptions=True)
        if self.spill is not None:
            await self._in_thread(self._replay_own)
            self.spill.close()
        if self.client is not None:
            await self._in_thread(self.client.close)
        self._executor.shutdown(wait=True)

    # --- buffering (reactor thread) ---------------------------------------------------------------

    def _buffer(self, item: StoredItem) -> asyncio.Future[None]:
        document = _fields(item)
        key = document[item.unique_key]
        batch = self._batches.setdefault(item.collection, Batch())
        batch.updates[key] = ({item.unique_key: key}, document)
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        batch.waiters.append(waiter)
        self._pending += 1
        if len(batch.updates) >= self.config.batch_size:
            self._flush(item.collection)
        return waiter

    def _flush(self, collection: str) -> None:
        batch = self._batches.pop(collection, None)
        if batch is None:
            return
        write = asyncio.create_task(self._write(collection, batch))
        self._writes.add(write)
        write.add_done_callback(self._writes.discard)

    async def _flush_old_batches(self) -> None:
        while True:
            await asyncio.sleep(self.config.flush_interval / 2)
            oldest = time.monotonic() - self.config.flush_interval
            for collection, batch in list(self._batches.items()):
                if batch.started <= oldest:
                    self._flush(collection)
            if self.spill is not None and self.spill.pending() and not self._writes:
                await self._in_thread(self._replay_own)

    async def _write(self, collection: str, batch: Batch) -> None:
        operations = list(batch.updates.values())
        try:
            await self._in_thread(self._write_or_spill, collection, operations)
        except Exception as exc:  # the spill file failed too: the items are not stored
            logger.exception(
                "Could not write nor spill %d items of %s", len(operations), collection
            )
            for waiter in batch.waiters:
                waiter.set_exception(exc)
        else:
            for first in range(0, len(batch.waiters), WAKE_CHUNK):
                for waiter in batch.waiters[first : first + WAKE_CHUNK]:
                    waiter.set_result(None)
                await asyncio.sleep(0)
        finally:
            self._pending -= len(batch.waiters)
            self._room.set()

    async def _in_thread(self, function: Any, *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self._executor, function, *args)

    # --- writing (writer thread) ---------------------------------------------------------------

    def _connect(self) -> None:
        client: MongoClient[dict[str, Any]] = MongoClient(
            self.config.uri, serverSelectionTimeoutMS=self.config.timeout_ms, tz_aware=True
        )
        try:
            client.admin.command("ping")
            database = client[self.config.database]
            for item_class in STORED_ITEM_CLASSES:
                database[item_class.collection].create_index(item_class.unique_key, unique=True)
        except PyMongoError as exc:
            client.close()
            reason = str(exc).split(", Timeout:")[0]
            message = f"MongoDB at {mask_uri(self.config.uri)} is unavailable: {reason}"
            raise MongoUnavailable(message) from exc
        self.client, self.database = client, database
        logger.info("Storing items in %s, database %s", mask_uri(self.config.uri), database.name)

    def _write_or_spill(self, collection: str, upserts: list[Upsert]) -> None:
        now = datetime.now(UTC)
        updates = [
            (selector, {"$set": {**fields, "last_seen": now}, "$setOnInsert": {"first_seen": now}})
            for selector, fields in upserts
        ]
        operations = [UpdateOne(selector, update, upsert=True) for selector, update in updates]
        try:
            result = self._bulk_write_with_retries(collection, operations)
        except ConnectionFailure as exc:
            logger.error("MongoDB unavailable (%s): spilling %d items", exc, len(upserts))
            assert self.spill is not None
            self.spill.append(
                [{"collection": collection, "filter": s, "update": u} for s, u in updates]
            )
            self.stats.inc_value("mongo/spilled", len(upserts))
            return
        self._count(collection, len(operations), result)

    def _bulk_write_with_retries(
        self, collection: str, operations: list[UpdateOne]
    ) -> BulkWriteResult | None:
        assert self.database is not None
        for attempt in range(self.config.retry_times + 1):
            try:
                return self.database[collection].bulk_write(operations, ordered=False)
            except BulkWriteError as exc:
                if not _only_duplicate_keys(exc) or attempt == self.config.retry_times:
                    self._log_write_errors(collection, exc)
                    return None
            except ConnectionFailure:
                if attempt == self.config.retry_times:
                    raise
            self.stats.inc_value("mongo/retries")
            time.sleep(min(8.0, 0.25 * 2**attempt))  # writer thread: the reactor runs on
        return None

    def _log_write_errors(self, collection: str, exc: BulkWriteError) -> None:
        errors = exc.details.get("writeErrors", [])
        self.stats.inc_value("mongo/write_errors", len(errors))
        logger.error(
            "MongoDB refused %d upserts into %s: %s",
            len(errors),
            collection,
            errors[0].get("errmsg") if errors else exc,
        )

    def _count(self, collection: str, items: int, result: BulkWriteResult | None) -> None:
        self.stats.inc_value("mongo/batches")
        self.stats.inc_value("mongo/items", items)
        self.stats.inc_value(f"mongo/items/{collection}", items)
        if result is not None:
            self.stats.inc_value("mongo/upserted", result.upserted_count)
            self.stats.inc_value("mongo/modified", result.modified_count)

    def _replay_own(self) -> None:
        assert self.spill is not None
        assert self.client is not None
        try:
            self.client.admin.command("ping")
        except PyMongoError:
            return
        records = self.spill.read_own()
        if records and self._replay(records):
            self.spill.clear_own()

    def _replay_orphans(self) -> None:
        assert self.spill is not None
        for path, records in self.spill.orphans():
            if self._replay(records):
                path.unlink(missing_ok=True)

    def _replay(self, records: list[Record]) -> bool:
        by_collection: dict[str, list[UpdateOne]] = {}
        for record in records:
            operation = UpdateOne(record["filter"], record["update"], upsert=True)
            by_collection.setdefault(record["collection"], []).append(operation)
        try:
            for collection, operations in by_collection.items():
                result = self._bulk_write_with_retries(collection, operations)
                self._count(collection, len(operations), result)
        except ConnectionFailure:
            return False
        self.stats.inc_value("mongo/replayed", len(records))
        logger.info("Replayed %d spilled upserts into MongoDB", len(records))
        return True


def _fields(item: StoredItem) -> dict[str, Any]:
    """The item's fields as a flat dict (items hold plain values; no deep copy needed)."""
    return {name: getattr(item, name) for name in _field_names(type(item))}


@cache
def _field_names(item_class: type) -> tuple[str, ...]:
    return tuple(field.name for field in dataclasses.fields(item_class))


def _only_duplicate_keys(exc: BulkWriteError) -> bool:
    """Two workers upserting the same new key at once: the retry finds the document."""
    errors = exc.details.get("writeErrors", [])
    return bool(errors) and all(error.get("code") == DUPLICATE_KEY for error in errors)
