"""URL canonicalisation, and the rules that decide which links the ``links`` spider follows and in
what order. Pure functions, no I/O.

A canonical URL (:func:`canonical_url`) has its scheme and host in lower case, no default port, no
fragment, its query sorted (w3lib) and no tracking parameters (:data:`TRACKING_PARAMS`): the
frontier's dupefilter sees ``/a?utm_source=x#top`` and ``/a`` as one page. A request goes to
the link's :func:`request_url`: the same, but its query in its own order and escapes.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass
from functools import lru_cache
from urllib.parse import unquote_plus, urlsplit, urlunsplit

import tldextract
from scrapy.linkextractors import IGNORED_EXTENSIONS
from w3lib.url import canonicalize_url, safe_url_string

from crawler.uris import WEB_PORTS, is_ip

SCHEMES = frozenset({"http", "https"})
# What a browser strips from both ends of a link (WHATWG URL: C0 controls and space), not
# other white space, which belongs to the URL (U+0085 is escaped as any other character).
C0_OR_SPACE = "".join(map(chr, range(0x21)))
# Query parameters that only say where a visitor came from, removed from every URL: exact
# names, and every name starting with one of TRACKING_PREFIXES (compared in lower case). Not
# names a site may page or search with (``si``, ``ref``).
TRACKING_PARAMS = frozenset(
    {
        *("gclid", "gclsrc", "dclid", "gbraid", "wbraid", "fbclid", "msclkid", "yclid"),
        *("mc_cid", "mc_eid", "_hsenc", "_hsmi", "igshid", "ref_src", "spm"),
        *("_ga", "_gl", "oly_anon_id", "oly_enc_id", "vero_id", "mkt_tok", "twclid"),
    }
)
TRACKING_PREFIXES = ("utm_", "pk_", "mtm_")
SCOPES = ("host", "domain", "any")
# File extensions that are not HTML: links to them are never requested.
# Scrapy's list, but for endings HTML pages often have (/tags/node.js, /docs/setup.py): a
# response that is not HTML is cut off at its headers all the same.
PAGE_LIKE = frozenset({".js", ".py", ".rb", ".sh", ".ps"})
SKIPPED_EXTENSIONS = (
    frozenset(f".{ext}" for ext in IGNORED_EXTENSIONS) | {".gz", ".xml", ".json"}
) - PAGE_LIKE
# A path step that looks like a calendar: /2024/01, /2024-01-31, /cal/202401.
_CALENDAR = re.compile(r"(?:^|/)(?:19|20)\d\d(?:[/-]?(?:0[1-9]|1[0-2]))(?:[/-]?\d\d)?(?:/|$)")
# What a host name is made of (is_host): Scrapy's downloader takes letters, digits, "-", "_"
# and dots, and nothing else.
MAX_HOST = 253
_HOST_LABEL = re.compile(r"[a-z0-9_-]{1,63}")
# A last label a browser reads as a number: the host is an IPv4 address, or none.
_NUMBER = re.compile(r"[0-9]+|0x[0-9a-f]*")
_EXTRACT = tldextract.TLDExtract(suffix_list_urls=(), cache_dir=None)


class BadUrl(ValueError):
    """A URL the spider does not follow; ``reason`` is a short slug for stats."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def is_tracking(name: str) -> bool:
    lowered = name.lower()
    return lowered in TRACKING_PARAMS or lowered.startswith(TRACKING_PREFIXES)


@lru_cache(maxsize=65536)
def canonical_url(url: str) -> str:
    """The canonical form of an absolute http(s) URL without credentials, else BadUrl; cached.
    What the duplicate filter and the stored pages know a page by, never what is sent: its
    query sorted and its escapes redone, it may not be the page (see :func:`request_url`)."""
    return canonicalize_url(request_url(url), keep_fragments=False)


@lru_cache(maxsize=65536)
def request_url(url: str) -> str:
    """The URL the spider asks for ``url`` by (else BadUrl): the link as the page wrote it,
    its scheme and host in lower case, no default port, fragment or tracking parameters; the
    rest of its query in its own order and escapes (a site may read ``?b=1&a=2`` otherwise
    than ``?a=2&b=1``, or ``%2F`` otherwise than ``/``); what is not ASCII escaped, as Scrapy
    sends it."""
    try:
        parts = urlsplit(url.strip(C0_OR_SPACE))
        port = parts.port
    except ValueError:
        raise BadUrl("malformed") from None
    scheme = parts.scheme.lower()
    if scheme not in SCHEMES:
        raise BadUrl("scheme")
    host = (parts.hostname or "").rstrip(".")
    if not host:
        raise BadUrl("no_host")
    if "@" in parts.netloc:
        raise BadUrl("credentials")
    netloc = host if port in (None, WEB_PORTS[scheme]) else f"{host}:{port}"
    if ":" in host:
        netloc = f"[{host}]" if port in (None, WEB_PORTS[scheme]) else f"[{host}]:{port}"
    query = _without_tracking(parts.query)
    url = safe_url_string(urlunsplit((scheme, netloc, parts.path or "/", query, "")))
    if not is_host(urlsplit(url).hostname or ""):
        raise BadUrl("bad_host")
    return url


