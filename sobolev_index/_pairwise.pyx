"""Pairwise unweighted l_p powers between sparse non-negative rows, and the
p = inf scan of the index's search.

Private: ``distances.py`` (and, for the scan, the index's ``segment.py``)
validates the rows and scales them (by w**(1/p)) first, so
these loops compute a plain l_p distance between CSR rows with sorted indices
and non-negative values.

For finite p a query row x is scattered into a dense buffer q once, and each
stored row y then costs only nnz(y), because

    sum_v |x_v - y_v|^p = sum_v |x_v|^p + sum_{v in supp y} (|q_v - y_v|^p - |q_v|^p)

The max-norm (p = inf) has no such identity, so it merges the two index lists.
"""
from cython.parallel cimport prange, threadid
from libc.math cimport fabs, isinf, pow

import numpy as np

from ._powers cimport abs_pow, power_kind
from ._typedefs cimport float64_t, node_t, offset_t
from ._openmp_helpers import effective_threads

# Pairs whose identity-based result is below this fraction of the summed row
# norms are recomputed exactly (see _finish).
cdef float64_t REFINE_RTOL = 1e-4


def _nonempty(array, dtype):
    """The array, or a one-element stand-in: empty arrays have no &a[0]."""
    return np.asarray(array) if len(array) else np.zeros(1, dtype)


cdef float64_t _sum_pow_merged(
    const node_t* xi, const float64_t* xv, offset_t xs, offset_t xe,
    const node_t* yi, const float64_t* yv, offset_t ys, offset_t ye,
    float64_t p, int kind,
) noexcept nogil:
    """sum_v |x_v - y_v|^p by merging the sorted index lists: no cancellation."""
    cdef float64_t s = 0.0
    while xs < xe or ys < ye:
        if ys >= ye or (xs < xe and xi[xs] < yi[ys]):
            s += abs_pow(xv[xs], p, kind)
            xs += 1
        elif xs >= xe or yi[ys] < xi[xs]:
            s += abs_pow(yv[ys], p, kind)
            ys += 1
        else:
            s += abs_pow(xv[xs] - yv[ys], p, kind)
            xs += 1
            ys += 1
    return s


cdef inline float64_t _max_abs_diff(
    const node_t* xi, const float64_t* xv, offset_t xs, offset_t xe,
    const node_t* yi, const float64_t* yv, offset_t ys, offset_t ye,
) noexcept nogil:
    cdef float64_t m = 0.0, d
    while xs < xe or ys < ye:
        if ys >= ye or (xs < xe and xi[xs] < yi[ys]):
            d = fabs(xv[xs])
            xs += 1
        elif xs >= xe or yi[ys] < xi[xs]:
            d = fabs(yv[ys])
            ys += 1
        else:
            d = fabs(xv[xs] - yv[ys])
            xs += 1
            ys += 1
        if d > m:
            m = d
    return m


cdef enum:
    # Queries handled together. Their dense copies are stored interleaved
    # (q_block[v * BLOCK + b]), so each stored nonzero meets BLOCK query
    # values in one contiguous run that the compiler vectorises.
    BLOCK = 16


cdef void _scatter_block(
    const offset_t* x_indptr, const node_t* x_indices, const float64_t* x_data,
    Py_ssize_t i0, Py_ssize_t nb, float64_t* q_block, float64_t* q_pow,
    float64_t* totals, float64_t p, int kind, bint clear,
) noexcept nogil:
    """Write (or, with clear, erase) queries i0..i0+nb-1 into the block."""
    cdef Py_ssize_t b
    cdef offset_t k
    cdef node_t v
    cdef float64_t x
    for b in range(BLOCK):
        totals[b] = 0.0
    for b in range(nb):
        for k in range(x_indptr[i0 + b], x_indptr[i0 + b + 1]):
            v = x_indices[k]
            x = 0.0 if clear else x_data[k]
            q_block[<Py_ssize_t> v * BLOCK + b] = x
            if kind == 2:
                q_pow[<Py_ssize_t> v * BLOCK + b] = 0.0 if clear else pow(x, p)
            totals[b] += abs_pow(x, p, kind)


