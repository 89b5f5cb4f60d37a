# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Exact top-k search for finite p through an inverted file over edges.

Private: ``inverted.py`` checks every array (most come from files) before
calling in here, so these loops trust their inputs.

For one root with edge weights w, a query q and a stored row x (raw edge
masses), S_p^p(q, x) = sum_c w_c |q_c - x_c|^p. The columns of a segment
are split in two:

* posted columns L keep their nonzeros as posting lists (rows ascending).
  Over L only the columns shared by q and x need reading:
      D_L = |q|_L + |x|_L - sum_{c in L, q_c > 0, x_c > 0} w_c g(q_c, x_c),
      g(a, b) = a^p + b^p - |a - b|^p   (2 min(a, b) for p = 1, 2ab for p = 2),
  where |y|_L = sum_{c in L} w_c y_c^p. A query reads the postings of its
  own columns only, and deep edges are in few rows.
* dense columns H are the few columns present in most rows (edges near a
  root); as postings they would be most of the work. They are kept as a
  dense row-major block, and the reverse Minkowski inequality bounds their
  part from below without reading it:
      D_H >= | |q|_H^(1/p) - |x|_H^(1/p) |^p,
  so the block is read only for rows whose bound can still reach the top k.

D_L cancels terms as large as the norms, so each value carries an error
allowance ERR_RTOL * (|q| + |x|). A row becomes a candidate when its lower
value (D - allowance) is at most the k-th smallest upper value (D +
allowance) of its row range. The caller recomputes candidates exactly with
:func:`pair_powers`, so results are exact.
"""
from cython.parallel cimport prange, threadid
from libc.math cimport fabs, pow, sqrt, INFINITY
from libc.stdint cimport int32_t, int64_t, uint8_t
from libc.stdlib cimport free, malloc
from libc.string cimport memset

import numpy as np

from ._powers cimport abs_pow
from ._typedefs cimport float64_t, node_t, offset_t
from ._features import SERIAL_BELOW, effective_threads

# Far above the rounding error of a sum of a few thousand terms (about
# 1e-13 of the summed magnitudes), and far below any gap between distances
# that matters; it only widens the candidate set, never the result.
cdef float64_t ERR_RTOL = 1e-11


cdef inline int _kind(float64_t p) noexcept nogil:
    if p == 1.0:
        return 0
    if p == 2.0:
        return 1
    return 2




cdef inline float64_t _root(float64_t x, float64_t p, int kind) noexcept nogil:
    """x^(1/p) for x >= 0."""
    if kind == 0:
        return x
    if kind == 1:
        return sqrt(x)
    return pow(x, 1.0 / p)


def build_inverted(
    const offset_t[::1] indptr, const node_t[::1] indices, const float64_t[::1] data,
    Py_ssize_t n_cols, const node_t[::1] dense_columns,
):
    """Postings of one root's rows for every column not in ``dense_columns``,
    and the dense block (rows x len(dense_columns)) of the others.

    Returns (ptr, rows, values, dense): column c's postings are
    rows[ptr[c]:ptr[c+1]] (ascending) with their values; dense columns have
    empty posting lists.
    """
    cdef Py_ssize_t n = indptr.shape[0] - 1, n_dense = dense_columns.shape[0]
    cdef Py_ssize_t i, c
    cdef offset_t k, at
    cdef int32_t h
    slot_arr = np.full(max(n_cols, 1), -1, dtype=np.int32)
    counts_arr = np.zeros(n_cols + 1, dtype=np.int64)
    cdef int32_t[::1] slot = slot_arr
    cdef int64_t[::1] counts = counts_arr
    for h in range(n_dense):
        slot[dense_columns[h]] = h
    for k in range(indices.shape[0]):
        if slot[indices[k]] < 0:
            counts[indices[k] + 1] += 1
    ptr_arr = np.cumsum(counts_arr)
    cdef int64_t[::1] ptr = ptr_arr
    cdef offset_t n_posted = ptr[n_cols]
    rows_arr = np.empty(n_posted, dtype=np.int32)
    values_arr = np.empty(n_posted, dtype=np.float64)
    dense_arr = np.zeros((n, n_dense), dtype=np.float64)
    cursor_arr = ptr_arr[:n_cols].copy() if n_cols else np.zeros(1, dtype=np.int64)
    cdef int32_t[::1] rows = rows_arr
    cdef float64_t[::1] values = values_arr
    cdef float64_t[:, ::1] dense = dense_arr
    cdef int64_t[::1] cursor = cursor_arr
    with nogil:
        for i in range(n):
            for k in range(indptr[i], indptr[i + 1]):
                c = indices[k]
                h = slot[c]
                if h >= 0:
                    dense[i, h] = data[k]
                else:
                    at = cursor[c]
                    rows[at] = <int32_t> i
                    values[at] = data[k]
                    cursor[c] = at + 1
    return ptr_arr, rows_arr, values_arr, dense_arr


def split_power_sums(
    const offset_t[::1] indptr, const node_t[::1] indices, const float64_t[::1] data,
    const float64_t[::1] weight, const int32_t[::1] col_slot, float64_t p,
    float64_t[::1] low, float64_t[::1] high, float64_t[::1] high_root,
):
    """Per row: sum_c w_c x_c^p over posted columns (``low``) and dense
    columns (``high``), and high^(1/p) (``high_root``)."""
    cdef Py_ssize_t n = indptr.shape[0] - 1, i
    cdef offset_t k
    cdef int kind = _kind(p)
    cdef float64_t lo, hi, term
    cdef int n_workers = 1 if data.shape[0] < SERIAL_BELOW else effective_threads(None)
    for i in prange(n, nogil=True, schedule="static", chunksize=1024, num_threads=n_workers):
        lo = 0.0
        hi = 0.0
        for k in range(indptr[i], indptr[i + 1]):
            term = weight[indices[k]] * abs_pow(data[k], p, kind)
            if col_slot[indices[k]] >= 0:
                hi = hi + term
            else:
                lo = lo + term
        low[i] = lo
        high[i] = hi
        high_root[i] = _root(hi, p, kind)


cdef inline Py_ssize_t _first_at_least(
    const int32_t* rows, Py_ssize_t start, Py_ssize_t end, int32_t value,
) noexcept nogil:
    """First position in rows[start:end] (ascending) holding >= value."""
    cdef Py_ssize_t mid
    while start < end:
        mid = start + (end - start) // 2
        if rows[mid] < value:
            start = mid + 1
        else:
            end = mid
    return start


cdef inline void _heap_offer(float64_t* heap, int64_t* tags, Py_ssize_t* size, Py_ssize_t k,
                             float64_t value, int64_t tag) noexcept nogil:
    """Keep the k smallest values offered so far (with their tags, if
    ``tags`` is not NULL); heap[0] is the largest of them."""
    cdef Py_ssize_t i, parent, child
    if size[0] < k:
        i = size[0]
        size[0] += 1
        while i > 0:
            parent = (i - 1) // 2
            if heap[parent] >= value:
                break
            heap[i] = heap[parent]
            if tags != NULL:
                tags[i] = tags[parent]
            i = parent
        heap[i] = value
        if tags != NULL:
            tags[i] = tag
        return
    if value >= heap[0]:
        return
    i = 0
    while True:
        child = 2 * i + 1
        if child >= k:
            break
        if child + 1 < k and heap[child + 1] > heap[child]:
            child += 1
        if value >= heap[child]:
            break
        heap[i] = heap[child]
        if tags != NULL:
            tags[i] = tags[child]
        i = child
    heap[i] = value
    if tags != NULL:
        tags[i] = tag


cdef inline float64_t _threshold(const float64_t* heap, Py_ssize_t size, Py_ssize_t k,
                                 float64_t limit) noexcept nogil:
    if size == k and heap[0] < limit:
        return heap[0]
    return limit


cdef Py_ssize_t _keep_within(int64_t* rows, float64_t* lows, Py_ssize_t count,
                             float64_t threshold) noexcept nogil:
    """Drop candidates whose lower value exceeds ``threshold``; new count."""
    cdef Py_ssize_t t, kept = 0
    for t in range(count):
        if lows[t] <= threshold:
            rows[kept] = rows[t]
            lows[kept] = lows[t]
            kept += 1
    return kept


cdef struct Stored:
    # A segment's per-row arrays for one p; see search() for their layout.
    Py_ssize_t n_rows, n_sel, n_dense, n_groups
    int kind
    bint single
    float64_t p
    const int64_t* positions
    const float64_t* eta
    const float64_t* x_low
    const float64_t* x_high
    const float64_t* x_high_root
    const float64_t* x_group_root
    const int64_t* group_ptr
    const int64_t* root_groups
    const float64_t* dense
    const offset_t* dense_ptr
    const float64_t* dense_weight


cdef struct Query:
    # One query's state within one row chunk.
    const float64_t* acc
    Py_ssize_t chunk, j0
    const float64_t* norms
    const float64_t* qh
    const float64_t* qg_root


cdef inline float64_t _combine(const Stored* st, Py_ssize_t s, float64_t total,
                               float64_t part) noexcept nogil:
    """Add root s's p-th power ``part`` to a total in the caller's units."""
    if part < 0.0:
        part = 0.0
    if st.single:
        return total + part
    return total + st.eta[s] * _root(part, st.p, st.kind)


cdef inline float64_t _low_part(const Stored* st, const Query* q, Py_ssize_t s,
                                Py_ssize_t j, float64_t* err) noexcept nogil:
    """D_L of root s for row j, and the allowance of the row's value."""
    cdef Py_ssize_t at = st.positions[s] * st.n_rows + j
    err[0] = ERR_RTOL * (q.norms[4 * s + 3] + st.x_low[at] + st.x_high[at])
    return q.norms[4 * s] + st.x_low[at] - q.acc[s * q.chunk + j - q.j0]


