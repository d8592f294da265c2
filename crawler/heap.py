"""Full garbage collections that leave the start-up heap alone.

A full collection walks every tracked object, most of them loaded at start (the modules and
classes of Scrapy, Twisted, pymongo...) and never garbage, and stops the reactor meanwhile: tens
of milliseconds on a loaded 2-core machine (``bench/mongo_pipeline.py``: longest stall 70 ms, 24
with the heap frozen). :class:`FreezeStartupHeap` collects once and calls ``gc.freeze()`` when
the engine starts, so later collections skip what exists then. Turn it off with
``EXTENSIONS = {"crawler.extensions.FreezeStartupHeap": None}``.
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
