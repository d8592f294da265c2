"""The maps spider's request fingerprint: a place page's is its place's, whatever its link.

Neighbouring searches on Google Maps list many of the same places, and each search links a
place with its own viewport (``/@lat,lng,zoom``) and parameters: Scrapy's fingerprint, of the
whole URL, has the duplicate filter let the same place page through once per search that lists
it. A place URL is fingerprinted by its host and feature id (``!1s0x...:0x...``, the place's
one id; crawler/extractors/maps.py) instead, so the fleet fetches each place once. Anything
else (a search, a place URL without a feature id) is fingerprinted as Scrapy does.
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from scrapy.utils.request import RequestFingerprinter

from crawler.extractors.maps import is_place_url, place_id_from_url

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.crawler import Crawler


class PlaceFingerprinter:
    """REQUEST_FINGERPRINTER_CLASS of the maps spider (its custom_settings)."""

    def __init__(self, crawler: Crawler | None = None) -> None:
        self._scrapy = RequestFingerprinter(crawler)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> PlaceFingerprinter:
        return cls(crawler)

    def fingerprint(self, request: Request) -> bytes:
        place_id = place_id_from_url(request.url) if is_place_url(request.url) else None
        if place_id is None:
            return self._scrapy.fingerprint(request)
        host = (urlsplit(request.url).hostname or "").lower()
        return hashlib.sha1(f"maps-place {request.method} {host} {place_id}".encode()).digest()
