"""The fleet page over HTTP: :class:`FleetPage` (a Twisted resource, GET only, local callers
only unless ``FLEET_PAGE = "all"``) and :class:`PageBuilds`, which reads Redis on a thread of
its own, so a slow Redis never blocks a crawl nor takes the reactor's threads (DNS uses them).
"""

from __future__ import annotations

import ipaddress
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from redis.exceptions import RedisError
from twisted.internet import defer
from twisted.python.failure import Failure
from twisted.web import resource, server

from crawler.observability.endpoint import OwnThread
from crawler.observability.page import Report, render_error, render_page

if TYPE_CHECKING:
    from twisted.web.server import Request

logger = logging.getLogger(__name__)


PAGE_CACHE_SECONDS = 2.0
PAGE_DEADLINE_SECONDS = 15.0


class PageBuilds:
    """Builds the page on a thread of its own, never the reactor's pool (DNS lookups use it): loads
    share a build under way, reuse one for ``PAGE_CACHE_SECONDS``, and time out after
    ``PAGE_DEADLINE_SECONDS``."""

    def __init__(self, build: Callable[[], Report]) -> None:
        self.build = build
        self._thread = OwnThread("fleet-page")
        self._building = False
        self._waiters: list[defer.Deferred[str]] = []
        self._cached: tuple[float, str] | None = None

    def page(self) -> defer.Deferred[str]:
        """The page, built now or shared with the build under way or just done."""
        from twisted.internet import reactor

        if self._cached and time.monotonic() - self._cached[0] < PAGE_CACHE_SECONDS:
            return defer.succeed(self._cached[1])
        waiter: defer.Deferred[str] = defer.Deferred()
        self._waiters.append(waiter)
        waiter.addTimeout(PAGE_DEADLINE_SECONDS, reactor)
        if not self._building:
            self._building = True
            built = self._thread.run(lambda: render_page(self.build()))
            built.addBoth(self._done)
        return waiter

    def _done(self, result: str | Failure) -> None:
        self._building = False
        if not isinstance(result, Failure):
            self._cached = (time.monotonic(), result)
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            if waiter.called:  # timed out
                continue
            if isinstance(result, Failure):
                waiter.errback(result)
            else:
                waiter.callback(result)


class FleetPage(resource.Resource):
    """``GET /``: the page of ``build``'s report; with ``local_only``, 403 but for loopback."""

    isLeaf = True

    def __init__(self, build: Callable[[], Report], local_only: bool = True) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.builds = PageBuilds(build)
        self.local_only = local_only

    def render_GET(self, request: Request) -> bytes | int:
        request.setHeader(b"content-type", b"text/html; charset=utf-8")  # type: ignore[no-untyped-call]
        request.setHeader(b"cache-control", b"no-store")  # type: ignore[no-untyped-call]
        if request.path != b"/":
            request.setResponseCode(404)
            return render_error("Nothing here: the fleet page is at /").encode()
        client = request.getClientAddress()  # type: ignore[no-untyped-call]
        host = request.getHeader(b"host")
        if self.local_only and not (_is_loopback(client) and _is_local_name(host)):
            request.setResponseCode(403)
            return render_error("The fleet page is shown on this machine only.").encode()
        finished: list[object] = []
        request.notifyFinish().addBoth(finished.append)
        deferred = self.builds.page()
        deferred.addErrback(self._failed, request)
        deferred.addCallback(self._write, request, finished)
        deferred.addErrback(self._unwritten)
        return server.NOT_DONE_YET

    def _failed(self, failure: Failure, request: Request) -> str:
        request.setResponseCode(503)
        if failure.check(RedisError):  # type: ignore[no-untyped-call]
            return render_error(f"Redis is unreachable: {failure.value}")
        if failure.check(defer.TimeoutError):  # type: ignore[no-untyped-call]
            return render_error("Redis is slow: the page took too long to build; try again soon.")
        logger.error("Fleet page failed: %s", failure.getTraceback())
        return render_error("The fleet page failed; the worker's log has the details.")

    def _unwritten(self, failure: Failure) -> None:
        logger.error("Fleet page could not be sent: %s", failure.getTraceback())

    def _write(self, page: str, request: Request, finished: list[object]) -> None:
        if finished:  # the client went away
            return
        request.write(page.encode())  # type: ignore[no-untyped-call]
        request.finish()  # type: ignore[no-untyped-call]


LOCAL_NAMES = ("localhost", "127.0.0.1", "::1")


def _is_local_name(host: bytes | None) -> bool:
    """Whether a Host header names this machine (a page of another site that a DNS rebinding
    points at 127.0.0.1 sends its own name). No header (HTTP/1.0) is the client's address."""
    if host is None:
        return True
    name = host.decode("latin-1").strip().lower()
    if name.startswith("["):
        name = name[1 : name.find("]")]
    elif name.count(":") == 1:
        name = name.partition(":")[0]
    return name.rstrip(".") in LOCAL_NAMES


def _is_loopback(address: Any) -> bool:
    try:
        ip = ipaddress.ip_address(getattr(address, "host", ""))
    except ValueError:
        return False
    mapped = getattr(ip, "ipv4_mapped", None)
    return bool(ip.is_loopback or (mapped is not None and mapped.is_loopback))
