"""Sitemaps (XML, gzipped or not; urlset or sitemap index) to the URLs they list. Pure."""

from __future__ import annotations

from scrapy.http import Response, XmlResponse
from scrapy.utils.gz import gunzip, gzip_magic_number
from scrapy.utils.sitemap import Sitemap


def sitemap_body(response: Response, max_size: int) -> bytes | None:
    """The XML of a sitemap response (gunzipped), None when not one (as SitemapSpider says)."""
    if isinstance(response, XmlResponse):
        return response.body
    if gzip_magic_number(response):
        try:
            return gunzip(response.body, max_size=max_size)
        except Exception:
            return None
    if response.url.endswith((".xml", ".xml.gz")):
        return response.body
    return None


def sitemap_urls(body: bytes, limit: int) -> tuple[str, list[str]]:
    """(kind, locations): "urlset", "sitemapindex" or "", and at most ``limit`` locations."""
    try:
        sitemap = Sitemap(body)
        locations = []
        for entry in sitemap:
            if "loc" in entry:
                locations.append(str(entry["loc"]))
            if len(locations) >= limit:
                break
    except Exception:
        return "", []
    kind = sitemap.type if sitemap.type in ("urlset", "sitemapindex") else ""
    return kind, locations
