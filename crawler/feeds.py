"""Item feeds of a fleet (Scrapy's FEEDS): ``%(worker)s`` in a feed's URI names the worker.

Scrapy's ``%(time)s`` is to the second, and nothing else in a feed's URI tells two workers apart:
two workers of a fleet that start in the same second upload to the same key of a remote store
(``s3://``, ``gs://``, ``ftp://``), and the last upload replaces the other's items. The project's
FEED_URI_PARAMS (:func:`uri_params`) gives every URI a ``worker`` parameter, this machine's name
and the worker's process id; a crawl whose remote feed URI has none is warned about at start.
"""

from __future__ import annotations

import os
import socket
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

if TYPE_CHECKING:
    from scrapy import Spider
    from scrapy.settings import BaseSettings

# Stores where an upload replaces what a key held (a local file is appended to).
REMOTE_SCHEMES = frozenset({"s3", "gs", "ftp", "sftp"})
WORKER_PARAM = "%(worker)s"


def worker_name() -> str:
    """This worker, as a feed URI names it: the machine's name and the process id."""
    return f"{socket.gethostname()}-{os.getpid()}"


def uri_params(params: dict[str, Any], spider: Spider) -> dict[str, Any]:
    """FEED_URI_PARAMS: Scrapy's parameters (the spider's attributes, ``time``, ``batch_id``...)
    and ``worker`` (a spider attribute of that name wins)."""
    return {"worker": worker_name(), **params}


def shared_feed_uris(settings: BaseSettings) -> list[str]:
    """The FEEDS URIs on a remote store without ``%(worker)s``: every worker writes the same key."""
    uris = [str(uri) for uri in settings.getdict("FEEDS")]
    return [uri for uri in uris if _remote(uri) and WORKER_PARAM not in uri]


def _remote(uri: str) -> bool:
    try:
        return urlsplit(uri).scheme.lower() in REMOTE_SCHEMES
    except ValueError:
        return False
