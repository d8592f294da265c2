"""A page that only sends the browser on: pure functions, no I/O.

Some domains answer ``/`` with 200 and a page that shows nothing and only sends the browser
elsewhere, by a script or a meta refresh. GoDaddy's parked domains are the common case: ``/``
is ``<script>window.location.href="/lander"</script>`` and the parking page is on ``/lander``.
The spider follows such a page as it follows an HTTP redirect (crawler/spiders/domains.py).

A page is such a redirect (:func:`page_redirect`) when

- it is at most REDIRECT_PAGE_BYTES long (the ban rules' measure, crawler/bans/rules.py);
- a reader sees at most a line of text on it (REDIRECT_PAGE_TEXT characters,
  "Redirecting..."), its title and ``<noscript>`` aside;
- it names one target: a ``<meta http-equiv="refresh" content="0;url=...">``, or a script
  that sets ``location`` or ``location.href`` (of ``window``, ``document``, ``top``...) to a
  string, or calls ``location.replace(...)`` or ``location.assign(...)`` with one. A page that
  names two targets chooses between them as it runs: it is not followed, nor is one that
  names itself (a reload, or a ``#fragment`` of it).
"""

from __future__ import annotations

import re
from urllib.parse import urldefrag, urljoin, urlsplit

from lxml import etree
from w3lib.html import get_meta_refresh

from crawler.bans.rules import REDIRECT_PAGE_BYTES, REDIRECT_PAGE_TEXT

# A quoted string assigned to location (not a piece of a longer expression: "/a" + b), or
# given to location.replace() or location.assign().
_SCRIPT_TARGETS = re.compile(
    r"""\blocation(?:\.href)?\s*=\s*(?P<q1>["'`])(?P<assigned>[^"'`]+)(?P=q1)(?=\s*(?:[;})]|$))"""
    r"""|\blocation\.(?:replace|assign)\(\s*(?P<q2>["'`])(?P<called>[^"'`]+)(?P=q2)\s*\)""",
    re.MULTILINE,
)
_NOT_SEEN = ("script", "style", "template", "noscript", "title")


def page_redirect(body: bytes, url: str) -> str | None:
    """The absolute http(s) URL the page ``body`` (at ``url``) only sends the browser to, or
    None when it is not such a page (see the module)."""
    if len(body) > REDIRECT_PAGE_BYTES or not _may_redirect(body.lower()):
        return None
    root = _parse(body)
    if root is None:
        return None
    targets = {urljoin(url, target) for target in _script_targets(root)}
    _, refresh = get_meta_refresh(body.decode("utf-8", "replace"), url)
    if refresh:
        targets.add(refresh)
    if len(targets) != 1 or len(_seen_text(root)) > REDIRECT_PAGE_TEXT:
        return None
    (target,) = targets
    if urlsplit(target).scheme not in ("http", "https") or _same_page(target, url):
        return None
    return target


def _same_page(target: str, url: str) -> bool:
    """True when ``target`` is the page at ``url`` again (a reload, a #fragment of it)."""
    return urldefrag(target)[0] == urldefrag(url)[0]


def _may_redirect(lowered: bytes) -> bool:
    """False for a page that names neither location nor a refresh (most pages: not parsed)."""
    return b"location" in lowered or b"refresh" in lowered


def _parse(body: bytes) -> etree._Element | None:
    parser = etree.HTMLParser(recover=True, no_network=True, remove_comments=True)
    try:
        return etree.fromstring(body, parser)
    except (etree.LxmlError, ValueError):
        return None


def _script_targets(root: etree._Element) -> list[str]:
    """The strings the page's inline scripts send the browser to."""
    targets = []
    for script in root.iter("script"):
        for match in _SCRIPT_TARGETS.finditer(script.text or ""):
            target = match.group("assigned") or match.group("called")
            targets.append(target.strip().replace("\\/", "/"))
    return targets


def _seen_text(root: etree._Element) -> str:
    """The page's text a reader sees, whitespace collapsed (its title and noscript aside);
    the elements not seen are taken out of ``root``."""
    etree.strip_elements(root, *_NOT_SEEN, with_tail=False)
    return " ".join(" ".join(root.itertext()).split())
