"""Writing a prepared batch to MongoDB, in the writer thread, in the cheapest form that may do.

A batch of a collection whose last batch brought new documents is first written as inserts, the
documents whose key is stored, refused as duplicate keys, then as upserts. Each upsert is first
written in the plain form that matches an unchanged document through its hash; the documents
whose content changed, refused by it as duplicate keys, are written again in the update-pipeline
form that counts the change (``changes.py``). Transient errors are retried with backoff; what
MongoDB is unavailable for goes to the spill file, replayed when it answers again.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Collection, Sequence
from contextlib import closing
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import bson
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
)
from crawler.storage.documents import TRUNCATED_FIELD
from crawler.storage.spill import Record, Replay, SpillFile, keep_refused
from crawler.storage.writes import (
    UNCONFIRMED,
    Outcome,
    refused,
    refused_whole,
    transient,
    written,
)

if TYPE_CHECKING:
    from pathlib import Path

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
# Spilled records whose staleness one query asks about at most (a query is one BSON document,
# of at most 16 MiB, whatever a spill file holds).
STALE_QUERY_RECORDS = 200
# Seconds a replay of the own spill file that failed (not for MongoDB being away) waits.
REPLAY_PAUSE = 10


class BulkWrites:
    """The writes of prepared batches to ``database`` (from one thread: MongoWriter's writer),
    tried again MONGO_RETRY_TIMES times on transient errors, spilled to ``spill`` when MongoDB
    is unavailable. ``indexed``: the name of the unique index to hint for each (collection, key)
    whose index was found or made so far ("" for a partial one); this adds those it makes."""

    def __init__(
        self,
        database: Database[dict[str, Any]],
        indexed: dict[tuple[str, str], str],
        stats: StatsCollector,
        retry_times: int,
        spill: SpillFile,
        known: Collection[Destination] = (),
    ) -> None:
        self.database = database
        self.known = known  # destinations known before any item: a replay indexes them first
        self.stats = stats
        self.retry_times = retry_times
        self.spill = spill
        self._indexed = indexed  # (collection, unique key): index name
        self._none: set[tuple[str, str]] = set()  # those MongoDB would not index, said once
        # Per collection: batches written, the share of changed documents in the last batch
        # written in the plain form first, and the share of new documents in the last batch.
        self._batch_counts: dict[str, int] = {}
        self._changed_share: dict[str, float] = {}
        self._new_share: dict[str, float] = {}
        self._replay_after = 0.0  # monotonic time before which the own file is not replayed

    def write_or_spill(
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
        again with the next batch if MongoDB is away. One MongoDB will not make (the key stored
        twice already, another index of that name) is said once in a WARNING: the collection is
        written without it, in the update-pipeline form. ``_id`` has its own."""
        collection, key = destination.collection, destination.unique_key
        if key == "_id" or (collection, key) in self._indexed or (collection, key) in self._none:
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
            return
        except PyMongoError as exc:
            self._none.add((collection, key))
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
            outcome = self._stage(collection, first, duplicates=False)
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
                rewritten = self._stage(collection, [writes[p].tracked(now) for p in again])
            except ConnectionFailure as exc:
                return failed | self._spill(collection, [writes[p] for p in again], now, exc)
            self._count(collection, len(again), rewritten, batch=False)
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
        """The outcome of one form's bulk write (:meth:`_bulk_write_with_retries`); a command
        MongoDB refuses whole for another reason than being unreachable (not authorized, a full
        disk: it would refuse it again, from the spill file too) refuses each of its writes
        with MongoDB's reason, and the writes of the forms before it stay stored."""
        try:
            return self._bulk_write_with_retries(collection, operations, duplicates)
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
        logger.error("MongoDB unavailable (%s): spilling %d items", exc, len(writes))
        # "at": when it was spilled, so a replay leaves alone a document written since; "db":
        # the database it was for, so only a run storing there replays it.
        self.spill.append(
            [
                {"collection": collection, "filter": w.selector, "update": w.history(now)}
                | {"at": now, "db": self.database.name}
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
        for attempt in range(self.retry_times + 1):
            last = attempt == self.retry_times
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

    def replay_own(self) -> None:
        """Replay this worker's spill file if MongoDB answers; a chunk it cannot take now (or
        that fails) waits, with the rest, for the next try."""
        if not self.spill.pending() or time.monotonic() < self._replay_after:
            return
        try:
            self.database.client.admin.command("ping")
        except PyMongoError:
            return
        replay = self.spill.own()
        try:
            self._replay(replay)
        except (PyMongoError, BSONError):
            logger.exception(
                "Could not replay spill file %s; trying again in %d s", replay.path, REPLAY_PAUSE
            )
            self._replay_after = time.monotonic() + REPLAY_PAUSE
        finally:
            self.spill.replayed(replay)

    def replay_orphans(self) -> None:
        """Replay and remove the spill files dead workers left, each under its lock (see
        ``spill.py``); stop at the first one MongoDB cannot take now (the rest wait for the
        next start). A file whose replay fails otherwise is named and left for later."""
        with closing(self.spill.orphans()) as orphans:
            for path, replay in orphans:
                try:
                    replayed = self._replay(replay)
                except (PyMongoError, BSONError):
                    logger.exception("Could not replay spill file %s; it is left for later", path)
                    continue
                if replayed is None:
                    continue
                if not replayed:
                    return
                path.unlink(missing_ok=True)

    def _replay(self, replay: Replay) -> bool | None:
        """Write the records of the spill file ``replay`` reads, a chunk at a time, each marked
        replayed once stored; False when MongoDB cannot take or confirm a chunk now (it waits,
        with the rest), None when the file's records are for another database (left for a run
        storing there). Records MongoDB refuses (a validation rule, another unique index) are
        kept in ``<file>.refused``, named in an ERROR, not dropped with the file."""
        stored = 0
        try:
            for records in replay.chunks():
                if (other := _other_database(records, self.database.name)) is not None:
                    logger.warning(
                        "Spill file %s holds items of MongoDB database %s: left for a run "
                        "that stores into it (MONGO_DATABASE)",
                        replay.path,
                        other,
                    )
                    return None
                chunk = self._replay_chunk(records, replay.path)
                if chunk is None:
                    return False
                stored += chunk
                replay.done()
        finally:
            if stored:
                logger.info("Replayed %d spilled upserts into MongoDB", stored)
        return True

    def _replay_chunk(self, records: list[Record], path: Path) -> int | None:
        """The upserts of ``records`` stored (None: MongoDB cannot take or confirm them now);
        those MongoDB refuses are kept in ``<path>.refused``."""
        by_collection: dict[str, list[Record]] = {}
        for record in records:
            by_collection.setdefault(record["collection"], []).append(record)
        stored, refused = 0, []
        try:
            for collection, spilled in by_collection.items():
                replayed = self._replay_into(collection, spilled)
                if replayed is None:
                    return None
                stored += replayed[0]
                refused += replayed[1]
        except ConnectionFailure:
            return None
        if refused:
            keep_refused(path, [record for record, _ in refused], refused[0][1])
        self.stats.inc_value("mongo/replayed", stored)
        return stored

    def _replay_into(
        self, collection: str, spilled: list[Record]
    ) -> tuple[int, list[tuple[Record, str]]] | None:
        """The upserts of ``spilled`` written into ``collection``, and those refused with why
        (None: not confirmed). A record's upsert applies only where the stored document was not
        seen after it was spilled (a newer write wins: the record is stale, counted as
        ``mongo/replay_stale``)."""
        keys = {next(iter(record["filter"])) for record in spilled}
        for destination in self.known:  # a stale record meets its document's unique key
            if destination.collection == collection and destination.unique_key in keys:
                self._index(destination)
        operations = [UpdateOne(_unless_newer(r), r["update"], upsert=True) for r in spilled]
        try:
            outcome = self._bulk_write_with_retries(collection, operations, duplicates=False)
        except BSONError:  # one too large to send (DocumentTooLarge): each alone, to find it
            outcome = self._one_by_one(collection, operations)
        if any(reason.startswith(UNCONFIRMED) for reason in outcome.refused.values()):
            return None
        stale = self._newer_stored(collection, spilled, outcome.duplicates)
        refused = [(spilled[i], why) for i, why in outcome.refused.items() if i not in stale]
        self._count(collection, len(operations), outcome)
        self.stats.inc_value("mongo/replay_stale", len(stale))
        return len(operations) - len(outcome.refused), refused

    def _one_by_one(self, collection: str, operations: list[UpdateOne]) -> Outcome:
        """The outcome of writing each of ``operations`` on its own: one too large to send is
        refused with why, as MongoDB's refusals are."""
        upserted = modified = 0
        reasons: dict[int, str] = {}
        duplicates: set[int] = set()
        for position, operation in enumerate(operations):
            try:
                outcome = self._bulk_write_with_retries(collection, [operation], duplicates=False)
            except BSONError as exc:
                reasons[position] = f"{type(exc).__name__}: {str(exc)[:300]}"
                continue
            upserted, modified = upserted + outcome.upserted, modified + outcome.modified
            if 0 in outcome.refused:
                reasons[position] = outcome.refused[0]
            if outcome.duplicates:
                duplicates.add(position)
        return Outcome(upserted, modified, reasons, frozenset(duplicates))

    def _newer_stored(
        self, collection: str, spilled: list[Record], duplicates: Collection[int]
    ) -> set[int]:
        """The records (positions in ``spilled``) whose upsert met a duplicate key because
        their own document was seen since they were spilled (not another unique index's
        refusal): their documents read by key on its index, STALE_QUERY_RECORDS at a time."""
        newer = [i for i in sorted(duplicates) if "at" in spilled[i]]
        stale: set[int] = set()
        for first in range(0, len(newer), STALE_QUERY_RECORDS):
            by_key: dict[str, dict[Any, list[int]]] = {}
            for i in newer[first : first + STALE_QUERY_RECORDS]:
                ((key, value),) = spilled[i]["filter"].items()
                by_key.setdefault(key, {}).setdefault(_hashable(value), []).append(i)
            for key, positions in by_key.items():
                values = [spilled[group[0]]["filter"][key] for group in positions.values()]
                query = {key: {"$in": values}}
                for doc in self.database[collection].find(query, {key: 1, "last_seen": 1}):
                    for i in positions.get(_hashable(doc.get(key)), []):
                        if _seen_after(doc.get("last_seen"), spilled[i]["at"]):
                            stale.add(i)
        return stale


def _other_database(records: list[Record], ours: str) -> str | None:
    """The database other than ``ours`` a spill file's records were for, if they were (files
    of workers that did not name it are taken as ours)."""
    return next((db for r in records if (db := r.get("db", ours)) != ours), None)


def _seen_after(last_seen: Any, spilled_at: datetime) -> bool:
    """Whether a stored document's ``last_seen`` is after a record's spill time (as the
    server's ``$gt`` between two dates)."""
    if not isinstance(last_seen, datetime):
        return False
    if last_seen.tzinfo is None:
        last_seen = last_seen.replace(tzinfo=UTC)
    if spilled_at.tzinfo is None:
        spilled_at = spilled_at.replace(tzinfo=UTC)
    return bool(last_seen > spilled_at)


def _hashable(value: Any) -> Any:
    """A dict key for a key's value (a list or dict by its BSON, as the server compares)."""
    try:
        hash(value)
    except TypeError:
        return bson.encode({"": value})
    return value


def _unless_newer(record: Record) -> dict[str, Any]:
    """A spilled record's filter, matching only a document not seen since it was spilled
    (records of older spill files, without their time, match as they are)."""
    if "at" not in record:
        return dict(record["filter"])
    return {**record["filter"], "last_seen": {"$not": {"$gt": record["at"]}}}


@dataclass(frozen=True)
class Write:
    """One document of a batch, ready to write: ``index`` is its position in the batch,
    ``selector`` its unique key, ``unset`` the fields its upsert removes (``_truncated`` from a
    document stored trimmed before)."""

    index: int
    selector: dict[str, Any]
    document: dict[str, Any]
    unset: tuple[str, ...] = ()
    least: tuple[str, ...] = ()  # fields whose stored value is the least ever stored
    volatile: tuple[str, ...] = ()  # the item's own fields left out of its change hash

    def first(self, now: datetime, unique_index: str | None) -> UpdateOne:
        """The plain upsert matching the stored document by key and hash, if the key has a
        unique index (named, it is the query's hint: the hash in the filter leaves the server's
        planner nothing to choose), the document is whole and its field names are names to
        ``$set`` (``changes.literal_names``); else the pipeline form."""
        if unique_index is None or TRUNCATED_FIELD in self.document:
            return self.tracked(now)
        if literal_names(self.document):  # names $set would read as paths: the pipeline's
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
