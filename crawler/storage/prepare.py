"""Preparing a batch's writes, in the preparer thread: each item's document, its change hash,
trimmed to fit MONGO_MAX_DOCUMENT_BYTES (``documents.py``), its fields ready to meet the stored
ones by its class's rules (``rules.py``). An item whose document cannot be made fails alone."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from crawler.storage.bulk import Write
from crawler.storage.changes import marked_trimmed, with_change_hash
from crawler.storage.destinations import document_of
from crawler.storage.documents import TRUNCATED_FIELD, DocumentTooLarge, fit
from crawler.storage.rules import FieldRules, distinct, elements

if TYPE_CHECKING:
    from scrapy.statscollectors import StatsCollector

logger = logging.getLogger(__name__)

# Items prepared between two offers of the GIL to the reactor thread (about a millisecond of
# work): the reactor, woken by a timer or I/O, runs at once instead of waiting for the
# interpreter's switch interval (5 ms) each time it needs the GIL back.
PREPARE_SLICE = 16
# (filter, the item (or SeenAgain), its class's field rules, its values of their merged fields)
Upsert = tuple[dict[str, Any], Any, FieldRules, dict[str, Any]]


@dataclass(frozen=True)
class SeenAgain:
    """The items of one key seen in one batch, in the order seen: written as one document that
    holds the fields of all, the later's value where two have one, as writing them one after
    another would leave them (each write sets its fields and leaves the others stored). Their
    documents are made in the preparer thread, as a lone item's."""

    items: tuple[Any, ...]


def seen_again(earlier: Any, later: Any) -> SeenAgain:
    """What a batch holds for a key once ``later`` joins what it held (``earlier``)."""
    before = earlier.items if isinstance(earlier, SeenAgain) else (earlier,)
    return SeenAgain((*before, later))


class BatchPreparer:
    """Makes the writes of batches of upserts, documents at most ``max_document_bytes``."""

    def __init__(self, max_document_bytes: int, stats: StatsCollector) -> None:
        self.max_document_bytes = max_document_bytes
        self.stats = stats

    def prepare_batch(
        self, collection: str, upserts: list[Upsert]
    ) -> tuple[list[Write], dict[int, str]]:
        """The writes of the upserts, and those that cannot be written, by position: reason."""
        writes: list[Write] = []
        failed: dict[int, str] = {}
        for index, (selector, item, rules, values) in enumerate(upserts):
            if index and index % PREPARE_SLICE == 0:
                time.sleep(0)  # the GIL to the reactor thread if it waits for it
            try:
                writes.append(self.prepare(index, collection, selector, item, rules, values))
            except DocumentTooLarge as exc:
                self.stats.inc_value("mongo/too_large")
                failed[index] = str(exc)
            except Exception as exc:  # this item's alone: its batch is written all the same
                self.stats.inc_value("mongo/unstorable")
                failed[index] = unstorable(exc)
        return writes, failed

    def prepare(
        self,
        index: int,
        collection: str,
        selector: dict[str, Any],
        item: Any,
        rules: FieldRules,
        values: dict[str, Any],
    ) -> Write:
        """The write of the item's document (its merged fields' ``values`` over its own) with
        its change hash, trimmed to fit. A least field without a value (None) is left out of
        what is written, so the value stored stays: MongoDB's ``$min`` would store null (the
        least of all values) in the plain form, and pass over it in the pipeline form."""
        ((unique_key, key),) = selector.items()
        document = with_change_hash(_merged_document(item, rules, values), rules.unhashed)
        fitted = fit(document, self.max_document_bytes, unique_key)
        unwritten = {name for name in rules.least if values.get(name) is None}
        if unique_key == "_id":
            unwritten.add("_id")
        if unwritten:
            fitted = {name: value for name, value in fitted.items() if name not in unwritten}
        if TRUNCATED_FIELD not in fitted:
            return Write(index, selector, fitted, (TRUNCATED_FIELD,), rules)
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
        return Write(index, selector, fitted, rules=rules)


def _merged_document(item: Any, rules: FieldRules, values: dict[str, Any]) -> dict[str, Any]:
    """The item's document (those of the items SeenAgain, the later's fields over the
    earlier's) with its merged fields' values, a union field's elements each once."""
    document: dict[str, Any] = {}
    for each in item.items if isinstance(item, SeenAgain) else (item,):
        document.update(document_of(each))
    document.update(document_of(values))
    for name in rules.union:
        document[name] = distinct(elements(document[name]))
    return document


def unstorable(exc: BaseException) -> str:
    """Why an item's document could not be made (a value BSON has no type for, a key that is
    not a string, nesting deeper than Python reads, an item that holds itself)."""
    reason = f"{type(exc).__name__}: {exc}"[:300]
    if isinstance(exc, RecursionError):
        return f"cannot be stored, nested too deeply or holding itself ({reason})"
    return f"cannot be stored: {reason}"
