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
from .arguments import (
    check_positive,
    check_radius,
    checked_search_args,
    radius_for_queries,
    root_positions,
)
from .base import KNN_GRAPH_BATCH
from .csr import row_range
from .results import COUNTS, SearchResult, own_key_first

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
        counts = {name: np.zeros(n_queries, dtype=np.int64) for name in COUNTS}
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
                for name in COUNTS:
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
                                distances, labels, ids, scope.masks, width)
        totals = {name: int(counts[name].sum()) for name in COUNTS}
        if stats:
            totals["queries"] = [
                dict({name: int(counts[name][q]) for name in COUNTS},
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

    def _own_key_first(self, query_keys, keys, distances, labels, ids, masks, width):
        """results.own_key_first, with ``where``'s row masks deciding
        whether a stored key may be returned."""
        position = {s.id: i for i, s in enumerate(self._segments)}

        def stored_of(q, key):
            doc_id, segment, row = self._locate(key)
            if not masks[position[segment.id]][row]:
                return None
            return self._documents_named([doc_id])[doc_id][1], doc_id

        own_key_first(query_keys, keys, distances, labels, ids, width, stored_of)

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
