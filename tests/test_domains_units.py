"""Domains spider parts without a crawl: names, classification, the CSV reader, and the
resolver against the sandbox's DNS server."""

from __future__ import annotations

import asyncio
import gzip
import html
import logging
import os
import queue
import re
import threading
import time
import tracemalloc
import zlib
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import redis
from hypothesis import given
from hypothesis import strategies as st
from OpenSSL import SSL
from scrapy import Request, Spider
from scrapy.exceptions import (
    CannotResolveHostError,
    DownloadConnectionRefusedError,
    DownloadFailedError,
    DownloadTimeoutError,
    StopDownload,
)
from scrapy.http import HtmlResponse, Response
from scrapy.settings import Settings
from scrapy.statscollectors import StatsCollector
from scrapy.utils.reactor import install_reactor, is_reactor_installed
from scrapy.utils.test import get_crawler
from twisted.internet import error as net
from twisted.python.failure import Failure
from twisted.web._newclient import BadResponseVersion, ParseError, ResponseNeverReceived

from crawler import settings as project_settings
from crawler.config.rules import SettingsError
from crawler.config.values import NameServer
from crawler.domains import probes
from crawler.domains.classify import (
    Outcome,
    accessible,
    failure_kind,
    failure_outcome,
    falls_back,
    most_informative,
    page_title,
    refine_dns,
    response_outcome,
)
from crawler.domains.lists import csv_domains
from crawler.domains.normalize import InvalidDomain, normalize_domain, same_site
from crawler.domains.page_redirect import page_redirect
from crawler.domains.parking import is_parked, page_text
from crawler.domains.probes import (
    CERTIFICATE_STAT,
    PROBE_META,
    TLS_LOGGER,
    TRUNCATED_META,
    CertificateWarnings,
    DomainProbeMiddleware,
    FleetCap,
    ProbeLogFormatter,
    RateCap,
    readable_body,
)
from crawler.domains.resolver import (
    AsyncResolver,
    DnsError,
    DomainNotFound,
    PrivateAddress,
    is_public,
    proxy_hosts,
)
from crawler.domains.summary import summarize
from crawler.items import DomainItem
from crawler.spiders.domains import DomainsSpider
from sandbox.dns import Answer, start_dns

# --- names ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "domain"),
    [
        ("example.com", "example.com"),
        ("  Example.COM.  ", "example.com"),
        ("www.example.com", "example.com"),
        ("WWW.Example.com", "example.com"),
        ("https://www.example.com:8443/path?q=1#x", "example.com"),
        ("example.com/some/path", "example.com"),
        ("example.com:8080", "example.com"),
        ("bücher.de", "xn--bcher-kva.de"),
        ("www.com", "www.com"),
        ("sub.www.example.com", "sub.www.example.com"),
    ],
)
def test_normalize_gives_one_spelling(raw: str, domain: str) -> None:
    assert normalize_domain(raw) == domain


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        ("", "empty"),
        ("localhost", "single_label"),
        ("127.0.0.1", "ip_address"),
        ("[::1]:80", "ip_address"),
        # spellings a browser reads as an address: full-width digits and dots, short forms
        ("\uff11\uff12\uff17.\uff10.\uff10.\uff11", "ip_address"),  # 127.0.0.1, full width
        ("http://169\u3002254\u3002169\u3002254/latest/", "ip_address"),  # ideographic dots
        ("127.1", "ip_address"),
        ("0x7f.0.0.1", "ip_address"),
        ("www.10.0.0.1", "ip_address"),
        ("bad name.com", "bad_label"),
        ("-bad.com", "bad_label"),
        ("a" * 64 + ".com", "bad_label"),
        (("a" * 60 + ".") * 5 + "com", "too_long"),
        ("http://user:pw@example.com/", "credentials"),
        ("example.com:http", "bad_port"),
    ],
)
def test_normalize_refuses_what_is_not_a_domain(raw: str, reason: str) -> None:
    with pytest.raises(InvalidDomain) as caught:
        normalize_domain(raw)
    assert caught.value.reason == reason


@given(st.text(max_size=300))
def test_normalize_refuses_or_is_stable(raw: str) -> None:
    try:
        domain = normalize_domain(raw)
    except InvalidDomain:
        return
    assert normalize_domain(domain) == domain
    assert domain.isascii()
    assert domain == domain.lower()
    assert len(domain) <= 253


LABEL = st.from_regex(r"[a-z0-9]([a-z0-9-]{0,20}[a-z0-9])?", fullmatch=True)


@given(
    st.lists(LABEL, min_size=1, max_size=4).filter(lambda labels: labels[0] != "www"),
    st.from_regex(r"[a-z]{2,10}", fullmatch=True),
)
def test_www_and_bare_forms_are_one_domain(labels: list[str], top: str) -> None:
    name = ".".join([*labels, top])
    assert normalize_domain(f"www.{name}") == normalize_domain(name) == name
    assert normalize_domain(f"http://WWW.{name}:80/x") == name
    assert same_site(f"www.{name}", name)
    assert same_site(name.upper(), name)


def test_the_names_under_the_domain_are_its_site() -> None:
    for host in ("en.example.com", "ww25.example.com", "M.Example.com.", "a.b.example.com"):
        assert same_site(host, "example.com"), host
    for host in ("example.org", "notexample.com", "example.com.other.org", "com"):
        assert not same_site(host, "example.com"), host
    assert not same_site("example.com", "shop.example.com")  # above the domain: another site


