# The bounds and values of rows at a finite p, shared by the k-NN and
# radius units (see _inverted_search.pyx for why they hold): the cheapest
# bound of every row of a chunk (posted part and coarse group norms), the
# tighter bound of the dense groups' norms, the value from the identity
# with its allowance, and the exact value of a candidate, its features
# rebuilt from its stored measure.
from libc.math cimport fabs, pow, INFINITY
from libc.stdint cimport int64_t, uint8_t

from .._powers cimport abs_pow, pth_root
from .._typedefs cimport float32_t, float64_t, node_t, offset_t
from ._heap cimport Found
from ._inverted_common cimport N_COARSE, value_max
from ._search_common cimport (
    C_BOUNDED, C_EXACT, C_READ, C_REFINED, ERR_RTOL, SI_PREFETCH, Scratch, Search, SegmentView,
    candidate_ok, note_bad, touch_pair,
)


cdef inline float64_t combine(const Search* se, Py_ssize_t s, float64_t total,
                              float64_t part) noexcept nogil:
    """Add root s's p-th power ``part`` to a total in the caller's units.
    A merged search's parts lack the shared sum (subtracted from the total
    once, see merged_acc), so they are not clipped at zero."""
    if se.merged:
        return total + se.eta[s] * part
    if part < 0.0:
        part = 0.0
    if se.single:
        return total + part
    return total + se.eta[s] * pth_root(part, se.p, se.kind)


cdef inline float64_t low_part(const Search* se, const SegmentView* sg, const Scratch* sc,
                               Py_ssize_t s, Py_ssize_t j, float64_t* err) noexcept nogil:
    """D_L of root s for row j (without the shared sum in a merged
    search), and the allowance of the row's value."""
    cdef Py_ssize_t at = se.positions[s] * sg.n_rows + j
    err[0] = sc.norms[3 * s + 2] + (ERR_RTOL + se.value_rtol) * (sg.x_low[at] + sg.x_high[at])
    if se.merged:
        return sc.norms[3 * s] + sg.x_low[at]
    return sc.norms[3 * s] + sg.x_low[at] - sc.acc[s * se.chunk + j - sc.j0]


cdef inline float64_t merged_acc(const Search* se, const Scratch* sc, Py_ssize_t j) noexcept nogil:
    """What a merged search subtracts once from row j's total: sum_s
    eta_s acc_s (see start_query); 0 otherwise."""
    return sc.acc[j - sc.j0] if se.merged else 0.0


cdef inline void prefetch_row(const float32_t* row, Py_ssize_t n) noexcept nogil:
    """Ask for every cache line of row[0:n]."""
    cdef Py_ssize_t h
    if n == 0:
        return
    for h in range(0, n, 16):
        SI_PREFETCH(row + h)
    SI_PREFETCH(row + n - 1)


cdef inline void _bound_rows_merged(const Search* se, const SegmentView* sg, const Scratch* sc,
                                    Py_ssize_t j0, Py_ssize_t j1) noexcept nogil:
    """bound_rows of a merged search (p = 1 over several roots): the sum
    over roots of eta_s (D_L less its allowance) is the query's part, plus
    the row's (sg.x_merged), less the shared sum (sc.acc); then each root's
    coarse group terms, one root at a time."""
    cdef Py_ssize_t j, s, r, n = j1 - j0
    cdef float64_t* bounds = sc.bounds
    cdef const uint8_t* mask = sg.mask + j0
    cdef const float64_t* acc = sc.acc + j0 - sc.j0
    cdef const float64_t* x_merged = sg.x_merged + j0
    cdef const float32_t* x0
    cdef const float32_t* x1
    cdef const float32_t* x2
    cdef const float32_t* x3
    cdef float64_t q = 0.0, q0, q1, q2, q3, eta, d
    for s in range(se.n_sel):
        q = q + se.eta[s] * (sc.norms[3 * s] - sc.norms[3 * s + 2])
    for j in range(n):
        bounds[j] = q + x_merged[j] - acc[j]
    # (Written for N_COARSE = 4, as bound_rows.)
    for s in range(se.n_sel):
        r = se.positions[s]
        eta = se.eta[s]
        x0 = sg.x_coarse + r * N_COARSE * sg.n_rows + j0
        x1 = x0 + sg.n_rows
        x2 = x1 + sg.n_rows
        x3 = x2 + sg.n_rows
        q0 = sc.qc_root[s * N_COARSE]
        q1 = sc.qc_root[s * N_COARSE + 1]
        q2 = sc.qc_root[s * N_COARSE + 2]
        q3 = sc.qc_root[s * N_COARSE + 3]
        for j in range(n):
            d = (fabs(q0 - x0[j]) + fabs(q1 - x1[j])) + (fabs(q2 - x2[j]) + fabs(q3 - x3[j]))
            bounds[j] = bounds[j] + eta * d
    for j in range(n):
        d = bounds[j]
        bounds[j] = (d if d > 0.0 else 0.0) if mask[j] else INFINITY


