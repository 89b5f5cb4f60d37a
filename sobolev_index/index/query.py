"""Exact search of an index's snapshot, and the distances between its
stored documents.

A search is planned, executed and assembled, the way each kind of query
keeps its own steps:

- :meth:`Query.plan` checks the arguments, computes the query features and
  decides the kind of search: the k nearest, or every document within a
  radius (one per query, or one for all); through the inverted files
  (``inverted.py``: p up to 16, and p = inf) or by a scan of every row (a
  finite p above 16, whose p-th powers would underflow); the bounds in the
  kernel's units; the rows ``where`` admits.
- :meth:`Query.execute` runs it, chunk by chunk of queries, and names the
  hits from the catalog.
- :meth:`Query.assemble` makes the :class:`SearchResult`: a k-NN answer
  padded to its width, a radius answer cut at each radius exactly, a stored
  key used as a query first among its copies, the statistics.

An approximate search (``candidates``) plans its kernel pass on the
candidates' roots (:meth:`Query._rerank_plan`) and ranks what that pass
found on every root (:meth:`Query._rerank`, from the candidates' stored
measures, ``_candidate_distances``) before the hits are named.

``distance``, ``pairwise`` and ``gram`` compute S_p between stored
documents (or given measures) from their features.
"""
import math
import threading
import time
import warnings
from dataclasses import dataclass

import numpy as np

from .. import _pairwise
from ..distances import (
    LARGE_P,
    FeatureRows,
    check_p,
    difference_distance,
    pairwise_sobolev,
    sliced_pairwise,
    sliced_rows,
    sobolev_kernel,
)
from ..errors import InvalidMeasureError
from ..measures import as_measure_batch, checked_batch
from . import inverted
from .arguments import (
    check_where,
    checked_candidates,
    checked_search_args,
    radius_for_queries,
)
from .csr import gather_rows, row_range, stack_rows
from .results import COUNTS, SearchResult, own_key_first

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


