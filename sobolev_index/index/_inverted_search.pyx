"""Exact top-k search through an inverted file over edges, for p up to 16
and for p = inf (a finite p above 16 is scanned elsewhere).

Private: the index's Python layer (``inverted.py``) checks every array
these loops read before calling in here (each posting list when a search
first reads it), so they trust their inputs; the exceptions are the
stored measures, whose pointers are checked there and each candidate's
supports by the units (row_ok) before its features are rebuilt, and the
dense values, checked by the units in each row read (dense_ok, and at
p = inf the dense bound). The arrays are built by _inverted_build.

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

Several roots give the value sum_s eta_s S_p^(s) (S_p^(s) summed per root,
then its p-th root: the bounds are per root). At p = 1 it is linear:
sum_s eta_s D_L^(s) = sum_s eta_s (|q|_L + |x|_L)^(s) - sum over the
query's posted entries of 2 eta_s w_c min(q_c, x_c). A segment stores a
posting list once for all the slots (root, edge) that have it (see
inverted.share_lists), so a search at p = 1 over several roots (a
"merged" search) walks each list once per distinct query value, with the
slots' coefficients summed, into one accumulator; the bounds add the
roots' other terms, weighted by eta_s, and subtract that accumulator once.

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
radius search with a limit. Each unit of work counts what it bounded,
read and scored (and, when asked, times its phases) in its thread's
scratch, copied to the unit's own place when it ends: no counter is
shared between threads.

This module is the kernel's Python face: it checks a call's arguments,
cuts the work into units, lays out each thread's scratch, runs the units
in parallel and merges their results. The units are compiled by kind:
_search_knn (the k best at a finite p, optionally within a radius),
_search_radius (every row within a radius at a finite p, no limit) and
_search_max (p = inf); _search_postings.pxd and _search_bounds.pxd hold
the finite-p steps the first two share, _search_common.pxd the structs,
allowances and steps all three share.
"""
from cython.parallel cimport prange, threadid
from libc.math cimport INFINITY
from libc.stdint cimport int32_t, int64_t, uint8_t, uint16_t
from libc.stdlib cimport free, qsort
from libc.string cimport memset

import numpy as np

from .._powers cimport power_kind
from .._typedefs cimport float32_t, float64_t, node_t, offset_t
from ._heap cimport Found, Tagged, worse
from ._inverted_common cimport N_COARSE
from ._search_common cimport (
    ERR_RTOL, N_COUNTS, N_TIMES, SHARED_STRIDE, VALUE_ATOL, VALUE_RTOL, Scratch, Search,
    SegmentView,
    search_unit_t, si_set_subnormal_flush,
)
from ._search_knn cimport knn_unit
from ._search_max cimport max_unit
from ._search_radius cimport radius_unit
from .._openmp_helpers import effective_threads

# The names of the counts and seconds of each query (see C_READ and
# T_POSTINGS in _search_common.pxd, in the same order).
COUNT_NAMES = ("rows_read", "exact", "refined", "blocks", "blocks_scored", "bounded")
TIME_NAMES = ("postings", "bounds", "scoring", "exact")


