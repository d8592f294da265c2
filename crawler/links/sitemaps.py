"""Sitemaps (XML, gzipped or not; urlset or sitemap index) to the URLs they list, the ones a
host's robots.txt names, and how many pages one worker asks for from them. Pure."""

from __future__ import annotations

from collections import Counter

from scrapy.http import Response, XmlResponse
from scrapy.utils.gz import gunzip, gzip_magic_number
from scrapy.utils.sitemap import Sitemap

from crawler.links.urls import BadUrl, canonical_url, host_of

# Sitemaps of a host's robots.txt asked for at most.
ROBOTS_SITEMAPS = 10
# Pages, and sitemaps, one worker asks for from sitemaps per host and start entry without a
# page budget; hosts whose counts a worker keeps before it starts afresh.
SITEMAP_ENTRIES_UNBUDGETED = 1_000_000
SITEMAP_HOSTS_KEPT = 10_000


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


def robots_sitemaps(here: str, sitemaps: list[str]) -> list[str]:
    """The sitemaps to ask for after the robots.txt at ``here`` (canonical): those it names on
    its own host (whatever their scheme or case), else /sitemap.xml; ROBOTS_SITEMAPS at most."""
    host = host_of(here)
    base = "/".join(here.split("/", 3)[:3])
    urls = [url for url in sitemaps if _on_host(url, host)] or [f"{base}/sitemap.xml"]
    return urls[:ROBOTS_SITEMAPS]


def _on_host(url: str, host: str) -> bool:
    try:
        return host_of(canonical_url(url)) == host
    except BadUrl:
        return False


class SitemapBudget:
    """How many pages (or, from an index, sitemaps) of a host this worker asked for from
    sitemaps, per start entry: at most the entry's page budget of each."""

    def __init__(self) -> None:
        self.asked: Counter[tuple[str, str, str]] = Counter()

    def key(self, start: str, host: str, kind: str) -> tuple[str, str, str]:
        """What the asks of ``kind`` ("sitemapindex": sitemaps, else pages) are counted under;
        past SITEMAP_HOSTS_KEPT keys, the counts start afresh."""
        key = (start, host, "sitemap" if kind == "sitemapindex" else "page")
        if key not in self.asked and len(self.asked) >= SITEMAP_HOSTS_KEPT:
            self.asked.clear()
        return key

    def allows(self, key: tuple[str, str, str], max_pages: int) -> bool:
        """Whether one more ask fits the start entry's page budget (none: a million)."""
        return self.asked[key] < (max_pages or SITEMAP_ENTRIES_UNBUDGETED)
