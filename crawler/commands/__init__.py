"""Custom scrapy commands: `scrapy frontier` (queue, dead letters, requeue, purge) and
`scrapy status` (the fleet at a glance)."""
