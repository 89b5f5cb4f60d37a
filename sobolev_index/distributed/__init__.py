"""Sharded indexes: one exact k-NN index over several SobolevIndex
directories, searched in this process or on a Dask cluster (the optional
extra ``[distributed]``).

This layer sits above ``sobolev_index.index``; nothing below it imports it,
and Dask is imported only when a ``dask.distributed.Client`` is given.
"""
from .errors import ShardedWriteError, ShardError, ShardMovedError
from .files import is_sharded, open_index, shard_index
from .manifest import route
from .sharded import ShardedIndex
from .shards import open_shard

__all__ = ["ShardedIndex", "ShardedWriteError", "ShardError", "ShardMovedError", "is_sharded",
           "open_index", "open_shard", "route", "shard_index"]