cdef void _accumulate_row(
    const float64_t* q_block, const float64_t* q_pow,
    const node_t* y_indices, const float64_t* y_data, offset_t ys, offset_t ye,
    float64_t p, int kind, float64_t* acc,
) noexcept nogil:
    """The row's part of the identity for each query b of the block.

    p = 1: acc[b] = sum min(q_b, y); p = 2: acc[b] = sum q_b y; so that
    dist^p = |x|^p + |y|^p - 2 acc[b]. Other p: acc[b] = sum |q_b - y|^p - q_b^p,
    so that dist^p = |x|^p + acc[b].
    """
    # A local array cannot alias the query block, so the b-loops vectorise.
    cdef float64_t local[BLOCK]
    cdef offset_t k
    cdef Py_ssize_t b
    cdef const float64_t* q
    cdef const float64_t* qp
    cdef float64_t y
    for b in range(BLOCK):
        local[b] = 0.0
    if kind == 0:
        # |q - y| - |q| - |y| = -2 min(q, y) for q, y >= 0
        for k in range(ys, ye):
            y = y_data[k]
            q = q_block + <Py_ssize_t> y_indices[k] * BLOCK
            for b in range(BLOCK):
                local[b] += q[b] if q[b] < y else y
    elif kind == 1:
        # (q - y)^2 - q^2 - y^2 = -2 q y
        for k in range(ys, ye):
            y = y_data[k]
            q = q_block + <Py_ssize_t> y_indices[k] * BLOCK
            for b in range(BLOCK):
                local[b] += q[b] * y
    else:
        for k in range(ys, ye):
            y = y_data[k]
            q = q_block + <Py_ssize_t> y_indices[k] * BLOCK
            qp = q_pow + <Py_ssize_t> y_indices[k] * BLOCK
            for b in range(BLOCK):
                local[b] += pow(fabs(q[b] - y), p) - qp[b]
    for b in range(BLOCK):
        acc[b] = local[b]


ctypedef void (*accumulate_fn)(
    const float64_t*, const float64_t*, const node_t*, const float64_t*, offset_t, offset_t,
    float64_t, int, float64_t*,
) noexcept nogil

# The pairs loop calls _accumulate_row through this pointer so that the
# compiler keeps it a function of its own: inlined into the loop, its query
# block is vectorised worse (p = 2 matrices take about 1.7x as long; see
# bench/bench_core.py).
cdef accumulate_fn _accumulate = _accumulate_row


cdef inline float64_t _finish(
    float64_t s, float64_t total, float64_t y_norm,
    const node_t* xi, const float64_t* xv, offset_t xs, offset_t xe,
    const node_t* yi, const float64_t* yv, offset_t ys, offset_t ye,
    float64_t p, int kind,
) noexcept nogil:
    # The identity subtracts terms of size total + y_norm; when the result is
    # small next to them, rounding dominates it, so such pairs (near
    # duplicates) are recomputed exactly.
    if s <= REFINE_RTOL * (total + y_norm):
        return _sum_pow_merged(xi, xv, xs, xe, yi, yv, ys, ye, p, kind)
    return s


cdef void _pairs_block(
    const offset_t* x_indptr, const node_t* x_indices, const float64_t* x_data,
    Py_ssize_t i0, Py_ssize_t nb,
    const offset_t* y_indptr, const node_t* y_indices, const float64_t* y_data,
    const float64_t* y_norm, Py_ssize_t n_y, bint symmetric,
    float64_t* q_block, float64_t* q_pow, float64_t* totals, float64_t* acc,
    float64_t p, int kind, float64_t* out, Py_ssize_t out_stride,
) noexcept nogil:
    cdef Py_ssize_t b, j, j_start = i0 + 1 if symmetric else 0
    cdef Py_ssize_t i
    if kind == 3:
        for b in range(nb):
            i = i0 + b
            for j in range(i + 1 if symmetric else 0, n_y):
                out[i * out_stride + j] = _max_abs_diff(
                    x_indices, x_data, x_indptr[i], x_indptr[i + 1],
                    y_indices, y_data, y_indptr[j], y_indptr[j + 1],
                )
        return
    _scatter_block(x_indptr, x_indices, x_data, i0, nb, q_block, q_pow, totals, p, kind, False)
    for j in range(j_start, n_y):
        _accumulate(q_block, q_pow, y_indices, y_data, y_indptr[j], y_indptr[j + 1],
                    p, kind, acc)
        for b in range(nb):
            i = i0 + b
            if symmetric and j <= i:
                continue
            out[i * out_stride + j] = _finish(
                totals[b] + acc[b] if kind == 2 else totals[b] + y_norm[j] - 2.0 * acc[b],
                totals[b], y_norm[j],
                x_indices, x_data, x_indptr[i], x_indptr[i + 1],
                y_indices, y_data, y_indptr[j], y_indptr[j + 1], p, kind,
            )
    _scatter_block(x_indptr, x_indices, x_data, i0, nb, q_block, q_pow, totals, p, kind, True)


