"""The domains of a list file: a ``rank,domain`` CSV (a top list's) or one domain a line,
read a row at a time (a 10M-line list is never held whole)."""

from __future__ import annotations

import csv
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path


def csv_domains(path: Path) -> Iterator[str]:
    """The domains of a ``rank,domain`` CSV (or one domain a line), one row at a time; a first
    row whose rank is not a number is a header and skipped, blank rows too. A file that starts
    with a byte order mark (Excel's "CSV UTF-8") is read without it: its first domain is kept.
    Bytes that are not UTF-8 come as surrogates (:func:`not_utf8`), the row's own bytes kept."""
    with path.open(encoding="utf-8-sig", errors="surrogateescape", newline="") as lines:
        for number, row in enumerate(csv.reader(lines)):
            cells = [cell.strip() for cell in row]
            if not any(cells):
                continue
            if number == 0 and len(cells) > 1 and not cells[0].isdigit():
                continue
            yield cells[1] if len(cells) > 1 else cells[0]


def not_utf8(entry: str) -> bytes | None:
    """The bytes of a list's entry that is not UTF-8 (read with its surrogates), else None."""
    raw = entry.encode("utf-8", "surrogateescape")
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw
    return None
