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
# Names are imported on first use (PEP 562): ``import sobolev_index`` stays
# cheap, so that the command line starts without NumPy and SciPy and can
# answer a Ctrl-C during its imports like any other.
_LAZY = {
    "SobolevFeatures": "distances", "pairwise_sobolev": "distances",
    "sobolev_distance": "distances", "sobolev_kernel": "distances",
    "AssumptionError": "errors", "AssumptionWarning": "errors",
    "CorruptIndexError": "errors", "DuplicateKeyError": "errors",
    "IndexLockedError": "errors", "InvalidGraphError": "errors",
    "InvalidMeasureError": "errors", "KeyNotFoundError": "errors",
    "NotAnIndexError": "errors", "SobolevIndexError": "errors",
    "UnsupportedFormatError": "errors", "OlderFormatError": "errors",
    "UnlistedSegmentsWarning": "errors",
    "EDGE_KINDS": "graph", "Graph": "graph", "ShortestPathTree": "graph",
    "Explanation": "index", "SearchResult": "index", "SobolevIndex": "index",
    "ShardedIndex": "distributed", "ShardedWriteError": "distributed",
    "ShardError": "distributed", "shard_index": "distributed", "open_index": "distributed",
    "IndexBase": "index",
}


# Submodules that eager imports used to make attributes of the package.
_SUBMODULES = {"distances", "errors", "graph", "measures", "index", "ingest", "cli"}


def __getattr__(name):
    import importlib

    module = _LAZY.get(name)
    if module is None:
        if name in _SUBMODULES:
            return importlib.import_module(f".{name}", __name__)
        raise AttributeError(f"module 'sobolev_index' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_LAZY))


__all__ = [
    "__version__",
    "AssumptionError",
    "AssumptionWarning",
    "CorruptIndexError",
    "DuplicateKeyError",
    "Explanation",
    "IndexBase",
    "IndexLockedError",
    "KeyNotFoundError",
    "NotAnIndexError",
    "OlderFormatError",
    "SearchResult",
    "ShardError",
    "ShardedIndex",
    "ShardedWriteError",
    "SobolevIndex",
    "UnlistedSegmentsWarning",
    "UnsupportedFormatError",
    "EDGE_KINDS",
    "Graph",
    "InvalidGraphError",
    "InvalidMeasureError",
    "ShortestPathTree",
    "SobolevFeatures",
    "SobolevIndexError",
    "open_index",
    "pairwise_sobolev",
    "shard_index",
    "sobolev_distance",
    "sobolev_kernel",
]
