"""Recrawl: scheduled revisits whose interval adapts to how often each page changes.

``policy`` holds the interval rule (pure), ``store`` the revisits waiting in Redis,
``revisits`` how a visit becomes the next one, ``middleware`` the Scrapy component,
``moves`` what a visit that does not find its page does to its revisits, ``failures`` the
downloader middleware that tells it of a revisit whose download failed.
"""

from crawler.recrawl.failures import RecrawlFailureMiddleware
from crawler.recrawl.middleware import RecrawlMiddleware
from crawler.recrawl.policy import RecrawlPolicy
from crawler.recrawl.store import RevisitStore

__all__ = ["RecrawlFailureMiddleware", "RecrawlMiddleware", "RecrawlPolicy", "RevisitStore"]
