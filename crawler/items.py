"""Items, each naming the MongoDB collection it is stored in and the field that identifies it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar, Protocol


class StoredItem(Protocol):
    """What the MongoDB pipeline needs to know about an item class."""

    collection: ClassVar[str]
    unique_key: ClassVar[str]


@dataclass
class VideoItem:
    """One video of an explore feed; a field of the wrong type is None (and counted).
    ``category`` is the category of the walk that found it (None for feeds without one, the
    recommend feed), ``categories`` the walk's category as a list (empty without one)."""

    collection: ClassVar[str] = "videos"
    unique_key: ClassVar[str] = "video_id"
    # Where the walk that found it was: not a change of the video.
    volatile_fields: ClassVar[frozenset[str]] = frozenset({"category"})
    # A field the feed answers null or leaves out (its counts at times, its author or text
    # seldom), and a walk without a category, leave the stored one: the last known.
    kept_fields: ClassVar[frozenset[str]] = frozenset(
        {
            *("digg_count", "play_count", "share_count", "comment_count", "collect_count"),
            *("created_at", "author_id", "author_unique_id", "category"),
        }
    )
    # Every category the video was ever found under.
    union_fields: ClassVar[frozenset[str]] = frozenset({"categories"})

    video_id: str
    description: str | None = None
    created_at: int | None = None
    author_id: str | None = None
    author_unique_id: str | None = None
    digg_count: int | None = None
    play_count: int | None = None
    share_count: int | None = None
    comment_count: int | None = None
    collect_count: int | None = None
    category: int | None = None
    categories: list[int] = field(default_factory=list)


@dataclass
class ProfileItem:
    """One profile page. ``status`` is "ok", "not_found", "private" or "banned"; the fields a
    status does not reveal (a private user's counts, everything of a missing user), and those
    whose value had the wrong type (counted as ``extract/bad_field/<name>``), are None (a count
    stored before stays: ``kept_fields``)."""

    collection: ClassVar[str] = "profiles"
    unique_key: ClassVar[str] = "unique_id"
    # The avatar URL is signed and expires (x-expires, x-signature query parameters): it
    # differs between fetches of an unchanged profile, so it is not a change.
    volatile_fields: ClassVar[frozenset[str]] = frozenset({"avatar_url"})
    # A field the page answers null or leaves out (a private profile shows no counts, a
    # missing one nothing) leaves the stored one: the last known; ``status`` says why.
    kept_fields: ClassVar[frozenset[str]] = frozenset(
        {
            *("follower_count", "following_count", "heart_count", "video_count"),
            *("digg_count", "friend_count", "user_id", "nickname", "signature", "verified"),
            *("private", "region", "sec_uid", "avatar_url", "created_at"),
        }
    )

    unique_id: str
    status: str
    layout: str | None = None
    user_id: str | None = None
    nickname: str | None = None
    signature: str | None = None
    verified: bool | None = None
    private: bool | None = None
    region: str | None = None
    sec_uid: str | None = None
    avatar_url: str | None = None
    created_at: int | None = None
    follower_count: int | None = None
    following_count: int | None = None
    heart_count: int | None = None
    video_count: int | None = None
    digg_count: int | None = None
    friend_count: int | None = None


@dataclass
class PlaceItem:
    """One place of a map listing, found first by search ``query``; what its page lacks is None."""

    collection: ClassVar[str] = "places"
    unique_key: ClassVar[str] = "place_id"

    place_id: str
    name: str
    url: str
    query: str
    rating: float | None = None
    review_count: int | None = None
    category: str | None = None
    address: str | None = None
    phone: str | None = None
    phone_e164: str | None = None
    website: str | None = None
    plus_code: str | None = None
    hours: str | None = None
    latitude: float | None = None
    longitude: float | None = None


@dataclass
class PageItem:
    """One HTML page of the ``links`` spider, keyed by ``url``: the canonical URL of the page
    fetched (after redirects; crawler/links/urls.py). ``final_url`` is that URL as the server
    gave it, ``requested_url`` the canonical URL asked for when a redirect led elsewhere (else
    None). ``content_hash`` is BLAKE2b-128 of the body as received (decompressed);
    ``out_links`` counts the distinct http(s) links on the page; ``fetched_at`` is epoch
    seconds. ``body`` (with LINKS_STORE_BODY) is the zlib-compressed body, cut to
    LINKS_BODY_MAX_BYTES before compression (``content_length`` says whether it was). Fields
    the page does not have (or that were unreadable, counted as ``extract/bad_field/<name>``)
    are None."""

    collection: ClassVar[str] = "pages"
    unique_key: ClassVar[str] = "url"
    # Differ between fetches of an unchanged page: not a change (crawler/recrawl/policy.py).
    volatile_fields: ClassVar[frozenset[str]] = frozenset({"fetched_at", "depth"})
    # The least depth stored is kept: a page found again by a shorter path (a start entry
    # fetched after a link to it, a link the frontier let through again) keeps the shortest.
    least_fields: ClassVar[frozenset[str]] = frozenset({"depth"})

    url: str
    host: str
    status: int
    final_url: str
    depth: int
    fetched_at: float
    content_hash: str
    content_length: int
    out_links: int
    content_type: str | None = None
    requested_url: str | None = None
    title: str | None = None
    language: str | None = None
    description: str | None = None
    canonical: str | None = None
    body: bytes | None = None


@dataclass
class DomainItem:
    """One domain of the ``domains`` sweep, keyed by ``domain`` (normalized:
    crawler/domains/normalize.py). ``status`` is its class and ``code`` the seed's number (1000 DNS,
    0 unreachable, else the HTTP status), as docs/spiders.md describes with every other field;
    ``response_time`` is seconds, ``checked_at`` epoch seconds, ``attempts`` the requests made;
    ``address`` is the address that answered, or that of a domain not probed because none of
    its addresses is public (class ``private_address``): no change of the domain when it is
    another (a name's addresses take turns); ``redirect_error`` is how the target of a redirect
    the domain answered failed (class ``redirect_failed``)."""

    collection: ClassVar[str] = "domains"
    unique_key: ClassVar[str] = "domain"
    volatile_fields: ClassVar[frozenset[str]] = frozenset(
        {"checked_at", "response_time", "attempts", "address"}
    )

    domain: str
    status: str
    code: int
    checked_at: float
    attempts: int = 1
    scheme: str | None = None
    final_url: str | None = None
    http_status: int | None = None
    response_time: float | None = None
    server: str | None = None
    title: str | None = None
    truncated: bool | None = None
    error: str | None = None
    http_error: str | None = None
    https_error: str | None = None
    address: str | None = None
    redirect_error: str | None = None


# Every item class stored in MongoDB; the pipeline creates their unique indexes at start.
STORED_ITEM_CLASSES: tuple[type[StoredItem], ...] = (
    *(VideoItem, ProfileItem, PlaceItem, PageItem, DomainItem),
)
