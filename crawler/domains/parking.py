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
page is not seen.
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
# Names of parking and domain-sales services in the markup (lower case).
PARKING_SERVICES = (
    "sedoparking",
    "sedo.com/search/details",
    "parkingcrew",
    "bodis.com",
    "parklogic",
    "parking-lander",  # GoDaddy's parked pages (img1.wsimg.com/parking-lander)
    "parkingpage.namecheap.com",
    "hugedomains.com",
    "afternic.com",
    "dan.com/buy-domain",
    "buydomains.com",
    "domainmarket.com",
    "undeveloped.com",
)
_PHRASES = re.compile("|".join(f"(?:{phrase})" for phrase in PARKING_PHRASES))
_SERVICES = re.compile(b"|".join(re.escape(name.encode()) for name in PARKING_SERVICES))
_HIDDEN = ("script", "style", "template")


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
    if _SERVICES.search(body.lower()):
        return True
    return _PHRASES.search(page_text(body)) is not None
