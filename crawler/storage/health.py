"""What an operator sees of a worker's storage: whether it holds MongoDB away, and how many
items it spilled that wait to be replayed.

``MongoPipeline`` hands the crawl a reader of its writes (:func:`watch`); the monitor reads it
(:func:`health_of`) for the worker's heartbeat (``scrapy status``) and its ``/metrics``
(``crawler_mongo_away``, ``crawler_mongo_spilled_items``) and for the fleet's record of
spilled items (``crawler.storage.waiting``). Read from any thread: plain values, no I/O.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from scrapy.crawler import Crawler

    from crawler.storage.bulk import BulkWrites

ATTRIBUTE = "_crawler_storage_health"


@dataclass(frozen=True)
class StorageHealth:
    """``away``: a batch found MongoDB unavailable and no ping found it back since (batches are
    spilled at once); ``spilled``: items in this worker's spill file not replayed yet;
    ``path``: that file; ``replayed``: the names of the files of dead workers this worker
    replayed and removed (``crawler.storage.waiting`` clears what the fleet was told of them)."""

    away: bool = False
    spilled: int = 0
    path: str = ""
    replayed: tuple[str, ...] = ()

    @classmethod
    def of(cls, writes: BulkWrites | None) -> StorageHealth:
        """The health of ``writes`` (None before the pipeline opened: nothing to say)."""
        if writes is None:
            return cls()
        spill = writes.spill
        replayed = tuple(path.name for path in spill.replayed_orphans)
        return cls(writes.away, spill.waiting, str(spill.path.absolute()), replayed)


def watch(crawler: Crawler, read: Callable[[], StorageHealth]) -> None:
    """Let the crawl's monitor read the storage's health with ``read``."""
    setattr(crawler, ATTRIBUTE, read)


def health_of(crawler: Crawler) -> StorageHealth | None:
    """The storage's health, None when no pipeline watches it (another item pipeline)."""
    read: Callable[[], StorageHealth] | None = crawler.__dict__.get(ATTRIBUTE)
    return None if read is None else read()