cdef float64_t _bound_norm(const Stored* st, const Query* q, Py_ssize_t j) noexcept nogil:
    """Lower bound from the dense part's whole norm."""
    cdef Py_ssize_t s
    cdef float64_t total = 0.0, err, d_low
    for s in range(st.n_sel):
        d_low = _low_part(st, q, s, j, &err)
        total = _combine(st, s, total, d_low - err + abs_pow(
            q.norms[4 * s + 2] - st.x_high_root[st.positions[s] * st.n_rows + j],
            st.p, st.kind))
    return total


cdef float64_t _bound_groups(const Stored* st, const Query* q, Py_ssize_t j) noexcept nogil:
    """Lower bound from the norms of groups of dense columns: tighter."""
    cdef Py_ssize_t s, r, g
    cdef float64_t total = 0.0, err, part
    cdef const float64_t* row = st.x_group_root + j * st.n_groups
    for s in range(st.n_sel):
        r = st.positions[s]
        part = _low_part(st, q, s, j, &err) - err
        for g in range(st.root_groups[r], st.root_groups[r + 1]):
            part = part + abs_pow(q.qg_root[g] - row[g], st.p, st.kind)
        total = _combine(st, s, total, part)
    return total


cdef void _value(const Stored* st, const Query* q, Py_ssize_t j,
                 float64_t* lower, float64_t* upper) noexcept nogil:
    """The row's value, widened by its allowance both ways."""
    cdef Py_ssize_t s, r, h
    cdef float64_t err, d, lo = 0.0, up = 0.0
    cdef const float64_t* row = st.dense + j * st.n_dense
    for s in range(st.n_sel):
        r = st.positions[s]
        d = _low_part(st, q, s, j, &err)
        if st.kind == 0:
            for h in range(st.dense_ptr[r], st.dense_ptr[r + 1]):
                d = d + st.dense_weight[h] * fabs(q.qh[h] - row[h])
        elif st.kind == 1:
            for h in range(st.dense_ptr[r], st.dense_ptr[r + 1]):
                d = d + st.dense_weight[h] * (q.qh[h] - row[h]) * (q.qh[h] - row[h])
        else:
            for h in range(st.dense_ptr[r], st.dense_ptr[r + 1]):
                d = d + st.dense_weight[h] * pow(fabs(q.qh[h] - row[h]), st.p)
        lo = _combine(st, s, lo, d - err)
        up = _combine(st, s, up, d + err)
    lower[0] = lo
    upper[0] = up


