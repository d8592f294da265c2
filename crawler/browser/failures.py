"""A browser navigation that failed, in Scrapy's words: the exception Scrapy's own download
raises for the same failure (its ``wrap_twisted_exceptions``), so retries, the circuit breaker
(crawler/bans/breaker.py) and dead letters treat a page the browser could not reach as they
treat any download that could not reach its host.

Only failures of the host are translated: Chromium's network errors for a host that refused,
reset or dropped the connection, gave no answer, cut it short, has no address or answered an
https URL with no TLS (``ERR_SSL_PROTOCOL_ERROR``: Scrapy's ``DownloadFailedError`` of an
OpenSSL error), and a navigation that timed out; a proxy that could not be reached at all,
which is its identity's own failure, as a plain download's refused proxy is
(crawler/bans/breaker.py ``identity_at_fault``); and a proxy that refused the tunnel to an
https host (``ERR_TUNNEL_CONNECTION_FAILED``), Scrapy's ``TunnelError``. Chromium keeps the
proxy's answer to itself, so whether it was the proxy's refusal (a 403: blocked on every
host) or the host's failure (a 5xx: the proxy could not reach it) is unknown: it is an
:class:`~crawler.bans.breaker.UnheardTunnelError`, which blocks the proxy on that host only, as
a plain download's 5xx refusal does. A page that crashed, a certificate the browser refused
or the browser closing stay Playwright's errors: the host answered, or may not be the one at
fault.
"""

from __future__ import annotations

import re

from playwright.async_api import Error as PlaywrightError
from playwright.async_api import TimeoutError as PlaywrightTimeoutError
from scrapy.exceptions import (
    CannotResolveHostError,
    DownloadConnectionRefusedError,
    DownloadFailedError,
    DownloadTimeoutError,
    ResponseDataLossError,
)
from twisted.internet.error import ConnectError

from crawler.bans.breaker import UnheardTunnelError

# Chromium's name of a network error in a Playwright error's message ("net::ERR_...").
NET_ERROR = re.compile(r"\bnet::(ERR_[A-Z0-9_]+)")
# Chromium's network errors of a host that did not answer (net/base/net_error_list.h), as the
# exception Scrapy raises for the same failure.
HOST_FAILURES: dict[str, type[Exception]] = {
    "ERR_CONNECTION_REFUSED": DownloadConnectionRefusedError,
    "ERR_NAME_NOT_RESOLVED": CannotResolveHostError,
    "ERR_NAME_RESOLUTION_FAILED": CannotResolveHostError,
    "ERR_CONNECTION_TIMED_OUT": DownloadTimeoutError,
    "ERR_TIMED_OUT": DownloadTimeoutError,
    "ERR_CONNECTION_RESET": DownloadFailedError,
    "ERR_CONNECTION_CLOSED": DownloadFailedError,
    "ERR_CONNECTION_ABORTED": DownloadFailedError,
    "ERR_CONNECTION_FAILED": DownloadFailedError,
    "ERR_EMPTY_RESPONSE": DownloadFailedError,
    "ERR_ADDRESS_UNREACHABLE": ConnectError,
    "ERR_CONTENT_LENGTH_MISMATCH": ResponseDataLossError,
    "ERR_INCOMPLETE_CHUNKED_ENCODING": ResponseDataLossError,
    # No TLS (or a broken one) on an https URL: Scrapy's OpenSSL error in a DownloadFailedError.
    "ERR_SSL_PROTOCOL_ERROR": DownloadFailedError,
    # The proxy could not be reached: blamed on the identity (a proxy) on every host.
    "ERR_PROXY_CONNECTION_FAILED": DownloadConnectionRefusedError,
    # The proxy refused the tunnel, its answer unheard: blamed on the proxy on the host only.
    "ERR_TUNNEL_CONNECTION_FAILED": UnheardTunnelError,
}


def navigation_failure(error: PlaywrightError) -> Exception:
    """The exception Scrapy raises for the failure the navigation met (its message Playwright's
    first line: "Page.goto: net::ERR_CONNECTION_REFUSED at http://..."); ``error`` itself when
    the host is not at fault."""
    message = (error.message or str(error)).split("\n", 1)[0]
    if isinstance(error, PlaywrightTimeoutError):
        return DownloadTimeoutError(message)
    found = NET_ERROR.search(message)
    kind = HOST_FAILURES.get(found.group(1)) if found else None
    if kind is None:
        return error
    if kind is ConnectError:
        return ConnectError(string=message)  # type: ignore[no-untyped-call]
    return kind(message)
