"""What marks a parking page: a domain that shows a parking or domain-sales service's page
instead of a site of its own. Pure functions, no I/O.

A page is parked when

- its **text** (markup stripped, scripts and styles dropped, entities decoded, whitespace
  collapsed, lower case: what a reader sees) says so in the words parking and aftermarket
  services use (:data:`PARKING_PHRASES`): "This domain is <b>for sale</b>",
  "This&nbsp;domain may be for sale", "The domain name example.com may be for sale",
  "example.com is for sale ... Make an offer", "Domain for sale", "This web page is parked
  free, courtesy of ...", ...; or
- its **markup** names a parking or domain-sales service (:data:`PARKING_SERVICES`: the
  scripts, frames and links of Sedo, Bodis, ParkingCrew, GoDaddy's parking lander, ...).

Only the bytes the spider read are looked at (DOMAINS_BODY_BYTES): a phrase further down the
page is not seen. Most pages are alive sites read to the cap: the text is only extracted
around the words every phrase holds (:data:`KEYWORDS`) outside scripts, styles and comments,
(the first 64 of them), so a 64 KiB page without them costs a few substring searches, not a
parse.
"""

from __future__ import annotations

import re

from lxml import etree

# Phrases of the visible text, as regular expressions over the collapsed lower-case text.
_NAME = r"[a-z0-9][a-z0-9.-]*\.[a-z]{2,}"  # a domain name as a page writes it
PARKING_PHRASES = (
    # "this domain is for sale", "the domain name example.com may be for sale",
    # "this website is for sale!", "this domain is available for purchase"
    rf"\b(?:this|the) (?:domain|domain name|website|web site|site|web page)(?: {_NAME})?"
    r" (?:is|may be|might be|could be) (?:for sale|available for (?:sale|purchase))",
    # "example.com is for sale", "example.com may be for sale"
    rf"\b{_NAME} (?:is|may be|might be) for sale\b",
    # "domain for sale", "premium domain is for sale", "domain name for sale"
    r"\bdomain(?: name)? (?:is )?for sale\b",
    # "buy this domain", "make an offer on this domain", "inquire about this domain"
    r"\b(?:buy|purchase|get|acquire|lease|make an offer on|inquire about|enquire about)"
    r" this domain\b",
    # "example.com is for sale ... make an offer" (a sales lander)
    r"\bdomain\b.{0,300}\bmake an offer\b|\bmake an offer\b.{0,300}\bdomain\b",
    # "this web page is parked free, courtesy of ...", "this domain is parked"
    r"\b(?:this|the) (?:domain|domain name|web page|webpage|page|site|website)"
    r"(?: name)? (?:is|has been|was) parked\b",
    r"\bparked free\b",
    r"\bthis is a parked domain\b",
    # registrars' pages for a name not in use: expired or just registered there
    r"\bthis domain(?: name)? has expired\b",
    r"\bthis domain(?: name)? is pending renewal or deletion\b",
    rf"\bthis domain(?: name)? (?:is|was recently|has been) registered (?:at|with) {_NAME}",
)
# Names of parking and domain-sales services in the markup (lower case), each under a word
# it holds (searched first: a page without it is not searched for the names).
PARKING_SERVICES: dict[bytes, tuple[bytes, ...]] = {
    b"park": (
        b"sedoparking",
        b"parkingcrew",
        b"parklogic",
        b"parking-lander",  # GoDaddy's parked pages (img1.wsimg.com/parking-lander)
        b"parkingpage.namecheap.com",
    ),
    b"domain": (
        b"hugedomains.com",
        b"dan.com/buy-domain",
        b"buydomains.com",
        b"domainmarket.com",
    ),
    b"sedo.com": (b"sedo.com/search/details",),
    b"bodis": (b"bodis.com",),
    b"afternic": (b"afternic.com",),
    b"undeveloped": (b"undeveloped.com",),
}
# Every phrase holds one of these words: text is only read around them.
KEYWORDS = (b"sale", b"domain", b"parked", b"purchase")
# Bytes of markup read on each side of a keyword (a phrase with its tags and a domain name
# fits), and the most keywords read around: the first ones of the page (a page with more is
# a site that speaks of sales or domains at length; a parking page says it at the top).
WINDOW = 1024
MOST_KEYWORDS = 64
_HIDDEN = ("script", "style", "template")
_HIDDEN_SPANS = ((b"<script", b"</script"), (b"<style", b"</style"), (b"<!--", b"-->"))
_PHRASES = re.compile("|".join(f"(?:{phrase})" for phrase in PARKING_PHRASES))


def page_text(body: bytes) -> str:
    """What a reader of the HTML page ``body`` sees: its text (title included) without markup,
    scripts nor styles, entities decoded, whitespace collapsed, lower case."""
    if not body.strip():
        return ""
    parser = etree.HTMLParser(recover=True, no_network=True, remove_comments=True)
    try:
        root = etree.fromstring(body, parser)
    except (etree.LxmlError, ValueError):
        return ""
    if root is None:
        return ""
    etree.strip_elements(root, *_HIDDEN, with_tail=False)
    return " ".join(" ".join(root.itertext()).split()).lower()


def is_parked(body: bytes) -> bool:
    """True when the page ``body`` is a parking or domain-sales page (see the module)."""
    lowered = body.lower()
    if names_a_service(lowered):
        return True
    return any(
        _PHRASES.search(page_text(body[start:end])) is not None
        for start, end in _text_spans(lowered)
    )


def names_a_service(lowered: bytes) -> bool:
    """True when the lower-cased markup names a parking or domain-sales service."""
    return any(
        anchor in lowered and any(name in lowered for name in names)
        for anchor, names in PARKING_SERVICES.items()
    )


def _text_spans(lowered: bytes) -> list[tuple[int, int]]:
    """The parts of the page worth reading: WINDOW bytes around each of the first
    MOST_KEYWORDS keywords that are not in a script, style or comment, merged."""
    present = [keyword for keyword in KEYWORDS if keyword in lowered]
    if not present:
        return []
    hidden = _hidden_spans(lowered)
    places: list[int] = []
    for keyword in present:
        at, found = lowered.find(keyword), 0
        while at >= 0 and found < MOST_KEYWORDS:
            if not any(start <= at < end for start, end in hidden):
                places.append(at)
                found += 1
            at = lowered.find(keyword, at + len(keyword))
    first = sorted(places)[:MOST_KEYWORDS]
    return _merged([(_outside(max(0, at - WINDOW), hidden), at + WINDOW) for at in first])


def _outside(start: int, hidden: list[tuple[int, int]]) -> int:
    """``start``, or the end of the script, style or comment it falls in (whose text a part
    of the page cut there would show as the page's)."""
    for begin, end in hidden:
        if begin < start < end:
            return end
    return start


def _hidden_spans(lowered: bytes) -> list[tuple[int, int]]:
    """Where the scripts, styles and comments of the page are (an unclosed one: to the end)."""
    spans: list[tuple[int, int]] = []
    for opening, closing in _HIDDEN_SPANS:
        start = lowered.find(opening)
        while start >= 0 and len(spans) < MOST_KEYWORDS:
            end = lowered.find(closing, start + len(opening))
            end = len(lowered) if end < 0 else end
            spans.append((start, end))
            start = lowered.find(opening, end)
    return spans


def _merged(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    merged: list[tuple[int, int]] = []
    for start, end in sorted(spans):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged
