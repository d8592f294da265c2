"""The ``domains`` spider's machinery: domain names (normalize), DNS (resolver), what a probe's
answer or failure means (classify) and the downloader middleware between them (probes)."""
