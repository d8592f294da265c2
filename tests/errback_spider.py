"""A spider of a user's own whose errback yields items (docs/own-spider.md), for tests: each
start entry is a page URL; the pages its own downloader middleware turns away (IgnoreRequest)
are stored as skipped, by the request's errback. A pipeline of its own takes its time with an
item while the file the setting SKIP_HOLD names exists (an enrichment call, say)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from scrapy import Request
from scrapy.crawler import Crawler
from scrapy.exceptions import IgnoreRequest
from scrapy.http import Response
from twisted.python.failure import Failure

from crawler.spiders.redis import RedisSpider


@dataclass
class Skipped:
    collection: ClassVar[str] = "skipped"
    unique_key: ClassVar[str] = "url"
    url: str
    reason: str


class SkipList:
    """Pages under /skip/ are not fetched."""

    def process_request(self, request: Request) -> None:
        if "/skip/" in request.url:
            raise IgnoreRequest("on the skip list")


class Hold:
    """Holds each item while the file SKIP_HOLD names exists."""

    def __init__(self, hold: str) -> None:
        self.hold = Path(hold) if hold else None

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Hold:
        return cls(crawler.settings.get("SKIP_HOLD", ""))

    async def process_item(self, item: Any) -> Any:
        while self.hold is not None and self.hold.exists():
            await asyncio.sleep(0.05)
        return item


class Skipping(RedisSpider):
    name = "skipping"
    custom_settings = {  # noqa: RUF012 (as a user writes it)
        "DOWNLOADER_MIDDLEWARES": {"tests.errback_spider.SkipList": 500},
        "ITEM_PIPELINES": {
            "crawler.pipelines.ValidationPipeline": 100,
            "tests.errback_spider.Hold": 400,
            "crawler.pipelines.MongoPipeline": 500,
        },
    }

    def make_request_from_data(self, data: bytes) -> Request:
        return Request(data.decode(), errback=self.skipped, dont_filter=True)

    def parse(self, response: Response) -> Iterator[Any]:
        yield from ()

    def skipped(self, failure: Failure) -> Iterator[Skipped]:
        url = failure.request.url  # type: ignore[attr-defined]
        self.logger.info("Skipped %s", url)
        yield Skipped(url, type(failure.value).__name__)
