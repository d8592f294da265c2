"""The start-up heap is frozen out of full garbage collections once the engine starts."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest
from scrapy import signals
from scrapy.utils.test import get_crawler

import crawler.settings as project
from crawler.heap import FreezeStartupHeap


@pytest.fixture
def unfrozen() -> Iterator[None]:
    gc.unfreeze()
    yield
    gc.unfreeze()


@pytest.mark.usefixtures("unfrozen")
def test_the_engine_start_freezes_what_exists() -> None:
    assert "crawler.extensions.FreezeStartupHeap" in project.EXTENSIONS
    crawler = get_crawler()
    extension = FreezeStartupHeap.from_crawler(crawler)  # noqa: F841  (signals hold weak refs)
    gc.unfreeze()  # what an earlier test in this process froze (an in-process crawl's start)
    assert gc.get_freeze_count() == 0
    crawler.signals.send_catch_log(signals.engine_started)
    assert gc.get_freeze_count() > 1000  # the modules and classes loaded so far
    frozen = gc.get_freeze_count()
    made_later: list[list[int]] = [[] for _ in range(100)]
    del made_later
    gc.collect()  # what is made later is collected as before, never frozen
    assert gc.get_freeze_count() == frozen
