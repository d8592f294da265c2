"""What one probe of a domain says about it: pure functions, no I/O.

Classes (``status`` of a domain's document) and the seed's numeric ``code``:

==================  =========  ===============================================================
class               code       when
==================  =========  ===============================================================
alive               status     an answer below 400 that is not a parking page (also when the
                               body was cut short: ``truncated``)
parked              status     a 200..399 page of a parking or domain-sales service
                               (crawler/domains/parking.py)
http_error          status     an answer of 400 or more (404, 5xx, ...)
challenged          status     an answer of 400 or more that a bot protection sends (Cloudflare's
                               "Just a moment...", AWS WAF, Akamai, Imperva, Sucuri...: the
                               rules of crawler/bans/rules.py): the site is up behind it
redirect_offsite    status     a redirect to another domain (a name under the domain, ``www.``,
                               ``en.``, ``ww25.``..., is its own site and followed), by HTTP or
                               by a page that only redirects (a script or a meta refresh:
                               crawler/domains/page_redirect.py)
redirect_loop       status     redirects within the domain that come back to a URL already
                               visited, or more than DOMAINS_MAX_REDIRECTS of them (the status
                               of the last redirect)
redirect_failed     status     a redirect within the domain, followed, whose target failed (a
                               name under the domain without an address, a refused port, an
                               HTTPS handshake that fails...): the domain answered, its answer
                               is the redirect (the status of the last one), the target's
                               failure beside it (crawler/domains/document.py)
dns_not_found       1000       NXDOMAIN or no A record (definitive, never retried)
dns_error           1000       SERVFAIL, REFUSED or DNS timeouts after the retries (the seed
                               counts every failed resolution as 1000)
private_address     1000       the name's addresses are none of them public (127.0.0.1,
                               10.x, 169.254.169.254...): not probed, the first stored as
                               ``address`` (DOMAINS_PRIVATE_ADDRESSES probes them)
timeout             0          no answer within DOMAINS_DOWNLOAD_TIMEOUT, after its retries
                               (the first retry of an HTTP timeout is over HTTPS)
refused             0          nothing listens on the HTTP nor the HTTPS port
not_http            0          something answered on the port, but not in HTTP (an SSH or
                               SMTP banner, ...), and HTTPS gave no answer either
connection_error    0          connected, but the connection closed or reset without an
                               answer, and HTTPS gave no answer either
tls_error           0          HTTP was refused (or timed out) and the HTTPS handshake
                               failed
==================  =========  ===============================================================

A probe that tried both schemes keeps each one's failure; the domain's class is the failure
that got furthest (:func:`most_informative`): a connection that was accepted tells more than
a refused one, so an HTTP port that accepts and resets, with nothing on HTTPS, is
``connection_error``, not ``refused``.

The seed's "accessible" rule (:func:`accessible`): a code other than 1000, 0, 404 and 5xx.
"""

from __future__ import annotations

import html
from dataclasses import dataclass
from typing import Any

from OpenSSL import SSL
from scrapy.exceptions import (
    CannotResolveHostError,
    DownloadConnectionRefusedError,
    DownloadTimeoutError,
)
from twisted.internet import error as net
from twisted.internet.defer import TimeoutError as DeferredTimeout
from twisted.python.failure import Failure
from twisted.web._newclient import ParseError, ResponseFailed, ResponseNeverReceived

from crawler.domains.parking import is_parked, names_a_service
from crawler.domains.resolver import DnsFailure

DNS_NOT_FOUND_CODE = 1000
TIMEOUT_CODE = 0
# Failures of the name, not of a connection: the seed's code 1000.
DNS_KINDS = frozenset({"dns_not_found", "dns_error", "private_address"})
# Failures of a probe over HTTP after which it is tried over HTTPS ("a protocol error").
FALLBACK_KINDS = frozenset({"refused", "connection_error", "tls_error", "not_http"})
# How far a failed probe got, least first: the class of a domain whose two schemes failed is
# the failure that got furthest (the HTTP one on a tie).
FAILURE_RANK = {
    "dns_not_found": 0,
    "dns_error": 0,
    "private_address": 0,
    "refused": 1,  # nothing listens
    "timeout": 2,  # something holds the port, silent
    "tls_error": 3,  # accepted; the TLS handshake failed
    "connection_error": 4,  # accepted; closed or reset without an answer
    "not_http": 5,  # accepted and answered, but not in HTTP
}
_KINDS: tuple[tuple[str, tuple[type[BaseException], ...]], ...] = (
    ("dns_error", (net.DNSLookupError, CannotResolveHostError)),
    (
        "timeout",
        (
            net.TimeoutError,
            net.TCPTimedOutError,
            DeferredTimeout,
            TimeoutError,
            DownloadTimeoutError,
        ),
    ),
    ("refused", (net.ConnectionRefusedError, DownloadConnectionRefusedError)),
)
TITLE_MAX = 300


