"""Rules for setting values: what a setting allows, in words, and a parser refusing the rest.

A :class:`Rule` reads a raw value (as Python code or ``-s NAME=VALUE`` gives it) into what the
components use, or raises :class:`SettingsError` with ``NAME = value: must be <allowed>``. The
parsers follow Scrapy's ``getint``/``getbool``/``getlist``/``getdict``, so a value the check
accepts reads the same way in a component.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from redis import ConnectionPool
from redis.exceptions import RedisError
from scrapy import Request
from scrapy.downloadermiddlewares.httpproxy import HttpProxyMiddleware
from scrapy.settings import BaseSettings
from scrapy.utils.misc import load_object

from crawler.uris import mask_uri

# The exit status of `scrapy crawl` when a setting is invalid: running again cannot help.
EXIT_BAD_SETTING = 2

# What a parser raises for a value it cannot take (LookupError: unknown encoding or key name;
# ImportError, NameError, AttributeError: an import path that does not load).
BAD_VALUE = (ValueError, TypeError, LookupError, ImportError, NameError, AttributeError)


class SettingsError(Exception):
    """Settings a crawl cannot run with; each problem names the setting, its value and rule."""

    def __init__(self, *problems: str) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems


class Twice(ValueError):
    """Two keys of a mapping that name one thing (``bücher.de`` and ``XN--BCHER-KVA.DE``): the
    message names both spellings, said after the rule."""


def problem(name: str, value: Any, allowed: str, show: Callable[[Any], str] | None = None) -> str:
    """``NAME = value: must be <allowed>``."""
    return f"{name} = {(show or shown)(value)}: must be {allowed}"


def shown(value: Any) -> str:
    """A value as a person typed it: plain text bare, anything ambiguous as its repr."""
    if isinstance(value, BaseSettings):
        value = value.copy_to_dict()
    if isinstance(value, str) and value and value.strip() == value and value.isprintable():
        text = value
    else:
        text = repr(value)
    return text if len(text) <= 200 else text[:197] + "..."


def masked(value: Any) -> str:
    """A URL, or a list of URLs, with passwords and secret parameters masked."""
    if isinstance(value, str):
        return shown(mask_uri(value))
    if isinstance(value, list | tuple):
        return shown([mask_uri(entry) if isinstance(entry, str) else entry for entry in value])
    return shown(value)


def hidden(value: Any) -> str:
    """For settings that may hold secrets anywhere (client arguments, crawl settings)."""
    return f"({type(value).__name__}, not shown)"


@dataclass(frozen=True)
class Rule:
    """What a setting allows (``allowed`` completes "must be ...") and how it is read."""

    allowed: str
    parse: Callable[[Any], Any]
    optional: bool = False  # None means "not set" (the reader applies its default)
    show: Callable[[Any], str] = shown  # how the value appears in the error

    def read(self, name: str, value: Any) -> Any:
        """The parsed value, or SettingsError naming the setting, the value and the rule."""
        if value is None and self.optional:
            return None
        try:
            return self.parse(value)
        except BAD_VALUE as exc:
            said = f" ({exc})" if isinstance(exc, Twice) else ""
            raise SettingsError(problem(name, value, self.allowed, self.show) + said) from None


# --- parsers: each returns the value as components use it, or raises ---------------------------


def as_int(value: Any) -> int:
    if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
        raise TypeError(value)
    return int(value)


def as_float(value: Any) -> float:
    if isinstance(value, bool):
        raise TypeError(value)
    number = float(value)
    if not math.isfinite(number):
        raise ValueError(value)
    return number


def as_bool(value: Any) -> bool:
    if value is None:
        raise TypeError(value)
    return BaseSettings({"value": value}).getbool("value")


def as_list(value: Any) -> list[Any]:
    """A list, or a comma-separated string's items (``"a, b"``: white space around each is
    no part of it, which Scrapy's ``getlist`` keeps)."""
    if not isinstance(value, str | list | tuple):
        raise TypeError(value)
    listed = BaseSettings({"value": value}).getlist("value")
    return [item.strip() if isinstance(item, str) else item for item in listed]


def as_dict(value: Any) -> dict[Any, Any]:
    if not isinstance(value, str | Mapping):
        raise TypeError(value)
    parsed = BaseSettings({"value": value}).getdict("value")
    if isinstance(value, str) and not isinstance(parsed, dict):
        raise TypeError(value)
    return parsed


