"""Measures on tree nodes -> sparse edge-mass rows (the feature map of Prop. 4.4).

Private: ``ShortestPathTree.features`` validates every array (dtypes, ranges,
masses) before calling in here, so these loops trust their inputs.

Edge ``v`` is the tree edge (v, parent[v]); its feature is the mass of the
subtree under ``v``. Each support's mass is added to every edge on its path to
the root, so the work is the total root-path length of the supports.
"""
from cython.parallel cimport prange, threadid
from libc.float cimport DBL_MAX
from libc.math cimport fabs, isfinite
from libc.stdint cimport int64_t
from libc.stdlib cimport qsort

import numpy as np

from ._powers cimport abs_pow, power_kind
from ._typedefs cimport float64_t, node_t, offset_t
from ._openmp_helpers import effective_threads


cdef int _compare_nodes(const void* a, const void* b) noexcept nogil:
    cdef node_t x = (<const node_t*> a)[0]
    cdef node_t y = (<const node_t*> b)[0]
    return (x > y) - (x < y)


cdef offset_t _count_row(
    const node_t* parent, node_t root,
    const node_t* nodes, offset_t start, offset_t end,
    offset_t* stamp, offset_t row_stamp,
) noexcept nogil:
    # Edges shared by several supports are counted once: a walk stops at the
    # first edge already seen in this row, since all edges above it are seen.
    cdef offset_t k, count = 0
    cdef node_t u
    for k in range(start, end):
        u = nodes[k]
        while u != root and stamp[u] != row_stamp:
            stamp[u] = row_stamp
            count += 1
            u = parent[u]
    return count


cdef offset_t touch_row(
    const node_t* parent, node_t root,
    const node_t* nodes, const float64_t* masses, float64_t scale,
    offset_t start, offset_t end,
    offset_t* stamp, offset_t row_stamp, float64_t* acc, node_t* touched,
) noexcept nogil:
    """One row's edge masses into ``acc`` (indexed by edge), its edges into
    ``touched`` in the order first met; returns their count.
    ``stamp[u] == row_stamp`` marks the edges seen in this row, so the
    scratch needs no clearing between rows that use different stamps."""
    cdef offset_t k, n_touched = 0
    cdef node_t u
    cdef float64_t m
    for k in range(start, end):
        m = masses[k] * scale
        u = nodes[k]
        while u != root:
            if stamp[u] != row_stamp:
                stamp[u] = row_stamp
                acc[u] = 0.0
                touched[n_touched] = u
                n_touched += 1
            acc[u] += m
            u = parent[u]
    return n_touched


cdef void _fill_row(
    const node_t* parent, node_t root,
    const node_t* nodes, const float64_t* masses, float64_t scale,
    offset_t start, offset_t end,
    offset_t* stamp, offset_t row_stamp, float64_t* acc,
    node_t* out_indices, float64_t* out_data,
) noexcept nogil:
    cdef offset_t k, n_touched = touch_row(parent, root, nodes, masses, scale, start, end,
                                           stamp, row_stamp, acc, out_indices)
    qsort(out_indices, n_touched, sizeof(node_t), _compare_nodes)
    for k in range(n_touched):
        out_data[k] = acc[out_indices[k]]


def edge_masses(
    const node_t[::1] parent,
    node_t root,
    const offset_t[::1] indptr,
    const node_t[::1] nodes,
    const float64_t[::1] masses,
    const float64_t[::1] row_scale,
    n_threads=None,
):
    """Return (indptr, indices, data) of the CSR edge-mass matrix.

    Row i is the measure ``nodes[indptr[i]:indptr[i+1]]`` with masses scaled by
    ``row_scale[i]``; duplicate nodes add up.
    """
    cdef Py_ssize_t n_rows = indptr.shape[0] - 1
    cdef Py_ssize_t n_nodes = parent.shape[0]
    cdef int n_workers
    cdef Py_ssize_t i
    cdef int tid
    n_workers = effective_threads(n_threads, nodes.shape[0])

    # Stamps are row numbers + 1, so within a pass the scratch needs no clearing
    # between rows; it is cleared once between the two passes.
    stamps_arr = np.zeros((n_workers, max(n_nodes, 1)), dtype=np.int64)
    acc_arr = np.zeros((n_workers, max(n_nodes, 1)), dtype=np.float64)
    cdef offset_t[:, ::1] stamps = stamps_arr
    cdef float64_t[:, ::1] acc = acc_arr

    out_indptr_arr = np.zeros(n_rows + 1, dtype=np.int64)
    cdef offset_t[::1] out_indptr = out_indptr_arr

    if n_rows == 0:
        return out_indptr_arr, np.zeros(0, np.int32), np.zeros(0, np.float64)

    for i in prange(n_rows, nogil=True, num_threads=n_workers, schedule="dynamic", chunksize=64):
        tid = threadid()
        out_indptr[i + 1] = _count_row(
            &parent[0], root, &nodes[0], indptr[i], indptr[i + 1],
            &stamps[tid, 0], i + 1,
        )

    np.cumsum(out_indptr_arr, out=out_indptr_arr)
    cdef offset_t nnz = out_indptr[n_rows]
    out_indices_arr = np.empty(nnz, dtype=np.int32)
    out_data_arr = np.empty(nnz, dtype=np.float64)
    cdef node_t[::1] out_indices = out_indices_arr
    cdef float64_t[::1] out_data = out_data_arr
    if nnz == 0:
        return out_indptr_arr, out_indices_arr, out_data_arr

    stamps_arr.fill(0)
    for i in prange(n_rows, nogil=True, num_threads=n_workers, schedule="dynamic", chunksize=64):
        tid = threadid()
        if out_indptr[i + 1] > out_indptr[i]:
            _fill_row(
                &parent[0], root, &nodes[0], &masses[0], row_scale[i],
                indptr[i], indptr[i + 1],
                &stamps[tid, 0], i + 1, &acc[tid, 0],
                &out_indices[out_indptr[i]], &out_data[out_indptr[i]],
            )
    return out_indptr_arr, out_indices_arr, out_data_arr