class Query:
    """The query side of an index: searches and distances over the
    snapshot ``snap`` (see ``snapshot.py``), which it reads and whose
    caches (``eta_cache``, ``scope_cache``) it fills."""

    def __init__(self, snap):
        self.snap = snap

    def search(self, queries, k, p, roots, where, n_threads, radius, limit, stats,
               candidates=None, candidate_roots=None):
        """SobolevIndex.search, as plan, execute and assemble."""
        started = time.perf_counter()
        plan = self.plan(queries, k, p, roots, where, radius, limit, candidates,
                         candidate_roots)
        featured = time.perf_counter()
        found = self.execute(plan, n_threads, stats)
        result = self.assemble(plan, found, queries, stats)
        if stats:
            result.stats["seconds"] = {"features": featured - started,
                                       "search": found.searched_seconds,
                                       "names": found.named_seconds,
                                       "total": time.perf_counter() - started}
        return result

    def plan(self, queries, k, p, roots, where, radius, limit, candidates=None,
             candidate_roots=None):
        """What a search does, with every argument checked and the query
        features computed: a :class:`SearchPlan`."""
        p = self.snap.p if p is None else check_p(p)
        k, radius = checked_search_args(k, radius, limit)
        positions, eta = self.snap.selected_roots(roots)
        approximate = checked_candidates(candidates, candidate_roots, k, radius, len(positions))
        features = self.query_features(queries, positions, csr=False)
        n_queries = features[0].shape[0]
        radius = radius_for_queries(radius, n_queries)
        scope = self.search_scope(where)
        n_columns = rerank = None
        if radius is None:
            # More neighbours than live documents cannot be found: buffers
            # stay proportional to min(k, N), and every live document is
            # returned.
            n_columns = min(int(k), self.snap.n_live)
            k = max(1, n_columns)
            radii = bound = np.full(n_queries, math.inf)
            if approximate is not None and approximate[1] < len(positions):
                rerank, positions, eta, features = self._rerank_plan(
                    approximate, k, positions, eta, features)
                k = max(1, min(approximate[0], self.snap.n_live))
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
        return SearchPlan(p=p, k=k, n_columns=n_columns, radius=radius, limit=limit, radii=radii,
                          bound=bound, positions=positions, eta=eta, features=features,
                          n_queries=n_queries, scope=scope, scan=LARGE_P < p < math.inf,
                          rerank=rerank, approximate=approximate is not None)

    def _rerank_plan(self, approximate, k, positions, eta, features):
        """An approximate search's two steps: the candidates' roots (the
        first searched ones of positive weight), their eta and query
        features, for the kernel; and the :class:`_Rerank` of the
        candidates on every searched root."""
        candidates, n_roots = approximate
        chosen = [j for j in range(len(positions)) if eta[j] > 0][:n_roots]
        total = float(eta[chosen].sum())
        rerank = _Rerank(positions=positions, eta=eta, features=features, k=k,
                         candidates=candidates, scale=total)
        return (rerank, [positions[j] for j in chosen], eta[chosen] / total,
                [features[j] for j in chosen])

    def execute(self, plan, n_threads, timing):
        """Run ``plan``: the inverted files chunk by chunk of queries, or
        one scan of every row (finite p > 16); each hit named from the
        catalog. A :class:`_Found`."""
        n_queries, scope = plan.n_queries, plan.scope
        found = _Found(n_queries, approximate=plan.approximate)
        scanned = None
        if plan.scan:
            # The scan compares distances themselves, not p-th powers.
            scanned = self._scan(plan.features, plan.k, plan.p, plan.positions, plan.eta,
                                 scope.masks, scope.searched, n_threads, bound=plan.bound)
            found.searched_seconds = scanned[1]["seconds"]
        for start in range(0, n_queries, QUERY_CHUNK):
            stop = min(n_queries, start + QUERY_CHUNK)
            chunk_started = time.perf_counter()
            if scanned is None:
                hits, chunk_stats = self._search_chunk(
                    plan.features, start, stop, plan.k, plan.p, plan.positions, plan.eta, scope,
                    n_threads, bound=plan.bound[start:stop], timing=timing)
                for name in COUNTS:
                    if name in chunk_stats:
                        found.counts[name][start:stop] = chunk_stats[name]
                for name in inverted.TIME_NAMES:
                    found.seconds[name][start:stop] = chunk_stats["seconds"][name]
            else:
                hits, scan_stats = scanned
                hits = hits[start:stop]
                found.counts["rows_read"][start:stop] = scope.n_rows
                found.counts["exact"][start:stop] = scope.n_rows
                found.counts["blocks"][start:stop] = scan_stats["blocks"]
                found.counts["blocks_scored"][start:stop] = scan_stats["blocks_scored"]
                found.seconds["scoring"][start:stop] = scan_stats["seconds"] / n_queries
            if plan.rerank is not None:
                reranked = time.perf_counter()
                n_candidates = [len(hit[3]) for hit in hits]
                hits, found.certified[start:stop] = self._rerank(plan, hits, start)
                found.counts["exact"][start:stop] += n_candidates
                found.seconds["exact"][start:stop] += (time.perf_counter() - reranked) / (
                    stop - start)
            found.searched_seconds += time.perf_counter() - chunk_started
            chunk_started = time.perf_counter()
            named = self.snap.documents_named([doc for _, _, _, docs, _ in hits for doc in docs])
            for i, (dist, _, _, docs, score) in enumerate(hits):
                q = start + i
                found.distances[q] = dist
                found.scores[q] = score
                found.keys[q] = [named[doc][0] for doc in docs]
                found.labels[q] = [named[doc][1] for doc in docs]
                found.ids[q] = list(docs)
            found.named_seconds += time.perf_counter() - chunk_started
        found.counts["segments"][:] = len(scope.searched)
        found.counts["rows"][:] = scope.n_rows
        return found

    def assemble(self, plan, found, queries, stats):
        """The :class:`SearchResult` of an executed plan: a k-NN answer
        padded to its width with inf; a radius answer cut at each query's
        radius exactly (the kernel's bound was wider) and at the limit; a
        stored key used as a query first among its copies; the counts."""
        n_queries = plan.n_queries
        keys, labels, ids = found.keys, found.labels, found.ids
        truncated = None
        if plan.radius is None:
            distances = np.full((n_queries, plan.k), np.inf)
            scores = np.full((n_queries, plan.k), np.inf)
            for q, (dist, score) in enumerate(zip(found.distances, found.scores)):
                distances[q, :len(dist)] = dist
                scores[q, :len(dist)] = score
            distances = distances[:, :plan.n_columns]
            scores = scores[:, :plan.n_columns]
            width = plan.n_columns
        else:
            limit = plan.limit
            distances, scores, truncated = [], [], []
            for q, dist in enumerate(found.distances):
                within = np.flatnonzero(np.asarray(dist) <= plan.radii[q])
                cut = limit is not None and len(within) > limit
                within = within[:limit].tolist()
                distances.append(np.array(np.asarray(dist)[within], dtype=np.float64))
                scores.append(np.array(np.asarray(found.scores[q])[within], dtype=np.float64))
                keys[q] = [keys[q][j] for j in within]
                labels[q] = [labels[q][j] for j in within]
                ids[q] = [ids[q][j] for j in within]
                truncated.append(bool(cut))
            width = limit
        if isinstance(queries, str) or (isinstance(queries, (list, tuple)) and queries
                                        and isinstance(queries[0], str)):
            self._own_key_first([queries] if isinstance(queries, str) else queries, keys,
                                distances, labels, ids, plan.scope.masks, width)
        counts = found.counts
        totals = {name: int(counts[name].sum()) for name in COUNTS}
        if stats:
            totals["queries"] = [
                dict({name: int(counts[name][q]) for name in COUNTS},
                     seconds={name: float(found.seconds[name][q])
                              for name in inverted.TIME_NAMES})
                for q in range(n_queries)]
        return SearchResult(keys, distances, labels, plan.p, totals, radius=plan.radius,
                            truncated=truncated, ids=ids, scores=scores,
                            certified=found.certified)

    def query_features(self, queries, positions, csr=True):
        """Per selected root, the feature rows of ``queries``: the stored rows
        of stored keys, else those of the measures given (as FeatureRows
        when ``csr`` is False)."""
        if isinstance(queries, str) or (
                isinstance(queries, (list, tuple)) and queries and
                all(isinstance(q, str) for q in queries)):
            keys = [queries] if isinstance(queries, str) else queries
            return [self.snap.features(keys, root=r) for r in positions]
        batch = as_measure_batch(queries, n_nodes=self.snap.graph.n_nodes)
        if len(batch) == 0:
            raise InvalidMeasureError("no queries were given")
        if not csr:
            # A single query's search is a few milliseconds; building a SciPy
            # matrix (and checking it) would be a tenth of that.
            shape = (len(batch), self.snap.graph.n_nodes)
            return [FeatureRows(*self.snap.trees[r].feature_arrays_of_batch(batch), shape)
                    for r in positions]
        return [self.snap.trees[r].features_of_batch(batch) for r in positions]

    def features_of(self, item, positions):
        """Features per selected root of a stored key or a (nodes, masses) measure."""
        if isinstance(item, str):
            return [self.snap.features([item], root=r) for r in positions]
        return self.query_features([item], positions)

    def search_scope(self, where):
        """The rows a search may return (see _SearchScope). Without ``where``
        it is kept until the index changes: a single query takes a few
        milliseconds, and rebuilding this would be a tenth of them."""
        if where is None and self.snap.scope_cache is not None:
            return self.snap.scope_cache
        masks = self._candidate_masks(where)
        searched = [s for s, mask in enumerate(masks) if mask.any()]
        scope = _SearchScope(masks, searched, None)
        if where is None:
            self.snap.scope_cache = scope
        return scope

    def _candidate_masks(self, where):
        """Per segment, the mask of the live rows ``where`` admits."""
        masks = [s.live.copy() for s in self.snap.segments]
        if where is None:
            return masks
        check_where(where)
        if "label" in where:
            wanted = where["label"]
            wanted = set(wanted) if isinstance(wanted, (list, tuple, set, frozenset)) else {wanted}
            seg_ids, rows, present = self.snap.catalog.live_rows_with_labels(wanted)
            order = np.argsort(seg_ids, kind="stable")
            seg_ids, rows = seg_ids[order], rows[order]
            for mask, segment in zip(masks, self.snap.segments):
                lo, hi = np.searchsorted(seg_ids, [segment.id, segment.id + 1])
                keep = np.zeros(segment.rows, dtype=bool)
                keep[rows[lo:hi]] = True
                mask &= keep
            absent = sorted(map(repr, wanted - present))
            if absent:
                # Most often a typo: say so rather than return nothing
                # silently. The warning names the caller of SobolevIndex.search,
                # above Query.search, plan and search_scope.
                warnings.warn(f"no live document has the label {', '.join(absent)}",
                              UserWarning, stacklevel=6)
        if "keys" in where:
            allowed = {}
            found = self.snap.catalog.live_documents(
                [key for key in where["keys"] if isinstance(key, str)])
            for _, seg_id, row in found.values():
                allowed.setdefault(seg_id, []).append(row)
            for mask, segment in zip(masks, self.snap.segments):
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
            [self.snap.segments[s].inverted_file(self.snap.trees, self.snap.edge_weight)
             for s in searched],
            scope.mask, queries, positions, eta, 0 if k is None else k, p, self.snap.trees,
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

    def _rerank(self, plan, hits, start):
        """The hits of queries start.. (candidates found on some roots, as
        _search_chunk gives them) re-ranked by their distance on every
        searched root: per query the k nearest candidates, and whether no
        document left out can be nearer than the k-th (see
        SearchResult.certified)."""
        rerank, trees = plan.rerank, self.snap.trees
        places = sorted({place for _, segs, rows, _, _ in hits for place in zip(segs, rows)})
        position_of = {place: i for i, place in enumerate(places)}
        segment_of = np.array([s for s, _ in places], dtype=np.int64)
        row_of = np.array([r for _, r in places], dtype=np.int64)
        # The measures of the chunk's candidates, read once however many
        # queries found them.
        if places:
            n_nodes = self.snap.graph.n_nodes
            parts = [self.snap.segments[s].measures_of_rows(row_of[segment_of == s], n_nodes)
                     for s in np.unique(segment_of).tolist()]
            indptr, nodes, masses = stack_rows([part[:3] for part in parts])
            scale = np.concatenate([part[3] for part in parts])
        searched = [trees[root] for root in rerank.positions]
        out, certified = [], []
        for i, (value, segs, rows, docs, _) in enumerate(hits):
            if not docs:
                out.append((value, segs, rows, docs, value))
                certified.append(True)
                continue
            picked = np.array([position_of[place] for place in zip(segs, rows)], dtype=np.int64)
            batch = checked_batch(*gather_rows(indptr, (nodes, masses), picked), scale[picked])
            query = [row_range((F.indptr, F.indices, F.data), start + i, start + i + 1)
                     for F in rerank.features]
            dist = _candidate_distances(query, batch, searched, plan.p, rerank.eta)
            doc_ids = np.asarray(docs, dtype=np.int64)
            order = np.lexsort((doc_ids, dist))[:rerank.k]
            dist = dist[order]
            # Every document not among the candidates is at least as far on
            # the candidates' roots as the last candidate, and the other
            # roots only add to that: when this exceeds the k-th distance
            # found, no document left out is nearer. The margin covers the
            # rounding of the two ways of computing it.
            certified.append(bool(len(docs) >= plan.scope.n_rows
                                  or value[-1] * rerank.scale * (1.0 - 1e-9) >= dist[-1]))
            out.append((dist, [segs[j] for j in order.tolist()],
                        [rows[j] for j in order.tolist()], doc_ids[order].tolist(), dist))
        return out, certified

    def _own_key_first(self, query_keys, keys, distances, labels, ids, masks, width):
        """results.own_key_first, with ``where``'s row masks deciding
        whether a stored key may be returned."""
        position = {s.id: i for i, s in enumerate(self.snap.segments)}

        def stored_of(q, key):
            doc_id, segment, row = self.snap.locate(key)
            if not masks[position[segment.id]][row]:
                return None
            return self.snap.documents_named([doc_id])[doc_id][1], doc_id

        own_key_first(query_keys, keys, distances, labels, ids, width, stored_of)

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
            segment, mask = self.snap.segments[s], masks[s]
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
                                     >= segment.feature_bytes(len(self.snap.roots))):
                    rows = segment.feature_rows(position, self.snap.trees[position])
                kept.append(rows)
        for a in range(0, segment.rows, SCAN_CHUNK_ROWS):
            b = min(a + SCAN_CHUNK_ROWS, segment.rows)
            yield a, b, [row_range(rows, a, b) if rows is not None
                         else segment.features_of_rows(np.arange(a, b), self.snap.trees[position])
                         for position, rows in zip(positions, kept)]

    def _scan_block(self, rows, query_features, start, stop, p, positions, eta, n_threads):
        """sum_s eta_s S_p from queries start..stop-1 to ``rows`` (features
        per selected root, see _scan_rows)."""
        total = None
        for r, position in enumerate(positions):
            tree, F = self.snap.trees[position], query_features[r]
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
        return SCAN_CACHE_BYTES - sum(s.cached_feature_bytes() for s in self.snap.segments)

    def distance(self, a, b, p=None, roots=None):
        """SobolevIndex.distance: from a direct sparse difference of the features."""
        p = self.snap.p if p is None else check_p(p)
        positions, eta = self.snap.selected_roots(roots)
        return difference_distance(self.features_of(a, positions), self.features_of(b, positions),
                                   [self.snap.trees[r] for r in positions], p, eta)

    def pairwise(self, keys, other_keys=None, p=None, roots=None, n_threads=None):
        """SobolevIndex.pairwise: ``keys`` x ``other_keys`` (or with themselves)."""
        p = self.snap.p if p is None else check_p(p)
        positions, eta = self.snap.selected_roots(roots)
        keys = [keys] if isinstance(keys, str) else list(keys)
        FX = [self.snap.features(keys, root=r) for r in positions]
        FY = None
        if other_keys is not None:
            other_keys = [other_keys] if isinstance(other_keys, str) else list(other_keys)
            FY = [self.snap.features(other_keys, root=r) for r in positions]
        return pairwise_sobolev(FX, FY, trees=[self.snap.trees[r] for r in positions], p=p,
                                eta=eta, n_threads=n_threads)

    def gram(self, keys=None, labels=None, p=None, roots=None, t=None, power=False,
             n_threads=None):
        """SobolevIndex.gram: (matrix, keys, labels)."""
        chosen = [] if keys is None else ([keys] if isinstance(keys, str) else list(keys))
        if labels:
            seen = set(chosen)
            chosen += [k for k in self.snap.keys_with_labels(labels) if k not in seen]
        if not chosen:
            raise ValueError("no documents were chosen; give keys, or labels that some "
                             "documents have")
        p = self.snap.p if p is None else check_p(p)
        positions, eta = self.snap.selected_roots(roots)
        F = [self.snap.features(chosen, root=r) for r in positions]
        trees = [self.snap.trees[r] for r in positions]
        if t is None:
            if power and math.isinf(p):
                raise ValueError("power=True needs a finite p; S_inf has no p-th power")
            matrix = sliced_pairwise(F, None, trees, p, eta, n_threads, power=power)
        else:
            matrix = sobolev_kernel(F, None, trees, p=p, t=t, power=power, eta=eta,
                                    n_threads=n_threads)
        row_labels = [self.snap.get(k)["label"] for k in chosen]
        return matrix, chosen, row_labels


