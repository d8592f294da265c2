"""Start entries become the right requests; bad ones are refused with a reason."""

from __future__ import annotations

import contextlib
import json
from functools import cache
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scrapy.utils.test import get_crawler

from crawler import settings as project_settings
from crawler.spiders.base import EntryLimits, InvalidStartEntry, decode_entry
from crawler.spiders.explore import ExploreSpider
from crawler.spiders.maps import MapsSpider
from crawler.spiders.profiles import ProfilesSpider

BASE = {"EXPLORE_BASE_URL": "http://127.0.0.1:9", "PROFILES_BASE_URL": "http://127.0.0.1:9"}
FEED = "/api/explore/item_list/"


def _spider(cls: Any, **settings: Any) -> Any:
    # The project's settings without its extensions, which reach Redis when they start.
    defaults = {name: getattr(project_settings, name) for name in dir(project_settings)}
    defaults = {name: value for name, value in defaults.items() if name.isupper()}
    defaults["EXTENSIONS"] = dict.fromkeys(project_settings.EXTENSIONS)
    crawler = get_crawler(cls, settings_dict={**defaults, **BASE, **settings})
    return cls.from_crawler(crawler)


@cache
def _default_spider(cls: Any) -> Any:
    return _spider(cls)


def _entry_requests(spider: Any, raw: str | bytes) -> list[Any]:
    return list(spider.requests_from_entry(decode_entry(raw)))


def _reason(spider: Any, raw: str | bytes) -> str:
    with pytest.raises(InvalidStartEntry) as raised:
        _entry_requests(spider, raw)
    return raised.value.reason


@pytest.mark.parametrize(
    ("raw", "category", "url_part"),
    [
        ("2", 2, "categoryType=2"),
        ('{"category": 12}', 12, "categoryType=12"),
        ('\ufeff{"category": 12}', 12, "categoryType=12"),  # a byte-order mark in front
        ('{"category": "120", "max_pages": 2}', 120, "count=16"),
        (f"http://127.0.0.1:9{FEED}?aid=1988&categoryType=5&msToken=x", 5, "msToken=x"),
        (f"HTTP://127.0.0.1:9{FEED}?categoryType=5", 5, "http://127.0.0.1:9/"),
        (
            '{"url": "http://127.0.0.1:9/api/recommend/item_list/?from_page=fyp&count=30"}',
            None,
            "from_page=fyp",
        ),
    ],
)
def test_explore_entries(raw: str, category: int | None, url_part: str) -> None:
    (request,) = _entry_requests(_default_spider(ExploreSpider), raw)
    assert request.cb_kwargs["category"] == category
    assert url_part in request.url


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        ("", "empty"),
        ("   ", "empty"),
        ("{not json", "invalid_json"),
        ("[1, 2]", "not_an_object"),
        ('{"category": 2, "colour": "red"}', "unknown_keys"),
        ('{"max_pages": 2}', "missing_keys"),
        ("9", "unknown_category"),
        ("\u0663", "bad_url"),
        ('{"category": true}', "unknown_category"),
        ('{"category": 1e999}', "unknown_category"),
        ('{"category": 2.0}', "unknown_category"),
        ('{"category": [2]}', "unknown_category"),
        ('{"category": 2, "max_pages": -1}', "bad_max_pages"),
        ('{"category": 2, "max_pages": 1e999}', "bad_max_pages"),
        ("ftp://127.0.0.1:9/api/explore/item_list/", "bad_url"),
        ("http://127.0.0.1:9/@someone", "bad_url"),
        ("dance", "bad_url"),
        ('{"url": 5}', "bad_url"),
        ('{"url": null}', "bad_url"),
        (f"http://[::1{FEED}", "bad_url"),
        (f"http://127.0.0.1:99999{FEED}", "bad_url"),
        (f"http://127.0.0.1:9{FEED}?categoryType=1e999", "unknown_category"),
        (f"http://127.0.0.1:10{FEED}", "foreign_host"),
        ('{"url": "http://evil.example/api/recommend/item_list/"}', "foreign_host"),
        (f"https://127.0.0.1:9{FEED}", "foreign_host"),
        (f"http://u:pw@127.0.0.1:9{FEED}", "credentials"),
        (f"http://127.0.0.1:9@127.0.0.1:10{FEED}", "credentials"),
        (f"http://127.0.0.1:10\\@127.0.0.1:9{FEED}", "bad_url"),
    ],
)
def test_bad_explore_entries(raw: str, reason: str) -> None:
    assert _reason(_default_spider(ExploreSpider), raw) == reason