def is_host(host: str) -> bool:
    """Whether ``host`` (as a URL sent carries it: ASCII, an IPv6 address without brackets) is
    an IP address or a name the downloader can look up: at most 253 characters, dot-separated
    labels of 1 to 63 letters, digits, ``-`` and ``_``, the last one (a top-level domain) no
    ``_`` and no number (``1.2.3``, ``999.1.1.1`` are no addresses)."""
    if is_ip(host):
        return True
    labels = host.split(".")
    return (
        len(host) <= MAX_HOST
        and all(_HOST_LABEL.fullmatch(label) for label in labels)
        and "_" not in labels[-1]
        and _NUMBER.fullmatch(labels[-1]) is None
    )


def _without_tracking(query: str) -> str:
    """``query`` without its tracking parameters, the others as written."""
    pairs = query.split("&")
    kept = [pair for pair in pairs if not is_tracking(unquote_plus(pair.split("=", 1)[0]))]
    return query if len(kept) == len(pairs) else "&".join(kept)


def host_of(url: str) -> str:
    """``host[:port]`` of a canonical URL (the port only when it is not the default)."""
    return urlsplit(url).netloc


@lru_cache(maxsize=65536)
def registered_domain(host: str) -> str:
    """The registered domain of a host (``blog.example.co.uk`` -> ``example.co.uk``), from the
    public suffix list bundled with tldextract (never fetched); for a suffix the list does not
    know (``site1.test``), the last two labels."""
    name = host.rsplit(":", 1)[0] if not host.endswith("]") else host
    if is_ip(name):
        return name  # an address is its own domain (not its last two numbers)
    result = _EXTRACT(name)
    if result.suffix and result.domain:
        return f"{result.domain}.{result.suffix}"
    return ".".join(name.split(".")[-2:])


def scope_root(url: str, scope: str) -> str:
    """What a followed link shares with its start URL: host, registered domain or "" (any)."""
    if scope == "host":
        return host_of(url)
    if scope == "domain":
        return registered_domain(host_of(url))
    return ""


def same_domain(url: str, other: str) -> bool:
    """Whether two URLs are of one registered domain (``www.example.org``, ``example.org``)."""
    return registered_domain(host_of(canonical_url(url))) == registered_domain(
        host_of(canonical_url(other))
    )


def in_scope(url: str, scope: str, root: str) -> bool:
    return scope == "any" or scope_root(url, scope) == root


def is_calendar(path: str) -> bool:
    return bool(_CALENDAR.search(path))


@dataclass(frozen=True)
class UrlRules:
    """Limits on URLs a crawl follows (LINKS_MAX_URL_LENGTH, LINKS_MAX_REPEATED_SEGMENTS)."""

    max_length: int = 2048
    max_repeats: int = 2

    def check(self, url: str) -> None:
        """BadUrl with the reason when a canonical URL is not worth a request."""
        if len(url) > self.max_length:
            raise BadUrl("too_long")
        path = urlsplit(url).path
        last = path.rsplit("/", 1)[-1].lower()
        if "." in last and last[last.rindex(".") :] in SKIPPED_EXTENSIONS:
            raise BadUrl("extension")
        repeats = Counter(segment for segment in path.split("/") if segment)
        if repeats and max(repeats.values()) > self.max_repeats:
            raise BadUrl("repeated_segments")


BACKLINK_STEPS = 2


def link_priority(depth: int, same_host: bool, backlinks: int) -> int:
    """Frontier priority of a link (higher goes first): breadth first, two steps per level of
    depth; a link on its page's own host one step ahead; a link to another host one step ahead
    from 10 backlinks, two from 100 (so with scope "any" well-linked hosts come first within
    their level, and at best level with the next shallower one)."""
    popularity = min(BACKLINK_STEPS, int(math.log10(backlinks))) if backlinks > 0 else 0
    return -2 * depth + (1 if same_host else popularity)
