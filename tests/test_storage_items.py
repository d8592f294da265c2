"""Items whose values MongoDB or Python find hostile fail alone, never their batch, and the
values MongoDB can hold are stored as the item gives them."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from datetime import UTC, timedelta, timezone
from decimal import Decimal
from pathlib import Path
from typing import Any

import hypothesis
import pymongo
import pytest
from bson.decimal128 import Decimal128
from hypothesis import HealthCheck, given
from hypothesis import strategies as st
from scrapy.utils.test import get_crawler

from crawler.config.values import Destination
from crawler.items import PageItem
from crawler.pipelines import ItemNotStored, MongoPipeline
from crawler.storage.changes import item_hash, with_change_hash
from crawler.storage.destinations import Destinations
from crawler.storage.mongo import MongoSettings
from devtools.services import free_port, mongo_command, start_server
from tests.harness import Mongo
from tests.mongo_config import pipeline_settings

GOOD = 3


def _settings(uri: str, database: str, spill: Path) -> MongoSettings:
    return pipeline_settings(uri, database, spill, flush_interval=0.1)


def _stored(uri: str, database: str, spill: Path, *items: Any) -> tuple[list[Any], Any]:
    """Store the items at once (one batch) in the spider ``shop``'s collection; each one's
    exception (None when stored), and the stats."""
    stats = get_crawler().stats
    pipeline = MongoPipeline(_settings(uri, database, spill), stats, "shop")

    async def scenario() -> list[Any]:
        await pipeline.open_spider()
        outcomes = await asyncio.gather(
            *(pipeline.process_item(item) for item in items), return_exceptions=True
        )
        await pipeline.close_spider()
        return [outcome if isinstance(outcome, BaseException) else None for outcome in outcomes]

    return asyncio.run(asyncio.wait_for(scenario(), 60)), stats


def _good(n: int) -> dict[str, Any]:
    return {"url": f"https://shop.test/good/{n}", "name": f"good {n}", "price": n}


def _nested(depth: int) -> Any:
    """A value ``depth`` lists deep (as ``json.loads`` reads an API's answer, up to about 900)."""
    value: list[Any] = []
    for _ in range(depth - 1):
        value = [value]
    return value


def _holding_itself() -> dict[str, Any]:
    cycle: list[Any] = []
    cycle.append(cycle)
    return {"url": "https://shop.test/bad", "data": cycle}


HOSTILE = {
    "nested 400 deep": {"url": "https://shop.test/bad", "data": json.loads("[" * 400 + "]" * 400)},
    "nested 3000 deep": {"url": "https://shop.test/bad", "data": _nested(3000)},
    "keys of two types": {"url": "https://shop.test/bad", "meta": {1: "a", "b": 2}},
    "holding itself": _holding_itself(),
    "a key with NUL": {"url": "https://shop.test/bad", "a\x00b": 1},
    "a Decimal too precise": {"url": "https://shop.test/bad", "price": Decimal("1." + "1" * 40)},
}


def _only_the_bad_one_fails(
    mongo: Mongo, outcomes: list[Any], bad_at: int = GOOD
) -> BaseException | None:
    """The good items (every one but ``bad_at``) are stored; the bad one's outcome."""
    bad: BaseException | None = outcomes.pop(bad_at)
    assert outcomes == [None] * GOOD
    stored = {doc["url"] for doc in mongo.db.shop.find({}, {"url": 1, "_id": 0})}
    assert {_good(n)["url"] for n in range(GOOD)} <= stored
    if bad is None:
        assert "https://shop.test/bad" in stored
    else:
        assert isinstance(bad, ItemNotStored), repr(bad)
        assert "neither written nor spilled" not in str(bad)
    return bad


@pytest.mark.parametrize("case", list(HOSTILE))
def test_an_item_whose_document_cannot_be_made_fails_alone(
    mongo: Mongo, tmp_path: Path, case: str
) -> None:
    """A value nested deeper than Python reads, an item holding itself, an object whose keys
    are not all strings, a key BSON refuses, a Decimal wider than Decimal128: that item fails
    with its own reason (counted as ``mongo/unstorable``), the rest of its batch is stored."""
    items = [_good(n) for n in range(GOOD)] + [HOSTILE[case]]
    outcomes, stats = _stored(mongo.uri, mongo.database, tmp_path, *items)
    bad = _only_the_bad_one_fails(mongo, outcomes)
    if case == "nested 400 deep" and bad is None:
        return  # a server may hold it
    assert bad is not None, "stored"
    reason = str(bad)
    expected = {
        "nested 3000 deep": "nested too deeply or holding itself (RecursionError",
        "holding itself": "nested too deeply or holding itself (RecursionError",
        "keys of two types": "documents must have only string keys, key was 1",
        "a key with NUL": "cannot be stored: InvalidDocument",
        "a Decimal too precise": "does not fit MongoDB's Decimal128",
    }.get(case)
    if expected is not None:
        assert expected in reason
        assert stats.get_value("mongo/unstorable") == 1
        assert not stats.get_value("mongo/too_large")
    assert stats.get_value("mongo/write_errors") == 1


def test_a_set_and_a_decimal_are_stored(mongo: Mongo, tmp_path: Path) -> None:
    """A set is stored as a sorted list (values of several types by type name), a Decimal as
    a Decimal128."""
    item = {
        "url": "https://shop.test/1",
        "tags": {"b", "a", "c"},
        "sizes": frozenset({2, "m", 1}),
        "price": Decimal("1.10"),
        "nested": {"rates": [Decimal("-0.5")]},
    }
    outcomes, stats = _stored(mongo.uri, mongo.database, tmp_path, item)
    assert outcomes == [None]
    doc = mongo.db.shop.find_one({"url": "https://shop.test/1"})
    assert doc is not None
    assert doc["tags"] == ["a", "b", "c"]
    assert doc["sizes"] == [1, 2, "m"]
    assert doc["price"] == Decimal128("1.10")
    assert doc["nested"] == {"rates": [Decimal128("-0.5")]}
    assert not stats.get_value("mongo/too_large")


def test_the_change_hash_takes_keys_of_several_types() -> None:
    """The digest of an object whose keys json cannot sort is made all the same, the same
    whatever their order; the digests of string-keyed content are those stored ever since."""
    assert item_hash({"m": {1: "a", "b": 2}}) == item_hash({"m": {"b": 2, 1: "a"}})
    assert item_hash({"m": {1: "a", "b": 2}}) != item_hash({"m": {1: "a", "b": 3}})
    assert item_hash({"m": {(1, 2): "a"}}) != item_hash({"m": {(1, 3): "a"}})
    # Digests stored by earlier versions: unchanged, so no stored page counts as changed.
    page = {"url": "https://a/", "price": 5, "meta": {"b": [1, 2.5, None, True], "a": "x"}}
    assert item_hash({**page, "raw": b"\xab", "fetched_at": 3}) == "2a565cd71281b6a8362eded4"
    stored = with_change_hash({"url": "u", "n": 1, "s": "é"}, ())
    assert stored["change_hash"] == "992ccf8910ad796fcd444691"


_KEYS = st.one_of(
    st.text(max_size=6),
    st.sampled_from(["a.b", "$x", "", "a\x00b", "_id"]),
    st.integers(-3, 3),
)
_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=10),
    st.binary(max_size=6),
    st.decimals(allow_nan=True, allow_infinity=True, places=None),
    st.datetimes(timezones=st.sampled_from([UTC, timezone(timedelta(hours=5, minutes=30))])),
    st.frozensets(st.one_of(st.integers(), st.text(max_size=3)), max_size=3),
)
_VALUES = st.recursive(
    _SCALARS,
    lambda children: st.one_of(
        st.lists(children, max_size=3),
        st.dictionaries(_KEYS, children, max_size=3),
        st.sets(st.one_of(st.integers(), st.text(max_size=3)), max_size=3),
    ),
    max_leaves=12,
)
_DEEP = st.integers(50, 2500).map(_nested)


