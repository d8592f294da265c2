"""What the domains spider does after each failure, without a crawl: the retry of a timeout
(over HTTPS first), the HTTPS fallback, a redirect whose target fails; what counts as a change
of a document; and the addresses its resolver gives a connection, fuzzed through a real DNS
server (the sandbox's)."""

from __future__ import annotations

import asyncio
import ipaddress
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scrapy import Request
from scrapy.exceptions import (
    CannotResolveHostError,
    DownloadConnectionRefusedError,
    DownloadTimeoutError,
)
from scrapy.http import HtmlResponse

from crawler.config.values import NameServer
from crawler.domains.probes import SENT_META, DomainProbeMiddleware
from crawler.domains.resolver import AsyncResolver, DomainsResolver, PrivateAddress, is_public
from crawler.items import DomainItem
from crawler.spiders.domains import DomainsSpider
from crawler.storage.changes import CHANGE_HASH, with_change_hash
from sandbox.dns import Answer, start_dns
from tests.test_domains_units import answered, domains_spider

# --- after a failure -------------------------------------------------------------------------


def failed(
    spider: DomainsSpider,
    request: Request,
    exception: Exception,
    middleware: DomainProbeMiddleware | None = None,
) -> Request | DomainItem:
    """What the spider makes of ``request`` failing with ``exception`` (the probe middleware
    turns it into the failure the spider reads)."""
    middleware = middleware or DomainProbeMiddleware(0, 65536, None)
    response = middleware.process_exception(request, exception)
    assert response is not None
    (output,) = spider.parse_probe(response)
    assert isinstance(output, Request | DomainItem)
    return output


def timed_out(spider: DomainsSpider, request: Request) -> Request | DomainItem:
    return failed(spider, request, DownloadTimeoutError(f"Getting {request.url} took too long"))


def refused(spider: DomainsSpider, request: Request) -> Request | DomainItem:
    return failed(spider, request, DownloadConnectionRefusedError("Connection was refused"))


def test_an_http_timeout_is_tried_again_over_https_which_may_answer() -> None:
    """Port 80 filtered, the site on 443: the retry of the timeout goes over HTTPS."""
    spider = domains_spider(DOMAINS_TIMEOUT_RETRIES=1)
    again = timed_out(spider, spider.probe("example.com"))
    assert isinstance(again, Request)
    assert again.url == "https://example.com/"
    item = answered(spider, again, 200, b"<title>Example</title>")
    assert isinstance(item, DomainItem)
    assert (item.status, item.scheme, item.attempts) == ("alive", "https", 2)
    assert (item.http_error or "").startswith("timeout: DownloadTimeoutError")
    assert item.https_error is None


def test_a_timeout_costs_at_most_the_retries_whatever_the_schemes() -> None:
    """DOMAINS_TIMEOUT_RETRIES is the budget of the domain, both schemes together: a domain
    that times out everywhere costs 1 + retries timeouts, as before HTTPS was tried."""
    spider = domains_spider(DOMAINS_TIMEOUT_RETRIES=1)
    over_https = timed_out(spider, spider.probe("example.com"))
    assert isinstance(over_https, Request)
    item = timed_out(spider, over_https)
    assert isinstance(item, DomainItem)
    assert (item.status, item.code, item.attempts) == ("timeout", 0, 2)
    assert (item.https_error or "").startswith("timeout: ")
    # No retry: no HTTPS either.
    none = domains_spider(DOMAINS_TIMEOUT_RETRIES=0)
    item = timed_out(none, none.probe("example.com"))
    assert isinstance(item, DomainItem)
    assert (item.status, item.attempts, item.https_error) == ("timeout", 1, None)
    # More retries: the others go to the URL that timed out.
    more = domains_spider(DOMAINS_TIMEOUT_RETRIES=2)
    over_https = timed_out(more, more.probe("example.com"))
    assert isinstance(over_https, Request)
    again = timed_out(more, over_https)
    assert isinstance(again, Request)
    assert again.url == "https://example.com/"
    item = refused(more, again)
    assert isinstance(item, DomainItem)
    assert (item.status, item.attempts) == ("timeout", 3)  # a timeout got further than refused
    assert (item.https_error or "").startswith("refused: ")


def test_a_timeout_class_keeps_the_time_of_the_timeout() -> None:
    """HTTP timed out, HTTPS was refused at once: the domain is a timeout, and its time is
    the timeout's, not the refusal's."""
    spider = domains_spider(DOMAINS_TIMEOUT_RETRIES=1)
    probe = spider.probe("example.com")
    probe.meta[SENT_META] = 1.0  # sent long ago (epoch seconds): the timeout's time is large
    over_https = timed_out(spider, probe)
    assert isinstance(over_https, Request)
    item = refused(spider, over_https)
    assert isinstance(item, DomainItem)
    assert item.status == "timeout"
    assert (item.response_time or 0) > 1000


# --- a redirect whose target fails ----------------------------------------------------------


