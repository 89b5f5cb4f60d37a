"""The contract every index keeps, single or sharded.

:class:`IndexBase` is what code that works on "an index" may rely on:
:class:`~sobolev_index.SobolevIndex` (one directory) and
:class:`~sobolev_index.distributed.ShardedIndex` (several, searched in this
process or on Dask) both implement it, take the same arguments, refuse the
same bad ones with the same messages (``arguments.py``) and return the same
:class:`~sobolev_index.SearchResult`. The lifecycle (close, ``with``, the
open and writable checks) and what follows from the abstract methods alone
(``keys_in_order``, iteration, the exact k-NN graph, each document's
neighbours and the groups of near-duplicates) are written here once.

What an index holds, as attributes: ``path``, ``mode`` (``"r"`` or
``"a"``), ``p`` (the default order), ``roots`` and ``eta`` (its trees'
roots and their weights). The graph's size is ``graph.n_nodes`` on a
single index and ``n_nodes`` on a sharded one.
"""
import abc
import warnings

import numpy as np

from ..distances import check_p
from ..errors import ADVICE, SobolevIndexError
from .arguments import check_positive, check_radius, root_positions
from .results import SearchResult

__all__ = ["IndexBase", "KNN_GRAPH_BATCH"]

# Documents per search call of knn_graph: large enough to fill the threads
# and amortise a call, small enough to report progress often.
KNN_GRAPH_BATCH = 1024


