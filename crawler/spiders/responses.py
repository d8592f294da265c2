"""Helpers for callbacks reading responses."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from scrapy.http import TextResponse

from crawler.bans.policy import retry_later
from crawler.bans.waits import RetryBackoff
from crawler.frontier.reports import FrontierReports

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.crawler import Crawler
    from scrapy.http import Response

logger = logging.getLogger(__name__)


class BlockedPage(Exception):
    """A callback got a block, not data (ban checks off): dead-lettered, not stored."""


def body_text(response: Response) -> str:
    """The body as text, also for responses Scrapy did not recognise as text (empty bodies)."""
    if isinstance(response, TextResponse):
        return response.text
    return response.body.decode("utf-8", "replace")


def retry_malformed(
    crawler: Crawler,
    response: Response,
    reason: str,
    error: Exception,
    what: str = "Malformed answer",
) -> Request | None:
    """The response's request again, due after the retry backoff, for a malformed answer (not a
    ban; ``what`` names it in the log); None once RETRY_TIMES is spent, the request then a dead
    letter ``retries_exhausted:<reason>``. Yield it from the callback: the response's lease is
    acked only once the retry is in the frontier."""
    request = response.request
    assert request is not None
    logger.warning("%s from %s: %s", what, response.url, error, extra={"spider": crawler.spider})
    retry = None
    if crawler.settings.getbool("RETRY_ENABLED") and not request.meta.get("dont_retry"):
        retry = retry_later(crawler, request, reason, RetryBackoff.from_settings(crawler.settings))
    if retry is None:
        FrontierReports(crawler).ledger.failed(request, f"retries_exhausted:{reason}", str(error))
    return retry
