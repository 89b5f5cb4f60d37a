"""Farthest-point (Gonzalez) clustering, exact, one batch of centres per pass.

Private: ``graph.py`` validates the points (finite, C-contiguous) first.

Gonzalez's rule: the next centre is the point farthest from its nearest
centre, the smallest row number among equally far points; every point
belongs to its nearest centre, the earliest among equally near ones.
Distances are the float64 sums of ``_sq_distance`` on the rows of X and every
decision compares those sums, so the result is what the plain algorithm
gives with them, with any number of threads and any kernel.

The plain algorithm reads all of X once per centre. Here each round chooses
a batch of centres first and then applies the whole batch in one pass:

1. Choosing. Distances to the nearest centre only shrink as centres are
   added. So if the candidates are the q points first in line now, the first
   of them in line stays the next centre for as long as it is ahead of the
   first point outside them at the start of the round. A candidate's
   distance is brought up to date only when it is first in line (a heap).
2. Applying. The points of each centre z (a cluster) are a run, farthest
   from z first. A new centre c can take a point i only if
   d(z, c) < 2 d(i, z), so a cluster needs only the batch centres near z,
   and each of its rows only those with d(z, c) below twice its distance;
   rows far inside the cluster need none.
3. Points that moved join their new centre's run.

Distances between points and new centres are first estimated as
||x||^2 + ||c||^2 - 2 <x, c> from a copy of X in its own precision (float32
for float32 X), centred at the mean and scaled by a power of two, with inner
products from a register-tiled kernel (AVX-512 or AVX2 when the CPU has them).
The error of an estimate is bounded (``_error_bounds``), so a centre is
checked with ``_sq_distance`` only where the bound leaves it possibly as near
as the point's current centre; that sum decides. The copy costs as much
memory as X.
"""
from cython.parallel cimport prange, threadid
from libc.math cimport sqrt, fabs, INFINITY
from libc.stdlib cimport free, malloc, qsort

import math

import numpy as np

from ._typedefs cimport float64_t, offset_t
from ._openmp_helpers import effective_threads

ctypedef fused floating_t:
    float
    double

