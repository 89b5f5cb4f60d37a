"""The k-NN unit of the inverted-file search at a finite p: the k best
rows of one row range for one query (see _inverted_search for the bounds
and how units share a query's threshold).

Private: called by _inverted_search.search_segments only, through the
pointer it takes per call. With a radius per query (a radius search with
a limit) the query's threshold starts at its radius and a result above it
is dropped; the loop is the same.
"""
from libc.math cimport INFINITY
from libc.stdint cimport int64_t

from .._typedefs cimport float64_t
from ._heap cimport Found, Tagged, heap_offer
from ._search_bounds cimport (
    bound_chunk, exact_result, keep_within, prefetch_row, read_row,
)
from ._search_common cimport (
    C_CHUNKS, C_CHUNKS_SCORED, C_READ, T_BOUNDS, T_EXACT, T_POSTINGS, T_SCORING, Scratch, Search,
    SegmentView, finish_unit, si_load, si_lower, si_now, threshold, within_radius,
)
from ._search_postings cimport add_postings, chunk_end, start_query


cdef void _settle(const Search* se, const SegmentView* sg, Py_ssize_t segment, Py_ssize_t i,
                  Scratch* sc, Py_ssize_t count, float64_t thr,
                  Found* heap, Py_ssize_t* n_found) noexcept nogil:
    """Exact values of the candidates still within ``thr``, offered to
    the unit's k best (in a radius search, those within the query's
    radius only)."""
    cdef Py_ssize_t t
    cdef Found item
    cdef float64_t started = si_now() if se.timing else 0.0
    for t in range(count):
        if sc.cand_lows[t] <= thr and exact_result(se, sg, segment, i, sc, sc.cand_rows[t],
                                                   &item):
            if within_radius(se, i, item.value):
                heap_offer(heap, n_found, se.k, &item)
    if se.timing:
        sc.times[T_EXACT] += si_now() - started


cdef void knn_unit(const Search* se, const SegmentView* sg, Py_ssize_t segment, Py_ssize_t i,
                   Py_ssize_t row_lo, Py_ssize_t row_hi, Scratch* sc, Found* heap,
                   float64_t* shared) noexcept nogil:
    """The k best rows of sg[row_lo:row_hi] for query i into ``heap`` (a
    full heap also lowers ``shared``, the query's bound across units).

    Chunk by chunk: the posting lists, then the cheapest bound of every
    row; while the unit has fewer than k candidates the rows with the
    smallest bounds go first, so that the threshold tightens before the
    scan. A row whose bounds stay within the threshold is read (its value
    from the identity) and kept as a candidate; the candidates still
    within the threshold at the end get their exact values."""
    cdef Py_ssize_t k = se.k, n_groups = sg.n_groups
    cdef Py_ssize_t t, j, j0, j1, seed_size
    cdef Py_ssize_t n_found = 0, n_upper = 0, count = 0
    cdef int64_t read_before
    cdef float64_t lb, thr, lo, up, other
    cdef float64_t t_mark = 0.0, t_now, exact_before = 0.0
    cdef float64_t* bounds = sc.bounds
    cdef Tagged seed

    start_query(se, sg, sc, i, row_lo)
    j0 = row_lo
    while j0 < row_hi:
        j1 = chunk_end(se, j0, row_hi)
        sc.j0 = j0
        sc.counts[C_CHUNKS] += 1
        read_before = sc.counts[C_READ]
        if se.timing:
            t_mark = si_now()
        add_postings(se, sg, sc, row_lo, j0, j1)
        if se.timing:
            t_now = si_now()
            sc.times[T_POSTINGS] += t_now - t_mark
            t_mark = t_now
        # Rows that may pass have their group norms prefetched, since the
        # scan reads those next.
        seed_size = 0
        # Read once per chunk and per candidate, not per row: other threads
        # write it, and a read of a line just written waits for it.
        other = si_load(shared)
        thr = threshold(sc.upper, n_upper, heap, n_found, k, other)
        bound_chunk(se, sg, sc, j0, j1)
        if n_groups or n_upper < k:
            for j in range(j0, j1):
                lb = bounds[j - j0]
                if lb <= thr and lb != INFINITY:
                    prefetch_row(sg.x_group_root + j * n_groups, n_groups)
                    if n_upper < k:
                        seed.value = lb
                        seed.tag = j
                        heap_offer(sc.seed, &seed_size, k, &seed)
        if se.timing:
            t_now = si_now()
            sc.times[T_BOUNDS] += t_now - t_mark
            t_mark = t_now
            exact_before = sc.times[T_EXACT]
        # The seeds first, then every row of the chunk.
        for t in range(seed_size + (j1 - j0)):
            if t < seed_size:
                j = sc.seed[t].tag
            else:
                j = j0 + t - seed_size
            lb = bounds[j - j0]
            thr = threshold(sc.upper, n_upper, heap, n_found, k, other)
            # Masked and already-seen rows carry an infinite bound, which an
            # infinite threshold would not reject.
            if lb > thr or lb == INFINITY:
                continue
            bounds[j - j0] = INFINITY  # a seed is not looked at twice
            if not read_row(se, sg, segment, sc, j, thr, &lo, &up):
                continue
            if count == sc.cap:
                # Exact values only for the few rows left at the end; a
                # full list first drops what the threshold now excludes,
                # and rows that still fill it (ties) are settled at once.
                count = keep_within(sc.cand_rows, sc.cand_lows, count, thr)
                if count == sc.cap:
                    _settle(se, sg, segment, i, sc, count, thr, heap, &n_found)
                    count = 0
            sc.cand_rows[count] = j
            sc.cand_lows[count] = lo
            count = count + 1
            heap_offer(sc.upper, &n_upper, k, &up)
            other = si_load(shared)
            if n_upper == k and sc.upper[0] < other:
                si_lower(shared, sc.upper[0])
                other = sc.upper[0]
        if sc.counts[C_READ] > read_before:
            sc.counts[C_CHUNKS_SCORED] += 1
        if se.timing:
            # Exact values settled in the loop count as exact, not scoring.
            sc.times[T_SCORING] += (si_now() - t_mark) - (sc.times[T_EXACT] - exact_before)
        j0 = j1

    _settle(se, sg, segment, i, sc, count,
            threshold(sc.upper, n_upper, heap, n_found, k, si_load(shared)), heap, &n_found)
    finish_unit(se, sg, sc, i, heap, n_found)
