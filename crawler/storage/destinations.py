"""Where an item is stored in MongoDB: its collection and the field that keys its upserts.

An item says so itself, with ``collection`` and ``unique_key`` attributes on its class (every
item class of this project does, and so can any dataclass, attrs class or ``scrapy.Item``). Any
other item (a dict, someone else's item class) is stored where MONGO_COLLECTIONS says, by the
item's class name first (``"dict"``, ``"BookItem"``), then by the spider's name. An item
nobody declared a destination for is an error: its request goes to the dead letters with the
reason ``item_error:UndeclaredItem``, to be requeued once MONGO_COLLECTIONS names it. A
destination of ``""`` passes such items on unstored (another pipeline stores them).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from itemadapter import ItemAdapter

from crawler.config.values import Destination
from crawler.items import STORED_ITEM_CLASSES


class UndeclaredItem(Exception):
    """No class attribute and no MONGO_COLLECTIONS entry says where the item goes."""


class QuietUndeclared(logging.Filter):
    """Drops Scrapy's own "Error processing <item>" line, and its traceback, for an item nobody
    declared: the pipeline says so once per item class, counts every one
    (``mongo/undeclared/<class>``) and its request is dead-lettered all the same."""

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        return not isinstance(error, UndeclaredItem)


# Where Scrapy logs an item a pipeline failed on (scrapy.core.scraper).
SCRAPER_LOGGER = "scrapy.core.scraper"
QUIET_UNDECLARED = QuietUndeclared()


class InvalidKey(Exception):
    """The item's unique key field is missing or empty."""


class Destinations:
    """The destination of each item: its class's own, else MONGO_COLLECTIONS's."""

    def __init__(self, declared: Mapping[str, str | Destination], spider: str) -> None:
        self.declared = dict(declared)
        self.spider = spider

    def of(self, item: Any) -> Destination | None:
        """Where ``item`` goes; None when it is declared not stored here."""
        own = _own_destination(type(item))
        if own is not None:
            return own
        for name in (type(item).__name__, self.spider):
            if name in self.declared:
                found = self.declared[name]
                return found if isinstance(found, Destination) else None
        raise UndeclaredItem(
            f"no MongoDB collection for {type(item).__name__} items of spider {self.spider!r}: "
            f"give the class collection and unique_key attributes, or set MONGO_COLLECTIONS, "
            f'e.g. {{"{type(item).__name__}": "<collection>:<key field>"}}'
        )

    def indexed(self) -> list[Destination]:
        """Destinations known before any item arrives, whose unique indexes are made at start."""
        known = [_own_destination(cls) for cls in STORED_ITEM_CLASSES]
        known += [found for found in self.declared.values() if isinstance(found, Destination)]
        return [destination for destination in known if destination is not None]


def document_of(item: Any, destination: Destination) -> dict[str, Any]:
    """The item's fields as a dict, its unique key present and not empty (else InvalidKey)."""
    try:
        document = ItemAdapter(item).asdict()
    except TypeError:
        raise InvalidKey(f"{type(item).__name__} is not an item (dict, dataclass...)") from None
    key = document.get(destination.unique_key)
    if key is None or key == "":
        raise InvalidKey(f"{type(item).__name__} has no {destination.unique_key!r}")
    return document


def _own_destination(item_class: type) -> Destination | None:
    collection = getattr(item_class, "collection", None)
    key = getattr(item_class, "unique_key", None)
    if isinstance(collection, str) and isinstance(key, str) and collection and key:
        return Destination(collection, key)
    return None
