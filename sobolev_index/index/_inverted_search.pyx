"""Exact top-k search through an inverted file over edges, for p up to 16
and for p = inf (a finite p above 16 is scanned elsewhere).

Private: the index's Python layer (``inverted.py``) checks every array
these loops read before calling in here (each posting list when a search
first reads it), so they trust their inputs; the exceptions are the
stored measures, whose pointers are checked there and each candidate's
supports here (_row_ok) before its features are rebuilt, and the dense
values, checked here in each row read (_dense_ok). The arrays are built
by _inverted_build.

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
value (D - allowance) is at most the threshold: the k-th smallest upper
value (D + allowance) or exact value found so far, in its own row range or
in any other range searched for the same query. Candidates still within
the threshold at the end get their exact value (no cancellation), the
row's features rebuilt from its stored measure, so results are exact.

p = inf (S_inf = max_c |q_c - x_c|, no weights) has no such identity, but
the dense columns alone bound it from below: max over c in H of
|q_c - x_c| <= S_inf(q, x). That bound is read for every row, from the
dense block only, and the rows it cannot rule out get their exact value.

A radius search runs the same loops with each query's radius (in the
same units) as that query's threshold from the start, so its bounds prune
as a k-th value would; without a limit it keeps no k best, and each
thread appends the rows within their query's radius to a list of its own.
The radius may differ from query to query: a k-NN search within a bound
(say the k-th distance another index already found for the query) is a
radius search with a limit. Each unit of work counts
what it bounded, read and scored (and, when asked, times its phases) in
its thread's scratch, copied to the unit's own place when it ends: no
counter is shared between threads.
"""
from cython.parallel cimport prange, threadid
from libc.math cimport fabs, fmin, pow, INFINITY
from libc.stdint cimport int32_t, int64_t, uint8_t, uint16_t, INT64_MAX
from libc.stdlib cimport free, qsort, realloc
from libc.string cimport memset

import numpy as np

from .._features cimport touch_row
from .._powers cimport abs_pow, power_kind, pth_root
from .._typedefs cimport float32_t, float64_t, node_t, offset_t
from ._heap cimport Found, Tagged, heap_offer, worse
from ._inverted_common cimport BLOCK_ROWS, BLOCK_SHIFT, N_COARSE, float32_max, value_max
from .._openmp_helpers import effective_threads

cdef extern from *:
    """
    #if defined(__SSE2__) || defined(__x86_64__) || defined(_M_X64)
    #include <xmmintrin.h>
    /* Whether this thread's SSE unit flushes subnormal results to zero or
       reads subnormal inputs as zero (MXCSR bits FTZ and DAZ). */
    static inline int si_subnormals_flushed(void) {
        return (_mm_getcsr() & 0x8040u) != 0;
    }
    static inline int si_set_subnormal_flush(int on) {
        unsigned int csr = _mm_getcsr();
        _mm_setcsr(on ? (csr | 0x8040u) : (csr & ~0x8040u));
        return (csr & 0x8040u) != 0;
    }
    #else
    static inline int si_subnormals_flushed(void) { return 0; }
    static inline int si_set_subnormal_flush(int on) { (void) on; return 0; }
    #endif
    #if defined(_POSIX_C_SOURCE) || defined(__unix__) || defined(__APPLE__)
    #include <time.h>
    /* Seconds on a monotonic clock, for the search statistics. */
    static inline double si_now(void) {
        struct timespec t;
        clock_gettime(CLOCK_MONOTONIC, &t);
        return (double) t.tv_sec + 1e-9 * (double) t.tv_nsec;
    }
    #else
    #include <time.h>
    static inline double si_now(void) {
        struct timespec t;
        timespec_get(&t, TIME_UTC);
        return (double) t.tv_sec + 1e-9 * (double) t.tv_nsec;
    }
    #endif
    #if defined(__GNUC__) || defined(__clang__)
    #define SI_PREFETCH(address) __builtin_prefetch(address)
    static inline double si_load(const double* target) {
        double value;
        __atomic_load(target, &value, __ATOMIC_RELAXED);
        return value;
    }
    static inline void si_lower(double* target, double value) {
        double current;
        __atomic_load(target, &current, __ATOMIC_RELAXED);
        while (value < current && !__atomic_compare_exchange(
                   target, &current, &value, 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
        }
    }
    #else
    #define SI_PREFETCH(address) ((void)0)
    /* Without atomics a racing store may leave the larger of two values:
       every value stored is still a valid bound, only a looser one. */
    static inline double si_load(const double* target) {
        return *(const volatile double*) target;
    }
    static inline void si_lower(double* target, double value) {
        if (value < *(volatile double*) target) *(volatile double*) target = value;
    }
    #endif
    """
    void SI_PREFETCH(const void* address) noexcept nogil
    int si_subnormals_flushed() noexcept nogil
    int si_set_subnormal_flush(int on) noexcept nogil
    float64_t si_load(const float64_t* target) noexcept nogil
    void si_lower(float64_t* target, float64_t value) noexcept nogil
    float64_t si_now() noexcept nogil

# Far above the rounding error of a sum of a few thousand terms (about
# 1e-13 of the summed magnitudes), and far below any gap between distances
# that matters; it only widens the candidate set, never the result.
cdef float64_t ERR_RTOL = 1e-11
# Posting values and the dense block are float32: each value is within
# 2^-24 of its float64 value (relative), or 2^-149 (absolute) below
# float32's normal range. The row norms |x|_L and |x|_H are sums over these
# float32 values too, so the identity gives the value of the rounded row x';
# features lie in [0, 1], and w_c | |q_c - x'_c|^p - |q_c - x_c|^p | <=
# p 2^-24 w_c max(q_c, x_c)^p, plus p 2^-149 w_c for a value below the
# normal range. Summed over the edges of q or x, the posted part moves by
# at most p 2^-24 (|q|_L + |x|_L), the dense part, and each group-norm bound
# summed over groups, by at most p 2^-24 (|q|_H + |x|_H); the absolute
# parts together by at most p 2^-149 times the sum of the root's weights
# (a row's own tiny values count as well as the query's, and a group norm
# is at most the 1/p power of its weight). The rows' group norms (coarse
# and fine) are kept as float32 too, rounded from their float64 values:
# that moves a group bound by at most p 2^-24 (|q|_H + |x|_H) again, plus
# p 2^-150 per group whose norms are below 1 (under float32's normal
# range the rounding is absolute), which the allowance covers with a term
# for each group of the root. Norms above float32's range are held at its
# largest value, the query's too: |min(a, M) - min(b, M)| <= |a - b|. The
# allowance takes at least twice each.
cdef float64_t VALUE_RTOL = 2.0 ** -22
cdef float64_t VALUE_ATOL = 2.0 ** -146
# A thread that flushes subnormal numbers to zero (FTZ/DAZ, which a library
# built for speed may turn on) reads a subnormal float32 value as 0: an
# error of up to 2^-126 rather than 2^-149, so its absolute allowance is
# this many times larger. (Checked on x86 only.)
cdef float64_t FLUSHED_ATOL_FACTOR = 2.0 ** 23
# p = inf: a dense value is within 2^-24 of its float64 value (features
# lie in [0, 1]), or 2^-126 where a thread reads subnormal values as 0, so
# the largest dense difference, less this, is below that of the true row.
cdef float64_t MAX_ALLOWANCE = 2.0 ** -22
cdef float64_t FLOAT32_MAX = float32_max()
# What each unit of work counts (see search_segments): rows whose dense
# part was read and their value computed from the identity (at p = inf:
# rows whose dense bound was read), exact values computed (candidates
# re-ranked), rows whose group bound was computed, chunks of rows walked,
# chunks in which a row was read (at p = inf: scored exactly), and rows
# of the search's scope whose cheapest bound was computed.
cdef enum:
    C_READ = 0
    C_EXACT = 1
    C_REFINED = 2
    C_CHUNKS = 3
    C_CHUNKS_SCORED = 4
    C_BOUNDED = 5
    N_COUNTS = 6
# And, when asked, the seconds it spends walking posting lists, on the
# cheapest bounds, on the rows those let through, and on exact values.
cdef enum:
    T_POSTINGS = 0
    T_BOUNDS = 1
    T_SCORING = 2
    T_EXACT = 3
    N_TIMES = 4
COUNT_NAMES = ("rows_read", "exact", "refined", "blocks", "blocks_scored", "bounded")
TIME_NAMES = ("postings", "bounds", "scoring", "exact")
# Results a radius search without a limit first makes room for, per thread.
cdef Py_ssize_t GROW_START = 256
# Doubles per cache line (64 bytes).
cdef Py_ssize_t SHARED_STRIDE = 8
# Posting values are prefetched this many entries ahead of the loop.
cdef Py_ssize_t PREFETCH_AHEAD = 64


