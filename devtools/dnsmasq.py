"""A real DNS server for tests and benchmarks: Debian's ``dnsmasq``, on a loopback address and
port of the caller's choosing, answering from a zone the caller writes (:class:`Zone`).

``make dnsmasq`` (scripts/ensure-tool.sh) installs it with apt-get when it is missing;
``DNSMASQ_PATH`` names another binary. The server forwards nothing but what the zone sends to
an upstream (``server=/name/addr#port``): a dead or silent upstream is how SERVFAIL and
timeouts are made.
"""

from __future__ import annotations

import getpass
import os
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import dns.exception
import dns.message
import dns.query
import dns.rcode

READY_TIMEOUT = 30.0


class DnsmasqMissing(RuntimeError):
    """No dnsmasq binary here."""


def dnsmasq_binary() -> str:
    """DNSMASQ_PATH, or dnsmasq on PATH or in /usr/sbin; DnsmasqMissing when there is none."""
    configured = os.environ.get("DNSMASQ_PATH")
    if configured:
        if not os.access(configured, os.X_OK):
            raise DnsmasqMissing(f"DNSMASQ_PATH={configured} is not an executable")
        return configured
    found = shutil.which("dnsmasq") or shutil.which("dnsmasq", path="/usr/sbin:/sbin")
    if found is None:
        raise DnsmasqMissing("dnsmasq is not installed (make dnsmasq installs Debian's)")
    return found


@dataclass
class Zone:
    """dnsmasq configuration lines for names under ``domain`` (every other name of it is
    NXDOMAIN: ``local=/<domain>/``)."""

    domain: str = "test"
    lines: list[str] = field(default_factory=list)

    def host(self, names: list[str], address: str) -> None:
        """A and AAAA records (by the address's family) for each of ``names``, exactly."""
        self.lines.append(f"host-record={','.join(names)},{address}")

    def cname(self, names: list[str], target: str) -> None:
        """CNAME records from each of ``names`` to ``target`` (a name of this zone)."""
        self.lines.append(f"cname={','.join(names)},{target}")

    def wildcard(self, name: str, address: str) -> None:
        """``address`` for ``name`` and every name under it."""
        self.lines.append(f"address=/{name}/{address}")

    def addresses(self, name: str, addresses: list[str]) -> None:
        """A records with ``addresses`` for ``name`` and every name under it, answered in this
        order (dnsmasq answers the ``address=`` lines of a name last first)."""
        self.lines.extend(f"address=/{name}/{address}" for address in reversed(addresses))

    def upstream(self, name: str, host: str, port: int) -> None:
        """Questions for ``name`` (and under it) forwarded to ``host:port``."""
        self.lines.append(f"server=/{name}/{host}#{port}")

    def config(self, address: str, port: int) -> str:
        """The whole configuration file: this zone on ``address:port``, nothing else."""
        head = [
            "no-resolv",
            "no-hosts",
            "no-poll",
            "bind-interfaces",
            f"listen-address={address}",
            f"port={port}",
            f"local=/{self.domain}/",
            "cache-size=0",
            "pid-file=",
            f"user={getpass.getuser()}",
            "log-facility=-",
        ]
        return "\n".join([*head, *self.lines, ""])


@dataclass
class Dnsmasq:
    """A running dnsmasq (stop with :meth:`stop`)."""

    process: subprocess.Popen[bytes]
    address: str
    port: int

    @property
    def nameserver(self) -> str:
        return f"{self.address}:{self.port}"

    def stop(self, timeout: float = 10.0) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout)


def start_dnsmasq(zone: Zone, address: str, port: int, work_dir: Path) -> Dnsmasq:
    """dnsmasq serving ``zone`` on UDP and TCP ``address:port``, its configuration and log in
    ``work_dir``; returns once it answers a question (or raises RuntimeError)."""
    config = work_dir / "dnsmasq.conf"
    config.write_text(zone.config(address, port))
    log = (work_dir / "dnsmasq.log").open("ab")
    try:
        process = subprocess.Popen(
            [dnsmasq_binary(), "--keep-in-foreground", f"--conf-file={config}"],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    finally:
        log.close()
    server = Dnsmasq(process, address, port)
    deadline = time.monotonic() + READY_TIMEOUT
    question = dns.message.make_query(f"ready.{zone.domain}.", "A")
    while True:
        if process.poll() is not None:
            text = (work_dir / "dnsmasq.log").read_text(errors="replace")[-2000:]
            raise RuntimeError(f"dnsmasq exited with {process.returncode}: {text}")
        try:
            answer = dns.query.udp(question, address, port=port, timeout=0.2)
        except (dns.exception.Timeout, OSError):
            answer = None
        if answer is not None and answer.rcode() == dns.rcode.NXDOMAIN:
            return server
        if time.monotonic() > deadline:
            server.stop()
            raise RuntimeError(f"dnsmasq did not answer on {address}:{port} in {READY_TIMEOUT}s")
        time.sleep(0.05)  # not up yet: ask again
