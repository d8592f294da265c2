"""Downloader middlewares."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import TYPE_CHECKING

from scrapy.exceptions import NotConfigured

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.crawler import Crawler


class BindAddressMiddleware:
    """Send requests from a pool of local source addresses, round-robin.

    A site that counts requests per client address sees each address as its own client; on
    loopback, 127.0.0.2, 127.0.0.3, ... act as several IPs. A request that already names a
    ``bindaddress`` in its meta keeps it.

    Settings:
        BIND_ADDRESSES (list of str, default []): the pool; empty disables the middleware.
    """

    def __init__(self, addresses: list[str]) -> None:
        if not addresses:
            raise NotConfigured  # no pool: the operating system picks, nothing to log
        self._addresses: Iterator[str] = itertools.cycle(addresses)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> BindAddressMiddleware:
        return cls(crawler.settings.getlist("BIND_ADDRESSES"))

    def process_request(self, request: Request) -> None:
        if "bindaddress" not in request.meta:
            request.meta["bindaddress"] = (next(self._addresses), 0)
