"""Profile pages: one document per user in ``profiles``, also for missing, private, banned users.

Start entries (``-a users=a,b`` or ``redis-cli lpush profiles:start_urls ...``):
    ``some.user`` or ``@some.user``             a uniqueId
    ``https://host/@some.user``                 a profile URL on PROFILES_BASE_URL, as given
    ``{"unique_id": "some.user"}``              JSON (what the explore spider hands over)
    ``{"url": "https://host/@some.user"}``
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

from scrapy import Request

from crawler.extractors.jsondata import FieldReader, MalformedData
from crawler.extractors.profiles import (
    UNIQUE_ID,
    UNKNOWN_STATUS,
    ProfilePage,
    parse_profile_page,
    profile_fields,
)
from crawler.items import ProfileItem
from crawler.spiders.base import InvalidStartEntry, RedisFedSpider, check_keys
from crawler.spiders.responses import BlockedPage, body_text, retry_malformed

if TYPE_CHECKING:
    from scrapy.http import Response

_JSON_KEYS = {"unique_id", "url"}


class ProfilesSpider(RedisFedSpider):
    """Crawl profile pages into ``profiles``; profile URLs in start entries must be on
    PROFILES_BASE_URL (or ALLOWED_START_HOSTS). Bans are caught by ``ban_rule``."""

    name = "profiles"
    # Profiles change: revisited after a day, then as often as they change (1 hour..30 days).
    custom_settings = {  # noqa: RUF012 (Scrapy's Spider declares it as an instance field)
        "RECRAWL_ENABLED": True,
        "RECRAWL_INITIAL_INTERVAL": 86_400.0,
        "RECRAWL_MIN_INTERVAL": 3_600.0,
        "RECRAWL_MAX_INTERVAL": 30 * 86_400.0,
    }
    entry_kind = "profiles start entry"
    base_url_setting = "PROFILES_BASE_URL"
    entry_host_from = "base_url"

    def __init__(self, users: str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.user_args = self.entry_argument("users", users)

    def argument_entries(self) -> Iterable[str]:
        return self.user_args

    def requests_from_entry(self, entry: str | dict[str, Any]) -> Iterable[Request]:
        if isinstance(entry, dict):
            check_keys(entry, _JSON_KEYS, set())
            if "url" in entry:
                return [self._request_from_url(entry["url"])]
            if "unique_id" not in entry:
                raise InvalidStartEntry("missing_keys", "give 'unique_id' or 'url'")
            return [self._user_request(entry["unique_id"])]
        if "://" in entry:
            return [self._request_from_url(entry)]
        return [self._user_request(entry)]

    def _user_request(self, value: Any) -> Request:
        name = value.removeprefix("@") if isinstance(value, str) else value
        unique_id = _unique_id(name)
        return self._profile_request(f"{self.base_url}/@{unique_id}", unique_id)

    def _request_from_url(self, value: Any) -> Request:
        parts = self.start_url(value)
        path = unquote(parts.path).rstrip("/")
        if not path.startswith("/@"):
            raise InvalidStartEntry("bad_url", "a profile URL's path is /@<uniqueId>")
        return self._profile_request(parts.geturl(), _unique_id(path[2:]))

    def _profile_request(self, url: str, unique_id: str) -> Request:
        return Request(url, callback=self.parse_profile, cb_kwargs={"unique_id": unique_id})

    def ban_rule(self, response: Response) -> str | None:
        """A captcha, a challenge or a page without its data script is a ban, whatever its status; a
        data script that is not valid JSON is not (the callback retries it), nor is a status code
        the spider does not know (one user's answer: the callback retries it, then gives it up)."""
        try:
            page = parse_profile_page(body_text(response))
        except MalformedData:
            return None
        return f"profile_{page.status}" if page.is_block else None

    def parse_profile(self, response: Response, unique_id: str) -> Iterator[Any]:
        try:
            page = parse_profile_page(body_text(response), unique_id)
        except MalformedData as exc:
            self.count("profiles/malformed")
            retry = retry_malformed(self.crawler, response, "profile_malformed", exc)
            if retry is not None:
                yield retry
            return
        if page.is_block:
            raise BlockedPage(f"profile_{page.status}")
        if page.status == UNKNOWN_STATUS:
            retry = self._unknown_status(response, page)
            if retry is not None:
                yield retry
            return
        self.count(f"profiles/status/{page.status}")
        reader = FieldReader()
        fields = profile_fields(page, unique_id, reader)
        self.count_bad_fields(reader.bad)
        yield ProfileItem(**fields)

    def _unknown_status(self, response: Response, page: ProfilePage) -> Request | None:
        """A status code the spider does not know is that user's answer, not a block of the
        site: tried again after the retry backoff (it may pass), then a dead letter
        ``retries_exhausted:profile_status_<code>``; a stored profile is left as it was."""
        self.count(f"profiles/unknown_status/{page.code_name}")
        error = ValueError(f"statusCode {page.code_name} ({page.layout} layout)")
        reason = f"profile_status_{page.code_name}"
        return retry_malformed(self.crawler, response, reason, error, "Unknown profile status")


def _unique_id(value: Any) -> str:
    if not isinstance(value, str) or not UNIQUE_ID.fullmatch(value):
        raise InvalidStartEntry(
            "bad_unique_id", f"{str(value)[:80]!r}: letters, digits, '_' and '.', at most 24"
        )
    return value
