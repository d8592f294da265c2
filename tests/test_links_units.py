"""Unit tests of the links spider's pure parts: canonical URLs, URL rules, HTML extraction,
sitemaps, the resolver's mapping and start entries; hypothesis where input comes from the web."""

from __future__ import annotations

import asyncio
import gzip
from functools import cache
from types import SimpleNamespace
from typing import Any
from urllib.parse import unquote_plus, urlsplit

import pytest
import redis
from hypothesis import given, settings
from hypothesis import strategies as st
from scrapy import Request
from scrapy.http import HtmlResponse, Response, TextResponse
from scrapy.utils.test import get_crawler

from crawler import settings as project_settings
from crawler.config.rules import SettingsError
from crawler.extractors.links import content_hash, parse_page
from crawler.keys import robots_claim_key, robots_key
from crawler.links.resolver import mapped_address
from crawler.links.robots import ENTRY_BYTES, FleetRobotsMiddleware, RobotsCache, parse_rules
from crawler.links.sitemaps import sitemap_body, sitemap_urls
from crawler.links.urls import (
    BadUrl,
    UrlRules,
    canonical_url,
    in_scope,
    is_calendar,
    is_tracking,
    link_priority,
    registered_domain,
    request_url,
    scope_root,
)
from crawler.meta import DEPTH_META
from crawler.spiders.base import InvalidStartEntry
from crawler.spiders.links import LinksSpider


@pytest.mark.parametrize(
    ("url", "canonical"),
    [
        ("HTTP://Example.ORG:80/a?b=2&a=1#frag", "http://example.org/a?a=1&b=2"),
        ("https://example.org:443", "https://example.org/"),
        ("https://example.org:8443/x", "https://example.org:8443/x"),
        (
            "http://example.org/p?utm_source=x&UTM_Medium=y&id=3&fbclid=z",
            "http://example.org/p?id=3",
        ),
        ("http://example.org/p?gclid=1", "http://example.org/p"),
        ("http://example.org/%7Euser/a%20b", "http://example.org/~user/a%20b"),
        ("http://example.org./", "http://example.org/"),
    ],
)
def test_canonical_url(url: str, canonical: str) -> None:
    assert canonical_url(url) == canonical


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("ftp://example.org/", "scheme"),
        ("javascript:alert(1)", "scheme"),
        ("http:///path", "no_host"),
        ("https://./", "no_host"),
        ("http://...:8080/a", "no_host"),
        ("http://user:pw@example.org/", "credentials"),
        ("http://example.org:99999/", "malformed"),
    ],
)
def test_canonical_url_refuses(url: str, reason: str) -> None:
    with pytest.raises(BadUrl) as error:
        canonical_url(url)
    assert error.value.reason == reason


@settings(max_examples=300)
@given(
    st.sampled_from(["http", "https", "HTTP"]),
    st.from_regex(r"[a-z0-9]{1,10}(\.[a-z0-9]{1,10}){0,3}", fullmatch=True),
    st.text(max_size=40),
    st.text(max_size=40),
)
def test_canonical_url_is_stable(scheme: str, host: str, path: str, query: str) -> None:
    """Canonicalising twice changes nothing, whatever a page puts in its path and query."""
    try:
        once = canonical_url(f"{scheme}://{host}/{path}?{query}")
    except BadUrl:
        return
    assert canonical_url(once) == once
    assert urlsplit(once).scheme in ("http", "https")
    assert "#" not in once


@pytest.mark.parametrize(
    ("url", "sent"),
    [
        # A site's own query, in its order and escapes; tracking parameters and fragment gone.
        ("HTTP://Example.ORG:80/s?q=a%2Fb&b=2&a=1#frag", "http://example.org/s?q=a%2Fb&b=2&a=1"),
        ("http://example.org/p?utm_source=x&id=3&fbclid=z&x", "http://example.org/p?id=3&x"),
        ("http://example.org/p?a+b=1&%75tm_x=2", "http://example.org/p?a+b=1"),
        ("https://example.org:443", "https://example.org/"),
    ],
)
def test_request_url_keeps_the_query_as_the_page_wrote_it(url: str, sent: str) -> None:
    assert request_url(url) == sent
    assert canonical_url(sent) == canonical_url(url)


