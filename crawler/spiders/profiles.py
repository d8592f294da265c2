"""Profile pages: one document per user in ``profiles``, also for missing, private, banned users.

Start entries (``-a users=a,b`` or ``redis-cli lpush profiles:start_urls ...``):
    ``some.user`` or ``@some.user``             a uniqueId
    ``https://host/@some.user``                 a profile URL, fetched as given
    ``{"unique_id": "some.user"}``              JSON (what the explore spider hands over)
    ``{"url": "https://host/@some.user"}``
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlsplit

from scrapy import Request

from crawler.config import validate_base_url
from crawler.extractors.profiles import parse_profile_page, profile_fields
from crawler.items import ProfileItem
from crawler.spiders.base import InvalidStartEntry, RedisFedSpider, check_keys
from crawler.spiders.responses import BlockedPage, body_text

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from scrapy.http import Response

# TikTok usernames: letters, digits, underscores and periods, at most 24 characters.
UNIQUE_ID = re.compile(r"^[A-Za-z0-9_.]{1,24}$")
_JSON_KEYS = {"unique_id", "url"}


class ProfilesSpider(RedisFedSpider):
    """Crawl profile pages into ``profiles``.

    Settings: PROFILES_BASE_URL (crawler/settings.py). Bans are caught by ``ban_rule``.
    """

    name = "profiles"
    entry_kind = "profiles start entry"
    base_url: str

    def __init__(self, users: str = "", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.user_args = [part.strip() for part in users.split(",") if part.strip()]

    @classmethod
    def from_crawler(cls, crawler: Crawler, *args: Any, **kwargs: Any) -> ProfilesSpider:
        spider = super().from_crawler(crawler, *args, **kwargs)
        assert isinstance(spider, ProfilesSpider)
        spider.base_url = validate_base_url(crawler.settings, "PROFILES_BASE_URL")
        return spider

    def argument_entries(self) -> Iterable[str]:
        return self.user_args

    def requests_from_entry(self, entry: str | dict[str, Any]) -> Iterable[Request]:
        if isinstance(entry, dict):
            check_keys(entry, _JSON_KEYS, set())
            if "url" in entry:
                return [self._request_from_url(str(entry["url"]))]
            if "unique_id" not in entry:
                raise InvalidStartEntry("missing_keys", "give 'unique_id' or 'url'")
            entry = str(entry["unique_id"])
        elif "://" in entry:
            return [self._request_from_url(entry)]
        unique_id = _unique_id(entry.removeprefix("@"))
        return [self._profile_request(f"{self.base_url}/@{unique_id}", unique_id)]

    def _request_from_url(self, url: str) -> Request:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise InvalidStartEntry("bad_url", "expected an http(s) profile URL")
        path = unquote(parts.path).rstrip("/")
        if not path.startswith("/@"):
            raise InvalidStartEntry("bad_url", "a profile URL's path is /@<uniqueId>")
        return self._profile_request(url, _unique_id(path[2:]))

    def _profile_request(self, url: str, unique_id: str) -> Request:
        return Request(url, callback=self.parse_profile, cb_kwargs={"unique_id": unique_id})

    def ban_rule(self, response: Response) -> str | None:
        """The ban middleware's check for this target: a captcha, a challenge or a page
        without its data script is a ban, whatever its status code."""
        page = parse_profile_page(body_text(response))
        return f"profile_{page.status}" if page.is_block else None

    def parse_profile(self, response: Response, unique_id: str) -> Iterator[Any]:
        page = parse_profile_page(body_text(response), unique_id)
        if page.is_block:
            raise BlockedPage(f"profile_{page.status}")
        self.count(f"profiles/status/{page.status}")
        yield ProfileItem(**profile_fields(page, unique_id))


def _unique_id(value: str) -> str:
    if not UNIQUE_ID.match(value):
        raise InvalidStartEntry(
            "bad_unique_id", f"{value!r}: letters, digits, '_' and '.', at most 24"
        )
    return value
