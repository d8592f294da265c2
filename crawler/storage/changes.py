"""The upserts that keep a document's history: when it was first and last seen, when its
content last changed and how many times it did.

Every document carries ``change_hash``, the digest of its fields without the volatile ones
(:func:`item_hash`). A different hash sets ``last_changed`` and adds one to ``change_count``;
an equal one leaves both. A new document gets ``first_seen`` = ``last_changed`` = now and
``change_count`` 0; a document stored before hashes were kept gets its first hash without
counting a change.

Three forms of the write say so. :func:`history_update` is an update pipeline in which MongoDB
compares the stored hash with the new one: it is right for any stored document, at the price of
an aggregation per write. :func:`same_content_update` is a plain update, for the filter
``{<key>: ..., "change_hash": <new hash>}`` (:func:`same_content_filter`): it matches a stored
document whose content did not change, and leaves its content alone (it sets ``last_seen``
and the volatile fields; the whole content when the hash is marked as one whose values
another value may share), or inserts a new one; a stored document whose content changed (or
that has no hash yet) is not matched, so its insert fails on the key's unique index (a
duplicate key), and the writer writes that document again with :func:`history_update`.
:func:`new_document` is the document a key not stored yet is inserted as, the history of its
first sighting with it (what either upsert inserts); its insert fails on the key's unique index
when the key is stored, and the writer writes that document again with an upsert. Only a
collection with a unique index on the key may take the plain form or the insert: without one,
they would add a second document. A trimmed document never takes the plain form, and its hash
is stored with a mark, so that the same content stored whole later is not matched by the plain
form (which would leave its ``_truncated``).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Collection, Mapping
from datetime import datetime
from typing import Any

from crawler.storage.rules import NO_RULES, FieldRules

CHANGE_HASH = "change_hash"
# The suffix of the change_hash of a document stored trimmed.
TRIMMED = "~"
# The suffix of the change_hash of a document holding a value its digest may not tell from
# another (an object, whose keys the digest sorts; bytes, read as their hex digits; a datetime or
# any other type, read as its repr): see :func:`_told_apart`.
LOSSY = "*"
# The digest's size in bytes (BLAKE2b), and its length in hex digits before either suffix.
DIGEST_BYTES = 12
DIGEST_CHARS = 2 * DIGEST_BYTES
# Fields :func:`literal_names` finds set by one stage of an update pipeline, nested one in
# another: few enough that the stage stays far within MongoDB's nesting depth (100), while an
# item with thousands of them stays within its number of stages (1,000).
NAMES_PER_STAGE = 20
# Fields the pipeline writes itself; an item's own fields of these names are kept but ignored.
HISTORY_FIELDS = ("first_seen", "last_seen", "last_changed", "change_count", CHANGE_HASH)
# Fields that differ on every fetch (when it was fetched, how long it took, the crawl job that
# fetched it) and never count as a change; an item class names more with a ``volatile_fields``
# attribute.
VOLATILE_FIELDS = frozenset({"fetched_at", "checked_at", "scraped_at", "response_time", "job"})


def with_change_hash(document: dict[str, Any], volatile: Collection[str]) -> dict[str, Any]:
    """``document`` with its ``change_hash``: the digest of its content, marked LOSSY when a
    value of it may hash as another value would."""
    content = {name: value for name, value in document.items() if name not in HISTORY_FIELDS}
    digest = item_hash(content, volatile)
    ignored = VOLATILE_FIELDS.union(volatile)
    told = all(_told_apart(value) for name, value in content.items() if name not in ignored)
    document[CHANGE_HASH] = digest if told else digest + LOSSY
    return document


def history_update(
    document: Mapping[str, Any],
    now: datetime,
    unset: Collection[str] = (),
    rules: FieldRules = NO_RULES,
) -> list[dict[str, Any]]:
    """The update pipeline that stores ``document`` (with its ``change_hash``) and its history,
    and removes the ``unset`` fields; its fields meet the stored ones by the item class's
    ``rules`` (``rules.py``): a least field keeps the least value stored, a kept field without
    a value the stored one, a union field adds its elements to the stored ones."""
    content = document[CHANGE_HASH][:DIGEST_CHARS]  # the content's digest alone
    known = {"$ne": [{"$type": f"${CHANGE_HASH}"}, "missing"]}
    stored = {"$substrCP": [f"${CHANGE_HASH}", 0, len(content)]}
    differs = [{"$ne": [stored, content]}, *_kept_changes(document, rules)]
    changed = {"$and": [known, {"$or": differs}]}
    fields = {name: _stored_by_rule(name, value, rules) for name, value in document.items()}
    named = {name: fields.pop(name) for name in literal_names(fields)}
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
    stages += _named_stages(named)
    if unset:
        stages.append({"$unset": sorted(unset)})
    return stages


def _named_stages(named: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The stages that set the fields of ``named`` (expressions by field name) each by its
    name, not read as a path or an operator (``$setField``), NAMES_PER_STAGE a stage."""
    stages = []
    pending = list(named.items())
    for first in range(0, len(pending), NAMES_PER_STAGE):
        document_so_far: Any = "$$ROOT"
        for name, value in pending[first : first + NAMES_PER_STAGE]:
            field = {"field": {"$literal": name}, "input": document_so_far, "value": value}
            document_so_far = {"$setField": field}
        stages.append({"$replaceWith": document_so_far})
    return stages


