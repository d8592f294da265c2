"""The maps spider's browser: scrapy-playwright's download handler with bounds of its own
(:mod:`.handler`).

Only the maps spider names it (DOWNLOAD_HANDLERS in its custom_settings), so other crawls never
import Playwright.
"""

from crawler.browser.handler import BrowserHandler, ResourceBlocker

__all__ = ["BrowserHandler", "ResourceBlocker"]