@hypothesis.settings(
    max_examples=20,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    fields=st.dictionaries(_KEYS, st.one_of(_VALUES, _DEEP), min_size=1, max_size=4),
    at=st.integers(0, GOOD),
)
def test_any_value_fails_its_item_alone(
    mongo: Mongo, tmp_path: Path, fields: dict[Any, Any], at: int
) -> None:
    """Whatever values one item holds (nesting deeper than MongoDB's or Python's limits, keys
    of several types, integers beyond 64 bits, NaN, bytes, sets, Decimals, datetimes with a
    time zone) among good items of its batch: the good ones are stored, that one is stored or
    fails alone."""
    mongo.db.shop.drop()
    items: list[Any] = [_good(n) for n in range(GOOD)]
    items.insert(at, {**fields, "url": "https://shop.test/bad"})
    outcomes, _ = _stored(mongo.uri, mongo.database, tmp_path, *items)
    _only_the_bad_one_fails(mongo, outcomes, at)


# --- a write command MongoDB refuses whole -------------------------------------------------------


@pytest.fixture
def failing_mongo(tmp_path: Path) -> Iterator[str]:
    """A MongoDB of the test's own whose test commands are on, so that it may be told to
    refuse a command (``configureFailPoint``)."""
    port = free_port()
    command = [*mongo_command(port, tmp_path / "mongo-data"), "--enable-test-commands"]
    server = start_server("mongodb", command, port)
    yield f"mongodb://127.0.0.1:{port}"
    server.stop()


