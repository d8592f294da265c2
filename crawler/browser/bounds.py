"""DOWNLOAD_MAXSIZE and DOWNLOAD_WARNSIZE for the pages the browser downloads.

scrapy-playwright reads neither (nor fires ``bytes_received``): a page's body streams into the
browser and comes back whole through ``page.content()``, so a huge body or an endless stream
would take the worker's memory. While a page downloads, :class:`SizeBound` counts the bytes
of each of its responses as Chromium receives them (decoded, as Scrapy also refuses a body too
large once decompressed: the DevTools protocol's ``Network.dataReceived``); once one passes
the request's ``download_warnsize`` it is logged, once one passes its ``download_maxsize`` the
page is closed at once and the download fails with Scrapy's own error for a body too large,
``DownloadCancelledError``: its request is a dead letter ("download_error:DownloadCancelledError"),
and the crawl goes on. Chromium only (the protocol is Chromium's).
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from contextlib import suppress
from typing import TYPE_CHECKING, Any

from playwright.async_api import Error as PlaywrightError
from scrapy.exceptions import DownloadCancelledError

if TYPE_CHECKING:
    from playwright.async_api import CDPSession, Page
    from scrapy import Request

logger = logging.getLogger(__name__)

# The DevTools protocol keeps no copy of a body for this session (it reads no body).
NO_BUFFERS = {"maxTotalBufferSize": 0, "maxResourceBufferSize": 0}


class SizeBound:
    """The byte counts of one page's responses while its request downloads (see the module)."""

    def __init__(self, request: Request, maxsize: int, warnsize: int) -> None:
        self.request = request
        self.maxsize = maxsize
        self.warnsize = warnsize
        self.received: Counter[str] = Counter()  # by the protocol's request id
        self.refused = ""  # why the page was closed: its body passed maxsize
        self._warned = False
        self._page: Page | None = None
        self._session: CDPSession | None = None
        self._closing: asyncio.Task[None] | None = None

    async def watch(self, page: Page) -> None:
        """Count ``page``'s bytes from now on (nothing to count with neither bound set)."""
        if not (self.maxsize or self.warnsize):
            return
        self._page = page
        self._session = await page.context.new_cdp_session(page)
        self._session.on("Network.dataReceived", self._received)
        await self._session.send("Network.enable", NO_BUFFERS)

    async def stop(self) -> None:
        """Stop counting; the page, if it was closed for its size, is closed by now."""
        if self._closing is not None:
            await asyncio.gather(self._closing, return_exceptions=True)
        if self._session is not None:
            with suppress(PlaywrightError):  # a closed page's session is gone with it
                await self._session.detach()
            self._session = None

    def check(self, error: BaseException | None = None) -> None:
        """DownloadCancelledError, caused by ``error``, if the page was closed for its size."""
        if self.refused:
            raise DownloadCancelledError(self.refused) from error

    def _received(self, params: dict[str, Any]) -> None:
        request_id = str(params.get("requestId", ""))
        self.received[request_id] += int(params.get("dataLength", 0))
        size = self.received[request_id]
        if self.warnsize and size > self.warnsize and not self._warned:
            self._warned = True
            logger.warning(self._message(size, "warn", self.warnsize))
        if self.maxsize and size > self.maxsize and not self.refused:
            self.refused = self._message(size, "max", self.maxsize)
            logger.warning(self.refused)
            assert self._page is not None
            self._closing = asyncio.ensure_future(self._close(self._page))

    def _message(self, size: int, kind: str, limit: int) -> str:
        return (
            f"Received {size} bytes which is larger than download {kind} size ({limit}) "
            f"in request {self.request} (in the browser)."
        )

    @staticmethod
    async def _close(page: Page) -> None:
        with suppress(PlaywrightError):
            await page.close()
