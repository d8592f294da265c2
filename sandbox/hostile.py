"""Hostile answers under ``/hostile/<kind>/<anything>``, for tests of a crawler's bounds.

Point a spider's base URL at ``<sandbox>/hostile/<kind>`` and every page it asks for is:

* ``redirect-loop``: a 302 back to the same URL, forever;
* ``gzip-bomb``: a 200 whose 1 MiB gzipped body decompresses to 1 GiB of zeros;
* ``huge``: a 200 of 200 MiB, streamed, with its Content-Length;
* ``endless``: a 200 HTML page streamed without end, until the client goes away;
* ``deep-json``: a 200 JSON object nested 100,000 levels deep;
* ``retry-after``: a 429 asking to come back in ten years.
"""

from __future__ import annotations

import contextlib
import gzip
from functools import cache

from aiohttp import web

MIB = 1024 * 1024
BOMB_MEMBERS = 1024  # gzip members of 1 MiB of zeros each: 1 GiB decompressed
HUGE_MIB = 200
DEEP_LEVELS = 100_000
TEN_YEARS = 10 * 365 * 24 * 3600


@cache
def gzip_bomb() -> bytes:
    """A gzip stream of BOMB_MEMBERS members, each 1 MiB of zeros (about 1 KiB gzipped)."""
    return gzip.compress(bytes(MIB), compresslevel=9) * BOMB_MEMBERS


def deep_json() -> bytes:
    return (
        b'{"statusCode": 0, "data": ' + b'{"a": ' * DEEP_LEVELS + b"0" + b"}" * DEEP_LEVELS + b"}"
    )


class HostilePages:
    """Serves the hostile answers."""

    def register(self, router: web.UrlDispatcher) -> None:
        """Add the hostile routes to ``router``."""
        router.add_get("/hostile/redirect-loop/{tail:.*}", self.redirect_loop)
        router.add_get("/hostile/gzip-bomb/{tail:.*}", self.bomb)
        router.add_get("/hostile/huge/{tail:.*}", self.huge)
        router.add_get("/hostile/endless/{tail:.*}", self.endless)
        router.add_get("/hostile/deep-json/{tail:.*}", self.deep)
        router.add_get("/hostile/retry-after/{tail:.*}", self.retry_after)

    async def redirect_loop(self, request: web.Request) -> web.Response:
        return web.Response(status=302, headers={"Location": request.path_qs})

    async def bomb(self, request: web.Request) -> web.Response:
        headers = {"Content-Encoding": "gzip"}
        return web.Response(body=gzip_bomb(), content_type="text/html", headers=headers)

    async def huge(self, request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/html"})
        response.content_length = HUGE_MIB * MIB
        await response.prepare(request)
        chunk = b"x" * MIB
        with contextlib.suppress(ConnectionError):  # a client that stopped reading it
            for _ in range(HUGE_MIB):
                await response.write(chunk)
            await response.write_eof()
        return response

    async def endless(self, request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/html"})
        await response.prepare(request)
        chunk = b"<p>" + b"x" * (64 * 1024) + b"</p>"
        with contextlib.suppress(ConnectionError):
            while True:
                await response.write(chunk)
        return response

    async def deep(self, request: web.Request) -> web.Response:
        return web.Response(body=deep_json(), content_type="application/json")

    async def retry_after(self, request: web.Request) -> web.Response:
        headers = {"Retry-After": str(TEN_YEARS)}
        return web.Response(status=429, text="Too Many Requests", headers=headers)
