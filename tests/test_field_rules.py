"""How an item class's least, kept and union fields meet the document stored before, in each
form a write takes (crawler/storage/changes.py, docs/storage.md)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import hypothesis
import pytest
from hypothesis import HealthCheck, given
from hypothesis import strategies as st
from scrapy.statscollectors import StatsCollector
from scrapy.utils.test import get_crawler

from crawler.config.values import Destination
from crawler.items import PageItem, ProfileItem, VideoItem
from crawler.pipelines import MongoPipeline
from crawler.storage.destinations import Destinations
from crawler.storage.rules import InvalidFieldRules, distinct, rules_of
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


# --- kept fields --------------------------------------------------------------------------------

VIDEO = "7300000000000000001"


def _video(plays: int | None, description: str = "a dance", **fields: Any) -> VideoItem:
    return VideoItem(VIDEO, description=description, play_count=plays, **fields)


def _stored_video(mongo: Mongo) -> dict[str, Any]:
    found = mongo.db.videos.find_one({"video_id": VIDEO}, {"_id": 0})
    assert found is not None
    return dict(found)


def test_a_count_without_a_value_keeps_the_stored_one_in_every_form(
    mongo: Mongo, tmp_path: Path
) -> None:
    """A video's play count stored as 22,609 stays when a later item has none, whether the
    rest is the same (the plain form: no second write) or changed (the update pipeline), and
    that is no change; a new count replaces it, and is one."""
    steps = [  # (plays, description, stored plays, changes counted, rewritten as changed)
        (22_609, "a dance", 22_609, 0, 0),
        (None, "a dance", 22_609, 0, 0),
        (None, "a new dance", 22_609, 1, 1),
        (None, "a new dance", 22_609, 1, 0),
        (23_000, "a new dance", 23_000, 2, 1),
        (23_000, "a new dance", 23_000, 2, 0),
    ]
    for plays, description, stored, changes, rewritten in steps:
        stats = _store(mongo, tmp_path, _video(plays, description))
        doc = _stored_video(mongo)
        assert (doc["play_count"], doc["change_count"]) == (stored, changes), (plays, description)
        assert stats.get_value("mongo/changed_writes", 0) == rewritten, (plays, description)


def test_a_count_never_given_is_stored_as_null(mongo: Mongo, tmp_path: Path) -> None:
    """A new video without a count has it null (inserted, or upserted in either form), as
    before, until an item gives one; within one batch, the later item's missing count leaves
    the earlier's."""
    _store(mongo, tmp_path, _video(None))
    assert _stored_video(mongo)["play_count"] is None
    mongo.db.videos.delete_many({})
    _store(mongo, tmp_path, _video(None, "x", category=2), _video(None, "y"))
    assert _stored_video(mongo)["play_count"] is None
    _store(mongo, tmp_path, _video(5, "y"), _video(None, "y"))
    assert (_stored_video(mongo)["play_count"], _stored_video(mongo)["change_count"]) == (5, 1)


def test_a_new_video_upserted_in_the_plain_form_has_its_count(mongo: Mongo, tmp_path: Path) -> None:
    """A batch after one that brought no new document is upserted, not inserted first: a new
    video's count comes from the plain form's filter (``$eq``), its missing ones are null."""
    _store(mongo, tmp_path, _video(5))
    other = VideoItem("7300000000000000002", play_count=7, category=3, categories=[3])
    stats = _store(mongo, tmp_path, _video(5), other, each=True)
    assert stats.get_value("mongo/existing_writes") == 1  # the first batch only: inserted first
    doc = mongo.db.videos.find_one({"video_id": other.video_id}, {"_id": 0})
    assert doc is not None
    assert (doc["play_count"], doc["digg_count"], doc["categories"]) == (7, None, [3])


class Counted(dict[str, Any]):
    """Kept fields in a document that only the update pipeline's $setField form writes."""

    kept_fields = ("plays", "n.likes")


