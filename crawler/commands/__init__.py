"""Custom scrapy commands: `scrapy frontier` (queue, dead letters, purge)."""
