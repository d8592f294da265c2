"""The links spider's request fingerprint: Scrapy's, of the request's canonical URL.

Links are followed by their canonical URL (``urls.canonical_url``), but a redirect's target
is the server's ``Location`` as written: ``/b?utm_source=x``, ``https://EXAMPLE.org:443/b``.
Fingerprinted as written, such a target is a new page to the duplicate filter, and a page the
crawl reached by a link is fetched again under a second URL.
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING

from scrapy.utils.request import RequestFingerprinter

from crawler.links.urls import BadUrl, canonical_url

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.crawler import Crawler


class CanonicalFingerprinter:
    """REQUEST_FINGERPRINTER_CLASS of the links spider (its custom_settings)."""

    def __init__(self, crawler: Crawler | None = None) -> None:
        self._scrapy = RequestFingerprinter(crawler)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> CanonicalFingerprinter:
        return cls(crawler)

    def fingerprint(self, request: Request) -> bytes:
        try:
            url = canonical_url(request.url)
        except BadUrl:  # not a URL the spider follows: as Scrapy takes it
            return self._scrapy.fingerprint(request)
        if _to_itself(request, url):
            # Scrapy's own fingerprint sorts a query and redoes its escapes too: the URL as the
            # server wrote it, so that /q?a=2&b=1 moved on from /q?b=1&a=2 is fetched.
            return hashlib.sha1(f"to-itself {request.method} {request.url}".encode()).digest()
        if url == request.url:
            return self._scrapy.fingerprint(request)
        return self._scrapy.fingerprint(request.replace(url=url))


def _to_itself(request: Request, url: str) -> bool:
    """Whether ``request`` is a redirect's target whose canonical URL is that of the URL that
    redirected to it (``/x`` to ``/x?utm_source=a``): the page itself, fetched as the server
    asks (its canonical fingerprint, the redirecting request's, is seen already)."""
    redirects = request.meta.get("redirect_urls")
    if not redirects:
        return False
    try:
        return canonical_url(redirects[-1]) == url
    except BadUrl:
        return False