# --- classification -------------------------------------------------------------------------


def _caused(outer: Exception, cause: Exception) -> Exception:
    outer.__cause__ = cause
    return outer


@pytest.mark.parametrize(
    ("exception", "kind"),
    [
        (_caused(CannotResolveHostError("x"), DomainNotFound("x")), "dns_not_found"),
        (_caused(CannotResolveHostError("x"), DnsError("x")), "dns_error"),
        (CannotResolveHostError("no results"), "dns_error"),
        (_caused(DownloadTimeoutError("took longer"), net.TimeoutError()), "timeout"),  # type: ignore[no-untyped-call]
        (DownloadTimeoutError("took longer"), "timeout"),
        (DownloadConnectionRefusedError("refused"), "refused"),
        (ResponseNeverReceived([Failure(SSL.Error("wrong version"))]), "tls_error"),  # type: ignore[no-untyped-call]
        (_caused(DownloadFailedError("x"), net.ConnectionLost()), "connection_error"),
        (ResponseNeverReceived([Failure(net.ConnectionLost())]), "connection_error"),  # type: ignore[no-untyped-call]
        (ResponseNeverReceived([Failure(BadResponseVersion("bad", b"SSH-2.0"))]), "not_http"),  # type: ignore[no-untyped-call]
        (
            _caused(DownloadFailedError("x"), ParseError("wrong number of parts", b"220 smtp")),  # type: ignore[no-untyped-call]
            "not_http",
        ),
    ],
)
def test_failure_kinds(exception: Exception, kind: str) -> None:
    assert failure_kind(exception) == kind


def test_failure_codes_follow_the_seed() -> None:
    assert failure_outcome("dns_not_found") == Outcome("dns_not_found", 1000)
    assert failure_outcome("dns_error") == Outcome("dns_error", 1000)
    assert failure_outcome("private_address") == Outcome("private_address", 1000)
    for kind in ("timeout", "refused", "tls_error", "connection_error", "not_http"):
        assert failure_outcome(kind) == Outcome(kind, 0)


@pytest.mark.parametrize(
    ("http", "https", "chosen"),
    [
        ("connection_error", "refused", "connection_error"),  # accepted on 80, nothing on 443
        ("refused", "connection_error", "connection_error"),
        ("not_http", "refused", "not_http"),
        ("not_http", "tls_error", "not_http"),
        ("connection_error", "tls_error", "connection_error"),
        ("refused", "tls_error", "tls_error"),
        ("refused", "timeout", "timeout"),
        ("refused", "refused", "refused"),
    ],
)
def test_the_failure_that_got_furthest_is_the_class(http: str, https: str, chosen: str) -> None:
    assert most_informative([http, https]) == chosen


def test_https_fallback_only_after_http_protocol_failures() -> None:
    assert falls_back("refused", "http")
    assert falls_back("connection_error", "http")
    assert falls_back("not_http", "http")
    assert not falls_back("refused", "https")
    for kind in ("dns_not_found", "dns_error", "timeout"):
        assert not falls_back(kind, "http")


def test_dns_failures_are_refined_by_what_the_resolver_knows() -> None:
    assert refine_dns("dns_error", "dns_not_found", False) == "dns_not_found"
    assert refine_dns("timeout", None, True) == "dns_error"
    assert refine_dns("timeout", None, False) == "timeout"
    assert refine_dns("timeout", "dns_error", False) == "dns_error"
    assert refine_dns("refused", "dns_not_found", False) == "refused"


def test_answers() -> None:
    page = b"<html><title> Shop &amp;\n more </title></html>"
    assert response_outcome(200, page) == Outcome("alive", 200)
    assert response_outcome(404, page) == Outcome("http_error", 404)
    assert response_outcome(503, b"") == Outcome("http_error", 503)
    assert response_outcome(301, b"", "offsite") == Outcome("redirect_offsite", 301)
    assert response_outcome(302, b"", "loop") == Outcome("redirect_loop", 302)
    for lander in (
        "https://www.hugedomains.com/domain_profile.cfm?d=example.com",
        "https://dan.com/buy-domain/example.com?redirected=true",
        "https://www.afternic.com/forsale/example.com?traffic_id=x",
    ):  # a domain-sales lander, redirected to: parked
        assert response_outcome(302, b"", "offsite", lander) == Outcome("parked", 302)
    offsite = response_outcome(301, b"", "offsite", "https://www.example-shop.com/domain/")
    assert offsite == Outcome("redirect_offsite", 301)
    assert response_outcome(200, b"<p>This domain is FOR SALE</p>") == Outcome("parked", 200)
    assert response_outcome(404, b"buy this domain") == Outcome("http_error", 404)
    assert page_title(page) == "Shop & more"
    assert page_title(b"<p>no title</p>") is None
    assert page_title(b"<title>" * 20_000) is None  # unclosed titles, read in one pass
    assert is_parked(b"<script src='//sedoparking.com/x.js'>")


_TITLE = re.compile(rb"<title[^>]*>(.*?)</title", re.IGNORECASE | re.DOTALL)
_HTML_BITS = st.sampled_from(
    [b"<title>", b"<TITLE lang=x>", b"</title>", b"</TiTlE", b"<title", b">"]
)