def test_a_kept_field_named_with_a_dot_keeps_the_stored_value(mongo: Mongo, tmp_path: Path) -> None:
    item = {"url": URL, "Wt. (lbs)": "1.5"}
    _store(mongo, tmp_path, Counted(item, plays=5, **{"n.likes": 7}))
    _store(mongo, tmp_path, Counted(item, plays=None, **{"n.likes": None}))
    doc = _stored(mongo)
    assert (doc["plays"], doc["n.likes"], doc["change_count"]) == (5, 7, 0)
    _store(mongo, tmp_path, Counted(item, plays=6, **{"n.likes": None}))
    doc = _stored(mongo)
    assert (doc["plays"], doc["n.likes"], doc["change_count"]) == (6, 7, 1)


def test_a_profile_keeps_its_counts_when_a_page_shows_none(mongo: Mongo, tmp_path: Path) -> None:
    """A profile that goes private shows no counts: it keeps the last ones, its status says
    it is private."""
    ok = ProfileItem("chef", "ok", nickname="Chef", follower_count=1346, heart_count=7013)
    _store(mongo, tmp_path, ok)
    _store(mongo, tmp_path, ProfileItem("chef", "private", nickname="Chef"))
    doc = mongo.db.profiles.find_one({"unique_id": "chef"})
    assert doc is not None
    assert (doc["status"], doc["follower_count"], doc["heart_count"]) == ("private", 1346, 7013)


def test_a_missing_profile_and_a_bare_video_keep_what_was_stored(
    mongo: Mongo, tmp_path: Path
) -> None:
    """A profile page that no longer shows the user (not found) keeps the names, text and
    flags stored, its status says why; a video answered without its time and author keeps them,
    and that is no change."""
    ok = ProfileItem("chef", "ok", user_id="7", nickname="Chef", signature="Cooks", verified=True)
    _store(mongo, tmp_path, ok)
    _store(mongo, tmp_path, ProfileItem("chef", "not_found"))
    doc = mongo.db.profiles.find_one({"unique_id": "chef"})
    assert doc is not None
    kept = (doc["status"], doc["user_id"], doc["nickname"], doc["signature"], doc["verified"])
    assert kept == ("not_found", "7", "Chef", "Cooks", True)
    full: dict[str, Any] = {
        "created_at": 1_700_000_000,
        "author_id": "7",
        "author_unique_id": "chef",
    }
    _store(mongo, tmp_path, _video(5, **full))
    _store(mongo, tmp_path, VideoItem(VIDEO, description="a dance", play_count=5))
    doc = _stored_video(mongo)
    assert {name: doc[name] for name in full} == full
    assert (doc["description"], doc["change_count"]) == ("a dance", 0)


@hypothesis.settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    visits=st.lists(
        st.tuples(st.one_of(st.none(), st.integers(0, 3)), st.sampled_from("ab")),
        min_size=1,
        max_size=5,
    )
)
def test_a_count_is_the_last_one_known_and_changes_as_it_does(
    mongo: Mongo, tmp_path: Path, visits: list[tuple[int | None, str]]
) -> None:
    """Whatever counts (or none) and descriptions the feed answers, one visit per batch: the
    stored count is the last one given, and a change is counted when the description or the
    known count differed from the stored ones."""
    mongo.db.videos.drop()
    _store(mongo, tmp_path, *(_video(plays, text) for plays, text in visits), each=True)
    known: int | None = None
    changes, before = 0, None
    for plays, text in visits:
        now = (text, plays if plays is not None else known)
        changes += before is not None and now != before
        known, before = now[1], now
    doc = _stored_video(mongo)
    assert (doc["play_count"], doc["change_count"]) == (known, changes)


# --- union fields -------------------------------------------------------------------------------


class Tagged(dict[str, Any]):
    union_fields = ("tags",)


class TaggedByName(dict[str, Any]):
    """A union field in a document that only the $setField form writes."""

    union_fields = ("tags",)


