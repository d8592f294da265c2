"""Profile pages (``/@<uniqueId>``) to profile fields, for every layout met in the wild.

Layouts, newest first: the ``__UNIVERSAL_DATA_FOR_REHYDRATION__`` script, the older
``SIGI_STATE`` script and ``__NEXT_DATA__``. A page may also be a verdict rather than data: the
user does not exist, is banned or private (stored as such), or the page is a captcha, a
challenge or carries no data at all (a block: fetch it again later).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from parsel import Selector

# statusCode inside a 200 page -> what it means (TARGETS.md §2).
STATUS_BY_CODE = {
    0: "ok",
    10202: "not_found",
    10221: "banned",
    10222: "private",
    10000: "captcha",
    10113: "challenge",
    10114: "challenge",
}
# Statuses that say nothing about the user, only about the crawler: fetch again later.
BLOCK_STATUSES = frozenset({"captcha", "challenge", "blocked", "unknown_status"})


@dataclass(frozen=True)
class ProfilePage:
    """What a profile page says: a status, its layout and the raw user and stats objects."""

    status: str
    layout: str | None = None
    user: Mapping[str, Any] = field(default_factory=dict)
    stats: Mapping[str, Any] = field(default_factory=dict)

    @property
    def is_block(self) -> bool:
        return self.status in BLOCK_STATUSES


def parse_profile_page(html: str, unique_id: str | None = None) -> ProfilePage:
    """Read a profile page; ``unique_id`` picks the user where a layout holds several."""
    selector = Selector(text=html or "<html></html>")
    for layout, reader in _READERS:
        text = selector.css(f"script#{layout}::text").get()
        if text is not None:
            return reader(_load(text), unique_id)
    if "tiktok-verify-page" in html:
        return ProfilePage(status="captcha")
    return ProfilePage(status="blocked")


def _load(text: str) -> Mapping[str, Any]:
    try:
        data = json.loads(text)
    except ValueError:
        return {}
    return data if isinstance(data, Mapping) else {}


def _read_universal(data: Mapping[str, Any], unique_id: str | None) -> ProfilePage:
    detail = _path(data, "__DEFAULT_SCOPE__", "webapp.user-detail")
    info = _path(detail, "userInfo")
    return ProfilePage(
        status=_status(detail.get("statusCode", 0 if info else None)),
        layout="universal",
        user=_path(info, "user"),
        stats=_path(info, "stats") or _path(info, "statsV2"),
    )


def _read_sigi(data: Mapping[str, Any], unique_id: str | None) -> ProfilePage:
    users = _path(data, "UserModule", "users")
    key = unique_id if unique_id in users else _path(data, "UserPage").get("uniqueId")
    if key not in users:
        key = next(iter(users), None)
    if key is None:
        return ProfilePage(status="not_found", layout="sigi")
    user = _path(users, key)
    return ProfilePage(
        status="private"
        if user.get("privateAccount") and not _path(data, "UserModule", "stats")
        else "ok",
        layout="sigi",
        user=user,
        stats=_path(data, "UserModule", "stats", key),
    )


def _read_next_data(data: Mapping[str, Any], unique_id: str | None) -> ProfilePage:
    props = _path(data, "props", "pageProps")
    info = _path(props, "userInfo")
    code = props.get("statusCode", 0 if info else None)
    return ProfilePage(
        status=_status(code),
        layout="next_data",
        user=_path(info, "user"),
        stats=_path(info, "stats"),
    )


_READERS = (
    ("__UNIVERSAL_DATA_FOR_REHYDRATION__", _read_universal),
    ("SIGI_STATE", _read_sigi),
    ("__NEXT_DATA__", _read_next_data),
)


def _status(code: Any) -> str:
    if code is None:
        return "blocked"
    try:
        return STATUS_BY_CODE.get(int(code), "unknown_status")
    except (TypeError, ValueError):
        return "unknown_status"


def _path(data: Mapping[str, Any], *keys: str) -> Mapping[str, Any]:
    for key in keys:
        value = data.get(key) if isinstance(data, Mapping) else None
        data = value if isinstance(value, Mapping) else {}
    return data


def profile_fields(page: ProfilePage, unique_id: str) -> dict[str, Any]:
    """The stored fields of a profile page that is not a block."""
    user, stats = page.user, page.stats
    fields: dict[str, Any] = {"unique_id": str(user.get("uniqueId") or unique_id)}
    fields["status"] = page.status
    fields["layout"] = page.layout
    fields.update(_user_fields(user))
    fields.update(_stats_fields(stats))
    return fields


def _user_fields(user: Mapping[str, Any]) -> dict[str, Any]:
    if not user:
        return {}
    return {
        "user_id": _opt_str(user.get("id")),
        "nickname": _opt_str(user.get("nickname")),
        "signature": _opt_str(user.get("signature")),
        "verified": _opt_bool(user.get("verified")),
        "private": _opt_bool(user.get("privateAccount")),
        "region": _opt_str(user.get("region")),
        "sec_uid": _opt_str(user.get("secUid")),
        "avatar_url": _opt_str(user.get("avatarLarger")),
        "created_at": _opt_int(user.get("createTime")),
    }


def _stats_fields(stats: Mapping[str, Any]) -> dict[str, Any]:
    if not stats:
        return {}
    return {
        "follower_count": _opt_int(stats.get("followerCount")),
        "following_count": _opt_int(stats.get("followingCount")),
        "heart_count": _opt_int(stats.get("heartCount", stats.get("heart"))),
        "video_count": _opt_int(stats.get("videoCount")),
        "digg_count": _opt_int(stats.get("diggCount")),
        "friend_count": _opt_int(stats.get("friendCount")),
    }


def _opt_str(value: Any) -> str | None:
    return None if value is None else str(value)


def _opt_bool(value: Any) -> bool | None:
    return None if value is None else bool(value)


def _opt_int(value: Any) -> int | None:
    try:
        return None if value is None else int(value)
    except (TypeError, ValueError):
        return None
