"""Ports that misbehave below HTTP, for the domains sandbox (sandbox/domains.py): what real
hosts on the internet do on port 80 or 443 besides answering.

Each is an ``asyncio.start_server`` handler, by the name of the port's side
(sandbox/domains_population.py, ``SIDES``):

- ``reset``: accepts, then resets the connection (RST) without reading;
- ``close``: reads the request, then closes without a word;
- ``ssh``, ``smtp``: those servers' banners and their answer to an HTTP request, then closed;
- ``truncated``: a 200 announcing 20,000 bytes, 3,000 sent, then closed;
- ``plain``: plain text on the HTTPS port (an HTTP 400, as a misconfigured server sends).

and ``filtered`` (:func:`filtered`), not a handler: a port where no connection completes.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
from collections.abc import Awaitable, Callable

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]

READ_SECONDS = 10.0
SSH_BANNER = b"SSH-2.0-OpenSSH_9.2p1 Debian-2+deb12u3\r\n"
SMTP_BANNER = b"220 mail.sandbox.test ESMTP Postfix (Debian/GNU)\r\n"
PLAIN = b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
TRUNCATED_LENGTH, TRUNCATED_SENT = 20_000, 3_000


async def _request(reader: asyncio.StreamReader) -> bytes:
    """The request's head (empty when the client sent none in time or went away)."""
    try:
        return await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), READ_SECONDS)
    except (TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, OSError):
        return b""


async def _close(writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(OSError):
        await writer.drain()
    writer.close()


async def reset(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    sock = writer.get_extra_info("socket")
    if sock is not None:
        # Linger 0: closing sends RST instead of FIN.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


async def close(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    await _request(reader)
    await _close(writer)


async def ssh(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    writer.write(SSH_BANNER)
    await _request(reader)
    writer.write(b"Invalid SSH identification string.\r\n")
    await _close(writer)


async def smtp(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    writer.write(SMTP_BANNER)
    await _request(reader)
    writer.write(b"502 5.5.2 Error: command not recognized\r\n221 2.0.0 Bye\r\n")
    await _close(writer)


async def plain(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(OSError):
        await reader.read(1024)
    writer.write(PLAIN)
    await _close(writer)


def truncated(page: Callable[[str], bytes]) -> Handler:
    """The handler that cuts ``page(host)`` short: it announces TRUNCATED_LENGTH bytes and
    sends TRUNCATED_SENT (the page, padded), then closes."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await _request(reader)
        host = ""
        for line in head.decode("latin-1").split("\r\n"):
            name, _, value = line.partition(":")
            if name.strip().lower() == "host":
                host = value.strip().rsplit(":", 1)[0].lower()
        body = page(host).ljust(TRUNCATED_SENT, b" ")[:TRUNCATED_SENT]
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nServer: sandbox-domains/1\r\n"
            b"Content-Length: %d\r\nConnection: close\r\n\r\n" % TRUNCATED_LENGTH + body
        )
        await _close(writer)

    return handle


def filtered(host: str, port: int) -> list[socket.socket]:
    """A port whose connections never complete, as one a firewall drops packets to: a listener
    that never accepts, its accept queue (of one) full with a connection of its own, so the
    kernel drops every SYN that comes (a client's connect times out; Linux's default,
    ``net.ipv4.tcp_abort_on_overflow = 0``: 1 would refuse them). The sockets to close."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind((host, port))
    listener.listen(0)
    return [listener, socket.create_connection((host, port), timeout=5)]


RAW: dict[str, Handler] = {
    "reset": reset,
    "close": close,
    "ssh": ssh,
    "smtp": smtp,
    "plain": plain,
}
