"""What an operator does to a running crawl, through Redis: a crawl job's status, pause,
resume, deadline, page budget and cancel (``jobs.py``), the whole fleet's pause and resume
(``pause.py``), and wiping a spider's frontier (``purge.py``). The frontier
(``crawler/frontier/``) holds what the workers do of them.
"""