def stale_update(document: Mapping[str, Any], rules: FieldRules) -> list[dict[str, Any]] | None:
    """The update pipeline that gives a stored document newer than ``document`` (a spilled
    write replayed after a later write of the same key) what ``document``'s fields contribute
    whatever the order of the writes: a least field its value where it is less, a kept field
    its value where none is stored, a union field its elements not stored yet. Its history,
    its hash and its other fields stay the newer write's. None when it contributes nothing."""
    fields = {
        name: _contributed(name, value, rules)
        for name, value in document.items()
        if name in rules.merged_fields and value is not None and value != []
    }
    if not fields:
        return None
    named = {name: fields.pop(name) for name in literal_names(fields)}
    stages: list[dict[str, Any]] = [{"$set": fields}] if fields else []
    return stages + _named_stages(named)


def _contributed(name: str, value: Any, rules: FieldRules) -> Any:
    """The expression of the value a stale write leaves in the field ``name``."""
    if name in rules.kept:
        return {"$ifNull": [_stored_field(name), {"$literal": value}]}
    return _stored_by_rule(name, value, rules)


def _stored_by_rule(name: str, value: Any, rules: FieldRules) -> Any:
    """The expression of the value the update pipeline stores in the field ``name``: the
    item's ``value``, or as the field's rule has it meet the stored one."""
    if name in rules.least:  # $min passes over a field not stored yet or null
        return {"$min": [_stored_field(name), {"$literal": value}]}
    if name in rules.kept and value is None:
        return {"$ifNull": [_stored_field(name), None]}
    if name in rules.union:
        return _union(_stored_field(name), value)
    return {"$literal": value}


def _union(stored: Any, elements: list[Any]) -> dict[str, Any]:
    """The stored list (a stored value that is no list as one element), then those of
    ``elements`` it does not hold."""
    absent = {"$eq": [{"$ifNull": [stored, None]}, None]}
    listed = {"$cond": [{"$isArray": stored}, stored, {"$cond": [absent, [], [stored]]}]}
    new = {"$not": [{"$in": ["$$this", listed]}]}
    return {"$concatArrays": [listed, {"$filter": {"input": {"$literal": elements}, "cond": new}}]}


def _kept_changes(document: Mapping[str, Any], rules: FieldRules) -> list[dict[str, Any]]:
    """Whether each kept field the document has a value for (and that is no volatile field)
    differs from the stored one: a change the change hash leaves out."""
    return [
        {"$ne": [_stored_field(name), {"$literal": document[name]}]}
        for name in _compared(document, rules)
    ]


def _compared(document: Mapping[str, Any], rules: FieldRules) -> list[str]:
    """The kept fields the document has a value for whose change is a change of content."""
    volatile = VOLATILE_FIELDS.union(rules.volatile)
    return [
        name
        for name in sorted(rules.kept)
        if document.get(name) is not None and name not in volatile
    ]


def literal_names(document: Mapping[str, Any]) -> list[str]:
    """The field names of ``document`` that an update's ``$set`` would read as a path or an
    operator, not as a name: empty, holding a dot (``"Wt. (lbs)"``) or starting with ``$``.
    Only the update pipeline stores them as named (``$setField``, MongoDB 5.0 or later); an
    insert stores them as they are."""
    return [name for name in document if not name or "." in name or name[0] == "$"]


def _stored_field(name: str) -> Any:
    """The expression of the stored field ``name`` in an update pipeline."""
    if literal_names({name: None}):
        return {"$getField": {"field": {"$literal": name}, "input": "$$ROOT"}}
    return f"${name}"


def same_content_filter(
    key: Mapping[str, Any], document: Mapping[str, Any], rules: FieldRules = NO_RULES
) -> dict[str, Any]:
    """The filter of :func:`same_content_update`: the key and the new hash, and what the
    fields the hash leaves out need for the plain form to store them right: each kept field's
    value, when it counts as a change (``$eq``: MongoDB refuses an ``$expr`` in an upsert's
    filter; a stored list holding the value is taken as equal), a least field not stored as
    null (``$min`` would keep the null), a union field stored as a list (``$addToSet`` adds to
    no other value). A document stored trimmed has its hash marked (:func:`marked_trimmed`), so
    it is not matched, and the pipeline form removes its ``_truncated`` when it is stored whole
    again."""
    selector: dict[str, Any] = {**key, CHANGE_HASH: document[CHANGE_HASH]}
    for name in _compared(document, rules):
        selector[name] = {"$eq": document[name]}  # an upsert inserts it so
    for name in rules.least.intersection(document):
        selector[name] = {"$not": {"$type": "null"}}
    for name in rules.union.intersection(document):
        selector[name] = {"$type": "array"}
    return selector


