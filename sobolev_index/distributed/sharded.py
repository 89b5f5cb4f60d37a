"""ShardedIndex: one exact k-NN index over S ordinary SobolevIndex shards.

The shards share one graph, roots and eta; a key always goes to the shard
its stable hash names (``manifest.route``), so each shard's own duplicate
check keeps keys unique across shards. Document ids are global: each
document takes the next id of one sequence, committed with it by its shard,
so ids order the documents as a single index given the same calls orders
them. A search sends the query batch to every shard (in this process, or as
tasks on the Dask workers that hold the shards, see ``shards.py`` and
``dask_shards.py``) and merges their top k on the client, by distance, ties
by id. A write sends each shard its part (``writes.py`` settles one that
failed in some shards); the manifest and its checks are in ``manifest.py``,
the Gram matrices in ``gram.py``.
"""
import math
import os
import time
import warnings

import numpy as np

from ..distances import check_p
from ..errors import (
    DuplicateKeyError,
    InvalidMeasureError,
    KeyNotFoundError,
    SobolevIndexError,
    add_note,
)
from ..graph import Graph
from ..index import SobolevIndex, storage
from ..index.arguments import (
    check_room,
    check_sample_size,
    check_str_keys,
    check_where,
    checked_candidates,
    checked_column,
    checked_ids,
    checked_keys,
    checked_search_args,
    json_fields,
    keys_to_delete,
    radius_for_queries,
)
from ..index.base import IndexBase
from ..index.results import (
    SearchResult,
    admitted,
    merge_hits,
    own_key_first,
    padded,
    summed_stats,
)
from ..measures import MeasureBatch, as_measure_batch
from . import shards as tasks
from .dask_shards import DaskShards
from .errors import ShardError
from .manifest import (
    check_agrees,
    new_manifest,
    read_manifest,
    route,
    shard_name,
    sharded_invariants,
    write_manifest,
)
from .shards import checked_task_timeout
from .writes import rows_of, settle

__all__ = ["ShardedIndex"]

# Rows and columns of a block of distance_matrix: 4096^2 float64, 128 MiB.
GRAM_CHUNK = 4096
# Errors a shard raises for the search's arguments: the same on a rerun.
_INPUT_ERRORS = (ValueError, TypeError, KeyError)


