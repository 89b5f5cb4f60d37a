"""Helpers for the persistent-index tests (tests/test_index_*.py).

Nothing in here imports the code under test at import time, so the helper
scripts can be run as child processes.
"""