cdef inline void _add_min(float64_t* acc, const uint16_t* rows, const float32_t* values,
                          offset_t e, offset_t e_end, float64_t c, float64_t v) noexcept nogil:
    """acc[rows[e]] += c min(v, values[e]) for e in e..e_end (p = 1).

    Eight postings per step, loaded four at a time, and one prefetch per
    stream and step: the loop is bound by its instruction count, not by
    memory."""
    cdef float64_t x0, x1, x2, x3
    while e + 8 <= e_end:
        SI_PREFETCH(values + e + PREFETCH_AHEAD)
        SI_PREFETCH(rows + e + PREFETCH_AHEAD)
        x0 = values[e]
        x1 = values[e + 1]
        x2 = values[e + 2]
        x3 = values[e + 3]
        acc[rows[e]] += c * (v if v < x0 else x0)
        acc[rows[e + 1]] += c * (v if v < x1 else x1)
        acc[rows[e + 2]] += c * (v if v < x2 else x2)
        acc[rows[e + 3]] += c * (v if v < x3 else x3)
        x0 = values[e + 4]
        x1 = values[e + 5]
        x2 = values[e + 6]
        x3 = values[e + 7]
        acc[rows[e + 4]] += c * (v if v < x0 else x0)
        acc[rows[e + 5]] += c * (v if v < x1 else x1)
        acc[rows[e + 6]] += c * (v if v < x2 else x2)
        acc[rows[e + 7]] += c * (v if v < x3 else x3)
        e = e + 8
    while e < e_end:
        x0 = values[e]
        acc[rows[e]] += c * (v if v < x0 else x0)
        e = e + 1


cdef inline void _add_product(float64_t* acc, const uint16_t* rows, const float32_t* values,
                              offset_t e, offset_t e_end, float64_t c) noexcept nogil:
    """acc[rows[e]] += c values[e] for e in e..e_end (p = 2)."""
    while e + 4 <= e_end:
        SI_PREFETCH(values + e + PREFETCH_AHEAD)
        SI_PREFETCH(rows + e + PREFETCH_AHEAD)
        acc[rows[e]] += c * values[e]
        acc[rows[e + 1]] += c * values[e + 1]
        acc[rows[e + 2]] += c * values[e + 2]
        acc[rows[e + 3]] += c * values[e + 3]
        e = e + 4
    while e < e_end:
        acc[rows[e]] += c * values[e]
        e = e + 1


cdef int _compare_found(const void* a, const void* b) noexcept nogil:
    """qsort's comparison of results: best first."""
    cdef const Found* x = <const Found*> a
    cdef const Found* y = <const Found*> b
    if worse(x, y):
        return 1
    if worse(y, x):
        return -1
    return 0


cdef struct SegmentView:
    # One segment's arrays (see SegmentArrays) and, for the p searched, its
    # row norms and the rows that may be returned.
    Py_ssize_t n_rows, n_cols, n_dense, n_groups
    const offset_t* ptr
    # Posting rows as offsets into their BLOCK_ROWS-row block, values as float32
    # (see block_offsets and to_float32): half the bytes a query streams.
    const uint16_t* post_rows
    const float32_t* post_values
    const int32_t* col_slot
    const float64_t* weight
    # float32, like the posting values.
    const float32_t* dense
    const offset_t* dense_ptr
    const float64_t* dense_weight
    # The sum of the weights of each root's columns (all of them).
    const float64_t* root_weight
    const int64_t* group_slots
    const int64_t* group_ptr
    const int64_t* root_groups
    const int64_t* coarse_of
    const int64_t* doc_ids
    # Where each posting list enters each block of block_rows rows (row
    # ranges start at block boundaries), or NULL: the segment is one range.
    const offset_t* block_start
    Py_ssize_t block_rows, block_stride
    # The stored measures (row pointers, nodes, masses, and each row's
    # normalising factor): exact values rebuild a candidate's features.
    const offset_t* m_indptr
    const node_t* m_nodes
    const float64_t* m_masses
    const float64_t* m_scale
    const float64_t* x_low
    const float64_t* x_high
    const float32_t* x_coarse
    const float32_t* x_group_root
    const uint8_t* mask


cdef struct Search:
    # What one search call shares between its work units.
    Py_ssize_t n_q, n_sel, k, chunk
    int kind
    bint single
    float64_t p
    float64_t value_rtol, value_atol
    const int64_t* positions
    const float64_t* eta
    # A radius search: a result of query i whose value exceeds ``bound[i]``
    # is dropped, and ``bound[i]`` starts query i's shared threshold (inf:
    # no bound). With ``grow`` (no limit) there is no k: every result goes
    # to the thread's list (see _offer). ``timing``: the units time their
    # phases.
    bint radius, grow, timing
    const float64_t* bound
    const offset_t* q_indptr
    const node_t* q_indices
    const float64_t* q_data
    # Per root of the index: the tree's parent pointers and its root node.
    const node_t** parents
    const node_t* root_nodes


cdef struct Scratch:
    # One thread's buffers, and its query's state within the current chunk.
    float64_t* acc
    float64_t* bounds
    Tagged* seed
    float64_t* qh
    float64_t* qg_root
    float64_t* qc_root
    float64_t* norms
    int64_t* cursor
    int64_t* cursor_end
    float64_t* upper
    int64_t* cand_rows
    float64_t* cand_lows
    Py_ssize_t cap, j0
    # A candidate's features, rebuilt from its measure (see touch_row): the
    # stamps with the last one used, the edge masses, the edges; and the
    # query's values by edge (zero between calls). One slot per node each.
    offset_t* f_stamp
    offset_t* f_last
    float64_t* f_acc
    node_t* f_touched
    float64_t* f_query
    # The current unit's counts and seconds (see C_READ and T_POSTINGS).
    int64_t counts[N_COUNTS]
    float64_t times[N_TIMES]
    # A radius search without a limit: the thread's results and their
    # queries, grown as needed (out_failed: an allocation failed).
    Found* out
    int64_t* out_query
    Py_ssize_t out_n, out_cap
    bint out_failed
    # A candidate whose stored measure is not one (see _row_ok), or whose
    # dense values are outside [0, 1] (bad_dense), or -1.
    int64_t bad_segment, bad_row
    bint bad_dense


cdef class SegmentArrays:
    """Raw pointers into one segment's checked arrays, which it keeps alive:
    the kernel reads many segments in one call without touching Python."""
    cdef SegmentView view
    cdef list _keep
    cdef Py_ssize_t n_roots

    def __cinit__(self, ptr, post_rows, post_values, col_slot, weight, dense, dense_ptr,
                  dense_weight, root_weight, group_slots, group_ptr, root_groups,
                  coarse_of, doc_ids,
                  measures, row_scale, Py_ssize_t n_roots,
                  Py_ssize_t n_cols,
                  block_start, Py_ssize_t block_rows):
        self._keep = []
        self.n_roots = n_roots
        dense = np.asarray(dense)
        self.view.n_rows = dense.shape[0]
        self.view.n_cols = n_cols
        self.view.n_dense = dense.shape[1]
        self.view.n_groups = len(group_ptr) - 1
        self.view.ptr = <const offset_t*> self._pointer(ptr, np.int64)
        self.view.post_rows = <const uint16_t*> self._pointer(post_rows, np.uint16)
        self.view.post_values = <const float32_t*> self._pointer(post_values, np.float32)
        self.view.col_slot = <const int32_t*> self._pointer(col_slot, np.int32)
        self.view.weight = <const float64_t*> self._pointer(weight, np.float64)
        self.view.dense = <const float32_t*> self._pointer(dense, np.float32)
        self.view.dense_ptr = <const offset_t*> self._pointer(dense_ptr, np.int64)
        self.view.dense_weight = <const float64_t*> self._pointer(dense_weight, np.float64)
        self.view.root_weight = <const float64_t*> self._pointer(root_weight, np.float64)
        self.view.group_slots = <const int64_t*> self._pointer(group_slots, np.int64)
        self.view.group_ptr = <const int64_t*> self._pointer(group_ptr, np.int64)
        self.view.root_groups = <const int64_t*> self._pointer(root_groups, np.int64)
        self.view.coarse_of = <const int64_t*> self._pointer(coarse_of, np.int64)
        self.view.doc_ids = <const int64_t*> self._pointer(doc_ids, np.int64)
        self.view.block_start = NULL
        self.view.block_rows = max(1, block_rows)
        self.view.block_stride = 0
        if block_start is not None:
            self.view.block_stride = np.asarray(block_start).shape[1]
            self.view.block_start = <const offset_t*> self._pointer(block_start, np.int64)
        indptr, nodes, masses = measures
        self.view.m_indptr = <const offset_t*> self._pointer(indptr, np.int64)
        self.view.m_nodes = <const node_t*> self._pointer(nodes, np.int32)
        self.view.m_masses = <const float64_t*> self._pointer(masses, np.float64)
        self.view.m_scale = <const float64_t*> self._pointer(row_scale, np.float64)

    cdef const void* _pointer(self, values, dtype) except NULL:
        # Empty arrays get one element so that the pointer is never NULL.
        cdef object arr = np.ascontiguousarray(values, dtype=dtype).reshape(-1)
        if arr.shape[0] == 0:
            arr = np.zeros(1, dtype=dtype)
        self._keep.append(arr)
        return <const void*> <size_t> arr.ctypes.data


