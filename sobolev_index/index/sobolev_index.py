"""SobolevIndex: a persistent, incrementally updatable, exact k-NN index under S_p.

The class is a facade over the index's components, each in its own module:

- ``snapshot.py``: what a reader sees, one committed state (loaded at open
  and by ``refresh``), and the look-ups on it (``get``, ``features``, ...);
- ``writer.py``: adds, upserts, deletes and merges, for an index open for
  writing; ``merge_policy.py`` chooses what a merge takes;
- ``query.py``: searches (planned, executed, assembled) and the distances
  between stored documents; ``explain.py``: which edges carry a distance;
- ``verify.py`` and ``recover.py``: checking the files against the
  catalog, and adding back documents the catalog lost.

The files are ``storage.py``'s and the commit point ``catalog.py``'s, where
the on-disk protocol is described. What every kind of index (this one and
the sharded one) keeps in common is ``base.IndexBase``.
"""
import math
import os

import numpy as np

from ..distances import check_p
from ..errors import ADVICE, CorruptIndexError, NotAnIndexError, OlderFormatError
from ..graph import Graph
from . import storage
from .arguments import check_sample_size
from .base import IndexBase
from .catalog import Catalog
from .explain import Explain
from .query import Query
from .recover import recover_lost
from .results import SearchResult
from .snapshot import Snapshot
from .verify import VERIFY_SAMPLE, verify_index, verify_path
from .writer import Writer

__all__ = ["SobolevIndex", "SearchResult"]