def test_a_write_command_refused_whole_fails_its_writes_with_why(
    failing_mongo: str, tmp_path: Path
) -> None:
    """MongoDB refuses the upserts' command (here not authorized; a full disk alike) after the
    inserts of the same batch stored the new documents: those stay stored, the upserted items
    fail with what MongoDB said, not as items neither written nor spilled."""
    client: pymongo.MongoClient[dict[str, Any]] = pymongo.MongoClient(failing_mongo)
    try:
        outcomes, _ = _stored(failing_mongo, "shop", tmp_path, _good(0), _good(1))
        assert outcomes == [None, None]
        client.admin.command(
            "configureFailPoint",
            "failCommand",
            mode="alwaysOn",
            data={"failCommands": ["update"], "errorCode": 13},
        )
        # Two stored keys (inserted, refused as stored, then upserted) and two new ones.
        items = [{**_good(0), "price": 10}, _good(1), _good(2), _good(3)]
        outcomes, stats = _stored(failing_mongo, "shop", tmp_path, *items)
        client.admin.command("configureFailPoint", "failCommand", mode="off")
        assert outcomes[2:] == [None, None]
        for outcome in outcomes[:2]:
            assert isinstance(outcome, ItemNotStored)
            assert "MongoDB refused the write command: Unauthorized" in str(outcome)
        assert client.shop.shop.count_documents({}) == 4
        assert stats.get_value("mongo/write_errors") == 2
        assert not stats.get_value("mongo/spilled")
    finally:
        client.close()


# --- field names an update would read as paths --------------------------------------------------


def _visits(mongo: Mongo, tmp_path: Path, *items: dict[str, Any]) -> dict[str, Any]:
    """Store each item in a run of its own; the stored document, without its times."""
    for item in items:
        outcomes, _ = _stored(mongo.uri, mongo.database, tmp_path, item)
        assert outcomes == [None]
    found = mongo.db.shop.find_one(
        {"url": items[0]["url"]}, {"_id": 0, "first_seen": 0, "last_seen": 0, "last_changed": 0}
    )
    assert found is not None
    return dict(found)


def test_a_field_name_with_a_dot_is_stored_as_named_every_time(
    mongo: Mongo, tmp_path: Path
) -> None:
    """Run 0 inserts {"Wt. (lbs)": "1.2"}, run 1 upserts "1.5" over it: the field holds the new
    value, not a "Wt" object beside the first one."""
    page = {"url": "https://shop.test/p1", "price": 10}
    doc = _visits(mongo, tmp_path, {**page, "Wt. (lbs)": "1.2"}, {**page, "Wt. (lbs)": "1.5"})
    doc.pop("change_hash")
    assert doc == {"url": page["url"], "price": 10, "Wt. (lbs)": "1.5", "change_count": 1}