@dataclass(frozen=True)
class Outcome:
    """A domain's class and the seed's code."""

    status: str
    code: int


def failure_kind(exc: BaseException) -> str:
    """The class a download failure gives (``refused``, ``timeout``, ``tls_error``, ...).

    Scrapy wraps Twisted's errors in its own (``DownloadTimeoutError``, ...) with the original
    as ``__cause__``: the whole chain is read."""
    chain = _chain(exc)
    for error in chain:
        if isinstance(error, DnsFailure):
            return error.outcome
    for kind, types in _KINDS:
        if any(isinstance(error, types) for error in chain):
            return kind
    if any(_is_tls(error) for error in chain):
        return "tls_error"
    if any(_is_not_http(error) for error in chain):
        return "not_http"
    return "connection_error"


def refine_dns(kind: str, recorded: str | None, dns_pending: bool) -> str:
    """``kind`` corrected by what the resolver knows of the host: the class of its recorded
    DNS failure (the download only says "DNS lookup failed", or timed out as the resolver gave
    up), or ``dns_error`` for a download that timed out while its name was being resolved."""
    if kind in ("dns_error", "timeout") and recorded is not None:
        return recorded
    if kind == "timeout" and dns_pending:
        return "dns_error"
    return kind


def _chain(exc: BaseException) -> list[BaseException]:
    chain: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and current not in chain and len(chain) < 10:
        chain.append(current)
        current = current.__cause__ or current.__context__
    return chain


def _is_tls(exc: BaseException) -> bool:
    if isinstance(exc, SSL.Error):
        return True
    if isinstance(exc, ResponseFailed | ResponseNeverReceived):
        return any(_reason_is_tls(reason) for reason in exc.reasons)
    return False


def _reason_is_tls(reason: Any) -> bool:
    return isinstance(reason, Failure) and isinstance(reason.value, SSL.Error)


def _is_not_http(exc: BaseException) -> bool:
    """An answer whose status line is not HTTP's (Twisted's parser gave up on it)."""
    if isinstance(exc, ParseError):
        return True
    if isinstance(exc, ResponseFailed | ResponseNeverReceived):
        return any(
            isinstance(reason, Failure) and isinstance(reason.value, ParseError)
            for reason in exc.reasons
        )
    return False


def failure_outcome(kind: str) -> Outcome:
    code = DNS_NOT_FOUND_CODE if kind in DNS_KINDS else TIMEOUT_CODE
    return Outcome(kind, code)


def most_informative(kinds: list[str]) -> str:
    """The failure, of those of each scheme tried (HTTP first), that got furthest."""
    return max(kinds, key=lambda kind: FAILURE_RANK.get(kind, 0))


def falls_back(kind: str, scheme: str) -> bool:
    """True when a probe that failed this way over ``scheme`` is tried over HTTPS."""
    return scheme == "http" and kind in FALLBACK_KINDS


def response_outcome(
    status: int,
    body: bytes,
    redirect: str | None = None,
    location: str = "",
    challenged: bool = False,
) -> Outcome:
    """The class of an answer (redirects within the domain already followed); ``redirect``
    is "offsite" or "loop" for a redirect to ``location`` that was not followed, "failed" for
    one that was and whose target failed. A redirect to a domain-sales or parking service (a
    HugeDomains or Afternic lander) is parked; an error answer a bot protection sent
    (``challenged``) is challenged."""
    if redirect == "offsite":
        parked = names_a_service(location.lower().encode("utf-8", "replace"))
        return Outcome("parked" if parked else "redirect_offsite", status)
    if redirect in ("loop", "failed"):
        return Outcome(f"redirect_{redirect}", status)
    if status >= 400:
        return Outcome("challenged" if challenged else "http_error", status)
    if is_parked(body):
        return Outcome("parked", status)
    return Outcome("alive", status)


def page_title(body: bytes) -> str | None:
    """The page's <title>, unescaped, whitespace collapsed, at most TITLE_MAX characters: what
    lies between the first ``<title ...>`` and the next ``</title`` (found in one pass: a
    body of unclosed titles costs no more than any other)."""
    lower = body.lower()
    start = lower.find(b"<title")
    opened = lower.find(b">", start) if start >= 0 else -1
    end = lower.find(b"</title", opened) if opened >= 0 else -1
    if end < 0:
        return None
    text = html.unescape(body[opened + 1 : end].decode("utf-8", "replace"))
    title = " ".join(text.split())
    return title[:TITLE_MAX] or None


def accessible(code: int) -> bool:
    """The seed's rule: reachable unless 1000 (DNS), 0 (timeout/unreachable), 404 or 5xx."""
    return code not in (DNS_NOT_FOUND_CODE, TIMEOUT_CODE, 404) and not 500 <= code <= 599
