"""devtools.beside, which runs the untimed tests on the CPU time the timed ones leave idle."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from devtools.beside import parse

POLICY = "import os; print('idle' if os.sched_getscheduler(0) == os.SCHED_IDLE else 'other')"


def beside(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "devtools.beside", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.skipif(not hasattr(os, "SCHED_IDLE"), reason="SCHED_IDLE is Linux's")
def test_the_idle_command_runs_idle_and_the_first_one_as_usual_printed_after_it() -> None:
    done = beside(
        sys.executable,
        "-c",
        POLICY,
        "--idle",
        sys.executable,
        "-c",
        POLICY.replace("print(", "print('second', "),
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].endswith("printed at the end")
    assert lines[1] == "second idle"
    # The first command keeps this process's policy (make unit runs this test idle itself).
    assert lines[-1] == ("idle" if os.sched_getscheduler(0) == os.SCHED_IDLE else "other")


@pytest.mark.parametrize(
    ("first", "idle", "ok", "status"),
    [
        (0, 0, [], 0),
        (5, 5, ["--ok", "5"], 0),
        (5, 0, [], 5),
        (3, 4, [], 3),
        (0, 4, ["--ok", "5,6"], 4),
        (-9, 0, [], 137),
    ],
)
def test_the_status_is_the_first_failure(first: int, idle: int, ok: list[str], status: int) -> None:
    def exiting(code: int) -> list[str]:
        if code < 0:
            return ["sh", "-c", f"kill {code} $$"]
        return ["sh", "-c", f"exit {code}"]

    assert beside(*ok, *exiting(first), "--idle", *exiting(idle)).returncode == status


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["true"],
        ["true", "--idle"],
        ["--idle", "true"],
        ["--ok"],
        ["--ok", "x", "a", "--idle", "b"],
        ["a", "--then", "--idle", "b"],
        ["--then", "a", "--idle", "b"],
        ["a", "--then", "--then", "b", "--idle", "c"],
    ],
)
def test_a_wrong_command_line_says_how_to_call_it(argv: list[str]) -> None:
    with pytest.raises(SystemExit, match="usage"):
        parse(argv)


def test_commands_given_with_then_run_in_turn_beside_the_idle_one(tmp_path: Path) -> None:
    """Each command starts once the one before it ended; the idle one runs beside them all (it
    ends only when the last one has made its file)."""
    last = tmp_path / "last"
    wait_for_last = f"for i in $(seq 300); do [ -e {last} ] && exit 0; sleep 0.1; done; exit 1"
    done = beside(
        "sh", "-c", "echo one",
        "--then", "sh", "-c", "echo two",
        "--then", "sh", "-c", f"echo three; touch {last}",
        "--idle", "sh", "-c", f"{wait_for_last}",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-3:] == ["one", "two", "three"]


@pytest.mark.parametrize(("ok", "ran"), [([], False), (["--ok", "5"], True)])
def test_a_failing_command_stops_those_after_it(tmp_path: Path, ok: list[str], ran: bool) -> None:
    after = tmp_path / "after"
    done = beside(*ok, "sh", "-c", "exit 5", "--then", "touch", str(after), "--idle", "true")
    assert done.returncode == (0 if ran else 5)
    assert after.exists() is ran


def test_a_stop_signal_stops_both_commands() -> None:
    beside = subprocess.Popen(
        [sys.executable, "-m", "devtools.beside", "sleep", "60", "--idle", "sleep", "60"],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert beside.stdout is not None
    assert beside.stdout.readline().startswith("==== sleep 60")
    started = time.monotonic()
    beside.send_signal(signal.SIGTERM)
    assert beside.wait(timeout=30) == 128 + signal.SIGTERM
    assert time.monotonic() - started < 30


def test_no_command_starts_after_a_stop_signal_and_the_run_fails(tmp_path: Path) -> None:
    """The first command and the idle one end well on SIGTERM: the one after the first still
    does not run, and the run is no success."""
    after = tmp_path / "after"

    def ends_well(ready: Path) -> str:
        return f"trap 'exit 0' TERM; touch '{ready}'; sleep 60 & wait"

    beside = subprocess.Popen(
        [sys.executable, "-m", "devtools.beside", "sh", "-c", ends_well(tmp_path / "first"),
         "--then", "touch", str(after), "--idle", "sh", "-c", ends_well(tmp_path / "idle")],
        stdout=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    deadline = time.monotonic() + 30
    while not ((tmp_path / "first").exists() and (tmp_path / "idle").exists()):
        assert time.monotonic() < deadline, "the commands did not start"
        time.sleep(0.05)
    beside.send_signal(signal.SIGTERM)
    assert beside.wait(timeout=30) == 128 + signal.SIGTERM
    assert not after.exists()


def test_a_command_in_turn_that_cannot_start_fails_the_run_and_keeps_the_output() -> None:
    done = beside(
        "sh", "-c", "echo one", "--then", "/nonexistent/command", "--then", "sh", "-c", "echo two",
        "--idle", "sh", "-c", "echo idle ran",
    )  # fmt: skip
    assert done.returncode == 127
    assert "/nonexistent/command" in done.stderr
    lines = done.stdout.splitlines()
    assert "idle ran" in lines
    assert "==== failed with status 127: /nonexistent/command" in lines
    assert lines[-1] == "one"  # the held output, printed; the step after it never ran


def test_a_failing_command_is_named_before_the_others_end(tmp_path: Path) -> None:
    """The idle command prints only once this test lets it: the failure comes before."""
    release = tmp_path / "release"
    wait = f"for i in $(seq 300); do [ -e '{release}' ] && break; sleep 0.1; done"
    beside = subprocess.Popen(
        [sys.executable, "-m", "devtools.beside", "sh", "-c", "exit 3",
         "--idle", "sh", "-c", f"{wait}; echo idle ended"],
        stdout=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    assert beside.stdout is not None
    assert beside.stdout.readline().startswith("==== sh -c exit 3 > ")
    assert beside.stdout.readline() == "==== failed with status 3: sh -c exit 3\n"
    release.touch()
    assert "idle ended" in beside.stdout.read().splitlines()
    assert beside.wait(timeout=30) == 3


def test_an_idle_command_that_cannot_start_ends_the_run_at_once() -> None:
    started = time.monotonic()
    done = beside("sleep", "60", "--idle", "/nonexistent/command")
    assert done.returncode != 0
    assert "/nonexistent/command" in done.stderr
    assert time.monotonic() - started < 30