@pytest.mark.parametrize("item_class", [Tagged, TaggedByName])
def test_a_union_field_keeps_every_element_once_in_the_order_found(
    mongo: Mongo, tmp_path: Path, item_class: type[dict[str, Any]]
) -> None:
    """Elements added by the same content (the plain form), changed content (the update
    pipeline or $setField) and two copies in one batch: each kept once, in the order first
    stored; a new element is no change."""
    page = {"url": URL} | ({"Wt. (lbs)": "1"} if item_class is TaggedByName else {})
    _store(mongo, tmp_path, item_class(page, title="t", tags=["a"]))
    _store(mongo, tmp_path, item_class(page, title="t", tags=["b", "a", "b"]))
    assert (_stored(mongo)["tags"], _stored(mongo)["change_count"]) == (["a", "b"], 0)
    _store(mongo, tmp_path, item_class(page, title="u", tags=["c"]))
    assert (_stored(mongo)["tags"], _stored(mongo)["change_count"]) == (["a", "b", "c"], 1)
    _store(mongo, tmp_path, item_class(page, title="u", tags=["d"]), item_class(page, tags=["e"]))
    assert _stored(mongo)["tags"] == ["a", "b", "c", "d", "e"]
    _store(mongo, tmp_path, item_class(page, title="u", tags=None))
    assert _stored(mongo)["tags"] == ["a", "b", "c", "d", "e"]


_ELEMENTS = st.one_of(
    st.integers(-3, 3),
    st.sampled_from([1.0, 2.5, True, False, None]),
    st.text(max_size=2),
    st.lists(st.integers(0, 2), max_size=2),
    st.dictionaries(st.sampled_from("ab"), st.integers(0, 1), max_size=2),
)


@given(st.lists(_ELEMENTS, max_size=30))
def test_a_union_fields_elements_are_each_kept_once_in_the_order_first_met(
    values: list[Any],
) -> None:
    """Whatever elements a union field's lists hold, those stored are each kept once, the first
    of equal ones (numbers equal as MongoDB has them: 1 and 1.0, never True; documents equal
    only with their fields in the same order), in order."""
    expected: list[Any] = []
    for value in values:
        if not any(_same_element(value, other) for other in expected):
            expected.append(value)
    kept = distinct(values)
    assert len(kept) == len(expected)
    assert all(value is other for value, other in zip(kept, expected, strict=True))


def _same_element(value: Any, other: Any) -> bool:
    """Equal as ``$addToSet`` has them: documents with the same fields in the same order."""
    numbers = all(isinstance(v, int | float) and not isinstance(v, bool) for v in (value, other))
    if isinstance(value, dict) and isinstance(other, dict):
        return list(value.items()) == list(other.items())
    return value == other and (numbers or type(value) is type(other))


def test_a_union_field_stored_as_no_list_keeps_its_value_as_an_element(
    mongo: Mongo, tmp_path: Path
) -> None:
    """A field stored as one value before it was a union field: the value is its first
    element, never an error that fails the item."""
    mongo.db.listings.insert_one({"url": URL, "tags": "old"})
    _store(mongo, tmp_path, Tagged(url=URL, tags="new"))
    assert _stored(mongo)["tags"] == ["old", "new"]


def test_a_videos_walk_without_a_category_leaves_its_categories(
    mongo: Mongo, tmp_path: Path
) -> None:
    """A video found under category 2, then by the recommend feed (no category): it keeps
    category 2; found under "All" (120) then, it lists both, ``category`` the last."""
    _store(mongo, tmp_path, _video(1, category=2, categories=[2]))
    _store(mongo, tmp_path, _video(1, category=None, categories=[]))
    assert (_stored_video(mongo)["category"], _stored_video(mongo)["categories"]) == (2, [2])
    _store(mongo, tmp_path, _video(1, category=120, categories=[120]))
    doc = _stored_video(mongo)
    assert (doc["category"], doc["categories"], doc["change_count"]) == (120, [2, 120], 0)


class Confused(dict[str, Any]):
    least_fields = ("rank",)
    kept_fields = ("rank", "plays")


def test_a_field_in_two_rules_fails_its_item_with_the_reason(mongo: Mongo, tmp_path: Path) -> None:
    """An item class naming a field both least and kept: its items fail, saying so; the other
    items of the run are stored."""
    with pytest.raises(InvalidFieldRules, match="rank in both least_fields and kept_fields"):
        rules_of(Confused)
    stats = _store(
        mongo, tmp_path, Confused(url=URL, rank=1), Tagged(url=URL + "2", tags=["a"]), failing=1
    )
    assert stats.get_value("mongo/items") == 1
    assert mongo.db.listings.count_documents({}) == 1
