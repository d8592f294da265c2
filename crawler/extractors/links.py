"""HTML pages to the fields the ``links`` spider stores, and the links it may follow.

Pure functions, no I/O. Hostile HTML never raises: a field that cannot be read is None and
named in ``bad_fields``; a document lxml cannot parse at all yields no fields and no links.
Text fields are whitespace-collapsed and cut to :data:`MAX_TEXT`.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from urllib.parse import urljoin, urlsplit

from lxml import etree
from parsel import Selector
from w3lib.html import strip_html5_whitespace
from w3lib.url import safe_url_string

MAX_TEXT = 2000
MAX_LINKS = 5000
_SPACE = re.compile(r"\s+")
_LANGUAGE = re.compile(r"[A-Za-z]{1,8}(?:[-_][A-Za-z0-9]{1,8})*")
_LINK_SCHEMES = ("http", "https")
# The queries, compiled once and run on the lxml tree itself (several times faster than
# parsel's Selector.xpath, which compiles each query and wraps every result).
# A site's pages are linked from anchors, image maps and frames (a frameset site has no other).
_HREFS = etree.XPath("//a/@href | //area/@href | //frame/@src | //iframe/@src")
# The first <base> of the document, as browsers take it (a parser may put it outside <head>).
_BASE = etree.XPath("(//base[@href])[1]/@href")
_TITLE = etree.XPath("//title[1]//text()")
_LANG = etree.XPath("/html/@lang")
_DESCRIPTION = etree.XPath(
    "//meta[translate(@name,'DESCRIPTION','description')='description']/@content"
)
_CANONICAL = etree.XPath(
    "//link[contains(concat(' ', translate(@rel,'CANONICAL','canonical'), ' '), ' canonical ')]"
    "/@href"
)


@dataclass
class PageFields:
    """What an HTML page says about itself, and its out-links (absolute, in order, once)."""

    title: str | None = None
    language: str | None = None
    description: str | None = None
    canonical: str | None = None
    links: list[str] = field(default_factory=list)
    bad_fields: list[str] = field(default_factory=list)


def content_hash(body: bytes) -> str:
    """A hash of the body (BLAKE2b, 128 bits, hex): equal bodies, equal hashes."""
    return hashlib.blake2b(body, digest_size=16).hexdigest()


def parse_page(html: str, url: str, encoding: str = "utf-8") -> PageFields:
    """The fields and out-links of the page ``html`` fetched from ``url``, in ``encoding`` (a
    link's query is sent in the page's encoding, as a browser sends it)."""
    page = PageFields()
    try:
        selector = Selector(text=html.replace("\x00", "") or "<html></html>", type="html")
        base = _base_url(selector, url)
    except Exception:
        page.bad_fields.append("document")
        return page
    readers: dict[str, Callable[[Selector, str], str | None]] = {
        "title": _title,
        "language": _language,
        "description": _description,
        "canonical": _canonical,
    }
    for name, reader in readers.items():
        try:
            setattr(page, name, reader(selector, base))
        except Exception:
            page.bad_fields.append(name)
    try:
        page.links = out_links(selector, base, encoding)
    except Exception:
        page.bad_fields.append("links")
    return page


def out_links(selector: Selector, base: str, encoding: str = "utf-8") -> list[str]:
    """Absolute http(s) URLs of anchors, image maps and frames, without fragments, once,
    MAX_LINKS at most; their queries percent-encoded in ``encoding``."""
    seen: dict[str, None] = {}
    for href in _strings(_HREFS, selector):
        absolute = absolute_url(href, base, encoding)
        if absolute is not None:
            seen.setdefault(absolute, None)
            if len(seen) >= MAX_LINKS:
                break
    return list(seen)


def absolute_url(href: str, base: str, encoding: str = "utf-8") -> str | None:
    """``href`` resolved against ``base``, without fragment (its query percent-encoded in
    ``encoding``, its path in UTF-8); None unless http(s) with a host."""
    href = strip_html5_whitespace(href)
    if not href or href.startswith("#"):
        return None
    try:
        joined = urljoin(base, href)
        parts = urlsplit(joined)
    except ValueError:
        return None
    if parts.scheme.lower() not in _LINK_SCHEMES or not parts.hostname:
        return None
    if not parts.query.isascii():
        joined = _query_encoded(joined, encoding)
    return joined.split("#", 1)[0]


def _query_encoded(url: str, encoding: str) -> str:
    """``url`` with its query percent-encoded in ``encoding`` (UTF-8 where it cannot hold it,
    as a browser falls back to)."""
    if encoding.lower().replace("_", "-").startswith(("utf-16", "utf-32")):
        encoding = "utf-8"  # as browsers take a UTF-16 page's links
    try:
        return safe_url_string(url, encoding=encoding)
    except (UnicodeError, LookupError):
        return safe_url_string(url, encoding="utf-8")
    except ValueError:  # a port out of range: the link alone is dropped, by the spider's rules
        return url


def _strings(query: etree.XPath, selector: Selector) -> list[str]:
    """The string results of ``query`` on the document, in document order."""
    result = query(selector.root)
    return [str(value) for value in result] if isinstance(result, list) else []


def _first(query: etree.XPath, selector: Selector) -> str | None:
    values = _strings(query, selector)
    return values[0] if values else None


def _base_url(selector: Selector, url: str) -> str:
    href = _first(_BASE, selector)
    resolved = absolute_url(href, url) if href else None
    return resolved or url


def _text(value: str | None) -> str | None:
    if value is None:
        return None
    text = _SPACE.sub(" ", value).strip()
    return text[:MAX_TEXT] or None


def _title(selector: Selector, base: str) -> str | None:
    return _text(" ".join(_strings(_TITLE, selector)) or None)


def _language(selector: Selector, base: str) -> str | None:
    value = _text(_first(_LANG, selector))
    if value is None:
        return None
    if not _LANGUAGE.fullmatch(value):
        raise ValueError(value)
    return value.replace("_", "-").lower()


def _description(selector: Selector, base: str) -> str | None:
    return _text(_first(_DESCRIPTION, selector))


def _canonical(selector: Selector, base: str) -> str | None:
    href = _first(_CANONICAL, selector)
    return absolute_url(href, base) if href else None
