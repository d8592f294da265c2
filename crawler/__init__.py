"""Distributed Scrapy crawler: Redis frontier, ban-aware downloading, MongoDB storage."""
