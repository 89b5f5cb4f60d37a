"""Building the inverted file over edges that _inverted_search reads.

Private: the index's Python layer (``inverted.py``, ``csr.py``) checks
every array before calling in here, check_csr, check_block_postings (and,
for the format-2 files of earlier releases, check_postings) below among its
checks, so these loops trust their inputs.

For one root, the columns of a segment's rows (raw edge masses) are split
in two (see _inverted_search for why):

* posted columns keep their nonzeros as posting lists, rows ascending
  (build_inverted), stored as float32 values (to_float32) and as row offsets
  within blocks of BLOCK_ROWS rows (block_offsets), with where each list
  enters each range of rows that search splits off (block_starts);
* dense columns, the few present in most rows, form a dense row-major
  block, summarised per row by the norms of groups of its columns
  (group_norms): |x|_G = (sum_{c in G} w_c x_c^p)^(1/p).

posted_power_sums and dense_power_sums give each row's |x|_L^p and |x|_H^p
over the posted and the dense columns, from the stored (float32) values:
the bounds of _inverted_search then treat a row as its float32-rounded
self, which its allowance covers. These functions serve finite p only.
"""
from cython.parallel cimport prange, threadid
from libc.math cimport INFINITY, fmin
from libc.stdint cimport int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t

import numpy as np

from .._powers cimport abs_pow, power_kind, pth_root
from .._typedefs cimport float32_t, float64_t, node_t, offset_t
from ._inverted_common cimport BLOCK_ROWS, BLOCK_SHIFT, N_COARSE, float32_max, value_max
from .._openmp_helpers import effective_threads

COARSE_GROUPS = N_COARSE
VALUE_MAX = value_max()
FLOAT32_MAX_VALUE = float32_max()


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


def block_starts(const offset_t[::1] ptr, const int32_t[::1] rows, Py_ssize_t n_rows,
                 Py_ssize_t block_rows):
    """For every posting list c and block b of ``block_rows`` rows, the
    position of the list's first row >= b * block_rows (the list's end if
    none): an (n_lists, n_blocks + 1) array, so that a row range starting at
    a block boundary finds its postings without a search."""
    cdef Py_ssize_t n_lists = ptr.shape[0] - 1, n_blocks = (n_rows + block_rows - 1) // block_rows
    cdef Py_ssize_t c, b
    cdef offset_t e
    starts_arr = np.empty((n_lists, n_blocks + 1), dtype=np.int64)
    cdef int64_t[:, ::1] starts = starts_arr
    with nogil:
        for c in range(n_lists):
            b = 0
            for e in range(ptr[c], ptr[c + 1]):
                while rows[e] >= b * block_rows:
                    starts[c, b] = e
                    b = b + 1
            while b <= n_blocks:
                starts[c, b] = ptr[c + 1]
                b = b + 1
    return starts_arr


def block_offsets(const int32_t[::1] rows):
    """Each posting's row as its offset within its block of BLOCK_ROWS rows,
    as the search kernel holds them (uint16)."""
    cdef Py_ssize_t n = rows.shape[0], e
    offsets_arr = np.empty(n, dtype=np.uint16)
    cdef uint16_t[::1] offsets = offsets_arr
    with nogil:
        for e in range(n):
            offsets[e] = <uint16_t> (rows[e] & (BLOCK_ROWS - 1))
    return offsets_arr


def list_hashes(const offset_t[::1] ptr, const int32_t[::1] rows,
                const float32_t[::1] values):
    """A 64-bit hash (FNV-1a over 32-bit words) of each list's rows and
    value bits, list c being rows[ptr[c]:ptr[c + 1]]: equal lists hash
    alike; lists that hash alike must still be compared (lists_equal)."""
    cdef Py_ssize_t n = ptr.shape[0] - 1, c
    cdef offset_t e
    cdef uint64_t h
    out_arr = np.zeros(max(n, 0), dtype=np.uint64)
    if n <= 0 or rows.shape[0] == 0:
        return out_arr
    cdef uint64_t[::1] out = out_arr
    cdef const uint32_t* bits = <const uint32_t*> &values[0]
    cdef int n_workers = effective_threads(None, rows.shape[0])
    for c in prange(n, nogil=True, schedule="dynamic", chunksize=256, num_threads=n_workers):
        h = 14695981039346656037ULL
        for e in range(ptr[c], ptr[c + 1]):
            h = (h ^ <uint32_t> rows[e]) * 1099511628211ULL
            h = (h ^ bits[e]) * 1099511628211ULL
        out[c] = h
    return out_arr


