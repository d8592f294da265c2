"""The links spider's start entries name a host the downloader can reach, or are set aside
with their reason: URLs over the spider's length limit, hosts that are no host names (a
``rank,domain`` line read as one, commas, spaces, empty labels); ``rank,domain`` lines of a
list file read as their domain."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import redis
from hypothesis import given, settings
from hypothesis import strategies as st
from scrapy.core.downloader._idna_patch import _install_twisted_idna_fallbacks
from scrapy.utils.test import get_crawler
from twisted.internet.endpoints import HostnameEndpoint

from crawler import settings as project_settings
from crawler.links.entries import file_entries, list_entry
from crawler.spiders.base import InvalidStartEntry
from crawler.spiders.links import LinksSpider
from tests.harness import Crawl, Sandbox

RESOLVER = {
    "TWISTED_DNS_RESOLVER": "crawler.links.resolver.MappedResolver",
    "LINKS_RESOLVE": json.dumps({"test": "127.0.0.1"}),
    "LINKS_DEFAULT_SCHEME": "http",
}


@cache
def spider() -> LinksSpider:
    defaults = {
        name: getattr(project_settings, name) for name in dir(project_settings) if name.isupper()
    }
    crawler = get_crawler(LinksSpider, settings_dict={**defaults, "LINKS_DEFAULT_SCHEME": "http"})
    return LinksSpider.from_crawler(crawler)


def downloader_refuses(host: str) -> bool:
    """Whether Scrapy's downloader fails ``host`` as no host name ("invalid hostname"): what
    Twisted's HostnameEndpoint decides, with the IDNA fallbacks Scrapy installs."""
    _install_twisted_idna_fallbacks()
    invalid, _, _ = HostnameEndpoint._hostAsBytesAndText(host)
    return invalid


def reason_or_hosts(entry: str | dict[str, Any]) -> str | list[str]:
    """The reason ``entry`` is set aside for, else the hosts its requests go to."""
    try:
        requests = list(spider().requests_from_entry(entry))
    except InvalidStartEntry as exc:
        return exc.reason
    return [urlsplit(request.url).hostname or "" for request in requests]


@pytest.mark.parametrize(
    ("entry", "expected"),
    [
        ("1,site1.test:48000", "bad_host"),
        ("http://1,site1.test:48000/", "bad_host"),
        ("http://a..b.test/", "bad_host"),
        ("http://a.b_c/", "bad_host"),
        ("http://999.1.1.1/", "bad_host"),
        ("http://a%20b.test/", "bad_host"),
        ({"url": "http://x,y.test/"}, "bad_host"),
        ("http://site0.test:48000/" + "x" * 9000, "url_too_long"),
        ({"url": "http://site0.test/" + "x" * 2048}, "url_too_long"),
        ("http://site_1.example.org/", ["site_1.example.org"]),
        ("http://[::1]:48000/", ["::1"]),
        ("bücher.de", ["xn--bcher-kva.de"]),
        ("http://site0.test/" + "x" * 2000, ["site0.test"]),
    ],
)
def test_a_start_entry_names_a_host_or_is_set_aside(
    entry: str | dict[str, Any], expected: str | list[str]
) -> None:
    assert reason_or_hosts(entry) == expected


HOSTILE_HOSTS = st.text(
    st.characters(codec="utf-8") | st.sampled_from(",_ .-%[]:@"),
    max_size=40,
)


@settings(max_examples=500, deadline=None)
@given(
    host=HOSTILE_HOSTS,
    form=st.sampled_from(["{host}", "http://{host}/", "https://{host}:8443/a", "7,{host}"]),
    path=st.text(max_size=20),
)
def test_any_start_host_is_one_the_downloader_takes_or_is_set_aside(
    host: str, form: str, path: str
) -> None:
    entry = list_entry(form.format(host=host) + path)
    outcome = reason_or_hosts(entry)
    if isinstance(outcome, str):
        assert outcome  # set aside with a reason
        return
    for name in outcome:
        assert name
        assert not downloader_refuses(name), entry


def test_a_list_file_gives_the_domains_of_its_rank_lines(tmp_path: Path) -> None:
    listing = tmp_path / "top.csv"
    listing.write_text("rank,domain\n1,site1.test:48000\n2, example.org \nhttp://a.test/x,y\n")
    assert file_entries(str(listing)) == ["site1.test:48000", "example.org", "http://a.test/x,y"]


def _invalid(redis_client: redis.Redis) -> dict[str, str]:
    records = [json.loads(raw) for raw in redis_client.lrange("links:start_urls:invalid", 0, -1)]
    return {record["entry"]: record["reason"].split(":")[0] for record in records}


@pytest.mark.integration
def test_bad_hosts_and_long_urls_are_set_aside_and_rank_lines_crawled(
    crawl: Crawl, redis_client: redis.Redis, sandbox: Sandbox, tmp_path: Path
) -> None:
    sandbox.admin("web", {"sites": 3, "pages": 1, "extras": False})
    port = urlsplit(sandbox.url).port
    long_url = f"http://site0.test:{port}/" + "x" * 3000
    refused = {
        long_url: "url_too_long",
        f"http://1,site2.test:{port}/": "bad_host",
        f"http://site2..test:{port}/": "bad_host",
        json.dumps({"url": f"http://site 2.test:{port}/"}): "bad_url",
    }
    redis_client.lpush("links:start_urls", *refused)
    listing = tmp_path / "top.csv"
    listing.write_text(f"1,site1.test:{port}\n")
    settings = {**RESOLVER, "LINKS_MAX_DEPTH": 0, "LINKS_SITEMAPS": False}
    try:
        result = crawl("links", "-a", f"file={listing}", settings=settings, timeout=60)
    finally:
        counts = sandbox.admin("web")["counts"]
        sandbox.admin("web", {})
    assert result.returncode == 0, result.stderr[-3000:]
    assert _invalid(redis_client) == refused
    pages = {doc["url"] for doc in crawl.mongo.db.pages.find({}, {"url": 1})}
    assert pages == {f"http://site1.test:{port}/"}
    assert set(counts) == {"site1.test"}, counts
    assert redis_client.llen("{links}:dead") == 0
    assert "Traceback" not in result.stderr
    assert "invalid hostname" not in result.stderr


def test_a_link_to_no_host_name_is_skipped() -> None:
    links = spider()._canonical_links(["http://a,b.test/x", "http://a.test/x", "http://_x_/"])
    assert list(links) == ["http://a.test/x"]
    stats = spider().crawler.stats
    assert stats is not None
    assert stats.get_value("links/skipped/bad_host") == 2
