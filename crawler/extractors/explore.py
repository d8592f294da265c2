"""Explore-feed JSON (``/api/explore/item_list/``) to video fields and paging state."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

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
    """One page of a feed: its videos and where the next page starts."""

    items: list[Mapping[str, Any]]
    cursor: str | None
    has_more: bool


def parse_feed(body: str) -> FeedPage:
    """Parse a feed response body; raise FeedBlocked or FeedError when it holds no data."""
    if not body.strip():
        raise FeedBlocked("empty_body")
    try:
        data = json.loads(body)
    except ValueError:
        raise FeedBlocked("not_json") from None
    if not isinstance(data, dict):
        raise FeedBlocked("not_json")
    _raise_for_status(data)
    items = data.get("itemList") or []
    cursor = data.get("cursor")
    return FeedPage(
        items=[item for item in items if isinstance(item, dict) and item.get("id")],
        cursor=None if cursor is None else str(cursor),
        has_more=bool(data.get("hasMore")),
    )


def _raise_for_status(data: Mapping[str, Any]) -> None:
    code = _status_code(data)
    if code == 0:
        return
    message = str(data.get("status_msg") or data.get("statusMsg") or "")
    if code in _BLOCK_CODES:
        raise FeedBlocked(_BLOCK_CODES[code])
    if any(word in message.lower() for word in _BLOCK_WORDS):
        raise FeedBlocked("captcha")
    raise FeedError(code, message)


def _status_code(data: Mapping[str, Any]) -> int:
    for key in ("statusCode", "status_code"):
        value = data.get(key)
        if value not in (None, 0, "0"):
            return _as_int(value)
    return 0


def video_fields(item: Mapping[str, Any], category: int | None) -> dict[str, Any]:
    """The stored fields of one feed item."""
    author = _mapping(item.get("author"))
    stats = _mapping(item.get("stats")) or _mapping(item.get("statsV2"))
    return {
        "video_id": str(item["id"]),
        "description": str(item.get("desc") or ""),
        "created_at": _as_int(item.get("createTime")),
        "author_id": str(author.get("id") or ""),
        "author_unique_id": str(author.get("uniqueId") or ""),
        "category": category,
        "digg_count": _as_int(stats.get("diggCount")),
        "play_count": _as_int(stats.get("playCount")),
        "share_count": _as_int(stats.get("shareCount")),
        "comment_count": _as_int(stats.get("commentCount")),
        "collect_count": _as_int(stats.get("collectCount")),
    }


def popular_author(item: Mapping[str, Any], min_likes: int, min_followers: int) -> str | None:
    """The author's uniqueId if the video or its author is popular by the given thresholds."""
    unique_id = _mapping(item.get("author")).get("uniqueId")
    if not unique_id:
        return None
    likes = _as_int(_mapping(item.get("stats")).get("diggCount"))
    followers = _as_int(_mapping(item.get("authorStats")).get("followerCount"))
    return str(unique_id) if likes >= min_likes or followers >= min_followers else None


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _as_int(value: Any) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0
