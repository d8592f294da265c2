"""Spill files shared by the workers of one machine (crawler/storage/spill.py): a file left by a
dead worker is replayed by exactly one of the workers that start together, a live worker's file
by none, and a damaged file never stops a worker from starting."""

from __future__ import annotations

import multiprocessing
import tempfile
from multiprocessing.queues import Queue
from multiprocessing.synchronize import Barrier
from pathlib import Path
from typing import NamedTuple

import pytest
from bson import json_util
from hypothesis import given, settings
from hypothesis import strategies as st

from crawler.storage.spill import Record, Replay, SpillFile

SPIDER = "profiles"


def _record(n: int) -> Record:
    return {"collection": SPIDER, "filter": {"_id": n}, "update": [{"$set": {"n": n}}]}


def _read(replay: Replay) -> list[Record]:
    """Every record ``replay`` has left, each chunk marked replayed as it is read."""
    records: list[Record] = []
    for chunk in replay.chunks():
        records += chunk
        replay.done()
    return records


def _left_behind(directory: Path, name: str, records: list[Record]) -> None:
    """A spill file as a worker killed mid-crawl leaves it: not locked by anyone."""
    lines = "".join(json_util.dumps(record) + "\n" for record in records)
    (directory / f"{SPIDER}-{name}.jsonl").write_text(lines)


def _worker(directory: Path, together: Barrier, done: Barrier, out: Queue[Outcome]) -> None:
    """One worker starting: its spill file opened, the files left behind replayed and removed;
    once every worker got that far, whether its own file is still there and its own."""
    replayed: list[int] = []
    try:
        together.wait(timeout=60)
        spill = SpillFile(directory, SPIDER)
        for path, replay in spill.orphans():
            replayed.extend(record["filter"]["_id"] for record in _read(replay))  # stored, then:
            path.unlink()
        done.wait(timeout=60)
        spill.append([_record(-1)])
        own = spill.path.exists() and _read(spill.own()) == [_record(-1)]
        out.put(Outcome(replayed, own, ""))
    except BaseException as exc:
        done.abort()  # the others go on to their outcomes (a BrokenBarrierError)
        out.put(Outcome(replayed, False, repr(exc)))


class Outcome(NamedTuple):
    replayed: list[int]
    own_file_kept: bool
    error: str


def _start_together(directory: Path, workers: int) -> list[Outcome]:
    """``workers`` processes starting at once on ``directory``: what each one saw."""
    context = multiprocessing.get_context("fork")
    together, done, out = context.Barrier(workers), context.Barrier(workers), context.Queue()
    processes = [
        context.Process(target=_worker, args=(directory, together, done, out))
        for _ in range(workers)
    ]
    for process in processes:
        process.start()
    try:
        return [out.get(timeout=60) for _ in processes]
    finally:
        for process in processes:
            process.join(5)
            if process.is_alive():
                process.terminate()
                process.join()


def test_workers_starting_together_replay_each_dead_workers_file_once(tmp_path: Path) -> None:
    for round_ in range(8):
        directory = tmp_path / f"round-{round_}"
        directory.mkdir()
        dead = {n: [_record(n * 10 + k) for k in range(3)] for n in range(6)}
        for n, records in dead.items():
            _left_behind(directory, str(n), records)

        outcomes = _start_together(directory, workers=4)

        assert [o.error for o in outcomes] == [""] * 4, round_
        replayed = sorted(n for outcome in outcomes for n in outcome.replayed)
        assert replayed == sorted(r["filter"]["_id"] for rs in dead.values() for r in rs), round_
        assert all(outcome.own_file_kept for outcome in outcomes), round_


def test_a_live_workers_file_is_not_replayed_and_an_emptied_one_goes_at_close(
    tmp_path: Path,
) -> None:
    running = SpillFile(tmp_path, SPIDER)
    running.append([_record(1)])
    starting = SpillFile(tmp_path, SPIDER)
    assert list(starting.orphans()) == []
    starting.close()
    assert not starting.path.exists()

    running.close()  # MongoDB never came back: the file stays for the next start
    later = SpillFile(tmp_path, SPIDER)
    assert [(path, _read(replay)) for path, replay in later.orphans()] == [
        (running.path, [_record(1)])
    ]
    later.close()


def _orphans(directory: Path) -> list[tuple[Path, list[Record]]]:
    """The files left behind in ``directory`` as a worker starting there reads them."""
    spill = SpillFile(directory, SPIDER)
    try:
        return [(path, _read(replay)) for path, replay in spill.orphans()]
    finally:
        spill.close()