@given(st.lists(st.one_of(_HTML_BITS, st.binary(max_size=8)), max_size=12))
def test_a_title_is_the_text_of_the_first_title_element(parts: list[bytes]) -> None:
    body = b"".join(parts)
    match = _TITLE.search(body)
    expected = match and " ".join(html.unescape(match.group(1).decode("utf-8", "replace")).split())
    assert page_title(body) == (expected[:300] if expected else None)


def test_accessible_is_the_seed_rule() -> None:
    assert [code for code in (200, 301, 403, 404, 500, 599, 0, 1000) if accessible(code)] == [
        200,
        301,
        403,
    ]


# --- the CSV reader -------------------------------------------------------------------------


def test_csv_header_blank_lines_and_plain_lists(tmp_path: Path) -> None:
    ranked = tmp_path / "top.csv"
    ranked.write_text("rank,domain\n1,a.com\n\n2, b.org \n")
    assert list(csv_domains(ranked)) == ["a.com", "b.org"]
    plain = tmp_path / "list.txt"
    plain.write_text("a.com\nb.org\n")
    assert list(csv_domains(plain)) == ["a.com", "b.org"]


@pytest.mark.parametrize(
    "text",
    [
        "1,google.com\r\n2,youtube.com\r\n",  # Excel's "CSV UTF-8": no header
        "rank,domain\r\n1,google.com\r\n2,youtube.com\r\n",
        "google.com\nyoutube.com\n",  # one domain a line
    ],
)
def test_a_file_with_a_byte_order_mark_keeps_its_first_domain(tmp_path: Path, text: str) -> None:
    excel = tmp_path / "top.csv"
    excel.write_bytes("\ufeff".encode() + text.encode())
    assert list(csv_domains(excel)) == ["google.com", "youtube.com"]


def test_csv_is_read_as_it_comes(tmp_path: Path) -> None:
    """A domain is handed on while the rest of the file is not even written yet."""
    fifo = tmp_path / "top.csv"
    os.mkfifo(fifo)
    more = threading.Event()

    def write() -> None:
        with fifo.open("w") as pipe:
            pipe.write("rank,domain\n1,first.com\n")
            pipe.flush()
            more.wait(10)
            pipe.write("2,second.com\n")

    writer = threading.Thread(target=write)
    writer.start()
    domains = csv_domains(fifo)
    got: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: got.put(next(domains)), daemon=True).start()
    try:
        assert got.get(timeout=10) == "first.com"
    finally:
        more.set()
    assert list(domains) == ["second.com"]
    writer.join(10)


def test_a_100k_line_csv_goes_through_the_spider_in_little_memory(tmp_path: Path) -> None:
    """The spider's ``-a file=`` entries, all 100,000, normalized one by one: the peak of
    memory allocated is a small part of the file's size (read whole, it is several times it)."""
    ranked = tmp_path / "top100k.csv"
    with ranked.open("w") as out:
        out.write("rank,domain\n")
        out.writelines(f"{rank},WWW.Site-{rank}.example.com\n" for rank in range(1, 100_001))
    size = ranked.stat().st_size
    spider = DomainsSpider(file=str(ranked))
    tracemalloc.start()
    try:
        last = ""
        count = 0
        for count, entry in enumerate(spider.argument_entries(), 1):  # noqa: B007
            last = normalize_domain(entry)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert (count, last) == (100_000, "site-100000.example.com")
    assert peak < size / 10, f"{peak:,} bytes at the peak for a {size:,}-byte file"


# --- the resolver against a real DNS server -------------------------------------------------

ANSWERS = {
    "gone.test": Answer("nxdomain"),
    "empty.test": Answer("no_address"),
    "broken.test": Answer("servfail"),
    "silent.test": Answer("silent"),
    "metadata.test": Answer("address", "169.254.169.254"),
}


def lookup(name: str) -> Answer:
    if name.startswith("silent"):
        return Answer("silent")
    return ANSWERS.get(name, Answer("address", "127.0.0.7"))


def with_servers(
    count: int, test: Callable[[list[Any], list[NameServer]], Awaitable[None]]
) -> None:
    async def run() -> None:
        started = [await start_dns("127.0.0.1", 0, lookup) for _ in range(count)]
        try:
            await test(
                [protocol for protocol, _ in started],
                [NameServer("127.0.0.1", port) for _, port in started],
            )
        finally:
            for protocol, _ in started:
                if protocol.transport is not None:
                    protocol.transport.close()

    asyncio.run(run())


def loopback_resolver(names: list[NameServer], **options: Any) -> AsyncResolver:
    """A resolver that gives loopback addresses too (the test server's answers are 127.0.0.7)."""
    return AsyncResolver(names, private_addresses=True, **options)


def test_nxdomain_is_definitive_and_never_asked_again() -> None:
    async def test(servers: list[Any], names: list[NameServer]) -> None:
        resolver = loopback_resolver(names, timeout=0.3, retries=1, concurrency=10)
        for name in ("gone.test", "empty.test"):
            with pytest.raises(DomainNotFound):
                await resolver.resolve(name)
            assert sum(server.queries[name] for server in servers) == 1
            assert resolver.failure(name) is not None
            assert resolver.failure(name).outcome == "dns_not_found"  # type: ignore[union-attr]

    with_servers(2, test)