def powers_to_measures(
    const node_t[::1] parent,
    node_t root,
    const float64_t[::1] length,
    const node_t[::1] q_indices,
    const float64_t[::1] q_data,
    const offset_t[::1] indptr,
    const node_t[::1] nodes,
    const float64_t[::1] masses,
    const float64_t[::1] row_scale,
    float64_t p,
    float64_t[::1] out,
):
    """out[j] = sum_v length[v] |q_v - x_v|^p between one feature row q
    (``q_indices``, ``q_data``: distinct edges, in any order) and the
    features x of measure j of the batch, for p >= 1 finite; max_v |q_v -
    x_v| for p = inf. Each x is rebuilt with touch_row, as when the measure
    was added, and never sorted: the sum runs over x's edges, then over the
    query's edges that x lacks. One thread; a search ranks a few hundred
    candidates this way."""
    cdef Py_ssize_t n_nodes = parent.shape[0], n_rows = indptr.shape[0] - 1
    cdef Py_ssize_t n_q = q_indices.shape[0], j, t
    cdef offset_t n_touched
    cdef node_t c
    cdef int kind = power_kind(p)
    cdef float64_t total, d
    if n_rows <= 0:
        return
    stamp_arr = np.zeros(max(n_nodes, 1), dtype=np.int64)
    acc_arr = np.zeros(max(n_nodes, 1), dtype=np.float64)
    touched_arr = np.zeros(max(n_nodes, 1), dtype=np.int32)
    query_arr = np.zeros(max(n_nodes, 1), dtype=np.float64)
    cdef offset_t[::1] stamp = stamp_arr
    cdef float64_t[::1] acc = acc_arr
    cdef node_t[::1] touched = touched_arr
    cdef float64_t[::1] query = query_arr
    with nogil:
        for t in range(n_q):
            query[q_indices[t]] = q_data[t]
        for j in range(n_rows):
            n_touched = touch_row(&parent[0], root, &nodes[0], &masses[0], row_scale[j],
                                  indptr[j], indptr[j + 1], &stamp[0], j + 1, &acc[0],
                                  &touched[0])
            total = 0.0
            for t in range(n_touched):
                c = touched[t]
                d = query[c] - acc[c]
                if kind == 3:
                    if fabs(d) > total:
                        total = fabs(d)
                else:
                    total = total + length[c] * abs_pow(d, p, kind)
            for t in range(n_q):
                c = q_indices[t]
                if stamp[c] != j + 1:
                    if kind == 3:
                        if fabs(q_data[t]) > total:
                            total = fabs(q_data[t])
                    else:
                        total = total + length[c] * abs_pow(q_data[t], p, kind)
            out[j] = total


# What check_batch found first, in the order measures.py reports problems.
BATCH_OK = 0
BATCH_BAD_INDPTR = 1
BATCH_EMPTY = 2
BATCH_NODE_RANGE = 3
BATCH_NOT_FINITE = 4
BATCH_NEGATIVE = 5
BATCH_ZERO_TOTAL = 6
BATCH_TOO_LARGE = 7
BATCH_TOO_SMALL = 8
# A measure whose masses sum to more than this is refused: every partial sum
# of non-negative masses, in any order, is then far from overflowing.
cdef float64_t _TOTAL_MAX = 1e300
TOTAL_MAX = _TOTAL_MAX
# Nor one whose positive total is below this: 1 / total must be finite and
# normal, or normalising turns the masses into inf or loses their precision
# (a subnormal total keeps only a few significant bits).
cdef float64_t _TOTAL_MIN = 1e-300
TOTAL_MIN = _TOTAL_MIN


