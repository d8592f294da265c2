"""Compressed answers, as real targets send them.

With ``compression`` on (the default; ``{"compression": false}`` turns it off), every answer
with a body, bans and errors included, goes out gzipped when the request's Accept-Encoding
allows gzip, else deflated when it allows deflate. Answers that set their own Content-Encoding,
connections dropped on purpose and answers to HEAD are left alone.
"""

from __future__ import annotations

from collections.abc import Callable

from aiohttp import hdrs, web
from aiohttp.typedefs import Handler, Middleware

from sandbox.faults import DroppedResponse

# Codings the sandbox sends, in the order it prefers them.
CODINGS = (("gzip", web.ContentCoding.gzip), ("deflate", web.ContentCoding.deflate))
NO_BODY_STATUSES = frozenset({204, 304})


def compression_middleware(enabled: Callable[[], bool]) -> Middleware:
    """Return a middleware compressing answers while ``enabled()`` is true."""

    @web.middleware
    async def compress(request: web.Request, handler: Handler) -> web.StreamResponse:
        response = await handler(request)
        if enabled() and compressible(request, response):
            coding = chosen_coding(request.headers.get(hdrs.ACCEPT_ENCODING, ""))
            if coding is not None:
                response.enable_compression(coding)
        return response

    return compress


def compressible(request: web.Request, response: web.StreamResponse) -> bool:
    """Tell whether ``response`` is a whole answer with a body that may be compressed."""
    return (
        isinstance(response, web.Response)
        and response.body is not None
        and not isinstance(response, DroppedResponse)
        and not response.prepared
        and request.method != hdrs.METH_HEAD
        and response.status not in NO_BODY_STATUSES
        and hdrs.CONTENT_ENCODING not in response.headers
    )


def chosen_coding(accept_encoding: str) -> web.ContentCoding | None:
    """The coding to send for this Accept-Encoding value, or None for none."""
    accepted: dict[str, float] = {}
    for part in accept_encoding.lower().split(","):
        name, _, params = part.partition(";")
        accepted[name.strip()] = _quality(params)
    for name, coding in CODINGS:
        if accepted.get(name, accepted.get("*", 0.0)) > 0:
            return coding
    return None


def _quality(params: str) -> float:
    for param in params.split(";"):
        key, _, value = param.partition("=")
        if key.strip() == "q":
            try:
                return float(value)
            except ValueError:
                return 0.0
    return 1.0
