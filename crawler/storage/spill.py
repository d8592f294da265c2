"""A durable, append-only local file for writes MongoDB could not take, replayed later.

Each line is one upsert in MongoDB extended JSON. A worker holds an exclusive lock on its own
file from before the file has its name until the worker ends, so a later start (or another
worker sharing the directory) replays only files no live worker is appending to. A file left
behind is claimed by one worker at a time: it holds the file's lock while it replays it and
removes it, and a worker that took the lock after the file was removed leaves it alone.
"""

from __future__ import annotations

import fcntl
import logging
import os
import re
import uuid
from collections.abc import Generator, Iterable, Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import IO, Any

import bson
from bson import json_util

from crawler.config.values import collection_name

logger = logging.getLogger(__name__)

Record = dict[str, Any]  # {"collection", "filter", "update"}, "at" and "db" when spilled


class SpillFile:
    """This worker's spill file, ``<dir>/<spider>-<pid>-<random>.jsonl``, locked while open."""

    def __init__(self, directory: Path, spider: str) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.directory = directory
        self.spider = spider
        name = f"{spider}-{os.getpid()}-{uuid.uuid4().hex[:8]}.jsonl"
        self.path = directory / name
        # Locked under a name no other worker looks at, then named: never seen unlocked.
        hidden = directory / f".{name}.new"
        self._file: IO[bytes] = open(hidden, "a+b")  # noqa: SIM115
        fcntl.flock(self._file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.rename(hidden, self.path)
        _sync(directory)  # the name survives a power loss as the records do

    def append(self, records: list[Record]) -> None:
        """Write the records and fsync: once this returns they survive a crash. One that
        fails (a full disk) leaves the file as it was, not a part of a line the next records
        would be joined to."""
        data = memoryview(_lines(records))
        descriptor = self._file.fileno()  # written unbuffered: nothing left behind to flush
        size = os.lseek(descriptor, 0, os.SEEK_END)
        try:
            while data:
                data = data[os.write(descriptor, data) :]
            os.fsync(descriptor)
        except OSError:
            os.ftruncate(descriptor, size)
            raise

    def pending(self) -> bool:
        return self.path.stat().st_size > 0

    def read_own(self) -> list[Record]:
        self._file.seek(0)
        return _records(self._file, self.path)

    def clear_own(self) -> None:
        self._file.truncate(0)
        self._file.flush()
        os.fsync(self._file.fileno())

    def orphans(self) -> Generator[tuple[Path, list[Record]], None, None]:
        """Files of this spider left by workers that are gone, with their records, each one
        locked until the caller asks for the next: the caller replays it and removes it."""
        for path in sorted(self.directory.glob(f"{self.spider}-*.jsonl")):
            if path != self.path and _written_by_a_worker_of(self.spider, path.name):
                with _claimed(path) as records:
                    if records is not None:
                        yield path, records

    def close(self) -> None:
        if not self.pending():
            self.path.unlink(missing_ok=True)  # while still locked: nobody claims it meanwhile
        self._file.close()


def _written_by_a_worker_of(spider: str, name: str) -> bool:
    """Whether ``name`` is a spill file of ``spider``'s workers (``<spider>-<pid>-<random>``, or
    ``<spider>-<pid>`` as older workers named them), not one of a spider whose name begins with
    ``<spider>-`` (``books`` and ``books-fr`` sharing a directory)."""
    return re.fullmatch(re.escape(spider) + r"-\d+(-[0-9a-f]{8})?\.jsonl", name) is not None


@contextmanager
def _claimed(path: Path) -> Iterator[list[Record] | None]:
    """The file's records, its lock held, if no live worker holds it and it is still there
    (another worker may have replayed and removed it since it was listed); else None."""
    try:
        handle = open(path, "rb")  # noqa: SIM115
    except OSError as exc:  # gone since it was listed, or not ours to read
        if not isinstance(exc, FileNotFoundError):
            logger.error("Spill file %s cannot be read, left for later: %s", path, exc)
        yield None
        return
    with handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield None
            return
        yield _records(handle, path) if _still_named(handle, path) else None


def _still_named(handle: IO[bytes], path: Path) -> bool:
    """Whether ``path`` still names the file ``handle`` has open."""
    try:
        named = path.stat()
    except FileNotFoundError:
        return False
    opened = os.fstat(handle.fileno())
    return (named.st_dev, named.st_ino) == (opened.st_dev, opened.st_ino)


def _records(handle: IO[bytes], path: Path) -> list[Record]:
    """The file's records. A line that is not one (cut short when its writer was killed
    mid-append, before the fsync that confirms a write; or damaged) is left out of them and
    kept in ``<file>.rejected``, named in an ERROR, before the file is replayed and removed."""
    records, rejected = [], []
    for line in handle:
        if line.strip():
            record = _record(line)
            if record is None:
                rejected.append(line if line.endswith(b"\n") else line + b"\n")
            else:
                records.append(record)
    if rejected:
        _keep_rejected(path, rejected)
    return records


def _keep_rejected(path: Path, lines: list[bytes]) -> None:
    """The lines of ``path`` that are not records, in ``<path>.rejected`` (fsynced), named:
    each read of the file writes all of them again."""
    kept = _keep_lines(path, "rejected", lines, "wb")
    logger.error("Spill file %s: %d lines are not records, kept in %s", path, len(lines), kept)


def keep_refused(path: Path, records: list[Record], first_reason: str) -> None:
    """Records of ``path`` that MongoDB refused, added to ``<path>.refused`` (fsynced), named
    (once a replay of the file ended: a file kept for later is not replayed twice into it)."""
    kept = _keep_lines(path, "refused", [_lines(records)], "ab")
    logger.error(
        "MongoDB refused %d spilled upserts of %s (%s), kept in %s",
        len(records),
        path,
        first_reason,
        kept,
    )


def _lines(records: Iterable[Record]) -> bytes:
    """Records as a spill file holds them: one line of MongoDB extended JSON each."""
    return "".join(json_util.dumps(record) + "\n" for record in records).encode()


def _keep_lines(path: Path, suffix: str, lines: list[bytes], mode: str) -> Path:
    kept = path.with_name(f"{path.name}.{suffix}")
    with open(kept, mode) as out:
        out.write(b"".join(lines))
        out.flush()
        os.fsync(out.fileno())
    return kept


def _record(line: bytes) -> Record | None:
    """The upsert a line holds, or None: one MongoDB may take (into a collection, by one key)."""
    try:
        record = json_util.loads(line.decode())
        if not isinstance(record, dict):
            return None
        bson.encode({"filter": record.get("filter"), "update": record.get("update")})
    except Exception:  # the line is anything a damaged file holds
        return None
    valid = collection_name(record.get("collection")) and _key(record.get("filter"))
    if not isinstance(record.get("at", datetime.min), datetime):
        del record["at"]  # no spill time to go by: replayed as a record of an older file
    if not isinstance(record.get("db", ""), str) or record.get("db") == "":
        record.pop("db", None)  # no database named: the replaying run's
    return record if valid and _update(record.get("update")) else None


def _key(selector: Any) -> bool:
    """Whether ``selector`` selects by one field's value, as the writer's filters do."""
    if not isinstance(selector, dict) or len(selector) != 1:
        return False
    return not str(next(iter(selector))).startswith("$")


def _update(update: Any) -> bool:
    """Whether ``update`` is one MongoDB takes: operators, or a pipeline of stages."""
    stages = update if isinstance(update, list) else [update]
    return bool(stages) and all(_operators(stage) for stage in stages)


def _operators(part: Any) -> bool:
    return isinstance(part, dict) and bool(part) and all(str(key).startswith("$") for key in part)


def _sync(directory: Path) -> None:
    """fsync a directory: the names made in it are on disk."""
    descriptor = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)