def test_timeouts_and_servfail_are_asked_once_more_of_the_next_server() -> None:
    async def test(servers: list[Any], names: list[NameServer]) -> None:
        resolver = loopback_resolver(names, timeout=0.3, retries=1, concurrency=10)
        for name in ("silent.test", "broken.test"):
            with pytest.raises(DnsError):
                await resolver.resolve(name)
            assert [server.queries[name] for server in servers] == [1, 1]
        assert resolver.counts["timeouts"] == 2
        assert resolver.counts["retries"] == 2

    with_servers(2, test)


def test_answers_are_spread_over_servers_and_cached() -> None:
    async def test(servers: list[Any], names: list[NameServer]) -> None:
        resolver = loopback_resolver(names, timeout=0.3, retries=1, concurrency=10)
        for index in range(10):
            assert await resolver.resolve(f"site{index}.test") == ["127.0.0.7"]
        assert [sum(server.queries.values()) for server in servers] == [5, 5]
        assert await resolver.resolve("SITE1.test.") == ["127.0.0.7"]
        assert resolver.counts["cached"] == 1

    with_servers(2, test)


def test_the_answers_kept_are_scrapy_s_dnscache_size_the_failures_kept_apart() -> None:
    """DNSCACHE_SIZE (2 here) answers are kept, the latest, counted at the name server;
    DNSCACHE_ENABLED off keeps none; a failure's reason is kept for the spider either way."""

    async def test(servers: list[Any], names: list[NameServer]) -> None:
        settings = Settings()
        settings.setmodule(project_settings)
        settings.set("DNSCACHE_SIZE", 2)
        settings.set("DOMAINS_NAMESERVERS", [f"{name.host}:{name.port}" for name in names])
        settings.set("DOMAINS_PRIVATE_ADDRESSES", True)
        # Two kept: "a" is asked again once "c" took its place; none kept: each time.
        kept = {"a.test": 2, "b.test": 1, "c.test": 1}
        for enabled, asked in ((True, kept), (False, dict.fromkeys(kept, 2))):
            settings.set("DNSCACHE_ENABLED", enabled)
            resolver = AsyncResolver.from_settings(settings)
            servers[0].queries.clear()
            for name in ("a.test", "b.test", "c.test", "c.test", "b.test", "a.test"):
                assert await resolver.resolve(name) == ["127.0.0.7"]
            assert servers[0].queries == asked
            with pytest.raises(DomainNotFound):
                await resolver.resolve("gone.test")
            assert resolver.failure("gone.test") is not None

    with_servers(1, test)


def test_each_server_has_its_own_cap_of_queries_in_flight() -> None:
    async def test(servers: list[Any], names: list[NameServer]) -> None:
        resolver = loopback_resolver(names, timeout=0.2, retries=0, concurrency=2)
        started = time.monotonic()
        results = await asyncio.gather(
            *(resolver.resolve(f"silent{index}.test") for index in range(6)),
            return_exceptions=True,
        )
        assert all(isinstance(result, DnsError) for result in results)
        # Six silent names, two at a time: three rounds of the timeout.
        assert time.monotonic() - started >= 3 * 0.2

    with_servers(1, test)


@pytest.mark.parametrize(
    "address",
    [
        *("127.0.0.1", "127.9.9.9", "10.1.2.3", "172.16.0.1", "172.31.255.254", "192.168.1.1"),
        *("169.254.169.254", "0.0.0.0", "100.64.0.1", "224.0.0.1", "255.255.255.255"),
        *("::1", "::", "fc00::1", "fd12:3456::1", "fe80::1"),
    ],
)
def test_addresses_that_are_not_on_the_internet_are_not_public(address: str) -> None:
    assert not is_public(address)


def test_internet_addresses_are_public() -> None:
    for address in ("8.8.8.8", "1.1.1.1", "172.32.0.1", "100.128.0.1", "2606:4700::1111"):
        assert is_public(address), address


def test_a_name_on_an_address_that_is_not_public_is_not_given() -> None:
    async def test(servers: list[Any], names: list[NameServer]) -> None:
        resolver = AsyncResolver(names, timeout=0.3, retries=1, concurrency=10)
        for name, address in (("site.test", "127.0.0.7"), ("metadata.test", "169.254.169.254")):
            for _ in range(2):  # asked, then from the cache: refused both times
                with pytest.raises(PrivateAddress) as caught:
                    await resolver.resolve(name)
                assert caught.value.address == address
            assert sum(server.queries[name] for server in servers) == 1
            failure = resolver.failure(name)
            assert isinstance(failure, PrivateAddress)
            assert (failure.outcome, failure.address) == ("private_address", address)
        assert resolver.counts["private"] == 4
        allowed = loopback_resolver(names, timeout=0.3, retries=1, concurrency=10)
        assert await allowed.resolve("metadata.test") == ["169.254.169.254"]
        # A proxy's own name (PROXY_POOL, http_proxy) is on the sweep's network: resolved.
        proxies = proxy_hosts(["http://user:pw@Site.test.:3128"])
        via = AsyncResolver(names, timeout=0.3, retries=1, concurrency=10, proxies=proxies)
        assert await via.resolve("site.test") == ["127.0.0.7"]
        with pytest.raises(PrivateAddress):
            await via.resolve("metadata.test")

    with_servers(1, test)