class SobolevIndex(IndexBase):
    """A persistent exact k-nearest-neighbour index of measures under S_p.

    The index is one directory: a graph file (the graph and its
    shortest-path trees), segment files (the documents' measures and their
    inverted files) and a SQLite catalog, the commit point. It keeps the
    contract of :class:`~sobolev_index.IndexBase`, whose methods
    (:meth:`search`, :meth:`add`, :meth:`get`, ...) document what they do
    here too.

    Create one with :meth:`create`, open one with :meth:`open`. A writer
    (mode "a") holds the directory's writer lock until :meth:`close`; readers
    (mode "r") work from the snapshot committed when they opened (see
    :meth:`refresh`); the writer does not wait for them, except briefly to
    delete merged-away files while a reader loads a snapshot.

    Parameters
    ----------
    path : str
        The index's directory.
    mode : {"r", "a"}
        ``"r"`` for a reader, ``"a"`` for the writer.
    catalog : Catalog
        The index's catalog, open (read-only for a reader).
    lock : WriterLock or None
        The writer lock, already held (None for a reader); :meth:`close`
        releases it.
    check : bool, default False
        Hash every segment file when it is first loaded (see :meth:`open`).

    Attributes
    ----------
    path : str
        The index's directory.
    mode : {"r", "a"}
        ``"r"``: open for reading; ``"a"``: open for writing.

    See Also
    --------
    sobolev_index.ShardedIndex : The same index split over several shards.
    sobolev_index.open_index : Opens either kind of index.

    Notes
    -----
    Do not call the constructor: :meth:`create` and :meth:`open` check the
    path and the format, take the lock and open the catalog it expects.

    Each :meth:`add`, :meth:`upsert` and :meth:`delete` is one transaction:
    a batch is written all or nothing, and once the call returns it is
    durable (a crash cannot lose it). A delete marks the documents deleted
    (tombstones); :meth:`compact`, and the merges that adds set off, drop
    their rows.

    Examples
    --------
    >>> from sobolev_index import Graph, SobolevIndex
    >>> graph = Graph.from_edges(5, [(0, 1), (1, 2), (2, 3), (3, 4)], [1.0, 2.0, 1.0, 0.5])
    >>> index = SobolevIndex.create("example.idx", graph, p=2)
    >>> index
    SobolevIndex('example.idx', a, documents=0)
    >>> index.add([([0, 1], [0.5, 0.5]), ([1, 2], None), ([3, 4], [0.2, 0.8])],
    ...           keys=["a", "b", "c"])
    ['a', 'b', 'c']
    >>> found = index.search([([0, 2], [0.25, 0.75])], k=2)
    >>> found.keys, found.distances.round(4).tolist()
    ([['b', 'a']], [[0.433, 1.0897]])
    >>> round(float(index.distance("a", "c")), 4)
    1.8894
    >>> index.close()

    A reader of the same directory:

    >>> with SobolevIndex.open("example.idx") as reader:
    ...     print(len(reader), list(reader), reader.get("c")["masses"].round(4).tolist())
    3 ['a', 'b', 'c'] [0.2, 0.8]
    """

    _mismatch = (CorruptIndexError, "run verify()")
    # The methods without a docstring of their own keep IndexBase's
    # contract: help() and the API reference show its docstring.

    def __init__(self, path, mode, catalog, lock, check=False):
        self.path = path
        self.mode = mode
        self._lock = lock
        self._closed = False
        # check=True: every segment is hashed when first loaded (see open).
        self._snap = Snapshot(path, mode, catalog, check)
        self._writer = Writer(self._snap) if mode == "a" else None
        self._query = Query(self._snap)
        self._explain = Explain(self._snap, self._query)
        try:
            self._load()
        except BaseException:
            self.close()
            raise

    def _load(self):
        # The unlisted-segments warning of a first load names the caller of
        # open(): Snapshot._warn_unlisted's stacklevel counts open, _opened,
        # __init__, this method and Snapshot.load between them.
        if self._writer is not None:
            self._writer.prepare()
        self._snap.load()

    # -------------------------------------------- the snapshot, as attributes
    p = property(lambda self: self._snap.p,
                 doc="float: The default order p of searches, in [1, inf].")
    roots = property(lambda self: self._snap.roots,
                     doc="ndarray of int64: The root nodes of the trees.")
    eta = property(lambda self: self._snap.eta,
                   doc="ndarray of float64: The roots' weights (summing to 1).")
    graph = property(lambda self: self._snap.graph,
                     doc="Graph: The :class:`~sobolev_index.Graph` the measures live on.")
    trees = property(lambda self: self._snap.trees,
                     doc="list of ShortestPathTree: One shortest-path tree per root.")
    generation = property(lambda self: self._snap.generation,
                          doc="int: A number that grows whenever the contents change.")
    # For the code that looks inside the snapshot (recover.py, the
    # reliability bench and tests): the catalog, the segments, and the edge
    # weights their inverted files take.
    _catalog = property(lambda self: self._snap.catalog)
    _segments = property(lambda self: self._snap.segments)
    _edge_weight = property(lambda self: self._snap.edge_weight)

    # ------------------------------------------------------------ lifecycle
    @classmethod
    def create(cls, path, graph, roots=None, eta=None, p=1, on_violation="raise", seed=0):
        """Create an index at ``path`` (a new or empty directory) and open it for writing.

        The roots are chosen and their shortest-path trees built here; the
        index is built in a directory beside ``path`` and renamed into
        place, so that a crash never leaves half an index at ``path``.

        Parameters
        ----------
        path : str or os.PathLike
            A directory that does not exist yet, or an empty one.
        graph : Graph
            The graph whose nodes the measures put their mass on.
        roots : None, int or sequence of int, optional
            None (the default) picks one central root (smallest
            eccentricity); an int n picks n random roots (``seed``); a list
            gives the root nodes.
        eta : array-like of float, optional
            The roots' weights: finite, >= 0, with a positive sum,
            normalised to sum 1. None (the default) weighs them equally.
        p : float or "inf", default 1
            The default p of :meth:`search`, in [1, inf].
        on_violation : {"raise", "perturb"}, default "raise"
            What a root with two equally short paths to some node does
            (Assumption 2.1): raise :class:`~sobolev_index.AssumptionError`
            (roots chosen at random or as the centre skip such nodes), or
            perturb the lengths slightly and warn (see
            :meth:`Graph.tree <sobolev_index.Graph.tree>`).
        seed : int, default 0
            Seed of the random roots and of any perturbation.

        Returns
        -------
        SobolevIndex
            The new, empty index, open for writing.

        Raises
        ------
        TypeError
            If ``graph`` is not a :class:`~sobolev_index.Graph`.
        FileExistsError
            If ``path`` exists and is not an empty directory.
        ValueError
            If ``roots`` is not None, a number >= 1 or a list of distinct
            nodes, or ``eta`` or ``p`` is not valid.
        AssumptionError
            If the roots cannot satisfy Assumption 2.1 and ``on_violation``
            is ``"raise"``.

        See Also
        --------
        create_like : An empty index with the graph and trees of another.
        """
        if not isinstance(graph, Graph):
            raise TypeError(f"graph is {type(graph).__name__}; expected a sobolev_index.Graph")
        path = os.fspath(path)
        storage.require_new_directory(path)
        p = check_p(p)
        if roots is None:
            root_nodes, eta = graph.roots(1, strategy="center", seed=seed, eta=eta,
                                          on_violation=on_violation)
        elif isinstance(roots, (int, np.integer)) and not isinstance(roots, bool):
            if roots < 1:
                raise ValueError(f"roots is {roots}; give a number of roots >= 1 or a list of nodes")
            root_nodes, eta = graph.roots(int(roots), strategy="random", seed=seed, eta=eta,
                                          on_violation=on_violation)
        elif not isinstance(roots, (list, tuple, np.ndarray)):
            raise ValueError(f"roots is {roots!r}; expected None, a number of roots or a list of nodes")
        else:
            root_nodes, eta = graph.roots(None, strategy=list(roots), seed=seed, eta=eta,
                                          on_violation=on_violation)
        trees = graph.trees(root_nodes, on_violation=on_violation, seed=seed)
        return cls._create_with(path, graph, trees, root_nodes, eta, p)

    @classmethod
    def create_like(cls, path, source):
        """Create an empty index at ``path`` like ``source``, and open it for writing.

        The new index has the graph, shortest-path trees, roots, eta and p
        of ``source``. The trees are copied, not rebuilt: where shortest
        paths tie, the source broke the ties with lengths perturbed from
        the seed it was created with, which the index does not keep. The new graph file
        holds the source's arrays, written in this release's format (for a
        source in this format, the same file to the byte); so features, and
        therefore distances and search results, agree to the bit. The
        catalog's other meta values (what a build recorded) are not copied.

        Parameters
        ----------
        path : str or os.PathLike
            A directory that does not exist yet, or an empty one.
        source : SobolevIndex
            An open index, for reading or writing.

        Returns
        -------
        SobolevIndex
            The new, empty index, open for writing.

        Raises
        ------
        TypeError
            If ``source`` is not a :class:`SobolevIndex`.
        SobolevIndexError
            If ``source`` is closed.
        FileExistsError
            If ``path`` exists and is not an empty directory.
        """
        if not isinstance(source, SobolevIndex):
            raise TypeError(f"source is {type(source).__name__}; expected an open SobolevIndex")
        source._check_open()
        path = os.fspath(path)
        storage.require_new_directory(path)
        return cls._create_with(path, source.graph, source.trees, source.roots, source.eta,
                                source.p)

    @classmethod
    def _create_with(cls, path, graph, trees, root_nodes, eta, p):
        with storage.staged_directory(path, ".sobolev-index-") as staging:
            os.mkdir(os.path.join(staging, storage.SEGMENT_DIR))
            graph_checksum = storage.write_graph(staging, graph, trees)
            meta = {
                "format": storage.FORMAT_NAME,
                "format_version": storage.FORMAT_VERSION,
                "created_at": storage.utc_now(),
                "p": p if not math.isinf(p) else "inf",
                "n_nodes": graph.n_nodes,
                "n_edges": graph.n_edges,
                "dim": None if graph.coords is None else int(graph.coords.shape[1]),
                "graph": graph.params,
                "graph_checksum": graph_checksum,
                "next_doc_id": 1,
                "next_segment_id": 1,
            }
            Catalog.create(staging, meta, root_nodes, eta)
        return cls.open(path, mode="a")

    @classmethod
    def open(cls, path, mode="r", timeout=None, check=False):
        """Open an index for reading (``"r"``) or writing (``"a"``).

        Opening checks the graph file against its checksum (it reads the
        whole file anyway), and the segment files against the catalog's
        list: files no commit lists get a warning.

        Parameters
        ----------
        path : str or os.PathLike
            The index's directory.
        mode : {"r", "a"}, default "r"
            ``"r"``: a reader, which works from the snapshot committed when
            it opened (see :meth:`refresh`); ``"a"``: the writer, which
            holds the directory's writer lock until :meth:`close`.
        timeout : float, optional
            How many seconds a writer waits for the lock another writer
            holds; None (the default) does not wait.
        check : bool, default False
            Also hash every segment file, as :meth:`verify` does (which
            checks much more besides); a reader's :meth:`refresh` then
            hashes the segments it has not seen. This reads the whole index,
            so it costs about as much as reading it from disk.

        Returns
        -------
        SobolevIndex
            The open index, also a context manager that closes it.

        Raises
        ------
        ValueError
            If ``mode`` is not ``"r"`` or ``"a"``, or ``check`` is not a
            bool.
        NotAnIndexError
            If ``path`` does not exist, is a file, or has no catalog.
        OlderFormatError
            If ``mode`` is ``"a"`` and an older release wrote the index:
            :meth:`upgrade` it first (it can be read as it is).
        IndexLockedError
            If ``mode`` is ``"a"`` and another writer holds the lock, at
            once or after ``timeout`` seconds.
        CorruptIndexError
            If a file is damaged; the message names it.

        Warns
        -----
        UnlistedSegmentsWarning
            When segment files that no commit lists are in the directory
            (see :meth:`verify` and :meth:`recover`).
        """
        if mode not in ("r", "a"):
            raise ValueError(f"mode is {mode!r}; expected 'r' (read) or 'a' (append/write)")
        if not isinstance(check, bool):
            raise ValueError(f"check is {check!r}; expected True or False")
        path = _index_directory(path)
        if mode == "a":
            _check_writable_format(path)
        return cls._opened(path, mode, timeout, check)

    @classmethod
    def _opened(cls, path, mode, timeout, check=False):
        lock = storage.WriterLock(path, timeout) if mode == "a" else None
        try:
            catalog = Catalog(path, readonly=(mode == "r"))
        except BaseException:
            if lock is not None:
                lock.release()
            raise
        return cls(path, mode, catalog, lock, check)

    @classmethod
    def upgrade(cls, path, timeout=None):
        """Rewrite an index written in an older format in this release's format, in place.

        On an index already in this format it does nothing. The catalog's
        format version is raised first (releases that cannot read the new
        format then refuse the index rather than misread it), then every
        segment of an older format is rewritten on its own, one commit
        each, without its deleted documents. Interrupted, it leaves a
        readable and writable index, and running it again finishes the job.

        Parameters
        ----------
        path : str or os.PathLike
            The index's directory; it must not be open for writing.
        timeout : float, optional
            How many seconds to wait for the writer lock; None (the
            default) does not wait.

        Returns
        -------
        dict
            ``path`` (absolute), ``from_version`` and ``to_version`` (the
            format versions), ``segments_rewritten`` and ``documents`` (the
            live documents).

        Raises
        ------
        NotAnIndexError
            If ``path`` is not an index directory.
        IndexLockedError
            If another writer holds the lock.
        """
        path = _index_directory(path)
        index = cls._opened(path, "a", timeout)
        with index:
            before = int(index._snap.meta["format_version"])
            if before != storage.FORMAT_VERSION:
                index._snap.catalog.set_meta({"format_version": storage.FORMAT_VERSION})
                index._snap.meta["format_version"] = storage.FORMAT_VERSION
            old = [s for s in index._snap.segments if s.data.version != storage.FORMAT_VERSION]
            for segment in old:
                index._writer.merge([segment])
            return {"path": os.path.abspath(path), "from_version": before,
                    "to_version": storage.FORMAT_VERSION, "segments_rewritten": len(old),
                    "documents": len(index)}

    def _release(self):
        if self._snap.catalog is not None:
            self._snap.catalog.close()
        if self._lock is not None:
            self._lock.release()

    def __repr__(self):
        state = "closed" if self._closed else self.mode
        return f"SobolevIndex({self.path!r}, {state}, documents={self._snap.n_live})"

    def refresh(self):
        self._check_open()
        self._load()

    # ------------------------------------------------------------ inspection
    def __len__(self):
        return self._snap.n_live

    def __iter__(self):
        """The live keys, in insertion order."""
        self._check_open()
        return iter(self._snap.catalog.live_keys())

    def __contains__(self, key):
        self._check_open()
        return key in self._snap

    def existing_keys(self, keys):
        self._check_open()
        return self._snap.existing_keys(keys)

    @property
    def segments(self):
        """list of tuple: ``(id, rows, live rows)`` of each segment."""
        return [(s.id, s.rows, int(s.live.sum())) for s in self._snap.segments]

    def get(self, key):
        self._check_open()
        return self._snap.get(key)

    def stored_measures(self, keys):
        """The measures of ``keys`` exactly as stored.

        A query built from them has the very features the index holds for
        the key, to the last bit.

        Parameters
        ----------
        keys : str or list of str
            A live key, or a list of them.

        Returns
        -------
        list of dict
            One per key, in order: ``key``, ``id``, ``nodes`` (int64),
            ``masses`` (float64, the stored values, not divided by their sum
            again as :meth:`get`'s are) and ``label``. The arrays are
            copies: they outlive a merge of the segment.

        Raises
        ------
        KeyNotFoundError
            Naming the first key that is not live.
        TypeError
            If a key is not a str.
        SobolevIndexError
            If the index is closed.
        """
        self._check_open()
        return self._snap.stored_measures(keys)

    def ids_and_keys(self):
        self._check_open()
        return self._snap.ids_and_keys()

    def features(self, keys, root=0):
        """The stored features of documents, on the tree of one root.

        The features are rebuilt from the stored measures.

        Parameters
        ----------
        keys : str or list of str
            A live key, or a list of them.
        root : int, default 0
            The root's position into :attr:`roots`.

        Returns
        -------
        scipy.sparse.csr_matrix of shape (len(keys), graph.n_nodes)
            One row per key, in order (one row for a single key): the
            edge-mass features, column v for the edge from node v to its
            parent.

        Raises
        ------
        KeyNotFoundError
            If a key is not live.
        ValueError
            If ``root`` is not a position into :attr:`roots`.
        SobolevIndexError
            If the index is closed.
        """
        self._check_open()
        return self._snap.features(keys, root)

    def info(self):
        """Counts, sizes and settings of the index.

        Returns
        -------
        dict
            ``path`` (absolute), ``documents`` (live), ``deleted``,
            ``segments``, ``nodes``, ``edges``, ``roots``, ``eta``, ``p``
            (a float, or ``"inf"``), ``bytes`` (on disk), ``graph`` (the
            graph's parameters), ``format_version``,
            ``segments_in_older_format`` (segments still in an older format:
            an index of an older release, or an interrupted upgrade) and
            ``created_at``.

        Raises
        ------
        SobolevIndexError
            If the index is closed.
        """
        self._check_open()
        return self._snap.info()

    @property
    def catalog(self):
        """Catalog: The SQLite catalog; its ``db`` is a sqlite-utils Database on the index's connection."""
        self._check_open()
        return self._snap.catalog

    # --------------------------------------------------------------- writing
    def add(self, measures, keys=None, labels=None, fields=None, ids=None):
        self._check_writable()
        return self._writer.write(measures, keys, labels, fields, upsert=False, ids=ids)

    def upsert(self, measures, keys, labels=None, fields=None, ids=None):
        if keys is None:
            raise ValueError("upsert needs keys: the documents to replace are found by key")
        self._check_writable()
        return self._writer.write(measures, keys, labels, fields, upsert=True, ids=ids)

    @property
    def next_id(self):
        """int: The id the next document added gets, unless told otherwise.

        It is above every id this index has given, deleted documents'
        included.
        """
        self._check_open()
        return int(self._snap.meta["next_doc_id"])

    def reserve_ids(self, next_id):
        self._check_writable()
        self._writer.reserve_ids(next_id)

    def delete(self, keys):
        self._check_writable()
        return self._writer.delete(keys)

    def compact(self):
        """Drop deleted documents and merge the segments into one.

        Past ``merge_policy.MAX_SEGMENT_NNZ`` (2**27) nonzero features, it
        merges runs of consecutive segments up to that cap instead, one
        commit per run. Searches give the same answers before and after.

        Raises
        ------
        SobolevIndexError
            If the index is closed or open for reading.
        """
        self._check_writable()
        self._writer.compact()

    def recover(self, dry_run=False, replace_newer=False):
        """Add again the documents of segment files that no commit lists.

        For an index open for writing only. A catalog that lost commits
        (its ``catalog.sqlite-wal`` deleted, or a copy made without it) no
        longer lists their segment files, and their documents drop out of
        the index. This moves such files from
        ``INDEX/segments/`` to ``INDEX/lost+found/`` (as
        ``verify(repair=True)`` does), then adds each document of the
        segment files in ``lost+found/`` under its key, label and fields,
        as a new document with a new id, except:

        - a document the catalog still has (its id with its key, live or
          deleted since) is left out;
        - a key that is live is left out, unless the lost version was added
          later than the live one and ``replace_newer`` is true (it then
          replaces it, as :meth:`upsert` does);
        - where a key is in several lost files, the version added last
          wins;
        - a document of a segment written before segments kept keys has no
          key to restore it under: it is reported by id.

        A writer killed between writing a segment and committing it leaves
        such a file too: its documents, never acknowledged, are restored as
        well. Files that cannot be read are reported. The files read then
        move to ``lost+found/recovered/``, so that a later recovery does not
        bring back documents deleted in between; nothing is removed.

        Parameters
        ----------
        dry_run : bool, default False
            Move and add nothing: the report says what would be.
        replace_newer : bool, default False
            Let a lost version of a live key that was added later than the
            live one replace it.

        Returns
        -------
        dict
            ``restored``, a list of dicts with ``key``, ``id`` (the
            document's id in its file), ``file`` and ``replaced``;
            ``skipped``, dicts with ``key``, ``id``, ``file`` and
            ``reason``; ``unreadable``, dicts with ``file`` and ``reason``;
            ``files`` (the files read), ``moved`` (the files moved from
            ``segments/``) and ``dry_run``.

        Raises
        ------
        SobolevIndexError
            If the index is closed or open for reading.
        """
        self._check_writable()
        return recover_lost(self, dry_run=bool(dry_run), replace_newer=bool(replace_newer))

    # ------------------------------------------------------------- searching
    def search(self, queries, k=None, p=None, roots=None, where=None, n_threads=None,
               radius=None, limit=None, stats=False, candidates=None, candidate_roots=None):
        self._check_open()
        return self._query.search(queries, k, p, roots, where, n_threads, radius, limit, stats,
                                  candidates, candidate_roots)

    def distance(self, a, b, p=None, roots=None):
        """S_p between two documents or measures.

        Computed from the direct sparse difference of their features: exact
        even for nearly equal measures.

        Parameters
        ----------
        a, b : str or (nodes, masses)
            Each a live key or a measure, as :meth:`add` takes them.
        p : float or "inf", optional
            The order of S_p; None (the default) means the index's :attr:`p`.
        roots : int or sequence of int, optional
            Positions into :attr:`roots` of the roots to slice over, their
            eta renormalised; None (the default) uses all.

        Returns
        -------
        float
            The distance.

        Raises
        ------
        KeyNotFoundError
            If a key is not live.
        InvalidMeasureError
            If a measure is not valid.
        ValueError
            If ``p`` or ``roots`` is not valid.
        SobolevIndexError
            If the index is closed.

        See Also
        --------
        pairwise : The matrix of S_p between stored documents.

        Examples
        --------
        >>> from sobolev_index import Graph, SobolevIndex
        >>> graph = Graph.from_edges(5, [(0, 1), (1, 2), (2, 3), (3, 4)], [1.0, 2.0, 1.0, 0.5])
        >>> with SobolevIndex.create("distance.idx", graph) as index:
        ...     keys = index.add([([0, 1], None), ([3, 4], [0.2, 0.8])], keys=["a", "c"])
        ...     print(round(float(index.distance("a", "c")), 4),
        ...           round(float(index.distance("a", ([0, 1], [0.5, 0.5]))), 4))
        3.9 0.0
        """
        self._check_open()
        return self._query.distance(a, b, p, roots)

    def pairwise(self, keys, other_keys=None, p=None, roots=None, n_threads=None):
        """The matrix of S_p between stored documents.

        Parameters
        ----------
        keys : str or list of str
            The rows' keys.
        other_keys : str or list of str, optional
            The columns' keys; None (the default) means ``keys``, and the
            matrix is then exactly symmetric with a zero diagonal.
        p : float or "inf", optional
            The order of S_p; None (the default) means the index's :attr:`p`.
        roots : int or sequence of int, optional
            Positions into :attr:`roots` of the roots to slice over, their
            eta renormalised; None (the default) uses all.
        n_threads : int, optional
            Threads of the computation; None (the default) or <= 0 means
            every thread OpenMP offers.

        Returns
        -------
        ndarray of shape (len(keys), len(other_keys)), float64
            ``D[i, j]`` is S_p between ``keys[i]`` and ``other_keys[j]``.

        Raises
        ------
        KeyNotFoundError
            If a key is not live.
        ValueError
            If ``p`` or ``roots`` is not valid.
        SobolevIndexError
            If the index is closed.

        Examples
        --------
        >>> from sobolev_index import Graph, SobolevIndex
        >>> graph = Graph.from_edges(5, [(0, 1), (1, 2), (2, 3), (3, 4)], [1.0, 2.0, 1.0, 0.5])
        >>> with SobolevIndex.create("pairwise.idx", graph, p=2) as index:
        ...     keys = index.add([([0, 1], None), ([1, 2], None), ([3, 4], [0.2, 0.8])],
        ...                      keys=["a", "b", "c"])
        ...     print(index.pairwise(["a", "b", "c"]).round(4).tolist())
        ...     print(index.pairwise("a", ["b", "c"]).round(4).tolist())
        [[0.0, 0.866, 1.8894], [0.866, 0.0, 1.3491], [1.8894, 1.3491, 0.0]]
        [[0.866, 1.8894]]
        """
        self._check_open()
        return self._query.pairwise(keys, other_keys, p, roots, n_threads)

    def keys_with_labels(self, labels):
        """The live keys whose label is one of ``labels``, in insertion order.

        Parameters
        ----------
        labels : str, None or iterable of str or None
            A label or several; None stands for the documents without a
            label.

        Returns
        -------
        list of str
            The keys.

        Raises
        ------
        SobolevIndexError
            If the index is closed.
        """
        self._check_open()
        return self._snap.keys_with_labels(labels)

    def gram(self, keys=None, labels=None, p=None, roots=None, t=None, power=False,
             n_threads=None):
        """The distance matrix, or the kernel exp(-t d), of stored documents.

        The documents are ``keys`` plus every live document with one of
        ``labels`` (in insertion order, each once).

        Parameters
        ----------
        keys : str or list of str, optional
            Live keys; None (the default) means none but those of ``labels``.
        labels : str or list of str, optional
            Add the live documents with one of these labels; None (the
            default) adds none.
        p : float or "inf", optional
            The order of S_p; None (the default) means the index's :attr:`p`.
        roots : int or sequence of int, optional
            Positions into :attr:`roots` of the roots to slice over, their
            eta renormalised; None (the default) uses all.
        t : float, optional
            Return the kernel exp(-t d) instead of the distances d; None
            (the default) returns the distances.
        power : bool, default False
            Use d = sum_r eta_r S_p^p, which keeps exp(-t d) positive
            definite for p <= 2; needs a finite p.
        n_threads : int, optional
            Threads of the computation; None (the default) or <= 0 means
            every thread OpenMP offers.

        Returns
        -------
        matrix : ndarray of shape (n, n), float64
            The distances or the kernel.
        keys : list of str
            The documents' keys, the rows' (and columns') order.
        labels : list of str or None
            Their labels.

        Raises
        ------
        ValueError
            If no documents are chosen, ``power=True`` with p = inf, or
            ``p``, ``roots`` or ``t`` is not valid.
        KeyNotFoundError
            If a key is not live.
        SobolevIndexError
            If the index is closed.

        Examples
        --------
        >>> from sobolev_index import Graph, SobolevIndex
        >>> graph = Graph.from_edges(5, [(0, 1), (1, 2), (2, 3), (3, 4)], [1.0, 2.0, 1.0, 0.5])
        >>> with SobolevIndex.create("gram.idx", graph, p=2) as index:
        ...     keys = index.add([([0, 1], None), ([1, 2], None), ([3, 4], [0.2, 0.8])],
        ...                      keys=["a", "b", "c"], labels=["x", "x", "y"])
        ...     matrix, keys, labels = index.gram(["c"], labels="x", t=1.0)
        >>> keys, labels
        (['c', 'a', 'b'], ['y', 'x', 'x'])
        >>> matrix.round(4).tolist()
        [[1.0, 0.1512, 0.2595], [0.1512, 1.0, 0.4206], [0.2595, 0.4206, 1.0]]
        """
        self._check_open()
        return self._query.gram(keys, labels, p, roots, t, power, n_threads)

    def explain(self, a, b, p=None, top=10, roots=None, n_words=5):
        """The subtrees (edges of the shortest-path trees) that carry most of S_p(a, b).

        Each edge's share is its part of the distance: with one root, its
        term of S_p^p over S_p^p; over several roots, each root's part
        eta_r S_p^(r) is split among its edges in proportion to their terms,
        so that the shares of all edges sum to 1 and
        sum_r eta_r (sum of root r's terms)^(1/p) is the distance. At
        p = inf the edge with a root's largest difference carries that
        root's whole part (split equally among ties) and the other edges a
        share of 0.

        The same node v names an edge in every root's tree, so the pairs
        are grouped by v (``Explanation.groups``: one row per node,
        its share the sum of its pairs' shares, listed by decreasing share);
        ``Explanation.edges`` keeps the top pairs one by one. See
        :class:`Explanation` for the fields.

        For a text index, each row lists the words of each measure's nodes
        in its subtree, the node with the most mass first (from the
        catalog's words table; a node that stands for several words, in a
        clustered graph, lists them all, most frequent first, since a
        measure keeps its mass per node, not per word). For a point index
        (node coordinates, no words) it gives the coordinates of the edge's
        two nodes.

        Parameters
        ----------
        a, b : str or (nodes, masses)
            Each a live key or a measure, as for :meth:`distance`.
        p : float or "inf", optional
            The order of S_p; None (the default) means the index's :attr:`p`.
        top : int or None, default 10
            How many groups, and how many (root, edge) pairs, to list, by
            decreasing share; None lists every one with a nonzero
            difference.
        roots : int or sequence of int, optional
            Positions into :attr:`roots` of the roots to use, their eta
            renormalised; None (the default) uses all.
        n_words : int, default 5
            How many nodes, and words, to list per measure and row.

        Returns
        -------
        Explanation
            The distance, its groups and edges (see
            :class:`~sobolev_index.Explanation` for the fields).

        Raises
        ------
        ValueError
            If ``top`` or ``n_words`` is not an integer >= 1, or ``p`` or
            ``roots`` is not valid.
        KeyNotFoundError
            If a key is not live.
        InvalidMeasureError
            If a measure is not valid.
        SobolevIndexError
            If the index is closed.
        """
        self._check_open()
        return self._explain.explain(a, b, p, top, roots, n_words)

    # ---------------------------------------------------------------- verify
    @classmethod
    def verify_path(cls, path, repair=False, sample=VERIFY_SAMPLE, seed=0, timeout=None):
        """:meth:`verify` the index at ``path`` without opening it.

        It reads the catalog and the graph but loads no segment, so an
        index that cannot be opened (a segment missing or damaged, a
        damaged graph or catalog) gets a report rather than an exception.

        Parameters
        ----------
        path : str or os.PathLike
            The index's directory.
        repair : bool, default False
            Repair as :meth:`verify` does; this takes the writer lock.
        sample : int, default 64
            Rows per segment whose features are rebuilt and compared (see
            :meth:`verify`).
        seed : int, default 0
            Seed of the choice of those rows.
        timeout : float, optional
            How many seconds ``repair=True`` waits for the writer lock;
            None (the default) does not wait.

        Returns
        -------
        dict
            The report, as :meth:`verify` returns it.

        Raises
        ------
        NotAnIndexError
            If ``path`` is not an index directory.
        ValueError
            If ``sample`` is not an integer >= 1.
        IndexLockedError
            If ``repair`` is asked and another writer holds the lock.
        """
        path = _index_directory(path)
        sample = check_sample_size(sample)
        return verify_path(path, repair=bool(repair), sample=sample, seed=seed, timeout=timeout)

    def verify(self, repair=False, sample=VERIFY_SAMPLE, seed=0):
        """Check files against the catalog; report problems instead of raising.

        Checks the catalog (SQLite's integrity check, text that does not
        decode, agreement between its tables and with the segments), the
        graph file and every segment's checksum, that each document points
        at its own row and each segment row is a listed document; every
        row's stored normalising factor (against its masses) and row norms
        (against the stored values), and each root's count of postings
        (against the rows' features); and that the inverted file holds the
        features of up to ``sample`` rows per segment, rebuilt from their
        measures (format 2: also the stored features, bit for bit).

        Temporary files and the files of segments a merge replaced are
        listed as ``orphans``. Other segment files no commit lists are
        problems, listed under ``unlisted`` with their document counts: a
        writer killed before its commit leaves one, and so does a catalog
        that lost commits (a deleted ``catalog.sqlite-wal``), in which case
        they hold acknowledged documents. ``repair=True`` (writers only)
        removes the orphans and moves the unlisted files to
        ``INDEX/lost+found/`` (``moved``); nothing is deleted that might
        hold data. A reader verifies the latest commit, through a
        connection of its own, and keeps its snapshot.

        Parameters
        ----------
        repair : bool, default False
            Remove the orphans and move the unlisted files to
            ``INDEX/lost+found/`` (writers only).
        sample : int, default 64
            Rows per segment whose features are rebuilt from their measures
            and compared with the inverted file.
        seed : int, default 0
            Seed of the choice of those rows.

        Returns
        -------
        dict
            ``ok`` (no problems), ``problems`` (a list of str),
            ``orphans``, ``repaired``, ``unlisted``, ``moved``,
            ``segments``, ``documents``, ``deleted`` and ``checked_rows``.

        Raises
        ------
        SobolevIndexError
            If the index is closed, or ``repair`` is asked of a reader.
        ValueError
            If ``sample`` is not an integer >= 1.

        See Also
        --------
        verify_path : The same check of an index that cannot be opened.
        recover : Add back the documents of unlisted segment files.
        """
        self._check_open()
        sample = check_sample_size(sample)
        if repair:
            self._check_writable()
        if self.writable:
            return verify_index(self.path, self._snap.catalog, self.trees, self.graph.n_nodes,
                                sample=sample, seed=seed, repair=repair)
        latest = Catalog(self.path, readonly=True)
        try:
            # Pinned like a snapshot load: a merge meanwhile leaves the files
            # this commit names in place (the writer defers their deletion).
            with storage.files_pinned(self.path):
                return verify_index(self.path, latest, self.trees, self.graph.n_nodes,
                                    sample=sample, seed=seed, repair=False)
        finally:
            latest.close()


def _index_directory(path):
    """``path`` as a str, or NotAnIndexError unless it is an index directory
    (checked before a writer takes the lock, which would create a file)."""
    path = os.fspath(path)
    if not os.path.isdir(path):
        if os.path.exists(path):
            raise NotAnIndexError(f"{path} is a file, not a sobolev-index directory")
        raise NotAnIndexError(f"{path} does not exist; create an index there first")
    if not os.path.isfile(os.path.join(path, storage.CATALOG)):
        raise NotAnIndexError(
            f"{path} is not a sobolev-index directory: it has no {storage.CATALOG}"
        )
    return path


def _check_writable_format(path):
    """OlderFormatError unless the index at ``path`` is in the format this
    release writes (checked before the writer lock is taken)."""
    probe = Catalog(path, readonly=True)
    version = probe.format_version
    probe.close()
    if version != storage.FORMAT_VERSION:
        raise OlderFormatError(
            f"{path} is in format version {version}, which an older release wrote; this "
            f"release reads it but writes format {storage.FORMAT_VERSION} only. Rewrite it "
            f"{ADVICE['upgrade']}, {ADVICE['read_as_is']}")
