"""Requests survive the trip through Redis as JSON; what cannot is refused by name."""

from __future__ import annotations

import asyncio
import re
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from scrapy import FormRequest, Request, Spider
from scrapy.utils.request import request_from_dict
from scrapy_playwright.page import PageMethod

from crawler.frontier import codec
from crawler.frontier.codec import RequestNotSerializable, request_record
from crawler.frontier.records import pending


class _Spider(Spider):
    name = "s"

    def parse_item(self, response: Any) -> None: ...

    def on_error(self, failure: Any) -> None: ...


json_leaf = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.text()
    | st.binary(max_size=32)
    | st.floats(allow_nan=False, allow_infinity=False)
)
json_values = st.recursive(
    json_leaf,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=12,
)


def _round_trip(request: Request, spider: Spider | None = None) -> Request:
    encoded = codec.dumps(request.to_dict(spider=spider))
    assert isinstance(encoded, str)
    return request_from_dict(codec.loads(encoded), spider=spider)


@given(
    body=st.binary(max_size=64),
    meta=st.dictionaries(st.text(min_size=1, max_size=8), json_values, max_size=4),
    cb_kwargs=st.dictionaries(st.text(min_size=1, max_size=8), json_values, max_size=3),
    priority=st.integers(-100, 100),
    dont_filter=st.booleans(),
    header=st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789 ;=/", max_size=20),
)
def test_everything_a_request_carries_round_trips(
    body: bytes,
    meta: dict[str, Any],
    cb_kwargs: dict[str, Any],
    priority: int,
    dont_filter: bool,
    header: str,
) -> None:
    spider = _Spider()
    request = Request(
        "https://example.com/a?b=1",
        method="POST",
        body=body,
        headers={"X-Test": header},
        cookies={"session": "abc"},
        meta=meta,
        cb_kwargs=cb_kwargs,
        priority=priority,
        dont_filter=dont_filter,
        flags=["first"],
        callback=spider.parse_item,
        errback=spider.on_error,
    )
    restored = _round_trip(request, spider)
    assert restored.url == request.url
    assert restored.method == "POST"
    assert restored.body == body
    assert restored.headers.get("X-Test") == header.encode()
    assert restored.cookies == {"session": "abc"}
    assert restored.meta == meta
    assert restored.cb_kwargs == cb_kwargs
    assert restored.priority == priority
    assert restored.dont_filter is dont_filter
    assert restored.flags == ["first"]
    assert restored.callback == spider.parse_item
    assert restored.errback == spider.on_error


def test_a_value_json_cannot_hold_is_refused_naming_its_key() -> None:
    request = Request("https://example.com", meta={"page": {"when": object()}})
    with pytest.raises(RequestNotSerializable, match=r"meta\['page'\]\['when'\]"):
        codec.dumps(request.to_dict())


@given(
    key=st.integers() | st.floats(allow_nan=False) | st.booleans() | st.none() | st.binary(),
    depth=st.integers(0, 3),
    headers=st.booleans(),
    compact=st.booleans(),
)
def test_a_key_that_is_not_a_string_is_refused_not_stored_changed(
    key: Any, depth: int, headers: bool, compact: bool
) -> None:
    """JSON would store ``{1: "x"}`` as ``{"1": "x"}``: the request would come back with
    another meta. It is refused, naming where, whatever else the request holds."""
    meta: dict[Any, Any] = {key: "x"}
    for _ in range(depth):
        meta = {"level": [meta]}
    request = Request(
        "https://example.com", headers={"X-A": "b"} if headers else None, meta={"m": meta}
    )
    record = request_record(request, None) if compact else request.to_dict()
    with pytest.raises(
        RequestNotSerializable, match=rf"meta\['m'\].*key {re.escape(repr(key))} is not a string"
    ):
        codec.dumps(record)


@pytest.mark.parametrize("tag", ["__bytes__", "__page_method__"])
def test_a_dict_shaped_like_a_tag_is_refused_not_read_back_as_another_value(tag: str) -> None:
    request = Request("https://example.com", meta={"m": [{tag: "aGk="}]})
    with pytest.raises(RequestNotSerializable, match=r"meta\['m'\]\[0\]: a dict whose only key"):
        codec.dumps(request_record(request, None))
    again = {tag: "aGk=", "other": 1}
    assert _round_trip(Request("https://example.com", meta={"m": again})).meta["m"] == again


def test_nan_is_refused() -> None:
    with pytest.raises(RequestNotSerializable, match="nan"):
        codec.dumps(Request("https://example.com", meta={"score": float("nan")}).to_dict())


def test_stored_requests_are_plain_json_not_pickle() -> None:
    encoded = codec.dumps(Request("https://example.com", body=b"\x80\x04").to_dict())
    assert encoded.startswith("{")
    assert '"__bytes__":"gAQ="' in encoded


def test_playwright_page_methods_round_trip() -> None:
    methods = [
        PageMethod("wait_for_selector", 'div[role="feed"]', timeout=5000),
        PageMethod("evaluate", "window.scrollBy(0, 1000)"),
    ]
    request = Request(
        "https://example.com", meta={"playwright": True, "playwright_page_methods": methods}
    )
    restored = _round_trip(request).meta["playwright_page_methods"]
    assert [(m.method, m.args, m.kwargs) for m in restored] == [
        ("wait_for_selector", ('div[role="feed"]',), {"timeout": 5000}),
        ("evaluate", ("window.scrollBy(0, 1000)",), {}),
    ]