def test_a_redirect_to_a_name_on_a_private_address_is_the_domains_answer() -> None:
    """example.test answers 301 to shop.example.test, whose address is not public: the
    domain answered (from a public address), its redirect failed; not a private domain."""
    resolvers: list[AsyncResolver] = []

    async def resolve() -> None:
        protocol, port = await start_dns("127.0.0.1", 0, lambda name: Answer("address", "10.1.2.3"))
        try:
            resolver = AsyncResolver([NameServer("127.0.0.1", port)], 0.5, 1, 10)
            with pytest.raises(PrivateAddress):
                await resolver.resolve("shop.example.test")
            resolvers.append(resolver)
        finally:
            assert protocol.transport is not None
            protocol.transport.close()

    asyncio.run(resolve())
    spider = domains_spider()
    probe = spider.probe("example.test")
    location = "http://shop.example.test/"
    response = HtmlResponse(
        probe.url,
        status=301,
        headers={"Location": location, "Server": "nginx"},
        request=probe,
        ip_address=ipaddress.ip_address("93.184.215.14"),
    )
    (followed,) = spider.parse_probe(response)
    assert isinstance(followed, Request)
    middleware = DomainProbeMiddleware(0, 65536, resolvers[0])
    item = failed(spider, followed, CannotResolveHostError(location), middleware)
    assert isinstance(item, DomainItem)
    assert (item.status, item.code, item.http_status) == ("redirect_failed", 301, 301)
    assert (item.address, item.server, item.final_url) == ("93.184.215.14", "nginx", location)
    assert (item.redirect_error or "").startswith("private_address: ")
    assert "10.1.2.3 is not a public address" in (item.redirect_error or "")
    assert item.error is None


def test_a_redirect_to_a_refused_name_falls_back_to_https_first() -> None:
    """www. refused over HTTP: HTTPS is tried (at the domain), and answers: alive. Refused
    there too: the domain's answer was the redirect."""
    spider = domains_spider()
    www = answered(spider, spider.probe("example.com"), 301, Location="http://www.example.com/")
    assert isinstance(www, Request)
    over_https = refused(spider, www)
    assert isinstance(over_https, Request)
    assert over_https.url == "https://example.com/"
    assert isinstance(answered(spider, over_https, 200), DomainItem)
    item = refused(spider, over_https)
    assert isinstance(item, DomainItem)
    assert (item.status, item.code, item.final_url) == (
        "redirect_failed",
        301,
        "http://www.example.com/",
    )
    assert (item.redirect_error or "").startswith("refused: ")
    assert (item.https_error or "").startswith("refused: ")


# --- what is a change -------------------------------------------------------------------------


def test_another_address_answering_is_no_change_of_the_domain() -> None:
    """A name's addresses take turns (round-robin DNS): the same answer from another address
    is the same document for the change history; another class is a change."""

    def digest(**fields: Any) -> str:
        values = {"domain": "example.com", "status": "alive", "code": 200, "checked_at": 1.0}
        document = vars(DomainItem(**{**values, **fields}))
        return str(with_change_hash(document, DomainItem.volatile_fields)[CHANGE_HASH])

    assert digest(address="93.184.215.14") == digest(address="93.184.215.15", checked_at=2.0)
    assert digest(address="93.184.215.14") != digest(address="93.184.215.14", status="parked")


# --- the addresses a connection tries --------------------------------------------------------

ADDRESSES = st.one_of(
    st.ip_addresses(v=4).map(str),
    st.sampled_from(["127.0.0.1", "10.0.0.1", "169.254.169.254", "192.168.1.1", "100.64.0.1"]),
)


@settings(max_examples=60, deadline=None)
@given(
    addresses=st.lists(ADDRESSES, min_size=1, max_size=20, unique=True),
    most=st.integers(1, 16),
    private=st.booleans(),
)
def test_a_connection_tries_the_first_addresses_of_the_answer_in_its_order(
    addresses: list[str], most: int, private: bool
) -> None:
    """Whatever A records a DNS server answers: the first DOMAINS_MAX_ADDRESSES of those the
    sweep may probe (public ones, or all of them with DOMAINS_PRIVATE_ADDRESSES), in the
    answer's order; none, the reason kept, when there is none to probe."""
    allowed = addresses if private else [a for a in addresses if is_public(a)]

    async def run() -> None:
        answer = Answer("address", addresses[0], tuple(addresses[1:]))
        protocol, port = await start_dns("127.0.0.1", 0, lambda name: answer)
        try:
            server = [NameServer("127.0.0.1", port)]
            resolver = AsyncResolver(server, 1.0, 1, 10, private_addresses=private)
            domains = DomainsResolver(None, resolver, most)
            assert await domains.addresses("site.test") == allowed[:most]
            if not allowed:
                assert isinstance(resolver.failure("site.test"), PrivateAddress)
            assert await domains.addresses("192.0.2.7") == ["192.0.2.7"]  # an address as is
        finally:
            assert protocol.transport is not None
            protocol.transport.close()

    asyncio.run(run())