@settings(max_examples=300)
@given(
    st.sampled_from(["http", "https", "HTTP"]),
    st.from_regex(r"[a-z0-9]{1,10}(\.[a-z0-9]{1,10}){0,3}", fullmatch=True),
    st.text(max_size=40),
    st.lists(
        st.tuples(
            st.sampled_from(["id", "utm_source", "q", "Fbclid", "a b", "%75tm_x", "ref"]),
            st.text(max_size=8),
        ),
        max_size=5,
    ),
)
def test_a_link_is_asked_for_by_a_url_of_its_own_page(
    scheme: str, host: str, path: str, query: list[tuple[str, str]]
) -> None:
    """Whatever a page links to: the URL asked for is the link's page to the duplicate filter
    (one canonical URL), keeps what is not tracking in its order, and asking again is the same."""
    url = f"{scheme}://{host}/{path}?" + "&".join(f"{name}={value}" for name, value in query)
    try:
        sent = request_url(url)
    except BadUrl:
        return
    assert canonical_url(sent) == canonical_url(url)
    assert request_url(sent) == sent
    assert "#" not in sent
    names = [unquote_plus(pair.split("=", 1)[0]) for pair in urlsplit(sent).query.split("&")]
    assert not any(is_tracking(name) for name in names)


def test_url_rules() -> None:
    rules = UrlRules(max_length=60, max_repeats=2)
    rules.check("http://example.org/a/b/a/b")
    for url, reason in [
        ("http://example.org/" + "x" * 60, "too_long"),
        ("http://example.org/report.PDF", "extension"),
        ("http://example.org/logo.png", "extension"),
        ("http://example.org/a/a/a/", "repeated_segments"),
    ]:
        with pytest.raises(BadUrl, match=reason):
            rules.check(url)


@given(st.lists(st.sampled_from(["a", "b", "c", "d", "e"]), max_size=12))
def test_a_path_repeating_a_segment_more_than_allowed_is_refused(segments: list[str]) -> None:
    url = "http://example.org/" + "/".join(segments)
    refused = bool(segments) and max(segments.count(s) for s in segments) > 2
    if refused:
        with pytest.raises(BadUrl, match="repeated_segments"):
            UrlRules(max_repeats=2).check(url)
    else:
        UrlRules(max_repeats=2).check(url)


@pytest.mark.parametrize("path", ["/tags/node.js", "/docs/setup.py", "/man/ls.sh"])
def test_pages_named_like_source_files_are_followed(path: str) -> None:
    UrlRules().check(f"http://example.org{path}")  # cut off at its headers if not HTML


def test_scopes_and_calendars() -> None:
    url = "http://blog.example.co.uk/x"
    assert registered_domain("blog.example.co.uk") == "example.co.uk"
    assert registered_domain("www.site1.test:8080") == "site1.test"
    assert registered_domain("192.168.1.1:8080") == "192.168.1.1"  # not "1.1"
    assert not in_scope("http://10.0.1.1/", "domain", scope_root("http://192.168.1.1/", "domain"))
    assert registered_domain("[::1]") == "[::1]"
    assert scope_root(url, "host") == "blog.example.co.uk"
    assert in_scope("http://shop.example.co.uk/", "domain", scope_root(url, "domain"))
    assert not in_scope("http://shop.example.co.uk/", "host", scope_root(url, "host"))
    assert in_scope("http://other.org/", "any", "")
    assert is_calendar("/cal/2024/01")
    assert is_calendar("/events/2024-12-31/")
    assert not is_calendar("/p/2024")
    assert not is_calendar("/id/123456")


PAGE = """<!DOCTYPE html><html lang="fr_CA"><head><base href="/docs/">
<title>  A
 title </title><META NAME="Description" content=" Some  text "><link rel="alternate canonical"
href="/canon"></head><body><a href="one">1</a><a href="https://other.org/x#y">2</a>
<a href="mailto:a@b.c">m</a><a href="javascript:x()">j</a><a href="#top">t</a>
<area href="//cdn.org/img"><a href="one">again</a><a href="http://[bad">b</a></body></html>"""


