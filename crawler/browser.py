"""The maps spider's browser: scrapy-playwright's download handler with bounds of its own.

Only the maps spider names it (DOWNLOAD_HANDLERS in its custom_settings), so other crawls never
import Playwright.
"""

from __future__ import annotations

import asyncio
import logging
from contextlib import suppress
from typing import TYPE_CHECKING, Any

from playwright.async_api import Error as PlaywrightError
from scrapy import signals
from scrapy_playwright.handler import ScrapyPlaywrightDownloadHandler

from crawler.config import setting_int

if TYPE_CHECKING:
    from playwright.async_api import Request as PlaywrightRequest
    from scrapy.crawler import Crawler

logger = logging.getLogger(__name__)


class BrowserHandler(ScrapyPlaywrightDownloadHandler):  # type: ignore[misc]
    """scrapy-playwright's handler bounded by MAPS_BLOCKED_RESOURCE_TYPES and
    MAPS_BROWSER_RESTART_PAGES; at close it counts the pages left open in
    ``maps/pages/open_at_close``."""

    def __init__(self, crawler: Crawler) -> None:
        super().__init__(crawler)
        names = crawler.settings.getlist("MAPS_BLOCKED_RESOURCE_TYPES")
        blocked = frozenset(name.strip() for name in names if name.strip())
        if blocked and not crawler.settings.get("PLAYWRIGHT_ABORT_REQUEST"):
            self.abort_request = ResourceBlocker(blocked)
        self.restart_after = setting_int(crawler.settings, "MAPS_BROWSER_RESTART_PAGES", 0)
        self._pages_since_launch = 0
        self._restarting = False
        self._tasks: set[asyncio.Task[None]] = set()
        crawler.signals.connect(self._count_open_pages, signal=signals.spider_closed)

    def _make_close_page_callback(self, context_name: str) -> Any:
        release = super()._make_close_page_callback(context_name)

        def page_closed() -> None:
            release()
            self._pages_since_launch += 1
            if self.restart_after and self._pages_since_launch >= self.restart_after:
                task = asyncio.ensure_future(self._restart_browser())
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)

        return page_closed

    async def _restart_browser(self) -> None:
        async with self.browser_launch_lock:
            if self._restarting or not hasattr(self, "browser"):
                return
            if self._get_total_page_count() or self._pages_since_launch < self.restart_after:
                return
            self._restarting = True
            browser, self._pages_since_launch = self.browser, 0
            del self.browser
            # Counted as it starts: a crawl may close before the old browser has.
            self.stats.inc_value("maps/browser/restarts")
            logger.info("Restarting the browser after %d pages", self.restart_after)
            try:
                contexts = [wrapper.context for wrapper in self.context_wrappers.values()]
                with suppress(PlaywrightError):
                    await asyncio.gather(*(context.close() for context in contexts))
                    await browser.close()
            finally:
                self._restarting = False

    async def _browser_disconnected_callback(self) -> None:
        if not self._restarting:
            await super()._browser_disconnected_callback()

    def _count_open_pages(self) -> None:
        # Summed over the handlers (http, https), each with its own browser.
        self.stats.inc_value("maps/pages/open_at_close", self._get_total_page_count())


class ResourceBlocker:
    """PLAYWRIGHT_ABORT_REQUEST predicate: abort requests of the given resource types."""

    def __init__(self, resource_types: frozenset[str]) -> None:
        self.resource_types = resource_types

    def __call__(self, request: PlaywrightRequest) -> bool:
        return request.resource_type in self.resource_types
