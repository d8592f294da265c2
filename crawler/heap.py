"""Full garbage collections that leave the start-up heap alone.

CPython's collector walks every object it tracks at each full (oldest-generation) collection.
In a crawl most of them are what was loaded at start (the modules, classes and functions of
Scrapy, Twisted, pymongo, redis, lxml...), which never become garbage. A full collection runs
on the reactor thread, inside whatever allocation triggered it, and stops the reactor for as
long as the walk takes: tens of milliseconds on a loaded 2-core machine
(``bench/mongo_pipeline.py`` saw its longest stall drop from about 70 ms to 24 ms with the
start-up heap frozen). :class:`FreezeStartupHeap` collects once and then calls
``gc.freeze()`` when the engine starts: what exists then moves to a permanent generation that
later collections skip; everything allocated afterwards is collected as before. Turn it off
with ``EXTENSIONS = {"crawler.extensions.FreezeStartupHeap": None}``.
"""

from __future__ import annotations

import gc
import logging
from typing import TYPE_CHECKING

from scrapy import signals

if TYPE_CHECKING:
    from scrapy.crawler import Crawler

logger = logging.getLogger(__name__)


def freeze_startup_heap() -> int:
    """Collect the garbage there is, then freeze every object left; how many were frozen."""
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()


class FreezeStartupHeap:
    """Extension: :func:`freeze_startup_heap` at ``engine_started``."""

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> FreezeStartupHeap:
        extension = cls()
        crawler.signals.connect(extension.engine_started, signal=signals.engine_started)
        return extension

    def engine_started(self) -> None:
        frozen = freeze_startup_heap()
        logger.debug("Froze the %d objects of the start-up heap out of full collections", frozen)