def search(
    const offset_t[::1] q_indptr, const node_t[::1] q_indices, const float64_t[::1] q_data,
    Py_ssize_t n_q,
    const offset_t[::1] ptr, const int32_t[::1] post_rows, const float64_t[::1] post_values,
    const int32_t[::1] col_slot, const float64_t[::1] weight,
    const float64_t[:, ::1] dense, const offset_t[::1] dense_ptr, const float64_t[::1] dense_weight,
    const int64_t[::1] group_ptr, const int64_t[::1] root_groups,
    const float64_t[:, ::1] x_low, const float64_t[:, ::1] x_high,
    const float64_t[:, ::1] x_high_root, const float64_t[:, ::1] x_group_root,
    const int64_t[::1] positions, const float64_t[::1] eta,
    const uint8_t[::1] mask, const float64_t[::1] limit,
    Py_ssize_t k, float64_t p, Py_ssize_t n_ranges, Py_ssize_t chunk,
    int64_t[:, :, ::1] cand_rows, int64_t[:, ::1] cand_count, n_threads=None,
):
    """Candidate rows for the k nearest stored rows of each query.

    Queries are CSR rows of raw edge masses, one block of ``n_q`` rows per
    selected root (``positions[s]`` indexes the per-root arrays: column c of
    root r is slot r * n_cols + c; ``x_*[r, j]`` are row j's norms). Dense
    slots of root r are dense_ptr[r]:dense_ptr[r+1], cut into groups
    group_ptr[g]:group_ptr[g+1] for g in root_groups[r]:root_groups[r+1];
    ``x_group_root[j, g]`` is row j's group norm to the power 1/p.

    Rows are split into ``n_ranges`` equal ranges; for query i and range g
    the rows that may belong to the top k go to
    ``cand_rows[i, g, :cand_count[i, g]]``, or cand_count[i, g] = -1 when
    more than ``cand_rows.shape[2]`` tie (the caller then takes every
    masked row of the range).

    One selected root compares p-th powers; several compare the combined
    sum_s eta_s S_p, like the caller's exact distances. ``limit[i]`` is the
    caller's current k-th value for query i (inf if none): rows above it are
    never candidates.
    """
    cdef Stored st
    cdef Py_ssize_t n_rows = mask.shape[0]
    cdef Py_ssize_t n_sel = positions.shape[0]
    cdef Py_ssize_t n_cols = col_slot.shape[0] // x_low.shape[0]
    cdef Py_ssize_t n_dense = dense_weight.shape[0]
    cdef Py_ssize_t n_groups = x_group_root.shape[1]
    cdef Py_ssize_t cap = cand_rows.shape[2]
    cdef int kind = _kind(p)
    cdef int n_workers = effective_threads(n_threads)
    cdef Py_ssize_t i, s, t
    if n_q == 0 or n_rows == 0:
        return

    max_entries = 1
    for i in range(n_q):
        t = 0
        for s in range(n_sel):
            t += q_indptr[s * n_q + i + 1] - q_indptr[s * n_q + i]
        max_entries = max(max_entries, t)
    if n_q * n_ranges < 2 or ptr[ptr.shape[0] - 1] < SERIAL_BELOW:
        n_workers = 1
    acc_arr = np.zeros((n_workers, n_sel * chunk), dtype=np.float64)
    bounds_arr = np.zeros((n_workers, chunk), dtype=np.float64)
    heap_arr = np.zeros((n_workers, k), dtype=np.float64)
    seed_val_arr = np.zeros((n_workers, k), dtype=np.float64)
    seed_row_arr = np.zeros((n_workers, k), dtype=np.int64)
    qh_arr = np.zeros((n_workers, max(n_dense, 1)), dtype=np.float64)
    qg_arr = np.zeros((n_workers, max(n_groups, 1)), dtype=np.float64)
    # Per selected root: |q|_L, |q|_H, |q|_H^(1/p), |q|_L + |q|_H.
    qnorm_arr = np.zeros((n_workers, 4 * n_sel), dtype=np.float64)
    cursor_arr = np.zeros((n_workers, max_entries), dtype=np.int64)
    lows_arr = np.zeros((n_workers, cap), dtype=np.float64)
    cdef float64_t[:, ::1] acc_v = acc_arr
    cdef float64_t[:, ::1] bounds_v = bounds_arr
    cdef float64_t[:, ::1] heap_v = heap_arr
    cdef float64_t[:, ::1] seed_val_v = seed_val_arr
    cdef int64_t[:, ::1] seed_row_v = seed_row_arr
    cdef float64_t[:, ::1] qh_v = qh_arr
    cdef float64_t[:, ::1] qg_v = qg_arr
    cdef float64_t[:, ::1] qnorm_v = qnorm_arr
    cdef int64_t[:, ::1] cursor_v = cursor_arr
    cdef float64_t[:, ::1] lows_v = lows_arr
    q_indices_arr = np.asarray(q_indices) if q_indices.shape[0] else np.zeros(1, np.int32)
    q_data_arr = np.asarray(q_data) if q_data.shape[0] else np.zeros(1, np.float64)
    rows_arr = np.asarray(post_rows) if post_rows.shape[0] else np.zeros(1, np.int32)
    values_arr = np.asarray(post_values) if post_values.shape[0] else np.zeros(1, np.float64)
    cdef const node_t[::1] qi_v = q_indices_arr
    cdef const float64_t[::1] qd_v = q_data_arr
    cdef const int32_t[::1] pr_v = rows_arr
    cdef const float64_t[::1] pv_v = values_arr
    dense_arr = np.asarray(dense) if dense.shape[1] else np.zeros((n_rows, 1))
    groups_arr = np.asarray(x_group_root) if n_groups else np.zeros((n_rows, 1))
    dense_weight_arr = np.asarray(dense_weight) if n_dense else np.zeros(1)
    cdef const float64_t[:, ::1] dense_v = dense_arr
    cdef const float64_t[:, ::1] groups_v = groups_arr
    cdef const float64_t[::1] dense_weight_v = dense_weight_arr

    st.n_rows = n_rows
    st.n_sel = n_sel
    st.n_dense = n_dense
    st.n_groups = n_groups
    st.kind = kind
    st.single = n_sel == 1
    st.p = p
    st.positions = &positions[0]
    st.eta = &eta[0]
    st.x_low = &x_low[0, 0]
    st.x_high = &x_high[0, 0]
    st.x_high_root = &x_high_root[0, 0]
    st.x_group_root = &groups_v[0, 0]
    st.group_ptr = &group_ptr[0]
    st.root_groups = &root_groups[0]
    st.dense = &dense_v[0, 0]
    st.dense_ptr = &dense_ptr[0]
    st.dense_weight = &dense_weight_v[0]

    # One Query per thread: a struct assigned field by field is not made
    # thread-private by prange.
    cdef Query* queries = <Query*> malloc(n_workers * sizeof(Query))
    if queries == NULL:
        raise MemoryError()
    try:
        _search_units(&st, queries, q_indptr, qi_v, qd_v, n_q, ptr, pr_v, pv_v, col_slot, weight,
                      dense_weight_v, group_ptr, root_groups, positions, mask, limit, k, p,
                      n_ranges, chunk, cand_rows, cand_count, n_workers, n_cols,
                      acc_v, bounds_v, heap_v, seed_val_v, seed_row_v, qh_v, qg_v, qnorm_v,
                      cursor_v, lows_v)
    finally:
        free(queries)


