"""Profile pages ``/@<uniqueId>`` in the current and the older (``SIGI_STATE``) layout.

Half of the older-layout pages (picked by their uniqueId) also carry the current layout's
rehydration script holding only the app's context, no user detail, as pages met in the wild do
while the site moves between layouts.

Missing, banned and private accounts answer 200 with a status code inside the page data,
as the real site does: 10202 (does not exist), 10221 (banned), 10222 (private).
A page's ``stats`` are rounded as the web shows them (22609 is 22600, 1776621 is 1800000);
``statsV2`` holds the exact counts as strings. The configuration's ``counts_mode`` shows
them as they are, each null, or leaves them out (:func:`sandbox.data.with_counts`).
``/@status.<code>`` answers the status code ``<code>`` with no user, as the real site does with
codes public scrapers do not know (10201 was seen on user pages).
"""

from __future__ import annotations

import html
import re
import struct
import zlib
from collections.abc import Callable
from typing import Any

from aiohttp import web

from sandbox import markup
from sandbox.churn import Churn
from sandbox.data import (
    LAYOUT_SIGI,
    STATE_BANNED,
    STATE_OK,
    STATE_PRIVATE,
    Author,
    Dataset,
    rounded_count,
    with_counts,
)

STATUS_NOT_FOUND = 10202
STATUS_BANNED = 10221
STATUS_PRIVATE = 10222
# The objects of a profile's user info that hold its counts.
PROFILE_COUNTS = ("stats", "statsV2")
STATUS_USER = re.compile(r"status\.([0-9]{1,9})")
STATUS_MESSAGES = {
    STATUS_NOT_FOUND: "user does not exist",
    STATUS_BANNED: "user banned",
    STATUS_PRIVATE: "private account",
}


def user_detail(author: Author | None, counts: str = "shown") -> dict[str, Any]:
    """Return ``webapp.user-detail`` for ``author`` (``None``: no such user), its counts as
    the counts mode ``counts`` shows them."""
    if author is None:
        return _error_detail(STATUS_NOT_FOUND, {})
    if author.state == STATE_BANNED:
        return _error_detail(STATUS_BANNED, {})
    if author.state == STATE_PRIVATE:
        public = {"uniqueId": author.unique_id, "nickname": author.nickname}
        return _error_detail(STATUS_PRIVATE, {"user": {**public, "privateAccount": True}})
    user_info = {
        "user": author.user_json(),
        "stats": rounded_stats(author.stats.to_json()),
        "statsV2": author.stats.to_json_v2(),
    }
    shown = with_counts(user_info, PROFILE_COUNTS, counts)
    return {"statusCode": 0, "statusMsg": "", "userInfo": shown}


def rounded_stats(stats: dict[str, int]) -> dict[str, int]:
    """Return ``stats`` rounded as the web shows counts (22609 is 22600, 1776621 is 1800000)."""
    return {key: rounded_count(value) for key, value in stats.items()}


def sigi_state(author: Author, counts: str = "shown") -> dict[str, Any]:
    """Return the older ``SIGI_STATE`` document for ``author``, its counts as the counts mode
    ``counts`` shows them."""
    uid = author.unique_id
    shown = with_counts({"stats": author.stats.to_json()}, ("stats",), counts)
    by_user = {key: {uid: value} for key, value in shown.items()}
    return {
        "UserModule": {"users": {uid: author.user_json()}, **by_user},
        "UserPage": {"uniqueId": uid},
    }


def render_profile(unique_id: str, author: Author | None, counts: str = "shown") -> str:
    """Return the HTML of the profile page of ``unique_id``, its counts as the counts mode
    ``counts`` shows them."""
    status = STATUS_USER.fullmatch(unique_id) if author is None else None
    if status is not None:
        code = int(status.group(1))
        detail = {"statusCode": code, "statusMsg": STATUS_MESSAGES.get(code, ""), "userInfo": {}}
        return markup.page(f"@{unique_id} | TikTok", scripts=markup.universal_data_script(detail))
    if author is None or author.state != STATE_OK:
        title = f"@{unique_id} | TikTok"
        return markup.page(title, scripts=markup.universal_data_script(user_detail(author)))
    title = f"{author.nickname} (@{unique_id}) | TikTok"
    body = _profile_header(author)
    if author.layout == LAYOUT_SIGI:
        script = markup.data_script(markup.SIGI_STATE_ID, sigi_state(author, counts))
        if sigi_beside_app_context(unique_id):
            script = markup.app_context_script() + script
    else:
        script = markup.universal_data_script(user_detail(author, counts))
    return markup.page(title, body=body, scripts=script)


def sigi_beside_app_context(unique_id: str) -> bool:
    """Whether an older-layout page also carries a rehydration script without user detail."""
    return zlib.crc32(unique_id.encode()) % 2 == 0


def render_shell(unique_id: str) -> str:
    """Return the page frame without any data script, as a blocked visitor sees it."""
    return markup.page(f"@{unique_id} | TikTok", body='<div data-e2e="user-page"></div>')


def avatar_png(seed_text: str) -> bytes:
    """Return a valid 8x8 single-colour PNG whose colour depends on ``seed_text``."""
    colour = zlib.crc32(seed_text.encode()).to_bytes(4, "big")[:3]
    rows = b"".join(b"\x00" + colour * 8 for _ in range(8))
    header = struct.pack(">IIBBBBB", 8, 8, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + _png_chunk(b"IHDR", header)
        + _png_chunk(b"IDAT", zlib.compress(rows))
        + _png_chunk(b"IEND", b"")
    )


class ProfilePages:
    """Serves ``/@<uniqueId>`` and the avatars the profiles link to, the counts as ``counts()``
    says."""

    def __init__(
        self,
        dataset: Dataset,
        churn: Churn | None = None,
        counts: Callable[[], str] = lambda: "shown",
    ) -> None:
        self.dataset = dataset
        self.churn = churn or Churn()
        self.counts = counts
        self._author_ids = {author.id for author in dataset.authors}

    def register(self, router: web.UrlDispatcher) -> None:
        """Add the profile routes to ``router``."""
        router.add_get("/@{unique_id}", self.profile)
        router.add_get("/avatar/{name}", self.avatar)

    async def profile(self, request: web.Request) -> web.Response:
        """Answer one profile page."""
        unique_id = request.match_info["unique_id"]
        author = self.dataset.authors_by_unique_id.get(unique_id) or self.churn.author(unique_id)
        text = render_profile(unique_id, author, self.counts())
        return web.Response(text=text, content_type=markup.HTML_CONTENT_TYPE)

    async def avatar(self, request: web.Request) -> web.Response:
        """Answer a small image for a known author id (``/avatar/<id>.jpeg``)."""
        author_id = request.match_info["name"].removesuffix(".jpeg")
        if author_id not in self._author_ids:
            raise web.HTTPNotFound()
        return web.Response(body=avatar_png(author_id), content_type="image/png")


def _error_detail(status: int, user_info: dict[str, Any]) -> dict[str, Any]:
    return {"statusCode": status, "statusMsg": STATUS_MESSAGES[status], "userInfo": user_info}


def _profile_header(author: Author) -> str:
    return (
        '<div data-e2e="user-page">'
        f'<h1 data-e2e="user-title">{html.escape(author.unique_id)}</h1>'
        f'<h2 data-e2e="user-subtitle">{html.escape(author.nickname)}</h2>'
        f'<h2 data-e2e="user-bio">{html.escape(author.signature)}</h2>'
        "</div>"
    )


def _png_chunk(kind: bytes, data: bytes) -> bytes:
    crc = zlib.crc32(kind + data)
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", crc)
