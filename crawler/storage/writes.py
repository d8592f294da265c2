"""What became of each write of a bulk write, and the write concern that makes it durable.

A ``bulk_write`` can store some documents of a batch and refuse others (a document over the
size limit, a validation rule, a unique index). Each refusal is kept with the position of its
upsert, so the pipeline fails exactly those items; a write concern error leaves every document
of the batch unconfirmed, so none of them counts as stored. A command refused whole (not
authorized, a full disk) refuses each of its writes with MongoDB's reason.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pymongo.errors import (
    BulkWriteError,
    ConnectionFailure,
    OperationFailure,
    ServerSelectionTimeoutError,
)

if TYPE_CHECKING:
    from pymongo import MongoClient
    from pymongo.results import BulkWriteResult

DUPLICATE_KEY = 11000
# How the reason of a write left unconfirmed by an unmet write concern begins.
UNCONFIRMED = "write concern not met"


@dataclass(frozen=True)
class Outcome:
    """Counts of one bulk write (``upserted``: the documents it created, by an insert or an
    upsert), the refused writes by position: reason, and the positions of those refused for a
    duplicate key."""

    upserted: int = 0
    modified: int = 0
    refused: dict[int, str] = field(default_factory=dict)
    duplicates: frozenset[int] = frozenset()


def written(result: BulkWriteResult) -> Outcome:
    return Outcome(result.inserted_count + result.upserted_count, result.modified_count)


def refused(exc: BulkWriteError, count: int) -> Outcome:
    """The outcome of a bulk write that raised: its write errors, and every upsert left
    unconfirmed when the write concern was not met."""
    details = exc.details
    errors = details.get("writeErrors", [])
    reasons = {int(error["index"]): describe(error) for error in errors}
    duplicates = frozenset(
        int(error["index"]) for error in errors if error.get("code") == DUPLICATE_KEY
    )
    concern = details.get("writeConcernErrors") or []
    if concern:
        unconfirmed = f"{UNCONFIRMED}: {describe(concern[0])}"
        reasons = {index: reasons.get(index, unconfirmed) for index in range(count)}
    upserted = int(details.get("nInserted", 0)) + int(details.get("nUpserted", 0))
    modified = int(details.get("nModified", 0))
    return Outcome(upserted, modified, reasons, duplicates)


def refused_whole(exc: Exception, count: int) -> Outcome:
    """The outcome of a bulk write of ``count`` writes whose command MongoDB refused whole, for
    another reason than being unreachable (not authorized, a full disk): each write refused
    with what MongoDB said."""
    if isinstance(exc, OperationFailure):
        details = dict(exc.details or {"code": exc.code, "errmsg": str(exc)})
        reason = f"MongoDB refused the write command: {describe(details)}"
    else:
        reason = f"MongoDB refused the write command: {type(exc).__name__}: {str(exc)[:300]}"
    return Outcome(refused=dict.fromkeys(range(count), reason))


def transient(exc: BulkWriteError, duplicates: bool = True) -> bool:
    """Worth writing the batch again: only an unmet write concern (a timeout), or only
    duplicate keys (two workers upserting one new key at once; the retry finds the document)
    unless ``duplicates`` is False (the caller writes those upserts again itself)."""
    errors = exc.details.get("writeErrors", [])
    if not errors:
        return bool(exc.details.get("writeConcernErrors"))
    return duplicates and all(error.get("code") == DUPLICATE_KEY for error in errors)


def nothing_reachable(exc: ConnectionFailure, client: MongoClient[dict[str, Any]]) -> bool:
    """Whether ``exc`` says no MongoDB server answers: a server selection timed out (the whole
    connect timeout) and the client's monitor knows none of its servers, each one it tried
    having refused or not answered. Retries would each wait the timeout out again: the batch is
    spilled at once, MongoDB held away (``probe.py`` looks for its return). A dropped connection
    (the server may answer the next try), a step-down or an election (a member answers, a
    primary comes) are retried. No I/O: the monitor's last look."""
    if not isinstance(exc, ServerSelectionTimeoutError):
        return False
    return not client.topology_description.known_servers


def describe(error: dict[str, Any]) -> str:
    name = error.get("codeName") or f"code {error.get('code')}"
    return f"{name}: {str(error.get('errmsg', ''))[:300]}"