cdef extern from *:
    """
    /* out[r * ld_out + j] = sum_t rows[r][t] * panel[t * ld_panel + j], for
       r < n_rows and j < n_cols, n_cols a multiple of 16: the panel must hold
       that many columns, and the caller ignores those past its own. Tiles of
       6 rows by two vectors of columns keep twelve accumulators in
       registers; each sum runs over t in order in one lane, so its rounding
       error is that of a d-term sum. The AVX2 and AVX-512 versions are the
       same code compiled for those instructions, chosen when the CPU has
       them. */
    #include <stddef.h>
    #if defined(__GNUC__) || defined(__clang__)
    #define SI_VECTORS 1
    #if defined(__x86_64__) || defined(__i386__)
    #define SI_X86 1
    #endif
    #endif

    #ifdef SI_VECTORS
    typedef float si_f4 __attribute__((vector_size(16), aligned(4), may_alias));
    typedef float si_f8 __attribute__((vector_size(32), aligned(4), may_alias));
    typedef float si_f16 __attribute__((vector_size(64), aligned(4), may_alias));
    typedef double si_d2 __attribute__((vector_size(16), aligned(8), may_alias));
    typedef double si_d4 __attribute__((vector_size(32), aligned(8), may_alias));
    typedef double si_d8 __attribute__((vector_size(64), aligned(8), may_alias));

    #define SI_DOT_ROWS(NAME, T, V, VW)                                              \\
    static void NAME(const T* const* rows, ptrdiff_t n_rows, const T* panel,          \\
                     ptrdiff_t ld_panel, ptrdiff_t n_cols, ptrdiff_t d,               \\
                     T* out, ptrdiff_t ld_out) {                                      \\
        ptrdiff_t r = 0, j, t;                                                        \\
        for (; r + 6 <= n_rows; r += 6) {                                             \\
            const T *a0 = rows[r], *a1 = rows[r + 1], *a2 = rows[r + 2];              \\
            const T *a3 = rows[r + 3], *a4 = rows[r + 4], *a5 = rows[r + 5];          \\
            for (j = 0; j < n_cols; j += 2 * VW) {                                    \\
                V c00 = {0}, c01 = {0}, c10 = {0}, c11 = {0}, c20 = {0}, c21 = {0};   \\
                V c30 = {0}, c31 = {0}, c40 = {0}, c41 = {0}, c50 = {0}, c51 = {0};   \\
                const T* p = panel + j;                                               \\
                int two = j + 2 * VW <= n_cols;                                       \\
                if (two) {                                                            \\
                    for (t = 0; t < d; t++, p += ld_panel) {                          \\
                        V p0 = *(const V*)p, p1 = *(const V*)(p + VW);                \\
                        T x;                                                          \\
                        x = a0[t]; c00 += x * p0; c01 += x * p1;                      \\
                        x = a1[t]; c10 += x * p0; c11 += x * p1;                      \\
                        x = a2[t]; c20 += x * p0; c21 += x * p1;                      \\
                        x = a3[t]; c30 += x * p0; c31 += x * p1;                      \\
                        x = a4[t]; c40 += x * p0; c41 += x * p1;                      \\
                        x = a5[t]; c50 += x * p0; c51 += x * p1;                      \\
                    }                                                                 \\
                } else {                                                              \\
                    for (t = 0; t < d; t++, p += ld_panel) {                          \\
                        V p0 = *(const V*)p;                                          \\
                        c00 += a0[t] * p0; c10 += a1[t] * p0; c20 += a2[t] * p0;      \\
                        c30 += a3[t] * p0; c40 += a4[t] * p0; c50 += a5[t] * p0;      \\
                    }                                                                 \\
                }                                                                     \\
                T* g = out + r * ld_out + j;                                          \\
                *(V*)g = c00; g += ld_out; *(V*)g = c10; g += ld_out;                 \\
                *(V*)g = c20; g += ld_out; *(V*)g = c30; g += ld_out;                 \\
                *(V*)g = c40; g += ld_out; *(V*)g = c50;                              \\
                if (two) {                                                            \\
                    g = out + r * ld_out + j + VW;                                    \\
                    *(V*)g = c01; g += ld_out; *(V*)g = c11; g += ld_out;             \\
                    *(V*)g = c21; g += ld_out; *(V*)g = c31; g += ld_out;             \\
                    *(V*)g = c41; g += ld_out; *(V*)g = c51;                          \\
                } else {                                                              \\
                    j -= VW;                                                          \\
                }                                                                     \\
            }                                                                         \\
        }                                                                             \\
        for (; r < n_rows; r++) {                                                     \\
            const T* a0 = rows[r];                                                    \\
            for (j = 0; j < n_cols; j += VW) {                                        \\
                V c00 = {0};                                                          \\
                const T* p = panel + j;                                               \\
                for (t = 0; t < d; t++, p += ld_panel) c00 += a0[t] * *(const V*)p;   \\
                *(V*)(out + r * ld_out + j) = c00;                                    \\
            }                                                                         \\
        }                                                                             \\
    }

    SI_DOT_ROWS(si_dot_f32_generic, float, si_f4, 4)
    SI_DOT_ROWS(si_dot_f64_generic, double, si_d2, 2)
    #ifdef SI_X86
    __attribute__((target("avx2,fma"))) SI_DOT_ROWS(si_dot_f32_avx2, float, si_f8, 8)
    __attribute__((target("avx2,fma"))) SI_DOT_ROWS(si_dot_f64_avx2, double, si_d4, 4)
    __attribute__((target("avx512f"))) SI_DOT_ROWS(si_dot_f32_avx512, float, si_f16, 16)
    __attribute__((target("avx512f"))) SI_DOT_ROWS(si_dot_f64_avx512, double, si_d8, 8)
    #endif

    #else  /* no vector extensions: plain loops */
    #define SI_DOT_ROWS_PLAIN(NAME, T)                                                \\
    static void NAME(const T* const* rows, ptrdiff_t n_rows, const T* panel,          \\
                     ptrdiff_t ld_panel, ptrdiff_t n_cols, ptrdiff_t d,               \\
                     T* out, ptrdiff_t ld_out) {                                      \\
        ptrdiff_t r, j, t;                                                            \\
        for (r = 0; r < n_rows; r++) {                                                \\
            T* g = out + r * ld_out;                                                  \\
            for (j = 0; j < n_cols; j++) g[j] = 0;                                    \\
            for (t = 0; t < d; t++) {                                                 \\
                T x = rows[r][t];                                                     \\
                const T* p = panel + t * ld_panel;                                    \\
                for (j = 0; j < n_cols; j++) g[j] += x * p[j];                        \\
            }                                                                         \\
        }                                                                             \\
    }
    SI_DOT_ROWS_PLAIN(si_dot_f32_generic, float)
    SI_DOT_ROWS_PLAIN(si_dot_f64_generic, double)
    #endif

    /* 0: the generic kernel; 1: AVX2 and FMA; 2: AVX-512F. */
    static int si_simd_level(void) {
    #ifdef SI_X86
        __builtin_cpu_init();
        if (__builtin_cpu_supports("avx512f")) return 2;
        if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return 1;
    #endif
        return 0;
    }

    static void si_dot_f32(int level, const float* const* rows, ptrdiff_t n_rows,
                           const float* panel, ptrdiff_t ld_panel, ptrdiff_t n_cols,
                           ptrdiff_t d, float* out, ptrdiff_t ld_out) {
    #ifdef SI_X86
        if (level >= 2) { si_dot_f32_avx512(rows, n_rows, panel, ld_panel, n_cols, d, out, ld_out); return; }
        if (level == 1) { si_dot_f32_avx2(rows, n_rows, panel, ld_panel, n_cols, d, out, ld_out); return; }
    #endif
        si_dot_f32_generic(rows, n_rows, panel, ld_panel, n_cols, d, out, ld_out);
    }

    static void si_dot_f64(int level, const double* const* rows, ptrdiff_t n_rows,
                           const double* panel, ptrdiff_t ld_panel, ptrdiff_t n_cols,
                           ptrdiff_t d, double* out, ptrdiff_t ld_out) {
    #ifdef SI_X86
        if (level >= 2) { si_dot_f64_avx512(rows, n_rows, panel, ld_panel, n_cols, d, out, ld_out); return; }
        if (level == 1) { si_dot_f64_avx2(rows, n_rows, panel, ld_panel, n_cols, d, out, ld_out); return; }
    #endif
        si_dot_f64_generic(rows, n_rows, panel, ld_panel, n_cols, d, out, ld_out);
    }
    """
    int si_simd_level() noexcept nogil
    void si_dot_f32(int level, const float** rows, Py_ssize_t n_rows, const float* panel,
                    Py_ssize_t ld_panel, Py_ssize_t n_cols, Py_ssize_t d,
                    float* out, Py_ssize_t ld_out) noexcept nogil
    void si_dot_f64(int level, const double** rows, Py_ssize_t n_rows, const double* panel,
                    Py_ssize_t ld_panel, Py_ssize_t n_cols, Py_ssize_t d,
                    double* out, Py_ssize_t ld_out) noexcept nogil


