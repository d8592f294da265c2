"""Items of one key seen in one batch are written once, as writing them one after another would
have left the stored document (crawler/storage/prepare.py, docs/storage.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import hypothesis
from hypothesis import HealthCheck, given
from hypothesis import strategies as st

from crawler.storage.changes import HISTORY_FIELDS
from tests.harness import Mongo
from tests.test_field_rules import URL, _store, _stored


class Listing(dict[str, Any]):
    """A plain item: no field rules."""


class Ruled(dict[str, Any]):
    """An item with a field under each rule."""

    volatile_fields = ("seen",)
    least_fields = ("rank",)
    kept_fields = ("count",)
    union_fields = ("tags",)


def test_fields_of_the_earlier_item_stay_when_the_later_lacks_them(
    mongo: Mongo, tmp_path: Path
) -> None:
    """A callback yields ``{url, a: 1}`` then ``{url, b: 2}``: stored together in one batch or in
    two, the document holds both fields, and the later's value where both have one."""
    _store(mongo, tmp_path, Listing(url=URL, a=1, c="x"), Listing(url=URL, b=2, c="y"))
    together = _stored(mongo)
    assert (together["a"], together["b"], together["c"]) == (1, 2, "y")
    assert together["change_count"] == 0
    mongo.db.listings.drop()
    _store(mongo, tmp_path, Listing(url=URL, a=1, c="x"), Listing(url=URL, b=2, c="y"), each=True)
    apart = _stored(mongo)
    assert _content(together) == _content(apart)


def test_the_same_items_in_one_batch_again_are_no_change(mongo: Mongo, tmp_path: Path) -> None:
    """The hash of a key's items in one batch is that of the document they make together: the
    same items again make no change; a new value in either is one change."""
    items = (Listing(url=URL, a=1), Listing(url=URL, b=2))
    _store(mongo, tmp_path, *items)
    _store(mongo, tmp_path, *items)
    assert _stored(mongo)["change_count"] == 0
    _store(mongo, tmp_path, Listing(url=URL, a=3), Listing(url=URL, b=2))
    assert (_stored(mongo)["a"], _stored(mongo)["change_count"]) == (3, 1)


_PLAIN = st.one_of(st.none(), st.integers(0, 3), st.text("xy", max_size=2))
_FIELDS = {
    "a": _PLAIN,
    "b": _PLAIN,
    "seen": _PLAIN,
    "rank": st.one_of(st.none(), st.integers(0, 5)),
    "count": st.one_of(st.none(), st.integers(0, 5)),
    "tags": st.one_of(
        st.none(), st.integers(0, 3), st.lists(st.one_of(st.integers(0, 3), st.sampled_from("pq")))
    ),
}
_ITEMS = st.lists(st.fixed_dictionaries({}, optional=_FIELDS), min_size=1, max_size=4)


@hypothesis.settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(fields=_ITEMS, item_class=st.sampled_from([Listing, Ruled]), stored=_ITEMS)
def test_one_batch_leaves_what_one_batch_each_leaves(
    mongo: Mongo,
    tmp_path: Path,
    fields: list[dict[str, Any]],
    item_class: type[dict[str, Any]],
    stored: list[dict[str, Any]],
) -> None:
    """Whatever items of one key a crawl yields, over whatever was stored before: written in one
    batch, they leave the document that writing them one batch each leaves (but its history:
    one batch is one sighting, see test_the_same_items_in_one_batch_again_are_no_change)."""
    before = [item_class(url=URL, **each) for each in stored]
    items = [item_class(url=URL, **each) for each in fields]
    documents = []
    for each in (False, True):
        mongo.db.listings.drop()
        _store(mongo, tmp_path, *before, each=True)
        _store(mongo, tmp_path, *items, each=each)
        documents.append(_content(_stored(mongo)))
    assert documents[0] == documents[1]


def _content(document: dict[str, Any]) -> dict[str, Any]:
    """The stored document without its history, its fields in their order."""
    return {name: value for name, value in document.items() if name not in HISTORY_FIELDS}
