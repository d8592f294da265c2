"""A durable, append-only local file for writes MongoDB could not take, replayed later.

Each line after the header is one upsert: the base64 of its BSON, so that whatever an item held
is replayed as it was (a value such as ``{"$date": 0}`` stays that dict). Files older workers
wrote, of one line of MongoDB extended JSON per upsert and no header, are read too. A file is
replayed a chunk at a time (at most REPLAY_CHUNK_RECORDS records, about REPLAY_CHUNK_BYTES), and
once a chunk is stored the header says how far the file is replayed: a worker killed mid-replay
leaves a file whose next replay starts at the first chunk not confirmed.

A worker holds an exclusive lock on its own file from before the file has its name until the
worker ends, so a later start (or another worker sharing the directory) replays only files no
live worker is appending to. A file left behind is claimed by one worker at a time: it holds the
file's lock while it replays it and removes it, and a worker that took the lock after the file
was removed leaves it alone.
"""

from __future__ import annotations

import base64
import binascii
import errno
import fcntl
import logging
import os
import re
import time
import uuid
from collections.abc import Generator, Iterable, Iterator
from contextlib import contextmanager, suppress
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

import bson
from bson import json_util
from bson.codec_options import CodecOptions

from crawler.config.values import collection_name

logger = logging.getLogger(__name__)

# {"collection", "filter", "update"}, "at" and "db" when spilled, "stale" when the upsert's
# fields add to a newer document (crawler/storage/changes.py's stale_update)
Record = dict[str, Any]

# A replay writes a file's records this many at a time at most, and a chunk ends once its lines
# reach this many bytes: what a replay holds at once, whatever the file's size.
REPLAY_CHUNK_RECORDS = 1000
REPLAY_CHUNK_BYTES = 4 << 20
# The first line of a file: how far it is replayed (the offset of its first record not stored),
# overwritten in place as chunks are stored.
_HEADER = re.compile(rb"#crawler-spill 2 replayed-to (\d{16})\n")
_HEADER_SIZE = len(b"#crawler-spill 2 replayed-to 0000000000000000\n")
# Seconds between two looks, while MongoDB is away, whether the file was removed.
KEEP_NAMED_EVERY = 1.0
_CODEC: CodecOptions[Record] = CodecOptions(tz_aware=True, tzinfo=UTC)


def _header(offset: int) -> bytes:
    return b"#crawler-spill 2 replayed-to %016d\n" % offset


class Replay:
    """The records of an open spill file not replayed yet, read a chunk at a time: after the
    caller stored a chunk, :meth:`done` records it as replayed (fsynced), and keeps the chunk's
    lines that are not records in ``<file>.rejected``."""

    def __init__(self, handle: IO[bytes], path: Path) -> None:
        self._handle = handle
        self.path = path
        handle.seek(0)
        header = _HEADER.fullmatch(handle.read(_HEADER_SIZE))
        # A file of older workers has no header: read from its start, its progress not kept.
        self._progress = header is not None
        self.replayed_to = max(int(header.group(1)), _HEADER_SIZE) if header else 0
        self._read_to = self.replayed_to
        self._rejected: list[bytes] = []

    def chunks(self) -> Iterator[list[Record]]:
        """The records after the replayed part, a chunk at a time (a chunk may hold none: its
        lines were all damaged)."""
        self._handle.seek(self.replayed_to)
        position = self.replayed_to
        records: list[Record] = []
        size = 0
        for line in self._handle:
            position += len(line)
            size += len(line)
            if line.strip():
                record = _record(line)
                if record is None:
                    self._rejected.append(line if line.endswith(b"\n") else line + b"\n")
                else:
                    records.append(record)
            if len(records) >= REPLAY_CHUNK_RECORDS or size >= REPLAY_CHUNK_BYTES:
                self._read_to = position
                yield records
                records, size = [], 0
        if position > self.replayed_to and self._read_to < position:
            self._read_to = position
            yield records

    def done(self) -> None:
        """The chunk last read is replayed: its damaged lines kept aside, then the header says
        so (a kill between the two keeps them twice, never loses a record)."""
        if self._rejected:
            _keep_rejected(self.path, self._rejected)
            self._rejected = []
        if self._progress:
            os.pwrite(self._handle.fileno(), _header(self._read_to), 0)
            os.fsync(self._handle.fileno())
        self.replayed_to = self._read_to


