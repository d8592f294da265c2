"""DNS for a domain sweep: asynchronous, spread over name servers, no thread pool.

Scrapy's default resolver (``CachingThreadedResolver``) calls ``getaddrinfo`` in the reactor's
thread pool (10 threads by default), so a sweep of many dead domains waits on threads.
:class:`AsyncResolver` asks the name servers itself with dnspython's ``dns.asyncresolver`` on
the asyncio loop the reactor runs on:

- DOMAINS_NAMESERVERS (``host[:port]`` each; default: those of /etc/resolv.conf) are taken in
  turn, so the load is spread over them; each has its own cap of DOMAINS_DNS_CONCURRENCY
  queries in flight;
- a query waits DOMAINS_DNS_TIMEOUT seconds at most; a timeout, SERVFAIL or REFUSED is asked
  again DOMAINS_DNS_RETRIES times, of the next name server;
- an answer is kept CACHE_SECONDS (5 minutes), for Scrapy's DNSCACHE_SIZE names at most (none
  with DNSCACHE_ENABLED off);
- NXDOMAIN, or a name without an A record, is a definitive answer: never asked again, raised
  as :class:`DomainNotFound`; what is still failing after the retries is :class:`DnsError`.
  Both are Twisted ``DNSLookupError`` s, so Scrapy treats them as DNS failures; the spider tells
  them apart by type (crawler/domains/classify.py);
- only public addresses are given (:func:`is_public`: not loopback, private, link-local such as
  the cloud metadata service's 169.254.169.254, shared 100.64/10, unspecified, reserved nor
  multicast): a name whose addresses are none of them public raises :class:`PrivateAddress`,
  so a sweep never probes the network it runs in. DOMAINS_PRIVATE_ADDRESSES gives every
  address (a sweep of one's own network, or a test on loopback).

:class:`DomainsResolver` is the Twisted side (``IHostnameResolver``, like Scrapy's
CachingHostnameResolver): it gives a connection the first DOMAINS_MAX_ADDRESSES addresses of a
name, which Twisted tries in turn (a name whose first address is dead is reached at the next).
Use it as ``TWISTED_DNS_RESOLVER = "crawler.domains.resolver.DomainsResolver"``. That setting is
read once per process, before any spider's ``custom_settings``, so the domains spider also
installs it itself when it starts (:func:`install`), unless TWISTED_DNS_RESOLVER names another
resolver.
"""

from __future__ import annotations

import asyncio
import ipaddress
import itertools
import logging
import time
from collections import Counter, OrderedDict
from typing import TYPE_CHECKING, Any, ClassVar
from urllib.parse import urlsplit
from urllib.request import getproxies

import dns.asyncresolver
import dns.exception
import dns.nameserver
import dns.resolver
from scrapy.resolver import HostResolution
from scrapy.settings import SETTINGS_PRIORITIES
from scrapy.settings.default_settings import DNSCACHE_SIZE
from scrapy.utils.defer import deferred_from_coro
from scrapy.utils.log import failure_to_exc_info
from twisted.internet.abstract import isIPAddress, isIPv6Address
from twisted.internet.address import IPv4Address, IPv6Address
from twisted.internet.error import DNSLookupError
from twisted.internet.interfaces import IHostnameResolver
from zope.interface import implementer  # type: ignore[import-untyped]

from crawler.config import setting
from crawler.config.rules import SettingsError
from crawler.config.values import NameServer

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

    from scrapy.crawler import Crawler
    from scrapy.settings import BaseSettings
    from twisted.internet.interfaces import IAddress
    from twisted.python.failure import Failure

logger = logging.getLogger(__name__)
# How long a worker keeps an answer (a fallback or redirect asks for the same name again soon);
# how many it keeps is Scrapy's DNSCACHE_SIZE (none with DNSCACHE_ENABLED off).
CACHE_SECONDS = 300.0
# Names whose failure a worker keeps for the spider to read why (just after the failure), at most.
FAILURES_KEPT = 10_000


class DnsFailure(DNSLookupError):
    """A name that could not be resolved; ``outcome`` is the domain's class."""

    outcome: ClassVar[str] = "dns_error"

    def bare(self) -> DnsFailure:
        """A copy without traceback nor context (10,000 of them stay small)."""
        return type(self)(*self.args)


