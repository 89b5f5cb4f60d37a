"""The unit of the inverted-file search at p = inf, for k-NN and radius
searches alike: S_inf(q, x) = max_c |q_c - x_c| (no weights) has no
identity over shared columns, but the dense columns alone bound it from
below, max over c in H of |q_c - x_c| <= S_inf(q, x). That bound is read
for every row, from the dense block only (no posting list), and the rows
it cannot rule out get their exact value at once.

Private: called by _inverted_search.search_segments only, through the
pointer it takes per call.
"""
from libc.math cimport fabs, INFINITY
from libc.stdint cimport int64_t

from .._typedefs cimport float32_t, float64_t, node_t, offset_t
from ._heap cimport Found, Tagged, heap_offer
from ._inverted_common cimport value_max
from ._search_common cimport (
    C_BOUNDED, C_CHUNKS, C_CHUNKS_SCORED, C_EXACT, C_READ, MAX_ALLOWANCE, T_BOUNDS, T_EXACT,
    Scratch, Search, SegmentView, append_result, candidate_ok, finish_unit, note_bad,
    set_query_dense, si_load, si_lower, si_now, threshold, touch_pair, within_radius,
)


cdef float64_t _exact_max(const Search* se, const SegmentView* sg, const Scratch* sc,
                          Py_ssize_t i, Py_ssize_t j) noexcept nogil:
    """S_inf of query i and row j (sum_s eta_s S_inf over several roots),
    row j's features rebuilt from its measure: the largest |q_c - x_c| over
    the edges of either, with no rounding at all."""
    cdef Py_ssize_t s
    cdef offset_t a, a_end, t, n_touched
    cdef node_t c
    cdef offset_t row_stamp
    cdef float64_t part, d, total = 0.0
    for s in range(se.n_sel):
        a = se.q_indptr[s * se.n_q + i]
        a_end = se.q_indptr[s * se.n_q + i + 1]
        n_touched = touch_pair(se, sg, sc, s, i, j)
        row_stamp = sc.f_last[0]
        part = 0.0
        for t in range(n_touched):
            c = sc.f_touched[t]
            d = fabs(sc.f_query[c] - sc.f_acc[c])
            if d > part:
                part = d
        for t in range(a, a_end):
            c = se.q_indices[t]
            if sc.f_stamp[c] != row_stamp and se.q_data[t] > part:
                part = se.q_data[t]
            sc.f_query[c] = 0.0
        # In the order of the scan this replaces: the same value, bit for bit.
        total = part if se.single else total + se.eta[s] * part
    return total


cdef float64_t _bound_max(const Search* se, const SegmentView* sg, const Scratch* sc,
                          Py_ssize_t j) noexcept nogil:
    """A lower bound of S_inf (sliced: of sum_s eta_s S_inf) for row j from
    its dense columns; inf for a row not to be returned, -1 for a row with
    a dense value outside [0, 1] (or NaN)."""
    cdef Py_ssize_t s, r, h
    cdef float64_t part, d, v, total = 0.0, top = value_max()
    cdef const float32_t* row = sg.dense + j * sg.n_dense
    if not sg.mask[j]:
        return INFINITY
    for s in range(se.n_sel):
        r = se.positions[s]
        part = 0.0
        for h in range(sg.dense_ptr[r], sg.dense_ptr[r + 1]):
            v = row[h]
            if not (v >= 0.0 and v <= top):
                return -1.0
            d = fabs(sc.qh[h] - v)
            if d > part:
                part = d
        part = part - MAX_ALLOWANCE
        if part > 0.0:
            total = part if se.single else total + se.eta[s] * part
    return total


cdef inline void _offer(const Search* se, Scratch* sc, Py_ssize_t i, Found* heap,
                        Py_ssize_t* n_found, const Found* item) noexcept nogil:
    """Offer an exact result of query i to the unit's k best, or without a
    limit to the thread's list; in a radius search only one within the
    query's radius."""
    if not within_radius(se, i, item.value):
        return
    if se.grow:
        append_result(sc, i, item)
    else:
        heap_offer(heap, n_found, se.k, item)


cdef void max_unit(const Search* se, const SegmentView* sg, Py_ssize_t segment, Py_ssize_t i,
                   Py_ssize_t row_lo, Py_ssize_t row_hi, Scratch* sc, Found* heap,
                   float64_t* shared) noexcept nogil:
    """The k best rows of sg[row_lo:row_hi] for query i at p = inf into
    ``heap`` (or, without a limit, every row within its radius to the
    thread's list): every row's dense bound, chunk by chunk; while the
    unit's top k is not full the rows of smallest bound go first; rows
    whose bound is within the k-th exact value get theirs."""
    cdef Py_ssize_t k = se.k
    cdef Py_ssize_t t, j, j0, j1, seed_size
    cdef Py_ssize_t n_found = 0
    cdef int64_t exact_before
    cdef float64_t lb, thr, other, t_mark = 0.0, t_now
    cdef float64_t* bounds = sc.bounds
    cdef Tagged seed
    cdef Found item
    set_query_dense(se, sg, sc, i, False)
    j0 = row_lo
    while j0 < row_hi:
        j1 = min(j0 + se.chunk, row_hi)
        seed_size = 0
        sc.counts[C_CHUNKS] += 1
        exact_before = sc.counts[C_EXACT]
        if se.timing:
            t_mark = si_now()
        # Read once per chunk and per exact value, not per row: other
        # threads write it.
        other = si_load(shared)
        for j in range(j0, j1):
            lb = _bound_max(se, sg, sc, j)
            if lb < 0.0:
                note_bad(sc, segment, j, True)
                lb = INFINITY
            bounds[j - j0] = lb
            if lb != INFINITY:
                sc.counts[C_READ] += 1
                sc.counts[C_BOUNDED] += 1
                if n_found < k:
                    seed.value = lb
                    seed.tag = j
                    heap_offer(sc.seed, &seed_size, k, &seed)
        if se.timing:
            t_now = si_now()
            sc.times[T_BOUNDS] += t_now - t_mark
            t_mark = t_now
        for t in range(seed_size + (j1 - j0)):
            if t < seed_size:
                j = sc.seed[t].tag
            else:
                j = j0 + t - seed_size
            lb = bounds[j - j0]
            thr = threshold(NULL, 0, heap, n_found, k, other)
            # Masked and already-seen rows carry an infinite bound, which an
            # infinite threshold would not reject.
            if lb > thr or lb == INFINITY:
                continue
            bounds[j - j0] = INFINITY
            if not candidate_ok(sg, segment, sc, j):
                continue
            sc.counts[C_EXACT] += 1
            item.value = _exact_max(se, sg, sc, i, j)
            item.doc = sg.doc_ids[j]
            item.segment = segment
            item.row = j
            _offer(se, sc, i, heap, &n_found, &item)
            other = si_load(shared)
            if k > 0 and n_found == k and heap[0].value < other:
                si_lower(shared, heap[0].value)
                other = heap[0].value
        if sc.counts[C_EXACT] > exact_before:
            sc.counts[C_CHUNKS_SCORED] += 1
        if se.timing:
            sc.times[T_EXACT] += si_now() - t_mark
        j0 = j1
    finish_unit(se, sg, sc, i, heap, n_found)