def test_parse_page_fields_and_links() -> None:
    page = parse_page(PAGE, "http://site.org/a/b")
    assert page.title == "A title"
    assert page.language == "fr-ca"
    assert page.description == "Some text"
    assert page.canonical == "http://site.org/canon"
    assert page.links == ["http://site.org/docs/one", "https://other.org/x", "http://cdn.org/img"]
    assert page.bad_fields == []


def test_frames_and_a_base_outside_head_are_read_as_browsers_do() -> None:
    frames = '<frameset><frame src="menu.html"><frame src="main.html"></frameset>'
    assert parse_page(frames, "http://s.org/").links == [
        "http://s.org/menu.html",
        "http://s.org/main.html",
    ]
    framed = '<p><iframe src="/embedded"></iframe></p>'
    assert parse_page(framed, "http://s.org/").links == ["http://s.org/embedded"]
    late_base = '<head><div></div><base href="/app/"></head><a href="page">p</a>'
    assert parse_page(late_base, "http://s.org/dir/x").links == ["http://s.org/app/page"]


def test_a_links_query_is_sent_in_its_pages_encoding_as_a_browser_sends_it() -> None:
    links = '<a href="/s?q=café">1</a><a href="/s?q=日本">2</a><a href="/é">3</a>'
    assert [canonical_url(u) for u in parse_page(links, "http://s.org/", "cp1252").links] == [
        "http://s.org/s?q=caf%E9",
        "http://s.org/s?q=%E6%97%A5%E6%9C%AC",  # not in cp1252: UTF-8, as a browser falls back
        "http://s.org/%C3%A9",  # a path is UTF-8 whatever the page
    ]
    assert parse_page(links, "http://s.org/", "shift_jis").links[1].endswith("?q=%93%FA%96%7B")
    assert canonical_url("http://s.org/list?si=20") == "http://s.org/list?si=20"  # a site's own


def test_parse_page_costs_only_the_bad_field() -> None:
    page = parse_page('<html lang="<script>"><title>t</title></html>', "http://s.org/")
    assert page.title == "t"
    assert page.language is None
    assert page.bad_fields == ["language"]


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=3000))
def test_parse_page_never_raises(html: str) -> None:
    page = parse_page(html, "http://site.org/")
    for link in page.links:
        assert urlsplit(link).scheme in ("http", "https")
        assert urlsplit(link).hostname


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.sampled_from(["<a href='", "'>", "<", "html", "http://", "x", "\x00", "#", " "]))
)
def test_parse_page_never_raises_on_tag_soup(parts: list[str]) -> None:
    parse_page("".join(parts), "http://site.org/")


def test_content_hash() -> None:
    assert content_hash(b"a") == content_hash(b"a") != content_hash(b"b")
    assert len(content_hash(b"")) == 32


URLSET = (
    b'<?xml version="1.0"?><urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">'
    b"<url><loc>http://s.org/a</loc></url><url><loc>http://s.org/b</loc></url></urlset>"
)


def test_sitemaps_plain_gzip_and_junk() -> None:
    plain = Response("http://s.org/sitemap.xml", body=URLSET)
    assert sitemap_urls(sitemap_body(plain, 10**6) or b"", 10) == (
        "urlset",
        ["http://s.org/a", "http://s.org/b"],
    )
    zipped = Response("http://s.org/s.gz", body=gzip.compress(URLSET))
    assert sitemap_urls(sitemap_body(zipped, 10**6) or b"", 1) == ("urlset", ["http://s.org/a"])
    html = HtmlResponse("http://s.org/s", body=b"<html></html>")
    assert sitemap_body(html, 10**6) is None
    assert sitemap_urls(b"\x00not xml", 10) == ("", [])