class DomainNotFound(DnsFailure):
    """NXDOMAIN, or no A record: the name has no address. Definitive, never retried."""

    outcome = "dns_not_found"


class DnsError(DnsFailure):
    """SERVFAIL, REFUSED or no answer in time, still so after the retries."""

    outcome = "dns_error"


class PrivateAddress(DnsFailure):
    """A name whose addresses are none of them public: not probed (``address``: the first)."""

    outcome = "private_address"

    def __init__(self, name: str, address: str) -> None:
        super().__init__(f"{name}: {address} is not a public address")
        self.name = name
        self.address = address

    def bare(self) -> PrivateAddress:
        return PrivateAddress(self.name, self.address)


def proxy_hosts(pool: Iterable[str]) -> frozenset[str]:
    """The names of the proxies requests may go through (PROXY_POOL, and the ``http_proxy``
    and ``https_proxy`` of the environment, which Scrapy's HttpProxyMiddleware reads): a
    proxy on the network the sweep runs in is reached, and resolves the domains itself."""
    proxies = [*pool, *(url for scheme, url in getproxies().items() if scheme != "no")]
    names = {urlsplit(url if "://" in url else f"http://{url}").hostname for url in proxies}
    return frozenset(name.rstrip(".") for name in names if name)


def is_public(address: str) -> bool:
    """True for an address on the internet: not loopback, private, link-local, shared
    (100.64/10), unspecified, reserved nor multicast."""
    parsed = ipaddress.ip_address(address)
    return parsed.is_global and not parsed.is_multicast


class _Retryable(Exception):
    """One query's transient failure (timeout, SERVFAIL, REFUSED)."""


def system_nameservers() -> list[NameServer]:
    """The name servers of /etc/resolv.conf (read once, when the resolver is built)."""
    try:
        hosts = dns.resolver.Resolver().nameservers
    except dns.resolver.NoResolverConfiguration:
        hosts = []
    if not hosts:
        raise SettingsError("DOMAINS_NAMESERVERS is empty and /etc/resolv.conf names no server")
    return [NameServer(str(host)) for host in hosts]


