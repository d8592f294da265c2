"""Batched MongoDB upserts, written off the reactor, that lose nothing when MongoDB goes away.

Items are buffered per collection and written as one unordered ``bulk_write`` of upserts keyed
on each item's unique key: the fields, ``last_seen``, ``first_seen`` on insert, and
``last_changed``/``change_count`` when the content changed (``changes.py``). A batch of a
collection whose last batch brought new documents is first written as inserts, the documents
whose key is stored, refused as duplicate keys, then as upserts. Each upsert is first written
in the plain form that matches an unchanged document through its hash; the documents whose
content changed, refused by it as duplicate keys, are written again in the update-pipeline form
that counts the change. The reactor only reads each item's key and
buffers it: reading the items into documents, their hashes and trimming run in a preparer
thread, the writes in a writer thread, a batch being prepared while the one before is written.
``MongoWriter.store`` (awaited by ``crawler.pipelines.MongoPipeline.process_item``) returns
only once its item is written with the write concern
MONGO_WRITE_CONCERN (journaled by default) or spilled to the local spill file, so the frontier
acknowledges a request only after its items are durable. An item MongoDB does not store (too
large even once trimmed, see ``documents.py``, or refused by the server) fails with
:class:`ItemNotStored`: Scrapy sends ``item_error`` and its request is dead-lettered with the
reason instead of acknowledged.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Collection, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bson.errors import BSONError
from pymongo import InsertOne, MongoClient, UpdateOne, WriteConcern
from pymongo.errors import BulkWriteError, ConnectionFailure, PyMongoError

from crawler.config import setting, setting_int
from crawler.config.values import Destination, write_concern
from crawler.storage.changes import (
    history_update,
    marked_trimmed,
    new_document,
    same_content_filter,
    same_content_update,
    with_change_hash,
)
from crawler.storage.destinations import Destinations, document_of
from crawler.storage.documents import TRUNCATED_FIELD, DocumentTooLarge, fit
from crawler.storage.spill import Record, SpillFile
from crawler.storage.writes import Outcome, refused, transient, written
from crawler.uris import mask_uri

if TYPE_CHECKING:
    from pymongo.database import Database
    from scrapy.crawler import Crawler
    from scrapy.statscollectors import StatsCollector

logger = logging.getLogger(__name__)

# Waiters woken per event-loop turn when a batch is written, so the loop keeps serving I/O and
# timers between groups instead of running every item's continuation in one turn.
WAKE_CHUNK = 64
# Items the preparer thread prepares between two offers of the GIL to the reactor thread (about
# a millisecond of work): the reactor, woken by a timer or I/O, runs at once instead of waiting
# for the interpreter's switch interval (5 ms) each time it needs the GIL back.
PREPARE_SLICE = 16
# (filter, the item, the item class's volatile fields, its least fields' values)
Upsert = tuple[dict[str, Any], Any, Collection[str], dict[str, Any]]
# Seconds without a new item after which a batch is written, however young.
QUIET = 0.05
# A collection whose documents mostly change is written in the pipeline form alone, and in the
# plain form first again once in this many batches, to see whether they still do.
PLAIN_PROBE_BATCHES = 8
# A collection at least this share of whose last batch were new documents (keys not stored yet)
# has its next batch inserted first. An insert refused because its key is stored costs a small
# part of an upsert (its write is then upserted all the same), a new document inserted much
# less than upserted (docs/storage.md has the figures): a quarter pays, with room.
NEW_SHARE_FOR_INSERTS = 0.25


class MongoUnavailable(RuntimeError):
    """MongoDB could not be reached when the spider opened."""


class ItemNotStored(RuntimeError):
    """MongoDB did not store the item; the message says why."""


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
    # Defaults as in crawler/settings.py, for code that builds the settings by hand.
    max_document_bytes: int = 16_000_000
    answer_timeout_ms: int = 60_000
    write_concern: WriteConcern = field(default_factory=lambda: WriteConcern(w=1, j=True))

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> MongoSettings:
        settings = crawler.settings
        return cls(
            uri=settings.get("MONGO_URI"),
            database=settings.get("MONGO_DATABASE"),
            timeout_ms=setting_int(settings, "MONGO_CONNECT_TIMEOUT_MS", 1),
            batch_size=setting_int(settings, "MONGO_BATCH_SIZE", 1, 100_000),
            flush_interval=setting(settings, "MONGO_FLUSH_INTERVAL"),
            max_pending=setting_int(settings, "MONGO_MAX_PENDING", 1),
            retry_times=setting_int(settings, "MONGO_RETRY_TIMES", 0),
            spill_dir=Path(settings.get("MONGO_SPILL_DIR")),
            max_document_bytes=setting_int(settings, "MONGO_MAX_DOCUMENT_BYTES", 1024, 16 << 20),
            answer_timeout_ms=setting_int(settings, "MONGO_ANSWER_TIMEOUT_MS", 1),
            write_concern=write_concern(settings),
        )


@dataclass
class CollectionBatch:
    """Upserts waiting for one collection; an item seen twice keeps its latest fields."""

    updates: dict[Any, Upsert] = field(default_factory=dict)
    waiters: dict[Any, list[asyncio.Future[None]]] = field(default_factory=dict)
    destinations: dict[str, Destination] = field(default_factory=dict)  # by unique key
    started: float = field(default_factory=time.monotonic)
    joined: float = field(default_factory=time.monotonic)  # when its latest item came


class MongoWriter:
    """Buffer items per collection and upsert them in batches, prepared in a preparer thread
    and written from a writer thread.

    A batch is written when it holds MONGO_BATCH_SIZE items, when its oldest item is older than
    MONGO_FLUSH_INTERVAL, and when the writer closes, with MONGO_WRITE_CONCERN. Transient errors
    are retried with backoff MONGO_RETRY_TIMES times; after that the batch goes to the spill
    file in MONGO_SPILL_DIR and is replayed when MongoDB answers again or on the next start. At
    most MONGO_MAX_PENDING items wait at once: beyond that the crawl waits, so memory stays
    bounded. Documents over MONGO_MAX_DOCUMENT_BYTES are trimmed (``documents.py``); an item
    still too large, or refused by MongoDB, raises :class:`ItemNotStored`.
    """

    def __init__(
        self,
        config: MongoSettings,
        stats: StatsCollector,
        spider_name: str,
        destinations: Destinations,
    ) -> None:
        self.config = config
        self.stats = stats
        self.spider_name = spider_name
        self.destinations = destinations
        self._indexed: dict[tuple[str, str], str] = {}  # (collection, unique key): index name
        # Per collection: batches written, the share of changed documents in the last batch
        # written in the plain form first, and the share of new documents in the last batch.
        self._batch_counts: dict[str, int] = {}
        self._changed_share: dict[str, float] = {}
        self._new_share: dict[str, float] = {}
        self.client: MongoClient[dict[str, Any]] | None = None
        self.database: Database[dict[str, Any]] | None = None
        self.spill: SpillFile | None = None
        self._batches: dict[str, CollectionBatch] = {}
        self._pending = 0
        self._room = asyncio.Event()
        self._writes: set[asyncio.Task[None]] = set()
        self._ticker: asyncio.Task[None] | None = None
        # One writer thread: batches are written in order, one at a time; the next batch's
        # documents are prepared in another thread meanwhile.
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="mongo-writer")
        self._preparer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="mongo-preparer")

    async def open(self) -> None:
        """Connect, replay what earlier runs spilled, start flushing old batches."""
        await self._in_thread(self._connect)
        self.spill = SpillFile(self.config.spill_dir, self.spider_name)
        await self._in_thread(self._replay_orphans)
        await self._in_thread(self._replay_own)
        self._room.set()
        self._ticker = asyncio.create_task(self._flush_old_batches())

    async def store(
        self,
        destination: Destination,
        key: Any,
        item: Any,
        volatile: Collection[str] = (),
        least: Mapping[str, Any] | None = None,
    ) -> None:
        """Return once ``item`` (whose unique key is ``key``) is written to its collection or
        spilled; raises :class:`ItemNotStored` when MongoDB does not store it. ``volatile``:
        fields left out of its change hash besides the usual ones (``changes.py``); ``least``:
        fields (with the item's values) whose stored value is the least ever stored (a page's
        depth: the shortest path found to it). The item is read in the writer thread: it must
        not change until this returns."""
        while self._pending >= self.config.max_pending:
            self._room.clear()
            self.stats.inc_value("mongo/backpressure_waits")
            await self._room.wait()
        waiter = self._buffer(destination, key, item, volatile, dict(least or {}))
        await waiter

    async def close(self) -> None:
        """Write every batch, replay the spill file once more, disconnect."""
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
        self._preparer.shutdown(wait=True)

    # --- buffering (reactor thread) ---------------------------------------------------------------

    def _buffer(
        self,
        destination: Destination,
        key: Any,
        item: Any,
        volatile: Collection[str],
        least: dict[str, Any],
    ) -> asyncio.Future[None]:
        batch = self._batches.get(destination.collection)
        if batch is None:  # not setdefault's argument: no batch made and dropped for each item
            batch = self._batches[destination.collection] = CollectionBatch()
        hashable = _hashable(key)
        if least and (earlier := batch.updates.get(hashable)) is not None:
            least = least_of(earlier[3], least)
        batch.updates[hashable] = ({destination.unique_key: key}, item, volatile, least)
        batch.joined = time.monotonic()
        if destination.unique_key not in batch.destinations:
            batch.destinations[destination.unique_key] = destination
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if (waiters := batch.waiters.get(hashable)) is None:
            batch.waiters[hashable] = [waiter]
        else:
            waiters.append(waiter)
        self._pending += 1
        if len(batch.updates) >= self.config.batch_size:
            self._flush(destination.collection)
        return waiter

    def _flush(self, collection: str) -> None:
        batch = self._batches.pop(collection, None)
        if batch is None:
            return
        write = asyncio.create_task(self._write(collection, batch))
        self._writes.add(write)
        write.add_done_callback(self._writes.discard)

    async def _flush_old_batches(self) -> None:
        """Write a batch once its oldest item is MONGO_FLUSH_INTERVAL old, or once no item has
        joined it for QUIET seconds: a crawl that pauses or ends has its last items stored (and
        its pages acknowledged) at once, while a busy one still writes in batches."""
        quiet = min(QUIET, self.config.flush_interval)
        while True:
            await asyncio.sleep(quiet)
            try:
                await self._flush_due(quiet)
            except Exception:  # logged, and the loop goes on: items waiting must still go
                self.stats.inc_value("mongo/flush_loop_errors")
                logger.exception("Flushing old batches failed; trying again")

    async def _flush_due(self, quiet: float) -> None:
        now = time.monotonic()
        for collection, batch in list(self._batches.items()):
            if now - batch.started >= self.config.flush_interval or now - batch.joined >= quiet:
                self._flush(collection)
        if self.spill is not None and self.spill.pending() and not self._writes:
            await self._in_thread(self._replay_own)

    async def _write(self, collection: str, batch: CollectionBatch) -> None:
        keys, operations = list(batch.updates), list(batch.updates.values())
        waiters = [(key, waiter) for key, group in batch.waiters.items() for waiter in group]
        destinations = list(batch.destinations.values())
        try:
            writes, failed = await self._in_thread(
                self._prepare_batch, collection, operations, executor=self._preparer
            )
            failed = await self._in_thread(
                self._write_or_spill, collection, writes, destinations, failed, len(operations)
            )
        except Exception as exc:  # the spill file failed too: the items are not stored
            logger.exception(
                "Could not write nor spill %d items of %s", len(operations), collection
            )
            reasons = dict.fromkeys(keys, f"neither written nor spilled: {exc!r}")
        else:
            reasons = {keys[index]: reason for index, reason in failed.items()}
        try:
            for first in range(0, len(waiters), WAKE_CHUNK):
                for key, waiter in waiters[first : first + WAKE_CHUNK]:
                    _resolve_waiter(waiter, collection, key, reasons.get(key))
                await asyncio.sleep(0)
        finally:
            self._pending -= len(waiters)
            self._room.set()

    async def _in_thread(
        self, function: Any, *args: Any, executor: ThreadPoolExecutor | None = None
    ) -> Any:
        """``function(*args)`` in the writer thread (or ``executor``'s)."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(executor or self._executor, function, *args)

    # --- preparing (preparer thread) -------------------------------------------------------------

    def _prepare_batch(
        self, collection: str, upserts: list[Upsert]
    ) -> tuple[list[Write], dict[int, str]]:
        """The writes of the upserts, and those that cannot be written, by position: reason."""
        writes: list[Write] = []
        failed: dict[int, str] = {}
        for index, (selector, item, volatile, least) in enumerate(upserts):
            if index and index % PREPARE_SLICE == 0:
                time.sleep(0)  # the GIL to the reactor thread if it waits for it
            try:
                writes.append(self._prepare(index, collection, selector, item, volatile, least))
            except (DocumentTooLarge, BSONError) as exc:
                self.stats.inc_value("mongo/too_large")
                failed[index] = str(exc)
        return writes, failed

    # --- writing (writer thread) ---------------------------------------------------------------

    def _connect(self) -> None:
        client: MongoClient[dict[str, Any]] = MongoClient(
            self.config.uri,
            serverSelectionTimeoutMS=self.config.timeout_ms,
            socketTimeoutMS=self.config.answer_timeout_ms,
            tz_aware=True,
        )
        try:
            client.admin.command("ping")
            database = client.get_database(
                self.config.database, write_concern=self.config.write_concern
            )
            for destination in self.destinations.indexed():
                collection, key = destination.collection, destination.unique_key
                self._indexed[collection, key] = database[collection].create_index(key, unique=True)
        except PyMongoError as exc:
            client.close()
            reason = str(exc).split(", Timeout:")[0]
            message = f"MongoDB at {mask_uri(self.config.uri)} is unavailable: {reason}"
            raise MongoUnavailable(message) from exc
        self.client, self.database = client, database
        logger.info("Storing items in %s, database %s", mask_uri(self.config.uri), database.name)

    def _write_or_spill(
        self,
        collection: str,
        writes: list[Write],
        destinations: Collection[Destination],
        failed: dict[int, str],
        total: int,
    ) -> dict[int, str]:
        """Write (or spill) the prepared writes of a batch of ``total`` upserts, ``failed``
        already failing; the ones not stored, by position: reason."""
        for destination in destinations:
            self._index(destination)
        if writes:
            failed = failed | self._write_updates(collection, writes, datetime.now(UTC))
        if failed:
            self.stats.inc_value("mongo/write_errors", len(failed))
            logger.error(
                "MongoDB did not store %d of %d %s documents; their requests are dead-lettered. "
                "First: %s",
                len(failed),
                total,
                collection,
                next(iter(failed.values())),
            )
        return failed

    def _index(self, destination: Destination) -> None:
        """The unique index of a collection first met in an item (MONGO_COLLECTIONS by spider,
        an item class of the user's, the spider's own collection), unless one is there; tried
        again with the next batch if MongoDB is away. ``_id`` has its own."""
        collection, key = destination.collection, destination.unique_key
        if key == "_id" or (collection, key) in self._indexed or self.database is None:
            return
        try:
            existing = self.database[collection].index_information().items()
            names = [name for name, index in existing if _covers(index, key, destination.partial)]
            if not names:
                options: dict[str, Any] = {"unique": True}
                if destination.partial:
                    options["partialFilterExpression"] = {key: {"$gt": ""}}
                names.append(self.database[collection].create_index(key, **options))
        except PyMongoError as exc:
            logger.warning("No unique index on %s.%s yet: %s", collection, key, exc)
            return
        # No hint on a partial index: a server may refuse one it cannot prove the query within.
        self._indexed[collection, key] = "" if destination.partial else names[0]

    def _prepare(
        self,
        index: int,
        collection: str,
        selector: dict[str, Any],
        item: Any,
        volatile: Collection[str],
        least: dict[str, Any],
    ) -> Write:
        """The write of the item's document with its change hash, trimmed to
        MONGO_MAX_DOCUMENT_BYTES (documents.py)."""
        ((unique_key, key),) = selector.items()
        hashed = with_change_hash({**document_of(item), **least}, volatile)
        fitted = fit(hashed, self.config.max_document_bytes, unique_key)
        if unique_key == "_id":
            fitted = {name: value for name, value in fitted.items() if name != "_id"}
        if TRUNCATED_FIELD not in fitted:
            return Write(index, selector, fitted, (TRUNCATED_FIELD,), tuple(least), tuple(volatile))
        marked_trimmed(fitted)
        self.stats.inc_value("mongo/truncated")
        logger.warning(
            "Trimmed the %s document %s=%.80r to fit MONGO_MAX_DOCUMENT_BYTES: %s",
            collection,
            unique_key,
            key,
            ", ".join(
                f"{name} from {size:,} bytes" for name, size in fitted[TRUNCATED_FIELD].items()
            ),
        )
        return Write(index, selector, fitted, least=tuple(least))

    def _write_updates(self, collection: str, writes: list[Write], now: datetime) -> dict[int, str]:
        """Write each document in the cheapest form that may do, then in the next form what that
        one found stored or changed (refused as a duplicate key on the key's unique index):
        inserted (a key with a unique index), unless few documents of the collection's last
        batch were new (see :meth:`_insert_first`); in the plain form, unless its documents
        mostly change (see :meth:`_plain_first`); in the pipeline form. Spill what MongoDB is
        unavailable for. The writes not stored, by position: reason."""
        indexes = [self._unique_index(collection, write) for write in writes]
        insert, plain = self._insert_first(collection), self._plain_first(collection)
        failed: dict[int, str] = {}
        created, batch = 0, True
        rest = list(range(len(writes)))  # positions in writes
        if insert and (insertable := [p for p in rest if indexes[p] is not None]):
            try:
                outcome = self._bulk_write_with_retries(
                    collection, [writes[p].inserted(now) for p in insertable], duplicates=False
                )
            except ConnectionFailure as exc:
                return self._spill(collection, writes, now, exc)
            self._count(collection, len(insertable), outcome)
            if outcome.duplicates:
                self.stats.inc_value("mongo/existing_writes", len(outcome.duplicates))
            created, batch = outcome.upserted, False
            failed = _failures(writes, insertable, outcome)
            settled = {p for q, p in enumerate(insertable) if q not in outcome.duplicates}
            rest = [p for p in rest if p not in settled]
        if not rest:
            self._new_share[collection] = created / len(writes)
            return failed
        first = [writes[p].first(now, indexes[p] if plain else None) for p in rest]
        try:
            outcome = self._bulk_write_with_retries(collection, first, duplicates=False)
        except ConnectionFailure as exc:
            return failed | self._spill(collection, [writes[p] for p in rest], now, exc)
        self._count(collection, len(first), outcome, batch=batch)
        created += outcome.upserted
        again = [rest[q] for q in sorted(outcome.duplicates)]
        if plain:
            self._changed_share[collection] = len(again) / len(rest)
        failed |= _failures(writes, rest, outcome)
        if again:
            self.stats.inc_value("mongo/changed_writes", len(again))
            try:
                rewritten = self._bulk_write_with_retries(
                    collection, [writes[p].tracked(now) for p in again]
                )
            except ConnectionFailure as exc:
                return failed | self._spill(collection, [writes[p] for p in again], now, exc)
            self._count(collection, len(again), rewritten, batch=False)
            created += rewritten.upserted
            failed |= {writes[again[q]].index: reason for q, reason in rewritten.refused.items()}
        self._new_share[collection] = created / len(writes)
        return failed

    def _insert_first(self, collection: str) -> bool:
        """Whether this batch of ``collection`` is inserted first: while at least
        NEW_SHARE_FOR_INSERTS of its last batch were new documents (and for its first batch).
        Every batch says how many it created, in whatever form, so a collection whose new
        documents come back is inserted first again at its next batch."""
        return self._new_share.get(collection, 1.0) >= NEW_SHARE_FOR_INSERTS

    def _plain_first(self, collection: str) -> bool:
        """Whether this batch of ``collection`` is written in the plain form first: not when
        more than half of the stored documents of its last batch so written had changed (each
        cost two writes, one form would do), except every PLAIN_PROBE_BATCHES batches, to see
        again."""
        count = self._batch_counts.get(collection, 0) + 1
        self._batch_counts[collection] = count
        changed = self._changed_share.get(collection, 0.0)
        return changed <= 0.5 or count % PLAIN_PROBE_BATCHES == 0

    def _unique_index(self, collection: str, write: Write) -> str | None:
        """The name of the unique index on the write's key to hint ("" for ``_id`` and partial
        indexes: unique, no hint), None if it has none."""
        key = next(iter(write.selector))
        return "" if key == "_id" else self._indexed.get((collection, key))

    def _spill(
        self, collection: str, writes: list[Write], now: datetime, exc: ConnectionFailure
    ) -> dict[int, str]:
        logger.error("MongoDB unavailable (%s): spilling %d items", exc, len(writes))
        assert self.spill is not None
        self.spill.append(
            [
                {"collection": collection, "filter": w.selector, "update": w.history(now)}
                for w in writes
            ]
        )
        self.stats.inc_value("mongo/spilled", len(writes))
        return {}

    def _bulk_write_with_retries(
        self,
        collection: str,
        operations: Sequence[UpdateOne | InsertOne[dict[str, Any]]],
        duplicates: bool = True,
    ) -> Outcome:
        """The outcome of the unordered bulk write, tried again on transient errors (duplicate
        keys only if ``duplicates``)."""
        assert self.database is not None
        for attempt in range(self.config.retry_times + 1):
            last = attempt == self.config.retry_times
            try:
                return written(self.database[collection].bulk_write(operations, ordered=False))
            except BulkWriteError as exc:
                if last or not transient(exc, duplicates):
                    return refused(exc, len(operations))
            except ConnectionFailure:
                if last:
                    raise
            self.stats.inc_value("mongo/retries")
            time.sleep(min(8.0, 0.25 * 2**attempt))  # writer thread: the reactor runs on
        raise AssertionError("unreachable")

    def _count(
        self, collection: str, operations: int, outcome: Outcome, batch: bool = True
    ) -> None:
        stored = operations - len(outcome.refused)
        if batch:
            self.stats.inc_value("mongo/batches")
        self.stats.inc_value("mongo/items", stored)
        self.stats.inc_value(f"mongo/items/{collection}", stored)
        self.stats.inc_value("mongo/upserted", outcome.upserted)
        self.stats.inc_value("mongo/modified", outcome.modified)

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
                outcome = self._bulk_write_with_retries(collection, operations)
                self._count(collection, len(operations), outcome)
                for reason in outcome.refused.values():
                    logger.error("MongoDB refused a spilled upsert into %s: %s", collection, reason)
        except ConnectionFailure:
            return False
        self.stats.inc_value("mongo/replayed", len(records))
        logger.info("Replayed %d spilled upserts into MongoDB", len(records))
        return True


@dataclass(frozen=True)
class Write:
    """One document of a batch, ready to write: ``index`` is its position in the batch,
    ``unique`` says its key has a unique index (so the plain form may be tried first)."""

    index: int
    selector: dict[str, Any]
    document: dict[str, Any]
    unset: tuple[str, ...] = ()
    least: tuple[str, ...] = ()  # fields whose stored value is the least ever stored
    volatile: tuple[str, ...] = ()  # the item's own fields left out of its change hash

    def first(self, now: datetime, unique_index: str | None) -> UpdateOne:
        """The plain upsert matching the stored document by key and hash, if the key has a
        unique index (named, it is the query's hint: the hash in the filter leaves the server's
        planner nothing to choose) and the document is whole; else the pipeline form."""
        if unique_index is None or TRUNCATED_FIELD in self.document:
            return self.tracked(now)
        selector = same_content_filter(self.selector, self.document)
        update = same_content_update(self.selector, self.document, now, self.least, self.volatile)
        return UpdateOne(selector, update, upsert=True, hint=unique_index or None)

    def inserted(self, now: datetime) -> InsertOne[dict[str, Any]]:
        """The insert of the document as new (refused as a duplicate key when its key is
        stored): for a key with a unique index only."""
        return InsertOne(new_document(self.selector, self.document, now))

    def tracked(self, now: datetime) -> UpdateOne:
        """The pipeline upsert, right whatever is stored."""
        return UpdateOne(self.selector, self.history(now), upsert=True)

    def history(self, now: datetime) -> list[dict[str, Any]]:
        return history_update(self.document, now, self.unset, self.least)


def _failures(writes: list[Write], positions: list[int], outcome: Outcome) -> dict[int, str]:
    """The writes at ``positions`` (in ``writes``) the outcome refused for another reason than a
    duplicate key, by their position in the batch: reason."""
    return {
        writes[positions[q]].index: reason
        for q, reason in outcome.refused.items()
        if q not in outcome.duplicates
    }


def _covers(index: dict[str, Any], key: str, partial: bool) -> bool:
    """``index`` is a unique index on ``key`` alone that covers every document keyed on it."""
    whole = "partialFilterExpression" not in index
    return index["key"] == [(key, 1)] and bool(index.get("unique")) and (whole or partial)


def _hashable(key: Any) -> Any:
    """A batch's dict key for an item's unique key (a list or dict key is keyed by its repr)."""
    try:
        hash(key)
    except TypeError:
        return repr(key)
    return key


def _resolve_waiter(
    waiter: asyncio.Future[None], collection: str, key: Any, reason: str | None
) -> None:
    if reason is None:
        waiter.set_result(None)
    else:
        waiter.set_exception(ItemNotStored(f"{collection} {key!r:.80}: {reason}"))


def least_of(earlier: Mapping[str, Any], later: Mapping[str, Any]) -> dict[str, Any]:
    """The least of each field of two values of an item's least fields."""
    merged = dict(later)
    for name, value in earlier.items():
        if name not in merged or (value is not None and _less(value, merged[name])):
            merged[name] = value
    return merged


def _less(value: Any, other: Any) -> bool:
    try:
        return other is None or bool(value < other)
    except TypeError:
        return False
