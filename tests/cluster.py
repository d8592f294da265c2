"""A real Redis Cluster on loopback for tests: masters started by devtools.services, joined by
``valkey-cli --cluster create`` (or ``redis-cli`` next to ``REDIS_SERVER_BIN``)."""

from __future__ import annotations

import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis

from devtools.services import ServerProcess, free_port, redis_server_binary, start_redis
from tests.harness import on_free_port

READY_TIMEOUT = 30.0
CREATE_OPTIONS = ("--cluster-replicas", "0", "--cluster-yes")


def cli_binary() -> str:
    """The command-line client that comes with the server binary (valkey-cli, redis-cli)."""
    server = Path(redis_server_binary())
    name = server.name.replace("server", "cli")
    beside = server.with_name(name)
    if beside.exists():
        return str(beside)
    found = shutil.which(name)
    if found is None:
        raise RuntimeError(f"no {name} next to {server} nor on PATH")
    return found


@dataclass
class LocalCluster:
    """Masters of one cluster, each serving a third of the slots, no replicas."""

    nodes: list[ServerProcess]

    @property
    def ports(self) -> list[int]:
        return [node.port for node in self.nodes]

    @property
    def url(self) -> str:
        """Where a client starts discovering the cluster: its first node."""
        return f"redis://127.0.0.1:{self.ports[0]}/0"

    def node_client(self, port: int) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=port, socket_timeout=5, decode_responses=True)

    def state(self, port: int) -> str:
        """``cluster_state`` as the node at ``port`` sees it: ok or fail."""
        with self.node_client(port) as client:
            info: Any = client.execute_command("CLUSTER INFO")
        if isinstance(info, dict):
            return str(info.get("cluster_state"))
        for line in str(info).splitlines():
            if line.startswith("cluster_state:"):
                return line.split(":", 1)[1].strip()
        return "unknown"

    def wait_ok(self, timeout: float = READY_TIMEOUT) -> None:
        """Return once every node says cluster_state:ok (every slot served, views agree)."""
        deadline = time.monotonic() + timeout
        while True:
            states = {port: self.state(port) for port in self.ports}
            if set(states.values()) == {"ok"}:
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"cluster not ok after {timeout}s: {states}")
            time.sleep(0.05)

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()


def _start_node(data_dir: Path) -> ServerProcess:
    """A cluster-enabled server on free ports, again on others when one was taken meanwhile
    (by a connection of another test process, say)."""
    return on_free_port(lambda port: _start_node_on(data_dir, port, free_port()))


def _start_node_on(data_dir: Path, port: int, bus_port: int) -> ServerProcess:
    # The cluster bus port is given, not derived (port + 10000 may be out of range).
    node_dir = data_dir / str(port)
    return start_redis(
        port,
        node_dir,
        "--cluster-enabled",
        "yes",
        "--cluster-port",
        str(bus_port),
        "--cluster-config-file",
        f"nodes-{port}.conf",
        "--appendonly",
        "no",
        log=data_dir / f"node-{port}.log",
    )


def start_cluster(data_dir: Path, masters: int = 3) -> LocalCluster:
    """Start ``masters`` cluster-enabled servers, join them into one cluster, wait until ok."""
    cluster = LocalCluster([])
    try:
        for _ in range(masters):
            cluster.nodes.append(_start_node(data_dir))
        addresses = [f"127.0.0.1:{port}" for port in cluster.ports]
        created = subprocess.run(
            [cli_binary(), "--cluster", "create", *addresses, *CREATE_OPTIONS],
            capture_output=True,
            text=True,
            timeout=READY_TIMEOUT,
        )
        if created.returncode != 0:
            raise RuntimeError(f"cluster create failed: {created.stdout}{created.stderr}")
        cluster.wait_ok()
    except BaseException:
        cluster.stop()
        raise
    return cluster
