"""The persistent index: immutable HDF5 segments under one SQLite commit point.

``SobolevIndex`` (``sobolev_index.py``) is the entry point, a facade over
its components: ``snapshot`` (what a reader sees), ``writer`` and
``merge_policy`` (writes and merges), ``query`` (searches and distances)
and ``explain`` (which edges carry a distance); ``verify`` and ``recover``
check the files and bring back what the catalog lost. ``base`` is the
contract every kind of index keeps (the sharded one too), with the shared
``arguments`` checks and ``results``. Beneath them: ``segment`` holds a
segment in memory, ``inverted`` is a segment's inverted file (built and
searched by the compiled ``_inverted_build`` and ``_inverted_search``),
``csr`` the row arrays they pass around, ``storage`` and ``catalog`` the
on-disk protocol (files, and the SQLite commit point), and ``sql`` the S_p
functions for SQL queries.

Nothing here knows how measures were made (text, points): that is
``sobolev_index.ingest``, one layer up.
"""
from .base import IndexBase
from .explain import Explanation
from .results import SearchResult
from .sobolev_index import SobolevIndex

__all__ = ["Explanation", "IndexBase", "SearchResult", "SobolevIndex"]
