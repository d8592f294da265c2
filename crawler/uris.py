"""URIs safe to log and print: their secrets masked."""

from __future__ import annotations

import re
from urllib.parse import unquote

MASK = "***"
# Query parameters whose value is a secret: names containing one of these words, once
# lower-cased without "-" and "_" (password, pass, pwd, token, secret, api_key, X-Amz-Signature,
# X-Amz-Credential, ...), or named exactly key, sig, auth or authorization.
SECRET_PARAM_WORDS = (
    "pass",
    "pwd",
    "token",
    "secret",
    "apikey",
    "accesskey",
    "privatekey",
    "signature",
    "credential",
)
SECRET_PARAM_NAMES = frozenset({"key", "sig", "auth", "authorization"})
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")


def mask_uri(uri: str) -> str:
    """The URI with its secrets replaced by ``***``, safe to log and print.

    Masks the password of the user info (``redis://:***@host``, ``mongodb://user:***@h1,h2``;
    a user info without a password may be an API key and is masked whole) and the values of
    secret query parameters (``?password=***``, ``&token=***``). Works for any scheme
    (``rediss``, ``mongodb+srv``, proxies), several hosts, IPv6 and URIs without a scheme.
    The URI is read as RFC 3986 and urllib.parse.urlsplit read it: the user info ends at the
    last ``@`` of the authority, which ends at the first ``/``, ``?`` or ``#``, so an ``@`` in
    the path (``https://host/@user``) is left alone.
    """
    match = _SCHEME.match(uri)
    start = match.end() if match else (2 if uri.startswith("//") else 0)
    authority_end = _first(uri, "/?#", start)
    spans = _user_info_spans(uri, start, uri.rfind("@", start, authority_end))
    query = _first(uri, "?#", authority_end)
    return _replace(uri, spans + _query_spans(uri, query + 1))


def _user_info_spans(uri: str, start: int, at: int) -> list[tuple[int, int]]:
    """The password of the user info ``uri[start:at]``, or all of it when it has none."""
    if at < 0:
        return []
    colon = uri.find(":", start, at)
    return [(colon + 1, at) if start <= colon < at - 1 else (start, at)]


def _query_spans(uri: str, position: int) -> list[tuple[int, int]]:
    """Values of secret parameters in the query and fragment starting at ``position``."""
    spans = []
    while position <= len(uri):
        end = _first(uri, "&;#", position)
        name, equals, _ = uri[position:end].partition("=")
        if equals and _secret_param(name):
            spans.append((position + len(name) + 1, end))
        position = end + 1
    return spans


def _secret_param(name: str) -> bool:
    normal = unquote(name).lower().replace("-", "").replace("_", "")
    return normal in SECRET_PARAM_NAMES or any(word in normal for word in SECRET_PARAM_WORDS)


def _first(text: str, characters: str, start: int) -> int:
    """Index of the first of ``characters`` in ``text`` from ``start``, else ``len(text)``."""
    found = [index for char in characters if (index := text.find(char, start)) >= 0]
    return min(found, default=len(text))


def _replace(text: str, spans: list[tuple[int, int]]) -> str:
    """``text`` with each non-empty span (overlapping ones merged) replaced by MASK."""
    merged: list[list[int]] = []
    for start, end in sorted(span for span in spans if span[1] > span[0]):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    pieces, position = [], 0
    for start, end in merged:
        pieces += [text[position:start], MASK]
        position = end
    return "".join(pieces) + text[position:]
