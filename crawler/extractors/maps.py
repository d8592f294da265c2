"""Map pages (TARGETS.md §3) to place fields: pure functions on HTML and URLs.

A place's pin is read from its URL (``!3d<lat>!4d<lng>``), never from ``/@lat,lng``, which is
the viewport. Its id is the feature id after ``!1s`` in the same URL.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import unquote, urlsplit

from parsel import Selector

PIN = re.compile(r"!3d(-?\d+(?:\.\d+)?)!4d(-?\d+(?:\.\d+)?)")
FEATURE_ID = re.compile(r"!1s(0x[0-9a-fA-F]+:0x[0-9a-fA-F]+)")
DIGITS = re.compile(r"\d")
END_OF_LIST = "You've reached the end of the list."
# What a search with no match says instead of a results feed ("Google Maps can't find <query>").
NO_RESULTS = "Google Maps can't find"
UNUSUAL_TRAFFIC = "detected unusual traffic from your computer network"


def pin_from_url(url: str) -> tuple[float, float] | None:
    """(latitude, longitude) of the pin in a place URL, or None."""
    match = PIN.search(unquote(url))
    return (float(match[1]), float(match[2])) if match else None


def place_id_from_url(url: str) -> str | None:
    """The feature id (``0x...:0x...``) of a place URL, or None."""
    match = FEATURE_ID.search(unquote(url))
    return match[1] if match else None


def is_place_url(url: str) -> bool:
    return urlsplit(url).path.startswith("/maps/place/")


def is_consent_page(url: str, html: str) -> bool:
    """The EU consent interstitial ("Before you continue")."""
    parts = urlsplit(url)
    return (
        parts.netloc.startswith("consent.")
        or parts.path.startswith("/consent/")
        or ("Before you continue" in html and 'action="/consent/save"' in html)
    )


def is_block_page(url: str, html: str) -> bool:
    """Google's "unusual traffic" captcha page."""
    return urlsplit(url).path.startswith("/sorry/") or UNUSUAL_TRAFFIC in html


def parse_count(text: str | None) -> int | None:
    """ "(1,234)" -> 1234."""
    digits = "".join(DIGITS.findall(text or ""))
    return int(digits) if digits else None


def parse_float(text: str | None) -> float | None:
    try:
        return float((text or "").strip().replace(",", "."))
    except ValueError:
        return None


# The count after the rating, labelled "1,234 reviews" (or "1 review").
_REVIEWS = ", ".join(
    f'div.F7nice span[aria-label$="{label}"]::text' for label in ("reviews", "review")
)


def place_fields(html: str, url: str) -> dict[str, Any]:
    """Every field of a place page, None where the page does not show it."""
    sel = Selector(text=html)
    pin = pin_from_url(url)
    phone_id = sel.css('button[data-item-id^="phone:tel:"]::attr(data-item-id)').get()
    return {
        "place_id": place_id_from_url(url),
        "name": _text(sel, "h1.DUwDvf"),
        "rating": parse_float(sel.css('div.F7nice span[aria-hidden="true"]::text').get()),
        "review_count": parse_count(sel.css(_REVIEWS).get()),
        "category": _text(sel, "button.DkEaL"),
        "address": _text(sel, 'button[data-item-id="address"]'),
        "phone": _text(sel, 'button[data-item-id^="phone:tel:"]'),
        "phone_e164": phone_id.removeprefix("phone:tel:") if phone_id else None,
        "website": sel.css('a[data-item-id="authority"]::attr(href)').get(),
        "plus_code": _text(sel, 'button[data-item-id="oloc"]'),
        "hours": sel.css("div.t39EBf::attr(aria-label)").get(),
        "latitude": pin[0] if pin else None,
        "longitude": pin[1] if pin else None,
        "url": url,
    }


def _text(sel: Selector, css: str) -> str | None:
    text = " ".join(" ".join(sel.css(f"{css} ::text").getall()).split())
    return text or None
