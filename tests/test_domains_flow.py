"""The addresses the domains spider's resolver gives a connection, fuzzed through a real DNS
server (the sandbox's)."""

from __future__ import annotations

import asyncio

from hypothesis import given, settings
from hypothesis import strategies as st

from crawler.config.values import NameServer
from crawler.domains.resolver import AsyncResolver, DomainsResolver, PrivateAddress, is_public
from sandbox.dns import Answer, start_dns

# --- the addresses a connection tries --------------------------------------------------------

ADDRESSES = st.one_of(
    st.ip_addresses(v=4).map(str),
    st.sampled_from(["127.0.0.1", "10.0.0.1", "169.254.169.254", "192.168.1.1", "100.64.0.1"]),
)


@settings(max_examples=60, deadline=None)
@given(
    addresses=st.lists(ADDRESSES, min_size=1, max_size=20, unique=True),
    most=st.integers(1, 16),
    private=st.booleans(),
)
def test_a_connection_tries_the_first_addresses_of_the_answer_in_its_order(
    addresses: list[str], most: int, private: bool
) -> None:
    """Whatever A records a DNS server answers: the first DOMAINS_MAX_ADDRESSES of those the
    sweep may probe (public ones, or all of them with DOMAINS_PRIVATE_ADDRESSES), in the
    answer's order; none, the reason kept, when there is none to probe."""
    allowed = addresses if private else [a for a in addresses if is_public(a)]

    async def run() -> None:
        answer = Answer("address", addresses[0], tuple(addresses[1:]))
        protocol, port = await start_dns("127.0.0.1", 0, lambda name: answer)
        try:
            server = [NameServer("127.0.0.1", port)]
            resolver = AsyncResolver(server, 1.0, 1, 10, private_addresses=private)
            domains = DomainsResolver(None, resolver, most)
            assert await domains.addresses("site.test") == allowed[:most]
            if not allowed:
                assert isinstance(resolver.failure("site.test"), PrivateAddress)
            assert await domains.addresses("192.0.2.7") == ["192.0.2.7"]  # an address as is
        finally:
            assert protocol.transport is not None
            protocol.transport.close()

    asyncio.run(run())
