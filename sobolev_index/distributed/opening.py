"""Opening an index without asking its kind: :func:`open_index`,
:func:`is_sharded` and :func:`settings_holder`.

This module is light on purpose: it imports the sharded index (and with it
Dask, when installed) only when the path holds a sharded index, so that a
command or a script working on an ordinary index never loads them.
"""
import contextlib
import os

from ..index import SobolevIndex

# The file that makes a directory a sharded index (see manifest.py, which
# writes and reads it; named here so that telling the kinds apart imports
# nothing more).
MANIFEST = "manifest.json"


def is_sharded(path):
    """Whether ``path`` is the directory of a sharded index (it has a
    manifest); an ordinary index, or anything else, is not."""
    return os.path.isfile(os.path.join(os.fspath(path), MANIFEST))


def open_index(path, mode="r", client=None, timeout=None, check=False, task_timeout=None):
    """The index at ``path``, single or sharded, opened for reading (``mode``
    ``"r"``) or writing (``"a"``): a :class:`~sobolev_index.SobolevIndex`, or
    a :class:`~sobolev_index.ShardedIndex` when ``path`` holds a sharded
    index's manifest. Both keep the contract of
    :class:`~sobolev_index.index.base.IndexBase`.

    ``timeout``: seconds a writer waits for the writer lock (None: fail at
    once if it is held). ``client``: a ``dask.distributed.Client`` on whose
    workers a sharded index keeps its shards (None: in this process), and
    ``task_timeout`` the seconds any wait on them may take (None: the
    default); both only for a sharded index. ``check=True`` hashes every
    segment of a single index as it opens (see
    :meth:`SobolevIndex.open`); a sharded index's shards are checked with
    ``verify()``. A value that does not fit the kind of index raises a
    ValueError naming it, before anything is opened."""
    if not is_sharded(path):
        if client is not None:
            raise ValueError(f"client is given, but {os.fspath(path)} is not a sharded index "
                             f"(it has no {MANIFEST}); a single index opens in this process: "
                             "leave client out")
        if task_timeout is not None:
            raise ValueError(f"task_timeout is {task_timeout!r}, but {os.fspath(path)} is not a "
                             "sharded index (no task runs on Dask for it); leave it out")
        return SobolevIndex.open(path, mode=mode, timeout=timeout, check=check)
    if check:
        raise ValueError(f"check=True hashes the segments of a single index as it opens; "
                         f"{os.fspath(path)} is a sharded index: check its shards with "
                         "verify()")
    bound = {} if task_timeout is None else {"task_timeout": task_timeout}
    from .sharded import ShardedIndex

    return ShardedIndex.open(path, mode=mode, client=client, timeout=timeout, **bound)


def upgrade_index(path, timeout=None):
    """Rewrite the index at ``path``, single or sharded, in this release's
    format: :meth:`SobolevIndex.upgrade` or :meth:`ShardedIndex.upgrade`
    (which adds ``"shards"`` to the report)."""
    if not is_sharded(path):
        return SobolevIndex.upgrade(path, timeout=timeout)
    from .sharded import ShardedIndex

    return ShardedIndex.upgrade(path, timeout=timeout)


@contextlib.contextmanager
def settings_holder(path):
    """What holds the build settings (kind, text settings, words) of the
    index at ``path``, opened for reading in this process: the index
    itself, or shard 0 of a sharded index (every shard has them; the
    others are not opened)."""
    if is_sharded(path):
        from .manifest import read_manifest

        path = os.path.join(os.fspath(path), read_manifest(path)["shards"][0])
    with SobolevIndex.open(path, mode="r") as index:
        yield index
