"""Untrusted JSON: parsed within bounds, its values read with their types checked.

A body or start entry comes from outside. Its nesting is measured before ``json.loads`` runs,
so the parser never recurses deeply; a value of the wrong type, a float where a count belongs,
``1e999`` or a number beyond 64 bits costs that value only (read as None, its name noted).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any, Final, TypeVar

# Arrays and objects nested deeper than this in a response are refused before parsing.
MAX_DEPTH = 64
# Integer literals longer than this are read as floats (and so refused as counts) instead of
# making ``json.loads`` fail on Python's limit on digits.
_MAX_INT_DIGITS = 40
T = TypeVar("T")
_INT64 = (-(2**63), 2**63 - 1)
_INT_TEXT = re.compile(r"-?[0-9]{1,19}")
# A whole JSON string (possessive: linear time), an opening or closing bracket, or a lone quote
# that starts a string never closed, after which the text cannot be valid JSON.
_TOKENS = re.compile(r'"(?:[^"\\]++|\\.)*+"|[\[\]{}]|"', re.DOTALL)
_OPENING = frozenset("[{")
_CLOSING = frozenset("]}")


class MalformedData(ValueError):
    """Not the JSON it should be: fetching it again may help; it says nothing about a ban."""


class TooDeep(MalformedData):
    """Arrays and objects are nested deeper than allowed."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"JSON nested deeper than {limit} levels")
        self.limit = limit


def too_deep(text: str, limit: int) -> bool:
    """True when arrays and objects nest deeper than ``limit`` in ``text`` (linear time). Brackets
    in strings do not count; counting stops at a string never closed, as a parser would."""
    if text.count("[") + text.count("{") <= limit:
        return False
    depth = 0
    for match in _TOKENS.finditer(text):
        token = match.group()
        if token in _OPENING:
            depth += 1
            if depth > limit:
                return True
        elif token in _CLOSING:
            depth = max(0, depth - 1)
        elif token == '"':
            break
    return False


def loads(text: str, max_depth: int = MAX_DEPTH) -> Any:
    """``json.loads`` of untrusted text: TooDeep or MalformedData instead of parsing too much."""
    if too_deep(text, max_depth):
        raise TooDeep(max_depth)
    try:
        return json.loads(text, parse_int=_parse_int)
    except (ValueError, RecursionError) as exc:
        raise MalformedData(f"not JSON: {exc}") from None


def _parse_int(literal: str) -> int | float:
    return int(literal) if len(literal) <= _MAX_INT_DIGITS else float(literal)


class _Null:
    """A JSON ``null`` where a value belongs, as :func:`field` reads it."""

    def __repr__(self) -> str:
        return "NULL"


NULL: Final = _Null()


def field(record: Mapping[str, Any], key: str) -> Any:
    """``record[key]``; :data:`NULL` for a JSON ``null``, None when the key is absent. A
    :class:`FieldReader` counts NULL as a bad value (read as None) and gives an absent one its
    default."""
    value = record.get(key)
    return NULL if value is None and key in record else value


def as_int(value: Any) -> int | None:
    """A 64-bit integer from an int, an integral float or a string of digits; else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, float):
        value = int(value) if value.is_integer() else None
    elif isinstance(value, str):
        value = int(value) if _INT_TEXT.fullmatch(value) else None
    if not isinstance(value, int):
        return None
    return value if _INT64[0] <= value <= _INT64[1] else None


def as_text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def as_id(value: Any) -> str | None:
    """A printable string without surrounding spaces, or a whole number as text; else None."""
    if isinstance(value, str):
        return value if value.isprintable() and value == value.strip() else None
    number = as_int(value) if isinstance(value, int) else None
    return None if number is None else str(number)


def as_flag(value: Any) -> bool | None:
    return value if isinstance(value, bool) else None


def exact_counts(stats: Mapping[str, Any], stats_v2: Mapping[str, Any]) -> Mapping[str, Any]:
    """``stats`` with each count ``stats_v2`` holds as a whole number (a string of digits) taken
    from there: the web and the feed round ``stats`` (22600 for 22609, 1800000 for 1776621; a
    count past 2**31 even wraps), ``statsV2`` is exact. A ``statsV2`` value that is no number is
    used only where ``stats`` lacks the count (then it is a bad field)."""
    if not stats_v2:
        return stats
    counts = dict(stats)
    for key, value in stats_v2.items():
        if as_int(value) is not None or key not in counts:
            counts[key] = value
    return counts


class FieldReader:
    """Reads a record's fields: absent (None) gives ``default``, unusable gives None, noted in
    ``bad``. A value read with :func:`field` tells a JSON ``null`` (unusable) from absent."""

    def __init__(self) -> None:
        self.bad: list[str] = []

    def integer(self, name: str, value: Any, default: int | None = None) -> int | None:
        return self._checked(name, value, as_int(value), default)

    def text(self, name: str, value: Any, default: str | None = None) -> str | None:
        return self._checked(name, value, as_text(value), default)

    def identifier(self, name: str, value: Any, default: str | None = None) -> str | None:
        return self._checked(name, value, as_id(value), default)

    def flag(self, name: str, value: Any, default: bool | None = None) -> bool | None:
        return self._checked(name, value, as_flag(value), default)

    def _checked(self, name: str, value: Any, result: T | None, default: T | None) -> T | None:
        if value is None:
            return default
        if result is None:
            self.bad.append(name)
        return result
