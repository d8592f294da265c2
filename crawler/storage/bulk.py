"""Writing a prepared batch to MongoDB, in the writer thread, in the cheapest form that may do.

A batch of a collection whose last batch brought new documents is first written as inserts, the
documents whose key is stored, refused as duplicate keys, then as upserts. Each upsert is first
written in the plain form that matches an unchanged document through its hash; the documents
whose content changed, refused by it as duplicate keys, are written again in the update-pipeline
form that counts the change (``changes.py``). Transient errors are retried with backoff; what
MongoDB is unavailable for goes to the spill file, replayed when it answers again. Once a batch
found it unavailable, MongoDB is held away: the batches after it go to the spill file at once,
until a ping (``probe.py``) finds it back.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from bson.errors import BSONError
from pymongo import InsertOne, UpdateOne
from pymongo.errors import BulkWriteError, ConnectionFailure, PyMongoError

from crawler.config.values import Destination
from crawler.storage.changes import (
    history_update,
    literal_names,
    new_document,
    same_content_filter,
    same_content_update,
    stale_update,
)
from crawler.storage.documents import TRUNCATED_FIELD
from crawler.storage.rules import NO_RULES, FieldRules
from crawler.storage.spill import SpillFile
from crawler.storage.writes import (
    Outcome,
    nothing_reachable,
    refused,
    refused_whole,
    transient,
    written,
)

if TYPE_CHECKING:
    from pymongo.database import Database
    from scrapy.statscollectors import StatsCollector

logger = logging.getLogger(__name__)

# A collection whose documents mostly change is written in the pipeline form alone, and in the
# plain form first again once in this many batches, to see whether they still do.
PLAIN_PROBE_BATCHES = 8
# A collection at least this share of whose last batch were new documents (keys not stored yet)
# has its next batch inserted first. An insert refused because its key is stored costs a small
# part of an upsert (its write is then upserted all the same), a new document inserted much
# less than upserted (docs/storage.md has the figures): a quarter pays, with room.
NEW_SHARE_FOR_INSERTS = 0.25


class BulkWrites:
    """The writes of prepared batches to ``database`` (from one thread: MongoWriter's writer),
    tried again MONGO_RETRY_TIMES times on transient errors, spilled to ``spill`` when MongoDB
    is unavailable (``stopping``: whether the crawl is told to go, when a write MongoDB is
    unavailable for is spilled at once, not tried again)."""

    def __init__(
        self,
        database: Database[dict[str, Any]],
        stats: StatsCollector,
        retry_times: int,
        spill: SpillFile,
        known: Collection[Destination] = (),
        stopping: Callable[[], bool] = lambda: False,
    ) -> None:
        self.database = database
        self.known = known  # destinations known before any item: a replay indexes them first
        self.stats = stats
        self.retry_times = retry_times
        self.spill = spill
        # (collection, unique key): the unique index to hint, found or made ("" for a partial
        # one), or None when MongoDB would not make it (said once).
        self._indexed: dict[tuple[str, str], str | None] = {}
        # Per collection: batches written, the share of changed documents in the last batch
        # written in the plain form first, and the share of new documents in the last batch.
        self._batch_counts: dict[str, int] = {}
        self._changed_share: dict[str, float] = {}
        self._new_share: dict[str, float] = {}
        # MongoDB found unavailable by a batch, and not found back since (``probe.py``): the
        # batches go to the spill file without waiting out their own timeouts and retries.
        self.away = False
        self.stopping = stopping

    def write_or_spill(
        self,
        collection: str,
        writes: list[Write],
        destinations: Collection[Destination],
        failed: dict[int, str],
        total: int,
    ) -> dict[int, str]:
        """Write (or spill) the prepared writes of a batch of ``total`` upserts, ``failed``
        already failing; the ones not stored, by position: reason. While MongoDB is away, the
        writes are spilled at once."""
        for destination in destinations:
            if not self.away:
                self.index(destination)
        if writes and self.away:
            self._spill_away(collection, writes, datetime.now(UTC))
        elif writes:
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

    def index(self, destination: Destination) -> None:
        """The unique index of a collection first met in an item (MONGO_COLLECTIONS by spider,
        an item class of the user's, the spider's own collection), unless one is there; tried
        again with the next batch if MongoDB is away. One MongoDB will not make (the key stored
        twice already, another index of that name) is said once in a WARNING: the collection is
        written without it, in the update-pipeline form. ``_id`` has its own."""
        collection, key = destination.collection, destination.unique_key
        if key == "_id" or (collection, key) in self._indexed:
            return
        try:
            existing = self.database[collection].index_information().items()
            names = [name for name, index in existing if _covers(index, key, destination.partial)]
            if not names:
                options: dict[str, Any] = {"unique": True}
                if destination.partial:
                    options["partialFilterExpression"] = {key: {"$gt": ""}}
                names.append(self.database[collection].create_index(key, **options))
        except ConnectionFailure as exc:
            logger.warning("No unique index on %s.%s yet: %s", collection, key, exc)
            self.away = True
            return
        except PyMongoError as exc:
            self._indexed[collection, key] = None
            logger.warning(
                "MongoDB would not make a unique index on %s.%s (%s): its items are upserted "
                "on %s without one (the update-pipeline form; two workers storing a new key at "
                "once may store it twice). Remove the duplicates or the conflicting index, or "
                "store them elsewhere (MONGO_COLLECTIONS)",
                collection,
                key,
                str(exc)[:300],
                key,
            )
            return
        # No hint on a partial index: a server may refuse one it cannot prove the query within.
        self._indexed[collection, key] = "" if destination.partial else names[0]

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
                outcome = self._stage(
                    collection, [writes[p].inserted(now) for p in insertable], duplicates=False
                )
            except ConnectionFailure as exc:
                return self._spill(collection, writes, now, exc)
            self.count(collection, len(insertable), outcome)
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
            outcome = self._stage(collection, first, duplicates=False)
        except ConnectionFailure as exc:
            return failed | self._spill(collection, [writes[p] for p in rest], now, exc)
        self.count(collection, len(first), outcome, batch=batch)
        created += outcome.upserted
        again = [rest[q] for q in sorted(outcome.duplicates)]
        if plain:
            self._changed_share[collection] = len(again) / len(rest)
        failed |= _failures(writes, rest, outcome)
        if again:
            self.stats.inc_value("mongo/changed_writes", len(again))
            try:
                rewritten = self._stage(collection, [writes[p].tracked(now) for p in again])
            except ConnectionFailure as exc:
                return failed | self._spill(collection, [writes[p] for p in again], now, exc)
            self.count(collection, len(again), rewritten, batch=False)
            created += rewritten.upserted
            failed |= {writes[again[q]].index: reason for q, reason in rewritten.refused.items()}
        self._new_share[collection] = created / len(writes)
        return failed

    def _stage(
        self,
        collection: str,
        operations: Sequence[UpdateOne | InsertOne[dict[str, Any]]],
        duplicates: bool = True,
    ) -> Outcome:
        """The outcome of one form's bulk write (:meth:`bulk_write_with_retries`); a command
        MongoDB refuses whole for another reason than being unreachable (not authorized, a full
        disk: it would refuse it again, from the spill file too) refuses each of its writes
        with MongoDB's reason, and the writes of the forms before it stay stored."""
        try:
            return self.bulk_write_with_retries(collection, operations, duplicates)
        except ConnectionFailure:
            raise
        except (PyMongoError, BSONError) as exc:
            return refused_whole(exc, len(operations))

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
        logger.error(
            "MongoDB unavailable (%s): spilling %d items, and the next batches at once until "
            "it answers again",
            exc,
            len(writes),
        )
        self.away = True
        self._spill_away(collection, writes, now)
        return {}

    def _spill_away(self, collection: str, writes: list[Write], now: datetime) -> None:
        """Append ``writes`` to the spill file (fsynced), MongoDB being away."""
        # "at": when it was spilled, so a replay leaves alone a document written since, but for
        # what its fields' rules add to it ("stale"); "db": the database it was for, so only a
        # run storing there replays it.
        self.spill.append([self._spilled(collection, w, now) for w in writes])
        self.stats.inc_value("mongo/spilled", len(writes))

    def _spilled(self, collection: str, write: Write, now: datetime) -> dict[str, Any]:
        """The spill file's record of ``write``."""
        record: dict[str, Any] = {"collection": collection, "filter": write.selector}
        record["update"] = write.history(now)
        if (stale := stale_update(write.document, write.rules)) is not None:
            record["stale"] = stale
        return record | {"at": now, "db": self.database.name}

    def bulk_write_with_retries(
        self,
        collection: str,
        operations: Sequence[UpdateOne | InsertOne[dict[str, Any]]],
        duplicates: bool = True,
    ) -> Outcome:
        """The outcome of the unordered bulk write, tried again on transient errors (duplicate
        keys only if ``duplicates``); not when no MongoDB server answers at all
        (``nothing_reachable``): the caller spills it and holds MongoDB away at once."""
        for attempt in range(self.retry_times + 1):
            last = attempt == self.retry_times
            try:
                return written(self.database[collection].bulk_write(operations, ordered=False))
            except BulkWriteError as exc:
                if last or not transient(exc, duplicates):
                    return refused(exc, len(operations))
            except ConnectionFailure as exc:
                if last or self.stopping() or nothing_reachable(exc, self.database.client):
                    raise
            self.stats.inc_value("mongo/retries")
            time.sleep(min(8.0, 0.25 * 2**attempt))  # writer thread: the reactor runs on
        raise AssertionError("unreachable")

    def count(self, collection: str, operations: int, outcome: Outcome, batch: bool = True) -> None:
        stored = operations - len(outcome.refused)
        if batch:
            self.stats.inc_value("mongo/batches")
        self.stats.inc_value("mongo/items", stored)
        self.stats.inc_value(f"mongo/items/{collection}", stored)
        self.stats.inc_value("mongo/upserted", outcome.upserted)
        self.stats.inc_value("mongo/modified", outcome.modified)


@dataclass(frozen=True)
class Write:
    """One document of a batch, ready to write: ``index`` is its position in the batch,
    ``selector`` its unique key, ``unset`` the fields its upsert removes (``_truncated`` from a
    document stored trimmed before)."""

    index: int
    selector: dict[str, Any]
    document: dict[str, Any]
    unset: tuple[str, ...] = ()
    rules: FieldRules = NO_RULES  # how its item class's fields meet the stored ones

    def first(self, now: datetime, unique_index: str | None) -> UpdateOne:
        """The plain upsert matching the stored document by key and hash, if the key has a
        unique index (named, it is the query's hint: the hash in the filter leaves the server's
        planner nothing to choose), the document is whole and its field names are names to
        ``$set`` (``changes.literal_names``); else the pipeline form."""
        if unique_index is None or TRUNCATED_FIELD in self.document:
            return self.tracked(now)
        if literal_names(self.document):  # names $set would read as paths: the pipeline's
            return self.tracked(now)
        selector = same_content_filter(self.selector, self.document, self.rules)
        update = same_content_update(self.selector, self.document, now, self.rules)
        return UpdateOne(selector, update, upsert=True, hint=unique_index or None)

    def inserted(self, now: datetime) -> InsertOne[dict[str, Any]]:
        """The insert of the document as new (refused as a duplicate key when its key is
        stored): for a key with a unique index only."""
        return InsertOne(new_document(self.selector, self.document, now))

    def tracked(self, now: datetime) -> UpdateOne:
        """The pipeline upsert, right whatever is stored."""
        return UpdateOne(self.selector, self.history(now), upsert=True)

    def history(self, now: datetime) -> list[dict[str, Any]]:
        return history_update(self.document, now, self.unset, self.rules)


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
