"""Recrawl: scheduled revisits whose interval adapts to how often each page changes.

``policy`` holds the interval rule (pure), ``store`` the revisits waiting in Redis,
``revisits`` how a visit becomes the next one, ``middleware`` the Scrapy component.
"""

from crawler.recrawl.middleware import RecrawlMiddleware
from crawler.recrawl.policy import RecrawlPolicy
from crawler.recrawl.store import RevisitStore

__all__ = ["RecrawlMiddleware", "RecrawlPolicy", "RevisitStore"]
