"""Replaying spill files into MongoDB, in the writer thread, a chunk at a time.

A worker's own spill file is replayed once MongoDB answers again, the files of dead workers at
start (``spill.py``: the files, their locks and the progress each keeps). A spilled upsert
applies only where the stored document was not seen since it was spilled: a newer write wins,
but for what the spilled one's least, kept and union fields add to it, whatever the order of
the two (``changes.stale_update``): the lesser value, a value where none is stored, elements.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Collection
from contextlib import closing
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import bson
from bson.errors import BSONError
from pymongo import UpdateOne
from pymongo.errors import ConnectionFailure, PyMongoError

from crawler.storage.spill import Record, Replay, keep_refused
from crawler.storage.writes import UNCONFIRMED, Outcome

if TYPE_CHECKING:
    from pathlib import Path

    from crawler.storage.bulk import BulkWrites

logger = logging.getLogger(__name__)

# Spilled records whose staleness one query asks about at most (a query is one BSON document,
# of at most 16 MiB, whatever a spill file holds).
STALE_QUERY_RECORDS = 200
# Seconds a replay of the own spill file that failed (not for MongoDB being away) waits.
REPLAY_PAUSE = 10


class SpillReplay:
    """The replays of spill files through ``writes`` (the writer's :class:`BulkWrites`: its
    database, spill file, retries, stats and the destinations it indexes)."""

    def __init__(self, writes: BulkWrites) -> None:
        self.writes = writes
        self._replay_after = 0.0  # monotonic time before which the own file is not replayed

    def own(self) -> None:
        """Replay this worker's spill file if MongoDB answers; a chunk it cannot take now (or
        that fails) waits, with the rest, for the next try."""
        if not self.writes.spill.pending() or time.monotonic() < self._replay_after:
            return
        try:
            self.writes.database.client.admin.command("ping")
        except PyMongoError:
            return
        replay = self.writes.spill.own()
        try:
            self._replay(replay)
        except (PyMongoError, BSONError):
            logger.exception(
                "Could not replay spill file %s; trying again in %d s", replay.path, REPLAY_PAUSE
            )
            self._replay_after = time.monotonic() + REPLAY_PAUSE
        finally:
            self.writes.spill.replayed(replay)

    def orphans(self) -> None:
        """Replay and remove the spill files dead workers left, each under its lock (see
        ``spill.py``); stop at the first one MongoDB cannot take now (the rest wait for the
        next start). A file whose replay fails otherwise is named and left for later."""
        with closing(self.writes.spill.orphans()) as orphans:
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
                self.writes.spill.replayed_orphans.append(path)

    def _replay(self, replay: Replay) -> bool | None:
        """Write the records of the spill file ``replay`` reads, a chunk at a time, each marked
        replayed once stored; False when MongoDB cannot take or confirm a chunk now (it waits,
        with the rest), None when the file's records are for another database (left for a run
        storing there). Records MongoDB refuses (a validation rule, another unique index) are
        kept in ``<file>.refused``, named in an ERROR, not dropped with the file."""
        stored = 0
        try:
            for records in replay.chunks():
                if (other := _other_database(records, self.writes.database.name)) is not None:
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
        self.writes.stats.inc_value("mongo/replayed", stored)
        return stored

    def _replay_into(
        self, collection: str, spilled: list[Record]
    ) -> tuple[int, list[tuple[Record, str]]] | None:
        """The upserts of ``spilled`` written into ``collection``, and those refused with why
        (None: not confirmed). A record's upsert applies only where the stored document was not
        seen after it was spilled (a newer write wins: the record is stale, counted as
        ``mongo/replay_stale``), which is given what the record's fields add to it."""
        keys = {next(iter(record["filter"])) for record in spilled}
        for destination in self.writes.known:  # a stale record meets its document's unique key
            if destination.collection == collection and destination.unique_key in keys:
                self.writes.index(destination)
        operations = [UpdateOne(_unless_newer(r), r["update"], upsert=True) for r in spilled]
        try:
            outcome = self.writes.bulk_write_with_retries(collection, operations, duplicates=False)
        except BSONError:  # one too large to send (DocumentTooLarge): each alone, to find it
            outcome = self._one_by_one(collection, operations)
        if any(reason.startswith(UNCONFIRMED) for reason in outcome.refused.values()):
            return None
        stale = self._newer_stored(collection, spilled, outcome.duplicates)
        added = self._add_to_newer(collection, [spilled[i] for i in sorted(stale)])
        if added is None:
            return None
        refused = [(spilled[i], why) for i, why in outcome.refused.items() if i not in stale]
        self.writes.count(collection, len(operations), outcome)
        self.writes.stats.inc_value("mongo/replay_stale", len(stale))
        return len(operations) - len(outcome.refused), refused + added

    def _add_to_newer(
        self, collection: str, stale: list[Record]
    ) -> list[tuple[Record, str]] | None:
        """What the ``stale`` records' fields add to their newer documents written (a least
        value, a kept value where none is stored, a union's elements: ``record["stale"]``);
        those MongoDB refuses, with why (None: not confirmed)."""
        adding = [record for record in stale if "stale" in record]
        if not adding:
            return []
        operations = [UpdateOne(dict(record["filter"]), record["stale"]) for record in adding]
        outcome = self.writes.bulk_write_with_retries(collection, operations, duplicates=False)
        if any(reason.startswith(UNCONFIRMED) for reason in outcome.refused.values()):
            return None
        self.writes.stats.inc_value("mongo/replay_stale_added", len(adding) - len(outcome.refused))
        return [(adding[i], why) for i, why in outcome.refused.items()]

    def _one_by_one(self, collection: str, operations: list[UpdateOne]) -> Outcome:
        """The outcome of writing each of ``operations`` on its own: one too large to send is
        refused with why, as MongoDB's refusals are."""
        upserted = modified = 0
        reasons: dict[int, str] = {}
        duplicates: set[int] = set()
        for position, operation in enumerate(operations):
            try:
                outcome = self.writes.bulk_write_with_retries(
                    collection, [operation], duplicates=False
                )
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
                for doc in self.writes.database[collection].find(query, {key: 1, "last_seen": 1}):
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
