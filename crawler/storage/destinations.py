"""Where an item is stored in MongoDB: its collection and the field that keys its upserts.

An item says so itself, with ``collection`` and ``unique_key`` attributes on its class (every
item class of this project does, and so can any dataclass, attrs class or ``scrapy.Item``).
Any other item (a dict, someone else's item class) is stored where MONGO_COLLECTIONS says, by
the item's class name first (``"dict"``, ``"BookItem"``), then by the spider's name; a
destination of ``""`` passes such items on unstored (another pipeline stores them). An item
nothing is declared for goes to the collection named after the spider: upserted on its
``url`` when it has one (a non-empty string), else inserted as a new document; the first such
item of each class is logged at INFO with where it went.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping
from datetime import datetime
from decimal import Decimal, DecimalException
from functools import cache
from typing import Any

from bson import ObjectId
from bson.decimal128 import Decimal128
from itemadapter import ItemAdapter
from itemadapter.adapter import DataclassAdapter

from crawler.config.values import Destination
from crawler.items import STORED_ITEM_CLASSES

logger = logging.getLogger(__name__)

# The field the spider's own collection upserts on, when an item has it.
DEFAULT_KEY = "url"
# The key of an item inserted as a new document: MongoDB's own id, made for it.
INSERTED_KEY = "_id"


# Field values stored as they are (the common case, checked by type before anything else).
SCALARS = frozenset({str, int, float, bool, type(None), bytes, datetime, ObjectId})
# A dataclass field the item has no value for (deleted): left out, as ItemAdapter leaves it.
_MISSING = object()


class InvalidKey(Exception):
    """The item's unique key field is missing or empty."""


class Destinations:
    """The destination of each item: its class's own, else MONGO_COLLECTIONS's, else the
    spider's collection."""

    def __init__(self, declared: Mapping[str, str | Destination], spider: str) -> None:
        self.declared = dict(declared)
        self.spider = spider
        self._announced: set[str] = set()

    def of(self, item: Any) -> Destination | None:
        """Where ``item`` goes; None when it is declared not stored here."""
        own = _own_destination(item.__class__)
        if own is not None:
            return own
        for name in (type(item).__name__, self.spider):
            if name in self.declared:
                found = self.declared[name]
                return found if isinstance(found, Destination) else None
        self._announce(type(item).__name__)
        if _has_key(item, DEFAULT_KEY):
            return Destination(self.spider, DEFAULT_KEY, partial=True)
        return Destination(self.spider, INSERTED_KEY)

    def indexed(self) -> list[Destination]:
        """Destinations known before any item arrives, whose unique indexes are made at start."""
        known = [_own_destination(cls) for cls in STORED_ITEM_CLASSES]
        known += [found for found in self.declared.values() if isinstance(found, Destination)]
        return [destination for destination in known if destination is not None]

    def _announce(self, item_class: str) -> None:
        if item_class in self._announced:
            return
        self._announced.add(item_class)
        logger.info(
            "Storing %s items of spider %r in MongoDB collection %r, upserted on %s "
            "(inserted when they have none); MONGO_COLLECTIONS sets another",
            item_class,
            self.spider,
            self.spider,
            DEFAULT_KEY,
        )


def key_of(item: Any, destination: Destination) -> Any:
    """The item's unique key, present and not empty (else InvalidKey); for an item to insert,
    a new ``_id`` unless it has its own. Cheap: it runs on the reactor for every item."""
    try:
        key = _field(item, destination.unique_key)
    except TypeError:
        raise InvalidKey(f"{type(item).__name__} is not an item (dict, dataclass...)") from None
    if key is None and destination.unique_key == INSERTED_KEY:
        return ObjectId()
    if key is None or key == "":
        raise InvalidKey(f"{type(item).__name__} has no {destination.unique_key!r}")
    return key