ctypedef struct _key_t:
    # A point of a cluster, for sorting its run farthest first.
    float64_t sq
    float64_t nu2
    offset_t point

ctypedef struct _bounds_t:
    # Turns an estimate from the scaled copy into a lower bound on
    # _sq_distance: subtract kappa * (||x|| + ||c||)^2 + floor, multiply by
    # scale2, subtract floor_x (see _error_bounds).
    float64_t kappa
    float64_t floor
    float64_t scale2
    float64_t floor_x


cdef enum:
    # Rows per kernel call; a multiple of the kernel's 6-row tile.
    ROWS_PER_CALL = 96
    # Calls per unit of parallel work (at most ROWS_PER_UNIT rows of one cluster).
    CALLS_PER_UNIT = 16
    ROWS_PER_UNIT = CALLS_PER_UNIT * ROWS_PER_CALL
    # Most centres one round adds, and how many candidates it starts from.
    BATCH_MAX = 256
    CANDIDATES_START = 2048
    CANDIDATES_MAX = 1 << 16
    # Entries of the table of older centres by batch centres, at most; the
    # batch is smaller once there are more than NEAR_ENTRIES / BATCH_MAX centres.
    NEAR_ENTRIES = 1 << 22

# A new centre c can take a point i from its centre z only if
# d(z, c)^2 < 4 d(i, z)^2. The tests compare with 4 (1 + 2e-9) sq + 8 floor_x,
# sq the float64 sum: margins far above that sum's rounding (relative, and
# absolute where it underflows), so that pruning never skips a centre the
# sums would take.
cdef float64_t PRUNE_FACTOR = 4.0 * (1.0 + 2e-9)


cdef inline float64_t _prune_limit(const _bounds_t* bounds, float64_t sq) noexcept nogil:
    """Centres z -> c with delta2 below this may take a point at sq from z."""
    return PRUNE_FACTOR * sq + 8.0 * bounds.floor_x

cdef int _simd_level = si_simd_level()


def simd_level():
    """The kernel in use: 0 generic, 1 AVX2 and FMA, 2 AVX-512F."""
    return _simd_level


def set_simd_level(level):
    """Use a kernel no higher than ``level`` (for tests); returns the old level."""
    global _simd_level
    old = _simd_level
    _simd_level = max(0, min(int(level), si_simd_level()))
    return old


cdef inline void _dot_rows(
    int level, const floating_t** rows, Py_ssize_t n_rows, const floating_t* panel,
    Py_ssize_t ld_panel, Py_ssize_t n_cols, Py_ssize_t d, floating_t* out, Py_ssize_t ld_out,
) noexcept nogil:
    if floating_t is float:
        si_dot_f32(level, rows, n_rows, panel, ld_panel, n_cols, d, out, ld_out)
    else:
        si_dot_f64(level, rows, n_rows, panel, ld_panel, n_cols, d, out, ld_out)


cdef inline float64_t _sq_distance(const floating_t* a, const floating_t* b, Py_ssize_t d) noexcept nogil:
    """The squared distance every decision uses: float64, four accumulators."""
    cdef Py_ssize_t t = 0
    cdef float64_t s0 = 0.0, s1 = 0.0, s2 = 0.0, s3 = 0.0, e0, e1, e2, e3
    while t + 4 <= d:
        e0 = <float64_t> a[t] - <float64_t> b[t]
        e1 = <float64_t> a[t + 1] - <float64_t> b[t + 1]
        e2 = <float64_t> a[t + 2] - <float64_t> b[t + 2]
        e3 = <float64_t> a[t + 3] - <float64_t> b[t + 3]
        s0 += e0 * e0
        s1 += e1 * e1
        s2 += e2 * e2
        s3 += e3 * e3
        t += 4
    while t < d:
        e0 = <float64_t> a[t] - <float64_t> b[t]
        s0 += e0 * e0
        t += 1
    return (s0 + s1) + (s2 + s3)


cdef inline float64_t _lower_bound(
    const _bounds_t* bounds, float64_t nu2_a, float64_t nu_a, float64_t nu2_b, float64_t nu_b,
    float64_t product,
) noexcept nogil:
    """A lower bound on _sq_distance(a, b) from the copy's norms and product."""
    cdef float64_t e = nu_a + nu_b
    return ((nu2_a + nu2_b - 2.0 * product - bounds.kappa * e * e - bounds.floor) * bounds.scale2
            - bounds.floor_x)


