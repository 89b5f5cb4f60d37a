"""Query execution for :class:`SobolevIndex`: exact k-NN search and the
distance conveniences on stored documents.

``SearchMixin`` holds the query side of the index: which rows a search may
return (``where``), the query features, the search of each chunk of queries
(the inverted files of ``inverted.py`` for p up to 16 and p = inf, a scan
of every row for a finite p above 16) and the merge of their top k into a
:class:`SearchResult`; and
``distance``, ``pairwise``, ``gram`` and ``keys_with_labels``. The index's
lifecycle and writes are in ``sobolev_index.py``.
"""
import math
import threading
import time
import warnings
from typing import NamedTuple

import numpy as np

from .. import _pairwise
from ..distances import (
    LARGE_P,
    check_p,
    difference_distance,
    pairwise_sobolev,
    sliced_pairwise,
    sobolev_kernel,
)
from ..errors import CorruptIndexError, InvalidMeasureError
from ..graph import normalise_eta
from ..measures import as_measure_batch
from . import inverted
from .csr import row_range

__all__ = ["SearchMixin", "SearchResult"]

# Queries searched together; bounds the (queries x rows) distance buffer of
# a scan (finite p > 16).
QUERY_CHUNK = 64
# A scan reads every row's features, rebuilt from the stored
# measures (about 12 bytes per nonzero). An index keeps them for later scans
# up to this many bytes over all its segments; the other segments' features
# are rebuilt by each search, SCAN_CHUNK_ROWS rows at a time, and distances
# are computed in blocks of QUERY_CHUNK x SCAN_CHUNK_ROWS, so that what a
# scan holds does not grow with the index.
SCAN_CACHE_BYTES = 2 ** 30
SCAN_CHUNK_ROWS = 65_536
# Held while deciding whether to keep a segment's features and building them.
_SCAN_CACHE_LOCK = threading.Lock()
# A k above this is surely a mistake (it exceeds any index's size).
MAX_K = 2**53
# Documents per search call of knn_graph: large enough to fill the threads
# and amortise a call, small enough to report progress often.
KNN_GRAPH_BATCH = 1024
# The counts SearchResult.stats holds, per query and summed (see SearchResult).
_COUNTS = ("segments", "rows", "bounded", "refined", "rows_read", "blocks", "blocks_scored",
           "exact")


def check_positive(name, value):
    """An integer >= 1 (NumPy integers too, not booleans), or a ValueError naming it."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{name} is {value!r}; expected an integer >= 1")


class SearchResult:
    """Results of :meth:`SobolevIndex.search`.

    ``keys[i]`` lists the keys found for query i by ascending distance (ties to
    the lower document id, which is the earlier document);
    ``distances[i, j]`` is S_p to ``keys[i][j]``.
    ``distances`` has min(k, N) columns for N live documents, and inf where
    fewer documents qualified (under ``where``). ``labels`` mirrors ``keys``,
    and so does ``ids``: the documents' ids (ints, as ``get(key)["id"]``
    gives them; ids grow with insertion order). ``scores`` mirrors
    ``distances``: the values the search ranks by, the p-th powers of the
    distances for one root at a finite p other than 1 (up to p = 16; a
    larger p scans and ranks by distance), else the distances themselves.
    Results are in (score, id) order, apart from a stored key used as a
    query, which comes first among the documents at distance 0 from it;
    that is (distance, id) order, except where two p-th powers one rounding
    apart give the same distance. Merging the results of several
    searches (of the shards of a sharded index) in the order one search
    would give needs the scores and ids. ``ids`` and ``scores`` are None in
    a result built without them.

    A radius search finds a different number of documents per query:
    ``distances`` is then a list of one 1-D array per query
    (``distances[i][j]`` is S_p to ``keys[i][j]``), ``radius`` the radius
    (a float, or with one radius per query a float64 array of them) and
    ``truncated[i]`` whether more documents than ``limit`` lay within
    query i's radius (only the ``limit`` nearest are kept). For a k-NN
    search ``radius`` is None and ``truncated`` all False.

    ``stats`` says how much of the index the search read, summed over the
    queries: ``rows`` (the documents it could return, per query),
    ``rows_read`` (rows whose stored values were read in full, after their
    bounds could not rule them out) and ``exact`` (rows whose distance was
    computed exactly: the candidates re-ranked), and ``segments``
    (segments searched), ``bounded`` (rows whose cheapest lower bound was
    computed), ``refined`` (rows whose tighter group bound was computed),
    ``blocks`` (blocks of 8,192 rows walked; of 65,536 in a scan) and
    ``blocks_scored`` (blocks in which a row was read). At p = inf,
    ``rows_read`` counts every row, since each row's dense values are read
    for its bound; a search at a finite p > 16 reads and computes every row
    and bounds none. With ``search(..., stats=True)`` it also holds
    ``queries``, the same counts for each query, each with ``seconds``: the
    thread-seconds the search spent on that query walking posting lists
    (``postings``), on the cheapest bounds (``bounds``), on the rows those
    let through (``scoring``: group bounds and values from the identity)
    and on exact values (``exact``); a scan's time is shared evenly among
    the queries scanned together, as ``scoring``. ``stats["seconds"]`` is
    then the wall-clock time of the batch's phases: query ``features``,
    the ``search`` itself, looking up the ``names`` (keys and labels) of
    the results, and the ``total``.
    """

    def __init__(self, keys, distances, labels, p, stats=None, radius=None, truncated=None, *,
                 ids=None, scores=None):
        self.keys = keys
        self.distances = distances
        self.labels = labels
        self.ids = ids
        self.scores = scores
        self.p = p
        self.stats = stats
        self.radius = radius
        self.truncated = [False] * len(keys) if truncated is None else truncated

    def __len__(self):
        return len(self.keys)

    def __repr__(self):
        if self.radius is not None:
            radius = "per query" if np.ndim(self.radius) else self.radius
            return (f"SearchResult(queries={len(self.keys)}, radius={radius}, "
                    f"found={sum(len(k) for k in self.keys)}, p={self.p})")
        return f"SearchResult(queries={len(self.keys)}, k={self.distances.shape[1]}, p={self.p})"

    def to_records(self):
        """One list of {"key", "distance", "label"} dicts per query."""
        return [
            [{"key": key, "distance": float(self.distances[i][j]), "label": label}
             for j, (key, label) in enumerate(zip(keys, labels))]
            for i, (keys, labels) in enumerate(zip(self.keys, self.labels))
        ]


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
    ``keys_in_order`` as :class:`SobolevIndex` has them: also a sharded
    index), as :meth:`SearchMixin.knn_graph` describes it. Each batch of
    documents is searched for one more neighbour than wanted: the query
    itself comes first among the documents at distance 0 from it, and is
    dropped unless ``include_self``. A row with fewer neighbours than the
    live documents promise raises ``mismatch`` with ``advice``."""
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


