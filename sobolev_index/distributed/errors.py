"""Errors of the sharded index; like every error of the package they derive
from :class:`sobolev_index.errors.SobolevIndexError`."""
from ..errors import SobolevIndexError


class ShardError(SobolevIndexError):
    """Raised when a shard of a sharded index fails: it cannot be opened, disagrees, or is silent.

    Raised by a :class:`~sobolev_index.ShardedIndex` when a shard cannot be
    opened, does not agree with the manifest (another graph, roots or eta),
    or did not answer on Dask within the index's ``task_timeout``, and when
    the Dask cluster has no workers to open the shards on.

    Parameters
    ----------
    message : str
        The error message.
    shard : int
        The shard's number (the first, when several are named).
    path : str or None
        The first shard's directory (None when no one shard is at fault).
    cause : BaseException, optional
        The error the shard raised; a ``TimeoutError`` when the shards did
        not answer in time. None (the default): none.
    shards : list of int, optional
        All the shard numbers the error names. None (the default) means
        ``[shard]``.
    may_have_run : bool, optional
        For a write that got no answer: whether its task may have run
        (True) or did not (False). None (the default): does not apply.

    Attributes
    ----------
    shard : int
        The shard's number (the first, when several are named).
    shards : list of int
        All the shard numbers the error names.
    path : str or None
        The first shard's directory.
    cause : BaseException or None
        The error the shard raised, if any.
    may_have_run : bool or None
        For a write that got no answer, whether its task may have run
        (True), did not (False), or does not apply (None).
    """

    def __init__(self, message, shard, path, cause=None, shards=None, may_have_run=None):
        super().__init__(message)
        self.shard = shard
        self.shards = [shard] if shards is None else list(shards)
        self.path = path
        self.cause = cause
        self.may_have_run = may_have_run


class ShardedWriteError(SobolevIndexError):
    """Raised when a write that spans shards failed in some of them and was committed in others.

    A batch of ``add``, ``upsert`` or ``delete`` on a
    :class:`~sobolev_index.ShardedIndex` is not atomic across shards: each
    shard commits its part on its own. The keys of the failed shards were
    not written (unless the message says that their tasks may have run),
    and writing them again (``upsert``) completes the batch.

    Parameters
    ----------
    message : str
        The error message, naming the keys committed and each failed shard's
        error.
    committed : iterable of str
        The keys that are committed (deleted, for a delete), in the order
        given.
    failed : mapping of int to BaseException
        Each shard that failed, mapped to its error.

    Attributes
    ----------
    committed : list of str
        The keys that are committed, in the order given.
    failed : dict of int to BaseException
        Each shard that failed, mapped to its error.
    """

    def __init__(self, message, committed, failed):
        super().__init__(message)
        self.committed = list(committed)
        self.failed = dict(failed)


class ShardMovedError(SobolevIndexError):
    """A task sent a shard open for writing to another Dask worker than the
    one that holds it (and its write lock): refused at once, not waited for."""


# The most keys an error message lists (the exception holds them all).
KEYS_SHOWN = 50


def listed_keys(keys, more=""):
    """The first KEYS_SHOWN of ``keys`` for a message, and how many there
    are in all when that is more (``more`` added to that count)."""
    shown = ", ".join(map(repr, keys[:KEYS_SHOWN]))
    return shown + (f", ... ({len(keys)} in all{more})" if len(keys) > KEYS_SHOWN else "")


def write_error(what, committed, failed, n, paths, unknown=()):
    """The ShardedWriteError of a write whose parts in ``failed`` ({shard:
    error}) failed; ``unknown``: the failed shards whose part may have been
    written (its task may have run, and the shard could not be asked)."""
    reasons = "; ".join(f"shard {i} ({paths[i]}): {exc!r}" for i, exc in sorted(failed.items()))
    shown = listed_keys(committed, "; see .committed")
    done = "deleted" if what == "delete" else "committed"
    unknown = sorted(i for i in unknown if i in failed
                     and getattr(failed[i], "may_have_run", None) is not False)
    others = "the others were not"
    if unknown:
        others += (f", except that the part(s) of shard(s) {', '.join(map(str, unknown))} may "
                   f"have been {done} too: their tasks may have run and the shards could not be "
                   "asked (check with existing_keys() once the cluster answers)")
    return ShardedWriteError(
        f"{what} of {n} key(s) failed in {len(failed)} shard(s) and is not atomic across "
        f"shards: {len(committed)} key(s) were {done}: [{shown}]; {others}. "
        f"Errors: {reasons}", committed, failed)
