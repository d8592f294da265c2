"""One masking function for every URL the crawler prints: no form of URL lets a password through."""

from __future__ import annotations

from urllib.parse import quote

import pytest
from hypothesis import assume, example, given, settings
from hypothesis import strategies as st

from crawler.uris import mask_uri

SCHEMES = [
    "redis://",
    "rediss://",
    "mongodb://",
    "mongodb+srv://",
    "http://",
    "socks5://",
    "//",
    "",
]
HOSTS = st.sampled_from(
    ["127.0.0.1", "localhost", "[::1]", "[2001:db8::7]", "db.example.com", "h1:27017,h2:27018"]
)
PORTS = st.one_of(st.just(""), st.integers(1, 65535).map(lambda port: f":{port}"))
# What a password may hold once written in a user info (RFC 3986): unreserved characters,
# sub-delims, ":" and anything else percent-encoded. A raw "/", "?", "#" or "@" would end or
# move the authority for every client (urllib, redis-py, pymongo), so it is never raw here.
USERINFO_CHARACTERS = "abcdefXYZ0123456789-._~!$&'()*+,;=:"
PASSWORDS = st.lists(
    st.one_of(
        st.sampled_from(USERINFO_CHARACTERS),
        st.characters(codec="utf-8").map(lambda char: quote(char, safe="")),
    ),
    min_size=4,
    max_size=24,
).map("".join)
SAFE_PASSWORDS = st.text("abcdefXYZ0123456789-_.~!$'()*+,", min_size=4, max_size=24)
USERS = st.sampled_from(["", "crawler", "puser", "user@example.com", "default"])
PATHS = st.sampled_from(["", "/", "/0", "/db", "/db?authSource=admin", "/0?db=1&ssl=true"])
SECRET_PARAMS = st.sampled_from(["password", "pass", "token", "api_key", "X-Amz-Signature"])


def _assert_hidden(url: str, password: str) -> None:
    masked = mask_uri(url)
    assert password not in masked, (url, masked)
    assert quote(password, safe="") not in masked, (url, masked)


@given(
    scheme=st.sampled_from(SCHEMES),
    user=USERS,
    password=PASSWORDS,
    host=HOSTS,
    port=PORTS,
    path=PATHS,
)
@settings(max_examples=400, deadline=None)
@example("redis://", "", "s3cret-Pa55", "127.0.0.1", ":6379", "/0")
@example("redis://", "", "pa%2Fss%3Fw%23rd%40x", "127.0.0.1", ":6379", "/0")
@example("mongodb+srv://", "crawler", "p%40ss:w%2Frd", "h1:27017,h2:27018", "", "/db")
@example("http://", "puser", "a:b;c=d&e", "[::1]", ":3128", "/@someone")
def test_a_password_in_the_user_info_never_shows(
    scheme: str, user: str, password: str, host: str, port: str, path: str
) -> None:
    url = f"{scheme}{user}:{password}@{host}{port}{path}"
    assume(password not in url.replace(password, "", 1) and "***" not in password)
    _assert_hidden(url, password)
    assert f"@{host}{port}{path}" in mask_uri(url)


@given(
    scheme=st.sampled_from(SCHEMES),
    host=HOSTS,
    port=PORTS,
    path=st.sampled_from(["", "/", "/0", "/db"]),
    name=SECRET_PARAMS,
    password=st.one_of(SAFE_PASSWORDS, PASSWORDS.map(lambda text: quote(text, safe="%"))),
    before=st.sampled_from(["", "db=1&", "ssl=true&tls=1&"]),
    after=st.sampled_from(["", "&db=2", "&appName=crawler#frag"]),
)
@settings(max_examples=300, deadline=None)
def test_a_password_in_the_query_never_shows(
    scheme: str,
    host: str,
    port: str,
    path: str,
    name: str,
    password: str,
    before: str,
    after: str,
) -> None:
    url = f"{scheme}{host}{port}{path}?{before}{name}={password}{after}"
    assume(password not in url.replace(password, "", 1) and "***" not in password)
    _assert_hidden(url, password)


@given(
    st.text(st.characters(codec="utf-8", exclude_characters="/?#"), max_size=80),
    PASSWORDS,
)
@settings(max_examples=300, deadline=None)
def test_any_authority_with_a_password_behind_an_at_sign_hides_it(
    prefix: str, password: str
) -> None:
    url = f"{prefix}:{password}@127.0.0.1:1/0"
    assume(password not in url.replace(password, "", 1) and "***" not in password)
    _assert_hidden(url, password)


@given(
    scheme=st.sampled_from(["http://", "https://", "//", ""]),
    host=HOSTS,
    port=PORTS,
    user=st.from_regex(r"[a-z0-9._]{1,24}", fullmatch=True),
    rest=st.sampled_from(["", "/", "?x=1", "/video/7", "#top", "?lang=en&x=@y"]),
)
@settings(max_examples=200, deadline=None)
@example("http://", "127.0.0.1", ":8080", "user", "")
@example("https://", "www.tiktok.com", "", "a.b", "?x=1")
def test_an_at_sign_in_the_path_is_left_alone(
    scheme: str, host: str, port: str, user: str, rest: str
) -> None:
    url = f"{scheme}{host}{port}/@{user}{rest}"
    assert mask_uri(url) == url


@pytest.mark.parametrize(
    ("url", "masked"),
    [
        ("redis://127.0.0.1:6379/0", "redis://127.0.0.1:6379/0"),
        ("redis://:pw@127.0.0.1:6379/0", "redis://:***@127.0.0.1:6379/0"),
        ("redis://127.0.0.1:6379/0?password=pw&db=1", "redis://127.0.0.1:6379/0?password=***&db=1"),
        (
            "rediss://default:pw@cache.example.com:6380",
            "rediss://default:***@cache.example.com:6380",
        ),
        (
            "mongodb+srv://crawler:pw@cluster0.example.net/db?authSource=admin",
            "mongodb+srv://crawler:***@cluster0.example.net/db?authSource=admin",
        ),
        ("mongodb://u:p%40w@h1:1,h2:2,[::1]:3/?rs=x", "mongodb://u:***@h1:1,h2:2,[::1]:3/?rs=x"),
        ("http://puser:pw@[::1]:3128", "http://puser:***@[::1]:3128"),
        ("http://APIKEY:@proxy.example.com:8011", "http://***@proxy.example.com:8011"),
        ("puser:pw@127.0.0.1:3128", "puser:***@127.0.0.1:3128"),
        ("127.0.0.1:6379?token=t", "127.0.0.1:6379?token=***"),
        ("unix:///run/redis.sock?db=0&password=pw", "unix:///run/redis.sock?db=0&password=***"),
        ("http://127.0.0.1:8080/@user", "http://127.0.0.1:8080/@user"),
        ("https://www.tiktok.com/@a.b?x=1", "https://www.tiktok.com/@a.b?x=1"),
        ("http://u:pw@h:1/@x", "http://u:***@h:1/@x"),
        ("http://u@h:1/@x?token=t", "http://***@h:1/@x?token=***"),
        ("https://h/@a#access_token=t&b=1", "https://h/@a#access_token=***&b=1"),
    ],
)
def test_what_masked_urls_look_like(url: str, masked: str) -> None:
    assert mask_uri(url) == masked