def document_of(item: Any) -> dict[str, Any]:
    """The item's fields as a dict, the items nested in it as dicts (``ItemAdapter.asdict``);
    a dict's and a dataclass's read directly, as ItemAdapter reads them (a dataclass's fields
    in their order, those it has), at a fraction of the cost."""
    if type(item) is dict:
        return {name: _plain(value) for name, value in item.items()}
    names = _dataclass_fields(item.__class__)
    if names is None:
        return {name: _plain(value) for name, value in ItemAdapter(item).items()}
    return {
        name: _plain(value)
        for name in names
        if (value := getattr(item, name, _MISSING)) is not _MISSING
    }


@cache
def _dataclass_fields(item_class: type) -> tuple[str, ...] | None:
    """The field names of a dataclass ItemAdapter reads as one (its first adapter that takes
    the class is the dataclass one: not for a dict or Scrapy item that is a dataclass too),
    None for any other class."""
    adapter = next((a for a in ItemAdapter.ADAPTER_CLASSES if a.is_item_class(item_class)), None)
    if adapter is not DataclassAdapter:
        return None
    return tuple(field.name for field in dataclasses.fields(item_class))


def field_of(item: Any, name: str) -> Any:
    """The item's field ``name`` (None if missing), read as its document is: a dict's key, a
    dataclass's attribute, any other item's through ItemAdapter."""
    try:
        return _field(item, name)
    except TypeError:
        return None


def _field(item: Any, name: str) -> Any:
    """The item's field ``name`` (None if missing): a dict's or a dataclass's directly, any
    other item's through ItemAdapter (TypeError if it is not an item)."""
    if type(item) is dict:
        return item.get(name)
    if name in getattr(type(item), "__dataclass_fields__", ()):
        return getattr(item, name, None)
    return ItemAdapter(item).get(name)


def _plain(value: Any) -> Any:
    """``value`` with the items nested in it as dicts, as ``ItemAdapter.asdict`` makes them;
    a scalar as it is, without asking every item adapter whether it is an item. A set, which
    BSON has no type for, is a sorted list (of values of several types: by type name, then
    repr), and a Decimal a Decimal128 (ValueError when it has more digits than one holds)."""
    if type(value) in SCALARS:
        return value
    if isinstance(value, dict):
        return {name: _plain(nested) for name, nested in value.items()}
    if isinstance(value, set | frozenset):
        return _sorted([_plain(nested) for nested in value])
    if isinstance(value, list | tuple):
        return value.__class__(_plain(nested) for nested in value)
    if isinstance(value, Decimal):
        return _decimal128(value)
    if ItemAdapter.is_item(value):
        return {name: _plain(nested) for name, nested in ItemAdapter(value).items()}
    return value


def _sorted(values: list[Any]) -> list[Any]:
    try:
        return sorted(values)
    except TypeError:  # values of several types, or unordered ones (dicts)
        return sorted(values, key=lambda value: (type(value).__name__, repr(value)))


def _decimal128(value: Decimal) -> Decimal128:
    try:
        return Decimal128(value)
    except DecimalException:
        raise ValueError(
            f"the Decimal {value!r:.80} does not fit MongoDB's Decimal128 "
            "(34 significant digits, exponents -6176 to 6111)"
        ) from None


def _has_key(item: Any, key: str) -> bool:
    """The item has a non-empty string at ``key``."""
    try:
        value = _field(item, key)
    except TypeError:
        return False
    return isinstance(value, str) and value != ""


@cache
def _own_destination(item_class: type) -> Destination | None:
    """The destination an item class declares (one per class, read once), None if none."""
    collection = _declared(item_class, "collection")
    key = _declared(item_class, "unique_key")
    if isinstance(collection, str) and isinstance(key, str) and collection and key:
        return Destination(collection, key)
    return None


def _declared(item_class: type, name: str) -> Any:
    """A class attribute of ``item_class``, or the default of its attrs field of that name (a
    slotted attrs class keeps its fields' defaults there, not as class attributes)."""
    value = getattr(item_class, name, None)  # a slotted class has its slot's descriptor
    if not isinstance(value, str):
        fields = getattr(item_class, "__attrs_attrs__", ())
        value = next((field.default for field in fields if field.name == name), None)
    return value
