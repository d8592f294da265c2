"""Downloader middlewares: ban detection with fleet-wide politeness, and backoff retries."""

from crawler.middlewares.bans import BanMiddleware
from crawler.middlewares.retry import BackoffRetryMiddleware

__all__ = ["BackoffRetryMiddleware", "BanMiddleware"]