def marked_trimmed(document: dict[str, Any]) -> dict[str, Any]:
    """``document``, trimmed to fit (documents.py), with its hash marked so: the same content
    stored whole later does not match it in the plain form. The pipeline form compares the
    content's digest without the mark."""
    document[CHANGE_HASH] += TRIMMED
    return document


def same_content_update(
    selector: Mapping[str, Any],
    document: Mapping[str, Any],
    now: datetime,
    rules: FieldRules = NO_RULES,
) -> dict[str, Any]:
    """The plain update that stores ``document`` (not trimmed) over a stored one of the same
    content (:func:`same_content_filter`), or inserts it. A stored document of the same hash,
    unless the hash is marked LOSSY, holds the same values already: its content is written on
    insert only, with ``first_seen``, ``last_changed`` and ``change_count``. What is set is
    ``last_seen``, the volatile fields (the usual ones and the item class's), an item's own
    fields named like the history's and, under a LOSSY hash, the whole content; a least field
    keeps the least value stored, a kept field without a value the stored one (null on
    insert), a union field adds its elements to the stored ones."""
    unhashed = VOLATILE_FIELDS.union(rules.volatile, HISTORY_FIELDS)
    if document[CHANGE_HASH].endswith(LOSSY):
        unhashed = unhashed.union(document)
    # An upsert inserts its filter's fields itself (same_content_filter's equal ones).
    filtered = {*selector, CHANGE_HASH, *_compared(document, rules)}
    least = {name: document[name] for name in rules.least.intersection(document)}
    union = {name: {"$each": document[name]} for name in rules.union.intersection(document)}
    fresh: dict[str, Any] = {}
    same: dict[str, Any] = {}
    for name, value in document.items():
        if name in least or name in union or name in filtered:
            continue
        kept = name in rules.kept and value is None  # the stored value stays
        (fresh if name in unhashed and not kept else same)[name] = value
    update: dict[str, Any] = {"$set": {**fresh, "last_seen": now}}
    if least:
        update["$min"] = least
    if union:
        update["$addToSet"] = union
    first = {"first_seen": now, "last_changed": now, "change_count": 0}
    update["$setOnInsert"] = same | {name: at for name, at in first.items() if name not in fresh}
    return update


def _told_apart(value: Any) -> bool:
    """Whether the digest of ``value`` differs from that of any other value MongoDB would store
    differently: true of strings, numbers, booleans and null, and of lists of them, among
    values that are told apart too (a string hashes as bytes of its hex digits would, or an
    object of its repr: both mark their document LOSSY)."""
    if value is None or type(value) in (str, int, float, bool):
        return True
    return type(value) in (list, tuple) and all(_told_apart(element) for element in value)


def new_document(
    key: Mapping[str, Any], document: Mapping[str, Any], now: datetime
) -> dict[str, Any]:
    """``document`` (with its ``change_hash``) as a key not stored yet is inserted, as either
    upsert would insert it: its key, its fields, ``last_seen``, ``first_seen`` =
    ``last_changed`` = now and ``change_count`` 0 (an item's own fields of these names kept,
    as the upserts keep them)."""
    first = {"first_seen": now, "last_changed": now, "change_count": 0}
    return {**key, **first, **document, "last_seen": now}


def content_hash(items: Collection[Mapping[str, Any]], volatile: Collection[str] = ()) -> str:
    """A digest of what the items say, without their volatile fields: equal for the same
    content whatever the field order, different when any other field differs."""
    ignored = VOLATILE_FIELDS.union(volatile)
    documents = [
        {name: value for name, value in item.items() if name not in ignored} for item in items
    ]
    try:
        text = json.dumps(documents, sort_keys=True, default=_plain, separators=(",", ":"))
    except TypeError:  # an object whose keys json cannot sort ({1: "a", "b": 2}) or write
        text = json.dumps(_keys_ordered(documents), default=_plain, separators=(",", ":"))
    return hashlib.blake2b(text.encode(), digest_size=DIGEST_BYTES).hexdigest()


def item_hash(item: Mapping[str, Any], volatile: Collection[str] = ()) -> str:
    """:func:`content_hash` of one item."""
    return content_hash([item], volatile)


def _keys_ordered(value: Any) -> Any:
    """``value`` with each object made a list of its [key, value] pairs, ordered by the key's
    type name, then its text: the digest's form of content whose keys json cannot sort or
    write (keys of several types, or tuples). Content that json can sort keeps its own form,
    so the digests of string-keyed items are the same as ever."""
    if isinstance(value, dict):
        pairs = sorted(value.items(), key=lambda pair: (type(pair[0]).__name__, str(pair[0])))
        return [[_json_key(key), _keys_ordered(nested)] for key, nested in pairs]
    if isinstance(value, list | tuple):
        return [_keys_ordered(nested) for nested in value]
    return value


def _json_key(key: Any) -> Any:
    return key if key is None or type(key) in (str, int, float, bool) else repr(key)


def _plain(value: Any) -> Any:
    """JSON for what json cannot write itself (bytes, datetimes, sets): their repr."""
    if isinstance(value, bytes | bytearray):
        return value.hex()
    if isinstance(value, set | frozenset):
        return sorted(map(repr, value))
    return repr(value)