cdef class SegmentArrays:
    """Raw pointers into one segment's checked arrays, which it keeps alive:
    the kernel reads many segments in one call without touching Python."""
    cdef SegmentView view
    cdef list _keep
    cdef Py_ssize_t n_roots

    def __cinit__(self, ptr, slot_list, post_rows, post_values, col_slot, weight, dense, dense_ptr,
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
        self.view.n_lists = len(ptr) - 1
        self.view.ptr = <const offset_t*> self._pointer(ptr, np.int64)
        self.view.slot_list = <const int32_t*> self._pointer(slot_list, np.int32)
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
    cdef dict _merged

    def __cinit__(self, low, high, coarse_root, group_root):
        self._merged = {}
        arrays = tuple(np.ascontiguousarray(a, dtype=dtype) for a, dtype in
                       ((low, np.float64), (high, np.float64), (coarse_root, np.float32),
                        (group_root, np.float32)))
        arrays = tuple(a if a.size else np.zeros(1, a.dtype) for a in arrays)
        self._keep = arrays
        self.low = <const float64_t*> <size_t> arrays[0].ctypes.data
        self.high = <const float64_t*> <size_t> arrays[1].ctypes.data
        self.coarse_root = <const float32_t*> <size_t> arrays[2].ctypes.data
        self.group_root = <const float32_t*> <size_t> arrays[3].ctypes.data

    cdef const float64_t* merged_low(self, const int64_t[::1] positions,
                                     const float64_t[::1] eta, float64_t low_rtol) except NULL:
        """Per row, sum_s eta_s ((1 - low_rtol) x_low - low_rtol x_high) of
        the selected roots: the row's part of a merged search's cheapest
        bound (see _bound_rows_merged), kept for the next search with the
        same roots and weights. Never dropped while this object lives: a
        search in another thread may be reading it (the search holds this
        object for its call), so a cache that evicted would free it under
        that search."""
        key = (np.asarray(positions).tobytes(), np.asarray(eta).tobytes(), low_rtol)
        merged = self._merged.get(key)
        if merged is None:
            low, high = self._keep[0], self._keep[1]
            merged = np.zeros(low.shape[1] if low.ndim == 2 else 1)
            for s in range(positions.shape[0]):
                merged += eta[s] * ((1.0 - low_rtol) * low[positions[s]]
                                    - low_rtol * high[positions[s]])
            # Two threads may both miss: both then read the one kept.
            merged = self._merged.setdefault(key, np.ascontiguousarray(merged))
        return <const float64_t*> <size_t> merged.ctypes.data


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
    Py_ssize_t ranges_per_worker=1,
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
    (int64, n_q x 6) summed over its units, and with ``timing`` the
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
    cdef int kind = power_kind(p)
    cdef int n_workers = effective_threads(n_threads)
    cdef Py_ssize_t t, n_units, max_dense = 1, max_groups = 1, max_lists = 1, work = 0
    cdef Py_ssize_t per_thread
    cdef Search se
    cdef search_unit_t unit
    cdef Scratch* scratch
    cdef char* scratch_base
    counts_arr = np.zeros((n_q, N_COUNTS), dtype=np.int64)
    times_arr = np.zeros((n_q, N_TIMES))
    if grow and (k != 0 or out_value.shape[1] != 0):
        raise ValueError(f"a search that grows its results takes k = 0, not {k}")
    if not grow and k < 1:
        raise ValueError(f"k is {k}; expected at least 1")
    bound_arr = _checked_bound(bound, n_q)
    cdef const float64_t[::1] bound_v = bound_arr
    if n_q == 0 or n_segments == 0:
        out_value[:, :] = INFINITY
        out_segment[:, :] = -1
        out_row[:, :] = -1
        out_doc[:, :] = -1
        no_results = (np.zeros(0, np.int64), np.zeros(0), np.zeros(0, np.int64),
                      np.zeros(0, np.int64), np.zeros(0, np.int64))
        return counts_arr, times_arr, (no_results if grow else None)

    views_mem = _segment_views(segments, norms, mask, kind == 3, &max_dense, &max_groups,
                               &max_lists, &work, positions, eta,
                               ERR_RTOL + p * VALUE_RTOL if kind == 0 and n_sel > 1 else -1.0)
    cdef SegmentView* views = <SegmentView*> <size_t> views_mem.ctypes.data
    cdef Py_ssize_t n_nodes = views[0].n_cols
    parents_mem = _parent_pointers(parents, root_nodes, (<SegmentArrays> segments[0]).n_roots,
                                   n_nodes)
    units_arr = _plan_units(views, n_segments, n_q, n_workers, max(1, ranges_per_worker))
    cdef const int64_t[:, ::1] units = units_arr
    n_units = units_arr.shape[0]
    n_workers = 1 if n_q * n_units < 2 else effective_threads(n_threads, work)

    se.n_q = n_q
    se.n_sel = n_sel
    se.k = k
    se.chunk = chunk
    se.kind = kind
    se.single = n_sel == 1
    se.merged = kind == 0 and n_sel > 1
    se.p = p
    se.radius = grow or bool((bound_arr < INFINITY).any())
    se.grow = grow
    se.timing = timing
    se.bound = &bound_v[0]
    # (Not used at p = inf: see MAX_ALLOWANCE.)
    se.value_rtol = 0.0 if kind == 3 else p * VALUE_RTOL
    se.value_atol = 0.0 if kind == 3 else p * VALUE_ATOL
    se.positions = &positions[0]
    se.eta = &eta[0]
    se.parents = <const node_t**> <size_t> parents_mem.ctypes.data
    se.root_nodes = &root_nodes[0]
    q_indices_arr = np.asarray(q_indices) if q_indices.shape[0] else np.zeros(1, np.int32)
    q_data_arr = np.asarray(q_data) if q_data.shape[0] else np.zeros(1, np.float64)
    cdef const node_t[::1] qi_v = q_indices_arr
    cdef const float64_t[::1] qd_v = q_data_arr
    se.q_indptr = &q_indptr[0]
    se.q_indices = &qi_v[0]
    se.q_data = &qd_v[0]
    if kind == 3:
        unit = max_unit
    elif grow:
        unit = radius_unit
    else:
        unit = knn_unit

    # Owns the scratch memory that scratch_base points into, until the call returns.
    _scratch_owner = _lay_out_scratch(n_workers, n_sel, k, chunk, max_dense, max_groups,
                                      max_lists if se.merged else 0,
                                      _max_entries(q_indptr, n_q, n_sel),
                                      max(4 * k, min_candidates), &scratch_base, &per_thread)
    # One cache line per query, which the query's units lower as they
    # find results: a line two threads write would move between their
    # cores on every write. A radius search's bound for the query is its
    # threshold from the start.
    shared_arr = np.repeat(bound_arr, SHARED_STRIDE)
    cdef float64_t[::1] shared = shared_arr
    # Each unit's counts and seconds, written by the one thread that runs it.
    unit_counts_arr = np.zeros(n_q * n_units * N_COUNTS, dtype=np.int64)
    unit_times_arr = np.zeros(n_q * n_units * N_TIMES)
    cdef int64_t[::1] unit_counts = unit_counts_arr
    cdef float64_t[::1] unit_times = unit_times_arr
    found_mem = np.zeros(n_q * n_units * k * sizeof(Found), dtype=np.uint8)
    cdef Found* found = <Found*> <size_t> found_mem.ctypes.data

    row_scratch = _take_scratch(n_nodes, n_workers)
    for t in range(n_workers):
        (<_RowScratch> row_scratch[t]).lend(<Scratch*> (scratch_base + t * per_thread))
    try:
        _run(unit, &se, views, units, n_q, n_units, k, n_workers, scratch_base, per_thread,
             found, shared, out_value, out_segment, out_row, out_doc, &unit_counts[0],
             &unit_times[0])
        for t in range(n_workers):
            scratch = <Scratch*> (scratch_base + t * per_thread)
            if scratch.bad_segment >= 0:
                raise BadStoredValue(scratch.bad_segment, scratch.bad_row,
                                     bool(scratch.bad_dense))
            if scratch.out_failed:
                raise MemoryError("the results of a radius search do not fit in memory; "
                                  "give a limit or a smaller radius")
        grown = _grown_results(scratch_base, per_thread, n_workers) if grow else None
    finally:
        _give_back(n_nodes, row_scratch)
        for t in range(n_workers):
            scratch = <Scratch*> (scratch_base + t * per_thread)
            free(scratch.out)
            free(scratch.out_query)
            scratch.out = NULL
            scratch.out_query = NULL
    counts_arr[:] = unit_counts_arr.reshape(n_q, n_units, N_COUNTS).sum(axis=1)
    if timing:
        times_arr[:] = unit_times_arr.reshape(n_q, n_units, N_TIMES).sum(axis=1)
    return counts_arr, times_arr, grown


cdef object _checked_bound(bound, Py_ssize_t n_q):
    """search_segments' ``bound`` as a contiguous float64 array of one
    value >= 0 per query (inf for None), with one element even for no
    queries (for the pointer)."""
    bound_arr = np.full(n_q, INFINITY) if bound is None else np.asarray(bound)
    if bound_arr.dtype != np.float64 or bound_arr.shape != (n_q,):
        raise ValueError(f"bound is a {bound_arr.dtype} array of shape {bound_arr.shape}; "
                         f"expected float64 of shape ({n_q},), one value per query")
    bad = np.flatnonzero(~(bound_arr >= 0.0))  # also NaN
    if len(bad):
        raise ValueError(f"bound[{bad[0]}] is {bound_arr[bad[0]]}; expected a value >= 0")
    return np.ascontiguousarray(bound_arr) if n_q else np.zeros(1)


cdef object _segment_views(list segments, list norms, const uint8_t[::1] mask, bint max_kind,
                           Py_ssize_t* max_dense, Py_ssize_t* max_groups,
                           Py_ssize_t* max_lists, Py_ssize_t* work,
                           const int64_t[::1] positions, const float64_t[::1] eta,
                           float64_t merged_rtol):
    """The segments' views (SegmentView, in a byte array that holds them)
    with their row norms and their part of the mask; also the most dense
    columns, groups and posting lists of a segment, and the work the
    search may do (in stored values: its posting lists, and at p = inf,
    ``max_kind``, every dense value). A merged search (``merged_rtol`` >= 0,
    the rows' allowance factor) also takes each segment's merged row
    norms."""
    cdef Py_ssize_t g, offset = 0, n_segments = len(segments)
    cdef SegmentArrays arrays
    cdef RowNorms row_norms
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
        views[g].x_merged = NULL
        if merged_rtol >= 0.0:
            views[g].x_merged = row_norms.merged_low(positions, eta, merged_rtol)
        views[g].mask = &mask[offset]
        offset += views[g].n_rows
        max_dense[0] = max(max_dense[0], views[g].n_dense)
        max_groups[0] = max(max_groups[0], views[g].n_groups)
        max_lists[0] = max(max_lists[0], views[g].n_lists)
        work[0] += views[g].ptr[views[g].n_lists]
        if max_kind:
            # Every row's dense values are read too.
            work[0] += views[g].n_rows * views[g].n_dense
    if offset != mask.shape[0]:
        raise ValueError(f"the mask has {mask.shape[0]} rows; the segments have {offset}")
    return views_mem


cdef object _parent_pointers(list parents, const node_t[::1] root_nodes, Py_ssize_t n_roots,
                             Py_ssize_t n_nodes):
    """The trees' parent arrays, checked, as an array of their addresses."""
    if len(parents) != n_roots or root_nodes.shape[0] != n_roots or any(
            np.asarray(a).shape != (n_nodes,) or np.asarray(a).dtype != np.int32
            or not np.asarray(a).flags.c_contiguous for a in parents):
        raise ValueError(f"expected {n_roots} contiguous int32 parent arrays of "
                         f"{n_nodes} nodes and as many root nodes")
    return np.array([np.asarray(a).ctypes.data for a in parents] or [0], dtype=np.uintp)


cdef Py_ssize_t _max_entries(const offset_t[::1] q_indptr, Py_ssize_t n_q,
                             Py_ssize_t n_sel) noexcept:
    """The most entries of one query over the selected roots (at least 1)."""
    cdef Py_ssize_t i, s, t, most = 1
    for i in range(n_q):
        t = 0
        for s in range(n_sel):
            t += q_indptr[s * n_q + i + 1] - q_indptr[s * n_q + i]
        most = max(most, t)
    return most


cdef object _plan_units(const SegmentView* views, Py_ssize_t n_segments, Py_ssize_t n_q,
                        int n_workers, Py_ssize_t ranges_per_worker):
    """The units of work, as rows (segment, first row, end row): every
    segment, cut into row ranges of whole blocks while there are fewer
    queries than threads. Largest first, for balance (a stable insertion
    sort: there are a few dozen at most)."""
    cdef Py_ssize_t g, t, u, n_units = 0, n_blocks, n_ranges, max_ranges = 1, lo, hi, size
    if n_q < ranges_per_worker * n_workers:
        max_ranges = (ranges_per_worker * n_workers + n_q - 1) // n_q
    units_arr = np.empty((n_segments * max_ranges, 3), dtype=np.int64)
    cdef int64_t[:, ::1] unit_rows = units_arr
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
    return units_arr[:n_units]


cdef inline Py_ssize_t _lines(Py_ssize_t n_bytes) noexcept nogil:
    """n_bytes rounded up to whole 64-byte cache lines (at least one)."""
    return max(1, (n_bytes + 63) // 64) * 64


cdef inline void* _take(char** free_at, Py_ssize_t n_bytes) noexcept nogil:
    """Carve the next n_bytes (in whole cache lines) out of a block."""
    cdef void* start = <void*> free_at[0]
    free_at[0] += _lines(n_bytes)
    return start


cdef object _lay_out_scratch(int n_workers, Py_ssize_t n_sel, Py_ssize_t k, Py_ssize_t chunk,
                             Py_ssize_t max_dense, Py_ssize_t max_groups,
                             Py_ssize_t max_lists, Py_ssize_t max_entries, Py_ssize_t cap,
                             char** base,
                             Py_ssize_t* per_thread):
    """One zeroed block (returned, to keep alive) of every thread's Scratch
    and buffers, thread t's at base[0] + t * per_thread[0]; the Scratch.f_*
    buffers are lent separately (_RowScratch). Every thread's buffers start
    on their own cache lines: a line two threads write would move between
    their cores on every write. (qh must start at zero.)"""
    cdef Py_ssize_t t
    cdef Scratch* scratch
    cdef char* free_at
    per_thread[0] = (
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
        + _lines(max_entries * sizeof(int64_t))         # m_list
        + 2 * _lines(max_entries * sizeof(float64_t))   # m_value, m_coef
        + _lines((n_sel + 1) * sizeof(Py_ssize_t))      # m_root
        + 2 * _lines(max_lists * sizeof(int64_t))       # list_stamp, list_entry
        + _lines(cap * sizeof(int64_t))                 # cand_rows
        + _lines(cap * sizeof(float64_t)))              # cand_lows
    scratch_mem = np.zeros(n_workers * per_thread[0] + 64, dtype=np.uint8)
    base[0] = <char*> <size_t> scratch_mem.ctypes.data
    base[0] += (-<size_t> base[0]) % 64
    for t in range(n_workers):
        free_at = base[0] + t * per_thread[0]
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
        scratch.m_list = <int64_t*> _take(&free_at, max_entries * sizeof(int64_t))
        scratch.m_value = <float64_t*> _take(&free_at, max_entries * sizeof(float64_t))
        scratch.m_coef = <float64_t*> _take(&free_at, max_entries * sizeof(float64_t))
        scratch.m_root = <Py_ssize_t*> _take(&free_at, (n_sel + 1) * sizeof(Py_ssize_t))
        scratch.n_entries = 0
        scratch.list_stamp = <int64_t*> _take(&free_at, max_lists * sizeof(int64_t))
        scratch.list_entry = <int64_t*> _take(&free_at, max_lists * sizeof(int64_t))
        scratch.stamp = 0
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
    return scratch_mem


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


cdef int _compare_found(const void* a, const void* b) noexcept nogil:
    """qsort's comparison of results: best first."""
    cdef const Found* x = <const Found*> a
    cdef const Found* y = <const Found*> b
    if worse(x, y):
        return 1
    if worse(y, x):
        return -1
    return 0


cdef inline void _unit_done(const Scratch* sc, int64_t* counts,
                            float64_t* times) noexcept nogil:
    """Copy a finished unit's counts and seconds to its own place."""
    cdef Py_ssize_t c
    for c in range(N_COUNTS):
        counts[c] = sc.counts[c]
    for c in range(N_TIMES):
        times[c] = sc.times[c]


cdef void _run(search_unit_t unit, const Search* se, SegmentView* views,
               const int64_t[:, ::1] units, Py_ssize_t n_q, Py_ssize_t n_units, Py_ssize_t k,
               int n_workers, char* scratch_base, Py_ssize_t scratch_stride, Found* found,
               float64_t[::1] shared, float64_t[:, ::1] out_value,
               int64_t[:, ::1] out_segment, int64_t[:, ::1] out_row,
               int64_t[:, ::1] out_doc, int64_t* unit_counts,
               float64_t* unit_times) noexcept:
    """The units of search_segments (each by ``unit``, the kind's), in
    parallel, then each query's best k; each unit's counts and seconds go
    to its place in ``unit_counts`` and ``unit_times`` (query by query,
    unit by unit)."""
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
            unit(se, &views[units[u, 0]], units[u, 0], i, units[u, 1], units[u, 2],
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