cdef void _search_units(
    const Stored* st_ptr, Query* queries,
    const offset_t[::1] q_indptr, const node_t[::1] qi_v, const float64_t[::1] qd_v,
    Py_ssize_t n_q, const offset_t[::1] ptr, const int32_t[::1] pr_v,
    const float64_t[::1] pv_v, const int32_t[::1] col_slot, const float64_t[::1] weight,
    const float64_t[::1] dense_weight_v, const int64_t[::1] group_ptr,
    const int64_t[::1] root_groups, const int64_t[::1] positions, const uint8_t[::1] mask,
    const float64_t[::1] limit, Py_ssize_t k, float64_t p, Py_ssize_t n_ranges,
    Py_ssize_t chunk, int64_t[:, :, ::1] cand_rows, int64_t[:, ::1] cand_count,
    int n_workers, Py_ssize_t n_cols,
    float64_t[:, ::1] acc_v, float64_t[:, ::1] bounds_v, float64_t[:, ::1] heap_v,
    float64_t[:, ::1] seed_val_v, int64_t[:, ::1] seed_row_v, float64_t[:, ::1] qh_v,
    float64_t[:, ::1] qg_v, float64_t[:, ::1] qnorm_v, int64_t[:, ::1] cursor_v,
    float64_t[:, ::1] lows_v,
) noexcept nogil:
    cdef Py_ssize_t n_rows = mask.shape[0]
    cdef Py_ssize_t n_sel = positions.shape[0]
    cdef Py_ssize_t n_groups = st_ptr.n_groups
    cdef Py_ssize_t cap = cand_rows.shape[2]
    cdef int kind = st_ptr.kind
    cdef Py_ssize_t unit, i, g, s, t, j, j0, j1, row_lo, row_hi, h, count, heap_size
    cdef Py_ssize_t seed_size, q_entry, r, gg
    cdef offset_t e, e_end, slot
    cdef int tid
    cdef bint overflow
    cdef float64_t v, c, x, lb, up, lo, thr
    cdef float64_t* acc
    cdef float64_t* bounds
    cdef float64_t* heap
    cdef float64_t* seed_val
    cdef int64_t* seed_row
    cdef float64_t* qh
    cdef float64_t* qg
    cdef float64_t* qnorm
    cdef int64_t* cursor
    cdef float64_t* lows
    cdef Query* qu
    for unit in prange(n_q * n_ranges, num_threads=n_workers, schedule="dynamic"):
        tid = threadid()
        i = unit // n_ranges
        g = unit % n_ranges
        row_lo = g * n_rows // n_ranges
        row_hi = (g + 1) * n_rows // n_ranges
        acc = &acc_v[tid, 0]
        bounds = &bounds_v[tid, 0]
        heap = &heap_v[tid, 0]
        seed_val = &seed_val_v[tid, 0]
        seed_row = &seed_row_v[tid, 0]
        qh = &qh_v[tid, 0]
        qg = &qg_v[tid, 0]
        qnorm = &qnorm_v[tid, 0]
        cursor = &cursor_v[tid, 0]
        lows = &lows_v[tid, 0]
        qu = &queries[tid]
        qu.acc = acc
        qu.chunk = chunk
        qu.norms = qnorm
        qu.qh = qh
        qu.qg_root = qg
        heap_size = 0
        count = 0
        overflow = False

        # The query's norms, its dense values and group norms, and where each
        # of its posting lists enters this row range.
        q_entry = 0
        for s in range(n_sel):
            r = positions[s]
            qnorm[4 * s] = 0.0
            qnorm[4 * s + 1] = 0.0
            for t in range(q_indptr[s * n_q + i], q_indptr[s * n_q + i + 1]):
                slot = r * n_cols + qi_v[t]
                h = col_slot[slot]
                if h >= 0:
                    qh[h] = qd_v[t]
                else:
                    qnorm[4 * s] += weight[slot] * abs_pow(qd_v[t], p, kind)
                    if row_lo == 0:
                        cursor[q_entry] = ptr[slot]
                    else:
                        cursor[q_entry] = _first_at_least(&pr_v[0], ptr[slot], ptr[slot + 1],
                                                          <int32_t> row_lo)
                q_entry = q_entry + 1
            for gg in range(root_groups[r], root_groups[r + 1]):
                v = 0.0
                for h in range(group_ptr[gg], group_ptr[gg + 1]):
                    v = v + dense_weight_v[h] * abs_pow(qh[h], p, kind)
                qg[gg] = _root(v, p, kind)
                qnorm[4 * s + 1] += v
            qnorm[4 * s + 2] = _root(qnorm[4 * s + 1], p, kind)
            qnorm[4 * s + 3] = qnorm[4 * s] + qnorm[4 * s + 1]

        j0 = row_lo
        while j0 < row_hi and not overflow:
            j1 = j0 + chunk
            if j1 > row_hi:
                j1 = row_hi
            qu.j0 = j0
            # Shared posted columns: acc holds sum w g(q_c, x_c) per row.
            q_entry = 0
            for s in range(n_sel):
                r = positions[s]
                memset(&acc[s * chunk], 0, (j1 - j0) * sizeof(float64_t))
                for t in range(q_indptr[s * n_q + i], q_indptr[s * n_q + i + 1]):
                    slot = r * n_cols + qi_v[t]
                    if col_slot[slot] < 0:
                        v = qd_v[t]
                        e = cursor[q_entry]
                        e_end = ptr[slot + 1]
                        if kind == 0:
                            c = 2.0 * weight[slot]
                            while e < e_end and pr_v[e] < j1:
                                x = pv_v[e]
                                acc[s * chunk + pr_v[e] - j0] += c * (v if v < x else x)
                                e = e + 1
                        elif kind == 1:
                            c = 2.0 * weight[slot] * v
                            while e < e_end and pr_v[e] < j1:
                                acc[s * chunk + pr_v[e] - j0] += c * pv_v[e]
                                e = e + 1
                        else:
                            c = pow(v, p)
                            while e < e_end and pr_v[e] < j1:
                                x = pv_v[e]
                                acc[s * chunk + pr_v[e] - j0] += weight[slot] * (
                                    c + pow(x, p) - pow(fabs(v - x), p))
                                e = e + 1
                        cursor[q_entry] = e
                    q_entry = q_entry + 1

            # The cheapest bound of every row; while the top k is not yet
            # full, the rows with the smallest bounds go first, so that the
            # threshold tightens before the scan.
            seed_size = 0
            for j in range(j0, j1):
                if mask[j]:
                    lb = _bound_norm(st_ptr, qu, j)
                    bounds[j - j0] = lb
                    if heap_size < k:
                        _heap_offer(seed_val, seed_row, &seed_size, k, lb, j)
                else:
                    bounds[j - j0] = INFINITY
            for t in range(seed_size + (j1 - j0)):
                if t < seed_size:
                    j = seed_row[t]
                else:
                    j = j0 + t - seed_size
                lb = bounds[j - j0]
                thr = _threshold(heap, heap_size, k, limit[i])
                # Masked and already-seen rows carry an infinite bound, which
                # an infinite threshold would not reject.
                if lb > thr or lb == INFINITY:
                    continue
                bounds[j - j0] = INFINITY  # a seed is not looked at twice
                if n_groups and _bound_groups(st_ptr, qu, j) > thr:
                    continue
                _value(st_ptr, qu, j, &lo, &up)
                if lo > thr:
                    continue
                if count == cap:
                    count = _keep_within(&cand_rows[i, g, 0], lows, count, thr)
                    if count == cap:
                        overflow = True
                        break
                cand_rows[i, g, count] = j
                lows[count] = lo
                count = count + 1
                _heap_offer(heap, NULL, &heap_size, k, up, 0)
            j0 = j1

        if overflow:
            cand_count[i, g] = -1
        else:
            cand_count[i, g] = _keep_within(&cand_rows[i, g, 0], lows, count,
                                            _threshold(heap, heap_size, k, limit[i]))
        for s in range(n_sel):
            r = positions[s]
            for t in range(q_indptr[s * n_q + i], q_indptr[s * n_q + i + 1]):
                h = col_slot[r * n_cols + qi_v[t]]
                if h >= 0:
                    qh[h] = 0.0