def check_batch(const offset_t[::1] indptr, const int64_t[::1] nodes,
                const float64_t[::1] masses, int64_t n_nodes, node_t[::1] nodes_out):
    """Check a batch in CSR form in one pass, copying node ids to int32
    into ``nodes_out``. Returns (problem, where): the first problem by kind
    in the order of BATCH_* (-1 for indptr, an empty or all-zero measure's
    index, or the entry of a bad node or mass), or (BATCH_OK, -1). Nothing
    past indptr is read unless indptr is well formed: starts at 0, never
    decreases, ends at len(nodes) = len(masses)."""
    cdef Py_ssize_t n = indptr.shape[0] - 1, i, e
    cdef Py_ssize_t first_empty = -1, first_node = -1, first_nan = -1, first_negative = -1
    cdef Py_ssize_t first_zero = -1, first_large = -1, first_small = -1
    cdef float64_t m, total
    if n < 0 or indptr[0] != 0 or indptr[n] != nodes.shape[0] \
            or nodes.shape[0] != masses.shape[0] or nodes_out.shape[0] != nodes.shape[0]:
        return BATCH_BAD_INDPTR, -1
    for i in range(n):
        if indptr[i + 1] < indptr[i]:
            return BATCH_BAD_INDPTR, -1
    with nogil:
        for i in range(n):
            if indptr[i + 1] == indptr[i] and first_empty < 0:
                first_empty = i
            total = 0.0
            for e in range(indptr[i], indptr[i + 1]):
                if (nodes[e] < 0 or nodes[e] >= n_nodes) and first_node < 0:
                    first_node = e
                nodes_out[e] = <node_t> nodes[e]
                m = masses[e]
                if not isfinite(m):
                    if first_nan < 0:
                        first_nan = e
                elif m < 0.0:
                    if first_negative < 0:
                        first_negative = e
                elif m > 0.0:
                    total += m
            # A sum of positive masses is positive (it cannot round to 0), so
            # the total is 0 exactly when every mass is, in any order.
            if total == 0.0 and indptr[i + 1] > indptr[i] and first_zero < 0:
                first_zero = i
            if total > _TOTAL_MAX and first_large < 0:
                first_large = i
            if 0.0 < total < _TOTAL_MIN and first_small < 0:
                first_small = i
    if first_empty >= 0:
        return BATCH_EMPTY, first_empty
    if first_node >= 0:
        return BATCH_NODE_RANGE, first_node
    if first_nan >= 0:
        return BATCH_NOT_FINITE, first_nan
    if first_negative >= 0:
        return BATCH_NEGATIVE, first_negative
    if first_zero >= 0:
        return BATCH_ZERO_TOTAL, first_zero
    if first_large >= 0:
        return BATCH_TOO_LARGE, first_large
    if first_small >= 0:
        return BATCH_TOO_SMALL, first_small
    return BATCH_OK, -1


def check_stored_rows(const node_t[::1] nodes, const float64_t[::1] masses,
                      Py_ssize_t n_nodes, n_threads=None):
    """(a node outside 0..n_nodes-1, a mass that is not finite and >= 0):
    whether the arrays of stored measures hold either, in one parallel pass
    (``nodes`` and ``masses`` of the same length)."""
    cdef Py_ssize_t n = nodes.shape[0], n_chunks, c, e, lo, hi
    cdef Py_ssize_t chunk = 1 << 16
    cdef int n_workers = effective_threads(n_threads, n)
    if masses.shape[0] != n:
        raise ValueError("nodes and masses differ in length")
    n_chunks = (n + chunk - 1) // chunk
    flags_arr = np.zeros((max(n_chunks, 1), 2), dtype=np.uint8)
    cdef unsigned char[:, ::1] flags = flags_arr
    for c in prange(n_chunks, nogil=True, schedule="static", num_threads=n_workers):
        lo = c * chunk
        hi = min(n, lo + chunk)
        for e in range(lo, hi):
            if nodes[e] < 0 or nodes[e] >= n_nodes:
                flags[c, 0] = 1
            # (NaN fails the comparison.)
            if not (masses[e] >= 0.0 and masses[e] <= DBL_MAX):
                flags[c, 1] = 1
    return bool(flags_arr[:, 0].any()), bool(flags_arr[:, 1].any())
