"""Requests held up on their way, for tests: every other request of a host before the download
handler (a busy reactor, a slow middleware), or a worker's first request to a host in it (a
connection slow to open)."""

from __future__ import annotations

import asyncio
import zlib

from scrapy import Request
from scrapy.core.downloader.handlers.http11 import HTTP11DownloadHandler
from scrapy.crawler import Crawler
from scrapy.http import Response
from scrapy.utils.httpobj import urlparse_cached

HOLD_UP = 0.6  # seconds


class LateMiddleware:
    async def process_request(self, request: Request) -> None:
        if zlib.crc32(request.url.encode()) % 2:
            await asyncio.sleep(HOLD_UP)


SLOW_CONNECT = 1.2  # seconds


class SlowFirstConnectHandler(HTTP11DownloadHandler):
    """The HTTP handler, but a worker's first request to each host waits SLOW_CONNECT seconds
    before it goes, as a connection slow to open (a starved worker, a far host) holds it."""

    def __init__(self, crawler: Crawler) -> None:
        super().__init__(crawler)
        self._known: set[str] = set()

    async def download_request(self, request: Request) -> Response:
        host = urlparse_cached(request).hostname or ""
        if host not in self._known:
            self._known.add(host)
            await asyncio.sleep(SLOW_CONNECT)
        return await super().download_request(request)
