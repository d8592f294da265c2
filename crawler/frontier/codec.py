"""Request <-> JSON: the one codec of requests stored in Redis (frontier, dead letters, revisits).

Pickle in a shared Redis turns write access to Redis into code execution on every worker, so
requests are stored as JSON. Bytes (bodies, header values, bytes inside meta) round-trip through
a tagged base64 object, and so do scrapy-playwright ``PageMethod``s named by a string (a method
given as a Python callable cannot be stored). As in any JSON, dict keys become strings. Any
other value JSON cannot hold is rejected when the request is scheduled, with an error naming
where it sits (``meta['page']['when']``).

Records are stored in format 2: ``Request.to_dict()`` with its field names shortened (``url`` is
``u``, see ``SHORT_NAMES``) and, as written by :func:`request_record`, without the fields
that have their default. The URL's key tells the format: a record with ``url`` is of format 1
(every field, or the defaults left out) and loads as it is, so requests queued by older
workers load the same.

A request of a crawl job (meta ``frontier_job``) is stored with its job's number in front of
its JSON object, ``12{"u":...}``: as many bytes as the number has digits, read by the scripts
from the record's first bytes. Its JSON form (a dead letter's ``request``) holds the number as
its first field, ``{"j":12,"u":...}``; records of either form load.
"""

from __future__ import annotations

import base64
import json
import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from scrapy import Request
from scrapy_playwright.page import PageMethod

from crawler.meta import JOB_META

if TYPE_CHECKING:
    from scrapy import Spider

# Format 2 names of the fields of Request.to_dict(); others (a Request subclass's own) keep
# their name.
SHORT_NAMES = {
    "url": "u",
    "callback": "c",
    "errback": "e",
    "method": "v",
    "headers": "h",
    "body": "b",
    "cookies": "k",
    "meta": "m",
    "encoding": "n",
    "priority": "p",
    "dont_filter": "d",
    "flags": "f",
    "cb_kwargs": "a",
}
LONG_NAMES = {short: name for name, short in SHORT_NAMES.items()}
# The record's field holding its job's number (meta JOB_META), always first.
JOB_FIELD = "j"

_BYTES_TAG = "__bytes__"
_PAGE_METHOD_TAG = "__page_method__"


class RequestNotSerializable(ValueError):
    """A request holds a value that cannot be stored in Redis as JSON."""


def dumps(obj: Mapping[str, Any]) -> str:
    """Encode a ``Request.to_dict()`` mapping (either field names) as a JSON string, its job's
    number (field ``"j"``, see :func:`shorten`) in front of it. A value JSON cannot hold as it
    is (a key that is not a string, NaN, an object) raises :class:`RequestNotSerializable`
    naming it, rather than coming back changed."""
    fields = dict(obj)
    if _job_number(job := fields.get(JOB_FIELD)):
        del fields[JOB_FIELD]
        return f"{job}{dumps(fields)}"
    for name in ("h", "headers"):
        if headers := fields.get(name):
            # Header names are bytes; HTTP header names are ASCII/latin-1 by definition.
            fields[name] = {_header_name(key): value for key, value in headers.items()}
    encoded = {name: _encode(value, LONG_NAMES.get(name, name)) for name, value in fields.items()}
    return json.dumps(encoded, separators=(",", ":"), allow_nan=False)


def loads(data: str | bytes) -> dict[str, Any]:
    """Decode what :func:`dumps` produced back into a ``request_from_dict`` mapping (a
    format 2 record with its field names made whole again)."""
    job, data = split_job(data)
    decoded = json.loads(data, object_hook=decode_tags)
    if not isinstance(decoded, dict):
        raise ValueError(f"stored request is not a JSON object: {decoded!r:.80}")
    if job is not None:
        decoded = {JOB_FIELD: job, **decoded}
    return expand(decoded)


def split_job(data: str | bytes) -> tuple[int | None, str]:
    """A stored record's job number (None without one) and its JSON object."""
    text = data.decode("utf-8") if isinstance(data, bytes) else data
    start = text.find("{")
    head = text[:start]
    if start <= 0 or not (head.isascii() and head.isdigit()):
        return None, text
    return int(head), text[start:]


def shorten(record: Mapping[str, Any]) -> dict[str, Any]:
    """A ``Request.to_dict()`` mapping with the format 2 field names; a job's number (meta
    JOB_META) is the first field, ``"j"``, which :func:`dumps` writes in front of the record."""
    short = {SHORT_NAMES.get(name, name): value for name, value in record.items()}
    meta = short.get("m")
    if not isinstance(meta, dict) or not _job_number(meta.get(JOB_META)):
        return short
    meta = dict(meta)
    job = meta.pop(JOB_META)
    rest = {name: value for name, value in short.items() if name != "m"}
    return {JOB_FIELD: job, **rest, **({"m": meta} if meta else {})}


