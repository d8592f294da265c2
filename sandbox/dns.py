"""A small authoritative DNS server over UDP, for the domains sandbox.

``lookup(name)`` says how to answer a name (lower case, without the final dot):

- ``Answer("address", "127.0.0.9")``  an A record (a question for another type: no records);
  ``more=("127.0.0.1",)`` adds A records after it, answered in that order;
- ``Answer("nxdomain")``               NXDOMAIN;
- ``Answer("no_address")``             NOERROR without any record;
- ``Answer("servfail")``               SERVFAIL;
- ``Answer("silent")``                 no answer at all (the client times out).

Questions are counted per name (``queries``), so tests can check what a resolver asked.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

import dns.exception
import dns.message
import dns.rcode
import dns.rdatatype
import dns.rrset

logger = logging.getLogger(__name__)

TTL = 60


@dataclass(frozen=True)
class Answer:
    kind: str
    address: str = ""
    more: tuple[str, ...] = ()

    @property
    def addresses(self) -> tuple[str, ...]:
        """The A records' addresses, in the order they are answered."""
        return (self.address, *self.more)


Lookup = Callable[[str], Answer]


class DnsProtocol(asyncio.DatagramProtocol):
    def __init__(self, lookup: Lookup) -> None:
        self.lookup = lookup
        self.queries: Counter[str] = Counter()
        self.transport: asyncio.DatagramTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast("asyncio.DatagramTransport", transport)

    def datagram_received(self, data: bytes, addr: tuple[str | Any, int]) -> None:
        try:
            query = dns.message.from_wire(data)
        except dns.exception.DNSException:
            return
        if not query.question:
            return
        question = query.question[0]
        name = question.name.to_text().rstrip(".").lower()
        self.queries[name] += 1
        reply = self.reply(query, name, question.rdtype)
        if reply is not None and self.transport is not None:
            self.transport.sendto(reply.to_wire(want_shuffle=False), addr)

    def reply(
        self, query: dns.message.Message, name: str, rdtype: int
    ) -> dns.message.Message | None:
        answer = self.lookup(name)
        if answer.kind == "silent":
            return None
        response = dns.message.make_response(query)
        if answer.kind == "nxdomain":
            response.set_rcode(dns.rcode.NXDOMAIN)
        elif answer.kind == "servfail":
            response.set_rcode(dns.rcode.SERVFAIL)
        elif answer.kind == "address" and rdtype == dns.rdatatype.A:
            question = query.question[0]
            record = dns.rrset.from_text(question.name, TTL, "IN", "A", *answer.addresses)
            response.answer.append(record)
        return response


async def start_dns(host: str, port: int, lookup: Lookup) -> tuple[DnsProtocol, int]:
    """Serve ``lookup`` on UDP ``host:port`` (0 picks a free port); returns the protocol (its
    ``transport.close()`` stops it) and the port."""
    loop = asyncio.get_running_loop()
    transport, protocol = await loop.create_datagram_endpoint(
        lambda: DnsProtocol(lookup), local_addr=(host, port)
    )
    return protocol, int(transport.get_extra_info("sockname")[1])
