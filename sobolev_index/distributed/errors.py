"""Errors of the sharded index; like every error of the package they derive
from :class:`sobolev_index.errors.SobolevIndexError`."""
from ..errors import SobolevIndexError


class ShardError(SobolevIndexError):
    """A shard of a sharded index cannot be opened, or does not agree with
    the manifest (another graph, roots or eta). ``shard`` is its number,
    ``path`` its directory and ``cause`` the error it raised (or None)."""

    def __init__(self, message, shard, path, cause=None):
        super().__init__(message)
        self.shard = shard
        self.path = path
        self.cause = cause


class ShardedWriteError(SobolevIndexError):
    """A write that spans shards failed in some of them and was committed in
    others: a batch is not atomic across shards. ``committed`` lists the
    keys that are committed (in the order given), ``failed`` maps each
    shard that failed to its error; the keys of the failed shards were not
    written, and writing them again (``upsert``) completes the batch."""

    def __init__(self, message, committed, failed):
        super().__init__(message)
        self.committed = list(committed)
        self.failed = dict(failed)


class ShardMovedError(SobolevIndexError):
    """A task sent a shard open for writing to another Dask worker than the
    one that holds it (and its write lock): refused at once, not waited for."""
