"""Fitting an item's document under MongoDB's size limit, by one documented rule.

MongoDB refuses documents over 16 MiB. A document whose BSON size is over
MONGO_MAX_DOCUMENT_BYTES is trimmed: its longest string field (never the unique key) is cut, at
a character boundary, by just what the document is over, then the next longest if that was not
enough. The document records what was cut in ``_truncated``, a map from each cut field to its
length before the cut in UTF-8 bytes. A document that is still too large once every string is
cut (huge lists, or a huge unique key) is refused with :class:`DocumentTooLarge`; the pipeline
then fails its item, so its request is dead-lettered with the reason instead of acknowledged.
"""

from __future__ import annotations

from typing import Any

import bson

TRUNCATED_FIELD = "_truncated"


class DocumentTooLarge(ValueError):
    """A document over the size limit even with every string field cut."""


def bson_size(document: dict[str, Any]) -> int:
    return len(bson.encode(document))


def fit(document: dict[str, Any], limit: int, unique_key: str) -> dict[str, Any]:
    """``document`` if its BSON size is within ``limit`` bytes, else a trimmed copy with
    ``_truncated``; raises DocumentTooLarge when trimming strings cannot make it fit."""
    if bson_size(document) <= limit:
        return document
    fitted: dict[str, Any] = dict(document)
    cut: dict[str, int] = {}
    for name in _strings_longest_first(document, unique_key):
        if bson_size({**fitted, TRUNCATED_FIELD: cut}) <= limit:
            break
        encoded = fitted[name].encode()
        cut[name] = len(encoded)
        excess = bson_size({**fitted, TRUNCATED_FIELD: cut}) - limit
        fitted[name] = _prefix(encoded, len(encoded) - excess)
    fitted[TRUNCATED_FIELD] = cut
    size = bson_size(fitted)
    if size > limit:
        raise DocumentTooLarge(
            f"document of {unique_key}={_preview(document.get(unique_key))} is {size:,} bytes "
            f"with every string field cut, over MONGO_MAX_DOCUMENT_BYTES={limit:,}"
        )
    return fitted


def _strings_longest_first(document: dict[str, Any], unique_key: str) -> list[str]:
    names = [
        name for name, value in document.items() if isinstance(value, str) and name != unique_key
    ]
    return sorted(names, key=lambda name: -len(document[name].encode()))


def _prefix(encoded: bytes, length: int) -> str:
    """The longest whole-character prefix of ``encoded`` within ``length`` bytes."""
    return encoded[: max(0, length)].decode("utf-8", "ignore")


def _preview(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else f"{text[:60]}... ({len(text):,} characters)"