cdef class RowNorms:
    """A segment's row norms for one p (see InvertedFile.norms), kept alive."""
    cdef const float64_t* low
    cdef const float64_t* high
    cdef const float32_t* coarse_root
    cdef const float32_t* group_root
    cdef tuple _keep

    def __cinit__(self, low, high, coarse_root, group_root):
        arrays = tuple(np.ascontiguousarray(a, dtype=dtype) for a, dtype in
                       ((low, np.float64), (high, np.float64), (coarse_root, np.float32),
                        (group_root, np.float32)))
        arrays = tuple(a if a.size else np.zeros(1, a.dtype) for a in arrays)
        self._keep = arrays
        self.low = <const float64_t*> <size_t> arrays[0].ctypes.data
        self.high = <const float64_t*> <size_t> arrays[1].ctypes.data
        self.coarse_root = <const float32_t*> <size_t> arrays[2].ctypes.data
        self.group_root = <const float32_t*> <size_t> arrays[3].ctypes.data


cdef inline float64_t _combine(const Search* se, Py_ssize_t s, float64_t total,
                               float64_t part) noexcept nogil:
    """Add root s's p-th power ``part`` to a total in the caller's units."""
    if part < 0.0:
        part = 0.0
    if se.single:
        return total + part
    return total + se.eta[s] * pth_root(part, se.p, se.kind)


cdef inline float64_t _low_part(const Search* se, const SegmentView* sg, const Scratch* sc,
                                Py_ssize_t s, Py_ssize_t j, float64_t* err) noexcept nogil:
    """D_L of root s for row j, and the allowance of the row's value."""
    cdef Py_ssize_t at = se.positions[s] * sg.n_rows + j
    err[0] = sc.norms[3 * s + 2] + (ERR_RTOL + se.value_rtol) * (sg.x_low[at] + sg.x_high[at])
    return sc.norms[3 * s] + sg.x_low[at] - sc.acc[s * se.chunk + j - sc.j0]


cdef float64_t _bound_norm(const Search* se, const SegmentView* sg, const Scratch* sc,
                           Py_ssize_t j) noexcept nogil:
    """Lower bound from the dense part's coarse group norms."""
    cdef Py_ssize_t s, c
    cdef float64_t total = 0.0, err, part
    cdef const float32_t* x_coarse
    for s in range(se.n_sel):
        part = _low_part(se, sg, sc, s, j, &err) - err
        x_coarse = sg.x_coarse + se.positions[s] * N_COARSE * sg.n_rows + j
        for c in range(N_COARSE):
            part = part + abs_pow(sc.qc_root[s * N_COARSE + c] - x_coarse[c * sg.n_rows],
                                  se.p, se.kind)
        total = _combine(se, s, total, part)
    return total


cdef inline void _prefetch_row(const float32_t* row, Py_ssize_t n) noexcept nogil:
    """Ask for every cache line of row[0:n]."""
    cdef Py_ssize_t h
    if n == 0:
        return
    for h in range(0, n, 16):
        SI_PREFETCH(row + h)
    SI_PREFETCH(row + n - 1)


cdef void _bound_rows(const Search* se, const SegmentView* sg, const Scratch* sc,
                      Py_ssize_t j0, Py_ssize_t j1) noexcept nogil:
    """_bound_norm of rows j0..j1 into sc.bounds (inf for rows not to be
    returned). With one root this is a flat loop over row arrays that the
    compiler can vectorise: it runs for every row."""
    cdef Py_ssize_t j, n = j1 - j0
    cdef Py_ssize_t base = se.positions[0] * sg.n_rows + j0
    cdef const float64_t* x_low = sg.x_low + base
    cdef const float64_t* x_high = sg.x_high + base
    cdef const float64_t* acc = sc.acc
    cdef const uint8_t* mask = sg.mask + j0
    cdef float64_t* bounds = sc.bounds
    cdef float64_t q_low = sc.norms[0], err_q = sc.norms[2]
    cdef float64_t low_rtol = ERR_RTOL + se.value_rtol
    cdef float64_t d, d0, d1, d2, d3
    # The coarse groups' norms, one array each (written for N_COARSE = 4).
    base = se.positions[0] * N_COARSE * sg.n_rows + j0
    cdef const float32_t* x0 = sg.x_coarse + base
    cdef const float32_t* x1 = x0 + sg.n_rows
    cdef const float32_t* x2 = x1 + sg.n_rows
    cdef const float32_t* x3 = x2 + sg.n_rows
    cdef float64_t q0 = sc.qc_root[0], q1 = sc.qc_root[1], q2 = sc.qc_root[2], q3 = sc.qc_root[3]
    if se.n_sel != 1:
        for j in range(n):
            bounds[j] = _bound_norm(se, sg, sc, j0 + j) if mask[j] else INFINITY
        return
    if se.kind == 0:
        for j in range(n):
            d = q_low + x_low[j] - acc[j] - (err_q + low_rtol * (x_low[j] + x_high[j]))
            d = d + ((fabs(q0 - x0[j]) + fabs(q1 - x1[j]))
                     + (fabs(q2 - x2[j]) + fabs(q3 - x3[j])))
            bounds[j] = (d if d > 0.0 else 0.0) if mask[j] else INFINITY
    elif se.kind == 1:
        for j in range(n):
            d0 = q0 - x0[j]
            d1 = q1 - x1[j]
            d2 = q2 - x2[j]
            d3 = q3 - x3[j]
            d = q_low + x_low[j] - acc[j] - (err_q + low_rtol * (x_low[j] + x_high[j]))
            d = d + (d0 * d0 + d1 * d1) + (d2 * d2 + d3 * d3)
            bounds[j] = (d if d > 0.0 else 0.0) if mask[j] else INFINITY
    else:
        for j in range(n):
            d = q_low + x_low[j] - acc[j] - (err_q + low_rtol * (x_low[j] + x_high[j]))
            d = d + (pow(fabs(q0 - x0[j]), se.p) + pow(fabs(q1 - x1[j]), se.p)) \
                + (pow(fabs(q2 - x2[j]), se.p) + pow(fabs(q3 - x3[j]), se.p))
            bounds[j] = (d if d > 0.0 else 0.0) if mask[j] else INFINITY


cdef float64_t _bound_groups(const Search* se, const SegmentView* sg, const Scratch* sc,
                             Py_ssize_t j) noexcept nogil:
    """Lower bound from the norms of groups of dense columns: tighter."""
    cdef Py_ssize_t s, r, g
    cdef float64_t total = 0.0, err, part
    cdef const float32_t* row = sg.x_group_root + j * sg.n_groups
    for s in range(se.n_sel):
        r = se.positions[s]
        part = _low_part(se, sg, sc, s, j, &err) - err
        for g in range(sg.root_groups[r], sg.root_groups[r + 1]):
            part = part + abs_pow(sc.qg_root[g] - row[g], se.p, se.kind)
        total = _combine(se, s, total, part)
    return total


cdef void _value(const Search* se, const SegmentView* sg, const Scratch* sc, Py_ssize_t j,
                 float64_t* lower, float64_t* upper) noexcept nogil:
    """The row's value from the identity, widened by its allowance both ways."""
    cdef Py_ssize_t s, r, h
    cdef float64_t err, d, lo = 0.0, up = 0.0
    cdef const float32_t* row = sg.dense + j * sg.n_dense
    cdef const float64_t* qh = sc.qh
    for s in range(se.n_sel):
        r = se.positions[s]
        d = _low_part(se, sg, sc, s, j, &err)
        if se.kind == 0:
            for h in range(sg.dense_ptr[r], sg.dense_ptr[r + 1]):
                d = d + sg.dense_weight[h] * fabs(qh[h] - row[h])
        elif se.kind == 1:
            for h in range(sg.dense_ptr[r], sg.dense_ptr[r + 1]):
                d = d + sg.dense_weight[h] * (qh[h] - row[h]) * (qh[h] - row[h])
        else:
            for h in range(sg.dense_ptr[r], sg.dense_ptr[r + 1]):
                d = d + sg.dense_weight[h] * pow(fabs(qh[h] - row[h]), se.p)
        lo = _combine(se, s, lo, d - err)
        up = _combine(se, s, up, d + err)
    lower[0] = lo
    upper[0] = up