def lists_equal(const offset_t[::1] ptr, const int32_t[::1] rows, const float32_t[::1] values,
                const int64_t[::1] a, const int64_t[::1] b):
    """uint8 per pair t: whether lists a[t] and b[t] hold the same rows and
    the same value bits."""
    cdef Py_ssize_t n = a.shape[0], t
    cdef offset_t e, start_a, start_b, length
    out_arr = np.zeros(n, dtype=np.uint8)
    if n == 0:
        return out_arr
    cdef uint8_t[::1] out = out_arr
    cdef const uint32_t* bits = <const uint32_t*> &values[0] if values.shape[0] else NULL
    cdef int n_workers = effective_threads(None, rows.shape[0])
    for t in prange(n, nogil=True, schedule="dynamic", chunksize=256, num_threads=n_workers):
        start_a = ptr[a[t]]
        start_b = ptr[b[t]]
        length = ptr[a[t] + 1] - start_a
        if ptr[b[t] + 1] - start_b != length:
            continue
        out[t] = 1
        for e in range(length):
            if rows[start_a + e] != rows[start_b + e] or bits[start_a + e] != bits[start_b + e]:
                out[t] = 0
                break
    return out_arr


def to_float32(const float64_t[::1] values):
    """values as float32 (the nearest float32 of each)."""
    cdef Py_ssize_t n = values.shape[0], e
    out_arr = np.empty(n, dtype=np.float32)
    cdef float32_t[::1] out = out_arr
    with nogil:
        for e in range(n):
            out[e] = <float32_t> values[e]
    return out_arr


cdef float64_t FLOAT32_MAX = float32_max()


def group_norms(const float32_t[:, ::1] dense, const float64_t[::1] dense_weight,
                const int64_t[::1] group_of, const int64_t[::1] coarse_of, float64_t p,
                float32_t[:, ::1] out, float32_t[:, ::1] out_coarse):
    """The norms of each row's groups of dense columns, in one pass over the
    dense block: out[j, g] = (sum over dense slots h of group g of
    w_h |dense[j, h]|^p)^(1/p), and out_coarse[c, j] the same over coarse
    group c (one row per coarse group, so that a scan over rows reads each
    group's norms in order). Summed in float64, stored as float32, at most
    FLOAT32_MAX."""
    cdef Py_ssize_t n = dense.shape[0], n_dense = dense.shape[1]
    cdef Py_ssize_t n_groups = out.shape[1], n_coarse = out_coarse.shape[0]
    cdef Py_ssize_t j, h, g
    cdef int kind = power_kind(p)
    cdef int n_workers = effective_threads(None, n * n_dense)
    cdef float64_t term
    cdef float64_t* sums
    cdef float64_t* coarse
    if n == 0 or n_groups + n_coarse == 0:
        return
    # One row of sums per thread: the groups', then the coarse groups'.
    sums_arr = np.zeros((n_workers, n_groups + n_coarse))
    cdef float64_t[:, ::1] all_sums = sums_arr
    for j in prange(n, nogil=True, schedule="static", num_threads=n_workers):
        sums = &all_sums[threadid(), 0]
        coarse = sums + n_groups
        for g in range(n_groups + n_coarse):
            sums[g] = 0.0
        for h in range(n_dense):
            term = dense_weight[h] * abs_pow(dense[j, h], p, kind)
            sums[group_of[h]] += term
            coarse[coarse_of[h]] += term
        for g in range(n_groups):
            out[j, g] = <float32_t> fmin(pth_root(sums[g], p, kind), FLOAT32_MAX)
        for g in range(n_coarse):
            out_coarse[g, j] = <float32_t> fmin(pth_root(coarse[g], p, kind), FLOAT32_MAX)


