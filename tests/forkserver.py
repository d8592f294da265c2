"""``python -m scrapy ...`` for the tests, at a fraction of the CPU: a process that imported
Scrapy and the project's commands once forks a child per command, and the child runs the
command as ``python -m scrapy`` does (``runpy``), with the test's arguments, environment,
directory and output files.

A test suite starts a few hundred Scrapy processes, and each spent about 0.6 s of CPU importing
Scrapy and the project before doing anything: about a third of the suite's CPU. The child is a
real process of its own, with its own pid: the tests stop it, kill -9 it and read its exit
status and output as they would a ``subprocess.Popen``.

What the child gets that a fresh ``python -m scrapy`` would not: Scrapy's crawl machinery
imported before its command runs (every command imports the project's commands, so those are
imported either way; spiders and what only they use are imported in the child), the
server's seed for ``hash()`` of strings (the project relies on neither), what the server
imported left out of the garbage collector's reach (``gc.freeze``: it is never garbage), and
``faulthandler`` on (a crawl's environment has PYTHONFAULTHANDLER=1 for a fresh one too).
``crawler.settings`` reads the environment when it runs, so the child runs it again with its
own. The server installs no Twisted reactor and starts no thread, and checks both before it
serves. A command run elsewhere than the project's directory, or with another ``PYTHONPATH``,
is started the ordinary way (``forkable``), and so is every command with CRAWLER_TEST_FORK=0.

Run as ``python -m tests.forkserver SOCKET``: it prints ``ready`` once it listens, and exits when
its standard input closes (the test process that started it is gone), removing its directory
(the socket, and the log of its stderr).
"""

from __future__ import annotations

import array
import contextlib
import faulthandler
import gc
import json
import os
import runpy
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Mapping, Sequence
from importlib import import_module, reload
from pathlib import Path
from typing import IO, Any

from scrapy.utils.misc import walk_modules_iter

ROOT = Path(__file__).resolve().parents[1]

# Modules imported once, in the server: Scrapy's crawl machinery, and then what every
# ``scrapy`` command of the project imports before it runs (Scrapy imports every module of the
# settings' COMMANDS_MODULE). The spiders and what only they use are imported in the child, as
# a fresh command would.
PRELOAD = (
    "scrapy.cmdline",
    "scrapy.crawler",
    "scrapy.core.engine",
    "scrapy.core.downloader.handlers.http11",
    "scrapy.extensions.telnet",
    "scrapy.pipelines",
)
READS_THE_ENVIRONMENT = "crawler.settings"  # when it runs: the child runs it again
MAX_REQUEST = 1 << 20


def preload() -> None:
    """Import what every Scrapy command of the project imports, then check the fork is safe."""
    for name in PRELOAD:
        import_module(name)
    list(walk_modules_iter(import_module(READS_THE_ENVIRONMENT).COMMANDS_MODULE))
    assert "twisted.internet.reactor" not in sys.modules, "a reactor was installed"
    assert threading.active_count() == 1, "a thread was started: forking is unsafe"


def serve(path: str) -> dict[str, Any]:
    """Fork a child per request on the socket at ``path``; return (in the child only) its
    request. Each request's connection gets the child's pid, then its exit status."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    listener.bind(path)
    listener.listen(64)
    wake_read, wake_write = os.pipe()
    os.set_blocking(wake_write, False)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    signal.set_wakeup_fd(wake_write)
    waiting: dict[int, socket.socket] = {}
    # Ctrl-C reaches the server too (pytest's process group): it goes on until pytest is gone,
    # and each child gets SIGINT as the server got it.
    interrupt = signal.signal(signal.SIGINT, signal.SIG_IGN)
    print("ready", flush=True)
    while True:
        readable, _, _ = select.select([listener, wake_read, sys.stdin], [], [])
        if sys.stdin in readable and not os.read(sys.stdin.fileno(), 4096):
            shutil.rmtree(os.path.dirname(path), ignore_errors=True)
            os._exit(0)
        if wake_read in readable:
            os.read(wake_read, 4096)
            report_exits(waiting)
        if listener in readable:
            connection, _ = listener.accept()
            try:
                request, fds = receive(connection)
            except (OSError, ValueError) as exc:  # a requester gone, or a broken request
                print(f"fork server: request refused: {exc!r}", file=sys.stderr, flush=True)
                connection.close()
                continue
            pid = os.fork()
            if pid == 0:
                signal.set_wakeup_fd(-1)
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                signal.signal(signal.SIGINT, interrupt)
                for held in (listener, connection, *waiting.values()):
                    held.close()
                for fd in (wake_read, wake_write):
                    os.close(fd)
                adopt(request, fds)
                return request
            for fd in fds:
                os.close(fd)
            waiting[pid] = connection
            with contextlib.suppress(OSError):  # its requester went away: it still gets reaped
                connection.sendall(json.dumps({"pid": pid}).encode())


def receive(connection: socket.socket) -> tuple[dict[str, Any], list[int]]:
    """A request (argv, env, cwd) and its three file descriptors: stdin, stdout, stderr."""
    fds = array.array("i")
    message, ancillary, _, _ = connection.recvmsg(MAX_REQUEST, socket.CMSG_LEN(3 * fds.itemsize))
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(data[: len(data) - (len(data) % fds.itemsize)])
    return json.loads(message), list(fds)


def report_exits(waiting: dict[int, socket.socket]) -> None:
    """Send each finished child's exit status (``Popen.returncode``'s form) to its requester."""
    while waiting:
        pid, status = os.waitpid(-1, os.WNOHANG)
        if pid == 0:
            return
        connection = waiting.pop(pid, None)
        if connection is not None:
            with contextlib.suppress(OSError):  # the test process went away
                connection.sendall(json.dumps({"exit": os.waitstatus_to_exitcode(status)}).encode())
            connection.close()


def adopt(request: dict[str, Any], fds: list[int]) -> None:
    """Become the requested command's process: its stdio, directory, environment and path."""
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    sys.argv = list(request["argv"])
    sys.path[0] = request["cwd"]
    reload(sys.modules[READS_THE_ENVIRONMENT])


class Forked:
    """A command the server forked: the part of ``subprocess.Popen`` the tests use."""

    def __init__(self, args: Sequence[str], connection: socket.socket) -> None:
        self.args = list(args)
        self.connection = connection
        self.pid: int = self.message()["pid"]
        self.returncode: int | None = None

    def message(self, timeout: float | None = None) -> dict[str, Any]:
        self.connection.settimeout(timeout)
        try:
            data = self.connection.recv(4096)
        except (TimeoutError, BlockingIOError):
            raise subprocess.TimeoutExpired(self.args, timeout or 0) from None
        if not data:
            raise RuntimeError(f"the fork server went away before the command ended: {SERVER}")
        message: dict[str, Any] = json.loads(data)
        return message

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            self.returncode = int(self.message(timeout)["exit"])
            self.connection.close()
        return self.returncode

    def poll(self) -> int | None:
        try:
            return self.wait(0)
        except subprocess.TimeoutExpired:
            return None

    def send_signal(self, signal_number: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, signal_number)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


class Server:
    """This test process's fork server, started when first asked for a command."""

    def __init__(self) -> None:
        self.process: subprocess.Popen[str] | None = None
        self.path = ""
        self.log = Path(os.devnull)

    def start(self) -> None:
        directory = tempfile.mkdtemp(prefix="crawler-forkserver-")
        self.path = os.path.join(directory, "socket")
        self.log = Path(directory) / "server.log"
        with open(self.log, "wb") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "tests.forkserver", self.path],
                cwd=ROOT,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
                text=True,
            )
        assert self.process.stdout is not None
        if self.process.stdout.readline().strip() != "ready":
            raise RuntimeError(f"the fork server did not start: exit {self.process.wait()}: {self}")

    def __str__(self) -> str:
        """What the server wrote to its stderr (a traceback, if it died), in its log."""
        tail = self.log.read_text(errors="replace")[-3000:] if self.log.exists() else ""
        return f"its log {self.log}:\n{tail}"

    def fork(self, args: Sequence[str], env: Mapping[str, str], stdout: int, stderr: int) -> Forked:
        if self.process is None or self.process.poll() is not None:
            self.start()
        request = {"argv": ["scrapy", *args[3:]], "env": dict(env), "cwd": str(ROOT)}
        connection = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        connection.connect(self.path)
        with open(os.devnull, "rb") as stdin:
            fds = array.array("i", [stdin.fileno(), stdout, stderr])
            connection.sendmsg(
                [json.dumps(request).encode()], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, fds)]
            )
        return Forked(args, connection)


SERVER = Server()
SCRAPY = (sys.executable, "-m", "scrapy")


def forkable(args: Sequence[str], cwd: Path, env: Mapping[str, str]) -> bool:
    """Whether ``args`` can run in a forked child: ``python -m scrapy`` in the project, with
    this process's ``PYTHONPATH``, unless CRAWLER_TEST_FORK=0."""
    return (
        tuple(args[:3]) == SCRAPY
        and Path(cwd) == ROOT
        and env.get("PYTHONPATH") == os.environ.get("PYTHONPATH")
        and os.environ.get("CRAWLER_TEST_FORK", "1") != "0"
    )


def start(
    args: Sequence[str], cwd: Path, env: Mapping[str, str], stdout: IO[Any], stderr: IO[Any]
) -> Forked | subprocess.Popen[bytes]:
    """``args`` running, forked when it can be, its output to the ``stdout`` and ``stderr``
    files."""
    if forkable(args, cwd, env):
        return SERVER.fork(args, env, stdout.fileno(), stderr.fileno())
    return subprocess.Popen(args, cwd=cwd, env=dict(env), stdout=stdout, stderr=stderr)


def run(
    args: Sequence[str], cwd: Path, env: Mapping[str, str], timeout: float | None = None
) -> subprocess.CompletedProcess[str]:
    """``subprocess.run(args, capture_output=True, text=True)``, forked when it can be."""
    if not forkable(args, cwd, env):
        return subprocess.run(
            args, cwd=cwd, env=dict(env), capture_output=True, text=True, timeout=timeout
        )
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        process = SERVER.fork(args, env, out.fileno(), err.fileno())
        try:
            code = process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
            raise
        out.seek(0)
        err.seek(0)
        return subprocess.CompletedProcess(list(args), code, _text(out.read()), _text(err.read()))


def _text(output: bytes) -> str:
    """Output as ``subprocess.run(text=True)`` gives it: decoded strictly, universal newlines."""
    return output.decode().replace("\r\n", "\n").replace("\r", "\n")


def main() -> None:
    # A child's fatal signals (and SIGABRT, tests.harness.Worker.dump_stacks) write its threads'
    # stacks to its own stderr, as PYTHONFAULTHANDLER=1 has a fresh ``python -m scrapy`` do.
    faulthandler.enable()
    preload()
    # What the server imported is left out of the children's garbage collections: they neither
    # walk it nor write to its memory pages, which the fork then shares instead of copying
    # (a quarter less CPU in all for the crawls of tests/test_crawl.py and tests/test_links.py).
    # Its garbage is collected first, so that no child inherits it.
    gc.collect()
    gc.freeze()
    serve(sys.argv[1])
    # Only a forked child gets here, as ``python -m scrapy`` with the request's arguments.
    runpy.run_module("scrapy", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
