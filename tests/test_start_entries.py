"""Start entries become the right requests; bad ones are refused with a reason."""

from __future__ import annotations

from typing import Any

import pytest
from scrapy.exceptions import NotConfigured
from scrapy.utils.test import get_crawler

from crawler import settings as project_settings
from crawler.spiders.base import InvalidStartEntry, decode_entry
from crawler.spiders.explore import ExploreSpider
from crawler.spiders.profiles import ProfilesSpider

BASE = {"EXPLORE_BASE_URL": "http://127.0.0.1:9", "PROFILES_BASE_URL": "http://127.0.0.1:9"}


def _spider(cls: Any, **settings: Any) -> Any:
    defaults = {
        name: getattr(project_settings, name) for name in dir(project_settings) if name.isupper()
    }
    crawler = get_crawler(cls, settings_dict={**defaults, **BASE, **settings})
    return cls.from_crawler(crawler)


def _entry_requests(spider: Any, raw: str) -> list[Any]:
    return list(spider.requests_from_entry(decode_entry(raw)))


@pytest.mark.parametrize(
    ("raw", "category", "url_part"),
    [
        ("2", 2, "categoryType=2"),
        ('{"category": 12}', 12, "categoryType=12"),
        ('{"category": "120", "max_pages": 2}', 120, "count=16"),
        (
            "https://www.tiktok.com/api/explore/item_list/?aid=1988&categoryType=5&msToken=x",
            5,
            "msToken=x",
        ),
        (
            '{"url": "http://h/api/recommend/item_list/?from_page=fyp&count=30"}',
            None,
            "from_page=fyp",
        ),
    ],
)
def test_explore_entries(raw: str, category: int | None, url_part: str) -> None:
    (request,) = _entry_requests(_spider(ExploreSpider), raw)
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
        ('{"category": true}', "unknown_category"),
        ('{"category": 2, "max_pages": -1}', "bad_max_pages"),
        ("ftp://www.tiktok.com/api/explore/item_list/", "bad_url"),
        ("https://www.tiktok.com/@someone", "bad_url"),
        ("dance", "bad_url"),
    ],
)
def test_bad_explore_entries(raw: str, reason: str) -> None:
    with pytest.raises(InvalidStartEntry) as raised:
        _entry_requests(_spider(ExploreSpider), raw)
    assert raised.value.reason == reason


@pytest.mark.parametrize(
    ("raw", "url"),
    [
        ("cook.anna", "http://127.0.0.1:9/@cook.anna"),
        ("@cook.anna", "http://127.0.0.1:9/@cook.anna"),
        ('{"unique_id": "cook_anna"}', "http://127.0.0.1:9/@cook_anna"),
        ("https://www.tiktok.com/@cook.anna?lang=en", "https://www.tiktok.com/@cook.anna?lang=en"),
        ('{"url": "http://h/@x1/"}', "http://h/@x1/"),
    ],
)
def test_profile_entries(raw: str, url: str) -> None:
    (request,) = _entry_requests(_spider(ProfilesSpider), raw)
    assert request.url == url


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        ("no spaces allowed", "bad_unique_id"),
        ("@", "bad_unique_id"),
        ("a" * 25, "bad_unique_id"),
        ('{"user": "x"}', "unknown_keys"),
        ("javascript://alert(1)", "bad_url"),
        ("https://www.tiktok.com/video/1", "bad_url"),
    ],
)
def test_bad_profile_entries(raw: str, reason: str) -> None:
    with pytest.raises(InvalidStartEntry) as raised:
        _entry_requests(_spider(ProfilesSpider), raw)
    assert raised.value.reason == reason


def test_invalid_utf8_entry() -> None:
    with pytest.raises(InvalidStartEntry, match="not_utf8"):
        decode_entry(b"\xff\xfe")


@pytest.mark.parametrize(
    ("setting", "value", "message"),
    [
        ("EXPLORE_PAGE_SIZE", 31, "EXPLORE_PAGE_SIZE must be between 1 and 30"),
        ("EXPLORE_MAX_PAGES", "many", "EXPLORE_MAX_PAGES must be a whole number"),
        ("EXPLORE_BASE_URL", "www.tiktok.com", "EXPLORE_BASE_URL must be an http"),
        ("START_BATCH_SIZE", 0, "START_BATCH_SIZE must be at least 1"),
    ],
)
def test_bad_settings_are_named(setting: str, value: Any, message: str) -> None:
    with pytest.raises(NotConfigured, match=message):
        _spider(ExploreSpider, **{setting: value})
