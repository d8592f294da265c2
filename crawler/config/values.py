"""Values of component settings, parsed where the settings are read and checked (table.py):
a DNS name server, MongoDB's write concern, an item's destination; and a spider's ``-a file=``."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pymongo import WriteConcern
from pymongo.errors import ConfigurationError
from twisted.internet.abstract import isIPAddress

from crawler.config.rules import SettingsError, problem

if TYPE_CHECKING:
    from scrapy.settings import BaseSettings


@dataclass(frozen=True)
class NameServer:
    host: str
    port: int = 53

    @classmethod
    def parse(cls, text: str) -> NameServer:
        """``host``, ``host:port``, ``[v6]`` or ``[v6]:port``; ValueError otherwise."""
        text = text.strip()
        if text.startswith("["):
            host, _, rest = text[1:].partition("]")
            port = rest.removeprefix(":") if rest else ""
        elif text.count(":") == 1:
            host, _, port = text.partition(":")
        else:
            host, port = text, ""
        if not isIPAddress(host) and ":" not in host:
            raise ValueError(f"{text!r}: a name server is an IP address")
        number = int(port) if port.isascii() and port.isdigit() else (53 if not port else -1)
        if not 0 < number < 65536:
            raise ValueError(f"{text!r}: port out of range")
        return cls(host, number)


WRITE_CONCERN_KEYS = frozenset({"w", "j", "wtimeout", "fsync"})
WRITE_CONCERN_ALLOWED = (
    'a dict of w (int >= 1 or a tag such as "majority"), j (bool), wtimeout (ms) and fsync '
    '(bool) for acknowledged writes, e.g. {"w": 1, "j": true}'
)


def write_concern(settings: BaseSettings) -> WriteConcern:
    """MONGO_WRITE_CONCERN as a WriteConcern, or SettingsError naming it."""
    raw = settings.get("MONGO_WRITE_CONCERN")
    try:
        values = settings.getdict("MONGO_WRITE_CONCERN")
        if not set(values) <= WRITE_CONCERN_KEYS:
            raise ValueError(f"unknown keys {sorted(set(values) - WRITE_CONCERN_KEYS)}")
        concern = WriteConcern(**values)
    except (TypeError, ValueError, ConfigurationError):
        raise SettingsError(problem("MONGO_WRITE_CONCERN", raw, WRITE_CONCERN_ALLOWED)) from None
    if not concern.acknowledged:
        raise SettingsError(problem("MONGO_WRITE_CONCERN", raw, WRITE_CONCERN_ALLOWED))
    return concern


# A MONGO_COLLECTIONS value for items stored elsewhere (another pipeline stores them).
NOT_STORED = ""


@dataclass(frozen=True)
class Destination:
    """A collection and the field its upserts are keyed on. ``partial``: the field's unique
    index covers only the documents where it is a non-empty string (the spider's own
    collection holds items with and without a ``url``)."""

    collection: str
    unique_key: str
    partial: bool = False


def collection_name(name: object) -> bool:
    """Whether ``name`` can name a MongoDB collection: not empty, no ``$`` nor NUL, no dot at
    either end, not one of MongoDB's own (``system.``)."""
    if not isinstance(name, str) or not name or "$" in name or "\0" in name:
        return False
    return not (name.startswith((".", "system.")) or name.endswith("."))


def parse_destination(value: Any) -> str | Destination:
    """A MONGO_COLLECTIONS value: ``"collection:key"``, or ``""`` for items not stored here."""
    text = str(value).strip()
    if text == NOT_STORED:
        return NOT_STORED
    collection, _, key = text.partition(":")
    if not collection_name(collection.strip()) or not key.strip() or "\0" in key:
        raise ValueError(value)
    return Destination(collection.strip(), key.strip())


def start_file(file: str) -> Path:
    """The file ``-a file=`` names, or SettingsError saying why it is none: no name given, a
    directory, or nothing at that path."""
    path = Path(file)
    if not file.strip():
        why = "no file named"
    elif path.is_dir():
        why = "a directory, not a file"
    elif not path.is_file():
        why = "no such file"
    else:
        return path
    raise SettingsError(f"-a file={file}: {why}")
