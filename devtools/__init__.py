"""Development tools, not shipped in the egg: local Redis/MongoDB-wire/sandbox servers
(``python -m devtools.services``) and the demo (``make demo``, ``python -m devtools.demo``)."""