def test_robots_rules_and_cache() -> None:
    rules = parse_rules(b"User-agent: *\nDisallow: /private/\nCrawl-delay: 2\nSitemap: http://s/sm")
    assert not rules.can_fetch("http://s/private/x", "bot")
    assert rules.can_fetch("http://s/", "bot")
    assert rules.crawl_delay("bot") == 2
    assert list(rules.sitemaps) == ["http://s/sm"]
    marked = parse_rules(b"\xef\xbb\xbfUser-agent: *\r\nDisallow: /priv\r\n")  # a BOM, CRLF
    assert not marked.can_fetch("http://s/priv", "bot")
    cache = RobotsCache(max_bytes=2 * ENTRY_BYTES, ttl=60)
    for origin in ("a", "b", "c"):
        cache.put(origin, rules, 100)  # each counts ENTRY_BYTES
    assert cache.get("a") is None
    assert cache.get("c") is rules


@given(st.lists(st.tuples(st.sampled_from("abcdef"), st.integers(0, 600_000)), max_size=60))
def test_the_robots_cache_holds_its_bytes_and_always_the_last_rules(
    puts: list[tuple[str, int]],
) -> None:
    """However large the robots.txt (a hostile host's 500 KB parses to about 25 MB), the
    cache keeps at most its bytes, but always the rules put last (else each of its host's
    requests would read and parse them again)."""
    rules = parse_rules(b"")
    cache = RobotsCache(max_bytes=1_000_000, ttl=60)
    for origin, size in puts:
        cache.put(origin, rules, size)
        assert cache.get(origin) is rules
        assert cache.held <= 1_000_000 or len(cache) == 1
        assert cache.held >= max(size, ENTRY_BYTES)


def test_mapped_address() -> None:
    mapping = {"test": "127.0.0.1", "exact.example": "127.0.0.2"}
    assert mapped_address("Site1.TEST", mapping) == "127.0.0.1"
    assert mapped_address("exact.example", mapping) == "127.0.0.2"
    assert mapped_address("other.example", mapping) is None
    assert mapped_address("test.org", mapping) is None


def _spider(**settings: Any) -> LinksSpider:
    defaults = {
        name: getattr(project_settings, name) for name in dir(project_settings) if name.isupper()
    }
    crawler = get_crawler(LinksSpider, settings_dict={**defaults, **settings})
    return LinksSpider.from_crawler(crawler)


@cache
def shared_spider() -> LinksSpider:
    return _spider()


def test_start_entries() -> None:
    spider = _spider()
    (bare,) = spider.requests_from_entry("Example.org")
    assert bare.url == "https://example.org/"
    (path,) = spider.requests_from_entry("example.org/a/b")
    assert path.url == "https://example.org/a/b"
    state = bare.meta["links"]
    assert (state["depth"], state["scope"], state["root"]) == (0, "host", "example.org")
    entry = {"url": "http://a.example.org/x", "max_depth": 2, "max_pages": 9, "scope": "domain"}
    (request,) = spider.requests_from_entry(entry)
    state = request.meta["links"]
    assert (state["max_depth"], state["max_pages"], state["root"]) == (2, 9, "example.org")


@pytest.mark.parametrize(
    ("entry", "reason"),
    [
        ("ftp://example.org/", "bad_url"),
        ("http://u:p@example.org/", "credentials"),
        ("http://exa mple.org/", "bad_url"),
        ({"url": "http://example.org/", "scope": "all"}, "bad_scope"),
        ({"url": "http://example.org/", "max_pages": True}, "bad_max_pages"),
        ({"url": "http://example.org/", "max_depth": 10**9}, "bad_max_depth"),
        ({"max_depth": 1}, "missing_keys"),
        ({"url": 5}, "bad_url"),
    ],
)
def test_bad_start_entries(entry: str | dict[str, Any], reason: str) -> None:
    with pytest.raises(InvalidStartEntry) as error:
        list(_spider().requests_from_entry(entry))
    assert error.value.reason == reason


def test_not_html_is_not_parsed() -> None:
    spider = _spider()
    (request,) = spider.requests_from_entry("http://example.org/")
    response = TextResponse(
        "http://example.org/",
        body=b"plain",
        headers={"Content-Type": "text/plain"},
        request=request,
    )
    assert list(spider.parse_page(response)) == []


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=30),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(), children),
    max_leaves=8,
)


