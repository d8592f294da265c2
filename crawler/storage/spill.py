"""A durable, append-only local file for writes MongoDB could not take, replayed later.

Each line is one upsert in MongoDB extended JSON. A worker holds an exclusive lock on its own
file while it runs, so a later start (or another worker on the same machine) replays only files
no live worker is appending to.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from bson import json_util

Record = dict[str, Any]  # {"collection", "filter", "update"}


class SpillFile:
    """This worker's spill file: ``<dir>/<spider>-<pid>.jsonl``, locked while open."""

    def __init__(self, directory: Path, spider: str) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.directory = directory
        self.spider = spider
        self.path = directory / f"{spider}-{os.getpid()}.jsonl"
        self._file: IO[str] = open(self.path, "a+", encoding="utf-8")  # noqa: SIM115
        fcntl.flock(self._file, fcntl.LOCK_EX | fcntl.LOCK_NB)

    def append(self, records: list[Record]) -> None:
        """Write the records and fsync: once this returns they survive a crash."""
        self._file.write("".join(json_util.dumps(record) + "\n" for record in records))
        self._file.flush()
        os.fsync(self._file.fileno())

    def pending(self) -> bool:
        return self.path.stat().st_size > 0

    def read_own(self) -> list[Record]:
        self._file.seek(0)
        return [json_util.loads(line) for line in self._file if line.strip()]

    def clear_own(self) -> None:
        self._file.truncate(0)
        self._file.flush()
        os.fsync(self._file.fileno())

    def orphans(self) -> Iterator[tuple[Path, list[Record]]]:
        """Files of this spider left by workers that are gone, with their records."""
        for path in sorted(self.directory.glob(f"{self.spider}-*.jsonl")):
            if path == self.path:
                continue
            records = _read_unlocked(path)
            if records is not None:
                yield path, records

    def close(self) -> None:
        empty = not self.pending()
        self._file.close()
        if empty:
            self.path.unlink(missing_ok=True)


def _read_unlocked(path: Path) -> list[Record] | None:
    """The file's records if no live worker holds its lock, else None."""
    with open(path, encoding="utf-8") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return None
        return [json_util.loads(line) for line in handle if line.strip()]
