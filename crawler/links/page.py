"""The document of a page the links spider fetched (``pages``)."""

from __future__ import annotations

import time
import zlib
from typing import TYPE_CHECKING, Any

from crawler.extractors.links import PageFields, content_hash
from crawler.items import PageItem
from crawler.links.urls import canonical_url, host_of, same_domain, scope_root
from crawler.meta import JOB_META

if TYPE_CHECKING:
    from scrapy.http import Response


def page_item(
    response: Response,
    url: str,
    depth: int,
    fields: PageFields,
    out_links: int,
    body_kept: int | None,
) -> PageItem:
    """The page at ``url`` (canonical), found at ``depth``, with ``out_links`` distinct links;
    its body's first ``body_kept`` bytes compressed (None: no body kept, LINKS_STORE_BODY)."""
    request = response.request
    requested = canonical_url(request.meta.get("redirect_urls", [url])[0]) if request else url
    content_type = response.headers.get(b"Content-Type")
    return PageItem(
        url=url,
        host=host_of(url),
        status=response.status,
        final_url=response.url,
        depth=depth,
        fetched_at=time.time(),
        content_hash=content_hash(response.body),
        content_length=len(response.body),
        out_links=out_links,
        content_type=content_type.decode("latin-1") if content_type else None,
        requested_url=requested if requested != url else None,
        title=fields.title,
        language=fields.language,
        description=fields.description,
        canonical=fields.canonical,
        body=zlib.compress(response.body[:body_kept]) if body_kept is not None else None,
    )


def entry_budget(state: dict[str, Any], meta: dict[str, Any]) -> str:
    """The key of a start entry's page budget (``max_pages``) and sitemap budget: its start
    URL's, and its job's number when it has one (meta JOB_META), so that two jobs entering the
    same site each have the entry's budget, as each has its own filter of repeats."""
    job = meta.get(JOB_META)
    return f"{state['start']}.{job}" if job is not None else str(state["start"])


def moved_start(state: dict[str, Any], url: str, redirects: list[str]) -> dict[str, Any] | None:
    """A start URL that redirected within its domain (to www., to https) to ``url``: its state
    with the scope moved there; None for any other redirect."""
    if state["depth"] > 0 or not same_domain(url, redirects[0]):
        return None
    return {**state, "root": scope_root(url, state["scope"])}