def expand(record: dict[str, Any]) -> dict[str, Any]:
    """The ``Request.to_dict()`` mapping of a stored record of either format."""
    if "url" in record or "u" not in record:
        return record
    expanded = {LONG_NAMES.get(name, name): value for name, value in record.items()}
    if JOB_FIELD in expanded:
        expanded["meta"] = {**(expanded.get("meta") or {}), JOB_META: expanded.pop(JOB_FIELD)}
    return expanded


def _job_number(value: Any) -> bool:
    return type(value) is int and value > 0


def _encode(value: Any, path: str) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        raise RequestNotSerializable(f"{path}: {value} cannot be stored in Redis as JSON")
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, bytes):
        return {_BYTES_TAG: base64.b64encode(value).decode("ascii")}
    if isinstance(value, list | tuple):
        return [_encode(item, f"{path}[{index}]") for index, item in enumerate(value)]
    if isinstance(value, PageMethod):
        return _encode_page_method(value, path)
    if isinstance(value, Mapping):
        if type(value) is not dict and type(value).__module__ != "collections":
            raise RequestNotSerializable(
                f"{path}: a {type(value).__name__} would come back from Redis as a plain dict "
                "(its class, and where it is stored, lost); hand on dict(...) instead"
            )
        if len(value) == 1 and (tag := next(iter(value))) in (_BYTES_TAG, _PAGE_METHOD_TAG):
            raise RequestNotSerializable(
                f"{path}: a dict whose only key is {tag!r} would come back as what that tag "
                "stands for; add another key"
            )
        for key in value:
            if not isinstance(key, str):
                raise RequestNotSerializable(f"{path}: key {key!r} is not a string")
        return {
            key: _encode(item, f"{path}[{key!r}]" if path else key) for key, item in value.items()
        }
    raise RequestNotSerializable(
        f"{path}: a {type(value).__name__} cannot be stored in Redis as JSON; "
        "use str, int, float, bool, None, bytes, list or dict values"
    )


def _encode_page_method(method: PageMethod, path: str) -> dict[str, Any]:
    if not isinstance(method.method, str):
        raise RequestNotSerializable(
            f"{path}: a PageMethod calling a Python function cannot be stored in Redis; "
            "name a Playwright page method instead"
        )
    stored = {"method": method.method, "args": list(method.args), "kwargs": method.kwargs}
    return {_PAGE_METHOD_TAG: _encode(stored, f"{path}.PageMethod")}


def _header_name(key: Any) -> Any:
    return key.decode("latin-1") if isinstance(key, bytes) else key


def decode_tags(obj: dict[str, Any]) -> Any:
    if len(obj) == 1 and _BYTES_TAG in obj:
        return base64.b64decode(obj[_BYTES_TAG])
    if len(obj) == 1 and _PAGE_METHOD_TAG in obj:
        stored = obj[_PAGE_METHOD_TAG]
        return PageMethod(stored["method"], *stored["args"], **stored["kwargs"])
    return obj


# What a plain GET request has unless told otherwise: left out of its record, since Scrapy's
# request_from_dict gives a missing field its default (records with every field, as written
# before, load the same).
DEFAULTS: dict[str, Any] = {
    "callback": None,
    "errback": None,
    "headers": {},
    "body": b"",
    "cookies": {},
    "meta": {},
    "encoding": "utf-8",
    "flags": [],
    "cb_kwargs": {},
    "dont_filter": False,
    "method": "GET",
    "priority": 0,
}
_MISSING = object()


def without_defaults(record: Mapping[str, Any]) -> dict[str, Any]:
    """``record`` without the fields that have their default (Scrapy's request_from_dict gives
    a missing field its default)."""
    return {
        name: value
        for name, value in record.items()
        if name == "url" or value != DEFAULTS.get(name, _MISSING)
    }


def request_record(request: Request, spider: Spider | None) -> dict[str, Any]:
    """``request.to_dict(spider=spider)`` in format 2 (short field names, see
    ``SHORT_NAMES``) without the fields that have their default, and without
    Scrapy's scan of every spider attribute to name the callbacks when they are the spider's
    own methods (the usual case)."""
    callback = _method_name(spider, request.callback)
    errback = _method_name(spider, request.errback)
    if type(request) is not Request or callback is False or errback is False:
        try:
            return shorten(request.to_dict(spider=spider))
        except ValueError as exc:  # a callback no spider method (a lambda, a function)
            raise RequestNotSerializable(f"{str(exc)[:300]}: Redis keeps a method's name") from exc
    headers = dict(request.headers)
    record = {"url": request.url, "callback": callback, "errback": errback, "headers": headers}
    record.update(
        (name, getattr(request, name)) for name in request.attributes if name not in record
    )
    return shorten(without_defaults(record))


def _method_name(spider: Spider | None, function: Any) -> str | bool | None:
    """The name of ``function`` on ``spider``, None without one, False when Scrapy must look."""
    if function is None:
        return None
    name = getattr(function, "__name__", None)
    if spider is None or name is None or getattr(spider, name, None) != function:
        return False
    return str(name)
