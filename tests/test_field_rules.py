"""How an item class's least fields meet the document stored before, in each form a write
takes (crawler/storage/changes.py, docs/storage.md)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from scrapy.statscollectors import StatsCollector
from scrapy.utils.test import get_crawler

from crawler.config.values import Destination
from crawler.items import PageItem
from crawler.pipelines import MongoPipeline
from crawler.storage.destinations import Destinations
from tests.harness import Mongo
from tests.mongo_config import pipeline_settings

URL = "https://shop.test/l"


def _store(
    mongo: Mongo, spill: Path, *items: Any, each: bool = False, failing: int = 0
) -> StatsCollector:
    """Store the items in a run of their own, at once (one batch) or ``each`` in a batch of its
    own: a dict subclass into ``listings`` on ``url``, an item of the project's where it says;
    ``failing`` of them fail. The run's stats."""
    names = {type(item).__name__ for item in items if isinstance(item, dict)}
    destinations = Destinations(dict.fromkeys(names, Destination("listings", "url")), "shop")
    config = pipeline_settings(mongo.uri, mongo.database, spill, flush_interval=0.1)
    stats = get_crawler().stats
    assert stats is not None
    pipeline = MongoPipeline(config, stats, "shop", destinations)

    async def scenario() -> list[Any]:
        await pipeline.open_spider()
        if each:
            outcomes = [await pipeline.process_item(item) for item in items]
        else:
            stored = (pipeline.process_item(item) for item in items)
            outcomes = await asyncio.gather(*stored, return_exceptions=True)
        await pipeline.close_spider()
        return outcomes

    outcomes = asyncio.run(asyncio.wait_for(scenario(), 60))
    failures = [outcome for outcome in outcomes if isinstance(outcome, BaseException)]
    assert len(failures) == failing, failures
    return stats


def _stored(mongo: Mongo, collection: str = "listings", url: str = URL) -> dict[str, Any]:
    found = mongo.db[collection].find_one({"url": url}, {"_id": 0})
    assert found is not None
    return dict(found)


# --- least fields -------------------------------------------------------------------------------


class Ranked(dict[str, Any]):
    least_fields = ("rank",)


class RankedByName(dict[str, Any]):
    """A least field whose name an update reads as a path: written in the $setField form."""

    least_fields = ("rank.best",)


def _page(depth: int, title: str = "t") -> PageItem:
    return PageItem(URL, "shop.test", 200, URL, depth, 1.0, "h", 1, 0, title=title)


@pytest.mark.parametrize("form", ["plain", "pipeline"])
def test_a_least_field_stored_null_takes_the_first_value(
    mongo: Mongo, tmp_path: Path, form: str
) -> None:
    """A page whose depth an older version stored as null takes the next depth it is stored
    with, whichever form writes it (the same content: the plain form, whose ``$min`` would keep
    the null, the least of all values; a changed title: the update pipeline), and keeps the
    least from then on."""
    _store(mongo, tmp_path, _page(3))
    mongo.db.pages.update_one({"url": URL}, {"$set": {"depth": None}})
    title = "t" if form == "plain" else "changed"
    _store(mongo, tmp_path, _page(4, title))
    assert _stored(mongo, "pages")["depth"] == 4
    _store(mongo, tmp_path, _page(6, title))
    assert _stored(mongo, "pages")["depth"] == 4
    _store(mongo, tmp_path, _page(2, title))
    assert _stored(mongo, "pages")["depth"] == 2


@pytest.mark.parametrize("item_class", [Ranked, RankedByName])
def test_a_least_field_stored_null_takes_the_first_value_in_every_form(
    mongo: Mongo, tmp_path: Path, item_class: type[dict[str, Any]]
) -> None:
    """A least field stored as null (by an older version) takes the first value stored, under a
    plain name (the plain form when the rest is the same) or one holding a dot (``$setField``),
    then keeps the least."""
    name = item_class.least_fields[0]  # type: ignore[attr-defined]
    _store(mongo, tmp_path, item_class(url=URL, title="t", **{name: 3}))
    mongo.db.listings.update_one({"url": URL}, [{"$replaceWith": _with_null(name)}])
    assert _stored(mongo)[name] is None
    for rank, least in ((3, 3), (5, 3), (1, 1)):
        _store(mongo, tmp_path, item_class(url=URL, title="t", **{name: rank}))
        assert _stored(mongo)[name] == least


def _with_null(name: str) -> dict[str, Any]:
    """The stored document with its field ``name`` (any name) set to null."""
    field = {"field": {"$literal": name}, "input": "$$ROOT", "value": None}
    return {"$setField": field}