cdef inline void _bound_rows_by_root(const Search* se, const SegmentView* sg, const Scratch* sc,
                                     Py_ssize_t j0, Py_ssize_t j1) noexcept nogil:
    """bound_rows with several roots, one root at a time: per root s, the
    root's D_L (low_part) less its allowance, plus the coarse group norms'
    terms, added to the row's total by combine. Each pass reads a handful
    of row arrays in order; a pass over the rows that read every root's
    arrays at once would follow more streams than the hardware
    prefetches."""
    cdef Py_ssize_t j, s, c, r, n = j1 - j0
    cdef float64_t* bounds = sc.bounds
    cdef const uint8_t* mask = sg.mask + j0
    cdef float64_t low_rtol = ERR_RTOL + se.value_rtol
    cdef float64_t q_low, err_q, err, part
    cdef const float64_t* x_low
    cdef const float64_t* x_high
    cdef const float64_t* acc
    cdef const float32_t* x_coarse
    cdef const float64_t* q_coarse
    if se.merged:
        _bound_rows_merged(se, sg, sc, j0, j1)
        return
    for j in range(n):
        bounds[j] = 0.0
    for s in range(se.n_sel):
        r = se.positions[s]
        x_low = sg.x_low + r * sg.n_rows + j0
        x_high = sg.x_high + r * sg.n_rows + j0
        acc = sc.acc + s * se.chunk + j0 - sc.j0
        x_coarse = sg.x_coarse + r * N_COARSE * sg.n_rows + j0
        q_coarse = sc.qc_root + s * N_COARSE
        q_low = sc.norms[3 * s]
        err_q = sc.norms[3 * s + 2]
        for j in range(n):
            err = err_q + low_rtol * (x_low[j] + x_high[j])
            part = q_low + x_low[j] - acc[j] - err
            for c in range(N_COARSE):
                part = part + abs_pow(q_coarse[c] - x_coarse[c * sg.n_rows + j], se.p, se.kind)
            bounds[j] = combine(se, s, bounds[j], part)
    for j in range(n):
        if not mask[j]:
            bounds[j] = INFINITY


cdef inline void bound_rows(const Search* se, const SegmentView* sg, const Scratch* sc,
                            Py_ssize_t j0, Py_ssize_t j1) noexcept nogil:
    """The cheapest lower bound of rows j0..j1, from the posted part and
    the dense part's coarse group norms, into sc.bounds (inf for rows not
    to be returned). With one root this is a flat loop over row arrays
    that the compiler can vectorise: it runs for every row."""
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
        _bound_rows_by_root(se, sg, sc, j0, j1)
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


cdef inline void bound_chunk(const Search* se, const SegmentView* sg, Scratch* sc,
                             Py_ssize_t j0, Py_ssize_t j1) noexcept nogil:
    """The cheapest bound of rows j0..j1 (bound_rows), counted for the
    rows of the search's scope."""
    cdef Py_ssize_t j
    bound_rows(se, sg, sc, j0, j1)
    for j in range(j0, j1):
        sc.counts[C_BOUNDED] += sg.mask[j] != 0