class IndexBase(abc.ABC):
    """The contract of an exact k-NN index of probability measures under S_p.

    Code that works on "an index" may rely on this class alone:
    :class:`~sobolev_index.SobolevIndex` (one directory) and
    :class:`~sobolev_index.ShardedIndex` (several shards, searched in this
    process or on Dask) both implement it, take the same arguments, refuse
    the same bad values with the same messages and return the same
    :class:`~sobolev_index.SearchResult`. Each kind implements the abstract
    methods; the lifecycle (:meth:`close`, the ``with`` statement, the
    checks that the index is open and writable) and what follows from the
    abstract methods alone (:meth:`keys_in_order`, iteration over the live
    keys, :meth:`knn_graph`, :meth:`neighbours` and :meth:`duplicates`) are
    written here once.

    The class is abstract: open an index with
    :func:`~sobolev_index.open_index`, or with the ``open`` and ``create``
    class methods of one kind.

    Attributes
    ----------
    path : str
        The index's directory.
    mode : {"r", "a"}
        ``"r"``: open for reading; ``"a"``: open for writing.
    p : float
        The default order of :meth:`search`, in [1, inf].
    roots : ndarray of int64
        The root nodes of the index's shortest-path trees.
    eta : ndarray of float64
        The roots' weights, summing to 1.
    kind : str
        How messages name this kind of index ("the index at PATH is
        closed").

    See Also
    --------
    sobolev_index.SobolevIndex : The index of one directory.
    sobolev_index.ShardedIndex : One index over several shards.
    sobolev_index.open_index : Opens either kind.

    Notes
    -----
    ``len(index)`` is the number of live documents, ``key in index`` says
    whether ``key`` is one, and iterating over the index gives the live
    keys in insertion order. A closed index refuses searches, look-ups and
    writes, and an index open for reading refuses writes, both with a
    :class:`~sobolev_index.SobolevIndexError` that names the index.

    Examples
    --------
    >>> from sobolev_index import Graph, IndexBase, SobolevIndex, open_index
    >>> graph = Graph.from_edges(5, [(0, 1), (1, 2), (2, 3), (3, 4)], [1.0, 2.0, 1.0, 0.5])
    >>> with SobolevIndex.create("base.idx", graph) as index:
    ...     index.add([([0, 1], None), ([3, 4], [0.2, 0.8])], keys=["a", "b"])
    ['a', 'b']
    >>> with open_index("base.idx") as index:
    ...     print(isinstance(index, IndexBase), index.mode, len(index), list(index))
    True r 2 ['a', 'b']
    """

    #: How messages name this kind of index ("the index at PATH ...").
    kind = "index"
    #: What a k-NN graph row with too few neighbours raises, and the advice
    #: its message ends with (a writer changed the index meanwhile, or the
    #: index is damaged).
    _mismatch = (SobolevIndexError, "run verify()")

    # ------------------------------------------------------------ lifecycle
    @classmethod
    @abc.abstractmethod
    def open(cls, path, mode="r", **options):
        """Open the index at ``path`` for reading or for writing.

        Parameters
        ----------
        path : str or os.PathLike
            The index's directory.
        mode : {"r", "a"}, default "r"
            ``"r"`` reads the commit that is the latest when it opens (see
            :meth:`refresh`); ``"a"`` opens for writing and holds the
            index's writer lock until :meth:`close`.
        **options
            What this kind of index takes besides (a lock timeout, ...): see
            its own ``open``.

        Returns
        -------
        IndexBase
            The open index, also a context manager that closes it.

        Raises
        ------
        ValueError
            If ``mode`` is not ``"r"`` or ``"a"``, or an option is not valid.
        NotAnIndexError
            If ``path`` is not an index of this kind.
        IndexLockedError
            If ``mode`` is ``"a"`` and another writer holds the index.
        """

    @classmethod
    @abc.abstractmethod
    def create(cls, path, graph, roots=None, eta=None, p=1, **options):
        """Create a new, empty index at ``path`` over ``graph``, open for writing.

        Parameters
        ----------
        path : str or os.PathLike
            A directory that does not exist yet, or an empty one.
        graph : Graph
            The graph whose nodes the measures put their mass on.
        roots : None, int or sequence of int, optional
            The roots of the shortest-path trees: None (the default) one
            central root, an int n that many random roots, a sequence the
            root nodes themselves.
        eta : array-like of float, optional
            The roots' weights, normalised to sum 1; None (the default)
            weighs them equally.
        p : float or "inf", default 1
            The default order of :meth:`search`, in [1, inf].
        **options
            What this kind of index takes besides: see its own ``create``.

        Returns
        -------
        IndexBase
            The new index, open for writing.

        Raises
        ------
        TypeError
            If ``graph`` is not a :class:`~sobolev_index.Graph`.
        FileExistsError
            If ``path`` exists and is not an empty directory.
        ValueError
            If ``roots``, ``eta``, ``p`` or an option is not valid.
        """

    @classmethod
    @abc.abstractmethod
    def create_like(cls, path, source, **options):
        """Create a new, empty index at ``path`` like the index ``source``.

        The new index has the graph, shortest-path trees, roots, eta and p
        of ``source``, and is open for writing.

        Parameters
        ----------
        path : str or os.PathLike
            A directory that does not exist yet, or an empty one.
        source : SobolevIndex
            The index to copy the settings of (what each kind accepts: see
            its own ``create_like``).
        **options
            What this kind of index takes besides: see its own
            ``create_like``.

        Returns
        -------
        IndexBase
            The new index, open for writing.

        Raises
        ------
        TypeError
            If ``source`` is not an index this kind can copy.
        FileExistsError
            If ``path`` exists and is not an empty directory.
        """

    @abc.abstractmethod
    def _release(self):
        """Free what the open index holds (files, locks, workers' shards)."""

    def close(self):
        """Close the index: release its files and, for a writer, its lock.

        Closing it again does nothing. Leaving a ``with`` block closes the
        index too.
        """
        if getattr(self, "_closed", True):
            return
        self._closed = True
        self._release()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    @property
    def writable(self):
        """bool: Whether the index is open (not closed) for writing."""
        return not self._closed and self.mode == "a"

    def _check_open(self):
        if self._closed:
            raise SobolevIndexError(f"the {self.kind} at {self.path} is closed")

    def _check_writable(self):
        self._check_open()
        if self.mode != "a":
            raise SobolevIndexError(f"the {self.kind} at {self.path} is open for reading; "
                                    f"{ADVICE['open_for_writing']} to change it")

    @abc.abstractmethod
    def refresh(self):
        """Move a reader to the latest commit.

        A reader sees the commit that was the latest when it opened, however
        a writer changes the index meanwhile; this moves it to the latest
        one. A writer always sees its own commits.

        Raises
        ------
        SobolevIndexError
            If the index is closed.
        """

    # ------------------------------------------------------------ inspection
    @abc.abstractmethod
    def __len__(self):
        """The number of live documents."""

    @abc.abstractmethod
    def __contains__(self, key):
        """Whether ``key`` is a live document."""

    def __iter__(self):
        """The live keys, in insertion order."""
        return iter(self.keys_in_order())

    @abc.abstractmethod
    def existing_keys(self, keys):
        """Which of ``keys`` are live documents.

        One look-up for many keys, where ``key in index`` is one each.

        Parameters
        ----------
        keys : iterable of str
            The keys to look up; entries that are not str are never live.

        Returns
        -------
        set of str
            Those of ``keys`` that are live documents.

        Raises
        ------
        TypeError
            If ``keys`` is one str, or not iterable.
        SobolevIndexError
            If the index is closed.
        """

    @abc.abstractmethod
    def ids_and_keys(self):
        """The ids and keys of the live documents, in id order.

        Ids follow the insertion order, unless ``ids`` were given to
        :meth:`add` or :meth:`upsert`.

        Returns
        -------
        ids : ndarray of int64
            The documents' ids, increasing.
        keys : list of str
            Their keys, in the same order.

        Raises
        ------
        SobolevIndexError
            If the index is closed.
        """

    def keys_in_order(self):
        """The live keys in insertion (id) order.

        This is the row and column order of :meth:`knn_graph`.

        Returns
        -------
        list of str
            The keys of the live documents.
        """
        return self.ids_and_keys()[1]

    @property
    @abc.abstractmethod
    def next_id(self):
        """int: The id the next document added gets, unless ``ids`` are given."""

    @abc.abstractmethod
    def get(self, key):
        """The stored measure and metadata of the document ``key``.

        Parameters
        ----------
        key : str
            A live key.

        Returns
        -------
        dict
            ``key``; ``id``, the document's id; ``nodes`` (int64 array) and
            ``masses`` (float64 array, normalised to sum 1), a node given
            twice listed twice, as it was added; ``label``; ``fields`` (a
            dict, or None); and ``added_at``, the UTC time the document was
            added (ISO 8601 text). A sharded index adds ``shard``.

        Raises
        ------
        KeyNotFoundError
            If ``key`` is not a live document.
        TypeError
            If ``key`` is not a str.
        SobolevIndexError
            If the index is closed.
        """

    @abc.abstractmethod
    def info(self):
        """Counts, sizes and settings of the index.

        Returns
        -------
        dict
            Among others ``path``, ``documents`` (live), ``deleted``,
            ``segments``, ``nodes``, ``edges``, ``roots``, ``eta``, ``p``
            and ``bytes``; each kind's ``info`` lists all of its keys.
        """

    @abc.abstractmethod
    def verify(self, repair=False, sample=None, seed=0):
        """Check the index's files against its catalog, and report problems.

        Problems are reported, not raised.

        Parameters
        ----------
        repair : bool, default False
            Also remove leftover files and move aside segment files that no
            commit lists (an index open for writing only).
        sample : int, optional
            Rows per segment whose features are rebuilt from their measures
            and compared with the stored ones; None means the kind's
            default.
        seed : int, default 0
            Seed of the choice of those rows.

        Returns
        -------
        dict
            The report: ``ok`` (no problems), ``problems`` (a list of
            str), ``documents``, ``deleted`` and ``segments``, and what each
            kind's ``verify`` adds.

        Raises
        ------
        SobolevIndexError
            If the index is closed (what else each kind raises rather than
            reports: see its ``verify``).
        """

    def _root_positions(self, roots):
        """Positions into ``self.roots`` (all by default), checked."""
        return root_positions(roots, len(self.roots))

    # --------------------------------------------------------------- writing
    @abc.abstractmethod
    def add(self, measures, keys=None, labels=None, fields=None, ids=None):
        """Add a batch of documents.

        The whole batch is checked before anything is written. How it is
        committed depends on the kind of index: a
        :class:`~sobolev_index.SobolevIndex` commits it all or nothing, and
        durably; a :class:`~sobolev_index.ShardedIndex` commits each shard's
        part on its own and raises
        :class:`~sobolev_index.ShardedWriteError` when some parts fail.

        Parameters
        ----------
        measures : sequence of (nodes, masses), ndarray or sparse matrix
            The documents' measures: ``(nodes, masses)`` pairs, where
            ``masses=None`` puts equal masses on the nodes, or an
            n x n_nodes array or SciPy sparse matrix of node masses. Masses
            are normalised to sum 1; a node given twice counts with the sum
            of its masses.
        keys : list of str, optional
            One non-empty key per measure, none twice. None (the default)
            names each document ``doc-N``, N its id (with a ``.1``, ``.2``,
            ... suffix should that key be live already).
        labels : list of str or None, optional
            One label per measure (an entry may be None); None (the
            default) labels none. Searches can be restricted to labels
            (``where``).
        fields : list of dict or None, optional
            One dict of JSON metadata per measure (an entry may be None; NaN
            and infinity are refused); None (the default) stores none.
        ids : sequence of int, optional
            The documents' ids, for an index whose documents are numbered
            together with other indexes' (the shards of a sharded index
            share one insertion order this way): strictly increasing
            integers, the first at least :attr:`next_id`. None (the
            default) gives the next ids in turn. Ids order the documents:
            ties in a search go to the lower id.

        Returns
        -------
        list of str
            The documents' keys, in the order of ``measures``.

        Raises
        ------
        DuplicateKeyError
            If a key is live already (use :meth:`upsert` to replace it), or
            given twice in the batch.
        InvalidMeasureError
            If a measure is empty, names a node the graph does not have, or
            has masses that are not finite and >= 0 with a positive sum.
        ValueError
            If ``keys``, ``labels``, ``fields`` or ``ids`` do not have one
            valid entry per measure, or an id is taken or out of order.
        TypeError
            If ``measures`` is not one of the forms above, or ``keys`` or
            ``labels`` is a single str.
        SobolevIndexError
            If the index is closed or open for reading.

        See Also
        --------
        upsert : Add documents, replacing those with the same keys.
        delete : Delete documents by key.
        """

    @abc.abstractmethod
    def upsert(self, measures, keys, labels=None, fields=None, ids=None):
        """Add a batch of documents, replacing the live ones with the same keys.

        A replaced document is deleted, and its new version takes a new id
        (the next one, or its entry of ``ids``), which orders it among the
        documents as a new one. Otherwise as :meth:`add`.

        Parameters
        ----------
        measures : sequence of (nodes, masses), ndarray or sparse matrix
            The documents' measures: ``(nodes, masses)`` pairs, where
            ``masses=None`` puts equal masses on the nodes, or an
            n x n_nodes array or SciPy sparse matrix of node masses. Masses
            are normalised to sum 1; a node given twice counts with the sum
            of its masses.
        keys : list of str, optional
            One non-empty key per measure, none twice. Required: the
            documents to replace are found by key.
        labels : list of str or None, optional
            One label per measure (an entry may be None); None (the
            default) labels none. Searches can be restricted to labels
            (``where``).
        fields : list of dict or None, optional
            One dict of JSON metadata per measure (an entry may be None; NaN
            and infinity are refused); None (the default) stores none.
        ids : sequence of int, optional
            The documents' ids, for an index whose documents are numbered
            together with other indexes' (the shards of a sharded index
            share one insertion order this way): strictly increasing
            integers, the first at least :attr:`next_id`. None (the
            default) gives the next ids in turn. Ids order the documents:
            ties in a search go to the lower id.

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
            If a measure is not valid (see :meth:`add`).
        SobolevIndexError
            If the index is closed or open for reading.
        """

    @abc.abstractmethod
    def reserve_ids(self, next_id):
        """Make :attr:`next_id` at least ``next_id``, and commit it.

        No id below it is given afterwards; a lower ``next_id`` changes
        nothing. A copy of an index (its documents added with their ids)
        takes the source's next id this way, so that documents added to the
        copy without ids are numbered as the source would number them.

        Parameters
        ----------
        next_id : int
            The lowest id documents added later may take, in
            1..2**63 - 2.

        Raises
        ------
        ValueError
            If ``next_id`` is not an integer in that range.
        SobolevIndexError
            If the index is closed or open for reading.
        """

    @abc.abstractmethod
    def delete(self, keys):
        """Delete documents by key.

        Every key is looked up first: if one is not live, nothing is
        deleted.

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
        SobolevIndexError
            If the index is closed or open for reading.
        """

    @abc.abstractmethod
    def compact(self):
        """Merge segments and drop the rows of deleted documents.

        Searches give the same answers before and after; they read less.

        Raises
        ------
        SobolevIndexError
            If the index is closed or open for reading.
        """

    # ------------------------------------------------------------- searching
    @abc.abstractmethod
    def search(self, queries, k=None, p=None, roots=None, where=None, n_threads=None,
               radius=None, limit=None, stats=False, candidates=None, candidate_roots=None):
        """Find the k nearest documents of each query, or every one within a radius.

        The distance is S_p sliced over the index's roots (or those chosen
        with ``roots``), and the search is exact: the k nearest live
        documents of each query (under ``where``), nearest first, or with
        ``radius`` every live document within it. With ``candidates`` it is
        an approximate k-NN search instead.

        Parameters
        ----------
        queries : str, list of str, sequence of (nodes, masses), ndarray or sparse matrix
            A stored key or a list of stored keys, each searched as its
            stored measure, exactly; or measures as :meth:`add` takes them:
            ``(nodes, masses)`` pairs, or an n_queries x n_nodes array or
            SciPy sparse matrix of node masses.
        k : int, optional
            Neighbours per query, 1 to 2**53; None (the default) means 10,
            unless ``radius`` is given. A k larger than the number of live
            documents returns them all. Not with ``radius``.
        p : float or "inf", optional
            The order of S_p, in [1, inf]; None (the default) means the
            index's :attr:`p`.
        roots : int or sequence of int, optional
            Positions into :attr:`roots` of the roots to use, their eta
            renormalised; None (the default) uses all.
        where : dict, optional
            ``{"label": value_or_list}`` and/or ``{"keys": [...]}``: the
            only documents the search may return. None (the default) means
            every live document.
        n_threads : int, optional
            Threads to search with; None (the default) or <= 0 means every
            thread OpenMP offers. The results do not depend on it.
        radius : float or array-like of float, optional
            Instead of k neighbours, every live document (under ``where``)
            at distance at most ``radius`` from each query, nearest first:
            a number >= 0 for all queries (``inf`` returns every document),
            or a 1-D list or array of one such radius per query, query i
            then finding what a search of it alone with ``radius[i]``
            finds. Not with ``k``.
        limit : int, optional
            With ``radius`` only: at most this many results per query (a
            radius search's k). When more documents lie within the radius,
            the ``limit`` nearest are kept and ``truncated[i]`` says so. It
            also caps the memory the search holds. None (the default): no
            cap.
        stats : bool, default False
            Add each query's counts and the time of each phase of the
            search to ``SearchResult.stats`` (the sums are always there).
        candidates : int, optional
            An approximate k-NN search, for indexes with several roots: the
            ``candidates`` nearest documents on the first
            ``candidate_roots`` roots searched are found exactly, then
            ranked by S_p over all the roots searched, and the k nearest of
            them are returned with their exact distances. At least ``k``;
            not with ``radius``. None (the default): the exact search.
        candidate_roots : int, optional
            With ``candidates`` only: how many of the roots searched the
            candidates come from, at most their number; None (the default)
            means 2, or fewer when fewer roots are searched. With every
            root searched the search is exact.

        Returns
        -------
        SearchResult
            One row per query: ``keys``, ``distances``, ``labels``, ``ids``
            (the documents' ids) and ``scores``; for a radius search
            ``radius`` (a float, or a float64 array with one radius per
            query) and ``truncated``; for an approximate search
            ``certified``; and ``stats``. A k-NN answer has min(k, N)
            columns for N live documents, padded with inf where fewer
            documents are in scope.

        Raises
        ------
        ValueError
            If ``k``, ``p``, ``roots``, ``where``, ``radius`` (its shape
            or length, a value that is NaN or negative), ``limit``,
            ``candidates`` or ``candidate_roots`` is not valid, or they are
            combined as above they cannot be. Checked before the search
            runs.
        InvalidMeasureError
            If a query measure is not valid, or there are no queries.
        KeyNotFoundError
            If a stored key given as a query is not live.
        TypeError
            If ``queries`` is not one of the forms above.
        SobolevIndexError
            If the index is closed.

        Warns
        -----
        UserWarning
            When no live document has a label that ``where`` asks for
            (most often a typo).

        See Also
        --------
        neighbours : The nearest other documents of stored documents.
        knn_graph : The k-NN graph of every live document.
        sobolev_index.SearchResult : What a search returns.

        Notes
        -----
        Results are nearest first; ties go to the lower document id (the
        document added earlier), except that a stored key used as a query
        comes first among the documents at distance 0 from it.

        A document at the very distance a search reported is within that
        radius. ``radius=0`` finds the copies of the query: documents with
        its masses on its nodes, given in the same order (as the text and
        point pipelines give them). The same measure given with its nodes
        in another order may differ in the last bits of its normalised
        masses: ``radius=1e-12`` finds it too. The search prunes with the
        radius from the start, as it does with the k-th distance found. A
        radius per query with a ``limit`` of k gives the k nearest within a
        bound per query: the first entries of the k-NN answer whose
        distance is at most the query's bound (for instance the k-th
        distance another index already found for it).

        An approximate search costs about what a search of
        ``candidate_roots`` roots costs, plus the ranking; a true neighbour
        is missed when it is not among the candidates.
        ``SearchResult.certified[i]`` says when query i's answer is
        provably exact. docs/benchmarks.md gives recall against time.

        How a sharded index searches its shards and merges their answers
        (the same answer as a single index's) is in the Notes of
        :class:`~sobolev_index.ShardedIndex`.

        Examples
        --------
        >>> from sobolev_index import Graph, SobolevIndex
        >>> graph = Graph.from_edges(5, [(0, 1), (1, 2), (2, 3), (3, 4)], [1.0, 2.0, 1.0, 0.5])
        >>> index = SobolevIndex.create("search.idx", graph)
        >>> index.add([([0, 1], [0.5, 0.5]), ([1, 2], None), ([3, 4], [0.2, 0.8]),
        ...            ([0, 1], [0.5, 0.5])], keys=["a", "b", "c", "d"],
        ...           labels=["x", "x", "y", "y"])
        ['a', 'b', 'c', 'd']
        >>> query = [([0, 2], [0.25, 0.75])]
        >>> found = index.search(query, k=2)
        >>> found.keys, found.distances.round(4).tolist(), found.ids
        ([['b', 'a']], [[0.75, 1.75]], [[2, 1]])

        A stored key as the query (it comes first among its copies), and a
        search restricted to a label:

        >>> index.search("a", k=3).keys
        [['a', 'd', 'b']]
        >>> index.search(query, k=2, where={"label": "y"}).keys
        [['d', 'c']]

        Every document within a radius, then only the nearest of them:

        >>> found = index.search(query, radius=2.0)
        >>> found.keys, [row.round(4).tolist() for row in found.distances]
        ([['b', 'a', 'd']], [[0.75, 1.75, 1.75]])
        >>> found = index.search(query, radius=2.0, limit=1)
        >>> found.keys, found.truncated
        ([['b']], [True])
        >>> index.close()
        """

    def knn_graph(self, k, p=None, include_self=False, roots=None, batch=KNN_GRAPH_BATCH,
                  n_threads=None, progress=None):
        """The exact k-nearest-neighbour graph of the live documents.

        Row i holds the S_p distances from document i to its ``k`` nearest
        other documents, for ``umap.UMAP(metric="precomputed")`` or
        ``sklearn.cluster.HDBSCAN(metric="precomputed")``. The rows come
        from :meth:`search` with the documents themselves as queries,
        ``batch`` of them per call.

        Parameters
        ----------
        k : int
            Neighbours per row, >= 1. With fewer than k other documents a
            row holds them all, and a UserWarning says so.
        p : float or "inf", optional
            The order of S_p; None (the default) means the index's
            :attr:`p`.
        include_self : bool, default False
            Count document i itself, at distance 0, as one of row i's k.
        roots : int or sequence of int, optional
            Positions into :attr:`roots` of the roots to use, as for
            :meth:`search`; None (the default) uses all.
        batch : int, default 1024
            Documents searched per call of :meth:`search`.
        n_threads : int, optional
            Threads of each search, as for :meth:`search`.
        progress : callable, optional
            Called as ``progress(done, total)`` after each batch; None (the
            default) reports nothing.

        Returns
        -------
        scipy.sparse.csr_matrix of shape (N, N)
            Rows and columns in the order of :meth:`keys_in_order`. Each
            row's entries are in increasing distance, ties by insertion
            order as in :meth:`search`, not in column order
            (``sklearn.neighbors.sort_graph_by_row_values`` accepts it as
            it is). Documents at distance 0 (copies) are stored as explicit
            zeros: read the neighbours from the structure, not from the
            nonzero values.

        Raises
        ------
        ValueError
            If ``k``, ``batch``, ``p`` or ``roots`` is not valid (before any
            search).
        SobolevIndexError
            If the index is closed, or a row finds fewer neighbours than the
            live documents promise (a writer changed the index meanwhile,
            or it is damaged: :class:`~sobolev_index.CorruptIndexError` for
            a single index).

        Warns
        -----
        UserWarning
            When ``k`` is more than the documents a row can hold.

        Notes
        -----
        The result takes 12 to 16 bytes per entry, N x min(k, N) entries:
        with k near N it is a dense matrix.

        Examples
        --------
        >>> from sobolev_index import Graph, SobolevIndex
        >>> graph = Graph.from_edges(5, [(0, 1), (1, 2), (2, 3), (3, 4)], [1.0, 2.0, 1.0, 0.5])
        >>> with SobolevIndex.create("knn.idx", graph) as index:
        ...     keys = index.add([([0, 1], None), ([1, 2], None), ([3, 4], [0.2, 0.8]),
        ...                       ([0, 1], None)], keys=["a", "b", "c", "d"])
        ...     matrix = index.knn_graph(1)
        >>> matrix.shape, matrix.indices.tolist(), matrix.data.round(4).tolist()
        ((4, 4), [3, 0, 1, 0], [0.0, 1.5, 2.4, 0.0])
        """
        self._check_open()
        p = self.p if p is None else check_p(p)
        self._root_positions(roots)  # a bad roots argument fails before any work
        mismatch, advice = self._mismatch
        return knn_graph_of(self, k, p, include_self, roots, batch, n_threads, progress,
                            mismatch, advice)

    def neighbours(self, keys, k=None, p=None, roots=None, n_threads=None):
        """The k nearest other documents of stored documents.

        Each key is searched for as :meth:`search` does with a stored key as
        the query, one more result is asked for, and the key itself (first
        among the documents at distance 0 from it) is left out: its copies
        (other documents at distance 0) stay.

        Parameters
        ----------
        keys : str or list of str
            A live key, or a list of them.
        k : int, optional
            Neighbours per key, >= 1; None (the default) means 10. A k
            larger than the number of other live documents returns them all.
        p : float or "inf", optional
            The order of S_p; None (the default) means the index's
            :attr:`p`.
        roots : int or sequence of int, optional
            Positions into :attr:`roots` of the roots to use, as for
            :meth:`search`; None (the default) uses all.
        n_threads : int, optional
            Threads of the search, as for :meth:`search`.

        Returns
        -------
        SearchResult
            One row per key, in the order given; ``distances`` has
            min(k, N - 1) columns for N live documents.

        Raises
        ------
        KeyNotFoundError
            If a key is not a live document.
        ValueError
            If ``k``, ``p`` or ``roots`` is not valid.
        SobolevIndexError
            If the index is closed.

        Examples
        --------
        >>> from sobolev_index import Graph, SobolevIndex
        >>> graph = Graph.from_edges(5, [(0, 1), (1, 2), (2, 3), (3, 4)], [1.0, 2.0, 1.0, 0.5])
        >>> with SobolevIndex.create("neighbours.idx", graph) as index:
        ...     keys = index.add([([0, 1], None), ([1, 2], None), ([3, 4], [0.2, 0.8]),
        ...                       ([0, 1], None)], keys=["a", "b", "c", "d"])
        ...     found = index.neighbours(["a", "c"], k=2)
        >>> found.keys, found.distances.round(4).tolist()
        ([['d', 'b'], ['b', 'a']], [[0.0, 1.5], [2.4, 3.9]])
        """
        self._check_open()
        k = 10 if k is None else k
        check_positive("k", k)
        query_keys = [keys] if isinstance(keys, str) else list(keys)
        found = self.search(query_keys, k=int(k) + 1, p=p, roots=roots, n_threads=n_threads)
        width = min(int(k), max(found.distances.shape[1] - 1, 0))
        out_keys, out_labels, out_ids = [], [], []
        distances = np.full((len(query_keys), width), np.inf)
        scores = np.full((len(query_keys), width), np.inf)
        for q, (key, hits, labels) in enumerate(zip(query_keys, found.keys, found.labels)):
            kept = [j for j, hit in enumerate(hits) if hit != key][:width]
            out_keys.append([hits[j] for j in kept])
            out_labels.append([labels[j] for j in kept])
            out_ids.append([found.ids[q][j] for j in kept])
            distances[q, :len(kept)] = found.distances[q][kept]
            scores[q, :len(kept)] = found.scores[q][kept]
        return SearchResult(out_keys, distances, out_labels, found.p, ids=out_ids,
                            scores=scores)

    def duplicates(self, radius=0.0, p=None, roots=None, batch=KNN_GRAPH_BATCH, n_threads=None,
                   progress=None):
        """Find the groups of near-duplicate documents.

        The groups are the connected components of the graph that joins
        every two live documents at distance at most ``radius``, so a
        group's members can be farther apart than that, through others
        between them. The edges come from radius searches (:meth:`search`)
        with the documents themselves as queries, ``batch`` of them per
        call.

        Parameters
        ----------
        radius : float, default 0.0
            The largest distance that joins two documents, >= 0.
            ``radius=0`` groups copies: the same masses on the same nodes in
            the same order (see :meth:`search`; ``radius=1e-12`` also joins
            a measure given in another node order).
        p : float or "inf", optional
            The order of S_p; None (the default) means the index's
            :attr:`p`.
        roots : int or sequence of int, optional
            Positions into :attr:`roots` of the roots to use, as for
            :meth:`search`; None (the default) uses all.
        batch : int, default 1024
            Documents searched per call of :meth:`search`.
        n_threads : int, optional
            Threads of each search, as for :meth:`search`.
        progress : callable, optional
            Called as ``progress(done, total)`` after each batch; None (the
            default) reports nothing.

        Returns
        -------
        list of dict
            The groups of two or more documents, the largest first (equal
            sizes in the insertion order of their first members). Each is a
            dict: ``keys``, the members in insertion order, and ``edges``, a
            list of (key, key, distance) for every pair of members within
            ``radius`` (the key inserted first first), nearest first.

        Raises
        ------
        ValueError
            If ``radius``, ``batch``, ``p`` or ``roots`` is not valid
            (before any search).
        SobolevIndexError
            If the index is closed.

        Notes
        -----
        Edges cost memory: a radius at which most documents are within
        reach of each other makes about N^2 / 2 of them.

        Examples
        --------
        >>> from sobolev_index import Graph, SobolevIndex
        >>> graph = Graph.from_edges(5, [(0, 1), (1, 2), (2, 3), (3, 4)], [1.0, 2.0, 1.0, 0.5])
        >>> with SobolevIndex.create("duplicates.idx", graph) as index:
        ...     keys = index.add([([0, 1], None), ([1, 2], None), ([3, 4], [0.2, 0.8]),
        ...                       ([0, 1], None)], keys=["a", "b", "c", "d"])
        ...     copies = index.duplicates()
        ...     near = index.duplicates(radius=2.0)
        >>> copies
        [{'keys': ['a', 'd'], 'edges': [('a', 'd', 0.0)]}]
        >>> near[0]["keys"], [(a, b, round(d, 4)) for a, b, d in near[0]["edges"]]
        (['a', 'b', 'd'], [('a', 'd', 0.0), ('a', 'b', 1.5), ('b', 'd', 1.5)])
        """
        self._check_open()
        radius = check_radius(radius)
        check_positive("batch", batch)
        p = self.p if p is None else check_p(p)
        self._root_positions(roots)  # a bad roots argument fails before any work
        keys = self.keys_in_order()
        n = len(keys)
        row_of = {key: i for i, key in enumerate(keys)}
        parent = list(range(n))

        def find(i):
            while parent[i] != i:
                parent[i] = parent[parent[i]]  # path halving
                i = parent[i]
            return i

        edges = {}
        for start in range(0, n, int(batch)):
            chunk = keys[start:start + int(batch)]
            found = self.search(chunk, radius=radius, p=p, roots=roots, n_threads=n_threads)
            for offset, (hits, dists) in enumerate(zip(found.keys, found.distances)):
                i = start + offset
                for hit, d in zip(hits, dists.tolist()):
                    j = row_of[hit]
                    if j == i:
                        continue
                    # Each pair is found from both ends; rounding may make
                    # the two values differ in the last bit: keep the lower.
                    pair = (i, j) if i < j else (j, i)
                    if pair not in edges or d < edges[pair]:
                        edges[pair] = d
                    a, b = find(i), find(j)
                    if a != b:
                        parent[max(a, b)] = min(a, b)
            if progress is not None:
                progress(min(n, start + int(batch)), n)
        members = {}
        for i in range(n):
            members.setdefault(find(i), []).append(i)
        groups = [rows for rows in members.values() if len(rows) >= 2]
        groups.sort(key=lambda rows: (-len(rows), rows[0]))
        edges_of = {}
        for (i, j), d in edges.items():
            edges_of.setdefault(find(i), []).append((d, i, j))
        out = []
        for rows in groups:
            group_edges = sorted(edges_of[find(rows[0])])
            out.append({"keys": [keys[i] for i in rows],
                        "edges": [(keys[i], keys[j], d) for d, i, j in group_edges]})
        return out


