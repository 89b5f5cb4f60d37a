"""The radius unit of the inverted-file search at a finite p, without a
limit: every row of one row range within one query's radius, appended to
the thread's list of results (see _inverted_search for the bounds).

Private: called by _inverted_search.search_segments only, through the
pointer it takes per call. The threshold is the query's radius throughout
(there is no k-th value to lower it), so no row goes first and every
candidate is within it until its exact value says otherwise. A radius
search with a limit is a k-NN search (_search_knn).
"""
from libc.math cimport INFINITY
from libc.stdint cimport int64_t

from .._typedefs cimport float64_t
from ._heap cimport Found
from ._search_bounds cimport bound_chunk, exact_result, prefetch_row, read_row
from ._search_common cimport (
    C_CHUNKS, C_CHUNKS_SCORED, C_READ, T_BOUNDS, T_EXACT, T_POSTINGS, T_SCORING, Scratch, Search,
    SegmentView, append_result, finish_unit, si_now,
)
from ._search_postings cimport add_postings, chunk_end, start_query


cdef void _settle(const Search* se, const SegmentView* sg, Py_ssize_t segment, Py_ssize_t i,
                  Scratch* sc, Py_ssize_t count) noexcept nogil:
    """Exact values of the candidates; those within the query's radius go
    to the thread's list."""
    cdef Py_ssize_t t
    cdef Found item
    cdef float64_t radius = se.bound[i]
    cdef float64_t started = si_now() if se.timing else 0.0
    for t in range(count):
        # (NaN fails the comparison.)
        if exact_result(se, sg, segment, i, sc, sc.cand_rows[t], &item) \
                and item.value <= radius:
            append_result(sc, i, &item)
    if se.timing:
        sc.times[T_EXACT] += si_now() - started


cdef void radius_unit(const Search* se, const SegmentView* sg, Py_ssize_t segment, Py_ssize_t i,
                      Py_ssize_t row_lo, Py_ssize_t row_hi, Scratch* sc, Found* heap,
                      float64_t* shared) noexcept nogil:
    """Every row of sg[row_lo:row_hi] within query i's radius, to the
    thread's list: chunk by chunk the posting lists, the cheapest bound of
    every row, and for the rows within the radius their value from the
    identity; candidates whose lower value is within it get their exact
    value, in batches of the candidate list's size (their lower values
    are not kept: the radius does not change)."""
    cdef Py_ssize_t n_groups = sg.n_groups
    cdef Py_ssize_t j, j0, j1, count = 0
    cdef int64_t read_before
    cdef float64_t lb, lo, up
    cdef float64_t thr = se.bound[i]
    cdef float64_t t_mark = 0.0, t_now, exact_before = 0.0
    cdef float64_t* bounds = sc.bounds

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
        bound_chunk(se, sg, sc, j0, j1)
        if n_groups:
            # The scan reads the group norms of the rows that may pass next.
            for j in range(j0, j1):
                lb = bounds[j - j0]
                if lb <= thr and lb != INFINITY:
                    prefetch_row(sg.x_group_root + j * n_groups, n_groups)
        if se.timing:
            t_now = si_now()
            sc.times[T_BOUNDS] += t_now - t_mark
            t_mark = t_now
            exact_before = sc.times[T_EXACT]
        for j in range(j0, j1):
            lb = bounds[j - j0]
            # Masked rows carry an infinite bound, which an infinite radius
            # would not reject.
            if lb > thr or lb == INFINITY:
                continue
            if not read_row(se, sg, segment, sc, j, thr, &lo, &up):
                continue
            if count == sc.cap:
                _settle(se, sg, segment, i, sc, count)
                count = 0
            sc.cand_rows[count] = j
            count = count + 1
        if sc.counts[C_READ] > read_before:
            sc.counts[C_CHUNKS_SCORED] += 1
        if se.timing:
            # Exact values settled in the loop count as exact, not scoring.
            sc.times[T_SCORING] += (si_now() - t_mark) - (sc.times[T_EXACT] - exact_before)
        j0 = j1

    _settle(se, sg, segment, i, sc, count)
    finish_unit(se, sg, sc, i, heap, 0)
