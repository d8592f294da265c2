"""URIs safe to log and print: their secrets masked; identities named without their secrets."""

from __future__ import annotations

import hashlib
import ipaddress
import re
from collections import Counter
from urllib.parse import unquote, urlsplit

import idna

MASK = "***"
# Query parameters whose value is a secret: names containing one of these words, once
# lower-cased without "-" and "_" (password, pass, pwd, token, secret, api_key, X-Amz-Signature,
# X-Amz-Credential, ...), or named exactly key, sig, auth or authorization.
SECRET_PARAM_WORDS = (
    *("pass", "pwd", "token", "secret", "apikey", "accesskey", "privatekey", "signature"),
    "credential",
)
SECRET_PARAM_NAMES = frozenset({"key", "sig", "auth", "authorization"})
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")


def mask_uri(uri: str) -> str:
    """The URI with its secrets replaced by ``***``, safe to log and print: the password of the user
    info (``redis://:***@host``, ``mongodb://user:***@h1,h2``; a user info without a password may be
    an API key and is masked whole) and the values of secret query parameters (``?password=***``).
    Any scheme, several hosts, IPv6, no scheme. Read as RFC 3986 and urlsplit read it: the user info
    ends at the last ``@`` of the authority, which ends at the first ``/``, ``?`` or ``#`` (an ``@``
    in the path is left alone)."""
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


# --- identities: a bind address ("bind:127.0.0.2"), a proxy ("proxy:host:3128") or the default

DEFAULT_IDENTITY = "default"
WEB_PORTS = {"http": 80, "https": 443}
DEFAULT_PORTS = {**WEB_PORTS, "socks4": 1080, "socks5": 1080, "socks5h": 1080}


def identity_names(bind_addresses: list[str], proxies: list[str]) -> list[str]:
    """The identities' names BIND_ADDRESSES and PROXY_POOL give, in order, or the default's."""
    names = [f"bind:{address}" for address in bind_addresses] + list(proxy_names(proxies))
    return names or [DEFAULT_IDENTITY]


def proxy_names(proxies: list[str]) -> dict[str, str]:
    """Each proxy URL of the pool by its secret-free name, in pool order."""
    plain = [f"proxy:{host_port(url)}" for url in proxies]
    shared = {name for name, count in Counter(plain).items() if count > 1}
    names: dict[str, str] = {}
    for plain_name, url in zip(plain, proxies, strict=True):
        base = f"{plain_name}#{_short_hash(_user(url))}" if plain_name in shared else plain_name
        name, turn = base, 1
        while name in names:
            turn += 1
            name = f"{base}~{turn}"
        names[name] = url
    return names


def host_port(url: str) -> str:
    """``host:port`` of a URL (the scheme's default port when it names none), read after the
    last ``@`` so no part of the credentials can end up in it."""
    scheme, separator, rest = url.partition("://")
    if not separator:
        scheme, rest = "", url.removeprefix("//")
    authority = rest.rsplit("@", 1)[-1]
    for end in "/?#":
        authority = authority.split(end, 1)[0]
    host, colon, port = authority.rpartition(":")
    if colon and port.isdigit() and (not host.startswith("[") or host.endswith("]")):
        return authority.lower()
    default = DEFAULT_PORTS.get(scheme.lower())
    return f"{authority.lower()}:{default}" if default else authority.lower()


def _user(url: str) -> str:
    rest = url.partition("://")[2] or url
    if "@" not in rest:
        return ""
    return unquote(rest.rsplit("@", 1)[0].split(":", 1)[0])


def _short_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:8]


def is_ip(host: str) -> bool:
    """Whether ``host`` is an IP address (an IPv6 one with or without its brackets)."""
    try:
        ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return False
    return True


def ascii_host(raw: str) -> str:
    """A host name as URLs, bans and buckets carry it: lower case, no final dot, an IDN in its
    ASCII form (IDNA 2008 with UTS 46, as browsers map it); ValueError (idna's IDNAError) if it
    is none."""
    host = raw.strip().lower().rstrip(".")
    return host if host.isascii() else str(idna.encode(host, uts46=True).decode("ascii"))


_HOST_NAME = re.compile(r"[a-z0-9_.:-]+")


def site_name(raw: str) -> str:
    """A host as bans and the circuit breaker key it (``site_of_url``), read from what an
    operator types: a host name (lower case, no final dot, an IDN in its ASCII form) with
    ``:PORT`` when it names one, or an http(s) URL (its host, with its port when not the
    scheme's); ValueError if it is none of these."""
    text = raw.strip()
    url = "://" in text
    parts = urlsplit(text if url else f"//{text}")
    extra = not url and (parts.path or parts.query or parts.fragment)
    if extra or "@" in parts.netloc or (url and parts.scheme.lower() not in WEB_PORTS):
        raise ValueError(f"{raw!r} is no host name")
    host, port = ascii_host(parts.hostname or ""), parts.port  # IDNAError, or a bad port
    if not _HOST_NAME.fullmatch(host):
        raise ValueError(f"{raw!r} is no host name")
    default = WEB_PORTS.get(parts.scheme.lower())
    return host if port is None or port == default else f"{host}:{port}"


def of_site(site: str, name: str) -> bool:
    """Whether a block or cool-down keyed ``site`` (a host, or ``host:port``) is one that
    :func:`site_name` ``name`` names: the same, or one of the host's ports when it names none."""
    if site == name:
        return True
    host, colon, port = site.rpartition(":")
    return bool(colon) and port.isdigit() and host == name and ":" not in name
