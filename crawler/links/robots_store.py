"""The Redis side of the fleet's robots.txt (crawler/links/robots.py): cached bodies, the claim
to download one, and the crawl jobs a host's sitemaps were seeded for."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from crawler.keys import robots_claim_key, robots_key

if TYPE_CHECKING:
    from crawler.connection import RedisClient


# KEYS: the origin's cached body, its claim. ARGV: claim seconds. The body when cached, else 1
# when this caller won the claim to download it, else 0: one round trip either way.
GET_OR_CLAIM = """
local body = redis.call('GET', KEYS[1])
if body then return body end
if redis.call('SET', KEYS[2], '1', 'NX', 'EX', tonumber(ARGV[1])) then return 1 end
return 0
"""


class FleetRobots:
    """The Redis side: cached robots.txt bodies and the claim to download one."""

    def __init__(self, server: RedisClient, spider: str, ttl: int, claim_seconds: int) -> None:
        self.server = server
        self.spider = spider
        self.ttl = ttl
        self.claim_seconds = claim_seconds
        self._get_or_claim = server.register_script(GET_OR_CLAIM)

    def get_or_claim(self, origin: str) -> bytes | bool:
        """The cached robots.txt of ``origin``, else whether this worker won the claim to it."""
        keys = [robots_key(self.spider, origin), robots_claim_key(self.spider, origin)]
        value: Any = self._get_or_claim(keys=keys, args=[self.claim_seconds])
        if isinstance(value, str):  # a client that decodes replies
            return value.encode("utf-8", "surrogateescape")
        return value if isinstance(value, bytes) else bool(value)

    def release(self, origin: str) -> None:
        self.server.delete(robots_claim_key(self.spider, origin))

    def store(self, origin: str, body: bytes, job: Any) -> None:
        """Share ``origin``'s robots.txt, what it seeds crawled for ``job`` (None: no job)."""
        pipe = self.server.pipeline(transaction=False)
        pipe.set(robots_key(self.spider, origin), body, ex=self.ttl)
        pipe.delete(robots_claim_key(self.spider, origin))
        pipe.set(self._seeded_key(origin, job), 1, ex=self.ttl)
        pipe.execute()

    def seeded(self, origin: str, job: Any) -> bool:
        """Whether what ``origin``'s robots.txt seeds was crawled for ``job`` within its TTL."""
        return bool(self.server.exists(self._seeded_key(origin, job)))

    def mark_seeded(self, origin: str, job: Any) -> None:
        self.server.set(self._seeded_key(origin, job), 1, ex=self.ttl)

    def _seeded_key(self, origin: str, job: Any) -> str:
        return f"{robots_key(self.spider, origin)}|seeded:{'-' if job is None else job}"
