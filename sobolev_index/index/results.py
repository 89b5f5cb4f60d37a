"""What a search returns, and how the answers of several searches merge.

:class:`SearchResult` is the answer of any index's ``search``. A sharded
index searches each shard and merges their answers, each a
:class:`ShardHits`, with :func:`merge_hits`; both kinds of index put a
stored key used as a query first among its copies with
:func:`own_key_first`.
"""
from typing import NamedTuple

import numpy as np

# The counts SearchResult.stats holds, per query and summed (see SearchResult).
COUNTS = ("segments", "rows", "bounded", "refined", "rows_read", "blocks", "blocks_scored",
           "exact")


class SearchResult:
    """The answer of a search: the keys, distances and labels found for each query.

    What :meth:`SobolevIndex.search <sobolev_index.SobolevIndex.search>` and
    :meth:`ShardedIndex.search <sobolev_index.ShardedIndex.search>` return;
    ``len(result)`` is the number of queries. Each parameter is kept as the
    attribute of the same name.

    Parameters
    ----------
    keys : list of list of str
        ``keys[i]`` lists the keys found for query i by ascending distance
        (ties to the lower document id, which is the earlier document).
    distances : ndarray of shape (n_queries, width), float64, or list of ndarray
        ``distances[i, j]`` is S_p to ``keys[i][j]``. For a k-NN search it
        has min(k, N) columns for N live documents, and inf where fewer
        documents qualified (under ``where``). For a radius search it is a
        list of one 1-D array per query (``distances[i][j]`` is S_p to
        ``keys[i][j]``).
    labels : list of list
        Mirrors ``keys``: the label of each document found (None for a
        document without one).
    p : float
        The order of S_p.
    stats : dict, optional
        How much of the index the search read (see Notes). None (the
        default): not given.
    radius : float or ndarray, optional
        For a radius search, the radius (a float, or with one radius per
        query a float64 array of them). None (the default) for a k-NN
        search.
    truncated : list of bool, optional
        ``truncated[i]`` says whether more documents than ``limit`` lay
        within query i's radius (only the ``limit`` nearest are kept). None
        (the default) means all False, as for a k-NN search.
    ids : list of list of int, optional
        Mirrors ``keys``: the documents' ids (ints, as ``get(key)["id"]``
        gives them; ids grow with insertion order). None (the default) in a
        result built without them.
    scores : ndarray or list of ndarray, optional
        Mirrors ``distances``: the values the search ranks by, the p-th
        powers of the distances for one root at a finite p other than 1 (up
        to p = 16; a larger p scans and ranks by distance), else the
        distances themselves. None (the default) in a result built without
        them.
    certified : list of bool, optional
        For an approximate search (``search(..., candidates=N)``),
        ``certified[i]`` is True when query i's answer is provably the exact
        one (up to ties): its candidates held every document in scope, or
        the last of them was, on the roots it was found on alone, at least
        as far as the k-th result. None (the default) without
        ``candidates``.

    See Also
    --------
    sobolev_index.SobolevIndex.search : The search that returns it.

    Notes
    -----
    Results are in (score, id) order, apart from a stored key used as a
    query, which comes first among the documents at distance 0 from it;
    that is (distance, id) order, except where two p-th powers one rounding
    apart give the same distance. Merging the results of several searches
    (of the shards of a sharded index) in the order one search would give
    needs the scores and ids.

    An approximate search ranks its candidates by their exact distance, so
    ``distances`` are S_p and ``scores`` the same values.

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
    the results, and the ``total`` (for a sharded index: the ``search``,
    the ``merge`` of the shards' answers, and the ``total``).

    Examples
    --------
    >>> from sobolev_index import Graph, SobolevIndex
    >>> graph = Graph.from_edges(4, [(0, 1), (1, 2), (2, 3), (3, 0)], [1.0, 2.0, 1.5, 1.0])
    >>> with SobolevIndex.create("result-example.idx", graph, roots=[0], p=2) as index:
    ...     _ = index.add([([1], None), ([2], None), ([1, 3], [0.5, 0.5])],
    ...                   keys=["a", "b", "c"], labels=["x", "y", "x"])
    ...     result = index.search([([3], None)], k=2)
    ...     found = index.search(["a", "b"], radius=1.0)
    >>> result
    SearchResult(queries=1, k=2, p=2.0)
    >>> result.keys, result.labels, result.ids
    ([['c', 'b']], [['x', 'y']], [[3, 2]])
    >>> result.distances.round(4).tolist(), result.scores.round(4).tolist()
    ([[0.7071, 1.2247]], [[0.5, 1.5]])
    >>> found
    SearchResult(queries=2, radius=1.0, found=3, p=2.0)
    >>> found.keys, [d.round(4).tolist() for d in found.distances]
    ([['a', 'c'], ['b']], [[0.0, 0.7071], [0.0]])
    """

    def __init__(self, keys, distances, labels, p, stats=None, radius=None, truncated=None, *,
                 ids=None, scores=None, certified=None):
        self.keys = keys
        self.certified = certified
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
        """The results as plain records, one list of dicts per query.

        Returns
        -------
        list of list of dict
            For each query, one ``{"key", "distance", "label"}`` dict per
            document found, in the result's order; ``distance`` is a float.

        Examples
        --------
        >>> from sobolev_index import Graph, SobolevIndex
        >>> graph = Graph.from_edges(3, [(0, 1), (1, 2)], [1.0, 2.0])
        >>> with SobolevIndex.create("records-example.idx", graph) as index:
        ...     _ = index.add([([0], None), ([2], None)], keys=["a", "b"], labels=["x", None])
        ...     result = index.search("a", k=2)
        >>> result.to_records()
        [[{'key': 'a', 'distance': 0.0, 'label': 'x'}, {'key': 'b', 'distance': 3.0, 'label': None}]]
        """
        return [
            [{"key": key, "distance": float(self.distances[i][j]), "label": label}
             for j, (key, label) in enumerate(zip(keys, labels))]
            for i, (keys, labels) in enumerate(zip(self.keys, self.labels))
        ]