def test_the_proxies_of_the_environment_are_proxy_hosts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("https_proxy", "http://squid.lan:3128")
    monkeypatch.setenv("no_proxy", "localhost,internal.lan")
    assert proxy_hosts([]) == {"squid.lan"}


def test_a_probe_of_a_name_on_a_private_address_stores_it_unprobed() -> None:
    resolvers: list[AsyncResolver] = []

    async def resolve(servers: list[Any], names: list[NameServer]) -> None:
        resolver = AsyncResolver(names, timeout=0.3, retries=1, concurrency=10)
        with pytest.raises(PrivateAddress):
            await resolver.resolve("metadata.test")
        resolvers.append(resolver)

    with_servers(1, resolve)
    middleware = DomainProbeMiddleware(0, 65536, resolvers[0])
    spider = domains_spider()
    probe = spider.probe("metadata.test")
    # What Scrapy raises when the reactor's resolver found no address it may use.
    answer = middleware.process_exception(probe, CannotResolveHostError("metadata.test"))
    assert answer is not None
    (item,) = spider.parse_probe(answer)
    assert isinstance(item, DomainItem)
    assert (item.status, item.code, item.address, item.attempts) == (
        "private_address",
        1000,
        "169.254.169.254",
        1,
    )
    assert "metadata.test: 169.254.169.254 is not a public address" in str(item.error)
    assert item.https_error is None  # not tried over HTTPS either


def test_another_resolver_is_refused_unless_private_addresses_are_probed() -> None:
    """The spider's resolver is what keeps probes off private addresses: another one, named
    with TWISTED_DNS_RESOLVER, is refused unless DOMAINS_PRIVATE_ADDRESSES says to probe them."""
    with pytest.raises(SettingsError, match="DOMAINS_PRIVATE_ADDRESSES = True"):
        domains_spider(DOMAINS_PRIVATE_ADDRESSES=False)
    assert domains_spider(DOMAINS_PRIVATE_ADDRESSES=True).resolver is None


def test_name_servers_are_parsed() -> None:
    assert NameServer.parse("10.0.0.1") == NameServer("10.0.0.1", 53)
    assert NameServer.parse("127.0.0.1:5353") == NameServer("127.0.0.1", 5353)
    assert NameServer.parse("[::1]:5300") == NameServer("::1", 5300)
    for bad in ("dns.google", "1.2.3.4:0", "1.2.3.4:x"):
        with pytest.raises(ValueError, match=r"name server|port"):
            NameServer.parse(bad)


# --- the summary ----------------------------------------------------------------------------


def test_summary_counts_classes_and_the_dead_share_by_the_seed_rule() -> None:
    stats = {
        b"domains/status/alive": b"6",
        b"domains/status/http_error": b"3",
        b"domains/status/dns_not_found": b"1",
        b"domains/code/200": b"6",
        b"domains/code/403": b"1",
        b"domains/code/404": b"1",
        b"domains/code/503": b"1",
        b"domains/code/1000": b"1",
        b"response_received_count": b"12",
    }
    summary = summarize(stats)
    assert summary.by_class == {"alive": 6, "http_error": 3, "dns_not_found": 1}
    assert (summary.total, summary.dead, summary.dead_share) == (10, 3, 0.3)


def test_rate_cap_spreads_turns_evenly() -> None:
    cap = RateCap(10.0)
    waits = [cap.reserve(100.0) for _ in range(4)]
    assert waits == pytest.approx([0.0, 0.1, 0.2, 0.3])
    assert cap.reserve(101.0) == 0.0
    assert RateCap(0.0).reserve(5.0) == 0.0


def test_fleet_cap_is_shared_by_the_workers(redis_client: redis.Redis) -> None:
    """Two workers' caps on one Redis bucket: together at most the fleet's rate (plus the
    tokens each holds), and each gets turns."""
    rate, seconds = 100.0, 1.5
    caps = [FleetCap(redis_client, "{domains}:rate:fleet", rate) for _ in range(2)]
    turns = [0, 0]
    started = time.monotonic()
    rounds = 0
    while time.monotonic() - started < seconds:
        rounds += 1
        order = [0, 1] if rounds % 2 else [1, 0]  # neither always asks first
        waits = {worker: caps[worker].wait() for worker in order}
        for worker, wait in waits.items():
            turns[worker] += wait == 0
        if all(waits.values()):
            time.sleep(min(*waits.values(), 0.05))  # what a worker does: await its turn
    elapsed = time.monotonic() - started
    assert sum(turns) <= rate * elapsed + 3 * 10
    assert sum(turns) >= rate * elapsed / 2
    assert min(turns) > 0
    assert redis_client.keys("*") == [b"{domains}:rate:fleet"]


def test_no_fleet_cap_asks_nothing_of_redis() -> None:
    cap = FleetCap(None, "", 0)
    assert [cap.wait() for _ in range(1000)] == [0.0] * 1000


# --- parking pages and the body read --------------------------------------------------------

