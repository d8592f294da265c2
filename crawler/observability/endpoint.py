"""The worker's HTTP endpoint on the crawler's own reactor: ``/metrics`` (rendered on a thread
of its own) and ``/``, the fleet page (read from Redis on a thread of its own); neither blocks
the crawl, and neither writes to Scrapy's log.
"""

from __future__ import annotations

import gzip
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar, cast

from prometheus_client.exposition import choose_encoder, gzip_accepted
from twisted.internet import defer, threads
from twisted.internet.error import CannotListenError
from twisted.python.failure import Failure
from twisted.python.threadpool import ThreadPool
from twisted.web import http, resource, server

from crawler.config.table import RULES

logger = logging.getLogger(__name__)
T = TypeVar("T")

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


class OwnThread:
    """A thread of its own for work the reactor must not wait on (nor the reactor's pool, which
    DNS lookups use): started at first use, joined as the reactor shuts down. What runs there
    hands its result to the reactor without waiting for it, so that join always ends."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._pool: ThreadPool | None = None

    def run(self, function: Callable[..., T], *args: Any) -> Deferred[T]:
        """``function(*args)`` on the thread; its result (or failure) on the reactor."""
        from twisted.internet import reactor as installed

        reactor: Any = installed
        if self._pool is None:
            self._pool = ThreadPool(minthreads=0, maxthreads=1, name=self.name)
            self._pool.start()
            reactor.addSystemEventTrigger("during", "shutdown", self._pool.stop)
        return threads.deferToThreadPool(reactor, self._pool, function, *args)


class Metrics(resource.Resource):
    """``GET /metrics``: the registry's samples, in the format the scraper accepts (Prometheus
    text or OpenMetrics), gzipped when it accepts that, only the ``name[]`` asked for if any:
    what prometheus_client's own resource answers.

    They are rendered on a thread of their own, never the reactor's: a large registry (a
    crawl of many hosts) or one that reads Redis (``scrapy status --serve``) does not hold up
    the crawl, and the thread hands the answer to the reactor without waiting for it.
    prometheus_client's resource waited (Twisted's WSGI resource, on the reactor's pool): a
    scrape under way as the crawl ended left that thread waiting for a reactor that was waiting
    to join it, and the worker never exited."""

    isLeaf = True

    def __init__(self, registry: CollectorRegistry) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.registry = registry
        self._thread = OwnThread("metrics")

    def render_GET(self, request: server.Request) -> int:
        names = [name.decode(errors="replace") for name in request.args.get(b"name[]", [])]
        asked = (_header(request, b"accept"), _header(request, b"accept-encoding"))
        rendered = self._thread.run(self._render, *asked, [name for name in names if name])
        gone: list[object] = []
        request.notifyFinish().addBoth(gone.append)
        rendered.addCallbacks(
            self._answer, self._failed, callbackArgs=(request, gone), errbackArgs=(request, gone)
        )
        return server.NOT_DONE_YET

    def _render(self, accept: str, encoding: str, names: list[str]) -> tuple[bytes, str, bool]:
        encoder, content_type = choose_encoder(accept)
        output = encoder(self.registry.restricted_registry(names) if names else self.registry)
        zipped = gzip_accepted(encoding)
        return (gzip.compress(output) if zipped else output), content_type, zipped

    @staticmethod
    def _answer(
        rendered: tuple[bytes, str, bool], request: server.Request, gone: list[object]
    ) -> None:
        output, content_type, zipped = rendered
        if gone:  # the scraper hung up meanwhile
            return
        if zipped:
            request.setHeader(b"Content-Encoding", b"gzip")  # type: ignore[no-untyped-call]
        request.setHeader(b"Content-Type", content_type.encode())  # type: ignore[no-untyped-call]
        request.write(output)  # type: ignore[no-untyped-call]
        request.finish()  # type: ignore[no-untyped-call]

    @staticmethod
    def _failed(failure: Failure, request: server.Request, gone: list[object]) -> None:
        logger.error("Rendering /metrics failed: %s", failure.getErrorMessage())
        if not gone:
            request.setResponseCode(500)
            request.write(b"rendering the metrics failed\n")  # type: ignore[no-untyped-call]
            request.finish()  # type: ignore[no-untyped-call]


def _header(request: server.Request, name: bytes) -> str:
    """A request header's values, joined as one (a header sent twice counts whole)."""
    values = request.requestHeaders.getRawHeaders(name, [])
    return ",".join(value.decode("latin-1") for value in values)


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