class SpillFile:
    """This worker's spill file, ``<dir>/<spider>-<pid>-<random>.jsonl``, locked while open."""

    def __init__(self, directory: Path, spider: str) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.directory = directory
        self.spider = spider
        name = f"{spider}-{os.getpid()}-{uuid.uuid4().hex[:8]}.jsonl"
        self.path = directory / name
        self._file = _new_locked(self.path)
        self._replayed_to = _HEADER_SIZE
        self.waiting = 0  # records appended since the file was last replayed whole
        self._next_check = 0.0  # monotonic time of the next keep_named
        self._said_unmade = False  # whether the ERROR that no new file can be made was said
        self.replayed_orphans: list[Path] = []  # files of dead workers replayed and removed

    def append(self, records: list[Record]) -> None:
        """Write the records and fsync: once this returns they survive a crash. One that
        fails (a full disk) leaves the file as it was, not a part of a line the next records
        would be joined to. A file removed from under the worker (a tmp cleaner, an operator)
        would take them with it: once fsynced, the path must still name the file written, or
        a new file takes what it held not replayed yet (:meth:`_moved`); when none can be made,
        the records are cut off again and OSError raised: they are not spilled."""
        descriptor = self._file.fileno()  # written unbuffered: nothing left behind to flush
        size = os.lseek(descriptor, 0, os.SEEK_END)
        try:
            _write_all(descriptor, _lines(records))
            os.fsync(descriptor)
            if not _still_named(self._file, self.path):
                self._moved(self.waiting + len(records))
        except OSError:
            os.ftruncate(descriptor, size)
            raise
        self.waiting += len(records)

    def _moved(self, records: int) -> None:
        """The file was removed (or its directory): a new one at its path, its directory made
        again if need be, holding the records the old one held not replayed yet (the batch just
        written with them), fsynced, before any of them counts as spilled. The old file stays
        open while no new one can be made: it still holds them for a replay or a later try."""
        gone = not self.directory.is_dir()
        try:
            if gone:
                self.directory.mkdir(parents=True, exist_ok=True)
            fresh = _new_locked(self.path, (self._file, self._replayed_to))
            if not _still_named(fresh, self.path):
                fresh.close()
                raise FileNotFoundError(errno.ENOENT, "removed again at once", str(self.path))
        except OSError as exc:
            said, self._said_unmade = self._said_unmade, True  # once per spell, then DEBUG
            logger.log(
                logging.DEBUG if said else logging.ERROR,
                "Spill file %s was removed while this worker wrote to it, and no new one can be "
                "made (%s): %d records are not spilled; the %d spilled before are only in the "
                "removed file, still open, until a new one can be made or MongoDB answers",
                self.path,
                exc,
                records - self.waiting,
                self.waiting,
            )
            raise
        self._said_unmade = False
        logger.warning(
            "Spill file %s was removed while this worker wrote to it%s: its %d records not "
            "replayed yet are in a new file of that name",
            self.path,
            " (its directory too, made again)" if gone else "",
            records,
        )
        self._file.close()
        self._file = fresh
        self._replayed_to = _HEADER_SIZE

    def check_due(self) -> bool:
        """Whether :meth:`keep_named` is due (once every KEEP_NAMED_EVERY seconds)."""
        now = time.monotonic()
        due = now >= self._next_check
        if due:
            self._next_check = now + KEEP_NAMED_EVERY
        return due

    def keep_named(self) -> None:
        """The file removed since the last append while it holds records not replayed yet: a
        new one takes them now, not at the next append (a kill meanwhile would lose them)."""
        if self.pending() and not _still_named(self._file, self.path):
            with suppress(OSError):  # said in an ERROR; tried again at the next check
                self._moved(self.waiting)

    def pending(self) -> bool:
        return os.fstat(self._file.fileno()).st_size > self._replayed_to

    def own(self) -> Replay:
        """This worker's records not replayed yet (appended from this thread alone)."""
        return Replay(self._file, self.path)

    def replayed(self, replay: Replay) -> None:
        """The own file replayed as far as ``replay`` went; once replayed whole, an empty file
        takes its name (atomically: the name holds one or the other, each saying what is left)."""
        self._replayed_to = replay.replayed_to
        if self.pending():
            return
        fresh = _new_locked(self.path)
        self._file.close()
        self._file = fresh
        self._replayed_to = _HEADER_SIZE
        self.waiting = 0

    def orphans(self) -> Generator[tuple[Path, Replay], None, None]:
        """Files of this spider left by workers that are gone, each to replay, locked until the
        caller asks for the next: the caller replays it and removes it."""
        for path in sorted(self.directory.glob(f"{self.spider}-*.jsonl")):
            if path != self.path and _written_by_a_worker_of(self.spider, path.name):
                with _claimed(path) as replay:
                    if replay is not None:
                        yield path, replay

    def close(self) -> None:
        if not self.pending():
            with suppress(FileNotFoundError, NotADirectoryError):
                self.path.unlink()  # while still locked: nobody claims it meanwhile
        else:
            self.keep_named()
        self._file.close()


