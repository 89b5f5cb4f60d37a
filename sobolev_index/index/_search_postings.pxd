# The posted columns at a finite p, shared by the k-NN and radius units:
# a query's setup for one unit (its norms, dense values, group norms, and
# its posted entries with where their lists enter the unit's rows), and
# the walk of its posting lists over one chunk of rows, which leaves in
# sc.acc, per row of the chunk, sum over the shared posted columns c of
# w_c g(q_c, x_c) (see _inverted_search.pyx).
from libc.math cimport fabs, fmin, pow
from libc.stdint cimport uint16_t
from libc.string cimport memset

from .._powers cimport abs_pow, pth_root
from .._typedefs cimport float32_t, float64_t, offset_t
from ._inverted_common cimport BLOCK_ROWS, BLOCK_SHIFT, N_COARSE, float32_max
from ._search_common cimport (
    ERR_RTOL, FLUSHED_ATOL_FACTOR, PREFETCH_AHEAD, SI_PREFETCH, Scratch, Search, SegmentView,
    si_subnormals_flushed,
)


cdef inline void add_min(float64_t* acc, const uint16_t* rows, const float32_t* values,
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


cdef inline void add_product(float64_t* acc, const uint16_t* rows, const float32_t* values,
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


cdef inline void start_query(const Search* se, const SegmentView* sg, Scratch* sc,
                             Py_ssize_t i, Py_ssize_t row_lo) noexcept nogil:
    """Set up query i for a unit starting at row row_lo: per selected root
    its posted norm |q|_L and dense norm |q|_H (sc.norms), the part of each
    row's allowance that depends on the query only (sc.norms too), its
    dense values (sc.qh), group norms (sc.qg_root) and coarse group norms
    (sc.qc_root), and its posted entries (list, query value, coefficient
    of the walk: sc.m_list, sc.m_value, sc.m_coef; root s's are
    sc.m_root[s]..sc.m_root[s + 1]) with where each list enters the unit's
    rows (sc.cursor). The walks of add_postings then read nothing of the
    segment but the lists' postings and where they cross blocks.

    A merged search (p = 1 over several roots, se.merged) gathers the
    query's posted entries by posting list: entries of one list with the
    same query value (the same subtree under several roots) become one,
    with coefficient sum 2 eta_s w_slot, all in sc.m_root[0]..m_root[1].
    An entry whose list was met with another value stays on its own: equal
    lists need not be equal subtrees (a chain of edges without supports
    between them)."""
    cdef Py_ssize_t n_cols = sg.n_cols
    cdef Py_ssize_t s, r, t, h, gg, cg, m
    cdef int kind = se.kind
    cdef float64_t p = se.p, v, c
    cdef offset_t slot, lst
    cdef const float64_t* weight = sg.weight
    # Each unit looks at the mode of the thread that runs it.
    cdef float64_t atol = se.value_atol * (
        FLUSHED_ATOL_FACTOR if si_subnormals_flushed() else 1.0)
    # These reads go to a different place for every column, mostly missing
    # the cache: asked for all at once first, they wait on memory together
    # rather than one by one.
    for s in range(se.n_sel):
        r = se.positions[s]
        for t in range(se.q_indptr[s * se.n_q + i], se.q_indptr[s * se.n_q + i + 1]):
            slot = r * n_cols + se.q_indices[t]
            SI_PREFETCH(sg.col_slot + slot)
            SI_PREFETCH(sg.slot_list + slot)
    if se.merged:
        sc.stamp += 1
    sc.n_entries = 0
    for s in range(se.n_sel):
        r = se.positions[s]
        if not se.merged:
            sc.m_root[s] = sc.n_entries
        sc.norms[3 * s] = 0.0
        sc.norms[3 * s + 1] = 0.0
        for t in range(se.q_indptr[s * se.n_q + i], se.q_indptr[s * se.n_q + i + 1]):
            slot = r * n_cols + se.q_indices[t]
            h = sg.col_slot[slot]
            if h >= 0:
                sc.qh[h] = se.q_data[t]
                continue
            v = se.q_data[t]
            sc.norms[3 * s] += weight[slot] * abs_pow(v, p, kind)
            lst = sg.slot_list[slot]
            if kind == 0:
                c = 2.0 * (se.eta[s] if se.merged else 1.0) * weight[slot]
            elif kind == 1:
                c = 2.0 * weight[slot] * v
            else:
                c = weight[slot]
            if se.merged:
                if sc.list_stamp[lst] == sc.stamp:
                    m = sc.list_entry[lst]
                    if sc.m_value[m] == v:
                        sc.m_coef[m] += c
                        continue
                else:
                    sc.list_stamp[lst] = sc.stamp
                    sc.list_entry[lst] = sc.n_entries
            m = sc.n_entries
            sc.m_list[m] = lst
            sc.m_value[m] = v
            sc.m_coef[m] = c
            sc.n_entries = m + 1
            SI_PREFETCH(sg.ptr + lst)
            if row_lo != 0:
                SI_PREFETCH(sg.block_start + lst * sg.block_stride + row_lo // sg.block_rows)
        for gg in range(sg.root_groups[r], sg.root_groups[r + 1]):
            v = 0.0
            for t in range(sg.group_ptr[gg], sg.group_ptr[gg + 1]):
                h = sg.group_slots[t]
                v = v + sg.dense_weight[h] * abs_pow(sc.qh[h], p, kind)
            sc.qg_root[gg] = fmin(pth_root(v, p, kind), float32_max())
            sc.norms[3 * s + 1] += v
        for cg in range(N_COARSE):
            sc.qc_root[s * N_COARSE + cg] = 0.0
        for h in range(sg.dense_ptr[r], sg.dense_ptr[r + 1]):
            sc.qc_root[s * N_COARSE + sg.coarse_of[h] - r * N_COARSE] += (
                sg.dense_weight[h] * abs_pow(sc.qh[h], p, kind))
        for cg in range(N_COARSE):
            sc.qc_root[s * N_COARSE + cg] = fmin(
                pth_root(sc.qc_root[s * N_COARSE + cg], p, kind), float32_max())
        # The part of the row's allowance that depends on the query only.
        sc.norms[3 * s + 2] = ((ERR_RTOL + se.value_rtol) * (sc.norms[3 * s] + sc.norms[3 * s + 1])
                               + atol * (sg.root_weight[r] + N_COARSE
                                         + sg.root_groups[r + 1] - sg.root_groups[r]))
    if se.merged:
        sc.m_root[0] = 0
        sc.m_root[1] = sc.n_entries
    else:
        sc.m_root[se.n_sel] = sc.n_entries
    # Where the lists enter the unit, and their first postings for the
    # first chunk.
    for m in range(sc.n_entries):
        lst = sc.m_list[m]
        if row_lo == 0:
            sc.cursor[m] = sg.ptr[lst]
        else:
            sc.cursor[m] = sg.block_start[lst * sg.block_stride + row_lo // sg.block_rows]
        SI_PREFETCH(sg.post_rows + sc.cursor[m])
        SI_PREFETCH(sg.post_values + sc.cursor[m])


cdef inline Py_ssize_t chunk_end(const Search* se, Py_ssize_t j0, Py_ssize_t row_hi) noexcept nogil:
    """Where the chunk starting at row j0 ends. Chunks end at multiples of
    ``chunk`` (a power of two dividing the BLOCK_ROWS-row blocks of the
    posting offsets): none spans two blocks."""
    cdef Py_ssize_t j1 = (j0 // se.chunk + 1) * se.chunk
    return row_hi if j1 > row_hi else j1


cdef inline offset_t block_end(const SegmentView* sg, offset_t lst,
                               Py_ssize_t block_base) noexcept nogil:
    """Where list ``lst`` leaves the BLOCK_ROWS-row block starting at row
    block_base (offsets start again at 0 in the next block)."""
    if block_base + BLOCK_ROWS < sg.n_rows:
        return sg.block_start[lst * sg.block_stride + (block_base + BLOCK_ROWS) // sg.block_rows]
    return sg.ptr[lst + 1]


cdef inline offset_t chunk_stop(const SegmentView* sg, offset_t lst, Py_ssize_t block_base,
                                Py_ssize_t j1, offset_t e_end) noexcept nogil:
    """Where list ``lst`` leaves a chunk that ends at row j1 on a boundary
    of the table of range starts (or at its block's or the segment's end,
    e_end): the walk then tests nothing but its count."""
    if j1 < block_base + BLOCK_ROWS and j1 < sg.n_rows:
        return sg.block_start[lst * sg.block_stride + j1 // sg.block_rows]
    return e_end


cdef inline offset_t add_min_below(float64_t* acc, const uint16_t* rows, const float32_t* values,
                                   offset_t e, offset_t e_end, Py_ssize_t limit, float64_t c,
                                   float64_t v) noexcept nogil:
    """acc[rows[e]] += c min(v, values[e]) from e while the offset is below
    ``limit`` (p = 1); returns where it stopped."""
    cdef float64_t x
    while e < e_end and rows[e] < limit:
        SI_PREFETCH(values + e + PREFETCH_AHEAD)
        SI_PREFETCH(rows + e + PREFETCH_AHEAD)
        x = values[e]
        acc[rows[e]] += c * (v if v < x else x)
        e = e + 1
    return e


cdef inline void _walk(const SegmentView* sg, Scratch* sc, float64_t* acc, Py_ssize_t m0,
                       Py_ssize_t m1, int kind, float64_t p, Py_ssize_t block_base,
                       Py_ssize_t limit, Py_ssize_t j1, bint new_block,
                       bint chunk_ends) noexcept nogil:
    """Walk entries m0..m1 of the query (see start_query) from sc.cursor
    to the end of the chunk (row j1, offset ``limit`` within the block at
    block_base), adding into acc[offset]; the cursors move on."""
    cdef Py_ssize_t m
    cdef offset_t e, e_end, e_stop, lst
    cdef float64_t v, c, x, vp
    cdef const uint16_t* post_rows = sg.post_rows
    cdef const float32_t* post_values = sg.post_values
    for m in range(m0, m1):
        lst = sc.m_list[m]
        v = sc.m_value[m]
        c = sc.m_coef[m]
        e = sc.cursor[m]
        # Stop at the first row >= j1: by its offset within the block, and
        # at the block's last posting (offsets start again at 0 in the
        # next block).
        if new_block:
            sc.cursor_end[m] = block_end(sg, lst, block_base)
        e_end = sc.cursor_end[m]
        if kind != 2 and chunk_ends:
            e_stop = chunk_stop(sg, lst, block_base, j1, e_end)
            if kind == 0:
                add_min(acc, post_rows, post_values, e, e_stop, c, v)
            else:
                add_product(acc, post_rows, post_values, e, e_stop, c)
            e = e_stop
        elif kind == 0:
            e = add_min_below(acc, post_rows, post_values, e, e_end, limit, c, v)
        elif kind == 1:
            while e < e_end and post_rows[e] < limit:
                SI_PREFETCH(post_values + e + PREFETCH_AHEAD)
                SI_PREFETCH(post_rows + e + PREFETCH_AHEAD)
                acc[post_rows[e]] += c * post_values[e]
                e = e + 1
        else:
            vp = pow(v, p)
            while e < e_end and post_rows[e] < limit:
                x = post_values[e]
                acc[post_rows[e]] += c * (vp + pow(x, p) - pow(fabs(v - x), p))
                e = e + 1
        sc.cursor[m] = e


cdef inline void add_postings(const Search* se, const SegmentView* sg, Scratch* sc,
                              Py_ssize_t row_lo, Py_ssize_t j0, Py_ssize_t j1) noexcept nogil:
    """Walk the posting lists of the query that start_query set up, over
    rows j0..j1 of a unit starting at row row_lo (from sc.cursor, which
    moves on): sc.acc[s * chunk + j - j0]
    holds sum w_c g(q_c, x_c) over the posted columns of selected root s
    shared by the query and row j; a merged search's sc.acc[j - j0] holds
    sum_s eta_s of these. The posting streams are prefetched: short lists
    restart often, and the hardware prefetcher alone leaves the loop
    waiting on memory."""
    cdef Py_ssize_t s, block_base, limit
    cdef bint new_block, chunk_ends
    block_base = (j0 >> BLOCK_SHIFT) << BLOCK_SHIFT
    new_block = j0 == row_lo or j0 == block_base
    limit = j1 - block_base
    # Where each list leaves the chunk is known when the chunk ends at the
    # segment's end, its block's end or a table boundary.
    chunk_ends = (j1 == sg.n_rows or j1 == block_base + BLOCK_ROWS
                  or (sg.block_start != NULL and j1 % sg.block_rows == 0))
    for s in range(1 if se.merged else se.n_sel):
        memset(&sc.acc[s * se.chunk], 0, (j1 - j0) * sizeof(float64_t))
        # Row j of this chunk is acc[s * chunk + block_base - j0 + offset].
        _walk(sg, sc, sc.acc + s * se.chunk + block_base - j0, sc.m_root[s], sc.m_root[s + 1],
              se.kind, se.p, block_base, limit, j1, new_block, chunk_ends)
