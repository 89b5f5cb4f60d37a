"""The persistent index: immutable HDF5 segments under one SQLite commit point.

``SobolevIndex`` is the entry point; ``storage`` and ``catalog`` hold the
on-disk protocol, ``inverted`` the exact search over a segment, and ``sql`` the
SQL functions. Nothing here knows how measures were made (text, points):
that is ``sobolev_index.ingest``, one layer up.
"""
from .sobolev_index import SearchResult, SobolevIndex

__all__ = ["SearchResult", "SobolevIndex"]