def pairwise_powers(
    const offset_t[::1] x_indptr, const node_t[::1] x_indices, const float64_t[::1] x_data,
    const offset_t[::1] y_indptr, const node_t[::1] y_indices, const float64_t[::1] y_data,
    Py_ssize_t n_cols, float64_t p, bint symmetric, float64_t[:, ::1] out, n_threads=None,
):
    """Fill ``out[i, j]`` with sum_v |x_iv - y_jv|^p (or max_v |.| for p = inf).

    With ``symmetric`` (X is Y), only j > i is computed, then mirrored, and the
    diagonal is exactly zero.
    """
    cdef Py_ssize_t n_x = x_indptr.shape[0] - 1
    cdef Py_ssize_t n_y = y_indptr.shape[0] - 1
    cdef int n_workers
    cdef int kind
    cdef Py_ssize_t i, j
    cdef int tid
    kind = power_kind(p)
    if n_x == 0 or n_y == 0:
        return
    n_workers = effective_threads(n_threads, n_x * n_y * max(1, x_indices.shape[0] // n_x))
    q_arr = np.zeros((n_workers, max(n_cols, 1) * BLOCK), dtype=np.float64)
    q_pow_arr = np.zeros((n_workers, max(n_cols, 1) * BLOCK if kind == 2 else 1), dtype=np.float64)
    scratch_arr = np.zeros((n_workers, 2 * BLOCK), dtype=np.float64)
    cdef float64_t[:, ::1] q = q_arr
    cdef float64_t[:, ::1] q_pow = q_pow_arr
    cdef float64_t[:, ::1] scratch = scratch_arr
    x_indices_arr = _nonempty(x_indices, np.int32)
    x_data_arr = _nonempty(x_data, np.float64)
    y_indices_arr = _nonempty(y_indices, np.int32)
    y_data_arr = _nonempty(y_data, np.float64)
    cdef const node_t[::1] xi = x_indices_arr
    cdef const float64_t[::1] xv = x_data_arr
    cdef const node_t[::1] yi = y_indices_arr
    cdef const float64_t[::1] yv = y_data_arr
    y_norm_arr = np.zeros(n_y, dtype=np.float64)
    cdef float64_t[::1] y_norm = y_norm_arr
    cdef offset_t k
    if kind != 3:
        for j in range(n_y):
            for k in range(y_indptr[j], y_indptr[j + 1]):
                y_norm[j] += abs_pow(yv[k], p, kind)

    cdef Py_ssize_t n_blocks = (n_x + BLOCK - 1) // BLOCK
    cdef Py_ssize_t blk
    for blk in prange(n_blocks, nogil=True, num_threads=n_workers, schedule="dynamic", chunksize=1):
        tid = threadid()
        _pairs_block(
            &x_indptr[0], &xi[0], &xv[0], blk * BLOCK,
            BLOCK if (blk + 1) * BLOCK <= n_x else n_x - blk * BLOCK,
            &y_indptr[0], &yi[0], &yv[0], &y_norm[0], n_y, symmetric,
            &q[tid, 0], &q_pow[tid, 0], &scratch[tid, 0], &scratch[tid, BLOCK],
            p, kind, &out[0, 0], out.shape[1],
        )
    if symmetric:
        for i in range(n_x):
            out[i, i] = 0.0
            for j in range(i + 1, n_y):
                out[j, i] = out[i, j]


cdef float64_t _lp_merged(
    const node_t* xi, const float64_t* xv, offset_t xs, offset_t xe,
    const node_t* yi, const float64_t* yv, offset_t ys, offset_t ye,
    const float64_t* scale, float64_t p,
) noexcept nogil:
    """(sum_v (scale_v |x_v - y_v|)^p)^(1/p) by merging the sorted index lists.

    The sum is kept relative to the largest term seen so far (m): it holds
    sum_v (d_v / m)^p, so no term underflows before it could matter, and the
    result tends to max_v d_v as p grows instead of to 0.
    """
    cdef float64_t m = 0.0, s = 0.0, d
    cdef node_t v
    while xs < xe or ys < ye:
        if ys >= ye or (xs < xe and xi[xs] < yi[ys]):
            v = xi[xs]
            d = fabs(xv[xs])
            xs += 1
        elif xs >= xe or yi[ys] < xi[xs]:
            v = yi[ys]
            d = fabs(yv[ys])
            ys += 1
        else:
            v = xi[xs]
            d = fabs(xv[xs] - yv[ys])
            xs += 1
            ys += 1
        d *= scale[v]
        if d > m:
            s = 1.0 if m == 0.0 else s * pow(m / d, p) + 1.0
            m = d
        elif d > 0.0:
            s += pow(d / m, p)
    if m == 0.0:
        return 0.0
    return m * pow(s, 1.0 / p)


def pairwise_lp(
    const offset_t[::1] x_indptr, const node_t[::1] x_indices, const float64_t[::1] x_data,
    const offset_t[::1] y_indptr, const node_t[::1] y_indices, const float64_t[::1] y_data,
    const float64_t[::1] col_scale, float64_t p, bint symmetric, float64_t[:, ::1] out,
    n_threads=None,
):
    """Fill ``out[i, j]`` with the l_p distance (not its p-th power) between
    row i of X and row j of Y, each value multiplied by its column's
    ``col_scale`` first: S_p itself when col_scale is w^(1/p). For p = inf
    it is max_v |x_v - y_v| and ``col_scale`` is not read (w^0 = 1).

    For p = inf and for large finite p, where |x - y|^p underflows: pair by
    pair, merging the two index lists (see _lp_merged). The rows of Y are
    split between threads, so that one query row (a search) also uses every
    thread. With ``symmetric`` (X is Y), only i < j is computed, then
    mirrored; the diagonal is zero. The rows must have passed a CSR check
    with ``col_scale.shape[0]`` columns.
    """
    cdef Py_ssize_t n_x = x_indptr.shape[0] - 1
    cdef Py_ssize_t n_y = y_indptr.shape[0] - 1
    cdef int n_workers
    cdef bint infinite = isinf(p)
    cdef Py_ssize_t i, j
    if n_x == 0 or n_y == 0:
        return
    n_workers = effective_threads(n_threads, n_x * max(1, y_indices.shape[0]))
    x_indices_arr = _nonempty(x_indices, np.int32)
    x_data_arr = _nonempty(x_data, np.float64)
    y_indices_arr = _nonempty(y_indices, np.int32)
    y_data_arr = _nonempty(y_data, np.float64)
    scale_arr = _nonempty(col_scale, np.float64)
    cdef const node_t[::1] xi = x_indices_arr
    cdef const float64_t[::1] xv = x_data_arr
    cdef const node_t[::1] yi = y_indices_arr
    cdef const float64_t[::1] yv = y_data_arr
    cdef const float64_t[::1] sc = scale_arr
    for j in prange(n_y, nogil=True, num_threads=n_workers, schedule="dynamic", chunksize=16):
        for i in range(j if symmetric else n_x):
            if infinite:
                out[i, j] = _max_abs_diff(
                    &xi[0], &xv[0], x_indptr[i], x_indptr[i + 1],
                    &yi[0], &yv[0], y_indptr[j], y_indptr[j + 1],
                )
            else:
                out[i, j] = _lp_merged(
                    &xi[0], &xv[0], x_indptr[i], x_indptr[i + 1],
                    &yi[0], &yv[0], y_indptr[j], y_indptr[j + 1], &sc[0], p,
                )
    if symmetric:
        for i in range(n_x):
            out[i, i] = 0.0
            for j in range(i + 1, n_y):
                out[j, i] = out[i, j]
