"""The worker's HTTP endpoint on the crawler's own reactor: ``/metrics`` (prometheus_client's
resource, from memory: it never waits on Redis) and ``/``, the fleet page (read from Redis on a
thread of its own); neither blocks the crawl, and neither writes to Scrapy's log.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

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


def site(registry: CollectorRegistry | None, page: resource.Resource | None) -> QuietSite:
    """``/metrics`` from ``registry`` and the fleet page at ``/``, each when given."""
    # Imported here: prometheus_client.twisted imports (so installs) the reactor at import time.
    from prometheus_client.twisted import MetricsResource

    root = resource.Resource()  # type: ignore[no-untyped-call]
    if registry is not None:
        metrics: Any = MetricsResource(registry)  # type: ignore[no-untyped-call]
        root.putChild(b"metrics", metrics)
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