def _line(collection: str = '"c"', selector: str = '{"_id": 1}', update: str = "") -> bytes:
    """A line of JSON shaped as an upsert, with these parts (an update that writes, if none)."""
    update = update or '{"$set": {"a": 1}}'
    return f'{{"collection": {collection}, "filter": {selector}, "update": {update}}}'.encode()


# Lines that are not records: MongoDB would refuse them, or they would select or write
# something else than the writer's upserts do.
NOT_RECORDS = [
    _line(update='{"x": 1}'),  # not an operator
    _line(update="[]"),
    _line(update="[[]]"),
    _line(selector="{}"),  # any document
    _line(selector='{"_id": 1, "b": 2}'),
    _line(selector='{"$where": "1"}'),
    _line(selector="[]"),
    _line(collection="3"),
    _line(collection='""'),
    _line(collection='"pro$iles"'),
    _line(collection='"system.users"'),
    b'{"filter": {"_id": 1}, "update": {"$set": {}}}',
    _line(selector='{"_id": {"$oid": "zz"}}'),
    _line(selector='{"_id": {"$binary": {"base64": "AA=="}}}'),
    _line(selector='{"_id": {"$numberDecimal": "abc"}}'),
    _line(selector='{"_id": 99999999999999999999}'),
    _line(selector='{"a\\u0000": 1}'),
    b"[" * 5000,
    b"[1, 2]",
    b"\xff\xfe",
    _line()[:-12],  # cut short by a kill
]
lines = st.one_of(st.binary(max_size=60), st.text(max_size=60).map(str.encode))
damaged = st.one_of(lines, st.sampled_from(NOT_RECORDS)).filter(
    lambda line: b"\n" not in line and bool(line.strip())
)


@settings(max_examples=150)
@given(st.lists(st.one_of(st.integers(0, 99), damaged)), st.booleans())
def test_damaged_lines_are_kept_aside_and_every_record_is_replayed(
    content: list[int | bytes], torn: bool
) -> None:
    """An int stands for a record's line, bytes for a damaged one; ``torn``: the file ends
    without its last newline, as a kill mid-append leaves it."""
    with tempfile.TemporaryDirectory() as name:
        directory = Path(name)
        body = b"".join(
            (json_util.dumps(_record(part)).encode() if isinstance(part, int) else part) + b"\n"
            for part in content
        )
        left = directory / f"{SPIDER}-4242.jsonl"
        left.write_bytes(body[:-1] if torn and content and isinstance(content[-1], bytes) else body)

        orphans = _orphans(directory)

        expected = [_record(part) for part in content if isinstance(part, int)]
        assert orphans == [(left, expected)]
        damaged_lines = [part + b"\n" for part in content if isinstance(part, bytes)]
        rejected = directory / f"{left.name}.rejected"
        assert (rejected.read_bytes() if rejected.exists() else b"") == b"".join(damaged_lines)


def test_a_spill_name_that_cannot_be_read_is_named_and_passed_over(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / f"{SPIDER}-1.jsonl").mkdir()  # not a file: it cannot be opened as one
    _left_behind(tmp_path, "2", [_record(2)])
    assert _orphans(tmp_path) == [(tmp_path / f"{SPIDER}-2.jsonl", [_record(2)])]
    assert f"{SPIDER}-1.jsonl cannot be read" in caplog.text


def test_an_append_that_fails_leaves_no_part_of_a_line_for_the_next_to_join(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A full disk fails an append after part of it was written (its records are not stored:
    their requests are dead letters); the next append's records are read back whole."""
    spill = SpillFile(tmp_path, SPIDER)
    spill.append([_record(1)])

    def full_disk(descriptor: int) -> None:
        raise OSError(28, "No space left on device")

    with monkeypatch.context() as patch:
        patch.setattr("crawler.storage.spill.os.fsync", full_disk)
        with pytest.raises(OSError, match="No space left"):
            spill.append([_record(2), _record(3)])
    spill.append([_record(4)])
    assert _read(spill.own()) == [_record(1), _record(4)]
    assert not (tmp_path / f"{spill.path.name}.rejected").exists()
    spill.close()


def test_a_spider_replays_its_own_workers_files_not_those_of_a_spider_named_after_it(
    tmp_path: Path,
) -> None:
    """``profiles`` and ``profiles-fr`` share a spill directory: each replays its own."""
    _left_behind(tmp_path, "77", [_record(1)])  # profiles, as older workers named it
    _left_behind(tmp_path, "78-0123abcd", [_record(2)])  # profiles
    _left_behind(tmp_path, "fr-79-0123abcd", [_record(3)])  # profiles-fr's
    replayed = [path.name for path, _ in _orphans(tmp_path)]
    assert replayed == [f"{SPIDER}-77.jsonl", f"{SPIDER}-78-0123abcd.jsonl"]
