"""Batched MongoDB upserts, written off the reactor, that lose nothing when MongoDB goes away.

Items are buffered per collection and written as one unordered ``bulk_write`` of upserts keyed
on each item's unique key: the fields, ``last_seen``, ``first_seen`` on insert, and
``last_changed``/``change_count`` when the content changed (``changes.py``), each in the
cheapest form that may do (``bulk.py``). The reactor only reads each item's key and buffers it:
reading the items into documents, their hashes and trimming run in a preparer thread, the writes
in a writer thread, a batch being prepared while the one before is written.
``MongoWriter.store`` (awaited by ``crawler.pipelines.MongoPipeline.process_item``) returns only
once its item is written with the write concern MONGO_WRITE_CONCERN (journaled by default) or
spilled to the local spill file, so the frontier acknowledges a request only after its items are
durable. An item MongoDB does not store (too large even once trimmed, see ``documents.py``,
one whose document cannot be made, or refused by the server) fails alone with
:class:`ItemNotStored`: Scrapy sends ``item_error`` and its request is dead-lettered with the
reason instead of acknowledged; the other items of its batch are written all the same.
"""

from __future__ import annotations

import asyncio
import logging
import re
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlsplit

from pymongo import MongoClient, WriteConcern
from pymongo.errors import PyMongoError

from crawler.config import setting, setting_int
from crawler.config.values import Destination, write_concern
from crawler.storage.bulk import BulkWrites
from crawler.storage.destinations import DEFAULT_KEY, Destinations
from crawler.storage.prepare import BatchPreparer, Upsert, seen_again
from crawler.storage.probe import OutageProbe
from crawler.storage.replay import SpillReplay
from crawler.storage.rules import NO_RULES, FieldRules
from crawler.storage.spill import SpillFile
from crawler.uris import mask_uri

if TYPE_CHECKING:
    from pymongo.database import Database
    from scrapy.crawler import Crawler
    from scrapy.statscollectors import StatsCollector

logger = logging.getLogger(__name__)

# Waiters woken per event-loop turn when a batch is written, so the loop keeps serving I/O and
# timers between groups instead of running every item's continuation in one turn.
WAKE_CHUNK = 64
# Seconds without a new item after which a batch is written, however young.
QUIET = 0.05
# Batches of a collection written or prepared at once: the quiet and age rules flush no other
# meanwhile, so items that come while MongoDB is slow or away join the next batch (up to
# MONGO_BATCH_SIZE) instead of each waiting in a batch of its own.
IN_FLIGHT = 2
# MongoDB's own databases: a URI's path naming one is its database to authenticate against.
SYSTEM_DATABASES = ("admin", "local", "config")


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


def connect_mongo(config: MongoSettings) -> MongoClient[dict[str, Any]]:
    """A client of ``config.uri`` once MongoDB answers a ping within ``config.timeout_ms``, or
    MongoUnavailable naming the masked URI (one line: the reason without pymongo's topology)."""
    client: MongoClient[dict[str, Any]] = MongoClient(
        config.uri,
        serverSelectionTimeoutMS=config.timeout_ms,
        socketTimeoutMS=config.answer_timeout_ms,
        tz_aware=True,
    )
    try:
        client.admin.command("ping")
    except PyMongoError as exc:
        client.close()
        reason = re.split(r", Timeout:| \(configured timeouts:", str(exc))[0]
        message = f"MongoDB at {mask_uri(config.uri)} is unavailable: {reason}"
        raise MongoUnavailable(message) from exc
    return client


