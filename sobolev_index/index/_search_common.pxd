# What the three kinds of search unit (_search_knn: the k best rows at a
# finite p; _search_radius: every row within a radius at a finite p;
# _search_max: p = inf) share with _inverted_search, which fills these
# structs for a call and runs the units: the error allowances, the
# counters, the C helpers, and the small steps every kind takes (checking a
# candidate's stored measure, rebuilding its features, offering a result,
# ending a unit). See _inverted_search.pyx for the bounds themselves.
#
# Everything here is a type, a constant or an inline function: each unit's
# module compiles its own copy into its loops.
from libc.math cimport INFINITY
from libc.stdint cimport int32_t, int64_t, uint8_t, uint16_t, INT64_MAX
from libc.stdlib cimport realloc

from .._features cimport touch_row
from .._typedefs cimport float32_t, float64_t, node_t, offset_t
from ._heap cimport Found, Tagged

cdef extern from *:
    """
    #ifndef SI_SEARCH_COMMON_H
    #define SI_SEARCH_COMMON_H
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
    /* The allowances explained below, as constants the compiler can fold
       (the literals are the exact powers of two). */
    #define SI_ERR_RTOL 1e-11
    #define SI_VALUE_RTOL 2.384185791015625e-07          /* 2^-22 */
    #define SI_VALUE_ATOL 1.1210387714598537e-44         /* 2^-146 */
    #define SI_FLUSHED_ATOL_FACTOR 8388608.0             /* 2^23 */
    #define SI_MAX_ALLOWANCE 2.384185791015625e-07       /* 2^-22 */
    #endif
    """
    void SI_PREFETCH(const void* address) noexcept nogil
    int si_subnormals_flushed() noexcept nogil
    int si_set_subnormal_flush(int on) noexcept nogil
    float64_t si_load(const float64_t* target) noexcept nogil
    void si_lower(float64_t* target, float64_t value) noexcept nogil
    float64_t si_now() noexcept nogil
    # Far above the rounding error of a sum of a few thousand terms (about
    # 1e-13 of the summed magnitudes), and far below any gap between
    # distances that matters; it only widens the candidate set, never the
    # result.
    const float64_t ERR_RTOL "SI_ERR_RTOL"
    # Posting values and the dense block are float32: each value is within
    # 2^-24 of its float64 value (relative), or 2^-149 (absolute) below
    # float32's normal range. The row norms |x|_L and |x|_H are sums over
    # these float32 values too, so the identity gives the value of the
    # rounded row x'; features lie in [0, 1], and
    # w_c | |q_c - x'_c|^p - |q_c - x_c|^p | <= p 2^-24 w_c max(q_c, x_c)^p,
    # plus p 2^-149 w_c for a value below the normal range. Summed over the
    # edges of q or x, the posted part moves by at most
    # p 2^-24 (|q|_L + |x|_L), the dense part, and each group-norm bound
    # summed over groups, by at most p 2^-24 (|q|_H + |x|_H); the absolute
    # parts together by at most p 2^-149 times the sum of the root's
    # weights (a row's own tiny values count as well as the query's, and a
    # group norm is at most the 1/p power of its weight). The rows' group
    # norms (coarse and fine) are kept as float32 too, rounded from their
    # float64 values: that moves a group bound by at most
    # p 2^-24 (|q|_H + |x|_H) again, plus p 2^-150 per group whose norms
    # are below 1 (under float32's normal range the rounding is absolute),
    # which the allowance covers with a term for each group of the root.
    # Norms above float32's range are held at its largest value, the
    # query's too: |min(a, M) - min(b, M)| <= |a - b|. The allowance takes
    # at least twice each.
    const float64_t VALUE_RTOL "SI_VALUE_RTOL"
    const float64_t VALUE_ATOL "SI_VALUE_ATOL"
    # A thread that flushes subnormal numbers to zero (FTZ/DAZ, which a
    # library built for speed may turn on) reads a subnormal float32 value
    # as 0: an error of up to 2^-126 rather than 2^-149, so its absolute
    # allowance is this many times larger. (Checked on x86 only.)
    const float64_t FLUSHED_ATOL_FACTOR "SI_FLUSHED_ATOL_FACTOR"
    # p = inf: a dense value is within 2^-24 of its float64 value (features
    # lie in [0, 1]), or 2^-126 where a thread reads subnormal values as 0,
    # so the largest dense difference, less this, is below that of the
    # true row.
    const float64_t MAX_ALLOWANCE "SI_MAX_ALLOWANCE"


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

cdef enum:
    # Results a radius search without a limit first makes room for, per
    # thread.
    GROW_START = 256
    # Doubles per cache line (64 bytes).
    SHARED_STRIDE = 8
    # Posting values are prefetched this many entries ahead of the loop.
    PREFETCH_AHEAD = 64