PARKED_PAGES = [
    b"<h1>This domain is <strong>for sale</strong></h1>",
    b"<p>This&nbsp;domain&nbsp;may&nbsp;be&nbsp;for&nbsp;sale.</p>",
    b"<div>The domain name <b>example.com</b> may be for sale. Click here to inquire.</div>",
    b"<h1>example.com</h1>\n<p>is for sale</p><a class=btn>Make an offer</a>",
    b"<html><head><title>Domain for sale</title></head><body><img src=x.png></body></html>",
    b"<p>This web page is parked <em>FREE</em>, courtesy of <a href=#>A Registrar</a>.</p>",
    b"<p>EXAMPLE.COM is for sale! <span>Buy now for $2,495</span></p>",
    b"<p>Interested? <a href='/inquiry'>Make an offer on this domain</a></p>",
    b"<p>This website is for sale! example.com - Resources and Information.</p>",
    b"<h2>This Domain Has Expired</h2><p>Renew it at your registrar.</p>",
    b"<p>This domain was recently registered at namecheap.com. Please check back later!</p>",
    b"<body><div id=root></div><script src='https://img1.wsimg.com/parking-lander/main.js'>"
    b"</script></body>",
    b"<script src='//sedoparking.com/frmpark/x.js'></script>",
]
SITES = [
    b"<h1>Used cars for sale</h1><p>Make an offer on any car in our yard.</p>",
    b"<p>How to choose a domain name for your shop: a guide.</p>",
    b"<p>We build web sites. Our domain of expertise: parking garages.</p>",
    b"<script>var t = 'this domain is for sale';</script><p>Welcome to the river shop.</p>",
    b"<!-- this domain is for sale --><p>Our new site is coming.</p>",
    b"<style>.x:after{content:'domain for sale'}</style><p>Home</p>",
    b"",
    b"\x00\xff binary",
]


@pytest.mark.parametrize("page", PARKED_PAGES)
def test_parking_pages_are_found_by_their_text_or_their_service(page: bytes) -> None:
    assert is_parked(page)
    assert response_outcome(200, page) == Outcome("parked", 200)


@pytest.mark.parametrize("page", SITES)
def test_sites_that_merely_mention_sales_or_domains_are_not_parked(page: bytes) -> None:
    assert not is_parked(page)


def test_page_text_is_what_a_reader_sees() -> None:
    page = b"<title>A &amp; B</title><p>one<br>two&nbsp; <i>three</i></p><script>x()</script>"
    assert page_text(page) == "a & b one two three"


JOINS = st.sampled_from([" ", "  ", "\n", "&nbsp;", " <b>", "</b> ", "<span> ", " </span>"])


@given(st.lists(JOINS, min_size=4, max_size=4), st.sampled_from(["is", "may be"]))
def test_a_parking_phrase_is_found_however_markup_splits_it(joins: list[str], verb: str) -> None:
    words = ["This", "domain", *verb.split(), "for", "sale"]
    spacing = [*joins, *joins][: len(words) - 1]
    phrase = words[0] + "".join(join + word for join, word in zip(spacing, words[1:], strict=True))
    assert is_parked(f"<html><body><p>{phrase}</p></body></html>".encode())


def _answer(body: bytes, **headers: str) -> Response:
    return Response("http://a.test/", body=body, headers=headers)


def test_the_body_read_is_cut_to_the_cap() -> None:
    page = b"<title>t</title>" + b"x" * 200_000 + b"This domain is for sale"
    body = readable_body(_answer(page), 65_536)
    assert len(body) == 65_536
    assert not is_parked(body)