cdef inline float64_t bound_groups(const Search* se, const SegmentView* sg, const Scratch* sc,
                                   Py_ssize_t j) noexcept nogil:
    """Lower bound from the norms of groups of dense columns: tighter."""
    cdef Py_ssize_t s, r, g
    cdef float64_t total = 0.0, err, part
    cdef const float32_t* row = sg.x_group_root + j * sg.n_groups
    for s in range(se.n_sel):
        r = se.positions[s]
        part = low_part(se, sg, sc, s, j, &err) - err
        for g in range(sg.root_groups[r], sg.root_groups[r + 1]):
            part = part + abs_pow(sc.qg_root[g] - row[g], se.p, se.kind)
        total = combine(se, s, total, part)
    return total - merged_acc(se, sc, j)


cdef inline bint dense_ok(const Search* se, const SegmentView* sg, Py_ssize_t j) noexcept nogil:
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


cdef inline void row_value(const Search* se, const SegmentView* sg, const Scratch* sc,
                           Py_ssize_t j, float64_t* lower, float64_t* upper) noexcept nogil:
    """The row's value from the identity, widened by its allowance both ways."""
    cdef Py_ssize_t s, r, h
    cdef float64_t err, d, lo = 0.0, up = 0.0
    cdef const float32_t* row = sg.dense + j * sg.n_dense
    cdef const float64_t* qh = sc.qh
    for s in range(se.n_sel):
        r = se.positions[s]
        d = low_part(se, sg, sc, s, j, &err)
        if se.kind == 0:
            for h in range(sg.dense_ptr[r], sg.dense_ptr[r + 1]):
                d = d + sg.dense_weight[h] * fabs(qh[h] - row[h])
        elif se.kind == 1:
            for h in range(sg.dense_ptr[r], sg.dense_ptr[r + 1]):
                d = d + sg.dense_weight[h] * (qh[h] - row[h]) * (qh[h] - row[h])
        else:
            for h in range(sg.dense_ptr[r], sg.dense_ptr[r + 1]):
                d = d + sg.dense_weight[h] * pow(fabs(qh[h] - row[h]), se.p)
        lo = combine(se, s, lo, d - err)
        up = combine(se, s, up, d + err)
    lower[0] = lo - merged_acc(se, sc, j)
    upper[0] = up - merged_acc(se, sc, j)


cdef inline bint read_row(const Search* se, const SegmentView* sg, Py_ssize_t segment,
                          Scratch* sc, Py_ssize_t j, float64_t thr, float64_t* lower,
                          float64_t* upper) noexcept nogil:
    """For a row whose cheapest bound is within ``thr``: its group bound
    (when the segment has groups), then its dense values, checked, and its
    value from the identity into lower and upper. Whether its lower value
    is still within ``thr`` (a bad row is noted, and is not)."""
    if sg.n_groups:
        sc.counts[C_REFINED] += 1
        if bound_groups(se, sg, sc, j) > thr:
            return False
    if not dense_ok(se, sg, j):
        note_bad(sc, segment, j, True)
        return False
    row_value(se, sg, sc, j, lower, upper)
    sc.counts[C_READ] += 1
    return lower[0] <= thr


cdef inline float64_t exact_value(const Search* se, const SegmentView* sg, const Scratch* sc,
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
        n_touched = touch_pair(se, sg, sc, s, i, j)
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
        total = combine(se, s, total, part)
    return total


cdef inline bint exact_result(const Search* se, const SegmentView* sg, Py_ssize_t segment,
                              Py_ssize_t i, Scratch* sc, Py_ssize_t j,
                              Found* item) noexcept nogil:
    """Candidate row j's exact result for query i into ``item``; False
    (the row noted) when its stored measure is not one."""
    if not candidate_ok(sg, segment, sc, j):
        return False
    sc.counts[C_EXACT] += 1
    item.value = exact_value(se, sg, sc, i, j)
    item.doc = sg.doc_ids[j]
    item.segment = segment
    item.row = j
    return True


cdef inline Py_ssize_t keep_within(int64_t* rows, float64_t* lows, Py_ssize_t count,
                                   float64_t threshold) noexcept nogil:
    """Drop candidates whose lower value exceeds ``threshold``; new count."""
    cdef Py_ssize_t t, kept = 0
    for t in range(count):
        if lows[t] <= threshold:
            rows[kept] = rows[t]
            lows[kept] = lows[t]
            kept += 1
    return kept