def as_text(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError(value)
    return value


def _bounds(low: float | None, high: float | None, above: bool, below: bool) -> str:
    lower = f"{'>' if above else '>='} {low:g}" if low is not None else ""
    upper = f"{'<' if below else '<='} {high:g}" if high is not None else ""
    if lower and upper and not (above or below):
        return f"from {low:g} to {high:g}"
    return " and ".join(part for part in (lower, upper) if part)


def within(
    parse: Callable[[Any], float], low: float | None, high: float | None, above: bool, below: bool
) -> Callable[[Any], Any]:
    def parse_within(value: Any) -> float:
        number = parse(value)
        if low is not None and (number <= low if above else number < low):
            raise ValueError(value)
        if high is not None and (number >= high if below else number > high):
            raise ValueError(value)
        return number

    return parse_within


# --- rule makers --------------------------------------------------------------------------------


def integer(low: int | None = None, high: int | None = None, *, optional: bool = False) -> Rule:
    bounds = _bounds(low, high, False, False)
    return Rule(f"an integer {bounds}".strip(), within(as_int, low, high, False, False), optional)


def number(
    low: float | None = None,
    high: float | None = None,
    *,
    above: bool = False,
    below: bool = False,
    optional: bool = False,
) -> Rule:
    """A finite number (said so when no upper bound implies it: ``inf`` is refused);
    ``above``/``below`` exclude the bound itself."""
    bounds = _bounds(low, high, above, below)
    parse = within(as_float, low, high, above, below)
    finite = "" if high is not None else "finite "
    return Rule(f"a {finite}number {bounds}".strip(), parse, optional)


def flag(*, optional: bool = False) -> Rule:
    return Rule("True or False (or 1/0, true/false)", as_bool, optional)


def text(*, empty: bool = True, optional: bool = False) -> Rule:
    def parse(value: Any) -> str:
        if not as_text(value).strip() and not empty:
            raise ValueError(value)
        return str(value)

    return Rule("a string" if empty else "a non-empty string", parse, optional)


def choice(*options: str, optional: bool = False) -> Rule:
    def parse(value: Any) -> str:
        if value not in options:
            raise ValueError(value)
        return str(value)

    return Rule(f"one of {', '.join(options)}", parse, optional)


def either(options: Sequence[str]) -> str:
    """``a``, ``a or b``, ``a, b or c``."""
    return " or ".join(filter(None, (", ".join(options[:-1]), options[-1])))


def items(item: Rule, what: str, *, optional: bool = False) -> Rule:
    """A list (or comma-separated string) whose items each pass ``item``."""

    def parse(value: Any) -> list[Any]:
        return [item.parse(entry) for entry in as_list(value)]

    return Rule(f"a list (or comma-separated string) of {what}", parse, optional, item.show)


def mapping(
    what: str = "",
    key: Callable[[Any], Any] = str,
    value: Callable[[Any], Any] = lambda v: v,
    *,
    optional: bool = False,
    show: Callable[[Any], str] = shown,
) -> Rule:
    """A dict (or JSON object string) whose keys and values pass ``key`` and ``value``; two
    keys that ``key`` reads as one are refused (Twice), not one of them silently dropped."""

    def parse(raw: Any) -> dict[Any, Any]:
        read: dict[Any, Any] = {}
        given: dict[Any, Any] = {}
        for raw_key, raw_value in as_dict(raw).items():
            name = key(raw_key)
            if name in given:
                raise Twice(f"{given[name]!r} and {raw_key!r} are both {name!r}")
            given[name], read[name] = raw_key, value(raw_value)
        return read

    return Rule(f"a dict (or JSON object){' of ' + what if what else ''}", parse, optional, show)


def url(*schemes: str, optional: bool = False) -> Rule:
    def parse(value: Any) -> str:
        parts = urlsplit(as_text(value))
        if parts.scheme not in schemes or not (parts.netloc or parts.scheme == "unix"):
            raise ValueError(value)
        if "," not in parts.netloc:  # one host (MongoDB URIs may list several)
            parts.port  # noqa: B018 (raises ValueError for a port that is not a number)
        return str(value)

    return Rule(f"a {either([s + '://' for s in schemes])} URL", parse, optional, masked)


def proxy_url() -> Rule:
    """An http(s):// proxy URL Scrapy's HttpProxyMiddleware sends a request through (with its
    default credentials' encoding): a user only with a password (``user:pass@``), each of
    them Latin-1 once unquoted; another fails every download through it."""
    plain = url("http", "https")

    def parse(value: Any) -> str:
        text: str = plain.parse(value)
        try:
            HttpProxyMiddleware().process_request(Request("http://a.test/", meta={"proxy": text}))
        except (TypeError, ValueError) as exc:
            raise ValueError(value) from exc
        return text

    return Rule(f"{plain.allowed} (a user with a password, user:pass@)", parse, show=masked)


def redis_url() -> Rule:
    """A URL redis-py builds a connection from (no command sent): its path a database number
    (redis-py would take another path as database 0), its query options that redis-py knows,
    each with a value it reads (another would fail the crawl at its first command)."""
    plain = url("redis", "rediss", "unix")

    def parse(value: Any) -> str:
        text: str = plain.parse(value)
        database = urlsplit(text).path.strip("/")
        if not text.startswith("unix:") and database and not database.isdigit():
            raise ValueError(value)
        try:
            ConnectionPool.from_url(text).make_connection()
        except RedisError as exc:
            raise ValueError(value) from exc
        return text

    allowed = f"{plain.allowed} (a database number as its path, redis-py's options as its query)"
    return Rule(allowed, parse, show=masked)


def base_url() -> Rule:
    def parse(value: Any) -> str:
        parts = urlsplit(as_text(value))
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(value)
        return str(value).rstrip("/")

    return Rule("an http(s) URL such as https://host", parse)


def key_template(*names: str) -> Rule:
    """A Redis key name with ``%(name)s`` placeholders, only those given."""

    def parse(value: Any) -> str:
        if not (as_text(value) % dict.fromkeys(names, "x")).strip():
            raise ValueError(value)
        return str(value)

    placeholders = " or ".join(f"%({name})s" for name in names)
    return Rule(f"a Redis key name, which may use {placeholders}", parse)


def import_path() -> Rule:
    return Rule("an importable object path (package.module.name)", load_object)
