"""Explore-feed JSON (``/api/explore/item_list/``) to video fields and paging state.

The feed is untrusted: its nesting is bounded before parsing (``jsondata``), a value of the
wrong type costs that value only, and an answer that is not JSON (truncated, nested too deep)
is :class:`~crawler.extractors.jsondata.MalformedData` (retry it), not a block.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from crawler.extractors import jsondata
from crawler.extractors.jsondata import (
    FieldReader,
    as_id,
    as_int,
    as_text,
    exact_counts,
    field,
)
from crawler.extractors.profiles import UNIQUE_ID

# Status codes and messages with which the feed says "this client is not allowed" (TARGETS.md §1).
_BLOCK_CODES = {8: "login_required", 10000: "captcha"}
_BLOCK_WORDS = ("captcha", "verify", "login")


class FeedBlocked(Exception):
    """The response is a block, not data: fetch it again later (from elsewhere)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class FeedError(Exception):
    """The feed answered with an error that fetching again will not fix."""

    def __init__(self, status_code: int, message: str) -> None:
        super().__init__(f"status {status_code}: {message or 'no message'}")
        self.status_code = status_code


@dataclass(frozen=True)
class FeedPage:
    """One page of a feed: its videos, where the next page starts, and the names of the
    page-level values that were present but unusable (an item without a usable id is one)."""

    items: list[Mapping[str, Any]]
    cursor: str | None
    has_more: bool
    bad_fields: tuple[str, ...] = ()


def parse_feed(body: str) -> FeedPage:
    """Parse a feed response body; raise FeedBlocked or FeedError when it holds no data (a
    status 0 answer with neither ``itemList`` nor ``hasMore`` is a block), and MalformedData
    when it is not JSON at all (truncated, cut off, nested too deep)."""
    if not body.strip():
        raise FeedBlocked("empty_body")
    if body.lstrip().startswith("<"):
        # An HTML page where JSON belongs: a challenge or a redirect page.
        raise FeedBlocked("not_json")
    data = jsondata.loads(body)
    if not isinstance(data, dict):
        # Whole JSON, but not the feed's object: an answer meant for clients that are refused.
        raise FeedBlocked("not_json")
    _raise_for_status(data)
    if data.get("itemList") is None and data.get("hasMore") is None:
        # Status 0 and no data at all: how the real API answers a blocked IP or a stale session
        # (TARGETS.md §4, a page without the data the real page always has).
        raise FeedBlocked("no_data")
    reader = FieldReader()
    items = _items(data.get("itemList"), reader)
    return FeedPage(
        items=items,
        cursor=reader.identifier("cursor", data.get("cursor")),
        has_more=reader.flag("hasMore", data.get("hasMore")) or False,
        bad_fields=tuple(reader.bad),
    )


def _items(value: Any, reader: FieldReader) -> list[Mapping[str, Any]]:
    if value is not None and not isinstance(value, list):
        reader.bad.append("itemList")
        return []
    items: list[Mapping[str, Any]] = []
    for item in value or []:
        if isinstance(item, dict) and as_id(item.get("id")):
            items.append(item)
        else:
            reader.bad.append("id")
    return items


def _raise_for_status(data: Mapping[str, Any]) -> None:
    code = _status_code(data)
    if code == 0:
        return
    message = as_text(data.get("status_msg")) or as_text(data.get("statusMsg")) or ""
    if code in _BLOCK_CODES:
        raise FeedBlocked(_BLOCK_CODES[code])
    if any(word in message.lower() for word in _BLOCK_WORDS):
        raise FeedBlocked("captcha")
    raise FeedError(code, message[:200])


def _status_code(data: Mapping[str, Any]) -> int:
    """The first non-zero status code; one that is not a number counts as 0 (data)."""
    for key in ("statusCode", "status_code"):
        code = as_int(data.get(key))
        if code:
            return code
    return 0


def video_fields(
    item: Mapping[str, Any], category: int | None, reader: FieldReader | None = None
) -> dict[str, Any]:
    """The stored fields of one feed item (of a page from :func:`parse_feed`) found in the
    walk of ``category`` (None: a feed without one), also as the list ``categories``. An absent
    value is None; so is a value of the wrong type or a JSON null, and its name goes to
    ``reader.bad``. Counts are the exact ``statsV2`` (strings) where usable, field by field, else
    the ``stats`` (rounded from 10,000 up: 22600 for 22609)."""
    read = reader or FieldReader()
    author = _mapping(item.get("author"))
    counts = _counts(item)
    return {
        "video_id": as_id(item.get("id")) or "",
        "description": read.text("description", field(item, "desc")),
        "created_at": read.integer("created_at", field(item, "createTime")),
        "author_id": read.identifier("author_id", field(author, "id")),
        "author_unique_id": read.text("author_unique_id", field(author, "uniqueId")),
        "category": category,
        "categories": [] if category is None else [category],
        "digg_count": read.integer("digg_count", field(counts, "diggCount")),
        "play_count": read.integer("play_count", field(counts, "playCount")),
        "share_count": read.integer("share_count", field(counts, "shareCount")),
        "comment_count": read.integer("comment_count", field(counts, "commentCount")),
        "collect_count": read.integer("collect_count", field(counts, "collectCount")),
    }


def popular_author(item: Mapping[str, Any], min_likes: int, min_followers: int) -> str | None:
    """The author's valid uniqueId if the video or its author is popular by the thresholds."""
    unique_id = _mapping(item.get("author")).get("uniqueId")
    if not isinstance(unique_id, str) or not UNIQUE_ID.fullmatch(unique_id):
        return None
    likes = as_int(_counts(item).get("diggCount")) or 0
    followers = as_int(_counts(item, "authorStats", "authorStatsV2").get("followerCount")) or 0
    return unique_id if likes >= min_likes or followers >= min_followers else None


def _counts(item: Mapping[str, Any], rounded: str = "stats", exact: str = "statsV2") -> Any:
    """The item's counts, each the exact copy's (the feed's newer one, its numbers as strings)
    where it is a usable number (:func:`~crawler.extractors.jsondata.exact_counts`)."""
    return exact_counts(_mapping(item.get(rounded)), _mapping(item.get(exact)))


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}