def checked_search_args(k, radius, limit):
    """(k, radius) of a search: k (default 10 without a radius) or radius
    (with an optional limit), never both; each checked, a ValueError naming
    the value otherwise. ``k`` comes back None for a radius search, and
    ``radius`` None for a k-NN search. The radius comes back as
    check_search_radius returns it: a float, or a float64 array of one
    radius per query, whose length the caller checks once it knows the
    number of queries (radius_for_queries)."""
    if radius is not None:
        if k is not None:
            shown = _radius_shown(radius)
            raise ValueError(f"k is {k!r} and radius is {shown}; give one of them (a "
                             "radius search takes limit to cap its results)")
        radius = check_search_radius(radius)
        if limit is not None:
            check_positive("limit", limit)
        return None, radius
    if limit is not None:
        raise ValueError(f"limit is {limit!r} without a radius; limit caps a radius "
                         "search (give k for the k nearest)")
    k = 10 if k is None else k
    check_positive("k", k)
    if k > MAX_K:
        raise ValueError(f"k is {k}; expected at most {MAX_K:,} (larger k returns "
                         "every live document anyway)")
    return k, None


def check_radius(radius, name="radius"):
    """The radius as a float >= 0 (inf allowed), or a ValueError naming it
    (as ``name``)."""
    if isinstance(radius, bool) or not isinstance(radius, (int, float, np.integer, np.floating)):
        raise ValueError(f"{name} is {radius!r}; expected a number >= 0")
    try:
        radius = float(radius)
    except OverflowError:  # an int beyond any float: no finite radius is larger
        radius = math.inf
    if not radius >= 0.0:  # also rejects NaN
        raise ValueError(f"{name} is {radius}; expected a number >= 0 (inf returns every "
                         "document)")
    return radius


def check_search_radius(radius):
    """A search's radius: a number, checked by check_radius (a float comes
    back), or a 1-D list, tuple or array of one radius per query, each a
    number >= 0 (inf allowed), which comes back as a new float64 array; a
    ValueError naming the shape or the first bad value otherwise. The
    number of radii is checked by radius_for_queries."""
    if not isinstance(radius, (list, tuple, np.ndarray)):
        return check_radius(radius)
    try:
        shape = np.shape(radius)
    except ValueError:  # a ragged list
        shape = None
    if shape is None or len(shape) != 1:
        raise ValueError(f"radius is {_radius_shown(radius)}, of shape "
                         f"{'ragged' if shape is None else shape}; expected a number >= 0, "
                         "or a 1-D list or array of one radius per query")
    if isinstance(radius, np.ndarray) and radius.dtype.kind in "iuf":
        out = radius.astype(np.float64)  # a copy: the caller's array may change later
        bad = np.flatnonzero(~(out >= 0.0))  # also NaN
        if len(bad):
            check_radius(out[bad[0]], f"radius[{bad[0]}]")  # raises, naming it
        return out
    return np.array([check_radius(r, f"radius[{i}]") for i, r in enumerate(radius)],
                    dtype=np.float64)