class AsyncResolver:
    """IPv4 addresses of names, from ``nameservers`` in turn (see the module's docstring).

    ``counts`` holds what happened (queries, retries, timeouts, nxdomain, servfail, cached,
    private: answers without a public address) and ``seconds`` the time spent waiting for
    answers, for stats and benchmarks.
    """

    def __init__(
        self,
        nameservers: Sequence[NameServer],
        timeout: float,
        retries: int,
        concurrency: int,
        private_addresses: bool = False,
        proxies: frozenset[str] = frozenset(),
        cache_size: int = DNSCACHE_SIZE,
    ) -> None:
        if not nameservers:
            raise ValueError("no name servers")
        self.nameservers = list(nameservers)
        self.timeout = timeout
        self.retries = retries
        self.concurrency = concurrency
        self.private_addresses = private_addresses
        self.proxies = proxies  # proxies' own names: resolved as they are (proxy_hosts)
        self.cache_size = cache_size
        self._clients = [self._client(server) for server in self.nameservers]
        self._slots: list[asyncio.Semaphore] | None = None
        self._turn = itertools.count()
        self._cache: OrderedDict[str, tuple[float, list[str]]] = OrderedDict()
        self._failures: OrderedDict[str, DnsFailure] = OrderedDict()
        self._pending: Counter[str] = Counter()
        self.counts: Counter[str] = Counter()
        self.seconds = 0.0

    @classmethod
    def from_settings(cls, settings: BaseSettings) -> AsyncResolver:
        configured: list[NameServer] = setting(settings, "DOMAINS_NAMESERVERS")
        return cls(
            configured or system_nameservers(),
            timeout=setting(settings, "DOMAINS_DNS_TIMEOUT"),
            retries=setting(settings, "DOMAINS_DNS_RETRIES"),
            concurrency=setting(settings, "DOMAINS_DNS_CONCURRENCY"),
            private_addresses=setting(settings, "DOMAINS_PRIVATE_ADDRESSES"),
            proxies=proxy_hosts(setting(settings, "PROXY_POOL")),
            cache_size=setting(settings, "DNSCACHE_SIZE")
            if setting(settings, "DNSCACHE_ENABLED")
            else 0,
        )

    def _client(self, server: NameServer) -> dns.asyncresolver.Resolver:
        client = dns.asyncresolver.Resolver(configure=False)
        client.nameservers = [dns.nameserver.Do53Nameserver(server.host, server.port)]
        client.timeout = self.timeout
        client.lifetime = self.timeout
        client.retry_servfail = False
        client.cache = None
        return client

    def failure(self, name: str) -> DnsFailure | None:
        """The last failure of ``name`` (Twisted's name resolution reports every failure as a
        plain DNSLookupError: the spider reads the reason here)."""
        return self._failures.get(name.lower().rstrip("."))

    def pending(self, name: str) -> bool:
        """True while ``name`` is being resolved."""
        return self._pending[name.lower().rstrip(".")] > 0

    async def resolve(self, name: str) -> list[str]:
        """The name's public IPv4 addresses (every one with ``private_addresses``);
        DomainNotFound or DnsError when it has none, PrivateAddress when none is public."""
        name = name.lower().rstrip(".")
        try:
            return self._allowed(name, await self._addresses(name))
        except DnsFailure as exc:
            _bounded_put(self._failures, name, exc.bare(), FAILURES_KEPT)
            raise

    async def _addresses(self, name: str) -> list[str]:
        cached = self._cached(name)
        if cached is not None:
            self.counts["cached"] += 1
            return cached
        self._pending[name] += 1
        try:
            return await self._resolve(name)
        finally:
            self._pending[name] -= 1
            if self._pending[name] <= 0:
                del self._pending[name]

    def _allowed(self, name: str, addresses: list[str]) -> list[str]:
        if self.private_addresses or name in self.proxies:
            return addresses
        public = [address for address in addresses if is_public(address)]
        if not public:
            self.counts["private"] += 1
            raise PrivateAddress(name, addresses[0])
        return public

    async def _resolve(self, name: str) -> list[str]:
        first = next(self._turn)
        for attempt in range(self.retries + 1):
            index = (first + attempt) % len(self.nameservers)
            try:
                addresses = await self._ask(index, name)
            except _Retryable as exc:
                if attempt < self.retries:
                    self.counts["retries"] += 1
                    continue
                raise DnsError(f"{name}: {exc}") from None
            self._remember(name, addresses)
            return addresses
        raise AssertionError("unreachable")

    async def _ask(self, index: int, name: str) -> list[str]:
        slots = self._semaphores()
        async with slots[index]:
            self.counts["queries"] += 1
            started = time.monotonic()
            try:
                return await self._query(self._clients[index], name)
            finally:
                self.seconds += time.monotonic() - started

    async def _query(self, client: dns.asyncresolver.Resolver, name: str) -> list[str]:
        try:
            answer = await client.resolve(name, "A", search=False)
        except dns.resolver.NXDOMAIN:
            self.counts["nxdomain"] += 1
            raise DomainNotFound(f"{name}: NXDOMAIN") from None
        except dns.resolver.NoAnswer:
            self.counts["no_address"] += 1
            raise DomainNotFound(f"{name}: no A record") from None
        except dns.exception.Timeout:
            self.counts["timeouts"] += 1
            raise _Retryable(f"no answer within {self.timeout:g}s") from None
        except (dns.resolver.NoNameservers, dns.resolver.YXDOMAIN) as exc:
            self.counts["servfail"] += 1
            raise _Retryable(_first_line(exc)) from None
        except dns.exception.DNSException as exc:
            raise DnsError(f"{name}: {_first_line(exc)}") from None
        return [str(record.address) for record in answer]

    def _semaphores(self) -> list[asyncio.Semaphore]:
        # Created on first use, on the loop that runs the queries.
        if self._slots is None:
            self._slots = [asyncio.Semaphore(self.concurrency) for _ in self.nameservers]
        return self._slots

    def _cached(self, name: str) -> list[str] | None:
        entry = self._cache.get(name)
        if entry is None or entry[0] < time.monotonic():
            return None
        return entry[1]

    def _remember(self, name: str, addresses: list[str]) -> None:
        entry = (time.monotonic() + CACHE_SECONDS, addresses)
        _bounded_put(self._cache, name, entry, self.cache_size)
        self._failures.pop(name, None)