@dataclass
class SearchPlan:
    """A search, decided and checked (see Query.plan): the order ``p``;
    ``k`` the kernel's heap size (None: every row within its query's
    bound); ``n_columns`` a k-NN answer's width (None for a radius
    search); ``radius`` as given (checked), ``radii`` one per query and
    ``bound`` the same in the kernel's units; the selected root
    ``positions`` with their renormalised ``eta``; the query ``features``
    per root; the rows in ``scope``; whether to ``scan`` every row; and
    for an approximate search, the :class:`_Rerank` of its candidates
    (``positions``, ``eta``, ``features`` and ``k`` are then those of the
    candidates' roots and their number), None when the candidates' roots
    are all those searched (the search is then exact); ``approximate``
    whether candidates were asked for (the result then says which answers
    are certified)."""

    p: float
    k: object
    n_columns: object
    radius: object
    limit: object
    radii: np.ndarray
    bound: np.ndarray
    positions: list
    eta: np.ndarray
    features: list
    n_queries: int
    scope: object
    scan: bool
    rerank: object = None
    approximate: bool = False


@dataclass
class _Rerank:
    """The second step of an approximate search (see Query._rerank): the
    searched root ``positions``, their ``eta`` and the query ``features``
    on each; the ``k`` nearest to keep among the ``candidates`` found on
    the first roots; ``scale`` turns the candidates' distances into the
    sum over all roots' units (the first roots' share of eta)."""

    positions: list
    eta: np.ndarray
    features: list
    k: int
    candidates: int
    scale: float