class ShardedIndex(IndexBase):
    """An exact k-NN index of measures under S_p split over S shards.

    Create one with :meth:`create`, open one with :meth:`open`. Each shard
    is an ordinary :class:`SobolevIndex` directory (open it, verify it,
    search it on its own); the sharded index adds a manifest (shard
    directories, routing rule, graph checksum, roots, eta) and numbers the
    documents of all shards with one sequence of ids (each shard commits a
    document's id with it). Reads and writes have the signatures and
    results of :class:`SobolevIndex`, and searches return what a single
    index holding the same documents returns: the same keys, distances and
    labels, ties in the same order.

    Writes that span shards are **not atomic across shards**: each shard
    commits its part of a batch on its own. When some parts fail, the others
    stay committed and :class:`ShardedWriteError` lists exactly which keys
    were committed (``committed``) and why the others were not (``failed``).

    With ``client=None`` the shards are opened in this process and searched
    on threads; with a ``dask.distributed.Client`` each shard is opened on a
    worker and stays there, and the work goes to it as tasks. On Dask every
    operation waits at most ``task_timeout`` seconds (see :meth:`open`) and
    then raises :class:`ShardError`: it never hangs when workers die.

    Parameters
    ----------
    path : str
        The sharded index's directory.
    mode : {"r", "a"}
        ``"r"`` for a reader, ``"a"`` for the writer.
    manifest : dict
        The manifest read from ``path``.
    placement : LocalShards or DaskShards
        The shards, open in this process or on the Dask workers.
    lock : WriterLock or None
        The sharded index's writer lock, already held (None for a reader);
        :meth:`close` releases it.
    client : dask.distributed.Client or None
        The Dask client the shards are on, or None.
    next_id : int
        The id the next document gets: one above the largest id any shard
        has given.
    task_timeout : float
        Seconds one operation waits for the shards' tasks on Dask.

    Attributes
    ----------
    path : str
        The sharded index's directory.
    mode : {"r", "a"}
        ``"r"``: open for reading; ``"a"``: open for writing.
    client : dask.distributed.Client or None
        The Dask client, or None for shards opened in this process.
    task_timeout : float
        Seconds one operation waits for the shards' tasks on Dask.
    p : float
        The default order of :meth:`search`, in [1, inf].
    roots : ndarray of int64
        The root nodes shared by the shards.
    eta : ndarray of float64
        The roots' weights, summing to 1.
    n_nodes : int
        The number of nodes of the shared graph.
    shard_paths : list of str
        The shards' directories, in shard order.

    See Also
    --------
    sobolev_index.SobolevIndex : The index of one directory, each shard.
    sobolev_index.shard_index : Split a single index into a sharded one.
    sobolev_index.open_index : Opens either kind of index.

    Notes
    -----
    Do not call the constructor: :meth:`create` and :meth:`open` read the
    manifest, take the lock and open the shards it expects.

    The methods that keep the contract of
    :class:`~sobolev_index.IndexBase` and document it there act here as
    follows:

    - :meth:`search` gets the arguments and the
      :class:`~sobolev_index.SearchResult` of a single index, and the same
      answer as a single index holding the same documents. Each shard finds
      its own top ``k`` (or its documents within ``radius``, up to
      ``limit``), and the client merges them: by distance, ties by document
      id (ids are global and rise in the order the documents were added,
      the order a single index given the same calls keeps), so a shard's
      top k always holds every document of the merged top k. For the k
      nearest, the shards in one place (this process, or one Dask worker)
      are searched one after another, each within the k-th distance the
      ones before it found, which prunes as one index of their documents
      would (the answer is the same). A stored key used as a query is
      searched as its stored measure, exactly (the key's own shard sends
      it), and comes first among the documents at distance 0 from it, as in
      a single index. ``n_threads`` is per shard. ``stats`` sums the
      shards' counts; with ``stats=True`` ``stats["seconds"]`` holds the
      wall-clock time of the fan-out (``search``), the ``merge`` and the
      ``total``. With ``candidates`` each shard takes its own
      ``candidates`` and returns the k nearest of them: up to ``shards``
      times as many candidates are ranked as in a single index, among them
      the ``candidates`` nearest of all, so no answer is farther than a
      single index's. A query's answer is ``certified`` when every shard's
      is.
    - :meth:`get` looks the key up in the shard its hash names, and adds
      ``shard`` to what it returns; ``id`` is the document's global id.
    - :meth:`ids_and_keys` gathers the live documents of every shard, in
      global id order.
    - :meth:`reserve_ids` commits the new next id in every shard. Should
      some shards fail and others take it, no id below it is given all the
      same; the first shard's error is raised.
    - A shard's error is raised with a note naming the shard.

    Examples
    --------
    Shards opened in this process (no Dask cluster):

    >>> from sobolev_index import Graph, ShardedIndex
    >>> graph = Graph.from_edges(5, [(0, 1), (1, 2), (2, 3), (3, 4)], [1.0, 2.0, 1.0, 0.5])
    >>> index = ShardedIndex.create("example.sharded", graph, shards=2, p=2)
    >>> index
    ShardedIndex('example.sharded', a, shards=2, local)
    >>> index.add([([0, 1], [0.5, 0.5]), ([1, 2], None), ([3, 4], [0.2, 0.8])],
    ...           keys=["red", "green", "blue"])
    ['red', 'green', 'blue']
    >>> [index.shard_of(key) for key in ["red", "green", "blue"]]
    [1, 0, 1]
    >>> found = index.search([([0, 2], [0.25, 0.75])], k=2)
    >>> found.keys, found.distances.round(4).tolist(), found.ids
    ([['green', 'red']], [[0.433, 1.0897]], [[2, 1]])
    >>> index.close()

    A reader of the same directory:

    >>> with ShardedIndex.open("example.sharded") as reader:
    ...     print(len(reader), list(reader), reader.get("green")["shard"])
    3 ['red', 'green', 'blue'] 0
    """

    kind = "sharded index"
    _mismatch = (SobolevIndexError, "a writer changed the index meanwhile, or run verify()")
    # The methods without a docstring of their own keep IndexBase's
    # contract (help() and the API reference show its docstring); the
    # class's Notes say what they do differently here.

    def __init__(self, path, mode, manifest, placement, lock, client, next_id, task_timeout):
        self.path = path
        self.mode = mode
        self.client = client
        self.task_timeout = task_timeout
        self._manifest = manifest
        self._placement = placement
        self._lock = lock
        # The id the next document gets.
        self._next_id = next_id
        self.p = check_p(math.inf if manifest["p"] == "inf" else manifest["p"])
        self.roots = np.asarray(manifest["roots"], dtype=np.int64)
        self.eta = np.asarray(manifest["eta"], dtype=np.float64)
        self.n_nodes = int(manifest["n_nodes"])
        self.shard_paths = [os.path.join(path, name) for name in manifest["shards"]]
        # Last: until here, close() (and __del__) leaves the resources to
        # the caller that releases them (open's except).
        self._closed = False

    # ------------------------------------------------------------ lifecycle
    @classmethod
    def create(cls, path, graph, roots=None, eta=None, p=1, shards=2, on_violation="raise",
               seed=0, client=None, task_timeout=tasks.TASK_SECONDS):
        """Create a sharded index of ``shards`` shards at ``path``, and open it for writing.

        The first shard chooses the roots and builds the shortest-path
        trees; the others are made with
        :meth:`SobolevIndex.create_like <sobolev_index.SobolevIndex.create_like>`
        from it, so every shard holds the same graph file to the byte
        (trees copied, not rebuilt: where shortest paths tie, every shard
        breaks the ties as the first did, whatever the seed). The index is
        built beside ``path`` and renamed into place.

        Parameters
        ----------
        path : str or os.PathLike
            A directory that does not exist yet, or an empty one.
        graph : Graph
            The graph whose nodes the measures put their mass on.
        roots : None, int or sequence of int, optional
            As for :meth:`SobolevIndex.create <sobolev_index.SobolevIndex.create>`:
            None (the default) one central root, an int n that many random
            roots, a list the root nodes.
        eta : array-like of float, optional
            The roots' weights, as for ``SobolevIndex.create``; None (the
            default) weighs them equally.
        p : float or "inf", default 1
            The default p of :meth:`search`, in [1, inf].
        shards : int, default 2
            The number of shards, >= 1.
        on_violation : {"raise", "perturb"}, default "raise"
            As for ``SobolevIndex.create``.
        seed : int, default 0
            As for ``SobolevIndex.create``.
        client : dask.distributed.Client, optional
            See :meth:`open`; None (the default) opens the shards in this
            process.
        task_timeout : float, default 600
            See :meth:`open`.

        Returns
        -------
        ShardedIndex
            The new, empty index, open for writing.

        Raises
        ------
        TypeError
            If ``graph`` is not a :class:`~sobolev_index.Graph`.
        ValueError
            If ``shards`` is not an integer >= 1, ``task_timeout`` is not a
            finite number > 0, or ``roots``, ``eta`` or ``p`` is not valid.
        FileExistsError
            If ``path`` exists and is not an empty directory.
        AssumptionError
            If the roots cannot satisfy Assumption 2.1 and ``on_violation``
            is ``"raise"``.
        """
        if not isinstance(graph, Graph):
            raise TypeError(f"graph is {type(graph).__name__}; expected a sobolev_index.Graph")
        p = check_p(p)

        def first(shard_path):
            return SobolevIndex.create(shard_path, graph, roots=roots, eta=eta, p=p,
                                       on_violation=on_violation, seed=seed)

        return cls._create(path, shards, first, client, task_timeout)

    @classmethod
    def create_like(cls, path, source, shards=2, client=None,
                    task_timeout=tasks.TASK_SECONDS):
        """Create an empty sharded index at ``path`` like ``source``, and open it for writing.

        The new index has the graph, shortest-path trees, roots, eta and p
        of ``source``. Every shard is made with
        :meth:`SobolevIndex.create_like <sobolev_index.SobolevIndex.create_like>`:
        its graph file is the source's, to the byte, so searches give the
        source's distances exactly. The catalog's other meta values (text
        settings, recipe) are not copied;
        :func:`~sobolev_index.shard_index` copies them with the documents.

        Parameters
        ----------
        path : str or os.PathLike
            A directory that does not exist yet, or an empty one.
        source : SobolevIndex, str or os.PathLike
            An open :class:`~sobolev_index.SobolevIndex`, or the path of
            one (opened for reading meanwhile).
        shards : int, default 2
            The number of shards, >= 1.
        client : dask.distributed.Client, optional
            See :meth:`open`; None (the default) opens the shards in this
            process.
        task_timeout : float, default 600
            See :meth:`open`.

        Returns
        -------
        ShardedIndex
            The new, empty index, open for writing.

        Raises
        ------
        TypeError
            If ``source`` is neither a SobolevIndex nor a path.
        NotAnIndexError
            If ``source`` is a path that is not an index.
        ValueError
            If ``shards`` is not an integer >= 1, or ``task_timeout`` is not
            a finite number > 0.
        FileExistsError
            If ``path`` exists and is not an empty directory.
        """
        if isinstance(source, SobolevIndex):
            return cls._create(path, shards, lambda p: SobolevIndex.create_like(p, source),
                               client, task_timeout)
        if not isinstance(source, (str, os.PathLike)):
            raise TypeError(f"source is {type(source).__name__}; expected an open SobolevIndex "
                            "or the path of one")
        with SobolevIndex.open(source, mode="r") as opened:
            return cls._create(path, shards, lambda p: SobolevIndex.create_like(p, opened),
                               client, task_timeout)

    @classmethod
    def _create(cls, path, shards, make_first, client, task_timeout):
        """The sharded index at ``path``: shard 0 from ``make_first(its
        path)`` (an open SobolevIndex), shards 1..S-1 like it."""
        if isinstance(shards, bool) or not isinstance(shards, (int, np.integer)) or shards < 1:
            raise ValueError(f"shards is {shards!r}; expected a number of shards >= 1")
        task_timeout = checked_task_timeout(task_timeout)
        shards = int(shards)
        path = os.fspath(path)
        storage.require_new_directory(path)
        # Built beside path and renamed into place, as a single index is.
        with storage.staged_directory(path, ".sobolev-sharded-") as staging:
            with make_first(os.path.join(staging, shard_name(0))) as first:
                made = tasks.describe_index(first)
                n_nodes, p = int(first.graph.n_nodes), first.p
                for i in range(1, shards):
                    # create_like writes the first shard's graph and trees
                    # (the same file, both in this format); the checksum,
                    # roots and eta are checked here.
                    with SobolevIndex.create_like(os.path.join(staging, shard_name(i)),
                                                  first) as shard:
                        check_agrees(i, os.path.join(path, shard_name(i)),
                                     tasks.describe_index(shard), made, "shard 0")
            manifest = new_manifest(shards, made["graph_checksum"], made["roots"],
                                    made["eta"], p)
            manifest["n_nodes"] = n_nodes
            write_manifest(staging, manifest)
        return cls.open(path, mode="a", client=client, task_timeout=task_timeout)

    @classmethod
    def open(cls, path, mode="r", client=None, timeout=None, task_timeout=tasks.TASK_SECONDS):
        """Open a sharded index for reading (``"r"``) or writing (``"a"``).

        Every shard is opened, and its graph, roots and eta are checked
        against the manifest's.

        Parameters
        ----------
        path : str or os.PathLike
            The sharded index's directory (the one with ``manifest.json``).
        mode : {"r", "a"}, default "r"
            ``"r"``: a reader; each shard works from the snapshot committed
            when it opened (see :meth:`refresh`). ``"a"``: the writer, which
            holds ``write.lock`` of the sharded index and, in this process
            or on the workers, each shard's.
        client : dask.distributed.Client, optional
            None (the default) opens the shards in this process and searches
            them on threads; a client opens each shard inside a task on one
            of its workers (``shard-{i}-{version}``, movable to another
            worker if that one dies), and runs searches and writes as tasks
            there.
        timeout : float, optional
            How many seconds a writer waits for the sharded index's lock;
            None (the default) does not wait.
        task_timeout : float, default 600
            Only on Dask: how many seconds one operation (opening, a search,
            a write, ``len``, ...) waits for the shards' tasks; a finite
            number > 0. Workers that die are replaced by Dask (a nanny
            restarts them, or new ones join): the shards are opened again
            on them and the tasks run again, so a search still returns the
            exact answer if that happens in time. Past the bound, the tasks
            not answered are cancelled and the call raises
            :class:`ShardError` naming the shards (``shards``) and why: no
            workers left, workers that died and were not replaced in time,
            or tasks still running. A write that got no answer from some
            shards then asks them what they committed, within another
            ``task_timeout``, and raises :class:`ShardedWriteError` (see
            :meth:`add`). The default is far above the time of any batch on
            a working cluster, and finite.

        Returns
        -------
        ShardedIndex
            The open index, also a context manager that closes it.

        Raises
        ------
        ValueError
            If ``mode`` is not ``"r"`` or ``"a"``, or ``task_timeout`` is not
            a finite number > 0.
        NotAnIndexError
            If ``path`` is not a directory with the manifest of a sharded
            index.
        CorruptIndexError
            If the manifest cannot be read.
        UnsupportedFormatError
            If the manifest's format is one this release cannot read.
        IndexLockedError
            If ``mode`` is ``"a"`` and another writer holds the lock.
        ShardError
            Naming the first shard that cannot be opened (or did not open
            in time), or whose graph, roots or eta differ from the
            manifest's.
        """
        if mode not in ("r", "a"):
            raise ValueError(f"mode is {mode!r}; expected 'r' (read) or 'a' (append/write)")
        task_timeout = checked_task_timeout(task_timeout)
        path = os.fspath(path)
        manifest = read_manifest(path)
        lock = storage.WriterLock(path, timeout) if mode == "a" else None
        placement = None
        try:
            paths = [os.path.join(path, name) for name in manifest["shards"]]
            if client is None:
                placement = tasks.LocalShards(paths, mode)
            else:
                placement = DaskShards(client, paths, mode, task_timeout)
            with placement.bounded():
                failed = placement.open()
                described = {}
                if not failed:
                    described = placement.map(tasks.describe,
                                              {i: () for i in range(len(paths))})
                    failed = {i: exc for i, exc in described.items()
                              if isinstance(exc, Exception)}
            if failed:
                i = min(failed)
                exc = failed[i]
                if isinstance(exc, ShardError):  # no answer in time: names every such shard
                    add_note(exc, f"(opening the sharded index {path})")
                    raise exc
                others = f" (and {len(failed) - 1} other shard(s))" if len(failed) > 1 else ""
                raise ShardError(f"shard {i} of {path} ({paths[i]}) cannot be opened{others}: "
                                 f"{exc}", i, paths[i], exc) from exc
            for i in range(len(paths)):
                check_agrees(i, paths[i], described[i], manifest, "the manifest")
            # One above the largest id any shard has given.
            next_id = max(described[i]["next_id"] for i in range(len(paths)))
            # Inside the try: a failure here releases the shards and the
            # lock too.
            opened = cls(path, mode, manifest, placement, lock, client, next_id, task_timeout)
        except BaseException:
            if placement is not None:
                placement.close()
            if lock is not None:
                lock.release()
            raise
        return opened

    def _release(self):
        try:
            self._placement.close()
        finally:
            if self._lock is not None:
                self._lock.release()

    def __repr__(self):
        state = "closed" if self._closed else self.mode
        where = "local" if self.client is None else "dask"
        return f"ShardedIndex({self.path!r}, {state}, shards={self.shards}, {where})"

    @property
    def shards(self):
        """int: The number of shards."""
        return len(self.shard_paths)

    def shard_of(self, key):
        """The number of the shard that holds (or would hold) ``key``.

        The shard is the one the key's stable hash names
        (``manifest.route``), so that each shard's own duplicate check keeps
        keys unique across shards.

        Parameters
        ----------
        key : str
            Any key, live or not.

        Returns
        -------
        int
            The shard number, in 0..shards - 1.

        Raises
        ------
        TypeError
            If ``key`` is not a str.
        """
        check_str_keys([key])
        return route(key, self.shards)

    def refresh(self):
        """Move every shard of a reader to its latest commit.

        :attr:`next_id` follows: one above the largest id any shard has
        given now.

        Raises
        ------
        ShardError
            If a shard does not answer in time (on Dask).
        SobolevIndexError
            If the index is closed.
        """
        self._check_open()
        with self._placement.bounded():
            self._raise_failed(self._placement.map(tasks.refresh, self._every_shard()),
                               "refresh")
            described = self._raise_failed(
                self._placement.map(tasks.describe, self._every_shard()), "refresh")
        self._next_id = max(d["next_id"] for d in described.values())

    # ---------------------------------------------------------------- checks
    def _every_shard(self, *args):
        return {i: args for i in range(self.shards)}

    def _raise_failed(self, results, what):
        """The results by shard, or the first shard's error (a note names the
        shard): bad input raises the same error in every shard."""
        for i in sorted(results):
            exc = results[i]
            if isinstance(exc, Exception):
                add_note(exc, f"({what} in shard {i}, {self.shard_paths[i]})")
                raise exc
        return results

    def _by_shard(self, keys):
        """{shard: [positions in keys]} of str keys."""
        parts = {}
        for j, key in enumerate(keys):
            parts.setdefault(route(key, self.shards), []).append(j)
        return parts

    # ------------------------------------------------------------ inspection
    def __len__(self):
        self._check_open()
        return sum(self._raise_failed(
            self._placement.map(tasks.size, self._every_shard()), "len").values())

    def __contains__(self, key):
        self._check_open()
        return isinstance(key, str) and bool(
            self._placement.run(route(key, self.shards), tasks.contains, key))

    def existing_keys(self, keys):
        self._check_open()
        if isinstance(keys, str) or not hasattr(keys, "__iter__"):
            raise TypeError(f"keys is {keys!r:.60}; expected a list of keys")
        keys = [k for k in keys if isinstance(k, str)]
        parts = self._by_shard(keys)
        found = self._raise_failed(self._placement.map(
            tasks.call, {i: ("existing_keys", [keys[j] for j in js]) for i, js in parts.items()}),
            "existing_keys")
        return set().union(*found.values()) if found else set()

    def ids_and_keys(self):
        self._check_open()
        per_shard = self._raise_failed(
            self._placement.map(tasks.call, self._every_shard("ids_and_keys")), "keys")
        ids = np.concatenate([per_shard[i][0] for i in range(self.shards)])
        keys = [key for i in range(self.shards) for key in per_shard[i][1]]
        order = np.argsort(ids, kind="stable")
        return ids[order], [keys[j] for j in order.tolist()]

    @property
    def next_id(self):
        """int: The id the next document added gets, unless told otherwise.

        It is one above the largest id any shard has given (as it was when
        a reader opened or last refreshed).
        """
        self._check_open()
        return self._next_id

    def reserve_ids(self, next_id):
        self._check_writable()
        results = self._placement.map(
            tasks.call, self._every_shard("reserve_ids", next_id), pinned=True)
        if not all(isinstance(r, Exception) for r in results.values()):
            # Some shard took it: no id below it may be given now.
            self._next_id = max(self._next_id, int(next_id))
        self._raise_failed(results, "reserve_ids")

    def get(self, key):
        self._check_open()
        i = self.shard_of(key)
        doc = self._placement.run(i, tasks.call, "get", key)
        doc["shard"] = i
        return doc

    def info(self):
        """Counts and sizes summed over the shards, and each shard's.

        Returns
        -------
        dict
            ``path`` (absolute); ``documents``, ``deleted``, ``segments``
            and ``bytes`` (the manifest's included), summed over the
            shards; the shared ``nodes``, ``edges``, ``roots``, ``eta``,
            ``p`` and ``graph``; the manifest's ``format_version``,
            ``created_at`` and ``routing``; and ``shards``, a list of each
            shard's ``shard``, ``path``, ``documents``, ``deleted``,
            ``segments`` and ``bytes``.

        Raises
        ------
        SobolevIndexError
            If the index is closed.
        """
        self._check_open()
        infos = self._raise_failed(
            self._placement.map(tasks.call, self._every_shard("info")), "info")
        infos = [infos[i] for i in range(self.shards)]
        first = infos[0]
        own = sum(os.path.getsize(os.path.join(self.path, name))
                  for name in os.listdir(self.path)
                  if os.path.isfile(os.path.join(self.path, name)))
        return {
            "path": os.path.abspath(self.path),
            "documents": sum(info["documents"] for info in infos),
            "deleted": sum(info["deleted"] for info in infos),
            "segments": sum(info["segments"] for info in infos),
            "nodes": first["nodes"], "edges": first["edges"], "roots": first["roots"],
            "eta": first["eta"], "p": first["p"],
            "bytes": own + sum(info["bytes"] for info in infos),
            "graph": first["graph"],
            "format_version": self._manifest["format_version"],
            "created_at": self._manifest.get("created_at"),
            "routing": dict(self._manifest["routing"]),
            "shards": [{"shard": i, "path": info["path"], "documents": info["documents"],
                        "deleted": info["deleted"], "segments": info["segments"],
                        "bytes": info["bytes"]} for i, info in enumerate(infos)],
        }

    # --------------------------------------------------------------- writing
    def add(self, measures, keys=None, labels=None, fields=None, ids=None):
        """Add a batch of measures to the shards their keys route to.

        The batch is validated in full first (measures, keys, labels,
        fields, ids, keys already in the index): bad input raises before
        any shard writes. Each document takes the next global id (or its
        one of ``ids``, as for :meth:`SobolevIndex.add
        <sobolev_index.SobolevIndex.add>`), and each shard commits its
        part, ids included, in one transaction, durably, as a single index
        does. **The batch is not atomic across shards**: if some parts
        fail, the others stay committed and :class:`ShardedWriteError`
        lists the committed keys (the ids of the others are not used
        again).

        Parameters
        ----------
        measures : sequence of (nodes, masses), ndarray or sparse matrix
            The documents' measures, as for
            :meth:`IndexBase.add <sobolev_index.IndexBase.add>`: ``(nodes,
            masses)`` pairs (``masses=None``: equal masses), or an
            n x n_nodes array or SciPy sparse matrix of node masses.
        keys : list of str, optional
            One non-empty key per measure, none twice. None (the default)
            names each document ``doc-N``, N its id, as a single index
            names them.
        labels : list of str or None, optional
            One label per measure (an entry may be None); None (the
            default) labels none.
        fields : list of dict or None, optional
            One dict of JSON metadata per measure (an entry may be None);
            None (the default) stores none.
        ids : sequence of int, optional
            The documents' global ids: strictly increasing integers, the
            first at least :attr:`next_id`. None (the default) gives the
            next ids in turn.

        Returns
        -------
        list of str
            The documents' keys, in the order of ``measures``.

        Raises
        ------
        DuplicateKeyError
            If a key is live already (use :meth:`upsert` to replace it), or
            given twice in the batch; nothing is written.
        InvalidMeasureError
            If a measure is not valid; nothing is written.
        ValueError
            If ``keys``, ``labels``, ``fields`` or ``ids`` do not have one
            valid entry per measure; nothing is written.
        TypeError
            If ``measures`` is not one of the forms above, or ``keys`` or
            ``labels`` is a single str; nothing is written.
        ShardedWriteError
            If the parts of some shards failed; ``committed`` lists the
            keys that were written.
        SobolevIndexError
            If the index is closed or open for reading.
        """
        return self._write(measures, keys, labels, fields, upsert=False, ids=ids)

    def upsert(self, measures, keys, labels=None, fields=None, ids=None):
        """Add measures, replacing the live documents with the same keys.

        Each key is replaced in the shard that holds it, and the new
        version takes a new id. Not atomic across shards: see :meth:`add`.

        Parameters
        ----------
        measures : sequence of (nodes, masses), ndarray or sparse matrix
            The documents' measures, as for
            :meth:`IndexBase.add <sobolev_index.IndexBase.add>`: ``(nodes,
            masses)`` pairs (``masses=None``: equal masses), or an
            n x n_nodes array or SciPy sparse matrix of node masses.
        keys : list of str, optional
            One non-empty key per measure, none twice. Required: the
            documents to replace are found by key.
        labels : list of str or None, optional
            One label per measure (an entry may be None); None (the
            default) labels none.
        fields : list of dict or None, optional
            One dict of JSON metadata per measure (an entry may be None);
            None (the default) stores none.
        ids : sequence of int, optional
            The documents' global ids: strictly increasing integers, the
            first at least :attr:`next_id`. None (the default) gives the
            next ids in turn.

        Returns
        -------
        list of str
            The documents' keys, in the order of ``measures``.

        Raises
        ------
        ValueError
            If ``keys`` is None, or ``keys``, ``labels``, ``fields`` or
            ``ids`` do not have one valid entry per measure.
        DuplicateKeyError
            If a key is given twice in the batch.
        InvalidMeasureError
            If a measure is not valid.
        ShardedWriteError
            If the parts of some shards failed; ``committed`` lists the
            keys that were written.
        SobolevIndexError
            If the index is closed or open for reading.
        """
        if keys is None:
            raise ValueError("upsert needs keys: the documents to replace are found by key")
        return self._write(measures, keys, labels, fields, upsert=True, ids=ids)

    def _write(self, measures, keys, labels, fields, upsert, ids):
        self._check_writable()
        # The checks against the shards and the write share one bound; the
        # question of what a failed part committed has its own (settle).
        with self._placement.bounded():
            keys, batch, labels, ids, parts, results = self._write_parts(
                measures, keys, labels, fields, upsert, ids)
        if not parts:
            return keys
        # A failed shard, at its latest commit, says which of its part's keys
        # are live with this batch's ids and measures.
        settle(self._placement, "upsert" if upsert else "add", results, parts, keys,
               tasks.committed_part, lambda i: (
                   rows_of(batch, parts[i]), [keys[j] for j in parts[i]],
                   [labels[j] for j in parts[i]], ids[parts[i]]), self.shard_paths)
        return keys

    def _write_parts(self, measures, keys, labels, fields, upsert, ids):
        """The checks of a write and the write of each shard's part: (keys,
        batch, labels, ids, parts, {shard: its result or error}); parts is
        empty for an empty batch."""
        batch = measures if isinstance(measures, MeasureBatch) else as_measure_batch(
            measures, n_nodes=self.n_nodes)
        n = len(batch)
        if ids is None:
            check_room(self._next_id, n)
            ids = np.arange(self._next_id, self._next_id + n, dtype=np.int64)
        else:
            ids = checked_ids(ids, n, self._next_id)
        generated = keys is None
        keys = checked_keys(keys, ids, self.existing_keys)
        # The checks a single index makes, here before any shard writes.
        labels = checked_column("labels", labels, n, str)
        fields = checked_column("fields", fields, n, dict)
        for i, value in enumerate(fields):
            if value is not None:
                json_fields(value, i)
        if not upsert and not generated:  # generated keys avoid the taken ones
            existing = self.existing_keys(keys)
            for key in keys:
                if key in existing:
                    raise DuplicateKeyError(
                        f"key {key!r} is already in the index; use upsert() to replace it")
        if n == 0:
            return [], batch, labels, ids, {}, {}
        parts = self._by_shard(keys)
        # Taken whatever happens next: a part that fails leaves its ids
        # unused, and no id is given twice.
        self._next_id = int(ids[-1]) + 1
        results = self._placement.map(tasks.write, {
            i: (rows_of(batch, js), [keys[j] for j in js], [labels[j] for j in js],
                [fields[j] for j in js], upsert, ids[js])
            for i, js in parts.items()}, pinned=True)
        return keys, batch, labels, ids, parts, results

    def delete(self, keys):
        """Delete documents by key.

        Every key is looked up first (one missing: nothing is deleted);
        then each shard deletes its keys in its own transaction, so, as for
        :meth:`add`, a failure in some shards raises
        :class:`ShardedWriteError` listing the keys that were deleted.

        Parameters
        ----------
        keys : str or iterable of str
            A key, or a list of keys, of live documents.

        Returns
        -------
        int
            The number of documents deleted (a key given twice counts once).

        Raises
        ------
        KeyNotFoundError
            If a key is not a live document; nothing was deleted.
        TypeError
            If ``keys`` is not a str or an iterable of str.
        ShardedWriteError
            If some shards failed; ``committed`` lists the keys that were
            deleted.
        SobolevIndexError
            If the index is closed or open for reading.
        """
        self._check_writable()
        keys = keys_to_delete(keys)
        live = self.existing_keys(keys)
        missing = [k for k in keys if k not in live]
        if missing:
            raise KeyNotFoundError(
                f"{len(missing)} key(s) are not in the index, e.g. {missing[0]!r}; nothing was "
                "deleted")
        keys = list(dict.fromkeys(keys))
        parts = self._by_shard(keys)
        with self._placement.bounded():
            results = self._placement.map(tasks.delete, {
                i: ([keys[j] for j in js],) for i, js in parts.items()}, pinned=True)
        count = sum(result[0] for result in results.values()
                    if not isinstance(result, Exception))
        # Keys a failed shard no longer has were deleted.
        count += len(settle(self._placement, "delete", results, parts, keys, tasks.deleted_part,
                            lambda i: ([keys[j] for j in parts[i]],), self.shard_paths))
        return count

    @classmethod
    def upgrade(cls, path, timeout=None):
        """Rewrite every shard that an older release wrote in this release's format.

        Each shard is upgraded with :meth:`SobolevIndex.upgrade
        <sobolev_index.SobolevIndex.upgrade>`, in this process, one after
        the other, while the sharded index's writer lock is held. Keys, ids
        and the manifest are unchanged. Interrupted, it leaves every shard
        readable and the ones already rewritten writable; running it again
        finishes the job.

        Parameters
        ----------
        path : str or os.PathLike
            The sharded index's directory; it must not be open for writing.
        timeout : float, optional
            How many seconds to wait for the sharded index's writer lock,
            and as long for each shard's; None (the default) does not wait.

        Returns
        -------
        dict
            ``path`` (absolute), ``from_version`` (the oldest shard's),
            ``to_version``, ``segments_rewritten`` and ``documents`` (over
            all shards) and ``shards`` (their number).

        Raises
        ------
        NotAnIndexError
            If ``path`` is not a sharded index.
        IndexLockedError
            If another writer holds a lock.
        """
        path = os.fspath(path)
        manifest = read_manifest(path)
        lock = storage.WriterLock(path, timeout)
        try:
            reports = [SobolevIndex.upgrade(os.path.join(path, name), timeout=timeout)
                       for name in manifest["shards"]]
        finally:
            lock.release()
        return {"path": os.path.abspath(path),
                "from_version": min(r["from_version"] for r in reports),
                "to_version": storage.FORMAT_VERSION,
                "segments_rewritten": sum(r["segments_rewritten"] for r in reports),
                "documents": sum(r["documents"] for r in reports), "shards": len(reports)}

    def compact(self):
        """Compact every shard.

        Each shard drops its deleted documents and merges its segments, as
        :meth:`SobolevIndex.compact <sobolev_index.SobolevIndex.compact>`
        does.

        Raises
        ------
        SobolevIndexError
            If the index is closed or open for reading.
        """
        self._check_writable()
        self._raise_failed(self._placement.map(tasks.call, self._every_shard("compact"),
                                               pinned=True), "compact")

    def verify(self, repair=False, sample=None, seed=0):
        """Verify every shard, their agreement with the manifest, and the sharded invariants.

        Each shard is checked as :meth:`SobolevIndex.verify
        <sobolev_index.SobolevIndex.verify>` checks it. The sharded index's
        own invariants are that every live key is in the shard its hash
        routes it to, and that no document id is in two shards (both break
        only when a shard is written to directly, or a shard directory is
        replaced by a copy of another). Problems are reported, not raised;
        a shard whose verify raised is reported so.

        Parameters
        ----------
        repair : bool, default False
            Repair each shard as ``SobolevIndex.verify`` does (writers
            only).
        sample : int, optional
            Rows per segment each shard checks, an integer >= 1; None (the
            default) means ``SobolevIndex.verify``'s default.
        seed : int, default 0
            Seed of the choice of those rows.

        Returns
        -------
        dict
            ``ok``; ``problems``, the problems of all shards, each prefixed
            with its shard; ``documents``, ``deleted`` and ``segments``,
            summed over the shards (None if a shard could not tell); and
            ``shards``, each shard's own report.

        Raises
        ------
        SobolevIndexError
            If the index is closed, or ``repair`` is asked of a reader.
        ValueError
            If ``sample`` is not an integer >= 1.
        """
        self._check_open()
        # Refused here, as the single index refuses them, not once per shard.
        if sample is not None:
            sample = check_sample_size(sample)
        if repair:
            self._check_writable()
        kwargs = {"repair": repair, "seed": seed}
        if sample is not None:
            kwargs["sample"] = sample
        reports = self._placement.map(tasks.verify, self._every_shard(kwargs),
                                      pinned=bool(repair))
        problems, out = [], []
        for i in range(self.shards):
            report = reports[i]
            if isinstance(report, Exception):
                report = {"ok": False, "problems": [f"verify raised {report!r}"],
                          "documents": None, "deleted": None, "segments": None}
            else:
                try:
                    check_agrees(i, self.shard_paths[i], report.pop("describe"),
                                  self._manifest, "the manifest")
                except ShardError as exc:
                    report["problems"].append(str(exc))
                    report["ok"] = False
            problems += [f"shard {i} ({self.shard_paths[i]}): {p}" for p in report["problems"]]
            out.append(report)
        listed = self._placement.map(tasks.call, self._every_shard("ids_and_keys"))
        listed = {i: found for i, found in listed.items()
                  if not isinstance(found, Exception)}  # else reported above: verify raised
        for i, problem in sharded_invariants(listed, self.shards):
            problems.append(f"shard {i} ({self.shard_paths[i]}): {problem}")
            out[i]["problems"].append(problem)
            out[i]["ok"] = False

        def total(name):
            values = [r.get(name) for r in out]
            return None if any(v is None for v in values) else sum(values)

        return {"ok": not problems, "problems": problems, "documents": total("documents"),
                "deleted": total("deleted"), "segments": total("segments"), "shards": out}

    # ---------------------------------------------------------------- search
    def search(self, queries, k=None, p=None, roots=None, where=None, n_threads=None,
               radius=None, limit=None, stats=False, candidates=None, candidate_roots=None):
        self._check_open()
        with self._placement.bounded():
            return self._search(queries, k, p, roots, where, n_threads, radius, limit, stats,
                                candidates, candidate_roots)

    def _search(self, queries, k, p, roots, where, n_threads, radius, limit, stats,
                candidates=None, candidate_roots=None):
        started = time.perf_counter()
        p = self.p if p is None else check_p(p)
        # Checked here, before any shard is asked, as a single index checks
        # them: a shard with nothing in scope would not check them at all.
        k, radius = checked_search_args(k, radius, limit)
        query_keys = None
        if isinstance(queries, str) or (isinstance(queries, (list, tuple)) and queries
                                        and all(isinstance(q, str) for q in queries)):
            query_keys = [queries] if isinstance(queries, str) else list(queries)
            stored = self._stored_measures(query_keys)
            queries = [(nodes, masses) for nodes, masses, _, _ in stored]
        # Checked here, once, so that bad queries raise one clear error.
        checked = as_measure_batch(queries, n_nodes=self.n_nodes)
        n_queries = len(checked)
        if n_queries == 0:
            raise InvalidMeasureError("no queries were given")
        if radius is not None:
            radius = radius_for_queries(radius, n_queries)
        check_where(where)
        approximate = checked_candidates(candidates, candidate_roots, k, radius,
                                         len(self._root_positions(roots)))
        # Candidates from every root searched: the exact search, certified.
        ranked = approximate is not None and approximate[1] < len(self._root_positions(roots))
        kwargs = {"k": k, "p": p, "roots": roots, "n_threads": n_threads, "radius": radius,
                  "limit": limit, "stats": stats}
        if ranked:
            kwargs.update(candidates=candidates, candidate_roots=candidate_roots)
        shared = self._placement.scatter(queries, checked.indptr.nbytes + checked.nodes.nbytes
                                         + checked.masses.nbytes)
        args_of = {i: (shared, dict(kwargs, where=self._shard_where(where, i)), n_queries)
                   for i in range(self.shards)}
        if radius is None and not ranked:
            found = self._placement.map_in_turn(tasks.search_in_turn, args_of, int(k))
            # A shard whose group's task failed for want of a worker, or
            # went where a writer's shard is not, is asked again on its own,
            # where the scheduler says it is now; bad input is not, nor a
            # shard that did not answer in time (the time is up).
            again = {i: args_of[i] for i, f in found.items()
                     if isinstance(f, Exception) and not isinstance(f, _INPUT_ERRORS)
                     and not isinstance(f, ShardError)}
            if again:
                found.update(self._placement.map(tasks.search, again, pinned=True))
        else:
            found = self._placement.map(tasks.search, args_of)
        found = self._raise_failed(found, "search")
        searched = time.perf_counter()
        found = [found[i] for i in range(self.shards)]

        absent = set.intersection(*[f.absent for f in found])
        if absent:
            warnings.warn(f"no live document has the label {', '.join(sorted(map(repr, absent)))}",
                          UserWarning, stacklevel=3)
        if radius is None:
            # As a single index: min(k, live documents) columns whatever
            # ``where`` admits, padded with inf (each shard reports its own
            # live count, also when nothing in it is in scope).
            width = min(int(k), sum(f.live for f in found))
        else:
            width = limit
        keys, distances, labels, ids, scores, truncated = merge_hits(found, n_queries, width)
        if query_keys is not None:
            self._own_key_first(query_keys, stored, where, keys, distances, labels, ids,
                                width)
        if radius is None:
            # Padded with inf, as a single index's.
            distances, scores = (padded(rows, width) for rows in (distances, scores))
        else:
            truncated = [bool(t or any(f.truncated[q] for f in found))
                         for q, t in enumerate(truncated)]
        totals = summed_stats(found, n_queries, stats)
        certified = None
        if approximate is not None:
            certified = [all(f.certified is None or f.certified[q] for f in found)
                         for q in range(n_queries)]
        if stats:
            totals["seconds"] = {"search": searched - started,
                                 "merge": time.perf_counter() - searched,
                                 "total": time.perf_counter() - started}
        return SearchResult(keys, distances, labels, p, totals,
                            radius=radius,
                            truncated=None if radius is None else truncated, ids=ids,
                            scores=scores, certified=certified)

    def _stored_measures(self, keys):
        """(nodes, masses, label, id) of each stored key, from its shard."""
        check_str_keys(keys)
        parts = self._by_shard(keys)
        got = self._raise_failed(self._placement.map(
            tasks.stored_measures, {i: ([keys[j] for j in js],) for i, js in parts.items()}),
            "search")
        out = [None] * len(keys)
        for i, js in parts.items():
            for j, measure in zip(js, got[i]):
                out[j] = measure
        return out

    def _shard_where(self, where, i):
        """``where`` for shard i: its ``keys`` only those routed to it."""
        if not isinstance(where, dict) or not isinstance(where.get("keys"), (list, tuple)):
            return where
        mine = [key for key in where["keys"]
                if isinstance(key, str) and route(key, self.shards) == i]
        return dict(where, keys=mine)

    def _own_key_first(self, query_keys, stored, where, keys, distances, labels, ids, width):
        """results.own_key_first, with the stored keys' labels and ids
        (``stored``, from their shards) and ``where`` deciding whether a
        stored key may be returned."""
        def stored_of(q, key):
            label, doc_id = stored[q][2], stored[q][3]
            return (label, doc_id) if admitted(key, label, where) else None

        own_key_first(query_keys, keys, distances, labels, ids, width, stored_of)

    # ------------------------------------------------------- Gram matrices
    def distance_matrix(self, keys=None, p=None, roots=None, t=None, power=False,
                        chunk=GRAM_CHUNK):
        """The matrix of S_p between stored documents, as a lazy Dask array.

        The array is made of ``chunk`` x ``chunk`` blocks, for a matrix
        larger than memory: write it with ``to_zarr`` (or
        :meth:`write_distance_matrix`). It holds the same values as
        :func:`~sobolev_index.pairwise_sobolev` of the documents' features,
        exactly symmetric with a zero diagonal.

        Parameters
        ----------
        keys : str or list of str, optional
            The documents, in order; None (the default) means every live
            document in insertion order.
        p : float or "inf", optional
            The order of S_p; None (the default) means the index's :attr:`p`.
        roots : int or sequence of int, optional
            Positions into :attr:`roots` of the roots to slice over, their
            eta renormalised; None (the default) uses all.
        t : float, optional
            Give the kernel exp(-t d) instead of the distances d; None (the
            default) gives the distances.
        power : bool, default False
            Use d = sum_r eta_r S_p^p; needs a finite p.
        chunk : int, default 4096
            Rows and columns of a block.

        Returns
        -------
        array : dask.array.Array of shape (n, n), float64
            The matrix, not computed yet.
        keys : list of str
            The rows' (and columns') keys.

        Raises
        ------
        KeyNotFoundError
            If a key is not live.
        ValueError
            If no documents are chosen, ``power=True`` with p = inf, or
            ``chunk``, ``p`` or ``roots`` is not valid.
        SobolevIndexError
            If the index is closed.
        """
        from .gram import distance_matrix

        self._check_open()
        return distance_matrix(self, keys, p, roots, t, power, chunk)

    def write_distance_matrix(self, path, keys=None, p=None, roots=None, t=None, power=False,
                              chunk=GRAM_CHUNK):
        """Compute :meth:`distance_matrix` into a new Zarr array at ``path``.

        It is computed on the Dask client if the index has one, else on
        local threads. The array's attributes hold ``keys`` (the row and
        column order), ``p``, ``roots``, ``t`` and ``power``.

        Parameters
        ----------
        path : str or os.PathLike
            Where to write the Zarr array; nothing may be there yet.
        keys : str or list of str, optional
            As for :meth:`distance_matrix`.
        p : float or "inf", optional
            As for :meth:`distance_matrix`.
        roots : int or sequence of int, optional
            As for :meth:`distance_matrix`.
        t : float, optional
            As for :meth:`distance_matrix`.
        power : bool, default False
            As for :meth:`distance_matrix`.
        chunk : int, default 4096
            As for :meth:`distance_matrix`; also the Zarr chunks.

        Returns
        -------
        dict
            ``path`` (absolute), ``shape`` and ``chunks``.

        Raises
        ------
        FileExistsError
            If ``path`` exists.
        KeyNotFoundError
            If a key is not live.
        ValueError
            As for :meth:`distance_matrix`.
        SobolevIndexError
            If the index is closed.
        """
        from .gram import write_distance_matrix

        return write_distance_matrix(self, path, keys, p, roots, t, power, chunk)
