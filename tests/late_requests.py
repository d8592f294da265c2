"""A downloader middleware for tests: every other request of a host is held up on its way to
the download handler, as a busy reactor or a slow middleware holds requests in a real crawl."""

from __future__ import annotations

import asyncio
import zlib

from scrapy import Request

HOLD_UP = 0.6  # seconds


class LateMiddleware:
    async def process_request(self, request: Request) -> None:
        if zlib.crc32(request.url.encode()) % 2:
            await asyncio.sleep(HOLD_UP)
