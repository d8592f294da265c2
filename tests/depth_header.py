"""A downloader middleware for tests: every request that carries a frontier depth (meta
DEPTH_META, the links spider's) tells it to the server in a ``Depth`` header, so the sandbox's
many-hosts web notes the depth each page was fetched at (sandbox/hosts.py)."""

from __future__ import annotations

from scrapy import Request

from crawler.meta import depth_of


class DepthHeaderMiddleware:
    def process_request(self, request: Request) -> None:
        depth = depth_of(request.meta)
        if depth is not None:
            request.headers["Depth"] = str(depth)
