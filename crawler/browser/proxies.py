"""A browser request sent as the identity the ban middleware gave it (docs/politeness.md).

scrapy-playwright reads neither Scrapy's ``proxy`` nor its ``bindaddress`` meta: the browser
would fetch every page from the machine's own address while the identity pool counted, banned
and blocked the proxy it named. Chromium takes a proxy per browser context, not per page, so a
request the browser fetches through a proxy (meta ``proxy``: a PROXY_POOL identity's, which
Scrapy's HttpProxyMiddleware strips of its credentials into a Proxy-Authorization header) opens
its page in a context of that proxy's own, named after its identity (``proxy:<host>:<port>``):
scrapy-playwright's ``playwright_context`` and ``playwright_context_kwargs`` with Playwright's
``proxy`` option, which holds the credentials (Chromium answers the proxy's 407 with them). The
two keys are the request's only while it downloads, so no credential is stored with a retry.

The Proxy-Authorization header never reaches the browser's requests (through a proxy's tunnel
it would go to the host). Chromium has no local address per context: BIND_ADDRESSES is refused
for a crawl through the browser (crawler/preflight).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote
from urllib.request import _parse_proxy  # type: ignore[attr-defined]

from crawler.meta import IDENTITY_META

if TYPE_CHECKING:
    from scrapy import Request

CONTEXT_META = "playwright_context"
CONTEXT_KWARGS_META = "playwright_context_kwargs"
PROXY_AUTHORIZATION = "proxy-authorization"


@contextmanager
def proxied_context(request: Request, encoding: str = "latin-1") -> Iterator[None]:
    """While the block runs, ``request`` names the browser context of its proxy (none without
    one); after it, the two context keys are as they were."""
    found = proxy_context(request, encoding)
    if found is None:
        yield
        return
    meta = request.meta
    before = {key: meta[key] for key in (CONTEXT_META, CONTEXT_KWARGS_META) if key in meta}
    meta[CONTEXT_META], meta[CONTEXT_KWARGS_META] = found
    try:
        yield
    finally:
        for key in (CONTEXT_META, CONTEXT_KWARGS_META):
            meta.pop(key, None)
        meta.update(before)


def proxy_context(request: Request, encoding: str = "latin-1") -> tuple[str, dict[str, Any]] | None:
    """The name and options of the context ``request`` goes through: its proxy's (with the
    options of the context it names, if any); None when it names no proxy."""
    url = request.meta.get("proxy")
    if not url:
        return None
    scheme, user, password, hostport = _parse_proxy(url)
    proxy = {"server": f"{scheme or 'http'}://{hostport}"}
    if user:
        proxy |= {"username": unquote(user), "password": unquote(password or "")}
    elif credentials := _basic_credentials(request, encoding):
        proxy |= credentials
    name = str(request.meta.get(IDENTITY_META, ""))
    if not name.startswith("proxy:"):  # a proxy of the request's own, not the pool's
        secret = f"{proxy.get('username', '')}:{proxy.get('password', '')}"
        name = f"proxy:{hostport}#{hashlib.sha256(secret.encode()).hexdigest()[:8]}"
    if given := request.meta.get(CONTEXT_META):
        name = f"{given} via {name}"
    return name, {**(request.meta.get(CONTEXT_KWARGS_META) or {}), "proxy": proxy}


def _basic_credentials(request: Request, encoding: str) -> dict[str, str]:
    """The user and password of the request's Proxy-Authorization header (Basic), if any."""
    header = request.headers.get(b"Proxy-Authorization") or b""
    kind, _, encoded = header.partition(b" ")
    if kind.lower() != b"basic":
        return {}
    try:
        user, _, password = base64.b64decode(encoded, validate=True).decode(encoding).partition(":")
    except (binascii.Error, UnicodeDecodeError):
        return {}
    return {"username": user, "password": password}


def without_proxy_authorization(process: Callable[..., Any]) -> Callable[..., Any]:
    """PLAYWRIGHT_PROCESS_REQUEST_HEADERS ``process``, its Proxy-Authorization header left out:
    the browser's context answers its proxy itself."""

    async def headers(**kwargs: Any) -> dict[str, str]:
        found = process(**kwargs)
        if hasattr(found, "__await__"):
            found = await found
        return {name: value for name, value in found.items() if name.lower() != PROXY_AUTHORIZATION}

    return headers
