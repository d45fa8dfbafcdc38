"""Shoal's benchmark (``make bench`` / ``python -m bench.run``); see ``bench/run.py``."""