cdef bint _row_ok(const SegmentView* sg, Py_ssize_t j) noexcept nogil:
    """Whether stored measure j has node ids in 0..n_nodes-1 and finite
    masses >= 0. The Python layer checks the measures' pointers when a
    segment is first searched, and each candidate's supports here, before
    its features are rebuilt from them: a search then reads only the
    measures of its candidates."""
    cdef offset_t t
    cdef node_t v
    cdef float64_t m
    for t in range(sg.m_indptr[j], sg.m_indptr[j + 1]):
        v = sg.m_nodes[t]
        m = sg.m_masses[t]
        # (NaN fails both comparisons.)
        if v < 0 or v >= sg.n_cols or not (m >= 0.0 and m < INFINITY):
            return False
    return True


cdef inline bint _candidate_ok(const SegmentView* sg, Py_ssize_t segment, Scratch* sc,
                               Py_ssize_t j) noexcept nogil:
    """_row_ok, noting a bad row in the thread's scratch."""
    if _row_ok(sg, j):
        return True
    _note_bad(sc, segment, j, False)
    return False


cdef inline void _note_bad(Scratch* sc, Py_ssize_t segment, Py_ssize_t j,
                           bint dense) noexcept nogil:
    sc.bad_segment = segment
    sc.bad_row = j
    sc.bad_dense = dense


cdef bint _dense_ok(const Search* se, const SegmentView* sg, Py_ssize_t j) noexcept nogil:
    """Whether row j's dense values for the selected roots lie in [0, 1]
    (value_max): the Python layer checks the whole dense block only where
    something reads all of it; a search checks the rows it reads."""
    cdef Py_ssize_t s, r, h
    cdef float64_t v, top = value_max()
    cdef const float32_t* row = sg.dense + j * sg.n_dense
    for s in range(se.n_sel):
        r = se.positions[s]
        for h in range(sg.dense_ptr[r], sg.dense_ptr[r + 1]):
            v = row[h]
            # (NaN fails both comparisons.)
            if not (v >= 0.0 and v <= top):
                return False
    return True


cdef offset_t _touch_pair(const Search* se, const SegmentView* sg, const Scratch* sc,
                          Py_ssize_t s, Py_ssize_t i, Py_ssize_t j) noexcept nogil:
    """Row j's features for selected root s, rebuilt from its measure into
    sc.f_acc (its edges in sc.f_touched, stamped with the new sc.f_last[0]),
    and query i's values by edge into sc.f_query; returns the row's number
    of edges. The caller puts sc.f_query back to zero."""
    cdef Py_ssize_t r = se.positions[s]
    cdef offset_t t
    sc.f_last[0] += 1
    for t in range(se.q_indptr[s * se.n_q + i], se.q_indptr[s * se.n_q + i + 1]):
        sc.f_query[se.q_indices[t]] = se.q_data[t]
    return touch_row(se.parents[r], se.root_nodes[r], sg.m_nodes, sg.m_masses,
                     sg.m_scale[j], sg.m_indptr[j], sg.m_indptr[j + 1],
                     sc.f_stamp, sc.f_last[0], sc.f_acc, sc.f_touched)


cdef float64_t _exact_value(const Search* se, const SegmentView* sg, const Scratch* sc,
                            Py_ssize_t i, Py_ssize_t j) noexcept nogil:
    """The value of query i and row j, row j's features rebuilt from its
    measure as when it was added, term by term over the edges of either:
    no cancellation, so no allowance."""
    cdef Py_ssize_t s, r
    cdef offset_t a, a_end, t, n_touched
    cdef node_t c
    cdef offset_t row_stamp
    cdef const float64_t* w
    cdef float64_t part, total = 0.0
    for s in range(se.n_sel):
        r = se.positions[s]
        a = se.q_indptr[s * se.n_q + i]
        a_end = se.q_indptr[s * se.n_q + i + 1]
        w = sg.weight + r * sg.n_cols
        n_touched = _touch_pair(se, sg, sc, s, i, j)
        row_stamp = sc.f_last[0]
        part = 0.0
        # The row's edges (the query's value there, or 0), then the
        # query's edges the row lacks.
        for t in range(n_touched):
            c = sc.f_touched[t]
            part = part + w[c] * abs_pow(sc.f_query[c] - sc.f_acc[c], se.p, se.kind)
        for t in range(a, a_end):
            c = se.q_indices[t]
            if sc.f_stamp[c] != row_stamp:
                part = part + w[c] * abs_pow(se.q_data[t], se.p, se.kind)
            sc.f_query[c] = 0.0
        total = _combine(se, s, total, part)
    return total


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
        n_touched = _touch_pair(se, sg, sc, s, i, j)
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
    its dense columns; inf for a row not to be returned."""
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
            # A value outside [0, 1] (or NaN): the caller reports the row.
            if not (v >= 0.0 and v <= top):
                return -1.0
            d = fabs(sc.qh[h] - v)
            if d > part:
                part = d
        part = part - MAX_ALLOWANCE
        if part > 0.0:
            total = part if se.single else total + se.eta[s] * part
    return total


cdef void _search_unit_max(const Search* se, const SegmentView* sg, Py_ssize_t segment,
                           Py_ssize_t i, Py_ssize_t row_lo, Py_ssize_t row_hi, Scratch* sc,
                           Found* heap, float64_t* shared) noexcept nogil:
    """_search_unit for p = inf: every row's dense bound, chunk by chunk;
    while the unit's top k is not full the rows of smallest bound go
    first; rows whose bound is within the k-th exact value get theirs."""
    cdef Py_ssize_t k = se.k
    cdef Py_ssize_t t, j, j0, j1, seed_size
    cdef Py_ssize_t n_found = 0
    cdef int64_t exact_before
    cdef float64_t lb, thr, other, t_mark = 0.0, t_now
    cdef float64_t* bounds = sc.bounds
    cdef Tagged seed
    cdef Found item
    _set_query_dense(se, sg, sc, i, False)
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
                _note_bad(sc, segment, j, True)
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
            thr = _threshold(NULL, 0, heap, n_found, k, other)
            # Masked and already-seen rows carry an infinite bound, which an
            # infinite threshold would not reject.
            if lb > thr or lb == INFINITY:
                continue
            bounds[j - j0] = INFINITY
            if not _candidate_ok(sg, segment, sc, j):
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
    _finish_unit(se, sg, sc, i, heap, n_found)


cdef void _set_query_dense(const Search* se, const SegmentView* sg, Scratch* sc,
                           Py_ssize_t i, bint clear) noexcept nogil:
    """Query i's values in the dense columns into sc.qh (zeros with
    ``clear``: sc.qh is zero between units)."""
    cdef Py_ssize_t s, r, t, h
    for s in range(se.n_sel):
        r = se.positions[s]
        for t in range(se.q_indptr[s * se.n_q + i], se.q_indptr[s * se.n_q + i + 1]):
            h = sg.col_slot[r * sg.n_cols + se.q_indices[t]]
            if h >= 0:
                sc.qh[h] = 0.0 if clear else se.q_data[t]


cdef void _finish_unit(const Search* se, const SegmentView* sg, Scratch* sc, Py_ssize_t i,
                       Found* heap, Py_ssize_t n_found) noexcept nogil:
    """End a unit: empty places of its heap, and sc.qh back to zero."""
    cdef Py_ssize_t t
    for t in range(n_found, se.k):
        heap[t].value = INFINITY
        heap[t].doc = INT64_MAX
        heap[t].segment = -1
        heap[t].row = -1
    _set_query_dense(se, sg, sc, i, True)


cdef inline float64_t _threshold(const float64_t* upper, Py_ssize_t n_upper,
                                 const Found* heap, Py_ssize_t n_found, Py_ssize_t k,
                                 float64_t other) noexcept nogil:
    """The value a row must not exceed: the k-th smallest upper value of
    this unit's candidates, its k-th exact value, or ``other``, the least
    such value another unit of the same query has published."""
    cdef float64_t thr = other
    if k == 0:
        return thr  # a radius search without a limit
    if n_upper == k and upper[0] < thr:
        thr = upper[0]
    if n_found == k and heap[0].value < thr:
        thr = heap[0].value
    return thr


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


cdef void _settle(const Search* se, const SegmentView* sg, Py_ssize_t segment, Py_ssize_t i,
                  Scratch* sc, Py_ssize_t count, float64_t threshold,
                  Found* heap, Py_ssize_t* n_found) noexcept nogil:
    """Exact values of the candidates still within ``threshold``, offered
    to the unit's results."""
    cdef Py_ssize_t t
    cdef Found item
    cdef float64_t started = si_now() if se.timing else 0.0
    for t in range(count):
        if sc.cand_lows[t] <= threshold:
            if not _candidate_ok(sg, segment, sc, sc.cand_rows[t]):
                continue
            sc.counts[C_EXACT] += 1
            item.value = _exact_value(se, sg, sc, i, sc.cand_rows[t])
            item.doc = sg.doc_ids[sc.cand_rows[t]]
            item.segment = segment
            item.row = sc.cand_rows[t]
            _offer(se, sc, i, heap, n_found, &item)
    if se.timing:
        sc.times[T_EXACT] += si_now() - started


