"""HTML building blocks shared by the page modules: the page shell and embedded JSON."""

from __future__ import annotations

import html
import json
from typing import Any

UNIVERSAL_DATA_ID = "__UNIVERSAL_DATA_FOR_REHYDRATION__"
SIGI_STATE_ID = "SIGI_STATE"
HTML_CONTENT_TYPE = "text/html"

APP_CONTEXT: dict[str, Any] = {
    "language": "en",
    "region": "US",
    "appId": 1988,
    "appType": "m",
    "user": {},
    "botType": "others",
    "wid": "7380000000000000000",
}

_SHELL = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{title}</title>
<meta property="og:title" content="{title}">
<link rel="stylesheet" href="/static/css/webapp-desktop.css">
</head>
<body>
<div id="app">
<header class="css-1aa2wzi-DivHeaderWrapper">
<a href="/" class="css-1x2gq0k-StyledLinkLogo" aria-label="Home">TikTok</a>
<nav class="css-xk7nzb-DivMainNavContainer">
<a href="/foryou">For You</a><a href="/explore">Explore</a><a href="/following">Following</a>
<a href="/live">LIVE</a><a href="/upload">Upload</a>
</nav>
<button class="css-1f8am9c-Button" data-e2e="top-login-button">Log in</button>
</header>
<main id="main-content-others_homepage" class="css-1p5ipjs-DivMainContainer">
{body}
</main>
</div>
{scripts}
<script src="/static/js/webapp-desktop.js" defer></script>
</body>
</html>
"""


def embed_json(data: object) -> str:
    """Serialize ``data`` so it cannot end or confuse the ``<script>`` element holding it."""
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    return text.replace("</", "<\\/").replace("<!--", "\\u003c!--")


def data_script(script_id: str, data: object) -> str:
    """Return a ``<script type="application/json">`` element carrying ``data``."""
    return f'<script id="{script_id}" type="application/json">{embed_json(data)}</script>'


def universal_data_script(user_detail: dict[str, Any]) -> str:
    """Return the rehydration script with ``user_detail`` as ``webapp.user-detail``."""
    scope = {"webapp.app-context": APP_CONTEXT, "webapp.user-detail": user_detail}
    return data_script(UNIVERSAL_DATA_ID, {"__DEFAULT_SCOPE__": scope})


def app_context_script() -> str:
    """Return the rehydration script holding only the app's context (no page detail)."""
    scope = {"webapp.app-context": APP_CONTEXT}
    return data_script(UNIVERSAL_DATA_ID, {"__DEFAULT_SCOPE__": scope})


def page(title: str, body: str = "", scripts: str = "") -> str:
    """Return a full HTML page around ``body`` and ``scripts`` (both trusted markup)."""
    return _SHELL.format(title=html.escape(title), body=body, scripts=scripts)