def radius_for_queries(radius, n_queries):
    """``radius`` (as check_search_radius returns it) for ``n_queries``
    queries: a float as it is, an array only if it holds one radius per
    query, else a ValueError saying how many were expected."""
    if isinstance(radius, np.ndarray) and len(radius) != n_queries:
        raise ValueError(f"radius has {len(radius)} value(s) for {n_queries} queries; expected "
                         "one radius per query, or a single number for all of them")
    return radius


def _radius_shown(radius):
    """The radius as an error message names it: short even for many radii."""
    size = radius.size if isinstance(radius, np.ndarray) else (
        len(radius) if isinstance(radius, (list, tuple)) else 0)
    if size > 6:
        return f"a {type(radius).__name__} of {size} values"
    return repr(radius)


def root_positions(roots, n_roots):
    """``roots`` (a position into an index's ``n_roots`` roots, a list of
    them, or None for all) as a list of distinct positions, or a
    ValueError naming it."""
    if roots is None:
        return list(range(n_roots))
    if isinstance(roots, (int, np.integer)) and not isinstance(roots, bool):
        roots = [roots]
    if not isinstance(roots, (list, tuple, np.ndarray)):
        raise ValueError(f"roots is {roots!r}; expected a root position or a list of them "
                         f"(this index has {n_roots} root(s))")
    try:
        positions = [int(r) for r in roots]
    except (TypeError, ValueError):
        positions = []
    if any(isinstance(r, bool) or not isinstance(r, (int, np.integer)) for r in roots):
        positions = []  # 0.5 is not position 0, nor True position 1
    if not positions or any(r < 0 or r >= n_roots for r in positions) \
            or len(set(positions)) != len(positions):
        raise ValueError(
            f"roots is {roots!r}; expected distinct positions in 0..{n_roots - 1} "
            f"(this index has {n_roots} root(s))"
        )
    return positions


def _kernel_bound(radius, p, n_roots):
    """The radius in the units the kernel compares (p-th powers for one root
    at a finite p, else distances), widened by far more than the rounding of
    the power and of the 1/p root that turns a value back into a distance:
    a document whose reported distance is at most the radius is never
    pruned. The result is then cut at the radius exactly (see search)."""
    if math.isinf(radius):
        return math.inf
    try:
        bound = radius ** p if n_roots == 1 and not math.isinf(p) else radius
    except OverflowError:  # beyond every finite p-th power: nothing is pruned
        return math.inf
    bound *= 1.0 + 1e-12
    if bound == 0.0 and radius > 0.0:
        bound = 5e-324  # radius ** p underflowed; only 0 can then be within it
    return bound