cdef void _offer(const Search* se, Scratch* sc, Py_ssize_t i, Found* heap,
                 Py_ssize_t* n_found, const Found* item) noexcept nogil:
    """Offer an exact result of query i to the unit's heap of the k best;
    in a radius search only one within query i's bound, and without a
    limit to the thread's list instead (grown by doubling)."""
    cdef Py_ssize_t cap
    cdef void* grown
    # (NaN fails the comparison.)
    if se.radius and not item.value <= se.bound[i]:
        return
    if not se.grow:
        heap_offer(heap, n_found, se.k, item)
        return
    if sc.out_n == sc.out_cap:
        cap = max(GROW_START, 2 * sc.out_cap)
        grown = realloc(sc.out, cap * sizeof(Found))
        if grown == NULL:
            sc.out_failed = True
            return
        sc.out = <Found*> grown
        grown = realloc(sc.out_query, cap * sizeof(int64_t))
        if grown == NULL:
            sc.out_failed = True
            return
        sc.out_query = <int64_t*> grown
        sc.out_cap = cap
    sc.out[sc.out_n] = item[0]
    sc.out_query[sc.out_n] = i
    sc.out_n += 1


cdef void _search_unit(const Search* se, const SegmentView* sg, Py_ssize_t segment,
                       Py_ssize_t i, Py_ssize_t row_lo, Py_ssize_t row_hi, Scratch* sc,
                       Found* heap, float64_t* shared) noexcept nogil:
    """The k best rows of sg[row_lo:row_hi] for query i into ``heap`` (a
    full heap also lowers ``shared``, the query's bound across units)."""
    cdef Py_ssize_t k = se.k, chunk = se.chunk, n_cols = sg.n_cols, n_groups = sg.n_groups
    cdef Py_ssize_t s, r, t, h, gg, cg, j, j0, j1, q_entry, seed_size, block_base, at, limit
    cdef bint new_block, chunk_ends
    cdef Py_ssize_t n_found = 0, n_upper = 0, count = 0
    cdef int kind = se.kind
    cdef int64_t read_before
    cdef float64_t p = se.p, v, c, x, lb, thr, lo, up, other
    cdef float64_t t_mark = 0.0, t_now, exact_before = 0.0
    # Each unit looks at the mode of the thread that runs it.
    cdef float64_t atol = se.value_atol * (
        FLUSHED_ATOL_FACTOR if si_subnormals_flushed() else 1.0)
    cdef Tagged seed
    cdef offset_t e, e_end, e_stop, slot
    cdef float64_t* acc = sc.acc
    cdef float64_t* bounds = sc.bounds
    cdef const uint16_t* post_rows = sg.post_rows
    cdef const float32_t* post_values = sg.post_values
    cdef const float64_t* weight = sg.weight

    if kind == 3:
        _search_unit_max(se, sg, segment, i, row_lo, row_hi, sc, heap, shared)
        return
    # The query's norms, its dense values and group norms, and where each of
    # its posting lists enters this row range. These reads go to a different
    # place for every column, mostly missing the cache: asked for all at
    # once first, they wait on memory together rather than one by one.
    for s in range(se.n_sel):
        r = se.positions[s]
        for t in range(se.q_indptr[s * se.n_q + i], se.q_indptr[s * se.n_q + i + 1]):
            slot = r * n_cols + se.q_indices[t]
            SI_PREFETCH(sg.col_slot + slot)
            SI_PREFETCH(sg.ptr + slot)
            if row_lo != 0:
                SI_PREFETCH(sg.block_start + slot * sg.block_stride + row_lo // sg.block_rows)
    q_entry = 0
    for s in range(se.n_sel):
        r = se.positions[s]
        sc.norms[3 * s] = 0.0
        sc.norms[3 * s + 1] = 0.0
        for t in range(se.q_indptr[s * se.n_q + i], se.q_indptr[s * se.n_q + i + 1]):
            slot = r * n_cols + se.q_indices[t]
            h = sg.col_slot[slot]
            if h >= 0:
                sc.qh[h] = se.q_data[t]
            else:
                sc.norms[3 * s] += weight[slot] * abs_pow(se.q_data[t], p, kind)
                if row_lo == 0:
                    sc.cursor[q_entry] = sg.ptr[slot]
                else:
                    sc.cursor[q_entry] = sg.block_start[slot * sg.block_stride
                                                        + row_lo // sg.block_rows]
                # The list's first postings, for the first chunk.
                SI_PREFETCH(post_rows + sc.cursor[q_entry])
                SI_PREFETCH(post_values + sc.cursor[q_entry])
            q_entry = q_entry + 1
        for gg in range(sg.root_groups[r], sg.root_groups[r + 1]):
            v = 0.0
            for t in range(sg.group_ptr[gg], sg.group_ptr[gg + 1]):
                h = sg.group_slots[t]
                v = v + sg.dense_weight[h] * abs_pow(sc.qh[h], p, kind)
            sc.qg_root[gg] = fmin(pth_root(v, p, kind), FLOAT32_MAX)
            sc.norms[3 * s + 1] += v
        for cg in range(N_COARSE):
            sc.qc_root[s * N_COARSE + cg] = 0.0
        for h in range(sg.dense_ptr[r], sg.dense_ptr[r + 1]):
            sc.qc_root[s * N_COARSE + sg.coarse_of[h] - r * N_COARSE] += (
                sg.dense_weight[h] * abs_pow(sc.qh[h], p, kind))
        for cg in range(N_COARSE):
            sc.qc_root[s * N_COARSE + cg] = fmin(
                pth_root(sc.qc_root[s * N_COARSE + cg], p, kind), FLOAT32_MAX)
        # The part of the row's allowance that depends on the query only.
        sc.norms[3 * s + 2] = ((ERR_RTOL + se.value_rtol) * (sc.norms[3 * s] + sc.norms[3 * s + 1])
                               + atol * (sg.root_weight[r] + N_COARSE
                                         + sg.root_groups[r + 1] - sg.root_groups[r]))

    j0 = row_lo
    while j0 < row_hi:
        # Chunks end at multiples of ``chunk`` (a power of two dividing the
        # BLOCK_ROWS-row blocks of the posting offsets): none spans two blocks.
        j1 = (j0 // chunk + 1) * chunk
        if j1 > row_hi:
            j1 = row_hi
        sc.j0 = j0
        sc.counts[C_CHUNKS] += 1
        read_before = sc.counts[C_READ]
        if se.timing:
            t_mark = si_now()
        # Shared posted columns: acc holds sum w g(q_c, x_c) per row. The
        # posting streams are prefetched: short lists restart often, and the
        # hardware prefetcher alone leaves the loop waiting on memory.
        q_entry = 0
        block_base = (j0 >> BLOCK_SHIFT) << BLOCK_SHIFT
        new_block = j0 == row_lo or j0 == block_base
        limit = j1 - block_base
        # Where each list leaves the chunk is known when the chunk ends at
        # the segment's end, its block's end or a table boundary.
        chunk_ends = (j1 == sg.n_rows or j1 == block_base + BLOCK_ROWS
                      or (sg.block_start != NULL and j1 % sg.block_rows == 0))
        for s in range(se.n_sel):
            r = se.positions[s]
            memset(&acc[s * chunk], 0, (j1 - j0) * sizeof(float64_t))
            # Row j of this chunk is acc[at + j - block_base].
            at = s * chunk + block_base - j0
            for t in range(se.q_indptr[s * se.n_q + i], se.q_indptr[s * se.n_q + i + 1]):
                slot = r * n_cols + se.q_indices[t]
                if sg.col_slot[slot] < 0:
                    v = se.q_data[t]
                    e = sc.cursor[q_entry]
                    # Stop at the first row >= j1: by its offset within the
                    # block, and at the block's last posting (offsets start
                    # again at 0 in the next block).
                    if new_block:
                        e_end = sg.ptr[slot + 1]
                        if block_base + BLOCK_ROWS < sg.n_rows:
                            e_end = sg.block_start[slot * sg.block_stride
                                                   + (block_base + BLOCK_ROWS) // sg.block_rows]
                        sc.cursor_end[q_entry] = e_end
                    e_end = sc.cursor_end[q_entry]
                    if kind != 2 and chunk_ends:
                        # The list's end within the chunk is in the table:
                        # the loop then tests nothing but its count.
                        e_stop = e_end
                        if j1 < block_base + BLOCK_ROWS and j1 < sg.n_rows:
                            e_stop = sg.block_start[slot * sg.block_stride + j1 // sg.block_rows]
                        if kind == 0:
                            _add_min(acc + at, post_rows, post_values, e, e_stop,
                                     2.0 * weight[slot], v)
                        else:
                            _add_product(acc + at, post_rows, post_values, e, e_stop,
                                         2.0 * weight[slot] * v)
                        e = e_stop
                    elif kind == 0:
                        c = 2.0 * weight[slot]
                        while e < e_end and post_rows[e] < limit:
                            SI_PREFETCH(post_values + e + PREFETCH_AHEAD)
                            SI_PREFETCH(post_rows + e + PREFETCH_AHEAD)
                            x = post_values[e]
                            acc[at + post_rows[e]] += c * (v if v < x else x)
                            e = e + 1
                    elif kind == 1:
                        c = 2.0 * weight[slot] * v
                        while e < e_end and post_rows[e] < limit:
                            SI_PREFETCH(post_values + e + PREFETCH_AHEAD)
                            SI_PREFETCH(post_rows + e + PREFETCH_AHEAD)
                            acc[at + post_rows[e]] += c * post_values[e]
                            e = e + 1
                    else:
                        c = pow(v, p)
                        while e < e_end and post_rows[e] < limit:
                            x = post_values[e]
                            acc[at + post_rows[e]] += weight[slot] * (
                                c + pow(x, p) - pow(fabs(v - x), p))
                            e = e + 1
                    sc.cursor[q_entry] = e
                q_entry = q_entry + 1

        if se.timing:
            t_now = si_now()
            sc.times[T_POSTINGS] += t_now - t_mark
            t_mark = t_now
        # The cheapest bound of every row; while the top k is not yet full,
        # the rows with the smallest bounds go first, so that the threshold
        # tightens before the scan. Rows that may pass have their group norms
        # prefetched, since the scan reads those next.
        seed_size = 0
        # Read once per chunk and per candidate, not per row: other threads
        # write it, and a read of a line just written waits for it.
        other = si_load(shared)
        thr = _threshold(sc.upper, n_upper, heap, n_found, k, other)
        _bound_rows(se, sg, sc, j0, j1)
        for j in range(j0, j1):
            sc.counts[C_BOUNDED] += sg.mask[j] != 0
        if n_groups or n_upper < k:
            for j in range(j0, j1):
                lb = bounds[j - j0]
                if lb <= thr and lb != INFINITY:
                    _prefetch_row(sg.x_group_root + j * n_groups, n_groups)
                    if n_upper < k:
                        seed.value = lb
                        seed.tag = j
                        heap_offer(sc.seed, &seed_size, k, &seed)
        if se.timing:
            t_now = si_now()
            sc.times[T_BOUNDS] += t_now - t_mark
            t_mark = t_now
            exact_before = sc.times[T_EXACT]
        for t in range(seed_size + (j1 - j0)):
            if t < seed_size:
                j = sc.seed[t].tag
            else:
                j = j0 + t - seed_size
            lb = bounds[j - j0]
            thr = _threshold(sc.upper, n_upper, heap, n_found, k, other)
            # Masked and already-seen rows carry an infinite bound, which an
            # infinite threshold would not reject.
            if lb > thr or lb == INFINITY:
                continue
            bounds[j - j0] = INFINITY  # a seed is not looked at twice
            if n_groups:
                sc.counts[C_REFINED] += 1
                if _bound_groups(se, sg, sc, j) > thr:
                    continue
            if not _dense_ok(se, sg, j):
                _note_bad(sc, segment, j, True)
                continue
            _value(se, sg, sc, j, &lo, &up)
            sc.counts[C_READ] += 1
            if lo > thr:
                continue
            if count == sc.cap:
                # Exact values only for the few rows left at the end; a
                # full list first drops what the threshold now excludes,
                # and rows that still fill it (ties) are settled at once.
                count = _keep_within(sc.cand_rows, sc.cand_lows, count, thr)
                if count == sc.cap:
                    _settle(se, sg, segment, i, sc, count, thr, heap, &n_found)
                    count = 0
            sc.cand_rows[count] = j
            sc.cand_lows[count] = lo
            count = count + 1
            if k == 0:
                continue  # a radius search without a limit: the bound stays
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
            _threshold(sc.upper, n_upper, heap, n_found, k, si_load(shared)), heap, &n_found)
    _finish_unit(se, sg, sc, i, heap, n_found)


cdef inline void _unit_done(const Scratch* sc, int64_t* counts,
                            float64_t* times) noexcept nogil:
    """Copy a finished unit's counts and seconds to its own place."""
    cdef Py_ssize_t c
    for c in range(N_COUNTS):
        counts[c] = sc.counts[c]
    for c in range(N_TIMES):
        times[c] = sc.times[c]


cdef inline Py_ssize_t _lines(Py_ssize_t n_bytes) noexcept nogil:
    """n_bytes rounded up to whole 64-byte cache lines (at least one)."""
    return max(1, (n_bytes + 63) // 64) * 64


cdef inline void* _take(char** free_at, Py_ssize_t n_bytes) noexcept nogil:
    """Carve the next n_bytes (in whole cache lines) out of a block."""
    cdef void* start = <void*> free_at[0]
    free_at[0] += _lines(n_bytes)
    return start


cdef class _RowScratch:
    """One thread's buffers for rebuilding candidate rows (Scratch.f_*),
    one slot per node. Kept between searches (see _take_scratch): clearing
    them at every search would cost a small search as much as its own
    work."""
    cdef readonly object stamp, last, acc, touched, query

    def __cinit__(self, Py_ssize_t n_nodes):
        n = max(1, n_nodes)
        self.stamp = np.zeros(n, dtype=np.int64)
        self.last = np.zeros(1, dtype=np.int64)
        self.acc = np.zeros(n, dtype=np.float64)
        self.touched = np.zeros(n, dtype=np.int32)
        self.query = np.zeros(n, dtype=np.float64)

    cdef void lend(self, Scratch* scratch):
        scratch.f_stamp = <offset_t*> <size_t> self.stamp.ctypes.data
        scratch.f_last = <offset_t*> <size_t> self.last.ctypes.data
        scratch.f_acc = <float64_t*> <size_t> self.acc.ctypes.data
        scratch.f_touched = <node_t*> <size_t> self.touched.ctypes.data
        scratch.f_query = <float64_t*> <size_t> self.query.ctypes.data


# Free _RowScratch objects by node count. A search takes one per thread and
# gives them back when done; list pop and append hold the GIL, so searches
# in several Python threads never share one. At most _POOL_MAX are kept
# per node count.
_POOL = {}
_POOL_MAX = 64


def _take_scratch(Py_ssize_t n_nodes, Py_ssize_t count):
    pool = _POOL.setdefault(n_nodes, [])
    out = []
    while len(out) < count:
        try:
            out.append(pool.pop())
        except IndexError:
            out.append(_RowScratch(n_nodes))
    return out


def _give_back(Py_ssize_t n_nodes, list scratches):
    pool = _POOL.setdefault(n_nodes, [])
    pool.extend(scratches[:max(0, _POOL_MAX - len(pool))])


class BadStoredValue(ValueError):
    """A candidate's stored measure has a node id outside the graph or a
    mass that is not finite and >= 0, or a row's dense values read by the
    search lie outside [0, 1]: args are (segment position, row, whether it
    was the dense values)."""


def _set_subnormal_flush(bint on):
    """Turn flushing of subnormal numbers (FTZ and DAZ) on or off for the
    calling thread; returns whether it was on. For tests of the allowance."""
    return bool(si_set_subnormal_flush(on))


def search_segments(
    list segments, list norms, const uint8_t[::1] mask,
    const offset_t[::1] q_indptr, const node_t[::1] q_indices, const float64_t[::1] q_data,
    Py_ssize_t n_q, const int64_t[::1] positions, const float64_t[::1] eta,
    Py_ssize_t k, float64_t p, Py_ssize_t chunk, Py_ssize_t min_candidates,
    float64_t[:, ::1] out_value, int64_t[:, ::1] out_segment, int64_t[:, ::1] out_row,
    int64_t[:, ::1] out_doc, list parents, const node_t[::1] root_nodes,
    n_threads=None, bound=None, bint grow=False, bint timing=False,
):
    """The k nearest stored rows of each query over several segments, exactly.

    ``segments[g]`` (SegmentArrays) with ``norms[g]`` (RowNorms for this p)
    and rows ``mask[offset_g:offset_g + n_rows_g]`` (segments one after the
    other) that may be returned. Queries are CSR rows of raw edge masses,
    one block of ``n_q`` rows per selected root (``positions[s]`` is the
    root of block s). ``parents[r]`` (int32) and ``root_nodes[r]`` are the
    parent pointers and root of the index's tree r. One selected root
    ranks by p-th powers (by S_inf at p = inf), several by sum_s eta_s S_p;
    ties go to the lower document id.

    Work is cut into units of (query, segment, row range), in parallel; the
    k-th value a unit finds bounds every other unit of its query. A unit
    keeps up to max(4 k, ``min_candidates``) rows whose lower value is
    within its threshold, and computes exact values for those still within
    it at the end (or at once, when ties fill the list); at p = inf it
    computes the exact value of every row whose dense bound is within it
    at once. Row j of
    segment g goes to ``out_segment[i, t] = g``, ``out_row[i, t] = j`` and
    ``out_doc[i, t]`` (its document id) with its value in
    ``out_value[i, t]``, best first; unused places hold inf and -1.

    A radius search gives ``bound``, a float64 array of one value per
    query (in the units above; inf: no bound; None: inf for every query):
    ``bound[i]`` is query i's threshold from the start, in place of a k-th
    value not yet found, and a result of query i above it is dropped.
    With ``grow`` there is no k (pass k = 0 and outputs of no columns):
    every row within its query's bound is a result, kept in lists that
    grow as needed.

    Returns (counts, seconds, grown): per query, the COUNT_NAMES counts
    (int64, n_q x 5) summed over its units, and with ``timing`` the
    thread-seconds its units spent in each of TIME_NAMES (n_q x 4, zeros
    without); ``grown`` is None, or with ``grow`` the results as arrays
    (query, value, doc, segment, row) in no particular order. Raises
    BadStoredValue for a candidate whose stored measure has a node outside
    the graph or a mass that is not finite and >= 0, or for a row read
    whose dense values are outside [0, 1]; MemoryError when the results of
    ``grow`` do not fit in memory.
    """
    cdef Py_ssize_t n_segments = len(segments)
    cdef Py_ssize_t n_sel = positions.shape[0]
    cdef int n_workers = effective_threads(n_threads)
    cdef Py_ssize_t g, i, s, t, u, n_units, n_ranges, n_blocks, offset = 0
    cdef Py_ssize_t max_dense = 1, max_groups = 1, max_entries = 1, work = 0, cap
    cdef SegmentArrays arrays
    cdef RowNorms row_norms
    cdef Search se
    counts_arr = np.zeros((n_q, N_COUNTS), dtype=np.int64)
    times_arr = np.zeros((n_q, N_TIMES))
    no_results = (np.zeros(0, np.int64), np.zeros(0), np.zeros(0, np.int64),
                  np.zeros(0, np.int64), np.zeros(0, np.int64))
    if grow and (k != 0 or out_value.shape[1] != 0):
        raise ValueError(f"a search that grows its results takes k = 0, not {k}")
    if not grow and k < 1:
        raise ValueError(f"k is {k}; expected at least 1")
    bound_arr = np.full(n_q, INFINITY) if bound is None else np.asarray(bound)
    if bound_arr.dtype != np.float64 or bound_arr.shape != (n_q,):
        raise ValueError(f"bound is a {bound_arr.dtype} array of shape {bound_arr.shape}; "
                         f"expected float64 of shape ({n_q},), one value per query")
    bad = np.flatnonzero(~(bound_arr >= 0.0))  # also NaN
    if len(bad):
        raise ValueError(f"bound[{bad[0]}] is {bound_arr[bad[0]]}; expected a value >= 0")
    # Contiguous, and one element even for no queries (for the pointer).
    bound_arr = np.ascontiguousarray(bound_arr) if n_q else np.zeros(1)
    cdef const float64_t[::1] bound_v = bound_arr
    if n_q == 0 or n_segments == 0:
        out_value[:, :] = INFINITY
        out_segment[:, :] = -1
        out_row[:, :] = -1
        out_doc[:, :] = -1
        return counts_arr, times_arr, (no_results if grow else None)

    views_mem = np.zeros(n_segments * sizeof(SegmentView), dtype=np.uint8)
    cdef SegmentView* views = <SegmentView*> <size_t> views_mem.ctypes.data
    for g in range(n_segments):
        arrays = segments[g]
        row_norms = norms[g]
        views[g] = arrays.view
        views[g].x_low = row_norms.low
        views[g].x_high = row_norms.high
        views[g].x_coarse = row_norms.coarse_root
        views[g].x_group_root = row_norms.group_root
        views[g].mask = &mask[offset]
        offset += views[g].n_rows
        max_dense = max(max_dense, views[g].n_dense)
        max_groups = max(max_groups, views[g].n_groups)
        work += views[g].ptr[views[g].n_cols * arrays.n_roots]
        if power_kind(p) == 3:
            # Every row's dense values are read too.
            work += views[g].n_rows * views[g].n_dense
    if offset != mask.shape[0]:
        raise ValueError(f"the mask has {mask.shape[0]} rows; the segments have {offset}")
    cdef Py_ssize_t n_nodes = views[0].n_cols
    cdef Py_ssize_t n_roots = (<SegmentArrays> segments[0]).n_roots
    if len(parents) != n_roots or root_nodes.shape[0] != n_roots or any(
            np.asarray(a).shape != (n_nodes,) or np.asarray(a).dtype != np.int32
            or not np.asarray(a).flags.c_contiguous for a in parents):
        raise ValueError(f"expected {n_roots} contiguous int32 parent arrays of "
                         f"{n_nodes} nodes and as many root nodes")
    parents_mem = np.array([np.asarray(a).ctypes.data for a in parents] or [0],
                           dtype=np.uintp)
    se.parents = <const node_t**> <size_t> parents_mem.ctypes.data
    se.root_nodes = &root_nodes[0]
    for i in range(n_q):
        t = 0
        for s in range(n_sel):
            t += q_indptr[s * n_q + i + 1] - q_indptr[s * n_q + i]
        max_entries = max(max_entries, t)

    # Units: every segment, cut into row ranges of whole blocks while there
    # are fewer queries than threads. Largest first, for balance (a stable
    # insertion sort: there are a few dozen at most).
    cdef Py_ssize_t max_ranges = 1, lo, hi, size
    if n_q < 2 * n_workers:
        max_ranges = (2 * n_workers + n_q - 1) // n_q
    units_arr = np.empty((n_segments * max_ranges, 3), dtype=np.int64)
    cdef int64_t[:, ::1] unit_rows = units_arr
    n_units = 0
    for g in range(n_segments):
        n_blocks = (views[g].n_rows + views[g].block_rows - 1) // views[g].block_rows
        n_ranges = 1
        if views[g].block_start != NULL:
            n_ranges = max(1, min(max_ranges, n_blocks))
        for t in range(n_ranges):
            lo = t * n_blocks // n_ranges * views[g].block_rows
            hi = min(views[g].n_rows, (t + 1) * n_blocks // n_ranges * views[g].block_rows)
            size = hi - lo
            u = n_units
            while u > 0 and unit_rows[u - 1, 2] - unit_rows[u - 1, 1] < size:
                unit_rows[u, 0] = unit_rows[u - 1, 0]
                unit_rows[u, 1] = unit_rows[u - 1, 1]
                unit_rows[u, 2] = unit_rows[u - 1, 2]
                u -= 1
            unit_rows[u, 0] = g
            unit_rows[u, 1] = lo
            unit_rows[u, 2] = hi
            n_units += 1
    units_arr = units_arr[:n_units]
    cdef const int64_t[:, ::1] units = units_arr
    n_workers = 1 if n_q * n_units < 2 else effective_threads(n_threads, work)

    se.n_q = n_q
    se.n_sel = n_sel
    se.k = k
    se.chunk = chunk
    se.kind = power_kind(p)
    se.single = n_sel == 1
    se.p = p
    se.radius = grow or bool((bound_arr < INFINITY).any())
    se.grow = grow
    se.timing = timing
    se.bound = &bound_v[0]
    # (Not used at p = inf: see MAX_ALLOWANCE.)
    se.value_rtol = 0.0 if se.kind == 3 else p * VALUE_RTOL
    se.value_atol = 0.0 if se.kind == 3 else p * VALUE_ATOL
    se.positions = &positions[0]
    se.eta = &eta[0]
    q_indices_arr = np.asarray(q_indices) if q_indices.shape[0] else np.zeros(1, np.int32)
    q_data_arr = np.asarray(q_data) if q_data.shape[0] else np.zeros(1, np.float64)
    cdef const node_t[::1] qi_v = q_indices_arr
    cdef const float64_t[::1] qd_v = q_data_arr
    se.q_indptr = &q_indptr[0]
    se.q_indices = &qi_v[0]
    se.q_data = &qd_v[0]

    # Every thread's buffers start on their own cache lines: a line two
    # threads write would move between their cores on every write. One
    # zeroed block holds them all (qh must start at zero).
    cap = max(4 * k, min_candidates)
    cdef Py_ssize_t per_thread = (
        _lines(sizeof(Scratch))
        + _lines(n_sel * chunk * sizeof(float64_t))     # acc
        + _lines(chunk * sizeof(float64_t))             # bounds
        + _lines(k * sizeof(Tagged))                    # seed
        + _lines(k * sizeof(float64_t))                 # upper
        + _lines(max_dense * sizeof(float64_t))         # qh
        + _lines(max_groups * sizeof(float64_t))        # qg_root
        + _lines(n_sel * N_COARSE * sizeof(float64_t))  # qc_root
        # Per selected root: |q|_L, |q|_H, the query's allowance.
        + _lines(3 * n_sel * sizeof(float64_t))         # norms
        + 2 * _lines(max_entries * sizeof(int64_t))     # cursor, cursor_end
        + _lines(cap * sizeof(int64_t))                 # cand_rows
        + _lines(cap * sizeof(float64_t)))              # cand_lows
    scratch_mem = np.zeros(n_workers * per_thread + 64, dtype=np.uint8)
    cdef char* scratch_base = <char*> <size_t> scratch_mem.ctypes.data
    scratch_base += (-<size_t> scratch_base) % 64
    cdef Py_ssize_t scratch_stride = per_thread
    cdef Scratch* scratch
    cdef char* free_at
    for t in range(n_workers):
        free_at = scratch_base + t * per_thread
        scratch = <Scratch*> _take(&free_at, sizeof(Scratch))
        scratch.acc = <float64_t*> _take(&free_at, n_sel * chunk * sizeof(float64_t))
        scratch.bounds = <float64_t*> _take(&free_at, chunk * sizeof(float64_t))
        scratch.seed = <Tagged*> _take(&free_at, k * sizeof(Tagged))
        scratch.upper = <float64_t*> _take(&free_at, k * sizeof(float64_t))
        scratch.qh = <float64_t*> _take(&free_at, max_dense * sizeof(float64_t))
        scratch.qg_root = <float64_t*> _take(&free_at, max_groups * sizeof(float64_t))
        scratch.qc_root = <float64_t*> _take(&free_at, n_sel * N_COARSE * sizeof(float64_t))
        scratch.norms = <float64_t*> _take(&free_at, 3 * n_sel * sizeof(float64_t))
        scratch.cursor = <int64_t*> _take(&free_at, max_entries * sizeof(int64_t))
        scratch.cursor_end = <int64_t*> _take(&free_at, max_entries * sizeof(int64_t))
        scratch.cand_rows = <int64_t*> _take(&free_at, cap * sizeof(int64_t))
        scratch.cand_lows = <float64_t*> _take(&free_at, cap * sizeof(float64_t))
        scratch.cap = cap
        scratch.out = NULL
        scratch.out_query = NULL
        scratch.out_n = 0
        scratch.out_cap = 0
        scratch.out_failed = False
        scratch.bad_segment = -1
        scratch.bad_row = -1
        scratch.bad_dense = False
    # One cache line per query, for the same reason. A radius search's
    # bound for the query is its threshold from the start.
    shared_arr = np.repeat(bound_arr, SHARED_STRIDE)
    # Each unit's counts and seconds, written by the one thread that runs it.
    unit_counts_arr = np.zeros(n_q * n_units * N_COUNTS, dtype=np.int64)
    unit_times_arr = np.zeros(n_q * n_units * N_TIMES)
    cdef int64_t[::1] unit_counts = unit_counts_arr
    cdef float64_t[::1] unit_times = unit_times_arr
    found_mem = np.zeros(n_q * n_units * k * sizeof(Found), dtype=np.uint8)
    cdef float64_t[::1] shared = shared_arr
    cdef Found* found = <Found*> <size_t> found_mem.ctypes.data

    row_scratch = _take_scratch(n_nodes, n_workers)
    for t in range(n_workers):
        (<_RowScratch> row_scratch[t]).lend(<Scratch*> (scratch_base + t * scratch_stride))
    try:
        _run(&se, views, units, n_q, n_units, k, n_workers, scratch_base, scratch_stride,
             found, shared, out_value, out_segment, out_row, out_doc, &unit_counts[0],
             &unit_times[0])
        for t in range(n_workers):
            scratch = <Scratch*> (scratch_base + t * scratch_stride)
            if scratch.bad_segment >= 0:
                raise BadStoredValue(scratch.bad_segment, scratch.bad_row,
                                     bool(scratch.bad_dense))
            if scratch.out_failed:
                raise MemoryError("the results of a radius search do not fit in memory; "
                                  "give a limit or a smaller radius")
        grown = _grown_results(scratch_base, scratch_stride, n_workers) if grow else None
    finally:
        _give_back(n_nodes, row_scratch)
        for t in range(n_workers):
            scratch = <Scratch*> (scratch_base + t * scratch_stride)
            free(scratch.out)
            free(scratch.out_query)
            scratch.out = NULL
            scratch.out_query = NULL
    counts_arr[:] = unit_counts_arr.reshape(n_q, n_units, N_COUNTS).sum(axis=1)
    if timing:
        times_arr[:] = unit_times_arr.reshape(n_q, n_units, N_TIMES).sum(axis=1)
    return counts_arr, times_arr, grown


cdef tuple _grown_results(char* scratch_base, Py_ssize_t scratch_stride, int n_workers):
    """The threads' lists of a radius search without a limit, as arrays
    (query, value, doc, segment, row)."""
    cdef Py_ssize_t t, e, at = 0, total = 0
    cdef Scratch* scratch
    for t in range(n_workers):
        total += (<Scratch*> (scratch_base + t * scratch_stride)).out_n
    query_arr = np.empty(total, dtype=np.int64)
    value_arr = np.empty(total)
    doc_arr = np.empty(total, dtype=np.int64)
    segment_arr = np.empty(total, dtype=np.int64)
    row_arr = np.empty(total, dtype=np.int64)
    cdef int64_t[::1] query_v = query_arr, doc_v = doc_arr, segment_v = segment_arr
    cdef int64_t[::1] row_v = row_arr
    cdef float64_t[::1] value_v = value_arr
    for t in range(n_workers):
        scratch = <Scratch*> (scratch_base + t * scratch_stride)
        for e in range(scratch.out_n):
            query_v[at] = scratch.out_query[e]
            value_v[at] = scratch.out[e].value
            doc_v[at] = scratch.out[e].doc
            segment_v[at] = scratch.out[e].segment
            row_v[at] = scratch.out[e].row
            at += 1
    return query_arr, value_arr, doc_arr, segment_arr, row_arr


cdef void _run(const Search* se, SegmentView* views, const int64_t[:, ::1] units,
               Py_ssize_t n_q, Py_ssize_t n_units, Py_ssize_t k, int n_workers,
               char* scratch_base, Py_ssize_t scratch_stride, Found* found,
               float64_t[::1] shared, float64_t[:, ::1] out_value,
               int64_t[:, ::1] out_segment, int64_t[:, ::1] out_row,
               int64_t[:, ::1] out_doc, int64_t* unit_counts,
               float64_t* unit_times) noexcept:
    """The units of search_segments, in parallel, then each query's best
    k; each unit's counts and seconds go to its place in ``unit_counts``
    and ``unit_times`` (query by query, unit by unit)."""
    cdef Py_ssize_t t, u, i, take
    cdef Py_ssize_t n_found = n_units * k
    cdef Scratch* sc
    with nogil:
        # Unit after unit, each for every query: a small segment's units
        # then mostly start from the k-th values the big ones have found.
        for t in prange(n_q * n_units, num_threads=n_workers, schedule="dynamic"):
            u = t // n_q
            i = t % n_q
            sc = <Scratch*> (scratch_base + threadid() * scratch_stride)
            memset(sc.counts, 0, N_COUNTS * sizeof(int64_t))
            memset(sc.times, 0, N_TIMES * sizeof(float64_t))
            _search_unit(se, &views[units[u, 0]], units[u, 0], i, units[u, 1], units[u, 2],
                         sc, &found[(i * n_units + u) * k], &shared[i * SHARED_STRIDE])
            _unit_done(sc, unit_counts + (i * n_units + u) * N_COUNTS,
                       unit_times + (i * n_units + u) * N_TIMES)
        for i in prange(n_q, num_threads=min(n_workers, n_q), schedule="static"):
            qsort(&found[i * n_found], n_found, sizeof(Found), _compare_found)
            take = min(k, out_value.shape[1])
            for u in range(take):
                out_value[i, u] = found[i * n_found + u].value
                out_segment[i, u] = found[i * n_found + u].segment
                out_row[i, u] = found[i * n_found + u].row
                out_doc[i, u] = found[i * n_found + u].doc if found[i * n_found + u].row >= 0 else -1
