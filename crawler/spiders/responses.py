"""Helpers for callbacks reading responses."""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

from scrapy.downloadermiddlewares.retry import get_retry_request
from scrapy.http import TextResponse

from crawler.bans.waits import RetryBackoff
from crawler.frontier.reports import FrontierReports
from crawler.meta import DUE_META

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.crawler import Crawler
    from scrapy.http import Response

logger = logging.getLogger(__name__)


class BlockedPage(Exception):
    """A callback got a block instead of data (ban detection was off): the request is
    dead-lettered with this reason instead of being stored as data."""


def body_text(response: Response) -> str:
    """The body as text, also for responses Scrapy did not recognise as text (empty bodies)."""
    if isinstance(response, TextResponse):
        return response.text
    return response.body.decode("utf-8", "replace")


def retry_malformed(
    crawler: Crawler, response: Response, reason: str, error: Exception
) -> Request | None:
    """The response's request again, due after the retry backoff (RETRY_BACKOFF_*), for an
    answer that is malformed rather than a ban; None once RETRY_TIMES is spent, and then the
    request is a dead letter ``retries_exhausted:<reason>``.

    Yield the returned request from the callback: the response's lease is acked only after
    the retry is in the frontier.
    """
    request = response.request
    assert request is not None
    assert crawler.spider is not None
    logger.warning(
        "Malformed answer from %s: %s", response.url, error, extra={"spider": crawler.spider}
    )
    retry = None
    if crawler.settings.getbool("RETRY_ENABLED") and not request.meta.get("dont_retry"):
        retry = get_retry_request(
            request,
            spider=crawler.spider,
            reason=reason,
            priority_adjust=crawler.settings.getint("RETRY_PRIORITY_ADJUST"),
        )
    if retry is None:
        FrontierReports(crawler).ledger.failed(request, f"retries_exhausted:{reason}", str(error))
        return None
    delay = RetryBackoff.from_settings(crawler.settings).delay(retry.meta["retry_times"])
    retry.meta[DUE_META] = time.time() + delay
    return retry