def _bounded_put(cache: OrderedDict[str, Any], key: str, value: Any, size: int) -> None:
    cache[key] = value
    cache.move_to_end(key)
    while len(cache) > size:
        cache.popitem(last=False)


def _first_line(exc: Exception) -> str:
    return (str(exc).splitlines() or [type(exc).__name__])[0][:300]


@implementer(IHostnameResolver)
class DomainsResolver:
    """Twisted's name resolver (``IHostnameResolver``, as Scrapy's CachingHostnameResolver)
    over :class:`AsyncResolver`: the first ``max_addresses`` addresses of a name
    (DOMAINS_MAX_ADDRESSES), in the DNS answer's order.

    Every HTTP(S) connection of Scrapy goes through Twisted's ``HostnameEndpoint``, which
    connects to them in turn as browsers and curl do: the first at once, the next one 0.3 s
    later while none has connected (whether the one before was refused or is still waiting,
    dropped by a firewall), the first that connects winning and the others cancelled, all
    within the download's timeout. A name with a dead address first is reached at the next."""

    def __init__(self, reactor: Any, resolver: AsyncResolver, max_addresses: int) -> None:
        self.reactor = reactor
        self.resolver = resolver
        self.max_addresses = max_addresses

    @classmethod
    def from_crawler(cls, crawler: Crawler, reactor: Any) -> DomainsResolver:
        resolver = AsyncResolver.from_settings(crawler.settings)
        return cls(reactor, resolver, setting(crawler.settings, "DOMAINS_MAX_ADDRESSES"))

    def install_on_reactor(self) -> None:
        self.reactor.installNameResolver(self)

    def resolveHostName(
        self,
        resolutionReceiver: Any,  # an IResolutionReceiver (zope interfaces type as no class)
        hostName: str,
        portNumber: int = 0,
        addressTypes: Sequence[type[IAddress]] | None = None,
        transportSemantics: str = "TCP",
    ) -> HostResolution:
        resolution = HostResolution(hostName)
        resolutionReceiver.resolutionBegan(resolution)
        deferred_from_coro(self.addresses(hostName)).addCallback(
            _give, resolutionReceiver, portNumber
        ).addErrback(_log_unexpected, hostName).addBoth(_complete, resolutionReceiver)
        return resolution

    async def addresses(self, name: str) -> list[str]:
        """The addresses a connection to ``name`` tries, in order: the first ``max_addresses``
        of :meth:`AsyncResolver.resolve`'s (an address given as the name: itself). None when
        the name has none (the resolver keeps why: :meth:`AsyncResolver.failure`), and the
        connection fails as Twisted's do, with a DNSLookupError."""
        if isIPAddress(name) or isIPv6Address(name):
            return [name]
        try:
            return (await self.resolver.resolve(name))[: self.max_addresses]
        except DnsFailure:
            return []


def _give(addresses: list[str], receiver: Any, port: int) -> None:
    for address in addresses:
        kind = IPv6Address if isIPv6Address(address) else IPv4Address
        receiver.addressResolved(kind("TCP", address, port))


def _complete(_: object, receiver: Any) -> None:
    receiver.resolutionComplete()


def _log_unexpected(failure: Failure, name: str) -> None:
    exc_info = failure_to_exc_info(failure)
    logger.error("Resolving %s failed: %s", name, failure.getErrorMessage(), exc_info=exc_info)


def install(crawler: Crawler) -> AsyncResolver | None:
    """The AsyncResolver the reactor uses: the installed one, or a new one from the crawler's
    settings. None when TWISTED_DNS_RESOLVER names another resolver (a choice to respect, e.g.
    to compare with Scrapy's thread pool)."""
    from twisted.internet import reactor

    current = getattr(reactor, "nameResolver", None)
    if isinstance(current, DomainsResolver):
        return current.resolver
    if (crawler.settings.getpriority("TWISTED_DNS_RESOLVER") or 0) > SETTINGS_PRIORITIES["default"]:
        return None
    installed = DomainsResolver.from_crawler(crawler, reactor)
    installed.install_on_reactor()
    return installed.resolver