cdef struct SegmentView:
    # One segment's arrays (see SegmentArrays) and, for the p searched, its
    # row norms and the rows that may be returned.
    Py_ssize_t n_rows, n_cols, n_dense, n_groups, n_lists
    # Slot r * n_cols + c (column c of root r) reads posting list
    # slot_list[slot]: rows ptr[l]..ptr[l + 1] of the postings. Slots whose
    # lists are equal share one.
    const offset_t* ptr
    const int32_t* slot_list
    # Posting rows as offsets into their BLOCK_ROWS-row block, values as
    # float32 (see block_offsets and to_float32): half the bytes a query
    # streams.
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
    # Where each posting list (not slot) enters each block of block_rows
    # rows (row ranges start at block boundaries), or NULL: the segment is
    # one range.
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
    # A merged search: per row, sum_s eta_s (x_low_s less the part of its
    # allowance that depends on the row) over the selected roots (see
    # RowNorms.merged_low); NULL otherwise.
    const float64_t* x_merged
    const uint8_t* mask


cdef struct Search:
    # What one search call shares between its work units.
    Py_ssize_t n_q, n_sel, k, chunk
    int kind
    bint single
    # p = 1 over several roots: the value is linear in the roots' parts, so
    # the query's posted entries that read one list with one value are
    # walked once, into one accumulator holding sum_s eta_s acc_s, which
    # the bounds subtract once (see start_query).
    bint merged
    float64_t p
    float64_t value_rtol, value_atol
    const int64_t* positions
    const float64_t* eta
    # A radius search: a result of query i whose value exceeds ``bound[i]``
    # is dropped, and ``bound[i]`` starts query i's shared threshold (inf:
    # no bound). With ``grow`` (no limit) there is no k: every result goes
    # to the thread's list (see append_result). ``timing``: the units time
    # their phases.
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
    # The query's posted entries (list, query value, coefficient), n_entries
    # of them, selected root s's from m_root[s] (a merged search's all in
    # m_root[0]..m_root[1]); and, per posting list of the segment in a
    # merged search, the stamp of the last query that met it and the entry
    # it made (stamp: the current one).
    int64_t* m_list
    float64_t* m_value
    float64_t* m_coef
    Py_ssize_t* m_root
    Py_ssize_t n_entries
    int64_t* list_stamp
    int64_t* list_entry
    int64_t stamp
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
    # A candidate whose stored measure is not one (see row_ok), or whose
    # dense values are outside [0, 1] (bad_dense), or -1.
    int64_t bad_segment, bad_row
    bint bad_dense


# One unit of work: the results of query i among rows row_lo..row_hi of
# segment ``segment`` (view sg), into ``heap`` (k places; none for a radius
# search without a limit, whose results go to the thread's list), using the
# thread's scratch; ``shared`` is query i's threshold across its units,
# which a unit with k results lowers.
ctypedef void (*search_unit_t)(const Search* se, const SegmentView* sg, Py_ssize_t segment,
                               Py_ssize_t i, Py_ssize_t row_lo, Py_ssize_t row_hi,
                               Scratch* sc, Found* heap, float64_t* shared) noexcept nogil


cdef inline void note_bad(Scratch* sc, Py_ssize_t segment, Py_ssize_t j,
                          bint dense) noexcept nogil:
    """Remember a bad row in the thread's scratch (reported after the run)."""
    sc.bad_segment = segment
    sc.bad_row = j
    sc.bad_dense = dense


cdef inline bint row_ok(const SegmentView* sg, Py_ssize_t j) noexcept nogil:
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


cdef inline bint candidate_ok(const SegmentView* sg, Py_ssize_t segment, Scratch* sc,
                              Py_ssize_t j) noexcept nogil:
    """row_ok, noting a bad row in the thread's scratch."""
    if row_ok(sg, j):
        return True
    note_bad(sc, segment, j, False)
    return False


cdef inline offset_t touch_pair(const Search* se, const SegmentView* sg, const Scratch* sc,
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


cdef inline void set_query_dense(const Search* se, const SegmentView* sg, Scratch* sc,
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


cdef inline void finish_unit(const Search* se, const SegmentView* sg, Scratch* sc,
                             Py_ssize_t i, Found* heap, Py_ssize_t n_found) noexcept nogil:
    """End a unit: empty places of its heap, and sc.qh back to zero."""
    cdef Py_ssize_t t
    for t in range(n_found, se.k):
        heap[t].value = INFINITY
        heap[t].doc = INT64_MAX
        heap[t].segment = -1
        heap[t].row = -1
    set_query_dense(se, sg, sc, i, True)


cdef inline float64_t threshold(const float64_t* upper, Py_ssize_t n_upper,
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


cdef inline bint within_radius(const Search* se, Py_ssize_t i, float64_t value) noexcept nogil:
    """Whether a result of value ``value`` of query i may be returned: in a
    radius search, only one within the query's bound."""
    # (NaN fails the comparison.)
    return not se.radius or value <= se.bound[i]


cdef inline void append_result(Scratch* sc, Py_ssize_t i, const Found* item) noexcept nogil:
    """Append a result of query i to the thread's list (a radius search
    without a limit), grown by doubling; sc.out_failed if it cannot grow."""
    cdef Py_ssize_t cap
    cdef void* grown
    if sc.out_n == sc.out_cap:
        cap = max(<Py_ssize_t> GROW_START, 2 * sc.out_cap)
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