def _error_bounds(Py_ssize_t d, bint single):
    """(kappa, floor, floor_x): |estimate - _sq_distance| is at most
    (kappa (||x|| + ||c||)^2 + floor) scale2 + floor_x, with the estimate and
    the norms in the units of the scaled copy, whose coordinates are below 1.

    With u the unit roundoff of the copy and g(m) = m u / (1 - m u): rounding
    the centred, scaled coordinates moves a distance by at most
    u (||x|| + ||c||), so its square by (2u + u^2) (||x|| + ||c||)^2; the
    d-term inner product errs by g(d) ||x|| ||c|| <= g(d) / 4 (||x|| + ||c||)^2,
    counted twice; the float64 norms, the float64 sum of the estimate and
    ``_sq_distance`` itself add a few float64 g(d + 4). The factor 1.5 covers
    second-order terms. ``floor`` covers underflow in the copy's precision,
    even flushed to zero: each coordinate errs by at most the smallest normal
    number t, moving the square by at most 8 d t, and the inner product's
    operations add at most 2 d t each, twice. ``floor_x`` does the same for
    the float64 sums themselves. kappa is infinite (check every pair) if d u
    is not small.
    """
    cdef float64_t u64 = 2.0 ** -53
    cdef float64_t u = 2.0 ** -24 + u64 if single else u64
    cdef float64_t tiny = 2.0 ** -126 if single else 2.0 ** -1022
    cdef float64_t floor_x = (2.0 * d + 8.0) * 2.0 ** -1021
    if d * u > 0.01:
        return INFINITY, INFINITY, floor_x
    cdef float64_t g = d * u / (1.0 - d * u)
    cdef float64_t g64 = (d + 4) * u64 / (1.0 - (d + 4) * u64)
    return (1.5 * (2.0 * u + u * u + 0.5 * g + 3.0 * g64 + 8.0 * u64),
            (16.0 * d + 32.0) * tiny, floor_x)


# ------------------------------------------------------------------ runs
cdef int _compare_keys(const void* a, const void* b) noexcept nogil:
    # Farthest first; equal distances by point number.
    cdef const _key_t* x = <const _key_t*> a
    cdef const _key_t* y = <const _key_t*> b
    if x.sq != y.sq:
        return -1 if x.sq > y.sq else 1
    return (x.point > y.point) - (x.point < y.point)


cdef void _sort_run(
    offset_t* points, float64_t* sq, float64_t* nu2, Py_ssize_t length, _key_t* keys,
) noexcept nogil:
    """Sort a run of points and their values farthest first (equal distances
    by point number)."""
    cdef Py_ssize_t t
    for t in range(length):
        keys[t].sq = sq[t]
        keys[t].nu2 = nu2[t]
        keys[t].point = points[t]
    qsort(keys, length, sizeof(_key_t), _compare_keys)
    for t in range(length):
        points[t] = keys[t].point
        sq[t] = keys[t].sq
        nu2[t] = keys[t].nu2


cdef Py_ssize_t _rows_within(
    const _bounds_t* bounds, const float64_t* sq, Py_ssize_t length, float64_t delta2,
) noexcept nogil:
    """How many rows of a run (``sq`` decreasing) have a prune limit above delta2."""
    cdef Py_ssize_t lo = 0, hi = length, mid
    while lo < hi:
        mid = (lo + hi) >> 1
        if _prune_limit(bounds, sq[mid]) > delta2:
            lo = mid + 1
        else:
            hi = mid
    return lo


# ---------------------------------------------------------- the batch
cdef inline bint _beats(float64_t sq_a, offset_t a, float64_t sq_b, offset_t b) noexcept nogil:
    """Whether point a comes before point b as the next centre."""
    return sq_a > sq_b or (sq_a == sq_b and a < b)


cdef void _sift_down(
    offset_t* heap, Py_ssize_t size, Py_ssize_t at, const float64_t* cand_sq, const offset_t* cand,
) noexcept nogil:
    """Restore the heap below ``at`` (the first candidate in line on top)."""
    cdef Py_ssize_t child
    cdef offset_t item = heap[at]
    while True:
        child = 2 * at + 1
        if child >= size:
            break
        if child + 1 < size and _beats(cand_sq[heap[child + 1]], cand[heap[child + 1]],
                                       cand_sq[heap[child]], cand[heap[child]]):
            child += 1
        if not _beats(cand_sq[heap[child]], cand[heap[child]], cand_sq[item], cand[item]):
            break
        heap[at] = heap[child]
        at = child
    heap[at] = item


