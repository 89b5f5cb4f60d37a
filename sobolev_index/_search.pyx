# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Scans over sparse non-negative rows: pairwise unweighted l_p powers.

Private: ``kernels.py`` validates and scales the rows (by w**(1/p)) first, so
these loops compute a plain l_p distance between CSR rows with sorted indices
and non-negative values.

For finite p a query row x is scattered into a dense buffer q once, and each
stored row y then costs only nnz(y), because (DESIGN.md, "identity"):

    sum_v |x_v - y_v|^p = sum_v |x_v|^p + sum_{v in supp y} (|q_v - y_v|^p - |q_v|^p)

The max-norm (p = inf) has no such identity, so it merges the two index lists.
"""
from cython.parallel cimport prange, threadid
from libc.math cimport fabs, pow, INFINITY, isinf

import numpy as np

from ._typedefs cimport float64_t, node_t, offset_t
from ._features import SERIAL_BELOW, effective_threads

# Pairs whose identity-based result is below this fraction of the summed row
# norms are recomputed exactly (see _row_powers).
cdef float64_t REFINE_RTOL = 1e-4


cdef inline float64_t _sum_l1(
    const float64_t* q, const node_t* idx, const float64_t* val,
    offset_t start, offset_t end,
) noexcept nogil:
    cdef offset_t k
    cdef float64_t s = 0.0, qv
    for k in range(start, end):
        qv = q[idx[k]]
        s += fabs(qv - val[k]) - qv
    return s


cdef inline float64_t _sum_l2(
    const float64_t* q, const node_t* idx, const float64_t* val,
    offset_t start, offset_t end,
) noexcept nogil:
    # (q - y)^2 - q^2 = y (y - 2q)
    cdef offset_t k
    cdef float64_t s = 0.0, y
    for k in range(start, end):
        y = val[k]
        s += y * (y - 2.0 * q[idx[k]])
    return s


cdef inline float64_t _sum_lp(
    const float64_t* q, const float64_t* q_pow, const node_t* idx, const float64_t* val,
    offset_t start, offset_t end, float64_t p,
) noexcept nogil:
    cdef offset_t k
    cdef float64_t s = 0.0
    cdef node_t v
    for k in range(start, end):
        v = idx[k]
        s += pow(fabs(q[v] - val[k]), p) - q_pow[v]
    return s


cdef inline float64_t _abs_pow(float64_t x, float64_t p, int kind) noexcept nogil:
    if kind == 0:
        return fabs(x)
    if kind == 1:
        return x * x
    return pow(fabs(x), p)


cdef float64_t _sum_pow_merged(
    const node_t* xi, const float64_t* xv, offset_t xs, offset_t xe,
    const node_t* yi, const float64_t* yv, offset_t ys, offset_t ye,
    float64_t p, int kind,
) noexcept nogil:
    """sum_v |x_v - y_v|^p by merging the sorted index lists: no cancellation."""
    cdef float64_t s = 0.0
    while xs < xe or ys < ye:
        if ys >= ye or (xs < xe and xi[xs] < yi[ys]):
            s += _abs_pow(xv[xs], p, kind)
            xs += 1
        elif xs >= xe or yi[ys] < xi[xs]:
            s += _abs_pow(yv[ys], p, kind)
            ys += 1
        else:
            s += _abs_pow(xv[xs] - yv[ys], p, kind)
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


cdef float64_t _row_powers(
    const offset_t* x_indptr, const node_t* x_indices, const float64_t* x_data,
    Py_ssize_t i, float64_t* q, float64_t* q_pow, float64_t p, int kind,
    const offset_t* y_indptr, const node_t* y_indices, const float64_t* y_data,
    const float64_t* y_norm, Py_ssize_t j_start, Py_ssize_t j_end, float64_t* out_row,
) noexcept nogil:
    cdef offset_t k, xs = x_indptr[i], xe = x_indptr[i + 1]
    cdef Py_ssize_t j
    cdef float64_t total = 0.0, s
    if kind == 3:
        for j in range(j_start, j_end):
            out_row[j] = _max_abs_diff(
                x_indices, x_data, xs, xe,
                y_indices, y_data, y_indptr[j], y_indptr[j + 1],
            )
        return 0.0
    for k in range(xs, xe):
        q[x_indices[k]] = x_data[k]
        if kind == 0:
            total += x_data[k]
        elif kind == 1:
            total += x_data[k] * x_data[k]
        else:
            q_pow[x_indices[k]] = pow(x_data[k], p)
            total += q_pow[x_indices[k]]
    for j in range(j_start, j_end):
        if kind == 0:
            s = total + _sum_l1(q, y_indices, y_data, y_indptr[j], y_indptr[j + 1])
        elif kind == 1:
            s = total + _sum_l2(q, y_indices, y_data, y_indptr[j], y_indptr[j + 1])
        else:
            s = total + _sum_lp(q, q_pow, y_indices, y_data, y_indptr[j], y_indptr[j + 1], p)
        # The identity subtracts terms of size total + y_norm[j]; when the
        # result is small next to them, rounding dominates it, so such pairs
        # (near-duplicates) are recomputed exactly.
        if s <= REFINE_RTOL * (total + y_norm[j]):
            s = _sum_pow_merged(
                x_indices, x_data, xs, xe,
                y_indices, y_data, y_indptr[j], y_indptr[j + 1], p, kind,
            )
        out_row[j] = s
    for k in range(xs, xe):
        q[x_indices[k]] = 0.0
        if kind == 2:
            q_pow[x_indices[k]] = 0.0
    return 0.0


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
    cdef int n_workers = effective_threads(n_threads)
    cdef int kind
    cdef Py_ssize_t i, j
    cdef int tid
    if isinf(p):
        kind = 3
    elif p == 1.0:
        kind = 0
    elif p == 2.0:
        kind = 1
    else:
        kind = 2
    if n_x == 0 or n_y == 0:
        return
    if n_x * n_y * max(1, x_indices.shape[0] // n_x) < SERIAL_BELOW:
        n_workers = 1
    q_arr = np.zeros((n_workers, max(n_cols, 1)), dtype=np.float64)
    q_pow_arr = np.zeros((n_workers, max(n_cols, 1) if kind == 2 else 1), dtype=np.float64)
    cdef float64_t[:, ::1] q = q_arr
    cdef float64_t[:, ::1] q_pow = q_pow_arr
    # Empty CSR arrays have no element 0 to take an address of.
    x_indices_arr = np.asarray(x_indices) if x_indices.shape[0] else np.zeros(1, np.int32)
    x_data_arr = np.asarray(x_data) if x_data.shape[0] else np.zeros(1, np.float64)
    y_indices_arr = np.asarray(y_indices) if y_indices.shape[0] else np.zeros(1, np.int32)
    y_data_arr = np.asarray(y_data) if y_data.shape[0] else np.zeros(1, np.float64)
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
                y_norm[j] += _abs_pow(yv[k], p, kind)

    for i in prange(n_x, nogil=True, num_threads=n_workers, schedule="dynamic", chunksize=4):
        tid = threadid()
        _row_powers(
            &x_indptr[0], &xi[0], &xv[0], i, &q[tid, 0], &q_pow[tid, 0], p, kind,
            &y_indptr[0], &yi[0], &yv[0], &y_norm[0],
            i + 1 if symmetric else 0, n_y, &out[i, 0],
        )
    if symmetric:
        for i in range(n_x):
            out[i, i] = 0.0
            for j in range(i + 1, n_y):
                out[j, i] = out[i, j]
