"""Helpers for callbacks reading responses."""

from __future__ import annotations

from typing import TYPE_CHECKING

from scrapy.http import TextResponse

if TYPE_CHECKING:
    from scrapy.http import Response


class BlockedPage(Exception):
    """A callback got a block instead of data (ban detection was off): the request is
    dead-lettered with this reason instead of being stored as data."""


def body_text(response: Response) -> str:
    """The body as text, also for responses Scrapy did not recognise as text (empty bodies)."""
    if isinstance(response, TextResponse):
        return response.text
    return response.body.decode("utf-8", "replace")
