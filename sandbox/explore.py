"""The explore feed API: ``/api/explore/item_list/`` and ``/api/recommend/item_list/``.

Pages are offsets into a category's fixed video list; ``cursor`` is the next offset as a
string. Unknown query parameters are ignored. Errors answer HTTP 200 with a non-zero
``statusCode``, as the real API does.

The configuration's ``feed_mode`` changes how pages come:

* ``paged`` (the default): as above;
* ``hollow_once``: each page past the first answers once (per client) with ``hasMore``, the
  next cursor and no ``itemList``, then as it should;
* ``refresh``: the recommend feed as the real one is read: no cursor, each request (per
  client) the next videos of the "for you" list, from its start again once it is through,
  ``hasMore`` always true.

Its ``counts_mode`` shows the videos' counts (``stats``, ``statsV2``) as they are, each null, or
leaves them out (:func:`sandbox.data.with_counts`).
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from functools import partial
from typing import Any

from aiohttp import web

from sandbox.data import ALL_CATEGORY, Dataset, Video, with_counts
from sandbox.stats import client_address

DEFAULT_COUNT = 16
# The objects of a feed item that hold the video's counts.
VIDEO_COUNTS = ("stats", "statsV2")
MAX_COUNT = 30
STATUS_INVALID_PARAMS = 10101
STATUS_INVALID_CATEGORY = 10201

compact_dumps = partial(json.dumps, ensure_ascii=False, separators=(",", ":"))


class InvalidParamsError(ValueError):
    """A paging parameter is not an integer, or the cursor is negative."""


def error_body(status: int, message: str) -> dict[str, Any]:
    """Return the body of a feed error."""
    return {
        "statusCode": status,
        "status_code": status,
        "status_msg": message,
        "itemList": [],
        "hasMore": False,
    }


def soft_block_body() -> dict[str, Any]:
    """The real API's answer to a blocked IP or a stale session: status 0, no data."""
    return {"statusCode": 0, "status_code": 0, "status_msg": "", **_envelope()}


def _envelope() -> dict[str, Any]:
    log_id = time.strftime("%Y%m%d%H%M%S") + uuid.uuid4().hex[:18].upper()
    return {
        "extra": {"now": int(time.time() * 1000), "logid": log_id},
        "log_pb": {"impr_id": log_id},
    }


def feed_page(videos: list[Video], cursor: int, count: int) -> dict[str, Any]:
    """Return one page of ``videos`` starting at offset ``cursor``."""
    page = videos[cursor : cursor + count]
    next_cursor = min(cursor + count, len(videos)) if page else cursor
    return {
        "statusCode": 0,
        "status_code": 0,
        "status_msg": "",
        "cursor": str(next_cursor),
        "hasMore": next_cursor < len(videos),
        **_envelope(),
        "itemList": [video.item_json() for video in page],
    }


def hollow_page(page: dict[str, Any]) -> dict[str, Any]:
    """``page`` without its items: it says there is more and where, and brings nothing."""
    return {key: value for key, value in page.items() if key != "itemList"} | {"hasMore": True}


def refreshed_page(videos: list[Video], start: int, count: int) -> dict[str, Any]:
    """The ``count`` videos from offset ``start``, going round to the list's start: a page of
    a feed read by asking again, without a cursor."""
    page = [videos[(start + offset) % len(videos)] for offset in range(count)]
    return {
        "statusCode": 0,
        "status_code": 0,
        "status_msg": "",
        "hasMore": True,
        **_envelope(),
        "itemList": [video.item_json() for video in page],
    }


def parse_paging(query: dict[str, str]) -> tuple[int, int]:
    """Return ``(cursor, count)`` from the query; ``count`` is clamped to 1..30."""
    cursor = _parse_int(query.get("cursor"), default=0)
    count = _parse_int(query.get("count"), default=DEFAULT_COUNT)
    if cursor < 0:
        raise InvalidParamsError(f"negative cursor {cursor}")
    return cursor, max(1, min(count, MAX_COUNT))


def parse_category(value: str | None, dataset: Dataset) -> int | None:
    """Return the category id, or ``None`` when it is missing or unknown."""
    if value is None or not value.strip().isdigit():
        return None
    category = int(value)
    return category if category in dataset.videos_by_category else None


class ExploreApi:
    """Serves the feed endpoints from a ``Dataset``, paging as ``mode()`` says and showing the
    videos' counts as ``counts()`` says."""

    def __init__(
        self,
        dataset: Dataset,
        mode: Callable[[], str] = lambda: "paged",
        counts: Callable[[], str] = lambda: "shown",
    ) -> None:
        self.dataset = dataset
        self.mode = mode
        self.counts = counts
        self._hollowed: set[tuple[str, str, int, int]] = set()
        self._refreshed: dict[str, int] = {}

    def reset(self) -> None:
        """Forget the pages answered without items and where each client's refresh stands."""
        self._hollowed.clear()
        self._refreshed.clear()

    def register(self, router: web.UrlDispatcher) -> None:
        """Add the feed routes to ``router`` (with and without the trailing slash)."""
        for path in ("/api/explore/item_list/", "/api/explore/item_list"):
            router.add_get(path, self.explore)
        for path in ("/api/recommend/item_list/", "/api/recommend/item_list"):
            router.add_get(path, self.recommend)

    async def explore(self, request: web.Request) -> web.Response:
        """Answer one page of a category."""
        category = parse_category(request.query.get("categoryType"), self.dataset)
        return self._answer(request, category)

    async def recommend(self, request: web.Request) -> web.Response:
        """Answer one page of the "for you" list (every category merged)."""
        return self._answer(request, ALL_CATEGORY)

    def _answer(self, request: web.Request, category: int | None) -> web.Response:
        try:
            cursor, count = parse_paging(dict(request.query))
        except InvalidParamsError:
            return _json(error_body(STATUS_INVALID_PARAMS, "invalid params"))
        if category is None:
            return _json(error_body(STATUS_INVALID_CATEGORY, "invalid categoryType"))
        videos = self.dataset.videos_by_category[category]
        client, mode = client_address(request), self.mode()
        if mode == "refresh" and request.path.startswith("/api/recommend/"):
            start = self._refreshed.get(client, 0)
            self._refreshed[client] = start + count
            return _json(self._shown(refreshed_page(videos, start, count)))
        page = feed_page(videos, cursor, count)
        key = (client, request.path.rstrip("/"), category, cursor)
        if mode == "hollow_once" and cursor > 0 and key not in self._hollowed:
            self._hollowed.add(key)
            return _json(hollow_page(page))
        return _json(self._shown(page))

    def _shown(self, page: dict[str, Any]) -> dict[str, Any]:
        """``page`` with its videos' counts as the counts mode shows them."""
        mode = self.counts()
        items = [with_counts(item, VIDEO_COUNTS, mode) for item in page["itemList"]]
        return page | {"itemList": items}


def _parse_int(value: str | None, default: int) -> int:
    if value is None or value == "":
        return default
    try:
        return int(value)
    except ValueError as exc:
        raise InvalidParamsError(f"not an integer: {value!r}") from exc


def _json(body: dict[str, Any]) -> web.Response:
    return web.json_response(body, dumps=compact_dumps)