class ShardHits(NamedTuple):
    """One shard's answer to a search, as plain data a task returns: the
    fields of its :class:`SearchResult` (``distances``, ``keys``,
    ``labels``, ``truncated``, ``stats``, ``ids``, ``scores``), ``absent``
    the wanted labels (of ``where``) it has no live document with, and
    ``live`` its number of live documents (a k-NN answer is min(k, live
    documents over all shards) wide, whatever ``where`` admits), and
    ``certified`` that of an approximate search (None otherwise, and for a
    shard with nothing in scope)."""

    distances: object
    keys: list
    labels: list
    truncated: list
    stats: object
    absent: set
    live: int
    ids: list
    scores: object
    certified: object = None


def merge_hits(found, n_queries, width):
    """Per query, the hits of several searches (``found``, ShardHits)
    merged: keys, distances, labels, ids, scores (lists of one entry per
    query) and whether more than ``width`` hits were found (``width`` None:
    no cut). They are ordered by score (see SearchResult), ties by
    document id, the order one search of all their documents gives."""
    keys, distances, labels, out_ids, out_scores, truncated = [], [], [], [], [], []
    for q in range(n_queries):
        dist = np.concatenate([np.asarray(f.distances[q], dtype=np.float64)[:len(f.keys[q])]
                               for f in found])
        ids = np.concatenate([np.asarray(f.ids[q], dtype=np.int64) for f in found])
        scores = np.concatenate([np.asarray(f.scores[q], dtype=np.float64)[:len(f.keys[q])]
                                 for f in found])
        key_of = [key for f in found for key in f.keys[q]]
        label_of = [label for f in found for label in f.labels[q]]
        order = np.lexsort((ids, scores))
        cut = len(order) if width is None else min(width, len(order))
        keys.append([key_of[j] for j in order[:cut]])
        labels.append([label_of[j] for j in order[:cut]])
        out_ids.append(ids[order[:cut]].tolist())
        distances.append(dist[order[:cut]])
        out_scores.append(scores[order[:cut]])
        truncated.append(cut < len(order))
    return keys, distances, labels, out_ids, out_scores, truncated


def own_key_first(query_keys, keys, distances, labels, ids, width, stored_of):
    """A stored document used as the query comes first among the documents
    at distance 0 from it (its copies), not after those with lower ids, as
    long as ``where`` admits it. ``distances[q]`` is query q's row;
    ``keys``, ``labels`` and ``ids`` (lists, changed in place) move
    together, while the scores at distance 0 are all 0 and stay; ``width``
    is the most results a query may hold (None: no limit).
    ``stored_of(q, key)`` gives the (label, id) of the stored ``key``, or
    None when ``where`` leaves it out; it is asked only when the search did
    not return the key itself."""
    for q, key in enumerate(query_keys):
        if not keys[q] or distances[q][0] != 0.0:
            continue
        if key in keys[q]:
            j = keys[q].index(key)
            label, doc_id = labels[q][j], ids[q][j]
            del keys[q][j], labels[q][j], ids[q][j]
        else:
            if distances[q][len(keys[q]) - 1] != 0.0:
                continue
            stored = stored_of(q, key)
            if stored is None:
                continue
            label, doc_id = stored
            if width is not None and len(keys[q]) == width:
                keys[q].pop()
                labels[q].pop()
                ids[q].pop()
        keys[q].insert(0, key)
        labels[q].insert(0, label)
        ids[q].insert(0, int(doc_id))


def padded(rows, width):
    """Rows of different lengths as one array, ``width`` wide, padded with inf."""
    out = np.full((len(rows), width), np.inf)
    for q, row in enumerate(rows):
        out[q, :len(row)] = row
    return out


def admitted(key, label, where):
    """Whether ``where`` admits the document ``key`` with ``label``."""
    if not where:
        return True
    if "keys" in where and key not in set(where["keys"]):
        return False
    if "label" in where:
        wanted = where["label"]
        wanted = set(wanted) if isinstance(wanted, (list, tuple, set, frozenset)) else {wanted}
        return label in wanted
    return True


def summed_stats(found, n_queries, per_query):
    """The shards' SearchResult.stats counts, summed (per query too)."""
    totals = {name: 0 for name in COUNTS}
    queries = [None] * n_queries if per_query else None
    for f in found:
        stats = f.stats
        if not stats:
            continue
        for name in COUNTS:
            totals[name] += int(stats.get(name, 0))
        if per_query and "queries" in stats:
            for q, one in enumerate(stats["queries"]):
                if queries[q] is None:
                    queries[q] = {name: 0 for name in COUNTS}
                    queries[q]["seconds"] = {}
                for name in COUNTS:
                    queries[q][name] += one.get(name, 0)
                for name, value in one.get("seconds", {}).items():
                    queries[q]["seconds"][name] = queries[q]["seconds"].get(name, 0.0) + value
    if per_query:
        totals["queries"] = [q if q is not None else dict({name: 0 for name in COUNTS},
                                                           seconds={}) for q in queries]
    return totals


# The counts of SearchResult.stats summed over the shards.
