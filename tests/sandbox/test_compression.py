"""The sandbox compresses its answers as real targets do, and a switch turns that off."""

from __future__ import annotations

import gzip
import zlib
from urllib.error import HTTPError
from urllib.request import Request, urlopen

from tests.harness import Sandbox

PROFILE = "/@some.user"


def _get(sandbox: Sandbox, path: str, accept: str | None) -> tuple[str | None, bytes]:
    headers = {"Accept-Encoding": accept} if accept is not None else {}
    try:
        with urlopen(Request(f"{sandbox.url}{path}", headers=headers), timeout=10) as response:
            return response.headers.get("Content-Encoding"), response.read()
    except HTTPError as error:  # a ban's 403 is an answer too
        with error:
            return error.headers.get("Content-Encoding"), error.read()


def test_gzip_by_default_for_clients_that_accept_it(sandbox: Sandbox) -> None:
    coding, plain = _get(sandbox, PROFILE, None)
    assert coding is None
    coding, body = _get(sandbox, PROFILE, "gzip, deflate, br")
    assert coding == "gzip"
    assert gzip.decompress(body) == plain
    coding, body = _get(sandbox, PROFILE, "deflate, gzip;q=0")
    assert coding == "deflate"
    assert zlib.decompress(body) == plain


def test_ban_answers_are_compressed_too(sandbox: Sandbox) -> None:
    sandbox.admin("config", {"rate_limit": {"enabled": True, "max_requests": 1, "ban_mode": "403"}})
    _get(sandbox, PROFILE, None)
    coding, body = _get(sandbox, PROFILE, "gzip")
    assert coding == "gzip"
    assert b"Access Denied" in gzip.decompress(body)


def test_compression_can_be_switched_off(sandbox: Sandbox) -> None:
    assert sandbox.admin("config", {"compression": False})["compression"] is False
    coding, body = _get(sandbox, PROFILE, "gzip, deflate")
    assert coding is None
    assert body.startswith(b"<!DOCTYPE html>") or b"<html" in body[:200]