def test_gzip_and_deflate_bodies_are_decoded_to_the_cap_even_cut_short() -> None:
    page = b"<title>t</title>" + b"<p>filler</p>" * 50_000
    gzipped = gzip.compress(page)
    assert readable_body(_answer(gzipped, **{"Content-Encoding": "gzip"}), 1024) == page[:1024]
    cut = gzipped[: len(gzipped) // 3]
    assert readable_body(_answer(cut, **{"Content-Encoding": "gzip"}), 4096) == page[:4096]
    deflated = zlib.compress(page)
    assert readable_body(_answer(deflated, **{"Content-Encoding": "deflate"}), 100) == page[:100]
    raw = zlib.compressobj(wbits=-zlib.MAX_WBITS)
    stream = raw.compress(page) + raw.flush()
    assert readable_body(_answer(stream, **{"Content-Encoding": "deflate"}), 100) == page[:100]
    assert readable_body(_answer(b"??", **{"Content-Encoding": "br"}), 100) == b""


def test_certificate_warnings_are_counted_not_logged_each(
    caplog: pytest.LogCaptureFixture,
) -> None:
    stats = StatsCollector(get_crawler())
    tls = logging.getLogger(TLS_LOGGER)
    certificates = CertificateWarnings(stats)
    tls.addFilter(certificates)
    try:
        with caplog.at_level(logging.DEBUG):
            for host in ("a.test", "a.test", "b.test", "c.test"):
                tls.warning('Remote certificate is not valid for hostname "%s"; x', host)
    finally:
        tls.removeFilter(certificates)
    assert stats.get_value(CERTIFICATE_STAT) == 4
    assert [record.levelno for record in caplog.records if record.name == TLS_LOGGER] == []
    levels = [record.levelno for record in caplog.records if record.name == probes.__name__]
    assert levels == [logging.INFO] + [logging.DEBUG] * 3


@pytest.mark.parametrize(
    ("level", "lines"), [("INFO", False), (logging.WARNING, False), ("DEBUG", True)]
)
def test_each_answers_debug_lines_are_made_only_when_shown(level: str | int, lines: bool) -> None:
    formatter = ProbeLogFormatter.from_crawler(get_crawler(settings_dict={"LOG_LEVEL": level}))
    request = Request("http://a.test/")
    response = Response(request.url, status=200, request=request)
    spider = Spider("domains")
    assert (formatter.crawled(request, response, spider) is not None) is lines
    assert (formatter.scraped({"domain": "a.test"}, response, spider) is not None) is lines
    # Other lines, as Scrapy's formatter makes them.
    failed = Failure(ValueError("x"))  # type: ignore[no-untyped-call]
    assert formatter.download_error(failed, request, spider) is not None


def test_the_probe_middleware_keeps_an_answer_cut_short_and_caps_the_body() -> None:
    middleware = DomainProbeMiddleware(0, 1024, None)
    request = Request("http://a.test/", meta={PROBE_META: {}})
    cut = Response(request.url, status=200, body=b"x" * 5000, flags=["dataloss"], request=request)
    read = middleware.process_response(request, cut)
    assert (read.status, len(read.body), request.meta[TRUNCATED_META]) == (200, 1024, True)
    other = Request("http://b.test/", meta={PROBE_META: {}})
    whole = Response(other.url, status=200, body=b"<title>t</title>", request=other)
    assert middleware.process_response(other, whole) is whole
    assert TRUNCATED_META not in other.meta
    middleware.bytes_received(b"y" * 600, other)  # under the cap: read on
    with pytest.raises(StopDownload) as stopped:
        middleware.bytes_received(b"y" * 600, other)
    assert not stopped.value.fail  # the answer so far is kept


def test_parking_text_is_read_around_its_words_wherever_they_are() -> None:
    script = b"<script>" + b"var d = document.domain; /* this domain is for sale */ " * 200
    filler = b"<div class='item'><a href='/x'>A product</a></div>" * 400
    parked = b"<h1>This domain is <b>for sale</b></h1>"
    assert is_parked(script + b"</script>" + filler + parked)
    assert not is_parked(script + b"</script>" + filler)
    # A script cut by the part read around a word: its text is not taken for the page's.
    assert not is_parked(b"<script>x='this domain is for sale';" + b" " * 900 + b"</script><p>sale")
    # A site that speaks of sales at length: its first places of the words are read.
    shop = b"<p>Car for sale</p>" * 2000
    assert not is_parked(shop)
    assert is_parked(b"<h1>example.com is for sale</h1>" + shop)


# --- the spider's answers, without a crawl --------------------------------------------------


def domains_spider(**settings: Any) -> DomainsSpider:
    """The spider as a worker builds it (another resolver named: none is installed here)."""
    values = {
        name: getattr(project_settings, name) for name in dir(project_settings) if name.isupper()
    }
    # Another resolver may be named only with private addresses probed (this one has none).
    other = "scrapy.resolver.CachingThreadedResolver"
    values.update({"TWISTED_DNS_RESOLVER": other, "DOMAINS_PRIVATE_ADDRESSES": True, **settings})
    if not is_reactor_installed():  # never run; the spider looks at the reactor's resolver
        install_reactor(values["TWISTED_REACTOR"])
    crawler = get_crawler(DomainsSpider, values)
    spider = crawler._create_spider()
    crawler.spider = spider
    assert isinstance(spider, DomainsSpider)
    return spider


def answered(
    spider: DomainsSpider, request: Request, status: int, body: bytes = b"", **headers: str
) -> Request | DomainItem:
    """What the spider makes of ``request``'s answer: the next request, or the document."""
    response = HtmlResponse(request.url, status=status, body=body, headers=headers, request=request)
    (output,) = spider.parse_probe(response)
    assert isinstance(output, Request | DomainItem)
    return output


# GoDaddy's parked domains: / sends the browser to /lander, which shows the parking page.
LANDER = (
    b"<html><head><title>example.com</title></head><body><div id='root'></div><script"
    b" src='https://img1.wsimg.com/parking-lander/static/js/main.js'></script></body></html>"
)
SCRIPT_REDIRECTS = (
    b'<!DOCTYPE html><html><head><script>window.onload=function(){window.location.href="/lander"}'
    b"</script></head></html>",
    b'<script>window.location.href="/lander"</script>',
    b"<script>window.location.replace('/lander');</script>",
    b'<html><body><script>location.href = "/lander"</script><noscript>Enable JavaScript'
    b"</noscript></body></html>",
    b'<meta http-equiv="refresh" content="0;url=/lander">',
    b"<html><head><title>Redirecting</title><meta http-equiv='Refresh' content='0; URL=/lander'>"
    b"</head><body><p>Redirecting...</p></body></html>",
)


@pytest.mark.parametrize("page", SCRIPT_REDIRECTS)
def test_a_page_that_only_redirects_is_followed_and_classed_by_where_it_lands(page: bytes) -> None:
    spider = domains_spider()
    lander = answered(spider, spider.probe("example.com"), 200, page)
    assert isinstance(lander, Request)
    assert lander.url == "http://example.com/lander"
    item = answered(spider, lander, 200, LANDER)
    assert isinstance(item, DomainItem)
    assert (item.status, item.code, item.final_url, item.attempts) == (
        "parked",
        200,
        "http://example.com/lander",
        2,
    )


def test_a_page_that_only_redirects_elsewhere_is_classed_as_a_redirect_there() -> None:
    spider = domains_spider()
    refresh = b'<meta http-equiv="refresh" content="0;url=https://other.org/">'
    item = answered(spider, spider.probe("example.com"), 200, refresh)
    assert isinstance(item, DomainItem)
    assert (item.status, item.code, item.final_url, item.attempts) == (
        "redirect_offsite",
        200,
        "https://other.org/",
        1,
    )
    sales = b'<script>top.location = "https://www.hugedomains.com/domain_profile.cfm?d=x.com"'
    item = answered(spider, spider.probe("example.com"), 200, sales + b"</script>")
    assert isinstance(item, DomainItem)
    assert (item.status, item.code) == ("parked", 200)


def test_redirecting_pages_count_against_the_redirects_followed() -> None:
    spider = domains_spider(DOMAINS_MAX_REDIRECTS=2)
    request: Request | DomainItem = spider.probe("example.com")
    for hop in range(1, 10):
        assert isinstance(request, Request)
        page = f"<script>location.href='/page{hop}'</script>".encode()
        request = answered(spider, request, 200, page)
        if isinstance(request, DomainItem):
            break
    assert isinstance(request, DomainItem)
    assert (request.status, request.attempts) == ("redirect_loop", 3)


@pytest.mark.parametrize(
    "page",
    [
        # a site's page: text of its own beside the script
        b"<html><body><h1>Welcome to our shop</h1><p>Opening hours, products, prices and"
        b" directions to the shop, and what our customers say.</p>"
        b"<script>location.href='/en/'</script></body></html>",
        # two targets, chosen as the page runs
        b"<script>if (mobile) { location.href = '/m/' } else { location.href = '/d/' }</script>",
        # a URL built as the page runs
        b"<script>location.href = '/lander?ref=' + document.referrer</script>",
        b"<script>if (location.href == '/old') { track() }</script>",
        b"<script>location.href = 'javascript:void(0)'</script>",
        b"<script>location.href='/lander'</script>" + b" " * 5000,  # not a small page
        b'<meta http-equiv="refresh" content="30">',  # a reload
        b'<meta http-equiv="refresh" content="60;url=/">',  # a reload, named
        b"<script>location.href = '#top'</script>",  # this page
    ],
)
def test_a_page_that_does_more_than_redirect_is_the_answer(page: bytes) -> None:
    assert page_redirect(page, "http://example.com/") is None
    spider = domains_spider()
    item = answered(spider, spider.probe("example.com"), 200, page)
    assert isinstance(item, DomainItem)
    assert (item.status, item.final_url) == ("alive", "http://example.com/")


# Bodis's parked domains: / redirects to ww25.<domain>, whose page is the parking page.
BODIS = (
    b"<html><head><title>example.com</title></head><body><p>Related searches</p>"
    b"<a href='https://www.bodis.com/privacy'>Privacy Policy</a></body></html>"
)


@pytest.mark.parametrize(
    ("location", "page", "status"),
    [
        ("http://ww25.example.com/?subid1=20240611-0316-4f1c", BODIS, "parked"),
        ("https://en.example.com/", b"<html><title>Example</title><p>Hello</p></html>", "alive"),
        ("http://m.example.com/home", b"", "alive"),
    ],
)
def test_a_redirect_to_a_name_under_the_domain_is_followed(
    location: str, page: bytes, status: str
) -> None:
    spider = domains_spider()
    followed = answered(spider, spider.probe("example.com"), 302, Location=location)
    assert isinstance(followed, Request)
    assert followed.url == location
    item = answered(spider, followed, 200, page)
    assert isinstance(item, DomainItem)
    assert (item.status, item.code, item.final_url, item.attempts) == (status, 200, location, 2)


def test_a_redirect_above_or_beside_the_domain_leaves_it() -> None:
    spider = domains_spider()
    for location in ("http://example.com/", "http://example.com.other.org/"):
        item = answered(spider, spider.probe("shop.example.com"), 301, Location=location)
        assert isinstance(item, DomainItem)
        assert (item.status, item.final_url) == ("redirect_offsite", location)


CHALLENGES: tuple[tuple[int, bytes, dict[str, str]], ...] = (
    # Cloudflare's "Under Attack" interstitial, by its title and by its header.
    (503, b"<html><head><title>Just a moment...</title></head><body></body></html>", {}),
    (403, b"<html><body>challenge</body></html>", {"cf-mitigated": "challenge"}),
    (405, b"<html></html>", {"x-amzn-waf-action": "captcha"}),  # AWS WAF
    (403, b"<html><body>Access Denied ... Reference #18.a1b2</body></html>", {}),  # Akamai
)


@pytest.mark.parametrize(("status", "body", "headers"), CHALLENGES)
def test_a_bot_protections_answer_is_challenged_not_an_http_error(
    status: int, body: bytes, headers: dict[str, str]
) -> None:
    """A site behind a bot protection is up: its challenge or block page is told apart from
    the site's own error, its code kept (the seed's rule counts by code)."""
    spider = domains_spider()
    item = answered(spider, spider.probe("example.com"), status, body, **headers)
    assert isinstance(item, DomainItem)
    assert (item.status, item.code) == ("challenged", status)


def test_a_sites_own_error_is_an_http_error() -> None:
    spider = domains_spider()
    for status, body in ((403, b"<html><title>Forbidden</title></html>"), (503, b"down")):
        item = answered(spider, spider.probe("example.com"), status, body)
        assert isinstance(item, DomainItem)
        assert (item.status, item.code) == ("http_error", status)
