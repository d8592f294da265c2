"""The upsert that keeps a document's history: when it was first and last seen, when its
content last changed and how many times it did.

Every document carries ``change_hash``, the digest of its fields without the volatile ones
(:func:`item_hash`). The upsert is an update pipeline, so MongoDB
compares the stored hash with the new one in the same write: a different hash sets
``last_changed`` and adds one to ``change_count``; an equal one leaves both. A new document
gets ``first_seen`` = ``last_changed`` = now and ``change_count`` 0; a document stored before
hashes were kept gets its first hash without counting a change.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Collection, Mapping
from datetime import datetime
from typing import Any

CHANGE_HASH = "change_hash"
# Fields the pipeline writes itself; an item's own fields of these names are kept but ignored.
HISTORY_FIELDS = ("first_seen", "last_seen", "last_changed", "change_count", CHANGE_HASH)
# Fields that differ on every fetch (when it was fetched, how long it took) and never count as
# a change, unless an item class names its own with a ``volatile_fields`` attribute.
VOLATILE_FIELDS = frozenset({"fetched_at", "checked_at", "scraped_at", "response_time"})


def with_change_hash(document: dict[str, Any], volatile: Collection[str]) -> dict[str, Any]:
    """``document`` with its ``change_hash``."""
    document[CHANGE_HASH] = item_hash(
        {name: value for name, value in document.items() if name not in HISTORY_FIELDS}, volatile
    )
    return document


def history_update(
    document: Mapping[str, Any], now: datetime, unset: Collection[str] = ()
) -> list[dict[str, Any]]:
    """The update pipeline that stores ``document`` (with its ``change_hash``) and its history,
    and removes the ``unset`` fields."""
    digest = document[CHANGE_HASH]
    known = {"$ne": [{"$type": f"${CHANGE_HASH}"}, "missing"]}
    changed = {"$and": [known, {"$ne": [f"${CHANGE_HASH}", digest]}]}
    fields = {name: {"$literal": value} for name, value in document.items()}
    stages: list[dict[str, Any]] = [
        {
            "$set": {
                "first_seen": {"$ifNull": ["$first_seen", {"$literal": now}]},
                "last_changed": {
                    "$cond": [changed, {"$literal": now}, {"$ifNull": ["$last_changed", now]}]
                },
                "change_count": {
                    "$add": [{"$ifNull": ["$change_count", 0]}, {"$cond": [changed, 1, 0]}]
                },
            }
        },
        {"$set": {**fields, "last_seen": {"$literal": now}}},
    ]
    if unset:
        stages.append({"$unset": sorted(unset)})
    return stages


def content_hash(items: Collection[Mapping[str, Any]], volatile: Collection[str] = ()) -> str:
    """A digest of what the items say, without their volatile fields: equal for the same
    content whatever the field order, different when any other field differs."""
    ignored = VOLATILE_FIELDS.union(volatile)
    documents = [
        {name: value for name, value in item.items() if name not in ignored} for item in items
    ]
    text = json.dumps(documents, sort_keys=True, default=_plain, separators=(",", ":"))
    return hashlib.blake2b(text.encode(), digest_size=12).hexdigest()


def item_hash(item: Mapping[str, Any], volatile: Collection[str] = ()) -> str:
    """:func:`content_hash` of one item."""
    return content_hash([item], volatile)


def _plain(value: Any) -> Any:
    """JSON for what json cannot write itself (bytes, datetimes, sets): their repr."""
    if isinstance(value, bytes | bytearray):
        return value.hex()
    if isinstance(value, set | frozenset):
        return sorted(map(repr, value))
    return repr(value)
