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
roots and their weights) and ``n_nodes`` (the graph's size).
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
    """An exact k-NN index of probability measures under S_p."""

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
        """Open the index at ``path`` for reading (``"r"``) or writing (``"a"``)."""

    @classmethod
    @abc.abstractmethod
    def create(cls, path, graph, roots=None, eta=None, p=1, **options):
        """A new, empty index at ``path`` over ``graph``, open for writing."""

    @classmethod
    @abc.abstractmethod
    def create_like(cls, path, source, **options):
        """A new, empty index at ``path`` with the graph, roots, eta, p and
        build settings of the index ``source``."""

    @abc.abstractmethod
    def _release(self):
        """Free what the open index holds (files, locks, workers' shards)."""

    def close(self):
        """Close the index; closing it again does nothing."""
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
        """Whether the index is open for writing."""
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
        """Move a reader to the latest commit."""

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
        """The set of those of ``keys`` that are live documents."""

    @abc.abstractmethod
    def ids_and_keys(self):
        """(ids, keys) of the live documents, in id (insertion) order."""

    def keys_in_order(self):
        """The live keys in insertion order: the row (and column) order of
        :meth:`knn_graph`."""
        return self.ids_and_keys()[1]

    @property
    @abc.abstractmethod
    def next_id(self):
        """The id the next document added gets."""

    @abc.abstractmethod
    def get(self, key):
        """The stored measure and metadata of ``key``."""

    @abc.abstractmethod
    def info(self):
        """A dict describing the index."""

    @abc.abstractmethod
    def verify(self, repair=False, sample=None, seed=0):
        """Check the index's files against its catalog; a report dict."""

    def _root_positions(self, roots):
        """Positions into ``self.roots`` (all by default), checked."""
        return root_positions(roots, len(self.roots))

    # --------------------------------------------------------------- writing
    @abc.abstractmethod
    def add(self, measures, keys=None, labels=None, fields=None, ids=None):
        """Add documents; a key already live raises DuplicateKeyError."""

    @abc.abstractmethod
    def upsert(self, measures, keys, labels=None, fields=None, ids=None):
        """Add documents, replacing those whose keys are live."""

    @abc.abstractmethod
    def reserve_ids(self, next_id):
        """Make :attr:`next_id` at least ``next_id``."""

    @abc.abstractmethod
    def delete(self, keys):
        """Delete documents by key; returns the count."""

    @abc.abstractmethod
    def compact(self):
        """Merge segments and drop deleted rows."""

    # ------------------------------------------------------------- searching
    @abc.abstractmethod
    def search(self, queries, k=None, p=None, roots=None, where=None, n_threads=None,
               radius=None, limit=None, stats=False, candidates=None, candidate_roots=None):
        """Exact k nearest neighbours, or every document within a radius,
        or with ``candidates`` an approximate k-NN search: a
        :class:`~sobolev_index.SearchResult`."""

    def knn_graph(self, k, p=None, include_self=False, roots=None, batch=KNN_GRAPH_BATCH,
                  n_threads=None, progress=None):
        """The exact k-nearest-neighbour graph of the live documents.

        Returns a ``scipy.sparse.csr_matrix`` of shape (N, N), rows and
        columns in the order of :meth:`keys_in_order`: row i holds the S_p
        distances from document i to its ``k`` nearest other documents
        (with ``include_self``, document i itself at distance 0 is one of
        the k). Ties go by insertion order, as in :meth:`search`; documents
        at distance 0 (duplicates) are stored as explicit zeros, so read
        the neighbours from the structure, not from nonzero values. Each
        row's entries are in increasing distance, not in column order
        (``sklearn.neighbors.sort_graph_by_row_values`` accepts it as it
        is). With fewer than k other documents a row holds them all, and a
        UserWarning says so. The
        result takes 12 to 16 bytes per entry, N x min(k, N) entries: with k
        near N it is a dense matrix.

        The rows come from :meth:`search` with the documents themselves as
        queries, ``batch`` of them per call; ``progress(done, total)`` is
        called after each batch. For ``umap.UMAP(metric="precomputed")`` or
        ``sklearn.cluster.HDBSCAN(metric="precomputed")``.
        """
        self._check_open()
        p = self.p if p is None else check_p(p)
        self._root_positions(roots)  # a bad roots argument fails before any work
        mismatch, advice = self._mismatch
        return knn_graph_of(self, k, p, include_self, roots, batch, n_threads, progress,
                            mismatch, advice)

    def neighbours(self, keys, k=None, p=None, roots=None, n_threads=None):
        """The k nearest other documents of stored documents.

        ``keys``: a stored key or a list of them. Each is searched for as
        :meth:`search` does with a stored key as the query, one more result
        is asked for, and the key itself (first among the documents at
        distance 0 from it) is left out: its copies (other documents at
        distance 0) stay. ``k`` (default 10) larger than the number of other
        live documents returns them all. Returns a :class:`SearchResult`
        with one row per key, in the order given; ``distances`` has
        min(k, N - 1) columns for N live documents. A key that is not live
        raises KeyNotFoundError.
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
        """Groups of near-duplicate documents: the connected components of
        the graph that joins every two live documents at distance at most
        ``radius`` (so a group's members can be farther apart than that,
        through others between them). ``radius=0`` groups copies: the same
        masses on the same nodes in the same order (see :meth:`search`;
        ``radius=1e-12`` also joins a measure given in another node order).

        Returns a list of groups of two or more documents, the largest
        first (equal sizes in the insertion order of their first members).
        Each group is a dict: ``keys``, the members in insertion order, and
        ``edges``, a list of (key, key, distance) for every pair of members
        within ``radius`` (the first key inserted first), nearest first.
        Edges cost memory: a radius at which most documents are within
        reach of each other makes about N^2 / 2 of them.

        The edges come from radius searches (:meth:`search`) with the
        documents themselves as queries, ``batch`` of them per call;
        ``progress(done, total)`` is called after each batch.
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
