"""A DNS resolver that answers chosen host names itself, for crawling a local web of many
name-based virtual hosts (the sandbox's ``siteN.test``) without touching real DNS.

Install it for the process: ``scrapy crawl links -s TWISTED_DNS_RESOLVER=
crawler.links.resolver.MappedResolver -s 'LINKS_RESOLVE={"test": "127.0.0.1"}'``.
LINKS_RESOLVE maps a host name, or a suffix of one (``test`` matches ``site1.test``), to an IP
address; an IP address (``127.0.0.1``, ``::1``) is its own answer, as with Twisted's resolver;
any other name goes to Scrapy's own caching resolver. (TWISTED_DNS_RESOLVER is read
once per process, before any spider's custom_settings, so it is a command-line setting.)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from scrapy.resolver import CachingThreadedResolver
from twisted.internet import defer

from crawler.config import setting
from crawler.uris import is_ip

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from twisted.internet.base import ReactorBase
    from twisted.internet.defer import Deferred


def mapped_address(name: str, mapping: Mapping[str, str]) -> str | None:
    """The address ``mapping`` gives ``name`` (exact name first, then its longest suffix)."""
    labels = name.lower().rstrip(".").split(".")
    for start in range(len(labels)):
        address = mapping.get(".".join(labels[start:]))
        if address is not None:
            return address
    return None


class MappedResolver(CachingThreadedResolver):
    def __init__(
        self, reactor: ReactorBase, cache_size: int, timeout: float, mapping: Mapping[str, str]
    ) -> None:
        super().__init__(reactor, cache_size, timeout)
        self.mapping = {key.lower().strip("."): value for key, value in mapping.items()}

    @classmethod
    def from_crawler(cls, crawler: Any, reactor: ReactorBase) -> MappedResolver:
        settings = crawler.settings
        cache_size = settings.getint("DNSCACHE_SIZE") if settings.getbool("DNSCACHE_ENABLED") else 0
        mapping = setting(settings, "LINKS_RESOLVE")
        return cls(reactor, cache_size, settings.getfloat("DNS_TIMEOUT"), mapping)

    def getHostByName(self, name: str, timeout: Sequence[int] = ()) -> Deferred[str]:
        if is_ip(name):
            return defer.succeed(name.strip("[]"))  # needs no lookup (IPv6 has no gethostbyname)
        address = mapped_address(name, self.mapping)
        if address is not None:
            return defer.succeed(address)
        return super().getHostByName(name, timeout)