@settings(max_examples=300, deadline=None)
@given(
    st.one_of(
        st.text(max_size=80),
        st.dictionaries(
            st.sampled_from(["url", "max_depth", "max_pages", "scope", "other"]), JSON_VALUES
        ),
        st.builds(lambda host, path: {"url": f"http://{host}/{path}"}, st.text(), st.text()),
    )
)
def test_any_start_entry_makes_a_canonical_request_or_is_refused(
    entry: str | dict[str, Any],
) -> None:
    try:
        requests = list(shared_spider().requests_from_entry(entry))
    except InvalidStartEntry:
        return
    for request in requests:
        # Scrapy escapes some characters w3lib keeps (``[``): equal once canonical again.
        once = canonical_url(request.url)
        assert canonical_url(once) == once
        parts = urlsplit(request.url)
        assert parts.scheme in ("http", "https")
        assert "@" not in parts.netloc


def test_file_argument(tmp_path: Any) -> None:
    listing = tmp_path / "domains.txt"
    listing.write_text("# sites\nexample.org\n\n  https://example.net/a  \n")
    spider = LinksSpider(file=str(listing), urls="example.com")
    assert list(spider.argument_entries()) == [
        "example.com",
        "example.org",
        "https://example.net/a",
    ]


def test_a_file_saved_with_a_bom_keeps_its_first_url(tmp_path: Any) -> None:
    listing = tmp_path / "sites.txt"
    listing.write_bytes("\ufeffhttps://example.org/\r\nexample.net\r\n".encode())
    spider = LinksSpider(file=str(listing))
    assert list(spider.argument_entries()) == ["https://example.org/", "example.net"]


@pytest.mark.parametrize(
    ("content", "said"),
    [(None, "no such file"), (b"example.org\n\xff\xfe\n", "not UTF-8")],
)
def test_a_file_that_cannot_be_read_is_refused_with_why(
    tmp_path: Any, content: bytes | None, said: str
) -> None:
    listing = tmp_path / "sites.txt"
    if content is not None:
        listing.write_bytes(content)
    with pytest.raises(SettingsError, match=f"-a file={listing}: {said}"):
        LinksSpider(file=str(listing))


def test_a_file_with_a_byte_order_mark_is_read_without_it(tmp_path: Any) -> None:
    listing = tmp_path / "domains.txt"
    listing.write_bytes("\ufeff# sites\r\nexample.org\r\n".encode())
    assert list(LinksSpider(file=str(listing)).argument_entries()) == ["example.org"]


def test_link_priority_is_breadth_first() -> None:
    assert link_priority(1, True, 0) > link_priority(1, False, 0) > link_priority(2, True, 0)
    assert link_priority(2, False, 10) == link_priority(2, True, 0)
    assert link_priority(2, False, 10**6) == link_priority(1, False, 0)
    assert link_priority(2, False, 10**6) < link_priority(1, True, 0)


def test_a_start_url_that_redirects_moves_the_scope(redis_url: str) -> None:
    spider = _spider(REDIS_URL=redis_url)
    (start,) = spider.requests_from_entry("http://example.org/")
    landed = start.replace(
        url="https://www.example.org/",
        meta={**start.meta, "redirect_urls": ["http://example.org/"]},
    )
    body = b'<a href="/a">a</a><a href="http://example.org/b">b</a>'
    response = HtmlResponse(landed.url, body=body, request=landed)
    output = list(spider.parse_page(response))
    item, *requests = output
    assert item.url == "https://www.example.org/"
    assert item.requested_url == "http://example.org/"
    assert [request.url for request in requests] == ["https://www.example.org/a"]


def test_the_sitemaps_of_a_start_url_that_moved_to_www_are_read_in_its_new_scope() -> None:
    """http://example.net/ lands on https://www.example.net/: its robots.txt names its sitemap
    as http://WWW.example.net/...; the sitemap is asked for, and its pages are followed."""
    spider = _spider()
    (start,) = spider.requests_from_entry("http://example.net/")
    landed = start.replace(
        url="https://www.example.net/", meta={**start.meta, "redirect_urls": [start.url]}
    )
    (sitemap,) = spider.robots_requests(landed, ["http://WWW.example.net/sitemap_index.xml"])
    assert sitemap.url == "http://www.example.net/sitemap_index.xml"
    sitemap = sitemap.replace(url="https://www.example.net/sitemap_index.xml")
    pages = list(spider.parse_sitemap(_sitemap_answer(sitemap, "urlset", 3)))
    assert [page.url for page in pages] == [
        f"https://www.example.net/sitemap_index-{n}" for n in range(3)
    ]


