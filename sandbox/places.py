"""Seeded map places: every category in every postal code has a fixed, reproducible list.

``build_places(seed)`` returns the same places for the same seed. A few (category, postal code)
pairs are pinned so tests can rely on them: "shop near 00501" needs several scroll loads,
"pharmacy near 00544" has a single match (the search redirects to its place page) and
"bakery near 01001" has none.

Searches overlap as on the real site when asked (``overlap=True``, the sandbox configuration's
``maps_overlap``): a search near a postal code lists its own places, then those of the codes
beside it (before and after it in ``POSTAL_CODES``), and each result links to its place with the
search's own viewport and parameters (:meth:`Place.link`); the place keeps its one feature id.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass
from urllib.parse import quote, quote_plus

DEFAULT_SEED = 7
CATEGORIES: dict[str, str] = {
    "shop": "Convenience store",
    "cafe": "Coffee shop",
    "pharmacy": "Pharmacy",
    "bakery": "Bakery",
}
POSTAL_CODES: dict[str, tuple[str, float, float]] = {
    "00501": ("Holtsville, NY", 40.8154, -73.0451),
    "00544": ("Holtsville, NY", 40.8132, -73.0476),
    "01001": ("Agawam, MA", 42.0702, -72.6227),
    "01002": ("Amherst, MA", 42.3671, -72.4646),
    "01003": ("Amherst, MA", 42.3919, -72.5248),
}
PINNED_COUNTS = {("shop", "00501"): 23, ("pharmacy", "00544"): 1, ("bakery", "01001"): 0}
STREETS = ("Main St", "Oak Ave", "Maple Dr", "Church St", "Elm St", "Park Rd", "Lake View Blvd")
NAME_WORDS = ("Corner", "Village", "Sunrise", "Harbor", "Liberty", "Golden", "Green", "Union")
DAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
PLUS_CODE_ALPHABET = "23456789CFGHJMPQRVWX"


@dataclass(frozen=True)
class Place:
    """One place as its page shows it; ``None`` fields are absent from the page."""

    place_id: str
    name: str
    category: str
    category_label: str
    postal_code: str
    rating: float | None
    review_count: int | None
    address: str
    phone: str | None
    website: str | None
    plus_code: str
    hours: str | None
    latitude: float
    longitude: float

    @property
    def path(self) -> str:
        """The place page's path, with the viewport (``/@``) and the pin (``!3d..!4d``)."""
        viewport = f"@{self.latitude + 0.0021:.7f},{self.longitude - 0.0034:.7f},17z"
        data = (
            f"data=!4m7!3m6!1s{self.place_id}!8m2!3d{self.latitude:.7f}!4d{self.longitude:.7f}"
            f"!16s{quote('/g/11')}{self.place_id[-6:]}"
        )
        return f"/maps/place/{quote_plus(self.name)}/{viewport}/{data}"

    def link(self, query: str) -> str:
        """The place's link in the feed of search ``query`` on overlapping searches: the
        viewport is the search's (its postal code's centre), and the data carries a token of the
        search (``!15s``) and the query string its parameters, as Google's links do."""
        code = _key(query).rpartition(" near ")[2]
        _, lat, lng = POSTAL_CODES.get(code, ("", self.latitude, self.longitude))
        token = hashlib.sha1(_key(query).encode()).hexdigest()[:16]
        data = (
            f"data=!4m7!3m6!1s{self.place_id}!8m2!3d{self.latitude:.7f}!4d{self.longitude:.7f}"
            f"!15s{token}!16s{quote('/g/11')}{self.place_id[-6:]}"
        )
        viewport = f"@{lat:.7f},{lng:.7f},14z"
        return f"/maps/place/{quote_plus(self.name)}/{viewport}/{data}?entry=ttu&g_ep={token[:8]}"


@dataclass(frozen=True)
class Places:
    """All places, by query ("<category> near <postal code>") and by id."""

    by_query: dict[str, tuple[Place, ...]]
    by_id: dict[str, Place]

    def search(self, query: str, overlap: bool = False) -> tuple[Place, ...]:
        """The places search ``query`` lists, in feed order; with ``overlap`` those of the
        postal codes beside its own too, after its own."""
        key = _key(query)
        own = self.by_query.get(key, ())
        category, _, code = key.rpartition(" near ")
        if not overlap or code not in POSTAL_CODES:
            return own
        beside = (self.by_query.get(query_for(category, near), ()) for near in _beside(code))
        return own + tuple(place for group in beside for place in group)

    def place_ids(self, overlap: bool = False) -> dict[str, list[str]]:
        """The ids of each search's places, in feed order, by query."""
        return {query: [p.place_id for p in self.search(query, overlap)] for query in self.by_query}


def query_for(category: str, postal_code: str) -> str:
    return f"{category} near {postal_code}"


def _key(query: str) -> str:
    return " ".join(query.lower().split())


def _beside(postal_code: str) -> list[str]:
    """The postal codes before and after ``postal_code`` in ``POSTAL_CODES``."""
    codes = list(POSTAL_CODES)
    at = codes.index(postal_code)
    return codes[max(0, at - 1) : at] + codes[at + 1 : at + 2]


def build_places(seed: int = DEFAULT_SEED) -> Places:
    """Every category in every postal code, deterministic for ``seed``."""
    by_query: dict[str, tuple[Place, ...]] = {}
    for category in CATEGORIES:
        for postal_code in POSTAL_CODES:
            rng = random.Random(f"{seed}:{category}:{postal_code}")
            count = PINNED_COUNTS.get((category, postal_code), rng.randint(2, 18))
            by_query[query_for(category, postal_code)] = tuple(
                _place(rng, category, postal_code, index) for index in range(count)
            )
    by_id = {place.place_id: place for group in by_query.values() for place in group}
    return Places(by_query, by_id)


def _place(rng: random.Random, category: str, postal_code: str, index: int) -> Place:
    town, lat, lng = POSTAL_CODES[postal_code]
    label = CATEGORIES[category]
    name = f"{rng.choice(NAME_WORDS)} {label} {index + 1}"
    rated = rng.random() < 0.85
    number = rng.randint(1, 999)
    return Place(
        place_id=f"0x{rng.getrandbits(60):x}:0x{rng.getrandbits(60):x}",
        name=name,
        category=category,
        category_label=label,
        postal_code=postal_code,
        rating=round(rng.uniform(2.5, 5.0), 1) if rated else None,
        review_count=rng.randint(1, 4000) if rated else None,
        address=f"{number} {rng.choice(STREETS)}, {town} {postal_code}",
        phone=f"(631) {rng.randint(200, 999)}-{rng.randint(0, 9999):04d}"
        if rng.random() < 0.8
        else None,
        website=f"https://{name.lower().replace(' ', '')}.example.com/"
        if rng.random() < 0.6
        else None,
        plus_code="".join(rng.choice(PLUS_CODE_ALPHABET) for _ in range(4))
        + "+"
        + "".join(rng.choice(PLUS_CODE_ALPHABET) for _ in range(2))
        + f" {town}",
        hours="; ".join(f"{day}, 8 AM to {rng.randint(5, 11)} PM" for day in DAYS)
        if rng.random() < 0.7
        else None,
        latitude=round(lat + rng.uniform(-0.03, 0.03), 7),
        longitude=round(lng + rng.uniform(-0.03, 0.03), 7),
    )