@pytest.mark.parametrize(
    ("raw", "url"),
    [
        ("cook.anna", "http://127.0.0.1:9/@cook.anna"),
        ("@cook.anna", "http://127.0.0.1:9/@cook.anna"),
        ("  cook.anna\n", "http://127.0.0.1:9/@cook.anna"),
        ('{"unique_id": "cook_anna"}', "http://127.0.0.1:9/@cook_anna"),
        ("http://127.0.0.1:9/@cook.anna?lang=en", "http://127.0.0.1:9/@cook.anna?lang=en"),
        ("HTTP://127.0.0.1:9/@cook.anna", "http://127.0.0.1:9/@cook.anna"),
        ('{"url": "http://127.0.0.1:9/@x1/"}', "http://127.0.0.1:9/@x1/"),
    ],
)
def test_profile_entries(raw: str, url: str) -> None:
    (request,) = _entry_requests(_default_spider(ProfilesSpider), raw)
    assert request.url == url


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        ("no spaces allowed", "bad_unique_id"),
        ("@", "bad_unique_id"),
        ("a" * 25, "bad_unique_id"),
        ('{"unique_id": null}', "bad_unique_id"),
        ('{"unique_id": true}', "bad_unique_id"),
        ('{"unique_id": 123}', "bad_unique_id"),
        ('{"unique_id": "cook.anna\\n"}', "bad_unique_id"),
        ('{"unique_id": "cook\\u0000anna"}', "control_characters"),
        ("cook\x00anna", "control_characters"),
        ("cook\x1banna", "control_characters"),
        ('{"user": "x"}', "unknown_keys"),
        ("javascript://alert(1)", "bad_url"),
        ("file:///etc/passwd", "bad_url"),
        ("http://127.0.0.1:9/video/1", "bad_url"),
        ("http://[::1/@x", "bad_url"),
        ("http://127.0.0.1:99999/@x", "bad_url"),
        ("http://127.0.0.1:9/@co ok", "bad_url"),
        ('{"url": "http://127.0.0.1:9/@co\\nok"}', "bad_url"),
        ("http://user:pw@127.0.0.1:9/@x", "credentials"),
        ("http://user:pw@127.0.0.1:10/@x", "credentials"),
        ("HTTP://127.0.0.1:10/@x", "foreign_host"),
        ("http://localhost:9/@x", "foreign_host"),
        ("https://www.tiktok.com/@cook.anna", "foreign_host"),
        (b"\xff\xfe", "not_utf8"),
        ("x" * 20000, "too_large"),
        ("[" * 5000 + "]" * 5000, "too_deep"),
        ('{"url": ' * 1500 + "1" + "}" * 1500, "too_deep"),
    ],
)
def test_bad_profile_entries(raw: str | bytes, reason: str) -> None:
    assert _reason(_default_spider(ProfilesSpider), raw) == reason


@pytest.mark.parametrize(
    ("allowed", "url", "accepted"),
    [
        ("https://www.tiktok.com", "https://WWW.TikTok.com/@cook.anna", True),
        ("https://www.tiktok.com", "https://www.tiktok.com:443/@cook.anna", True),
        ("https://www.tiktok.com", "http://www.tiktok.com/@cook.anna", False),
        ("https://www.tiktok.com", "https://m.tiktok.com/@cook.anna", False),
        ("www.tiktok.com", "http://www.tiktok.com/@cook.anna", True),
        ("www.tiktok.com:8443", "https://www.tiktok.com:8443/@cook.anna", True),
        ("www.tiktok.com:8443", "https://www.tiktok.com/@cook.anna", False),
    ],
)
def test_allowed_start_hosts(allowed: str, url: str, accepted: bool) -> None:
    spider = _spider(ProfilesSpider, ALLOWED_START_HOSTS=allowed)
    if accepted:
        assert len(_entry_requests(spider, url)) == 1
    else:
        assert _reason(spider, url) == "foreign_host"


def test_entry_limits_are_settings() -> None:
    spider = _spider(ProfilesSpider, START_ENTRY_MAX_BYTES=10, START_ENTRY_MAX_DEPTH=1)
    limits = spider.entry_limits
    assert limits == EntryLimits(max_bytes=10, max_depth=1)
    with pytest.raises(InvalidStartEntry, match="too_large"):
        decode_entry("cook.anna.x", limits)
    with pytest.raises(InvalidStartEntry, match="too_deep"):
        decode_entry('{"a": {}}', limits)
    assert decode_entry('{"a": 1}', limits) == {"a": 1}


# --- properties ---------------------------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200) | st.text(max_size=200).map(str.encode))
def test_any_bytes_decode_or_are_refused(raw: bytes) -> None:
    with contextlib.suppress(InvalidStartEntry):
        assert isinstance(decode_entry(raw), str | dict)


def _nested(depth: int, open_: str, close: str, inner: str) -> str:
    return open_ * depth + inner + close * depth


@settings(max_examples=50, deadline=None)
@given(
    depth=st.integers(min_value=9, max_value=20000),
    shape=st.sampled_from([("[", "]"), ('{"a":', "}"), ('[{"a":[', "]}]")]),
    inner=st.sampled_from(["1", '"x"', "", '"[[[["']),
)
def test_deep_json_is_refused_before_parsing(
    depth: int, shape: tuple[str, str], inner: str
) -> None:
    text = _nested(depth, shape[0], shape[1], inner)
    limits = EntryLimits(max_bytes=10**6, max_depth=8)
    with pytest.raises(InvalidStartEntry, match="too_deep"):
        decode_entry(text, limits)


JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()
    | st.sampled_from([1e999, -1e999, 2**70])
    | st.text(max_size=30),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=5), children)
    ),
    max_leaves=8,
)


@settings(max_examples=200, deadline=None)
@given(key=st.sampled_from(["url", "unique_id", "category", "max_pages"]), value=JSON_VALUES)
def test_values_of_any_type_are_refused_or_used(key: str, value: Any) -> None:
    raw = json.dumps({key: value, **({"category": 2} if key == "max_pages" else {})})
    for spider in map(_default_spider, (ExploreSpider, ProfilesSpider)):
        try:
            requests = _entry_requests(spider, raw)
        except InvalidStartEntry:
            continue
        assert all(request.url.startswith("http://127.0.0.1:9/") for request in requests)


SCHEMES = ["http", "HTTP", "Http", "https", "ftp", "file", "javascript", "gopher", "ws"]
USERINFO = ["", "u:p@", "u@", "@", ":@", "127.0.0.1:9@"]
HOSTS = ["127.0.0.1", "127.0.0.2", "localhost", "[::1]", "[::1", "evil.example", "127.0.0.1."]
PORTS = ["", ":9", ":09", ":10", ":99999", ":x", ":"]
JUNK = ["", "\\", " ", "\t", "\n", "\x00", "\x7f"]


@settings(max_examples=400, deadline=None)
@given(
    scheme=st.sampled_from(SCHEMES),
    userinfo=st.sampled_from(USERINFO),
    host=st.sampled_from(HOSTS),
    port=st.sampled_from(PORTS),
    junk=st.sampled_from(JUNK),
    junk_at=st.integers(min_value=0, max_value=40),
)
def test_only_urls_on_the_base_origin_are_accepted(
    scheme: str, userinfo: str, host: str, port: str, junk: str, junk_at: int
) -> None:
    url = f"{scheme}://{userinfo}{host}{port}/@cook.anna"
    url = url[:junk_at] + junk + url[junk_at:]
    on_base = scheme.lower() == "http" and not userinfo and host == "127.0.0.1"
    on_base = on_base and port in (":9", ":09")
    # A plain entry is stripped of surrounding whitespace; a URL in JSON is taken as it is.
    stripped = junk.isspace() and (junk_at == 0 or junk_at >= len(url) - len(junk))
    for raw, clean in ((url, not junk or stripped), (json.dumps({"url": url}), not junk)):
        try:
            (request,) = _entry_requests(_default_spider(ProfilesSpider), raw)
        except InvalidStartEntry:
            assert not (on_base and clean), raw
        else:
            assert on_base, raw
            assert clean, raw
            assert request.url.startswith("http://127.0.0.1:")


def test_invalid_utf8_entry() -> None:
    with pytest.raises(InvalidStartEntry, match="not_utf8"):
        decode_entry(b"\xff\xfe")


@pytest.mark.parametrize(
    ("setting", "value"),
    [
        ("EXPLORE_PAGE_SIZE", 31),
        ("EXPLORE_MAX_PAGES", "many"),
        ("EXPLORE_BASE_URL", "www.tiktok.com"),
        ("START_BATCH_SIZE", 0),
        ("START_ENTRY_MAX_BYTES", 0),
        ("START_ENTRY_MAX_DEPTH", 500),
        ("ALLOWED_START_HOSTS", "ftp://x"),
        ("ALLOWED_START_HOSTS", "host:99999"),
    ],
)
def test_bad_settings_are_named(setting: str, value: Any) -> None:
    with pytest.raises(Exception, match=setting):
        _spider(ExploreSpider, **{setting: value})


@pytest.mark.parametrize(
    "raw",
    ['{"query": 1e999}', '{"query": null}', '{"query": ["shop"]}', '{"query": true}', "  "],
)
def test_bad_maps_entries(raw: str) -> None:
    spider = _spider(MapsSpider, MAPS_BASE_URL="http://127.0.0.1:9")
    with pytest.raises(InvalidStartEntry):
        _entry_requests(spider, raw)


@pytest.mark.parametrize(
    "raw", ['{"query": "a\\u0000b"}', '{"query": "shop\\u001b[2J"}', '{"query\\u0007": "x"}']
)
def test_a_control_character_escaped_in_json_is_set_aside(raw: str) -> None:
    """An escape (``\\u0000``) brings a control character past the check of the entry's text:
    the decoded strings are checked too."""
    spider = _spider(MapsSpider, MAPS_BASE_URL="http://127.0.0.1:9")
    assert _reason(spider, raw) == "control_characters"


def test_maps_requests_stay_on_the_base_origin() -> None:
    spider = _spider(MapsSpider, MAPS_BASE_URL="http://127.0.0.1:9")
    assert spider.start_origins
    [request] = _entry_requests(spider, '{"query": "shop near 00501"}')
    assert request.url.startswith("http://127.0.0.1:9/maps/search/shop+near+00501")