NAMES = ["Wt. (lbs)", "$x", "ends.", "", ".", "a.b.c", "$"]


@pytest.mark.parametrize("many", [False, True])
def test_names_with_dots_dollars_or_none_are_stored_as_named(
    mongo: Mongo, tmp_path: Path, many: bool
) -> None:
    """Names an update would read as paths or operators (a dot, a leading $, empty): stored
    by the insert, changed by the upsert, the same content counted as no change; 45 of them
    (three stages of the update pipeline) too."""
    names = NAMES + [f"n.{n}" for n in range(38)] if many else NAMES
    runs = ["1", "2", "2"]
    for run, value in enumerate(runs):
        item = {"url": "https://shop.test/p2", "price": 1, **dict.fromkeys(names, value)}
        doc = _visits(mongo, tmp_path, item)
        assert {name: doc[name] for name in names} == dict.fromkeys(names, value)
        assert set(doc) == {"url", "price", "change_hash", "change_count", *names}
        assert doc["change_count"] == min(run, 1)


# --- least fields -------------------------------------------------------------------------------


def _page_at(depth: Any, title: str = "t") -> PageItem:
    return PageItem(
        "https://a.test/", "a.test", 200, "https://a.test/", depth, 1.0, "h", 1, 0, title=title
    )


def test_a_least_field_without_a_value_keeps_the_stored_one(mongo: Mongo, tmp_path: Path) -> None:
    """A least field without a value is not written, so the stored value stays, whichever form
    writes it (``$min`` passes over null in the pipeline form; the plain form would store it:
    null sorts lowest). A page stored with no depth has none, and takes the first depth it is
    stored with; stored at depth 3, then with no depth, it keeps 3."""

    def stored(*pages: PageItem) -> Any:
        pipeline = MongoPipeline(
            _settings(mongo.uri, mongo.database, tmp_path), get_crawler().stats, "links"
        )

        async def scenario() -> None:
            await pipeline.open_spider()
            await asyncio.gather(*(pipeline.process_item(page) for page in pages))
            await pipeline.close_spider()

        asyncio.run(asyncio.wait_for(scenario(), 60))
        found = mongo.db.pages.find_one({"url": "https://a.test/"})
        assert found is not None
        return found.get("depth", "none stored")

    assert stored(_page_at(3)) == 3
    assert stored(_page_at(None)) == 3  # the same content: the plain form
    assert stored(_page_at(None, title="changed")) == 3  # changed: the pipeline form
    assert stored(_page_at(None), _page_at(2), _page_at(None)) == 2  # in one batch
    mongo.db.pages.delete_many({})
    assert stored(_page_at(None)) == "none stored"
    assert stored(_page_at(None)) == "none stored"
    assert stored(_page_at(5)) == 5  # the plain form


class Listing(dict[str, Any]):
    least_fields = ("rank",)


def test_a_dict_items_least_field_is_read_from_the_dict(mongo: Mongo, tmp_path: Path) -> None:
    """An item class that is a dict names its least fields as any other: their values are the
    dict's, the least one stored is kept."""

    async def store(pipeline: MongoPipeline, item: Listing) -> None:
        await pipeline.open_spider()
        await pipeline.process_item(item)
        await pipeline.close_spider()

    ranks = []
    for rank in (3, 1, 5):
        destinations = Destinations({"Listing": Destination("listings", "url")}, "shop")
        config = _settings(mongo.uri, mongo.database, tmp_path)
        pipeline = MongoPipeline(config, get_crawler().stats, "shop", destinations)
        item = Listing(url="https://shop.test/l", rank=rank)
        asyncio.run(asyncio.wait_for(store(pipeline, item), 60))
        found = mongo.db.listings.find_one({"url": "https://shop.test/l"})
        assert found is not None
        ranks.append(found.get("rank"))
    assert ranks == [3, 1, 1]