def test_a_redirect_target_is_the_page_of_its_canonical_url_to_the_duplicate_filter() -> None:
    """A Location written with a tracking parameter, the host's case or its default port is
    the page the crawl reached by a link: one fingerprint, one fetch."""
    spider = _spider()
    fingerprint = spider.crawler.request_fingerprinter.fingerprint
    page_url = "https://example.org/b"
    page = fingerprint(Request(page_url))
    for written in ("https://example.org/b?utm_source=x", "https://EXAMPLE.org:443/b#top"):
        assert fingerprint(Request(written)) == page
    assert fingerprint(Request("https://example.org/c")) != page
    # /b that redirects to itself with a tracking parameter: the target passes the filter once.
    itself = Request("https://example.org/b?utm_source=x", meta={"redirect_urls": [page_url]})
    assert fingerprint(itself) != page
    # A link asked for as the page wrote it (?b=1&a=2, %c3%a9), which the server sends on to
    # its own spelling of the same URL: the target passes the filter once too.
    for asked, spelled in (("/q?b=1&a=2", "/q?a=2&b=1"), ("/caf%c3%a9", "/caf%C3%A9")):
        first = fingerprint(Request(f"https://example.org{asked}"))
        moved = Request(
            f"https://example.org{spelled}", meta={"redirect_urls": [f"https://example.org{asked}"]}
        )
        assert fingerprint(moved) != first
        assert fingerprint(moved) == fingerprint(moved.replace())  # the same each time


def test_a_redirect_off_the_site_is_neither_stored_nor_followed(redis_url: str) -> None:
    """A site's /go/ link that lands on a partner, and a start URL (an expired domain) that
    lands on a parking service: no page of the other site is stored or followed."""
    spider = _spider(REDIS_URL=redis_url)
    (start,) = spider.requests_from_entry("http://example.org/")
    body = b'<a href="/about">about</a>'
    for hops, landed_url in (
        (1, "https://partner.com/landing"),
        (0, "https://www.hugedomains.com/domain_profile.cfm?d=example.org"),
    ):
        state = {**start.meta["links"], "depth": hops}
        redirected = "http://example.org/go/partner" if hops else "http://example.org/"
        landed = start.replace(
            url=landed_url, meta={**start.meta, "links": state, "redirect_urls": [redirected]}
        )
        assert list(spider.parse_page(HtmlResponse(landed_url, body=body, request=landed))) == []
    assert spider.crawler.stats is not None
    assert spider.crawler.stats.get_value("links/skipped/redirect_out_of_scope") == 2


@pytest.mark.parametrize("written", [True, False])
def test_robots_rules_are_shared_once_what_they_seed_is_written(
    redis_url: str, monkeypatch: pytest.MonkeyPatch, written: bool
) -> None:
    """The worker that downloaded robots.txt stores the rules for the fleet only once the
    sitemap requests they seed are in the frontier; else it gives the claim back, so a worker
    killed in between leaves the rules to be downloaded (and seed) again."""
    spider = _spider(REDIS_URL=redis_url)
    crawled: list[Any] = []
    spider.crawler.engine = SimpleNamespace(crawl=crawled.append)  # type: ignore[assignment]
    spider.crawler.spider = spider
    middleware = FleetRobotsMiddleware.from_crawler(spider.crawler)
    # The frontier writes the seeded requests, or not.
    monkeypatch.setattr(middleware.frontier, "flush", lambda: written)
    origin = "http://example.org"
    client = redis.Redis.from_url(redis_url)
    client.delete(robots_key("links", origin), robots_claim_key("links", origin))
    assert middleware.fleet.get_or_claim(origin) is True
    body = b"User-agent: *\nDisallow: /private\nSitemap: http://example.org/map.xml\n"

    async def download(origin: str, paced: bool) -> bytes:
        return body

    monkeypatch.setattr(middleware, "_download", download)
    (start,) = spider.requests_from_entry("http://example.org/")
    rules = asyncio.run(middleware._fetch(origin, start))

    assert rules is not None
    assert not rules.can_fetch("http://example.org/private", "*")
    assert [request.url for request in crawled] == ["http://example.org/map.xml"]
    assert client.get(robots_key("links", origin)) == (body if written else None)
    assert not client.exists(robots_claim_key("links", origin))


