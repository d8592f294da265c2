"""Profile pages (``/@<uniqueId>``) to profile fields, for every layout met in the wild.

Layouts, newest first: the ``__UNIVERSAL_DATA_FOR_REHYDRATION__`` script, ``SIGI_STATE`` and
``__NEXT_DATA__``. A page may carry several (the rehydration script with only the app's context
beside a ``SIGI_STATE`` holding the user): a layout without the user's detail gives way to the
next one, and only a page where no layout has it is a block. A page may also be a verdict: the
user does not exist, is banned or private (stored as such), or the page is a captcha, a
challenge or carries no data at all (a block: fetch it again later). A status code not in the
table is that user's answer (``unknown_status``, its code kept), never a block of the site. A
data script that is not JSON is MalformedData (fetch it again, not a ban); a value of the wrong
type costs that value only. Counts are read from ``statsV2`` (exact, as strings) field by field,
from ``stats`` (rounded on the web: 22600 for 22609) where ``statsV2`` lacks one.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from parsel import Selector

from crawler.extractors import jsondata
from crawler.extractors.jsondata import FieldReader, as_flag, as_int, exact_counts

# TikTok usernames: letters, digits, underscores and periods, at most 24 characters.
UNIQUE_ID = re.compile(r"[A-Za-z0-9_.]{1,24}")

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
BLOCK_STATUSES = frozenset({"captcha", "challenge", "blocked"})
# A status code not in STATUS_BY_CODE: the answer for that user, which the crawler cannot read.
UNKNOWN_STATUS = "unknown_status"
# Codes named in counters and dead letters up to this (real ones have five digits); others
# are "other", so a site's odd values cannot make counters without end.
_NAMED_CODES_BELOW = 1_000_000_000


@dataclass(frozen=True)
class ProfilePage:
    """What a profile page says: a status, its layout and the raw user and stats objects."""

    status: str
    layout: str | None = None
    user: Mapping[str, Any] = field(default_factory=dict)
    stats: Mapping[str, Any] = field(default_factory=dict)
    code: int | None = None  # the page's statusCode, when it has a whole number there

    @property
    def is_block(self) -> bool:
        return self.status in BLOCK_STATUSES

    @property
    def code_name(self) -> str:
        """The status code as counters and dead letters name it."""
        named = self.code is not None and 0 <= self.code < _NAMED_CODES_BELOW
        return str(self.code) if named else "other"


def parse_profile_page(html: str, unique_id: str | None = None) -> ProfilePage:
    """Read a profile page; ``unique_id`` picks the user where a layout holds several."""
    selector = Selector(text=html or "<html></html>")
    unknown = without_user = None
    for layout, reader in _READERS:
        text = selector.css(f"script#{layout}::text").get()
        if text is None:
            continue
        page = reader(_load(text), unique_id)
        if page.status == UNKNOWN_STATUS:
            unknown = unknown or page
        elif page.status == "blocked":
            without_user = without_user or page
        else:
            return page
    if "tiktok-verify-page" in html:
        return ProfilePage(status="captcha")
    return unknown or without_user or ProfilePage(status="blocked")


def _load(text: str) -> Mapping[str, Any]:
    data = jsondata.loads(text)
    return data if isinstance(data, Mapping) else {}


def _read_universal(data: Mapping[str, Any], unique_id: str | None) -> ProfilePage:
    detail = _path(data, "__DEFAULT_SCOPE__", "webapp.user-detail")
    info = _path(detail, "userInfo")
    user = _path(info, "user")
    code = detail.get("statusCode", 0 if info else None)
    return ProfilePage(
        status=_with_user(_status(code), user),
        layout="universal",
        user=user,
        stats=exact_counts(_path(info, "stats"), _path(info, "statsV2")),
        code=as_int(code),
    )


def _with_user(status: str, user: Mapping[str, Any]) -> str:
    """A page that says "ok" but holds no user is not the user's page: a block (its data left
    out), fetched again later, never stored as a profile of empty fields."""
    return "blocked" if status == "ok" and not user else status


def _read_sigi(data: Mapping[str, Any], unique_id: str | None) -> ProfilePage:
    users = _path(data, "UserModule", "users")
    page = _path(data, "UserPage")
    if not users:  # the page's own status, or no data: a block
        code = page.get("statusCode")
        status = _with_user(_status(code), {})
        return ProfilePage(status=status, layout="sigi", code=as_int(code))
    key = next((key for key in (unique_id, page.get("uniqueId")) if _has(users, key)), None)
    key = key or _same_name(users, unique_id)
    if key is None:  # other users only: never one of them stored as the one asked for
        return ProfilePage(status="not_found", layout="sigi")
    user = _path(users, key)
    private = as_flag(user.get("privateAccount")) and not _path(data, "UserModule", "stats")
    return ProfilePage(
        status="private" if private else "ok",
        layout="sigi",
        user=user,
        stats=exact_counts(
            _path(data, "UserModule", "stats", key), _path(data, "UserModule", "statsV2", key)
        ),
    )


def _read_next_data(data: Mapping[str, Any], unique_id: str | None) -> ProfilePage:
    props = _path(data, "props", "pageProps")
    info = _path(props, "userInfo")
    code = props.get("statusCode", 0 if info else None)
    user = _path(info, "user")
    return ProfilePage(
        status=_with_user(_status(code), user),
        layout="next_data",
        user=user,
        stats=exact_counts(_path(info, "stats"), _path(info, "statsV2")),
        code=as_int(code),
    )


_READERS = (
    ("__UNIVERSAL_DATA_FOR_REHYDRATION__", _read_universal),
    ("SIGI_STATE", _read_sigi),
    ("__NEXT_DATA__", _read_next_data),
)


def _has(users: Mapping[str, Any], key: Any) -> bool:
    return isinstance(key, str) and key in users


def _same_name(users: Mapping[str, Any], unique_id: str | None) -> str | None:
    """The key of ``users`` that is ``unique_id`` but for case (profile URLs ignore it)."""
    wanted = (unique_id or "").lower()
    return next((key for key in users if isinstance(key, str) and key.lower() == wanted), None)


def _status(code: Any) -> str:
    if code is None:
        return "blocked"
    number = as_int(code)
    return UNKNOWN_STATUS if number is None else STATUS_BY_CODE.get(number, UNKNOWN_STATUS)


def _path(data: Mapping[str, Any], *keys: str) -> Mapping[str, Any]:
    for key in keys:
        value = data.get(key) if isinstance(data, Mapping) else None
        data = value if isinstance(value, Mapping) else {}
    return data


def profile_fields(
    page: ProfilePage, unique_id: str, reader: FieldReader | None = None
) -> dict[str, Any]:
    """The stored fields of a profile page that is not a block. A value of the wrong type is
    None and its name goes to ``reader.bad``; so does a uniqueId that is not a username (the
    requested ``unique_id`` is kept then)."""
    read = reader or FieldReader()
    user, stats = page.user, page.stats
    fields: dict[str, Any] = {"unique_id": _page_unique_id(user, read) or unique_id}
    fields["status"] = page.status
    fields["layout"] = page.layout
    fields.update(_user_fields(user, read))
    fields.update(_stats_fields(stats, read))
    return fields


def _page_unique_id(user: Mapping[str, Any], read: FieldReader) -> str | None:
    value = user.get("uniqueId")
    if value is None:
        return None
    if isinstance(value, str) and UNIQUE_ID.fullmatch(value):
        return value
    read.bad.append("unique_id")
    return None


def _user_fields(user: Mapping[str, Any], read: FieldReader) -> dict[str, Any]:
    if not user:
        return {}
    return {
        "user_id": read.identifier("user_id", user.get("id")),
        "nickname": read.text("nickname", user.get("nickname")),
        "signature": read.text("signature", user.get("signature")),
        "verified": read.flag("verified", user.get("verified")),
        "private": read.flag("private", user.get("privateAccount")),
        "region": read.text("region", user.get("region")),
        "sec_uid": read.identifier("sec_uid", user.get("secUid")),
        "avatar_url": read.text("avatar_url", user.get("avatarLarger")),
        "created_at": read.integer("created_at", user.get("createTime")),
    }


def _stats_fields(stats: Mapping[str, Any], read: FieldReader) -> dict[str, Any]:
    if not stats:
        return {}
    hearts = stats.get("heartCount", stats.get("heart"))
    return {
        "follower_count": read.integer("follower_count", stats.get("followerCount")),
        "following_count": read.integer("following_count", stats.get("followingCount")),
        "heart_count": read.integer("heart_count", hearts),
        "video_count": read.integer("video_count", stats.get("videoCount")),
        "digg_count": read.integer("digg_count", stats.get("diggCount")),
        "friend_count": read.integer("friend_count", stats.get("friendCount")),
    }
