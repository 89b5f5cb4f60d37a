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
    """Open the index at ``path``, single or sharded, for reading or writing.

    Returns a :class:`~sobolev_index.SobolevIndex`, or a
    :class:`~sobolev_index.ShardedIndex` when ``path`` holds a sharded
    index's manifest. Both keep the contract of
    :class:`~sobolev_index.IndexBase`. A value that does not fit the kind of
    index raises a ValueError naming it, before anything is opened.

    Parameters
    ----------
    path : str or path-like
        The index's directory.
    mode : {"r", "a"}, default "r"
        ``"r"`` opens for reading, ``"a"`` for writing (adding, upserting,
        deleting).
    client : dask.distributed.Client, optional
        For a sharded index only: the client on whose workers the index
        keeps its shards. None (the default): in this process.
    timeout : float, optional
        Seconds a writer waits for the writer lock. None (the default):
        fail at once if it is held.
    check : bool, default False
        For a single index only: hash every segment as it opens (see
        :meth:`SobolevIndex.open <sobolev_index.SobolevIndex.open>`). A
        sharded index's shards are checked with ``verify()``.
    task_timeout : float, optional
        For a sharded index only: the seconds any wait on its shards may
        take. None (the default): the default bound.

    Returns
    -------
    SobolevIndex or ShardedIndex
        The open index; use it as a context manager, or ``close()`` it.

    Raises
    ------
    ValueError
        If ``mode`` is not valid, or ``client`` or ``task_timeout`` is
        given for a single index, or ``check=True`` for a sharded one.
    NotAnIndexError
        If ``path`` holds no index.
    IndexLockedError
        If ``mode="a"`` and another writer holds the index's lock (after
        ``timeout`` seconds, when given).
    OlderFormatError
        If ``mode="a"`` and the index is in an older format.
    CorruptIndexError
        If a file of the index is damaged.
    ShardError
        If a shard of a sharded index cannot be opened, or disagrees with
        the manifest.

    See Also
    --------
    shard_index : Split a single index into a sharded one.

    Examples
    --------
    >>> from sobolev_index import Graph, SobolevIndex, open_index
    >>> graph = Graph.from_edges(3, [(0, 1), (1, 2)], [1.0, 2.0])
    >>> with SobolevIndex.create("open-example.idx", graph) as index:
    ...     index.add([([0], None), ([2], None)], keys=["a", "b"])
    ['a', 'b']
    >>> with open_index("open-example.idx") as index:
    ...     result = index.search("a", k=2)
    ...     print(type(index).__name__, len(index), result.keys, result.distances.tolist())
    SobolevIndex 2 [['a', 'b']] [[0.0, 3.0]]
    >>> open_index("open-example.idx", task_timeout=5)
    Traceback (most recent call last):
        ...
    ValueError: task_timeout is 5, but open-example.idx is not a sharded index ...
    """
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
