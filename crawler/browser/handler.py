"""scrapy-playwright's download handler with bounds of its own (the maps spider's browser)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from contextlib import suppress
from typing import TYPE_CHECKING, Any

from playwright.async_api import Error as PlaywrightError
from scrapy import signals
from scrapy_playwright.handler import ScrapyPlaywrightDownloadHandler

from crawler.browser.bounds import SizeBound
from crawler.browser.failures import navigation_failure
from crawler.browser.proxies import proxied_context, without_proxy_authorization
from crawler.config import setting_int

if TYPE_CHECKING:
    from playwright.async_api import Page
    from playwright.async_api import Request as PlaywrightRequest
    from playwright.async_api import Response as PlaywrightResponse
    from scrapy import Request, Spider
    from scrapy.crawler import Crawler
    from scrapy.http import Response

logger = logging.getLogger(__name__)


class BrowserHandler(ScrapyPlaywrightDownloadHandler):  # type: ignore[misc]
    """scrapy-playwright's handler bounded by MAPS_BLOCKED_RESOURCE_TYPES,
    MAPS_BROWSER_RESTART_PAGES, DOWNLOAD_MAXSIZE and DOWNLOAD_WARNSIZE (:mod:`.bounds`, meta
    ``download_maxsize``/``download_warnsize`` per request); a navigation that could not reach
    its host fails with Scrapy's exception for that failure (:mod:`.failures`); a request
    through a proxy goes through it, in a browser context of its own (:mod:`.proxies`); at close
    it counts the pages left open in ``maps/pages/open_at_close``.

    A browser opens at most MAPS_BROWSER_RESTART_PAGES pages: a page asked for after that waits
    until the browser's pages are closed and a new browser is launched (the old one closed). A
    page that waited MAPS_BROWSER_DRAIN_SECONDS opens in the old browser, and so do the next
    ones, without waiting, until it is restarted once none of its pages is open.
    """

    process_request_headers: Callable[..., Any] | None  # scrapy-playwright's

    def __init__(self, crawler: Crawler) -> None:
        super().__init__(crawler)
        names = crawler.settings.getlist("MAPS_BLOCKED_RESOURCE_TYPES")
        blocked = frozenset(name.strip() for name in names if name.strip())
        if blocked and not crawler.settings.get("PLAYWRIGHT_ABORT_REQUEST"):
            self.abort_request = ResourceBlocker(blocked)
        if self.process_request_headers is not None:
            self.process_request_headers = without_proxy_authorization(self.process_request_headers)
        self.auth_encoding = crawler.settings.get("HTTPPROXY_AUTH_ENCODING") or "latin-1"
        self.restart_after = setting_int(crawler.settings, "MAPS_BROWSER_RESTART_PAGES", 0)
        self.drain_seconds = setting_int(crawler.settings, "MAPS_BROWSER_DRAIN_SECONDS", 1)
        self.maxsize = crawler.settings.getint("DOWNLOAD_MAXSIZE")
        self.warnsize = crawler.settings.getint("DOWNLOAD_WARNSIZE")
        self.counts_bytes = self.config.browser_type_name == "chromium"
        if not self.counts_bytes and (self.maxsize or self.warnsize):
            logger.warning(
                "DOWNLOAD_MAXSIZE and DOWNLOAD_WARNSIZE bound browser pages in Chromium only: "
                "%s pages are not bounded",
                self.config.browser_type_name,
            )
        self._pages_in_browser = 0  # pages begun in the current browser
        self._opening = 0  # pages being opened now
        self._drain_given_up = False  # a page waited too long: no page waits until a restart
        self._restarting = False
        self._closing = False
        self._changed = asyncio.Event()
        self._tasks: set[asyncio.Task[None]] = set()
        crawler.signals.connect(self._count_open_pages, signal=signals.spider_closed)

    async def _download_request(self, request: Request, spider: Spider | None = None) -> Response:
        """The download, in the browser context of the request's proxy (:mod:`.proxies`)."""
        with proxied_context(request, self.auth_encoding):
            response: Response = await super()._download_request(request, spider)
        return response

    async def _create_page(self, request: Request, spider: Spider) -> Page:
        await self._wait_for_a_page_in_this_browser()
        self._pages_in_browser += 1
        self._opening += 1
        try:
            page: Page = await super()._create_page(request, spider)
        finally:
            self._opening -= 1
            self._note_change()
        return page

    async def _download_request_with_page(
        self, request: Request, page: Page, spider: Spider
    ) -> Response:
        """The page's download, closed as soon as a response of it passes the request's
        ``download_maxsize`` (then DownloadCancelledError, as Scrapy's own download raises)."""
        bound = SizeBound(
            request,
            int(request.meta.get("download_maxsize", self.maxsize)),
            int(request.meta.get("download_warnsize", self.warnsize)),
        )
        try:
            if self.counts_bytes:
                await bound.watch(page)
            response: Response = await super()._download_request_with_page(request, page, spider)
        except Exception as error:
            await bound.stop()
            bound.check(error)
            raise
        await bound.stop()
        bound.check()
        return response

    async def _get_response_and_download(
        self, request: Request, page: Page, spider: Spider
    ) -> tuple[PlaywrightResponse | None, Any]:
        """The navigation; one that could not reach its host fails as Scrapy's download would."""
        try:
            result: tuple[
                PlaywrightResponse | None, Any
            ] = await super()._get_response_and_download(request, page, spider)
        except PlaywrightError as error:
            failure = navigation_failure(error)
            if failure is error:
                raise
            raise failure from error
        return result

    async def _wait_for_a_page_in_this_browser(self) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.drain_seconds
        while self._restarting or self._browser_full():
            left = deadline - loop.time()
            if left <= 0 and not self._restarting:
                self._give_up_draining()
                continue
            with suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), left if left > 0 else None)

    def _restart_due(self) -> bool:
        return bool(self.restart_after) and self._pages_in_browser >= self.restart_after

    def _browser_full(self) -> bool:
        return self._restart_due() and not self._drain_given_up

    def _give_up_draining(self) -> None:
        self._drain_given_up = True
        self.stats.inc_value("maps/browser/drain_timeouts")
        logger.warning(
            "A full browser's pages are still open after %d s (%d open): pages open in it "
            "until it restarts (MAPS_BROWSER_DRAIN_SECONDS)",
            self.drain_seconds,
            self._get_total_page_count(),
        )
        self._note_change()

    def _note_change(self) -> None:
        """Wake the pages waiting for a browser, and restart a full one that may be idle."""
        self._changed.set()
        self._changed = asyncio.Event()
        if self._restart_due() and not (self._opening or self._restarting or self._closing):
            task = asyncio.ensure_future(self._restart_browser())
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    def _make_close_page_callback(self, context_name: str) -> Any:
        release = super()._make_close_page_callback(context_name)

        def page_closed() -> None:
            release()
            self._note_change()

        return page_closed

    async def _restart_browser(self) -> None:
        async with self.browser_launch_lock:
            if self._restarting or self._closing or not self._restart_due():
                return
            if self._opening or self._get_total_page_count():
                return
            if hasattr(self, "browser"):
                await self._close_full_browser()
            else:  # the pages were a persistent context's: nothing to restart, ever
                logger.warning(
                    "MAPS_BROWSER_RESTART_PAGES is off: a persistent context is never restarted"
                )
                self.restart_after = 0
            self._pages_in_browser, self._drain_given_up = 0, False
        self._note_change()

    async def _close_full_browser(self) -> None:
        self._restarting = True
        browser = self.browser
        del self.browser
        browser.remove_listener("disconnected", self._browser_disconnected_callback)
        # Counted as it starts: a crawl may close before the old browser has.
        self.stats.inc_value("maps/browser/restarts")
        logger.info("Restarting the browser after %d pages", self._pages_in_browser)
        try:
            contexts = [wrapper.context for wrapper in self.context_wrappers.values()]
            await asyncio.gather(*(context.close() for context in contexts), return_exceptions=True)
            with suppress(PlaywrightError):
                await browser.close()
        finally:
            self._restarting = False

    async def _browser_disconnected_callback(self) -> None:
        """A browser that crashed or was closed from outside: its pages are gone."""
        await super()._browser_disconnected_callback()
        self._pages_in_browser, self._drain_given_up = 0, False
        self._note_change()

    async def _close(self) -> None:
        self._closing = True
        await super()._close()

    def _count_open_pages(self) -> None:
        # Summed over the handlers (http, https), each with its own browser.
        self.stats.inc_value("maps/pages/open_at_close", self._get_total_page_count())


class ResourceBlocker:
    """PLAYWRIGHT_ABORT_REQUEST predicate: abort requests of the given resource types."""

    def __init__(self, resource_types: frozenset[str]) -> None:
        self.resource_types = resource_types

    def __call__(self, request: PlaywrightRequest) -> bool:
        return request.resource_type in self.resource_types