def pair_powers(
    const offset_t[::1] q_indptr, const node_t[::1] q_indices, const float64_t[::1] q_data,
    const offset_t[::1] x_indptr, const node_t[::1] x_indices, const float64_t[::1] x_data,
    const float64_t[::1] weight, const int64_t[::1] pair_query, const int64_t[::1] pair_row,
    float64_t p, float64_t[::1] out, n_threads=None,
):
    """out[t] = sum_c w_c |q_c - x_c|^p for query pair_query[t] and stored row
    pair_row[t], by merging their sorted columns: no cancellation."""
    cdef Py_ssize_t n_pairs = pair_query.shape[0], t
    cdef int kind = _kind(p)
    cdef int n_workers = effective_threads(n_threads)
    cdef offset_t a, a_end, b, b_end
    cdef float64_t s
    if n_pairs == 0:
        return
    if n_pairs * 256 < SERIAL_BELOW:
        n_workers = 1
    q_indices_arr = np.asarray(q_indices) if q_indices.shape[0] else np.zeros(1, np.int32)
    q_data_arr = np.asarray(q_data) if q_data.shape[0] else np.zeros(1, np.float64)
    x_indices_arr = np.asarray(x_indices) if x_indices.shape[0] else np.zeros(1, np.int32)
    x_data_arr = np.asarray(x_data) if x_data.shape[0] else np.zeros(1, np.float64)
    cdef const node_t[::1] qi = q_indices_arr
    cdef const float64_t[::1] qd = q_data_arr
    cdef const node_t[::1] xi = x_indices_arr
    cdef const float64_t[::1] xd = x_data_arr
    for t in prange(n_pairs, nogil=True, num_threads=n_workers, schedule="static"):
        a = q_indptr[pair_query[t]]
        a_end = q_indptr[pair_query[t] + 1]
        b = x_indptr[pair_row[t]]
        b_end = x_indptr[pair_row[t] + 1]
        s = 0.0
        while a < a_end or b < b_end:
            if b >= b_end or (a < a_end and qi[a] < xi[b]):
                s = s + weight[qi[a]] * abs_pow(qd[a], p, kind)
                a = a + 1
            elif a >= a_end or xi[b] < qi[a]:
                s = s + weight[xi[b]] * abs_pow(xd[b], p, kind)
                b = b + 1
            else:
                s = s + weight[qi[a]] * abs_pow(qd[a] - xd[b], p, kind)
                a = a + 1
                b = b + 1
        out[t] = s


