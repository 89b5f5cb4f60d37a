"""Sharded indexes: one exact k-NN index over several SobolevIndex
directories, searched in this process or on a Dask cluster (the optional
extra ``[distributed]``).

This layer sits above ``sobolev_index.index``; nothing below it imports it.
Names are imported on first use (PEP 562), so that ``opening`` (which tells
an ordinary index from a sharded one, and opens either) loads neither the
sharded index nor Dask for an ordinary index.
"""
import importlib

# Public name -> the module of this package that defines it.
_LAZY = {
    "ShardedIndex": "sharded", "ShardedWriteError": "errors", "ShardError": "errors",
    "ShardMovedError": "errors", "is_sharded": "opening", "open_index": "opening",
    "open_shard": "shards", "route": "manifest", "shard_index": "files",
}

__all__ = sorted(_LAZY)


def __getattr__(name):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_LAZY))