class _Found:
    """What an executed search found, per query (lists, before the radius
    cut and the padding), with its counts and times."""

    def __init__(self, n_queries, approximate=False):
        self.keys = [[] for _ in range(n_queries)]
        self.labels = [[] for _ in range(n_queries)]
        self.ids = [[] for _ in range(n_queries)]
        self.distances = [None] * n_queries
        self.scores = [None] * n_queries
        self.certified = None if not approximate else [True] * n_queries
        self.counts = {name: np.zeros(n_queries, dtype=np.int64) for name in COUNTS}
        self.seconds = {name: np.zeros(n_queries) for name in inverted.TIME_NAMES}
        self.searched_seconds = 0.0
        self.named_seconds = 0.0


def _candidate_distances(query, batch, trees, p, eta):
    """sum_r eta_r S_p^(r) between one query (its feature row per tree, as
    (indptr, indices, data)) and each measure of ``batch``: from the
    measures directly (as the kernel computes a candidate's exact value),
    or for a finite p above LARGE_P from their features, relative to the
    largest difference (as a scan does)."""
    if LARGE_P < p < math.inf:
        n_nodes = trees[0].n_nodes
        rows = [FeatureRows(*tree.feature_arrays_of_batch(batch, n_threads=1),
                            (len(batch), n_nodes)) for tree in trees]
        return sliced_rows([FeatureRows(*q, (1, n_nodes)) for q in query], rows, trees, p,
                           eta)[0]
    total = np.zeros(len(batch))
    for (_, q_indices, q_data), tree, weight in zip(query, trees, eta):
        part = tree.powers_to_batch(q_indices, q_data, batch, p)
        if p != 1.0 and not math.isinf(p):
            part **= 1.0 / p
        total += weight * part
    return total


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
