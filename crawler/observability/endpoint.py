"""The worker's HTTP endpoint on the crawler's own reactor: ``/metrics`` (from memory, on the
reactor's thread: it never waits on Redis) and ``/``, the fleet page (read from Redis on a
thread of its own); neither blocks the crawl, and neither writes to Scrapy's log.
"""

from __future__ import annotations

import gzip
from typing import TYPE_CHECKING, Any, cast

from prometheus_client.exposition import choose_encoder, gzip_accepted
from twisted.internet import defer
from twisted.internet.error import CannotListenError
from twisted.web import http, resource, server

from crawler.config.table import RULES

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry
    from twisted.internet.defer import Deferred


class QuietSite(server.Site):
    """A site that writes no access log and no start/stop lines."""

    noisy = False

    def log(self, request: http.Request) -> None:
        return


def parse_ports(raw: object) -> list[int]:
    """``METRICS_PORT``: 0 or empty (off), a port ``9410``, or a range ``9410-9419`` (the first
    free one is used, so several workers of one machine can share the setting)."""
    return list(RULES["METRICS_PORT"].read("METRICS_PORT", raw))


class Metrics(resource.Resource):
    """``GET /metrics``: the registry's samples, in the format the scraper accepts (Prometheus
    text or OpenMetrics), gzipped when it accepts that, only the ``name[]`` asked for if any:
    what prometheus_client's own resource answers. That one answers on a thread of the
    reactor's pool, which hands the answer back to the reactor and waits for it: a scrape under
    way as the crawl ended left that thread waiting for a reactor that was waiting to join it,
    and the worker never exited. Rendering from memory takes a few milliseconds."""

    isLeaf = True

    def __init__(self, registry: CollectorRegistry) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.registry = registry

    def render_GET(self, request: server.Request) -> bytes:
        encoder, content_type = choose_encoder(_header(request, b"accept"))
        names = [name.decode(errors="replace") for name in request.args.get(b"name[]", [])]
        output = encoder(self.registry.restricted_registry(names) if names else self.registry)
        if gzip_accepted(_header(request, b"accept-encoding")):
            output = gzip.compress(output)
            request.setHeader(b"Content-Encoding", b"gzip")  # type: ignore[no-untyped-call]
        request.setHeader(b"Content-Type", content_type.encode())  # type: ignore[no-untyped-call]
        return output


def _header(request: server.Request, name: bytes) -> str:
    value = request.getHeader(name)
    return "" if value is None else value.decode("latin-1")


def site(registry: CollectorRegistry | None, page: resource.Resource | None) -> QuietSite:
    """``/metrics`` from ``registry`` and the fleet page at ``/``, each when given."""
    root = resource.Resource()  # type: ignore[no-untyped-call]
    if registry is not None:
        root.putChild(b"metrics", cast(Any, Metrics(registry)))
    if page is not None:
        root.putChild(b"", cast(Any, page))
    return QuietSite(root)  # type: ignore[no-untyped-call]


class Listening:
    """A listening endpoint: its port, and a way to stop it."""

    def __init__(self, listening: Any) -> None:
        self._listening = listening
        self.port = int(listening.getHost().port)

    def stop(self) -> Deferred[None]:
        return defer.maybeDeferred(self._listening.stopListening)


def listen(host: str, ports: list[int], served: QuietSite) -> Listening:
    """Serve ``served`` on the first of ``ports`` that is free."""
    from twisted.internet import reactor as installed

    reactor: Any = installed
    error: CannotListenError | None = None
    for port in ports:
        try:
            return Listening(reactor.listenTCP(port, served, interface=host))
        except CannotListenError as exc:
            error = exc
    assert error is not None
    raise error
