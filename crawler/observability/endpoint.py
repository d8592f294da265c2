"""The ``/metrics`` HTTP endpoint, served by twisted.web on the crawler's own reactor.

A scrape renders the page from the worker's in-memory stats and the fleet view the periodic
task last read: it never waits on Redis. Requests are not logged, so Scrapy's log stays the
crawl's.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from twisted.internet import defer
from twisted.internet.error import CannotListenError
from twisted.web import http, resource, server

from crawler.observability.metrics import CONTENT_TYPE
from crawler.settings_check import RULES

if TYPE_CHECKING:
    from twisted.internet.defer import Deferred
    from twisted.web.server import Request


class MetricsResource(resource.Resource):
    """``GET /metrics``: the page ``render_page`` returns; any other path is a 404."""

    isLeaf = True

    def __init__(self, render_page: Callable[[], str]) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.render_page = render_page

    def render_GET(self, request: Request) -> bytes:
        if request.path != b"/metrics":
            request.setResponseCode(404)
            request.setHeader(b"content-type", b"text/plain; charset=utf-8")  # type: ignore[no-untyped-call]
            return b"metrics are at /metrics\n"
        request.setHeader(b"content-type", CONTENT_TYPE.encode())  # type: ignore[no-untyped-call]
        return self.render_page().encode()


class QuietSite(server.Site):
    """A site that writes no access log and no start/stop lines."""

    noisy = False

    def log(self, request: http.Request) -> None:
        return


def parse_ports(raw: object) -> list[int]:
    """``METRICS_PORT``: 0 or empty (off), a port ``9410``, or a range ``9410-9419`` (the first
    free one is used, so several workers of one machine can share the setting)."""
    return list(RULES["METRICS_PORT"].read("METRICS_PORT", raw))


class MetricsEndpoint:
    """A listening metrics endpoint: its port, and a way to stop it."""

    def __init__(self, listening: Any) -> None:
        self._listening = listening
        self.port = int(listening.getHost().port)

    def stop(self) -> Deferred[None]:
        return defer.maybeDeferred(self._listening.stopListening)


def listen(host: str, ports: list[int], page: Callable[[], str]) -> MetricsEndpoint:
    """Serve ``page`` at ``/metrics`` on the first of ``ports`` that is free."""
    from twisted.internet import reactor as installed

    reactor: Any = installed
    site = QuietSite(MetricsResource(page))  # type: ignore[no-untyped-call]
    error: CannotListenError | None = None
    for port in ports:
        try:
            return MetricsEndpoint(reactor.listenTCP(port, site, interface=host))
        except CannotListenError as exc:
            error = exc
    assert error is not None
    raise error