class SearchMixin:
    """The query side of :class:`SobolevIndex`.

    It reads what the index keeps of its loaded snapshot: ``p``, ``roots``,
    ``eta``, ``graph``, ``trees``, ``_segments`` (``segment.Segment`` objects),
    ``_segment_by_id``, ``_catalog`` (documents are looked up there by key
    or id), ``_edge_weight``, and the caches ``_eta_cache`` and
    ``_scope_cache``, which the index empties when it loads or writes; and
    it calls the index's ``_check_open``, ``_locate_many``, ``features`` and
    ``get``.
    """

    def search(self, queries, k=None, p=None, roots=None, where=None, n_threads=None,
               radius=None, limit=None, stats=False):
        """Exact k nearest neighbours under S_p (sliced over the index's roots),
        or every document within a radius.

        ``queries``: (nodes, masses) pairs, a sparse matrix of node masses, a
        stored key, or a list of stored keys. ``k``: neighbours per query
        (default 10). ``roots``: positions into ``self.roots`` to use
        (default all), their eta renormalised. ``where``:
        ``{"label": value_or_list}`` and/or ``{"keys": [...]}`` restricts the
        candidates. ``k`` larger than the number of live documents returns
        them all. Returns a :class:`SearchResult`. Ties go to the lower
        document id (the earlier document), except that a stored key used
        as a query comes first among the documents at distance 0 from it.

        ``radius``: instead of k neighbours, every live document (under
        ``where``) at distance at most ``radius`` from each query, nearest
        first; ``inf`` returns them all. A document at the very distance a
        search reported is within that radius, and ``radius=0`` finds the
        copies of the query: documents with its masses on its nodes, given
        in the same order (as the text and point pipelines give them). The
        same measure given with its nodes in another order may differ in the
        last bits of its normalised masses: ``radius=1e-12`` finds it too.
        The search prunes with the
        radius from the start, as it would with a k-th distance. ``limit``
        caps the results per query, and with them the memory a search
        holds: when more documents lie within the radius, the ``limit``
        nearest are kept and ``truncated[i]`` says so. ``k`` and ``radius``
        cannot be given together (``limit`` is a radius search's k).

        ``radius`` may also be a 1-D list or array of one radius per query
        (each >= 0, inf allowed): query i then finds what a search of it
        alone with ``radius[i]`` finds. With a ``limit`` of k this is the k
        nearest within a bound per query: the first entries of the k-NN
        result whose distance is at most the query's bound (for instance
        the k-th distance another index already found for it).
        ``SearchResult.radius`` is then a float64 array of the radii. A
        radius of the wrong shape or length, or a value that is NaN or
        negative, raises a ValueError before the search runs.

        ``SearchResult.ids`` holds the document ids of the results,
        mirroring ``keys``. ``stats=True`` adds per-query statistics and
        phase times to ``SearchResult.stats``.
        """
        self._check_open()
        started = time.perf_counter()
        p = self.p if p is None else check_p(p)
        k, radius = checked_search_args(k, radius, limit)
        positions, eta = self._selected_roots(roots)
        query_features = self._query_features(queries, positions, csr=False)
        n_queries = query_features[0].shape[0]
        radius = radius_for_queries(radius, n_queries)
        scope = self._search_scope(where)
        featured = time.perf_counter()

        if radius is None:
            # More neighbours than live documents cannot be found: buffers
            # stay proportional to min(k, N), and every live document is
            # returned.
            n_columns = min(int(k), len(self))
            k = max(1, n_columns)
            radii = bound = np.full(n_queries, math.inf)
        else:
            # A limit that cannot be reached needs no heap; one more than
            # the limit tells whether it cut the results.
            k = None if limit is None or limit >= scope.n_rows else int(limit) + 1
            radii = np.broadcast_to(np.asarray(radius, dtype=np.float64), (n_queries,))
            # Each query's radius in the kernel's units (p > 16 scans and
            # compares distances themselves).
            if LARGE_P < p < math.inf:
                bound = radii
            elif np.ndim(radius):
                bound = np.array([_kernel_bound(r, p, len(positions)) for r in radius.tolist()])
            else:
                bound = np.full(n_queries, _kernel_bound(radius, p, len(positions)))
        keys = [[] for _ in range(n_queries)]
        labels = [[] for _ in range(n_queries)]
        ids = [[] for _ in range(n_queries)]
        found_distances = [None] * n_queries
        found_scores = [None] * n_queries
        counts = {name: np.zeros(n_queries, dtype=np.int64) for name in _COUNTS}
        seconds = {name: np.zeros(n_queries) for name in inverted.TIME_NAMES}
        searched_seconds = named_seconds = 0.0
        # A scan (finite p > 16) reads and computes every row.
        scanned = None
        if LARGE_P < p < math.inf:
            # The scan compares distances themselves, not p-th powers.
            scanned = self._scan(query_features, k, p, positions, eta, scope.masks,
                                 scope.searched, n_threads, bound=bound)
            searched_seconds = scanned[1]["seconds"]
        for start in range(0, n_queries, QUERY_CHUNK):
            stop = min(n_queries, start + QUERY_CHUNK)
            chunk_started = time.perf_counter()
            if scanned is None:
                found, chunk_stats = self._search_chunk(
                    query_features, start, stop, k, p, positions, eta, scope, n_threads,
                    bound=bound[start:stop], timing=stats)
                for name in _COUNTS:
                    if name in chunk_stats:
                        counts[name][start:stop] = chunk_stats[name]
                for name in inverted.TIME_NAMES:
                    seconds[name][start:stop] = chunk_stats["seconds"][name]
            else:
                found, scan_stats = scanned
                found = found[start:stop]
                counts["rows_read"][start:stop] = scope.n_rows
                counts["exact"][start:stop] = scope.n_rows
                counts["blocks"][start:stop] = scan_stats["blocks"]
                counts["blocks_scored"][start:stop] = scan_stats["blocks_scored"]
                seconds["scoring"][start:stop] = scan_stats["seconds"] / n_queries
            searched_seconds += time.perf_counter() - chunk_started
            chunk_started = time.perf_counter()
            named = self._documents_named([doc for _, _, _, docs, _ in found for doc in docs])
            for i, (dist, _, _, docs, score) in enumerate(found):
                q = start + i
                found_distances[q] = dist
                found_scores[q] = score
                keys[q] = [named[doc][0] for doc in docs]
                labels[q] = [named[doc][1] for doc in docs]
                ids[q] = list(docs)
            named_seconds += time.perf_counter() - chunk_started
        counts["segments"][:] = len(scope.searched)
        counts["rows"][:] = scope.n_rows

        truncated = None
        if radius is None:
            distances = np.full((n_queries, k), np.inf)
            scores = np.full((n_queries, k), np.inf)
            for q, (dist, score) in enumerate(zip(found_distances, found_scores)):
                distances[q, :len(dist)] = dist
                scores[q, :len(dist)] = score
            distances = distances[:, :n_columns]
            scores = scores[:, :n_columns]
            width = n_columns
        else:
            # Exactly the documents whose reported distance is within the
            # query's radius (the kernel's bound was wider), at most limit
            # of them.
            distances, scores, truncated = [], [], []
            for q, dist in enumerate(found_distances):
                within = np.flatnonzero(np.asarray(dist) <= radii[q])
                cut = limit is not None and len(within) > limit
                within = within[:limit].tolist()
                distances.append(np.array(np.asarray(dist)[within], dtype=np.float64))
                scores.append(np.array(np.asarray(found_scores[q])[within], dtype=np.float64))
                keys[q] = [keys[q][j] for j in within]
                labels[q] = [labels[q][j] for j in within]
                ids[q] = [ids[q][j] for j in within]
                truncated.append(bool(cut))
            width = limit
        if isinstance(queries, str) or (isinstance(queries, (list, tuple)) and queries
                                        and isinstance(queries[0], str)):
            self._own_key_first([queries] if isinstance(queries, str) else queries, keys,
                                distances, labels, ids, scope.masks, width, scores)
        totals = {name: int(counts[name].sum()) for name in _COUNTS}
        if stats:
            totals["queries"] = [
                dict({name: int(counts[name][q]) for name in _COUNTS},
                     seconds={name: float(seconds[name][q]) for name in inverted.TIME_NAMES})
                for q in range(n_queries)]
            totals["seconds"] = {"features": featured - started, "search": searched_seconds,
                                 "names": named_seconds,
                                 "total": time.perf_counter() - started}
        return SearchResult(keys, distances, labels, p, totals, radius=radius,
                            truncated=truncated, ids=ids, scores=scores)

    def _documents_named(self, doc_ids):
        """{doc id: (key, label)} from the catalog, for ids a search found."""
        named = self._catalog.documents_by_id(sorted(set(doc_ids)))
        missing = set(doc_ids) - set(named)
        if missing:
            raise CorruptIndexError(
                f"{self.path}: a segment holds document id {min(missing)}, which the catalog "
                "does not list; run verify() and restore from a backup")
        return named

    def _own_key_first(self, query_keys, keys, distances, labels, ids, masks, width, scores):
        """A stored document used as the query comes first among the
        documents at distance 0 from it (duplicates), not after those with
        lower ids, as long as ``where`` admits it. ``distances[q]`` is
        query q's row (an array); ``keys``, ``labels`` and ``ids`` move
        together (the scores at distance 0 are all 0 and stay); ``width``
        the most results a query may hold (None: no limit)."""
        position = {s.id: i for i, s in enumerate(self._segments)}
        for q, key in enumerate(query_keys):
            if not keys[q] or distances[q][0] != 0.0:
                continue
            if key in keys[q]:
                j = keys[q].index(key)
                label, doc_id = labels[q][j], ids[q][j]
                del keys[q][j], labels[q][j], ids[q][j]
            else:
                doc_id, segment, row = self._locate(key)
                if not masks[position[segment.id]][row] or distances[q][len(keys[q]) - 1] != 0.0:
                    continue
                label = self._documents_named([doc_id])[doc_id][1]
                if len(keys[q]) == width:
                    keys[q].pop()
                    labels[q].pop()
                    ids[q].pop()
            keys[q].insert(0, key)
            labels[q].insert(0, label)
            ids[q].insert(0, int(doc_id))

    def _selected_roots(self, roots):
        """The positions of ``roots`` (all by default) and their eta, renormalised."""
        positions = self._root_positions(roots)
        # The same few root selections come back query after query.
        key = tuple(positions)
        if key not in self._eta_cache:
            self._eta_cache[key] = normalise_eta(self.eta[positions], len(positions))
        return positions, self._eta_cache[key]

    def _root_positions(self, roots):
        """Positions into ``self.roots``, checked: all by default."""
        return root_positions(roots, len(self.roots))

    def _query_features(self, queries, positions, csr=True):
        """Per selected root, the feature rows of ``queries``: the stored rows
        of stored keys, else those of the measures given (as _FeatureRows
        when ``csr`` is False)."""
        if isinstance(queries, str) or (
                isinstance(queries, (list, tuple)) and queries and
                all(isinstance(q, str) for q in queries)):
            return [self.features(queries if not isinstance(queries, str) else [queries], root=r)
                    for r in positions]
        batch = as_measure_batch(queries, n_nodes=self.graph.n_nodes)
        if len(batch) == 0:
            raise InvalidMeasureError("no queries were given")
        if not csr:
            # A single query's search is a few milliseconds; building a SciPy
            # matrix (and checking it) would be a tenth of that.
            shape = (len(batch), self.graph.n_nodes)
            return [_FeatureRows(*self.trees[r].feature_arrays_of_batch(batch), shape)
                    for r in positions]
        return [self.trees[r].features_of_batch(batch) for r in positions]

    def _search_scope(self, where):
        """The rows a search may return (see _SearchScope). Without ``where``
        it is kept until the index changes: a single query takes a few
        milliseconds, and rebuilding this would be a tenth of them."""
        if where is None and self._scope_cache is not None:
            return self._scope_cache
        masks = self._candidate_masks(where)
        searched = [s for s, mask in enumerate(masks) if mask.any()]
        scope = _SearchScope(masks, searched, None)
        if where is None:
            self._scope_cache = scope
        return scope

    def _candidate_masks(self, where):
        masks = [s.live.copy() for s in self._segments]
        if where is None:
            return masks
        if not isinstance(where, dict) or not set(where) <= {"label", "keys"}:
            raise ValueError(
                f"where is {where!r}; expected a dict with 'label' (a value or list) "
                "and/or 'keys' (a list of keys)"
            )
        if "label" in where:
            wanted = where["label"]
            wanted = set(wanted) if isinstance(wanted, (list, tuple, set, frozenset)) else {wanted}
            seg_ids, rows, present = self._catalog.live_rows_with_labels(wanted)
            order = np.argsort(seg_ids, kind="stable")
            seg_ids, rows = seg_ids[order], rows[order]
            for mask, segment in zip(masks, self._segments):
                lo, hi = np.searchsorted(seg_ids, [segment.id, segment.id + 1])
                keep = np.zeros(segment.rows, dtype=bool)
                keep[rows[lo:hi]] = True
                mask &= keep
            absent = sorted(map(repr, wanted - present))
            if absent:
                # Most often a typo: say so rather than return nothing silently.
                warnings.warn(f"no live document has the label {', '.join(absent)}",
                              UserWarning, stacklevel=4)
        if "keys" in where:
            if isinstance(where["keys"], str):
                raise ValueError(f"where['keys'] is the str {where['keys']!r}; expected a list of keys")
            allowed = {}
            found = self._catalog.live_documents(
                [key for key in where["keys"] if isinstance(key, str)])
            for _, seg_id, row in found.values():
                allowed.setdefault(seg_id, []).append(row)
            for mask, segment in zip(masks, self._segments):
                keep = np.zeros(segment.rows, dtype=bool)
                keep[allowed.get(segment.id, [])] = True
                mask &= keep
        return masks

    def _search_chunk(self, query_features, start, stop, k, p, positions, eta, scope,
                      n_threads, bound=math.inf, timing=False):
        """Per query: (distances, segment positions, rows, doc ids, scores),
        best first (scores: the kernel's values, see SearchResult); and the
        kernel's statistics (see inverted.search). ``bound``
        (in the kernel's units): a number, or one per query of the chunk;
        ``k`` None: every row within its query's bound, else the k best
        within it."""
        searched = scope.searched
        queries = [row_range((F.indptr, F.indices, F.data), start, stop)
                   for F in query_features]
        if scope.mask is None:
            scope.mask = np.concatenate(
                [np.asarray(scope.masks[s], dtype=bool) for s in searched]
                or [np.zeros(0, dtype=bool)]).view(np.uint8)
        values, segs, rows, docs, stats = inverted.search(
            [self._segments[s].inverted_file(self.trees, self._edge_weight) for s in searched],
            scope.mask, queries, positions, eta, 0 if k is None else k, p, self.trees,
            n_threads=n_threads, bound=bound, limit=k is not None, timing=timing)
        found = []
        for i in range(stop - start):
            n = int(np.count_nonzero(segs[i] >= 0))
            score = value = values[i][:n]
            if len(positions) == 1 and p != 1.0 and not math.isinf(p):
                value = value ** (1.0 / p)
            found.append((value, [searched[g] for g in segs[i][:n].tolist()],
                          rows[i][:n].tolist(), docs[i][:n].tolist(), score))
        return found, stats

    def _scan(self, query_features, k, p, positions, eta, masks, searched, n_threads,
              bound=math.inf):
        """(per query: (distances, segment positions, rows, doc ids, scores),
        best first, from every row of the searched segments (the scores are
        the distances); {"blocks",
        "blocks_scored", "seconds"} of the scan). ``bound``: a distance, or
        one per query; ``k`` None: every row within its query's bound, else
        the k best within it.

        A large finite p scans every row: its p-th powers would underflow
        in the identity the inverted file relies on (see distances.LARGE_P).
        Rows go by SCAN_CHUNK_ROWS (their features rebuilt once per search
        unless kept), queries by QUERY_CHUNK: the distance block stays
        small."""
        started = time.perf_counter()
        n_queries = query_features[0].shape[0]
        bound = np.broadcast_to(np.asarray(bound, dtype=np.float64), (n_queries,))
        best = [_TopK(k) for _ in range(n_queries)]
        blocks = blocks_scored = 0
        for s in searched:
            segment, mask = self._segments[s], masks[s]
            for a, b, rows in self._scan_rows(segment, positions):
                blocks += 1
                live = mask[a:b]
                n_live = int(live.sum())
                kk = n_live if k is None else min(k, n_live)
                if kk == 0:
                    continue
                blocks_scored += 1
                doc_ids = segment.data.doc_ids[a:b]
                for start in range(0, n_queries, QUERY_CHUNK):
                    stop = min(n_queries, start + QUERY_CHUNK)
                    total = self._scan_block(rows, query_features, start, stop, p, positions,
                                             eta, n_threads)
                    total[:, ~live] = np.inf
                    if k is None:
                        threshold = bound[start:stop]
                    else:
                        threshold = np.minimum(
                            np.partition(total, kk - 1, axis=1)[:, kk - 1], bound[start:stop])
                    for i in range(stop - start):
                        found = np.flatnonzero((total[i] <= threshold[i]) & live)
                        best[start + i].offer(total[i, found], doc_ids[found], s, a + found)
        return [top.result() + (top.dist,) for top in best], {
            "blocks": blocks, "blocks_scored": blocks_scored,
            "seconds": time.perf_counter() - started}

    def _scan_rows(self, segment, positions):
        """(a, b, features of rows a..b-1 per selected root) over a
        segment, SCAN_CHUNK_ROWS rows at a time: views of the features kept
        for it, kept now if SCAN_CACHE_BYTES has room, else rebuilt."""
        kept = []
        with _SCAN_CACHE_LOCK:
            for position in positions:
                rows = segment.cached_feature_rows(position)
                if rows is None and (self._scan_cache_room()
                                     >= segment.feature_bytes(len(self.roots))):
                    rows = segment.feature_rows(position, self.trees[position])
                kept.append(rows)
        for a in range(0, segment.rows, SCAN_CHUNK_ROWS):
            b = min(a + SCAN_CHUNK_ROWS, segment.rows)
            yield a, b, [row_range(rows, a, b) if rows is not None
                         else segment.features_of_rows(np.arange(a, b), self.trees[position])
                         for position, rows in zip(positions, kept)]

    def _scan_block(self, rows, query_features, start, stop, p, positions, eta, n_threads):
        """sum_s eta_s S_p from queries start..stop-1 to ``rows`` (features
        per selected root, see _scan_rows)."""
        total = None
        for r, position in enumerate(positions):
            tree, F = self.trees[position], query_features[r]
            q = row_range((F.indptr, F.indices, F.data), start, stop)
            out = np.empty((stop - start, len(rows[r][0]) - 1))
            scale = tree.length ** (1.0 / p)
            _pairwise.pairwise_lp(*q, *rows[r], scale, p, False, out, n_threads=n_threads)
            if len(positions) == 1:
                return out
            out *= eta[r]
            total = out if total is None else np.add(total, out, out=total)
        return total

    def _scan_cache_room(self):
        """Bytes the scans may still keep (see SCAN_CACHE_BYTES)."""
        return SCAN_CACHE_BYTES - sum(s.cached_feature_bytes() for s in self._segments)

    # --------------------------------------------------- distances and labels
    def _features_of(self, item, positions):
        """Features per selected root of a stored key or a (nodes, masses) measure."""
        if isinstance(item, str):
            return [self.features([item], root=r) for r in positions]
        return self._query_features([item], positions)

    def distance(self, a, b, p=None, roots=None):
        """S_p (sliced over ``roots``, default all) between two stored keys or
        (nodes, masses) measures, from a direct sparse difference: exact even
        for nearly equal measures."""
        self._check_open()
        p = self.p if p is None else check_p(p)
        positions, eta = self._selected_roots(roots)
        return difference_distance(self._features_of(a, positions), self._features_of(b, positions),
                                   [self.trees[r] for r in positions], p, eta)

    def keys_in_order(self):
        """The live keys in insertion order: the row (and column) order of
        :meth:`knn_graph`."""
        return list(self)

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
        self._selected_roots(roots)  # a bad roots argument fails before any work
        return knn_graph_of(self, k, p, include_self, roots, batch, n_threads, progress,
                            CorruptIndexError, "run verify()")

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
        self._selected_roots(roots)  # a bad roots argument fails before any work
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

    def pairwise(self, keys, other_keys=None, p=None, roots=None, n_threads=None):
        """Matrix of S_p between stored documents: ``keys`` x ``other_keys``
        (``keys`` with themselves by default; then exactly symmetric with a
        zero diagonal)."""
        self._check_open()
        p = self.p if p is None else check_p(p)
        positions, eta = self._selected_roots(roots)
        keys = [keys] if isinstance(keys, str) else list(keys)
        FX = [self.features(keys, root=r) for r in positions]
        FY = None
        if other_keys is not None:
            other_keys = [other_keys] if isinstance(other_keys, str) else list(other_keys)
            FY = [self.features(other_keys, root=r) for r in positions]
        return pairwise_sobolev(FX, FY, trees=[self.trees[r] for r in positions], p=p, eta=eta,
                                n_threads=n_threads)

    def keys_with_labels(self, labels):
        """Live keys whose label is one of ``labels``, in insertion order."""
        self._check_open()
        wanted = {labels} if isinstance(labels, str) or labels is None else set(labels)
        return self._catalog.live_keys(wanted)

    def gram(self, keys=None, labels=None, p=None, roots=None, t=None, power=False,
             n_threads=None):
        """Distance matrix (or kernel exp(-t d) with ``t``) of stored documents.

        The documents are ``keys`` plus every live document with one of
        ``labels``. ``power=True`` uses d = sum_r eta_r S_p^p, which keeps
        exp(-t d) positive definite for p <= 2. Returns (matrix, keys, labels).
        """
        self._check_open()
        chosen = [] if keys is None else ([keys] if isinstance(keys, str) else list(keys))
        if labels:
            seen = set(chosen)
            chosen += [k for k in self.keys_with_labels(labels) if k not in seen]
        if not chosen:
            raise ValueError("no documents were chosen; give keys, or labels that some "
                             "documents have")
        p = self.p if p is None else check_p(p)
        positions, eta = self._selected_roots(roots)
        F = [self.features(chosen, root=r) for r in positions]
        trees = [self.trees[r] for r in positions]
        if t is None:
            if power and math.isinf(p):
                raise ValueError("power=True needs a finite p; S_inf has no p-th power")
            matrix = sliced_pairwise(F, None, trees, p, eta, n_threads, power=power)
        else:
            matrix = sobolev_kernel(F, None, trees, p=p, t=t, power=power, eta=eta,
                                    n_threads=n_threads)
        row_labels = [self.get(k)["label"] for k in chosen]
        return matrix, chosen, row_labels


