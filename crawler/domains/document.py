"""A domain's document (crawler.items.DomainItem) from what its probe met: pure functions of the
probe's state and the last response, no I/O.

The probe's state (the spider's ``meta[PROBE_META]``) keeps, besides where the probe is:

- ``errors``: each scheme's failure, ``"<class>: <detail>"`` (:func:`noted`), and ``elapsed``:
  the seconds it took;
- ``answer``: the last redirect the domain answered that the probe followed
  (:func:`redirect_answer`).

A probe ends on an answer (:func:`answered`) or on failures (:func:`failed`). Failures alone
give the class of the one that got furthest; but when the domain answered a redirect on the way,
the domain did answer: the document is that redirect (``redirect_failed``, its status the code,
``final_url`` where it sent the browser) with how the target failed beside it
(``redirect_error``), as ``redirect_offsite`` is a redirect whose target is not even asked.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from crawler.domains.classify import (
    Outcome,
    failure_outcome,
    most_informative,
    page_title,
    response_outcome,
)
from crawler.domains.probes import TRUNCATED_META
from crawler.items import DomainItem

if TYPE_CHECKING:
    from scrapy.http import Response


def noted(state: dict[str, Any], scheme: str, failure: dict[str, Any]) -> dict[str, Any]:
    """``state`` with ``failure`` (the probe middleware's ``FAILURE_META``) as the failure of
    ``scheme``: ``errors`` and ``elapsed`` (a later failure of a scheme replaces its earlier)."""
    error = f"{failure['kind']}: {failure['error']}"
    elapsed = {**state.get("elapsed", {}), scheme: failure.get("elapsed")}
    return {**state, "errors": {**state["errors"], scheme: error}, "elapsed": elapsed}


def redirect_answer(response: Response, location: str) -> dict[str, Any]:
    """What the document keeps of a redirect answer the probe follows to ``location``."""
    return {
        "status": response.status,
        "url": response.url,
        "location": location,
        "server": _server(response),
        "address": _address(response),
        "time": _latency(response),
    }


def answered(
    state: dict[str, Any], outcome: Outcome, response: Response, final_url: str
) -> DomainItem:
    """The document of a domain whose probe ended on ``response``; ``final_url`` is the
    answer's URL, or where a redirect that was not followed points."""
    item = _document(state, outcome)
    item.http_status = response.status
    item.scheme = urlsplit(response.url).scheme
    item.final_url = final_url
    item.response_time = _latency(response)
    item.server = _server(response)
    item.address = _address(response)
    item.title = page_title(response.body)
    item.truncated = bool(response.meta.get(TRUNCATED_META))
    return item


def failed(state: dict[str, Any], failure: dict[str, Any]) -> DomainItem:
    """The document of a domain whose probe ended on failures (``state``'s ``errors``, the
    last one ``failure``): the redirect the domain answered, when it answered one, else the
    failure that got furthest (HTTP's on a tie) with its detail, time and, for a name on an
    address that is not public, the address."""
    answer = state.get("answer")
    if answer:
        return _redirect_failed(state, answer)
    errors: dict[str, str] = state["errors"]
    scheme, chosen = _furthest(errors)
    item = _document(state, failure_outcome(chosen))
    item.error = errors[scheme].split(": ", 1)[-1]
    item.response_time = state.get("elapsed", {}).get(scheme, failure.get("elapsed"))
    if chosen == "private_address":
        item.address = failure.get("address")
    return item


def _redirect_failed(state: dict[str, Any], answer: dict[str, Any]) -> DomainItem:
    errors: dict[str, str] = state["errors"]
    item = _document(state, response_outcome(answer["status"], b"", "failed"))
    item.http_status = answer["status"]
    item.scheme = urlsplit(answer["url"]).scheme
    item.final_url = answer["location"]
    item.response_time = answer["time"]
    item.server = answer["server"]
    item.address = answer["address"]
    target = urlsplit(answer["location"]).scheme
    item.redirect_error = errors.get(target) or errors[_furthest(errors)[0]]
    return item


def _furthest(errors: dict[str, str]) -> tuple[str, str]:
    """The scheme whose failure got furthest (the first such, in the order they came), and its
    kind."""
    kinds = {scheme: error.split(":", 1)[0] for scheme, error in errors.items()}
    chosen = most_informative(list(kinds.values()))
    return next(scheme for scheme, kind in kinds.items() if kind == chosen), chosen


def _document(state: dict[str, Any], outcome: Outcome) -> DomainItem:
    errors: dict[str, str] = state["errors"]
    return DomainItem(
        domain=state["domain"],
        status=outcome.status,
        code=outcome.code,
        checked_at=time.time(),
        attempts=state["tries"],
        http_error=errors.get("http"),
        https_error=errors.get("https"),
    )


def _latency(response: Response) -> float | None:
    latency = response.meta.get("download_latency")
    return round(latency, 3) if isinstance(latency, float) else None


def _server(response: Response) -> str | None:
    server = response.headers.get(b"Server")
    return server.decode("latin-1")[:200] if server else None


def _address(response: Response) -> str | None:
    """The address that answered (Scrapy's ``Response.ip_address``)."""
    return str(response.ip_address) if response.ip_address is not None else None