def test_links_carry_their_depth_and_a_shorter_path_is_asked_again(redis_url: str) -> None:
    """Each request tells the frontier its depth; a link this worker asked for is asked again
    only by a shorter path (the frontier's filter would drop it otherwise)."""
    spider = _spider(REDIS_URL=redis_url)
    (start,) = spider.requests_from_entry("http://example.org/")
    assert start.meta[DEPTH_META] == 0

    def links_of(depth: int, path: str) -> list[tuple[str, int]]:
        state = {**start.meta["links"], "depth": depth}
        request = start.replace(
            url=f"http://example.org{path}", meta={**start.meta, "links": state}
        )
        body = b'<a href="/a">a</a><a href="/b">b</a>'
        response = HtmlResponse(request.url, body=body, request=request)
        made = [out for out in spider.parse_page(response) if isinstance(out, Request)]
        assert all(out.meta[DEPTH_META] == out.meta["links"]["depth"] for out in made)
        return [(urlsplit(out.url).path, out.meta[DEPTH_META]) for out in made]

    assert links_of(3, "/deep") == [("/a", 4), ("/b", 4)]
    assert links_of(3, "/other") == []
    assert links_of(1, "/shallow") == [("/a", 2), ("/b", 2)]
    assert links_of(2, "/middle") == []


def _sitemap_answer(request: Request, kind: str, children: int) -> Response:
    """A sitemap of ``kind`` ("sitemapindex" or "urlset") listing ``children`` new URLs of its
    host, each named after the request's URL (so every one is new)."""
    tag, suffix = ("sitemap", ".xml") if kind == "sitemapindex" else ("url", "")
    base = request.url.removesuffix(".xml")
    entries = "".join(f"<{tag}><loc>{base}-{n}{suffix}</loc></{tag}>" for n in range(children))
    body = f'<?xml version="1.0"?><{kind} xmlns="{SITEMAP_NS}">{entries}</{kind}>'
    return Response(request.url, body=body.encode(), request=request)


SITEMAP_NS = "http://www.sitemaps.org/schemas/sitemap/0.9"


def test_sitemap_indexes_that_nest_without_end_are_followed_one_level_down() -> None:
    """Every sitemap of a hostile host is an index of 5 new ones: the robots.txt one, its 5
    and their 25 are read, and no further (sitemaps.org indexes do not nest)."""
    spider = _spider()
    (home,) = spider.requests_from_entry("http://h.test/")
    waiting, read = spider.robots_requests(home, ["http://h.test/sm.xml"]), 0
    while waiting and read < 1000:
        request = waiting.pop()
        read += 1
        waiting += list(spider.parse_sitemap(_sitemap_answer(request, "sitemapindex", 5)))
    assert read == 1 + 5 + 25


def test_sitemaps_ask_for_no_more_of_a_host_than_its_page_budget() -> None:
    spider = _spider()
    (home,) = spider.requests_from_entry({"url": "http://h.test/", "max_pages": 30})
    (index,) = spider.robots_requests(home, ["http://h.test/sm.xml"])
    sitemaps = list(spider.parse_sitemap(_sitemap_answer(index, "sitemapindex", 50)))
    assert len(sitemaps) == 30
    pages = [
        page
        for sitemap in sitemaps
        for page in spider.parse_sitemap(_sitemap_answer(sitemap, "urlset", 20))
    ]
    assert len(pages) == 30
    assert spider.crawler.stats is not None
    assert spider.crawler.stats.get_value("links/skipped/sitemap_over_budget") >= 1
    # A page the sitemaps had no room for is still followed when a page links to it.
    unasked = sitemaps[-1].url.removesuffix(".xml") + "-0"
    assert unasked not in spider.asked
    assert spider._first_ask(unasked, 1)
