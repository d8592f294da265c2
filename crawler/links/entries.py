"""The ``links`` spider's start entries as text: the lines of ``-a file=`` and the checks a
start URL passes before it is requested (docs/spiders.md). Pure functions, no I/O but the file.

A list file holds a URL or a bare host a line, ``#`` comments and blank lines left out; a
``rank,domain`` line (a top list's CSV: Tranco's, Umbrella's, what the ``domains`` spider
reads) gives its domain, and a first line that is a header of words (``rank,domain``) is
skipped. A start URL is refused with the reason a user reads in ``links:start_urls:invalid``:
``bad_host`` for a host the downloader cannot look up (a comma, a space, an empty label, ...),
``url_too_long`` over LINKS_MAX_URL_LENGTH, ``bad_url`` for the rest.
"""

from __future__ import annotations

import re

from crawler.config.rules import SettingsError
from crawler.config.values import start_file
from crawler.links.urls import BadUrl, request_url

# A top list's line: its rank, then its domain.
_RANKED = re.compile(r"[0-9]+\s*,\s*([^,]+?)")
# A CSV header: words separated by commas.
_HEADER = re.compile(r"[A-Za-z][A-Za-z _-]*(?:,[A-Za-z][A-Za-z _-]*)+")


class RefusedStartUrl(ValueError):
    """A start URL not requested: ``reason`` is the slug it is set aside under."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


def file_entries(file: str) -> list[str]:
    """The entries of ``-a file=`` (see the module's docstring), UTF-8 and a BOM no part of
    them; SettingsError if it cannot be read or is not UTF-8."""
    try:
        text = start_file(file).read_text(encoding="utf-8-sig")
    except OSError as exc:
        raise SettingsError(f"-a file={file}: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        where = f"{exc.reason} at byte {exc.start}"
        raise SettingsError(f"-a file={file}: not UTF-8 ({where})") from None
    lines = [entry for line in text.splitlines() if (entry := line.strip()) and entry[0] != "#"]
    if lines and _HEADER.fullmatch(lines[0]):
        del lines[0]
    return [list_entry(line) for line in lines]


def list_entry(line: str) -> str:
    """The entry a list file's line gives: the domain of a ``rank,domain`` line, else the line."""
    ranked = _RANKED.fullmatch(line)
    return ranked.group(1) if ranked else line


def start_request_url(value: str, max_length: int) -> str:
    """The URL a start URL is requested by (``urls.request_url``), or RefusedStartUrl."""
    try:
        url = request_url(value)
    except BadUrl as exc:
        if exc.reason == "bad_host":
            raise RefusedStartUrl("bad_host", f"{value[:200]!r} names no host") from None
        raise RefusedStartUrl("bad_url", exc.reason) from None
    if len(url) > max_length:
        detail = f"{len(url)} characters, LINKS_MAX_URL_LENGTH is {max_length}"
        raise RefusedStartUrl("url_too_long", detail)
    return url
