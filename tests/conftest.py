"""pytest configuration: the tests import their shared helpers from ``helpers.py``."""
