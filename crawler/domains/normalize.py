"""One spelling per domain, by one documented rule.

:func:`normalize_domain` turns what a list or a user gives (``Example.COM``, ``www.example.com``,
``https://www.example.com:8443/path?q``, ``bücher.de``, ``example.com.``) into the key a domain
is stored under:

1. surrounding whitespace is dropped; a URL (``scheme://...``) gives its host; otherwise a path,
   query or fragment (from the first ``/``, ``?`` or ``#``) and a ``:port`` are cut off;
2. the name is lower-cased, a trailing dot removed, and internationalized labels are turned
   into their ASCII (IDNA, punycode ``xn--``) form;
3. one leading ``www.`` is removed when a dotted name remains (``www.com`` stays):
   ``www.example.com`` and ``example.com`` are one domain, stored as ``example.com`` and probed
   at ``http://example.com/``.

A domain's site is the domain and every name under it (:func:`same_site`): a redirect from
``example.com`` to ``www.example.com``, ``en.example.com`` or ``ww25.example.com`` stays on it
and is followed; one to ``example.org`` or ``example.com.evil.org`` leaves it.

A name that is not a public host name is refused with :class:`InvalidDomain` (``reason`` is a
short slug): an IP address, in any spelling a browser reads as one (``127.0.0.1`` in
full-width digits or dots, ``127.1``, ``0x7f.0.0.1``: a name whose last label is a number),
a single label (``localhost``), a label longer than 63 characters or with characters other than
letters, digits and inner hyphens, a name over 253 characters.
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit

from crawler.uris import ascii_host, is_ip

MAX_NAME = 253
_LABEL = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?")
_CUT = re.compile(r"[/?#]")
# A last label a browser reads as a number: the name is an IPv4 address (the URL standard).
_NUMBER = re.compile(r"[0-9]+|0x[0-9a-f]*")


class InvalidDomain(ValueError):
    """Input that names no domain; ``reason`` is a short slug."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason


def normalize_domain(raw: str) -> str:
    """The stored form of the domain ``raw`` names; InvalidDomain when it names none."""
    host = _host_part(raw.strip())
    if not host:
        raise InvalidDomain("empty", "no host name")
    host = host.lower().rstrip(".")
    name = _ascii(host)
    if _is_address(name):
        raise InvalidDomain("ip_address", f"{host[:80]!r} is an address, not a domain")
    if name.startswith("www.") and "." in name[4:]:
        name = name[4:]
    _check(name)
    return name


def _host_part(text: str) -> str:
    if "://" in text:
        try:
            parts = urlsplit(text)
            host = parts.hostname or ""
            parts.port  # noqa: B018 (raises ValueError for a bad port)
        except ValueError as exc:
            raise InvalidDomain("bad_url", str(exc)) from None
        if "@" in parts.netloc:
            raise InvalidDomain("credentials", "a domain carries no user or password")
        return host
    host = _CUT.split(text, 1)[0]
    if host.startswith("["):
        return host.partition("]")[0] + "]"
    name, _, port = host.partition(":")
    if port and not (port.isascii() and port.isdigit()):
        raise InvalidDomain("bad_port", f"{port[:20]!r}")
    return name


def _is_address(name: str) -> bool:
    """True for an IP address, or a name a browser reads as one (its last label a number)."""
    return is_ip(name) or _NUMBER.fullmatch(name.rsplit(".", 1)[-1]) is not None


def _ascii(host: str) -> str:
    try:
        return ascii_host(host)
    except ValueError as exc:
        raise InvalidDomain("bad_idna", str(exc)[:200]) from None


def _check(name: str) -> None:
    if len(name) > MAX_NAME:
        raise InvalidDomain("too_long", f"{len(name)} characters, at most {MAX_NAME}")
    labels = name.split(".")
    if len(labels) < 2:
        raise InvalidDomain("single_label", f"{name[:80]!r} has no dot")
    for label in labels:
        if not _LABEL.fullmatch(label):
            raise InvalidDomain("bad_label", f"{label[:80]!r} in {name[:120]!r}")


def same_site(host: str, domain: str) -> bool:
    """True when ``host`` is ``domain`` or a name under it (``www.``, ``en.``, ``ww25.``...)."""
    host = host.lower().rstrip(".")
    return host == domain or host.endswith(f".{domain}")
