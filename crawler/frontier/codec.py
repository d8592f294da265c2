"""JSON serializer for requests stored in Redis, used as scrapy-redis ``SCHEDULER_SERIALIZER``.

Pickle in a shared Redis turns write access to Redis into code execution on every worker, so
requests are stored as JSON. Bytes (bodies, header values, bytes inside meta) round-trip through
a tagged base64 object, and so do scrapy-playwright ``PageMethod``s named by a string (a method
given as a Python callable cannot be stored). As in any JSON, dict keys become strings. Any
other value JSON cannot hold is rejected when the request is scheduled, with an error naming
where it sits (``meta['page']['when']``).

Records are stored in format 2: ``Request.to_dict()`` with its field names shortened (``url`` is
``u``, see ``SHORT_NAMES``) and, as written by ``records.request_record``, without the fields
that have their default. The URL's key tells the format: a record with ``url`` is of format 1
(every field, or the defaults left out) and loads as it is, so requests queued by older
workers load the same.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from typing import Any

from scrapy_playwright.page import PageMethod

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

_BYTES_TAG = "__bytes__"
_PAGE_METHOD_TAG = "__page_method__"


class RequestNotSerializable(ValueError):
    """A request holds a value that cannot be stored in Redis as JSON."""


def dumps(obj: Mapping[str, Any]) -> str:
    """Encode a ``Request.to_dict()`` mapping as a JSON string."""
    fields = dict(obj)
    headers = fields.get("headers")
    if headers:
        fields["headers"] = {_encode_key(key, "headers"): value for key, value in headers.items()}
    try:
        return json.dumps(fields, default=_tagged, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError):
        # Walk the request to name the value at fault (or to encode keys JSON refused).
        return json.dumps(_encode(fields, ""), separators=(",", ":"), allow_nan=False)


def _tagged(value: Any) -> Any:
    """What ``json.dumps`` cannot encode by itself: bytes and page methods, else TypeError."""
    if isinstance(value, bytes):
        return {_BYTES_TAG: base64.b64encode(value).decode("ascii")}
    if isinstance(value, PageMethod):
        return _encode_page_method(value, "")
    raise TypeError(type(value).__name__)


def loads(data: str | bytes) -> dict[str, Any]:
    """Decode what :func:`dumps` produced back into a ``request_from_dict`` mapping (a
    format 2 record with its field names made whole again)."""
    decoded = json.loads(data, object_hook=_decode_tagged)
    if not isinstance(decoded, dict):
        raise ValueError(f"stored request is not a JSON object: {decoded!r:.80}")
    return expand(decoded)


def shorten(record: Mapping[str, Any]) -> dict[str, Any]:
    """A ``Request.to_dict()`` mapping with the format 2 field names."""
    return {SHORT_NAMES.get(name, name): value for name, value in record.items()}


def expand(record: dict[str, Any]) -> dict[str, Any]:
    """The ``Request.to_dict()`` mapping of a stored record of either format."""
    if "url" in record or "u" not in record:
        return record
    return {LONG_NAMES.get(name, name): value for name, value in record.items()}


def _encode(value: Any, path: str) -> Any:
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return _encode_float(value, path)
    if isinstance(value, bytes):
        return {_BYTES_TAG: base64.b64encode(value).decode("ascii")}
    if isinstance(value, list | tuple):
        return [_encode(item, f"{path}[{index}]") for index, item in enumerate(value)]
    if isinstance(value, PageMethod):
        return _encode_page_method(value, path)
    if isinstance(value, Mapping):
        return {
            _encode_key(key, path): _encode(item, f"{path}[{key!r}]" if path else str(key))
            for key, item in value.items()
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


def _encode_float(value: float, path: str) -> float:
    if value != value or value in (float("inf"), float("-inf")):
        raise RequestNotSerializable(f"{path}: {value} cannot be stored in Redis as JSON")
    return value


def _encode_key(key: Any, path: str) -> str:
    if isinstance(key, str):
        return key
    if isinstance(key, bytes):
        # Header names are bytes; HTTP header names are ASCII/latin-1 by definition.
        return key.decode("latin-1")
    raise RequestNotSerializable(f"{path}: key {key!r} is not a string")


def _decode_tagged(obj: dict[str, Any]) -> Any:
    if len(obj) == 1 and _BYTES_TAG in obj:
        return base64.b64decode(obj[_BYTES_TAG])
    if len(obj) == 1 and _PAGE_METHOD_TAG in obj:
        stored = obj[_PAGE_METHOD_TAG]
        return PageMethod(stored["method"], *stored["args"], **stored["kwargs"])
    return obj