cdef Py_ssize_t _choose_batch(
    const floating_t* X, const floating_t* W, Py_ssize_t d, int level, const _bounds_t* bounds,
    const float64_t* nu2,
    const offset_t* cand, float64_t* cand_sq, offset_t* cand_upto, offset_t* heap, Py_ssize_t q,
    offset_t* centres, Py_ssize_t k0, Py_ssize_t k_stop,
    floating_t* batch_panel, Py_ssize_t ld_panel, float64_t* batch_nu2, float64_t* batch_nu,
    floating_t* products,
    bint has_outside, float64_t outside_sq, offset_t outside_point, bint* finished,
) noexcept nogil:
    """Add centres from the candidates while the first of them in line is
    ahead of every point outside them; return the new number of centres.

    ``cand_sq[t]`` is the squared distance of point ``cand[t]`` to centres
    0 .. cand_upto[t] - 1, so at least its distance to all of them.
    ``(outside_sq, outside_point)`` is the first point in line outside the
    candidates when the round began. Centre k0 + j becomes column j of the
    batch panel. Sets ``finished`` when every point coincides with a centre.
    """
    cdef Py_ssize_t t, m, j0, n_new, k = k0
    cdef float64_t v, s, nu_p
    cdef offset_t p
    cdef const floating_t* row
    for t in range(q):
        heap[t] = t
    for t in range(q // 2 - 1, -1, -1):
        _sift_down(heap, q, t, cand_sq, cand)
    while k < k_stop:
        t = heap[0]
        p = cand[t]
        if cand_upto[t] < k:
            # Bring it up to date with the centres added since.
            j0 = cand_upto[t] - k0
            n_new = k - cand_upto[t]
            row = &W[p * d]
            _dot_rows(level, &row, 1, batch_panel + j0, ld_panel, (n_new + 15) & ~15, d,
                      products, ld_panel)
            v = cand_sq[t]
            nu_p = sqrt(nu2[p])
            for m in range(n_new):
                if _lower_bound(bounds, nu2[p], nu_p, batch_nu2[j0 + m], batch_nu[j0 + m],
                                products[m]) > v:
                    continue
                s = _sq_distance(&X[p * d], &X[centres[k0 + j0 + m] * d], d)
                if s < v:
                    v = s
            cand_sq[t] = v
            cand_upto[t] = k
            _sift_down(heap, q, 0, cand_sq, cand)
            continue
        if has_outside and not _beats(cand_sq[t], p, outside_sq, outside_point):
            break
        if cand_sq[t] <= 0.0:
            finished[0] = True
            break
        centres[k] = p
        for m in range(d):
            batch_panel[m * ld_panel + k - k0] = W[p * d + m]
        batch_nu2[k - k0] = nu2[p]
        batch_nu[k - k0] = sqrt(nu2[p])
        k += 1
        cand_sq[t] = 0.0
        cand_upto[t] = k
        _sift_down(heap, q, 0, cand_sq, cand)
    return k


cdef Py_ssize_t _near_centres(
    const _bounds_t* bounds, const floating_t* products, Py_ssize_t n_batch,
    float64_t nu2_z, const float64_t* batch_nu2, const float64_t* batch_nu, float64_t limit2,
    float64_t* near_delta2, offset_t* near_col, float64_t* nearest2,
) noexcept nogil:
    """List the batch centres c whose lower bound ``delta2`` on d(z, c)^2 is
    below ``limit2``, from centre z's products with them; return how many.
    ``nearest2`` gets the smallest delta2 listed."""
    cdef Py_ssize_t j, found = 0
    cdef float64_t nu_z = sqrt(nu2_z), low
    nearest2[0] = INFINITY
    if limit2 <= 0.0:
        return 0
    for j in range(n_batch):
        low = _lower_bound(bounds, nu2_z, nu_z, batch_nu2[j], batch_nu[j], products[j])
        if low < 0.0:
            low = 0.0
        if low < limit2:
            near_delta2[found] = low
            near_col[found] = j
            found += 1
            if low < nearest2[0]:
                nearest2[0] = low
    return found


cdef inline Py_ssize_t _calls_needing(
    float64_t delta2, const float64_t* limits, Py_ssize_t n_calls,
) noexcept nogil:
    """How many of the calls need a centre (their limits are decreasing)."""
    cdef Py_ssize_t lo = 0, hi = n_calls, mid
    while lo < hi:
        mid = (lo + hi) >> 1
        if delta2 < limits[mid]:
            lo = mid + 1
        else:
            hi = mid
    return lo


cdef void _apply_unit(
    const floating_t* X, const floating_t* W, Py_ssize_t d, int level, const _bounds_t* bounds,
    const offset_t* run, float64_t* sq, offset_t* assignment, const float64_t* nu2, Py_ssize_t length,
    const float64_t* near_delta2, const offset_t* near_col, Py_ssize_t n_near,
    const floating_t* batch_panel, Py_ssize_t ld_panel, const float64_t* batch_nu2,
    const float64_t* batch_nu, const offset_t* centres, Py_ssize_t k0,
    floating_t* panel, floating_t* products, const floating_t** row_ptrs,
    float64_t* col_delta2, offset_t* col_centre,
) noexcept nogil:
    """Apply the batch (centres k0, k0 + 1, ...) to ``length`` rows of one
    cluster's run, farthest first: points ``run``, with their squared
    distances ``sq`` to their centres, those centres and their copy's
    squared norms ``nu2``.

    ``near_*`` list the batch centres the cluster may lose points to, with
    lower bounds ``delta2`` on their squared distance to its centre; a row at
    distance r from it needs those with delta2 < _prune_limit(r^2). Rows go to
    the kernel ROWS_PER_CALL at a time, with the columns packed so that each
    call's are a prefix.
    """
    cdef Py_ssize_t n_calls = (length + ROWS_PER_CALL - 1) // ROWS_PER_CALL
    cdef Py_ssize_t ends[CALLS_PER_UNIT + 1]
    cdef float64_t limits[CALLS_PER_UNIT]
    cdef Py_ssize_t n_cols, m, t, r, h, c, call, i
    cdef float64_t s, limit, nu_i, exact
    cdef offset_t a, centre
    cdef const floating_t* src
    cdef floating_t* dst

    # Call c needs the centres with delta2 < limits[c] (decreasing in c). A
    # counting sort puts the columns in decreasing order of how many calls
    # need them; then ends[c + 1] ends the prefix of call c.
    for call in range(n_calls):
        limits[call] = _prune_limit(bounds, sq[call * ROWS_PER_CALL])
        ends[call] = 0
    ends[n_calls] = 0
    for m in range(n_near):
        ends[_calls_needing(near_delta2[m], limits, n_calls)] += 1
    n_cols = 0
    for call in range(n_calls, 0, -1):
        t = ends[call]
        ends[call] = n_cols
        n_cols += t
    if n_cols == 0:
        return
    for m in range(n_near):
        c = _calls_needing(near_delta2[m], limits, n_calls)
        if c > 0:
            col_delta2[ends[c]] = near_delta2[m]
            col_centre[ends[c]] = near_col[m]
            ends[c] += 1
    for t in range(d):
        src = &batch_panel[t * ld_panel]
        dst = &panel[t * ld_panel]
        for m in range(n_cols):
            dst[m] = src[col_centre[m]]
        for m in range(n_cols, (n_cols + 15) & ~15):
            dst[m] = 0

    for call in range(n_calls):
        c = call * ROWS_PER_CALL
        h = min(<Py_ssize_t> ROWS_PER_CALL, length - c)
        n_cols = ends[call + 1]
        if n_cols == 0:
            break
        for r in range(h):
            row_ptrs[r] = &W[run[c + r] * d]
        _dot_rows(level, row_ptrs, h, panel, ld_panel, (n_cols + 15) & ~15, d, products, ld_panel)
        for r in range(h):
            i = run[c + r]
            s = sq[c + r]
            a = assignment[c + r]
            limit = _prune_limit(bounds, s)
            nu_i = sqrt(nu2[c + r])
            for m in range(n_cols):
                if col_delta2[m] >= limit:
                    continue
                centre = col_centre[m]
                if _lower_bound(bounds, nu2[c + r], nu_i, batch_nu2[centre], batch_nu[centre],
                                products[r * ld_panel + m]) > s:
                    continue
                exact = _sq_distance(&X[i * d], &X[centres[k0 + centre] * d], d)
                # the nearest centre wins, the earliest among equally near ones
                if exact < s or (exact == s and a > k0 + centre):
                    s = exact
                    a = k0 + centre
            sq[c + r] = s
            assignment[c + r] = a


# ------------------------------------------------------------------ main
def farthest_point_clustering(
    const floating_t[:, ::1] X,
    Py_ssize_t max_centers,
    Py_ssize_t first,
    n_threads=None,
    progress=None,
):
    """Return (centres, assignment, distance_to_centre, covering_radius).

    ``centres`` are row numbers of X in the order chosen (first one given).
    Stops early when every point coincides with a centre, so duplicates
    collapse and fewer than ``max_centers`` centres may come back.
    ``progress``, if given, is called as progress(n_centres_so_far) after
    each batch of centres.
    """
    cdef Py_ssize_t n = X.shape[0], d = X.shape[1]
    # Scratch is per thread, for as many threads as any step may use.
    cdef int max_workers = effective_threads(n_threads)
    cdef int n_workers = effective_threads(n_threads, n * d)
    cdef int step_workers, tid, level = _simd_level
    cdef bint single = floating_t is float
    dtype = np.float32 if single else np.float64
    cdef Py_ssize_t i, t, b, u, h, k, k0, q, n_units, n_batch, batch_max
    cdef Py_ssize_t pos, length, active, report_every = max(1, max_centers // 100)
    cdef Py_ssize_t ld_batch = ((<Py_ssize_t> BATCH_MAX + 15) & ~15) + 16
    cdef offset_t outside_point = 0
    cdef float64_t acc, v, scale, outside_sq = 0.0
    cdef bint finished = False, has_outside
    cdef Py_ssize_t pairs
    cdef _bounds_t bounds

    # The working copy: centred at the mean, scaled by a power of two so that
    # its coordinates are below 1 (exactly, before rounding to its precision).
    mean = np.asarray(X).mean(axis=0, dtype=np.float64)
    cdef const float64_t[::1] mu = mean
    nu2_arr = np.empty(n, dtype=np.float64)
    cdef float64_t[::1] nu2 = nu2_arr
    for i in prange(n, nogil=True, num_threads=n_workers, schedule="static"):
        acc = 0.0
        for t in range(d):
            v = fabs(<float64_t> X[i, t] - mu[t])
            if v > acc:
                acc = v
        nu2[i] = acc  # the row's largest centred coordinate, for the scale
    exponent = math.frexp(float(nu2_arr.max()))[1]
    scale = math.ldexp(1.0, -exponent)
    bounds.kappa, bounds.floor, bounds.floor_x = _error_bounds(d, single)
    bounds.scale2 = math.ldexp(1.0, 2 * exponent)
    W_arr = np.empty((n, d), dtype=dtype)
    cdef floating_t[:, ::1] W = W_arr
    for i in prange(n, nogil=True, num_threads=n_workers, schedule="static"):
        acc = 0.0
        for t in range(d):
            W[i, t] = <floating_t> ((<float64_t> X[i, t] - mu[t]) * scale)
            acc = acc + <float64_t> W[i, t] * <float64_t> W[i, t]
        nu2[i] = acc

    # Cluster b is the points run[start[b] : start[b] + count[b]], farthest
    # from centre b first. Their squared distances to their centres, those
    # centres and the copy's squared norms are kept in the same order, in
    # rsq, rcentre and rnu2 (and in spare arrays while they are regrouped).
    centres_arr = np.empty(max_centers, dtype=np.int64)
    cdef offset_t[::1] centres = centres_arr
    centres[0] = first
    run_arr = np.arange(n, dtype=np.int64)
    rsq_arr = np.empty(n, dtype=np.float64)
    rnu2_arr = nu2_arr.copy()
    rcentre_arr = np.zeros(n, dtype=np.int64)
    spare_run_arr = np.empty(n, dtype=np.int64)
    spare_sq_arr = np.empty(n, dtype=np.float64)
    spare_nu2_arr = np.empty(n, dtype=np.float64)
    start_arr = np.zeros(max_centers, dtype=np.int64)
    count_arr = np.zeros(max_centers, dtype=np.int64)
    cursor_arr = np.zeros(max_centers, dtype=np.int64)
    keys_arr = np.empty(n * sizeof(_key_t), dtype=np.uint8)
    cdef offset_t[::1] run = run_arr
    cdef float64_t[::1] rsq = rsq_arr
    cdef float64_t[::1] rnu2 = rnu2_arr
    cdef offset_t[::1] rcentre = rcentre_arr
    cdef offset_t[::1] spare_run = spare_run_arr
    cdef float64_t[::1] spare_sq = spare_sq_arr
    cdef float64_t[::1] spare_nu2 = spare_nu2_arr
    cdef offset_t[::1] start = start_arr
    cdef offset_t[::1] count = count_arr
    cdef offset_t[::1] cursor = cursor_arr
    cdef unsigned char[::1] keys_mem = keys_arr
    cdef _key_t* keys = <_key_t*> &keys_mem[0]
    for i in prange(n, nogil=True, num_threads=n_workers, schedule="static"):
        rsq[i] = _sq_distance(&X[i, 0], &X[first, 0], d)
    k = 1
    count[0] = n
    with nogil:
        _sort_run(&run[0], &rsq[0], &rnu2[0], n, keys)

    # The batch: its centres as the columns of a panel, their norms, and for
    # each older centre the batch centres near it (row b of the near table,
    # n_batch entries per row).
    batch_nu2_arr = np.empty(BATCH_MAX, dtype=np.float64)
    batch_nu_arr = np.empty(BATCH_MAX, dtype=np.float64)
    batch_panel_arr = np.zeros((d, ld_batch), dtype=dtype)
    near_size = min(max_centers * <Py_ssize_t> BATCH_MAX, max(<Py_ssize_t> NEAR_ENTRIES, max_centers))
    near_delta2_arr = np.empty(near_size, dtype=np.float64)
    near_col_arr = np.empty(near_size, dtype=np.int64)
    near_count_arr = np.zeros(max_centers, dtype=np.int64)
    nearest2_arr = np.zeros(max_centers, dtype=np.float64)
    cdef float64_t[::1] batch_nu2 = batch_nu2_arr
    cdef float64_t[::1] batch_nu = batch_nu_arr
    cdef floating_t[:, ::1] batch_panel = batch_panel_arr
    cdef float64_t[::1] near_delta2 = near_delta2_arr
    cdef offset_t[::1] near_col = near_col_arr
    cdef offset_t[::1] near_count = near_count_arr
    cdef float64_t[::1] nearest2 = nearest2_arr

    # Candidates for the batch.
    cand_arr = np.empty(min(n, <Py_ssize_t> CANDIDATES_MAX), dtype=np.int64)
    cand_sq_arr = np.empty(len(cand_arr), dtype=np.float64)
    cand_upto_arr = np.empty(len(cand_arr), dtype=np.int64)
    heap_arr = np.empty(len(cand_arr), dtype=np.int64)
    cdef offset_t[::1] cand = cand_arr
    cdef float64_t[::1] cand_sq = cand_sq_arr
    cdef offset_t[::1] cand_upto = cand_upto_arr
    cdef offset_t[::1] heap = heap_arr

    # Units of parallel work: up to ROWS_PER_UNIT rows of one cluster.
    max_units = max_centers + n // ROWS_PER_UNIT + 1
    unit_cluster_arr = np.empty(max_units, dtype=np.int64)
    unit_start_arr = np.empty(max_units, dtype=np.int64)
    unit_length_arr = np.empty(max_units, dtype=np.int64)
    cdef offset_t[::1] unit_cluster = unit_cluster_arr
    cdef offset_t[::1] unit_start = unit_start_arr
    cdef offset_t[::1] unit_length = unit_length_arr

    # Per-thread scratch.
    panels_arr = np.empty((max_workers, d * ld_batch), dtype=dtype)
    products_arr = np.empty((max_workers, ROWS_PER_CALL * ld_batch), dtype=dtype)
    col_delta2_arr = np.empty((max_workers, ld_batch), dtype=np.float64)
    col_centre_arr = np.empty((max_workers, ld_batch), dtype=np.int64)
    cdef floating_t[:, ::1] panels = panels_arr
    cdef floating_t[:, ::1] products = products_arr
    cdef float64_t[:, ::1] col_delta2 = col_delta2_arr
    cdef offset_t[:, ::1] col_centre = col_centre_arr

    cdef const floating_t** row_ptrs = <const floating_t**> malloc(
        max_workers * ROWS_PER_CALL * sizeof(void*))
    cdef const floating_t** centre_ptrs = <const floating_t**> malloc(max_centers * sizeof(void*))
    if row_ptrs == NULL or centre_ptrs == NULL:
        free(row_ptrs)
        free(centre_ptrs)
        raise MemoryError()
    try:
        centre_ptrs[0] = &W[first, 0]
        q = min(n, <Py_ssize_t> CANDIDATES_START)
        while k < max_centers and not finished:
            k0 = k
            batch_max = max(1, min(<Py_ssize_t> BATCH_MAX, NEAR_ENTRIES // k0, max_centers - k0))
            # 1. The q points first in line as the next centre (largest
            # distance, then smallest row number), the first point after
            # them, and the batch.
            has_outside = q < n
            if has_outside:
                threshold = np.partition(rsq_arr, n - q)[n - q]
                above = np.flatnonzero(rsq_arr > threshold)
                equal = np.sort(run_arr[rsq_arr == threshold])
                needed = q - len(above)
                cand_arr[:len(above)] = run_arr[above]
                cand_sq_arr[:len(above)] = rsq_arr[above]
                cand_arr[len(above):q] = equal[:needed]
                cand_sq_arr[len(above):q] = threshold
                if len(equal) > needed:
                    outside_sq, outside_point = threshold, equal[needed]
                else:
                    outside_sq = np.max(rsq_arr, where=rsq_arr < threshold, initial=-1.0)
                    outside_point = run_arr[rsq_arr == outside_sq].min()
            else:
                cand_arr[:q] = run_arr
                cand_sq_arr[:q] = rsq_arr
            cand_upto_arr[:q] = k0
            with nogil:
                k = _choose_batch(
                    &X[0, 0], &W[0, 0], d, level, &bounds, &nu2[0],
                    &cand[0], &cand_sq[0], &cand_upto[0], &heap[0], q,
                    &centres[0], k0, k0 + batch_max,
                    &batch_panel[0, 0], ld_batch, &batch_nu2[0], &batch_nu[0], &products[0, 0],
                    has_outside, outside_sq, outside_point, &finished,
                )
            n_batch = k - k0
            if n_batch == 0:
                break
            if k < k0 + batch_max and not finished and 2 * n_batch < batch_max:
                # the candidates ran out early: take more next time
                q = min(n, 2 * q, <Py_ssize_t> CANDIDATES_MAX)
            for i in range(k0, k):
                centre_ptrs[i] = &W[centres[i], 0]

            # 2. For each older centre, the batch centres that may take some
            # of its points.
            step_workers = effective_threads(n_threads, (k0 * n_batch * d) >> 6)
            for u in prange((k0 + ROWS_PER_CALL - 1) // ROWS_PER_CALL, nogil=True,
                            num_threads=step_workers, schedule="static"):
                tid = threadid()
                b = u * ROWS_PER_CALL
                h = min(<Py_ssize_t> ROWS_PER_CALL, k0 - b)
                _dot_rows(level, centre_ptrs + b, h, &batch_panel[0, 0], ld_batch,
                          (n_batch + 15) & ~15, d, &products[tid, 0], ld_batch)
                for i in range(h):
                    near_count[b + i] = _near_centres(
                        &bounds, &products[tid, i * ld_batch], n_batch,
                        nu2[centres[b + i]], &batch_nu2[0], &batch_nu[0],
                        _prune_limit(&bounds, rsq[start[b + i]]),
                        &near_delta2[(b + i) * n_batch], &near_col[(b + i) * n_batch],
                        &nearest2[b + i])

            # 3. The rows of each cluster that need some batch centre, in
            # units, applied in parallel.
            n_units = 0
            pairs = 0
            with nogil:
                for b in range(k0):
                    if near_count[b] == 0:
                        continue
                    active = _rows_within(&bounds, &rsq[start[b]], count[b], nearest2[b])
                    pairs += active * near_count[b]
                    pos = 0
                    while pos < active:
                        length = min(<Py_ssize_t> ROWS_PER_UNIT, active - pos)
                        unit_cluster[n_units] = b
                        unit_start[n_units] = start[b] + pos
                        unit_length[n_units] = length
                        n_units += 1
                        pos += length
            step_workers = effective_threads(n_threads, (pairs * d) >> 6)
            for u in prange(n_units, nogil=True, num_threads=step_workers, schedule="dynamic"):
                tid = threadid()
                b = unit_cluster[u]
                _apply_unit(
                    &X[0, 0], &W[0, 0], d, level, &bounds,
                    &run[unit_start[u]], &rsq[unit_start[u]], &rcentre[unit_start[u]],
                    &rnu2[unit_start[u]], unit_length[u],
                    &near_delta2[b * n_batch], &near_col[b * n_batch], near_count[b],
                    &batch_panel[0, 0], ld_batch, &batch_nu2[0], &batch_nu[0], &centres[0], k0,
                    &panels[tid, 0], &products[tid, 0], row_ptrs + tid * ROWS_PER_CALL,
                    &col_delta2[tid, 0], &col_centre[tid, 0],
                )

            # 4. Moved points join their new centre's run. The older runs keep
            # their order, still farthest first; the new runs are the last.
            with nogil:
                for b in range(k):
                    count[b] = 0
                for pos in range(n):
                    count[rcentre[pos]] += 1
                pos = 0
                for b in range(k):
                    start[b] = pos
                    cursor[b] = pos
                    pos += count[b]
                for pos in range(n):
                    b = rcentre[pos]
                    i = cursor[b]
                    cursor[b] += 1
                    spare_run[i] = run[pos]
                    spare_sq[i] = rsq[pos]
                    spare_nu2[i] = rnu2[pos]
            run, spare_run = spare_run, run
            rsq, spare_sq = spare_sq, rsq
            rnu2, spare_nu2 = spare_nu2, rnu2
            run_arr, spare_run_arr = spare_run_arr, run_arr
            rsq_arr, spare_sq_arr = spare_sq_arr, rsq_arr
            rnu2_arr, spare_nu2_arr = spare_nu2_arr, rnu2_arr
            step_workers = effective_threads(n_threads, 4 * (n - start[k0]))
            for b in prange(k0, k, nogil=True, num_threads=step_workers, schedule="dynamic"):
                _sort_run(&run[start[b]], &rsq[start[b]], &rnu2[start[b]], count[b], keys + start[b])
            with nogil:
                for b in range(k):
                    for pos in range(start[b], start[b] + count[b]):
                        rcentre[pos] = b
            if progress is not None and k // report_every > k0 // report_every:
                progress(k)
    finally:
        free(row_ptrs)
        free(centre_ptrs)

    dist_arr = np.empty(n, dtype=np.float64)
    dist_arr[run_arr] = np.sqrt(rsq_arr)
    assignment_arr = np.empty(n, dtype=np.int64)
    assignment_arr[run_arr] = rcentre_arr
    return centres_arr[:k].copy(), assignment_arr, dist_arr, float(dist_arr.max())