def _new_locked(path: Path, body: tuple[IO[bytes], int] | None = None) -> IO[bytes]:
    """A new spill file named ``path`` (replacing any), with its header (and ``body``: the
    lines of another file from an offset), locked under a name no other worker looks at before
    it is named: never seen unlocked, nor without its header or all its lines."""
    hidden = path.with_name(f".{path.name}.new")
    descriptor = os.open(hidden, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    handle = os.fdopen(descriptor, "r+b")  # not O_APPEND: the header is written in place
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.write(descriptor, _header(_HEADER_SIZE))
        if body is not None:
            source, offset = body
            while chunk := os.pread(source.fileno(), 1 << 20, offset):
                _write_all(descriptor, chunk)
                offset += len(chunk)
        os.fsync(descriptor)
        os.rename(hidden, path)
        _sync(path.parent)  # the name survives a power loss as the records do
    except BaseException:
        handle.close()
        raise
    return handle


def _write_all(descriptor: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(descriptor, view) :]


def _written_by_a_worker_of(spider: str, name: str) -> bool:
    """Whether ``name`` is a spill file of ``spider``'s workers (``<spider>-<pid>-<random>``, or
    ``<spider>-<pid>`` as older workers named them), not one of a spider whose name begins with
    ``<spider>-`` (``books`` and ``books-fr`` sharing a directory)."""
    return re.fullmatch(re.escape(spider) + r"-\d+(-[0-9a-f]{8})?\.jsonl", name) is not None


@contextmanager
def _claimed(path: Path) -> Iterator[Replay | None]:
    """The file to replay, its lock held, if no live worker holds it and it is still there
    (another worker may have replayed and removed it since it was listed); else None."""
    try:
        handle = open(path, "r+b")  # noqa: SIM115  (written: how far it is replayed)
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
        yield Replay(handle, path) if _still_named(handle, path) else None


def _still_named(handle: IO[bytes], path: Path) -> bool:
    """Whether ``path`` still names the file ``handle`` has open."""
    try:
        named = path.stat()
    except (FileNotFoundError, NotADirectoryError):  # its directory removed, or a file there
        return False
    opened = os.fstat(handle.fileno())
    return (named.st_dev, named.st_ino) == (opened.st_dev, opened.st_ino)


def _keep_rejected(path: Path, lines: list[bytes]) -> None:
    """Lines of ``path`` that are not records (cut short when its writer was killed mid-append,
    before the fsync that confirms a write; or damaged), added to ``<path>.rejected``
    (fsynced), named."""
    kept = _keep_lines(path, "rejected", lines)
    logger.error("Spill file %s: %d lines are not records, kept in %s", path, len(lines), kept)


def keep_refused(path: Path, records: list[Record], first_reason: str) -> None:
    """Records of ``path`` that MongoDB refused, added to ``<path>.refused`` (fsynced), in the
    spill file's own lines (:func:`read_line` reads one), named."""
    kept = _keep_lines(path, "refused", [_lines(records)])
    logger.error(
        "MongoDB refused %d spilled upserts of %s (%s), kept in %s",
        len(records),
        path,
        first_reason,
        kept,
    )


def _lines(records: Iterable[Record]) -> bytes:
    """Records as a spill file holds them: one line each, the base64 of its BSON (lossless,
    unlike extended JSON, which reads a value such as ``{"$date": 0}`` as a date)."""
    return b"".join(base64.b64encode(bson.encode(record)) + b"\n" for record in records)


def read_line(line: bytes) -> Record:
    """The record of a spill file's line (of either format); raises ValueError if it holds
    none."""
    if line.lstrip().startswith(b"{"):  # extended JSON, as older workers wrote
        record = json_util.loads(line.decode())
    else:  # base64 has no "{"
        try:
            data = base64.b64decode(line.strip(), validate=True)
        except binascii.Error as exc:
            raise ValueError(str(exc)) from exc
        record = bson.decode(data, codec_options=_CODEC)
    if not isinstance(record, dict):
        raise ValueError("not a document")
    return record


def _keep_lines(path: Path, suffix: str, lines: list[bytes]) -> Path:
    kept = path.with_name(f"{path.name}.{suffix}")
    with open(kept, "ab") as out:
        out.write(b"".join(lines))
        out.flush()
        os.fsync(out.fileno())
    return kept


def _record(line: bytes) -> Record | None:
    """The upsert a line holds, or None: one MongoDB may take (into a collection, by one key)."""
    try:
        record = read_line(line)
        bson.encode({"filter": record.get("filter"), "update": record.get("update")})
    except Exception:  # the line is anything a damaged file holds
        return None
    valid = collection_name(record.get("collection")) and _key(record.get("filter"))
    if not isinstance(record.get("at", datetime.min), datetime):
        del record["at"]  # no spill time to go by: replayed as a record of an older file
    if not isinstance(record.get("db", ""), str) or record.get("db") == "":
        record.pop("db", None)  # no database named: the replaying run's
    if "stale" in record and not _update(record["stale"]):
        del record["stale"]  # what it adds to a newer document cannot be read: it adds nothing
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