class _SearchScope:
    """What a search may return: per segment, a mask of the rows
    (``masks``); the positions of the segments with any such row
    (``searched``); their number of rows (``n_rows``); and, made when first
    needed, those segments' masks one after the other as uint8 (``mask``),
    as the kernel takes them."""

    def __init__(self, masks, searched, mask):
        self.masks = masks
        self.searched = searched
        self.mask = mask
        self.n_rows = sum(int(np.count_nonzero(masks[s])) for s in searched)


class _FeatureRows(NamedTuple):
    """Feature rows as plain CSR arrays, with the shape of the matrix."""
    indptr: np.ndarray
    indices: np.ndarray
    data: np.ndarray
    shape: tuple


class _TopK:
    """The k best (distance, doc id) pairs seen so far (all of them for k
    None); ties go to the lower id."""

    def __init__(self, k):
        self.k = k
        self.dist = np.zeros(0)
        self.docs = np.zeros(0, dtype=np.int64)
        self.segs = np.zeros(0, dtype=np.int64)
        self.rows = np.zeros(0, dtype=np.int64)

    def offer(self, dist, docs, segment, rows):
        dist = np.concatenate([self.dist, dist])
        docs = np.concatenate([self.docs, docs])
        segs = np.concatenate([self.segs, np.full(len(rows), segment, dtype=np.int64)])
        rows = np.concatenate([self.rows, rows])
        keep = np.lexsort((docs, dist))[: self.k]
        self.dist, self.docs, self.segs, self.rows = dist[keep], docs[keep], segs[keep], rows[keep]

    def result(self):
        return self.dist, self.segs.tolist(), self.rows.tolist(), self.docs.tolist()