@dataclass
class CollectionBatch:
    """Upserts waiting for one collection; the items of a key seen twice are written as one
    (``prepare.SeenAgain``), their merged fields' values merged (``FieldRules.merged``)."""

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
    file in MONGO_SPILL_DIR and is replayed when MongoDB answers again or on the next start, and
    the batches after it go there at once while MongoDB is away (``probe.py``). At
    most MONGO_MAX_PENDING items wait at once: beyond that the crawl waits, so memory stays
    bounded. Documents over MONGO_MAX_DOCUMENT_BYTES are trimmed (``documents.py``); an item
    still too large, whose document cannot be made (``prepare.unstorable``), or refused by MongoDB,
    raises :class:`ItemNotStored`.
    """

    def __init__(
        self,
        config: MongoSettings,
        stats: StatsCollector,
        spider_name: str,
        destinations: Destinations,
        stopping: Callable[[], bool] = lambda: False,
    ) -> None:
        self.config = config
        self.stopping = stopping  # the crawl is told to go: a batch MongoDB fails is spilled
        self.stats = stats
        self.spider_name = spider_name
        self.destinations = destinations
        self.client: MongoClient[dict[str, Any]] | None = None
        self.spill: SpillFile | None = None
        self.bulk: BulkWrites | None = None  # once connected and the spill file open
        self.replay: SpillReplay | None = None  # its replays, from then on
        self.probe: OutageProbe | None = None  # looks for MongoDB's return while it is away
        self._in_flight: dict[str, int] = {}  # batches being prepared or written, by collection
        self._batches: dict[str, CollectionBatch] = {}
        self._pending = 0
        self._room = asyncio.Event()
        self._writes: set[asyncio.Task[None]] = set()
        self._ticker: asyncio.Task[None] | None = None
        # One writer thread: batches are written in order, one at a time; the next batch's
        # documents are prepared in another thread meanwhile.
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="mongo-writer")
        self._preparer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="mongo-preparer")
        self.preparing = BatchPreparer(config.max_document_bytes, stats)

    async def open(self) -> None:
        """Connect, replay what earlier runs spilled, start flushing old batches."""
        database = await self._in_thread(self._connect)
        self.spill = await self._in_thread(SpillFile, self.config.spill_dir, self.spider_name)
        # Where spilled records may go, so a replay makes a collection's unique index first.
        known = [*self.destinations.indexed(), Destination(self.spider_name, DEFAULT_KEY, True)]
        self.bulk = BulkWrites(
            database,
            self.stats,
            self.config.retry_times,
            self.spill,
            known=known,
            stopping=self.stopping,
        )
        self.replay = replay = SpillReplay(self.bulk)
        assert self.client is not None
        self.probe = OutageProbe(self.client, self.bulk)
        await self._in_thread(replay.orphans)
        await self._in_thread(replay.own)
        self._room.set()
        self._ticker = asyncio.create_task(self._flush_old_batches())

    async def store(
        self,
        destination: Destination,
        key: Any,
        item: Any,
        rules: FieldRules = NO_RULES,
        values: Mapping[str, Any] | None = None,
    ) -> None:
        """Return once ``item`` (whose unique key is ``key``) is written to its collection or
        spilled; raises :class:`ItemNotStored` when MongoDB does not store it. ``rules``: how
        the fields of its class meet the stored ones (``rules.py``: volatile fields left out of
        its change hash besides the usual ones, least, kept and union fields), ``values`` the
        item's values of its least, kept and union fields (:meth:`FieldRules.values_of`). The
        item is read in the preparer thread: it must not change until this returns."""
        while self._pending >= self.config.max_pending:
            self._room.clear()
            self.stats.inc_value("mongo/backpressure_waits")
            await self._room.wait()
        waiter = self._buffer(destination, key, item, rules, dict(values or {}))
        await waiter

    async def close(self) -> None:
        """Write every batch, replay the spill file once more, disconnect."""
        if self._ticker is not None:
            self._ticker.cancel()
        if self.probe is not None:
            self.probe.close()
        for collection in list(self._batches):
            self._flush(collection)
        if self._writes:
            await asyncio.gather(*self._writes, return_exceptions=True)
        away = self._still_away()
        if self.spill is not None and self.replay is not None:
            if not away:  # else the file is left for the next start
                await self._in_thread(self.replay.own)
            self.spill.close()
        if self.client is not None and away:
            # Its endSessions would wait out a server selection: closed unwaited for.
            threading.Thread(target=self.client.close, name="mongo-close", daemon=True).start()
        elif self.client is not None:
            await self._in_thread(self.client.close)
        self._executor.shutdown(wait=True)
        self._preparer.shutdown(wait=True)

    def _still_away(self) -> bool:
        """MongoDB held away and not seen back by the client's monitor (no I/O: a ping would
        wait out the connect timeout while it is away)."""
        if self.bulk is None or not self.bulk.away or self.client is None:
            return False
        return not self.client.topology_description.has_writable_server()

    # --- buffering (reactor thread) ---------------------------------------------------------------

    def _buffer(
        self,
        destination: Destination,
        key: Any,
        item: Any,
        rules: FieldRules,
        values: dict[str, Any],
    ) -> asyncio.Future[None]:
        batch = self._batches.get(destination.collection)
        if batch is None:  # not setdefault's argument: no batch made and dropped for each item
            batch = self._batches[destination.collection] = CollectionBatch()
        hashable = _hashable(key)
        if (earlier := batch.updates.get(hashable)) is not None:
            item = seen_again(earlier[1], item)
            values = rules.merged(earlier[3], values)
        batch.updates[hashable] = ({destination.unique_key: key}, item, rules, values)
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
        self._in_flight[collection] = self._in_flight.get(collection, 0) + 1
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
            if self._in_flight.get(collection, 0) >= IN_FLIGHT:
                continue  # it grows meanwhile, up to MONGO_BATCH_SIZE
            if now - batch.started >= self.config.flush_interval or now - batch.joined >= quiet:
                self._flush(collection)
        if self.probe is not None and self.probe.writes.away:
            self.probe.look()  # no replay while MongoDB is away: it would wait out a timeout
            if self.spill is not None and self.spill.check_due():  # removed from under it?
                await self._in_thread(self.spill.keep_named)
        elif self.replay is not None and self.replay.writes.spill.pending() and not self._writes:
            await self._in_thread(self.replay.own)

    async def _write(self, collection: str, batch: CollectionBatch) -> None:
        keys, operations = list(batch.updates), list(batch.updates.values())
        waiters = [(key, waiter) for key, group in batch.waiters.items() for waiter in group]
        destinations = list(batch.destinations.values())
        try:
            writes, failed = await self._in_thread(
                self.preparing.prepare_batch, collection, operations, executor=self._preparer
            )
            assert self.bulk is not None  # open() made it before any item was stored
            failed = await self._in_thread(
                self.bulk.write_or_spill, collection, writes, destinations, failed, len(operations)
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
            self._in_flight[collection] -= 1
            self._pending -= len(waiters)
            self._room.set()

    async def _in_thread(
        self, function: Any, *args: Any, executor: ThreadPoolExecutor | None = None
    ) -> Any:
        """``function(*args)`` in the writer thread (or ``executor``'s)."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(executor or self._executor, function, *args)

    # --- writing (writer thread) ---------------------------------------------------------------

    def _connect(self) -> Database[dict[str, Any]]:
        """The database, once MongoDB answers (else MongoUnavailable). No unique index is made
        here: each is made when a batch first goes to its collection (``BulkWrites._index``),
        for the collections this spider stores into only, and one MongoDB will not make (keys
        stored twice, another index on the key) is said, not taken for MongoDB being away."""
        _say_other_database(self.config.uri, self.config.database)
        client = connect_mongo(self.config)
        database = client.get_database(
            self.config.database, write_concern=self.config.write_concern
        )
        self.client = client
        logger.info("Storing items in %s, database %s", mask_uri(self.config.uri), database.name)
        return database


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
    if waiter.done():  # cancelled meanwhile: the others of its batch are still told
        return
    if reason is None:
        waiter.set_result(None)
    else:
        waiter.set_exception(ItemNotStored(f"{collection} {key!r:.80}: {reason}"))


def _say_other_database(uri: str, database: str) -> None:
    """A WARNING when MONGO_URI names a database (``mongodb+srv://.../mydb``) other than
    MONGO_DATABASE, where items go: said, not followed (a deployment's items never move to
    another database on an upgrade). A system database (``/admin``, often the one to
    authenticate against) is no place for items and is not said."""
    named = unquote(urlsplit(uri).path.lstrip("/"))
    if named and named != database and named not in SYSTEM_DATABASES:
        logger.warning(
            "MONGO_URI names the database %s, but items go to MONGO_DATABASE %s: set "
            "MONGO_DATABASE=%s to store them there",
            named,
            database,
            named,
        )