def posted_power_sums(
    const offset_t[::1] ptr, const int32_t[::1] slot_list, const uint16_t[::1] offsets,
    const offset_t[:, ::1] starts, Py_ssize_t n_rows, Py_ssize_t block_rows,
    const float32_t[::1] values, const float64_t[::1] weight, Py_ssize_t n_cols, float64_t p,
    float64_t[:, ::1] low,
):
    """low[r, i] += sum_c w_c x_c^p over the posted columns c of root r that
    row i has, from the stored postings (rows decoded as check_block_postings
    reads them, which they must have passed; slot r * n_cols + c reads list
    slot_list[slot], and has its own weight)."""
    cdef Py_ssize_t n_slots = slot_list.shape[0], slot, c, b, r
    cdef Py_ssize_t n_blocks = (n_rows + block_rows - 1) // block_rows
    cdef bint one_range = starts.shape[1] == 0
    cdef Py_ssize_t lo, hi, base
    cdef offset_t e
    cdef int kind = power_kind(p)
    cdef float64_t w
    if one_range:
        n_blocks = 1
    with nogil:
        for slot in range(n_slots):
            r = slot // n_cols
            c = slot_list[slot]
            w = weight[slot]
            for b in range(n_blocks):
                if one_range:
                    lo, hi, base = ptr[c], ptr[c + 1], 0
                else:
                    lo, hi = starts[c, b], starts[c, b + 1]
                    base = ((b * block_rows) >> BLOCK_SHIFT) << BLOCK_SHIFT
                for e in range(lo, hi):
                    low[r, base + offsets[e]] += w * abs_pow(values[e], p, kind)


def dense_power_sums(const float32_t[:, ::1] dense, const float64_t[::1] dense_weight,
                     const offset_t[::1] dense_ptr, float64_t p, float64_t[:, ::1] high):
    """high[r, j] = sum over root r's dense slots h of w_h dense[j, h]^p."""
    cdef Py_ssize_t n = dense.shape[0], n_roots = dense_ptr.shape[0] - 1, j, r, h
    cdef int kind = power_kind(p)
    cdef float64_t total
    cdef int n_workers = effective_threads(None, n * dense.shape[1])
    if n == 0:
        return
    for j in prange(n, nogil=True, schedule="static", num_threads=n_workers):
        for r in range(n_roots):
            total = 0.0
            for h in range(dense_ptr[r], dense_ptr[r + 1]):
                total = total + dense_weight[h] * abs_pow(dense[j, h], p, kind)
            high[r, j] = total


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
        # Every pointer first: a row is read only once all of them are known
        # to lie within the stored values.
        for i in range(n):
            if indptr[i + 1] < indptr[i]:
                bad_row = i
                break
        for i in range(n if bad_row < 0 else 0):
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


cdef bint _list_ok(const offset_t* ptr, const uint16_t* offsets, Py_ssize_t n_offsets,
                   const offset_t* starts, Py_ssize_t c, Py_ssize_t n_blocks, bint one_range,
                   Py_ssize_t n_rows, Py_ssize_t block_rows, const float32_t* values,
                   float64_t max_value) noexcept nogil:
    """check_block_postings for posting list c (``starts``: its row of the
    table, NULL for one range)."""
    cdef Py_ssize_t b, lo, hi, base, row, last = -1
    cdef offset_t e
    cdef float64_t v
    # (The caller checked the pointers; a list outside the postings is
    # refused here too, before anything is read.)
    if not (0 <= ptr[c] <= ptr[c + 1] <= n_offsets):
        return False
    for e in range(ptr[c], ptr[c + 1]):
        v = values[e]
        # (NaN fails both comparisons.)
        if not (v >= 0.0 and v <= max_value):
            return False
    for b in range(n_blocks):
        if one_range:
            lo, hi, base = ptr[c], ptr[c + 1], 0
        else:
            lo, hi = starts[b], starts[b + 1]
            # Every range within the list's postings, before any is read.
            if (b == 0 and lo != ptr[c]) or lo > hi or hi > ptr[c + 1] or (
                    b == n_blocks - 1 and hi != ptr[c + 1]):
                return False
            base = ((b * block_rows) >> BLOCK_SHIFT) << BLOCK_SHIFT
        for e in range(lo, hi):
            row = base + offsets[e]
            if row <= last or row >= n_rows or (
                    not one_range and (row < b * block_rows or row >= (b + 1) * block_rows)):
                return False
            last = row
    return True


