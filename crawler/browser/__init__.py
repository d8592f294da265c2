"""The maps spider's browser: scrapy-playwright's download handler with bounds of its own
(:mod:`.handler`), its pages' sizes bounded (:mod:`.bounds`), its failed navigations told in
Scrapy's words (:mod:`.failures`), its requests sent through their identity's proxy
(:mod:`.proxies`).

Only the maps spider names it (DOWNLOAD_HANDLERS in its custom_settings), so other crawls never
import Playwright.
"""

from crawler.browser.handler import BrowserHandler, ResourceBlocker

__all__ = ["BrowserHandler", "ResourceBlocker"]