def check_csr(const offset_t[::1] indptr, const node_t[::1] indices, Py_ssize_t n_values,
              Py_ssize_t n_cols):
    """Raise ValueError unless the arrays form a CSR matrix with n_cols
    columns and sorted, distinct column indices in each row."""
    cdef Py_ssize_t n = indptr.shape[0] - 1, i
    cdef offset_t k
    cdef Py_ssize_t bad_row = -1
    if n < 0 or indptr[0] != 0 or indptr[n] != indices.shape[0] or n_values != indices.shape[0]:
        raise ValueError("row pointers do not match the stored values")
    with nogil:
        for i in range(n):
            if indptr[i + 1] < indptr[i]:
                bad_row = i
                break
            for k in range(indptr[i], indptr[i + 1]):
                if indices[k] < 0 or indices[k] >= n_cols or (
                        k > indptr[i] and indices[k] <= indices[k - 1]):
                    bad_row = i
                    break
            if bad_row >= 0:
                break
    if bad_row >= 0:
        raise ValueError(f"row {bad_row} has decreasing pointers, or columns outside "
                         f"0..{n_cols - 1} or out of order")


def check_postings(const offset_t[::1] ptr, const int32_t[::1] rows, Py_ssize_t n_rows):
    """Raise ValueError unless every posting list holds rows in 0..n_rows-1,
    strictly ascending (``ptr`` is already known to be non-decreasing)."""
    cdef Py_ssize_t n_lists = ptr.shape[0] - 1, c
    cdef offset_t k
    cdef Py_ssize_t bad = -1
    with nogil:
        for c in range(n_lists):
            for k in range(ptr[c], ptr[c + 1]):
                if rows[k] < 0 or rows[k] >= n_rows or (k > ptr[c] and rows[k] <= rows[k - 1]):
                    bad = c
                    break
            if bad >= 0:
                break
    if bad >= 0:
        raise ValueError(f"posting list {bad} names a row outside 0..{n_rows - 1} "
                         "or is not in ascending row order")