def check_block_postings(const offset_t[::1] ptr, const uint16_t[::1] offsets,
                         const offset_t[:, ::1] starts, Py_ssize_t n_rows,
                         Py_ssize_t block_rows, const float32_t[::1] values,
                         float64_t max_value, const int64_t[::1] lists):
    """Raise ValueError unless the posting lists ``lists`` are what
    block_offsets and block_starts make of lists whose rows lie in
    0..n_rows-1, strictly ascending, with values in [0, ``max_value``]:
    ``offsets`` are the rows within their BLOCK_ROWS-row block, ``starts``
    where each list enters each range of ``block_rows`` rows. ``starts`` has
    no columns when the segment is one range (then the offsets are the
    rows). The table's shape is checked whatever ``lists`` holds. ``ptr`` is
    already known to be non-decreasing and to end at len(offsets), and
    ``values`` to be as long as ``offsets``; ``lists`` to lie in
    0..len(ptr)-2. Lists are checked in parallel."""
    cdef Py_ssize_t n_lists = ptr.shape[0] - 1, c, t, n_todo = lists.shape[0]
    cdef Py_ssize_t n_blocks = (n_rows + block_rows - 1) // block_rows
    cdef bint one_range = starts.shape[1] == 0
    cdef int64_t work = 0
    for t in range(n_todo):
        work += ptr[lists[t] + 1] - ptr[lists[t]]
    cdef int n_workers = effective_threads(None, work)
    if one_range:
        if n_rows > BLOCK_ROWS:
            raise ValueError(f"a segment of {n_rows} rows has no table of range starts")
        n_blocks = 1
    elif starts.shape[0] != n_lists or starts.shape[1] != n_blocks + 1:
        raise ValueError(f"the table of range starts has shape "
                         f"({starts.shape[0]}, {starts.shape[1]}); expected "
                         f"({n_lists}, {n_blocks + 1})")
    if n_lists <= 0 or n_todo == 0:
        return
    lists_arr = np.asarray(lists)
    if lists_arr.min() < 0 or lists_arr.max() >= n_lists:
        raise ValueError(f"posting lists {lists_arr.min()}..{lists_arr.max()} asked for; the "
                         f"segment has 0..{n_lists - 1}")
    if values.shape[0] != offsets.shape[0]:
        raise ValueError(f"{values.shape[0]} posting values for {offsets.shape[0]} postings")
    bad_arr = np.zeros(n_todo, dtype=np.uint8)
    cdef uint8_t[::1] bad = bad_arr
    cdef const offset_t* table = NULL if one_range else &starts[0, 0]
    cdef const uint16_t* offset_ptr = &offsets[0] if offsets.shape[0] else NULL
    cdef const float32_t* value_ptr = &values[0] if values.shape[0] else NULL
    for t in prange(n_todo, nogil=True, schedule="dynamic", chunksize=64,
                    num_threads=n_workers):
        c = lists[t]
        if not _list_ok(&ptr[0], offset_ptr, offsets.shape[0],
                        NULL if one_range else table + c * (n_blocks + 1),
                        c, n_blocks, one_range, n_rows, block_rows, value_ptr, max_value):
            bad[t] = 1
    if bad_arr.any():
        raise ValueError(f"posting list {int(lists[int(np.argmax(bad_arr))])} names a row "
                         f"outside 0..{n_rows - 1}, is not in ascending row order, disagrees "
                         "with its table of range starts, or holds a value outside [0, 1]")


def float32_range(const float32_t[::1] values):
    """(smallest, largest) of ``values`` as float64 in one pass, both NaN if
    any value is NaN; (inf, -inf) when there are none."""
    cdef Py_ssize_t n = values.shape[0], e
    cdef float64_t low = INFINITY, high = -INFINITY, x
    cdef bint nan = False
    with nogil:
        for e in range(n):
            x = values[e]
            if x < low:
                low = x
            if x > high:
                high = x
            if x != x:
                nan = True
    if nan:
        return float("nan"), float("nan")
    return low, high
