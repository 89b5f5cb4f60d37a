"""sobolev-index: exact search and kernels for probability measures under the
Sobolev transport metric S_p on a graph (Le et al., AISTATS 2022).

Public API::

    from sobolev_index import Graph, pairwise_sobolev
    graph = Graph.from_points(points, n_nodes=1000, edges="log", seed=0)
    tree = graph.tree(root=0)
    F = tree.features_of([(nodes, masses), ...])
    D = pairwise_sobolev(F, trees=tree, p=1)
"""
import importlib.machinery as _machinery
import os as _os

from ._version import __version__

if not any(_os.path.exists(_os.path.join(_os.path.dirname(__file__), "_features" + suffix))
           for suffix in _machinery.EXTENSION_SUFFIXES):
    # Without this, Python reports a confusing circular import further down.
    raise ImportError(
        f"sobolev_index was imported from {_os.path.dirname(__file__)}, a source tree whose "
        "compiled modules are not built: build them in place with `pip install -e .`, or run "
        "Python from another directory so that the installed package is imported")
from .distances import SobolevFeatures, pairwise_sobolev, sobolev_distance, sobolev_kernel
from .errors import (
    AssumptionError,
    AssumptionWarning,
    CorruptIndexError,
    DuplicateKeyError,
    IndexLockedError,
    InvalidGraphError,
    InvalidMeasureError,
    KeyNotFoundError,
    NotAnIndexError,
    SobolevIndexError,
    UnsupportedFormatError,
)
from .graph import EDGE_KINDS, Graph, ShortestPathTree
from .index import SearchResult, SobolevIndex

__all__ = [
    "__version__",
    "AssumptionError",
    "AssumptionWarning",
    "CorruptIndexError",
    "DuplicateKeyError",
    "IndexLockedError",
    "KeyNotFoundError",
    "NotAnIndexError",
    "SearchResult",
    "SobolevIndex",
    "UnsupportedFormatError",
    "EDGE_KINDS",
    "Graph",
    "InvalidGraphError",
    "InvalidMeasureError",
    "ShortestPathTree",
    "SobolevFeatures",
    "SobolevIndexError",
    "pairwise_sobolev",
    "sobolev_distance",
    "sobolev_kernel",
]
