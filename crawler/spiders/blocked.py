"""What a spider does with a response that is a block (captcha, empty body) instead of data."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from scrapy.downloadermiddlewares.retry import get_retry_request
from scrapy.http import TextResponse

if TYPE_CHECKING:
    from scrapy import Request, Spider
    from scrapy.http import Response


def body_text(response: Response) -> str:
    """The body as text, also for responses Scrapy did not recognise as text (empty bodies)."""
    if isinstance(response, TextResponse):
        return response.text
    return response.body.decode("utf-8", "replace")


def retry_blocked(spider: Spider, response: Response, reason: str) -> Iterator[Request]:
    """Fetch the request again, up to BLOCK_RETRY_TIMES; counted under ``blocked/...``.

    The block never reaches the items: when the retries run out the request is given up
    (``blocked/max_reached``) and logged, not stored as data.
    """
    spider.crawler.stats.inc_value(f"blocked/{reason}")
    retry = get_retry_request(
        response.request,  # type: ignore[arg-type]
        spider=spider,
        reason=f"blocked:{reason}",
        max_retry_times=spider.crawler.settings.getint("BLOCK_RETRY_TIMES"),
        stats_base_key="blocked",
    )
    if retry is not None:
        yield retry