def test_a_page_method_calling_python_is_refused() -> None:
    request = Request("https://example.com", meta={"playwright_page_methods": [PageMethod(print)]})
    with pytest.raises(RequestNotSerializable, match=r"meta\['playwright_page_methods'\]\[0\]"):
        codec.dumps(request.to_dict())


# --- compact records -------------------------------------------------------------------------

SPIDER = _Spider()
FIELDS = (
    *("url", "method", "headers", "body", "cookies", "meta", "encoding", "priority"),
    *("dont_filter", "flags", "cb_kwargs", "callback", "errback"),
)


def _same(one: Request, other: Request) -> bool:
    return all(getattr(one, name) == getattr(other, name) for name in FIELDS)


def test_a_plain_get_is_stored_without_its_defaults() -> None:
    request = Request("https://example.org/@user", callback=SPIDER.parse_item)
    record = codec.dumps(request_record(request, SPIDER))
    assert record == '{"u":"https://example.org/@user","c":"parse_item"}'
    assert _same(request_from_dict(codec.loads(record), spider=SPIDER), request)


@given(
    method=st.sampled_from(["GET", "POST"]),
    body=st.binary(max_size=16),
    priority=st.integers(-5, 5),
    dont_filter=st.booleans(),
    meta=st.dictionaries(st.text(max_size=6), json_leaf, max_size=3),
    headers=st.dictionaries(st.sampled_from(["X-A", "X-B"]), st.text("ab", max_size=4)),
    flags=st.lists(st.text(max_size=4), max_size=2),
    encoding=st.sampled_from(["utf-8", "latin-1"]),
)
def test_compact_records_round_trip_what_is_not_default(**fields: Any) -> None:
    request = Request(
        "https://example.org/x",
        callback=SPIDER.parse_item,
        errback=SPIDER.on_error,
        cookies={"c": "1"},
        cb_kwargs={"n": 1},
        **fields,
    )
    _assert_every_format_round_trips(request)


def _assert_every_format_round_trips(request: Request) -> None:
    """Format 2 (short names, defaults left out) and both format 1 records older workers
    wrote (every field; defaults left out) load to the same request."""
    record = request_record(request, SPIDER)
    formats = {
        "2": record,
        "1 compact": codec.expand(record) if "u" in record else record,
        "1 whole": request.to_dict(spider=SPIDER),
    }
    assert "url" in formats["1 compact"]
    for name, fields in formats.items():
        loaded = request_from_dict(codec.loads(codec.dumps(fields)), spider=SPIDER)
        assert _same(loaded, request), name


_header_text = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789 ;=/-", max_size=12)


@given(
    method=st.sampled_from(["GET", "POST", "PUT"]),
    headers=st.dictionaries(
        st.sampled_from(["X-A", "Accept", "Referer"]),
        st.lists(_header_text, min_size=1, max_size=2),
    ),
    body=st.binary(max_size=32),
    cookies=st.dictionaries(st.text("abc", min_size=1, max_size=4), st.text(max_size=6)),
    meta=st.dictionaries(st.text(min_size=1, max_size=6), json_values, max_size=3),
    cb_kwargs=st.dictionaries(st.text(min_size=1, max_size=6), json_values, max_size=2),
    priority=st.integers(-(2**53), 2**53),
    dont_filter=st.booleans(),
    flags=st.lists(st.text(max_size=4), max_size=2),
    callback=st.sampled_from([None, SPIDER.parse_item]),
    errback=st.sampled_from([None, SPIDER.on_error]),
    page_methods=st.lists(st.sampled_from(["wait_for_timeout", "evaluate"]), max_size=2),
)
def test_format_2_records_round_trip_everything_not_default(
    page_methods: list[str], meta: dict[str, Any], **fields: Any
) -> None:
    if page_methods:
        meta = {**meta, "playwright_page_methods": [PageMethod(name, 1) for name in page_methods]}
    request = Request("https://example.org/x?q=1", meta=meta, **fields)
    record = request_record(request, SPIDER)
    assert "url" not in record
    assert record["u"] == request.url
    stored = request_from_dict(codec.loads(codec.dumps(record)), spider=SPIDER)
    for name in FIELDS:
        if name != "meta":
            assert getattr(stored, name) == getattr(request, name), name
    methods = stored.meta.pop("playwright_page_methods", [])
    assert [(m.method, m.args) for m in methods] == [(name, (1,)) for name in page_methods]
    assert stored.meta == {k: v for k, v in meta.items() if k != "playwright_page_methods"}
    if not page_methods:
        _assert_every_format_round_trips(request)


def test_a_request_subclass_is_stored_in_format_2_and_loads() -> None:
    request = FormRequest("https://example.org/f", formdata={"a": "1"}, callback=SPIDER.parse_item)
    record = request_record(request, SPIDER)
    assert record["_class"] == "scrapy.http.request.form.FormRequest"
    stored = request_from_dict(codec.loads(codec.dumps(record)), spider=SPIDER)
    assert type(stored) is FormRequest
    assert _same(stored, request)


def test_a_browser_page_a_request_still_holds_is_closed_not_stored() -> None:
    """A maps request sent back (a ban, a redirect) before its callback had the page: the
    page is closed, and the request is stored without it."""

    class Page:
        closed = False

        async def close(self) -> None:
            self.closed = True

    async def scheduled() -> tuple[Page, str]:
        page = Page()
        request = Request("https://www.google.com/maps/search/x", meta={"playwright_page": page})
        entry = pending(request, b"\0" * 8, None)
        await asyncio.sleep(0)  # the close runs on the loop
        await asyncio.sleep(0)
        return page, entry.json

    page, stored = asyncio.run(scheduled())
    assert page.closed
    assert "playwright_page" not in stored
