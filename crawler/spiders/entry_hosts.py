"""The host a start entry's request goes to, read from the entry as Redis holds it without
building the spider, for the fleet's sizing (``scrapy fleet plan``, ``status``, the autoscaler,
a worker's ``/metrics``: crawler/observability/sizing.py): a URL names its host, as
does a JSON object's ``url``; an entry that is no URL goes by the spider's ``entry_host_from``:

- ``"base_url"``: a user name, a category, a query the spider turns into a URL of its base URL
  (profiles, explore, maps): the base URL's host;
- ``"entry"``: a bare host or a domain (links, domains): that host;
- ``""`` (a spider of one's own, by default): not known without the spider, "" (the plan says
  how many of its sample it could not tell).

An entry the spider would set aside (not UTF-8, too large, bad JSON) names no host either.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from scrapy.spiderloader import get_spider_loader

from crawler.config import validate_base_url
from crawler.config.rules import SettingsError
from crawler.spiders.base import InvalidStartEntry, decode_entry

if TYPE_CHECKING:
    from scrapy.settings import BaseSettings


def spider_entry_hosts(settings: BaseSettings, spider: str) -> Callable[[str], str] | None:
    """:func:`entry_host_reader` of the project's spider named ``spider``; None for a spider
    the project does not have (a URL's host is all that can be told)."""
    try:
        spidercls = get_spider_loader(settings).load(spider)
    except KeyError:
        return None
    return entry_host_reader(spidercls, settings)


def entry_host_reader(spidercls: Any, settings: BaseSettings) -> Callable[[str], str]:
    """A function from a start entry of ``spidercls`` (its text in Redis) to the host of its
    request, "" when it cannot be told; ``settings`` are the spider's (its base URL)."""
    rule = str(getattr(spidercls, "entry_host_from", ""))
    fallback = _base_host(spidercls, settings) if rule == "base_url" else ""

    def host_of(raw: str) -> str:
        try:
            entry = decode_entry(raw)
        except InvalidStartEntry:
            return ""
        return entry_host(entry, rule, fallback)

    return host_of


def entry_host(entry: str | dict[str, Any], rule: str, base_host: str = "") -> str:
    """The host of a decoded start ``entry`` by ``rule`` (see the module's docstring)."""
    if isinstance(entry, dict):
        url = entry.get("url")
        if isinstance(url, str):
            return _url_host(url)
        return base_host if rule == "base_url" else ""
    if "://" in entry:
        return _url_host(entry)
    if rule == "entry":
        return _url_host(f"http://{entry.strip()}")
    return base_host if rule == "base_url" else ""


def _base_host(spidercls: Any, settings: BaseSettings) -> str:
    name = str(getattr(spidercls, "base_url_setting", ""))
    if not name:
        return ""
    try:
        return _url_host(validate_base_url(settings, name))
    except SettingsError:
        return ""  # the workers refuse to start: no host to plan for


def _url_host(url: str) -> str:
    try:
        return (urlsplit(url).hostname or "").lower()
    except ValueError:
        return ""


def url_entry_host(raw: str) -> str:
    """The host of a start entry that is a URL, or a JSON object with a ``url``; "" for any
    other (the reader of a spider the project does not know)."""
    try:
        entry = decode_entry(raw)
    except InvalidStartEntry:
        return ""
    return entry_host(entry, "")
