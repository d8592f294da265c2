"""The machinery of the ``links`` spider: URL rules, fleet-wide robots.txt, per-host stats."""
