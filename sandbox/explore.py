"""The explore feed API: ``/api/explore/item_list/`` and ``/api/recommend/item_list/``.

Pages are offsets into a category's fixed video list; ``cursor`` is the next offset as a
string. Unknown query parameters are ignored. Errors answer HTTP 200 with a non-zero
``statusCode``, as the real API does.
"""

from __future__ import annotations

import json
import time
import uuid
from functools import partial
from typing import Any

from aiohttp import web

from sandbox.data import ALL_CATEGORY, Dataset, Video

DEFAULT_COUNT = 16
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


def feed_page(videos: list[Video], cursor: int, count: int) -> dict[str, Any]:
    """Return one page of ``videos`` starting at offset ``cursor``."""
    page = videos[cursor : cursor + count]
    next_cursor = min(cursor + count, len(videos)) if page else cursor
    log_id = time.strftime("%Y%m%d%H%M%S") + uuid.uuid4().hex[:18].upper()
    return {
        "statusCode": 0,
        "status_code": 0,
        "status_msg": "",
        "cursor": str(next_cursor),
        "hasMore": next_cursor < len(videos),
        "extra": {"now": int(time.time() * 1000), "logid": log_id},
        "log_pb": {"impr_id": log_id},
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
    """Serves the feed endpoints from a ``Dataset``."""

    def __init__(self, dataset: Dataset) -> None:
        self.dataset = dataset

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
        return _json(feed_page(self.dataset.videos_by_category[category], cursor, count))


def _parse_int(value: str | None, default: int) -> int:
    if value is None or value == "":
        return default
    try:
        return int(value)
    except ValueError as exc:
        raise InvalidParamsError(f"not an integer: {value!r}") from exc


def _json(body: dict[str, Any]) -> web.Response:
    return web.json_response(body, dumps=compact_dumps)
