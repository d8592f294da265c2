"""What a start entry may put in its request's ``meta``.

Anyone who can push to the start list writes it, so keys the frontier, Scrapy or the project's
middlewares read as instructions are refused unless listed in :data:`TYPED` (then their value
must have the type the reader expects); keys starting with ``_`` or ``playwright`` are refused
too. Any other key is the spider's own data and passes as it is.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from crawler.spiders.feed import InvalidStartEntry


def _flag(value: Any) -> bool:
    return isinstance(value, bool)


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _seconds(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and 0 < value <= 3600


def _statuses(value: Any) -> bool:
    return isinstance(value, list) and all(_count(code) and code < 1000 for code in value)


def _name(value: Any) -> bool:
    return isinstance(value, str) and len(value) <= 200


# Instructions an entry may give, with the type each reader expects.
TYPED: dict[str, Callable[[Any], bool]] = {
    "dont_redirect": _flag,
    "dont_retry": _flag,
    "dont_merge_cookies": _flag,
    "dont_cache": _flag,
    "handle_httpstatus_all": _flag,
    "handle_httpstatus_list": _statuses,
    "max_retry_times": _count,
    "download_timeout": _seconds,
    "cookiejar": lambda value: _name(value) or _count(value),
    "referrer_policy": _name,
}

# Instructions only the crawl itself gives: the frontier's records, retry and ban counts,
# robots.txt, ban checks, politeness, proxies, identities and the middlewares' own state.
REFUSED = frozenset(
    {
        *("frontier_lease", "frontier_start", "frontier_due", "retry_times", "ban_times"),
        "frontier_job",
        *("dont_obey_robotstxt", "dont_ban_check", "proxy", "dont_proxy", "bindaddress"),
        *("identity", "crawl_delay", "download_slot", "download_latency", "download_maxsize"),
        *("download_warnsize", "download_fail_on_dataloss", "fleet_slot", "fleet_slot_dont_filter"),
        *("domain_failure", "domain_probe", "domain_bytes", "domain_sent_at", "links"),
        *("links_robots", "redirect_urls", "redirect_reasons", "redirect_times", "redirect_ttl"),
        *("depth", "allow_offsite", "is_start_request", "ftp_user", "ftp_password"),
    }
)
# Prefixes refused whole: private state, and scrapy-playwright's (a browser fetch, its pages).
REFUSED_PREFIXES = ("_", "playwright")


def check_meta(meta: Any) -> dict[str, Any]:
    """``meta`` of a start entry, or InvalidStartEntry("bad_meta") naming the refused key."""
    if not isinstance(meta, dict):
        raise InvalidStartEntry("bad_meta", "meta is not an object")
    for key, value in meta.items():
        check = TYPED.get(key)
        if check is not None and not check(value):
            raise InvalidStartEntry("bad_meta", f"meta {key!r} has the wrong type or range")
        if check is None and (key in REFUSED or key.startswith(REFUSED_PREFIXES)):
            raise InvalidStartEntry("bad_meta", f"meta {key[:50]!r} is the crawl's own key")
    return meta