def knn_graph_width(k, n, include_self):
    """Entries per row of a k-NN graph of n documents: k, capped at the
    documents there are (the others, without ``include_self``), with a
    UserWarning when it is capped."""
    want = min(int(k) if include_self else min(int(k), max(n - 1, 0)), n)
    if n and want < k:
        others = "documents" if include_self else "other documents"
        warnings.warn(f"k is {k}, more than the {want:,} {others} there are: each row holds "
                      f"all {want:,}", UserWarning, stacklevel=4)
    return want


def knn_graph_of(index, k, p, include_self, roots, batch, n_threads, progress, mismatch,
                 advice):
    """The exact k-NN graph of ``index`` (anything with ``search`` and
    ``keys_in_order``), as :meth:`IndexBase.knn_graph` describes it. Each
    batch of documents is searched for one more neighbour than wanted: the
    query itself comes first among the documents at distance 0 from it,
    and is dropped unless ``include_self``. A row with fewer neighbours
    than the live documents promise raises ``mismatch`` with ``advice``."""
    import scipy.sparse as sp

    check_positive("k", k)
    check_positive("batch", batch)
    keys = index.keys_in_order()
    n = len(keys)
    row_of = {key: i for i, key in enumerate(keys)}
    want = knn_graph_width(k, n, include_self)
    columns = np.zeros(n * want, dtype=np.int64)
    values = np.zeros(n * want, dtype=np.float64)
    for start in range(0, n, int(batch)):
        chunk = keys[start:start + int(batch)]
        found = index.search(chunk, k=want + (0 if include_self else 1), p=p, roots=roots,
                             n_threads=n_threads)
        for offset, (key, hits) in enumerate(zip(chunk, found.keys)):
            i = start + offset
            row = [(row_of[h], float(d)) for h, d in zip(hits, found.distances[offset])
                   if include_self or h != key][:want]
            if len(row) != want:
                raise mismatch(f"{index.path}: a search for {key!r} found {len(row)} neighbours "
                               f"where {want} live documents were expected; {advice}")
            columns[i * want:(i + 1) * want] = [c for c, _ in row]
            values[i * want:(i + 1) * want] = [d for _, d in row]
        if progress is not None:
            progress(min(n, start + int(batch)), n)
    indptr = np.arange(n + 1, dtype=np.int64) * want
    # Each row's entries stay in increasing distance (ties by insertion
    # order), the order scikit-learn's precomputed neighbours expect, not
    # in column order.
    return sp.csr_matrix((values, columns, indptr), shape=(n, n))
