"""A segment's inverted file over edges: how it is built, checked and searched.

Each segment stores, next to its feature rows, the same values column by
column (posting lists) for every root, except for the few columns present in
most rows, which are kept as a dense block (see ``_inverted_search.pyx`` for the
bounds this allows). A query then reads the postings of its own edges only,
and the dense block only for rows whose lower bound can still reach the top k.

This module knows nothing of files or SQLite: ``storage.py`` writes and reads
the arrays, ``search.py`` decides which segments to search and with what.
"""
import numpy as np

from ..errors import CorruptIndexError
from . import _inverted_build, _inverted_search
from .csr import stack_rows

# A column goes into the dense block when at least this fraction of the
# segment's rows have it: its postings would cost a query more than reading
# the dense values of the few rows whose bounds pass. A lower fraction makes
# the dense norms larger, and the bounds on them looser. (Tuned with
# bench/bench_index.py.)
DENSE_MIN_FRACTION = 0.3
DENSE_MAX_COLUMNS = 128
# Small segments are searched in a blink either way; keep them all postings.
DENSE_MIN_ROWS = 64
# Rows per pass of a query over its postings: the accumulator (8 bytes per
# row and selected root) stays in the L2 cache.
CHUNK = 8192
# A single query's rows are split into ranges, of whole blocks of this many
# rows, that threads search at once; a smaller range would spend more on its
# own start and top k than it saves (tuned with bench/bench_index.py).
# Segments of more than one block keep where each posting list enters each
# block, so that a range finds its start at once.
RANGE_BLOCK_ROWS = 8192
# Candidate places per row range (at least 4 k): rows that may reach the top
# k wait there, and only those still in reach when the range is done get an
# exact value; ties beyond this many get theirs at once.
MIN_CANDIDATES = 64
# Dense columns of a root are cut into about this many groups (pieces of the
# tree, see subtree_groups), and each row keeps its norm per group: a
# tighter bound than the whole dense norm, read before the row's dense values.
DENSE_GROUPS = 16

ARRAYS = ("ptr", "rows", "values", "dense", "dense_columns", "dense_ptr")


def build(features, n_cols):
    """The inverted file of one segment's feature rows (one CSR per root).

    Returns a dict of arrays stacked over roots: column c of root r is slot
    r * n_cols + c; ``dense`` holds the dense columns of all roots side by
    side, root r's being ``dense_columns[dense_ptr[r]:dense_ptr[r + 1]]``.
    """
    ptrs, rows, values, denses, columns = [], [], [], [], []
    offset = 0
    n_rows = len(features[0][0]) - 1 if features else 0
    for indptr, indices, data in features:
        indptr = np.ascontiguousarray(indptr, dtype=np.int64)
        indices = np.ascontiguousarray(indices, dtype=np.int32)
        data = np.ascontiguousarray(data, dtype=np.float64)
        dense_columns = _dense_columns(indices, n_rows, n_cols)
        ptr, post_rows, post_values, dense = _inverted_build.build_inverted(
            indptr, indices, data, n_cols, dense_columns)
        ptrs.append(ptr[:-1] + offset)
        offset += int(ptr[-1])
        rows.append(post_rows)
        values.append(post_values)
        denses.append(dense)
        columns.append(dense_columns)
    dense_ptr = np.zeros(len(features) + 1, dtype=np.int64)
    np.cumsum([len(c) for c in columns], out=dense_ptr[1:])
    return {
        "ptr": np.concatenate(ptrs + [[offset]]).astype(np.int64),
        "rows": np.concatenate(rows).astype(np.int32) if rows else np.zeros(0, np.int32),
        "values": np.concatenate(values) if values else np.zeros(0),
        "dense": (np.ascontiguousarray(np.hstack(denses)) if denses
                  else np.zeros((n_rows, 0))),
        "dense_columns": (np.concatenate(columns).astype(np.int32) if columns
                          else np.zeros(0, np.int32)),
        "dense_ptr": dense_ptr,
    }


def _dense_columns(indices, n_rows, n_cols):
    if n_rows < DENSE_MIN_ROWS or len(indices) == 0:
        return np.zeros(0, dtype=np.int32)
    df = np.bincount(indices, minlength=n_cols)
    common = np.flatnonzero(df >= DENSE_MIN_FRACTION * n_rows)
    common = common[np.argsort(-df[common], kind="stable")[:DENSE_MAX_COLUMNS]]
    return common.astype(np.int32)


def subtree_groups(parent, columns, n_groups):
    """Group labels 0.. for dense columns (tree edges, named by their lower
    node): about ``n_groups`` groups, each a piece of the tree.

    A group's bound |‖q‖_g - ‖x‖_g| is tight when q - x has one sign over
    the group. Masses in one branch tend to move together, and masses in
    different branches against each other, so groups follow the tree
    rather than, say, how often columns occur. So, starting from the
    tops of the dense part, the biggest group is split into its top edge and
    its child subtrees while the count allows. If there are more than
    2 n_groups tops, the tops are pooled into that many groups.
    """
    columns = [int(c) for c in columns]
    if not columns:
        return np.zeros(0, dtype=np.int64)
    dense = set(columns)
    children = {c: [] for c in columns}
    for c in columns:
        if int(parent[c]) in dense:
            children[int(parent[c])].append(c)
    tops = sorted(c for c in columns if int(parent[c]) not in dense)

    def top_of(c, roots):
        while c not in roots:
            c = int(parent[c])
        return c

    if len(tops) > 2 * n_groups:
        pooled = {top: i * 2 * n_groups // len(tops) for i, top in enumerate(tops)}
        top_set = set(tops)
        return np.array([pooled[top_of(c, top_set)] for c in columns], dtype=np.int64)
    roots = set(tops)
    members = {}
    for c in columns:
        members.setdefault(top_of(c, roots), []).append(c)
    split = set()
    while len(roots) < n_groups:
        candidates = [r for r in members if r not in split and children[r]]
        if not candidates:
            break
        biggest = max(candidates, key=lambda r: (len(members[r]), -r))
        split.add(biggest)
        if len(roots) + len(children[biggest]) > n_groups:
            continue
        # Only the split group's columns move, to its top edge or a child.
        roots.update(children[biggest])
        moved, members[biggest] = members[biggest], []
        for c in moved:
            members.setdefault(top_of(c, roots), []).append(c)
    order = {r: i for i, r in enumerate(sorted(roots))}
    return np.array([order[top_of(c, roots)] for c in columns], dtype=np.int64)


class InvertedFile:
    """A segment's inverted file, checked, with per-p row norms cached.

    ``arrays``: what :func:`build` made, read back from the segment file;
    ``features`` and ``doc_ids``: the segment's (checked) feature rows and
    document ids; ``weight``: the trees' edge lengths, one after the other
    (one array that every segment shares)."""

    def __init__(self, arrays, n_rows, trees, name, features, doc_ids, weight):
        self.n_rows = n_rows
        self.features = features
        self.n_roots = len(trees)
        self.n_cols = trees[0].n_nodes
        self._check(arrays, name)
        self.ptr = np.ascontiguousarray(arrays["ptr"], dtype=np.int64)
        rows = np.ascontiguousarray(arrays["rows"], dtype=np.int32)
        # A query streams its postings: kept in memory as 6 bytes each (row
        # offset within its 65,536-row block, float32 value) rather than the
        # file's 12, they search faster. The kernel allows for the rounding,
        # which relies on the values being edge masses of probability
        # measures, in [0, 1].
        self.post_rows = _inverted_build.block_offsets(rows)
        values = np.ascontiguousarray(arrays["values"], dtype=np.float64)
        self.post_values, low, high = _inverted_build.to_float32(values)
        # (The minimum and maximum pass over NaN: it is looked for apart.)
        if len(rows) and not (low >= 0.0 and high <= 1.0 + 1e-9
                              and np.isfinite(values).all()):
            raise CorruptIndexError(
                f"segment {name} has a malformed inverted file (a posting value is outside "
                "[0, 1]); run verify() and restore the file from a backup")
        # The dense block is read for the few rows whose bounds pass, and as
        # float32 (allowed for like the posting values) in half the bytes.
        dense = np.ascontiguousarray(arrays["dense"], dtype=np.float64)
        dense32, low, high = _inverted_build.to_float32(dense.reshape(-1))
        if dense.size and not (low >= 0.0 and high <= 1.0 + 1e-9 and np.isfinite(dense).all()):
            raise CorruptIndexError(
                f"segment {name} has a malformed inverted file (a dense value is outside "
                "[0, 1]); run verify() and restore the file from a backup")
        self.dense = dense32.reshape(dense.shape)
        self.dense_ptr = np.ascontiguousarray(arrays["dense_ptr"], dtype=np.int64)
        dense_columns = np.asarray(arrays["dense_columns"], dtype=np.int64)
        self.weight = np.ascontiguousarray(weight, dtype=np.float64)
        self.col_slot = np.full(self.n_roots * self.n_cols, -1, dtype=np.int32)
        slots = np.concatenate([
            r * self.n_cols + dense_columns[self.dense_ptr[r]:self.dense_ptr[r + 1]]
            for r in range(self.n_roots)])
        self.col_slot[slots] = np.arange(len(slots), dtype=np.int32)
        self.dense_weight = np.ascontiguousarray(self.weight[slots])
        self.dense_weight_sum = np.array(
            [self.dense_weight[a:b].sum() for a, b in zip(self.dense_ptr[:-1], self.dense_ptr[1:])])
        # Dense slots listed group by group (group g of the segment is
        # group_slots[group_ptr[g]:group_ptr[g + 1]]; root r has groups
        # root_groups[r]:root_groups[r + 1]).
        group_slots, group_ptr, root_groups = [], [0], [0]
        # Coarse groups too, exactly COARSE_GROUPS per root (some may be
        # empty): every row's first bound sums over them.
        n_coarse = _inverted_build.COARSE_GROUPS
        self.coarse_of = np.zeros(len(dense_columns), dtype=np.int64)
        for r, tree in enumerate(trees):
            start, stop = self.dense_ptr[r], self.dense_ptr[r + 1]
            coarse = subtree_groups(tree.parent, dense_columns[start:stop], n_coarse)
            if len(coarse) and coarse.max() >= n_coarse:
                # Pooled tops come in more groups than asked for: merge
                # neighbours (any partition gives a valid bound).
                coarse = coarse * n_coarse // (int(coarse.max()) + 1)
            self.coarse_of[start:stop] = r * n_coarse + coarse
            labels = subtree_groups(tree.parent, dense_columns[start:stop], DENSE_GROUPS)
            group_slots.append(start + np.argsort(labels, kind="stable"))
            if len(labels):
                group_ptr.extend((group_ptr[-1] + np.cumsum(np.bincount(labels))).tolist())
            root_groups.append(root_groups[-1] + (int(labels.max()) + 1 if len(labels) else 0))
        self.group_slots = np.concatenate(group_slots).astype(np.int64)
        self.group_of = np.zeros(len(self.group_slots), dtype=np.int64)
        self.group_of[self.group_slots] = np.repeat(np.arange(len(group_ptr) - 1),
                                                    np.diff(group_ptr))
        self.group_ptr = np.asarray(group_ptr, dtype=np.int64)
        self.root_groups = np.asarray(root_groups, dtype=np.int64)
        self._norms = {}
        block_start = None
        if n_rows > RANGE_BLOCK_ROWS:
            block_start = _inverted_build.block_starts(self.ptr, rows, n_rows, RANGE_BLOCK_ROWS)
        self.kernel = _inverted_search.SegmentArrays(
            self.ptr, self.post_rows, self.post_values, self.col_slot, self.weight, self.dense,
            self.dense_ptr, self.dense_weight, self.dense_weight_sum, self.group_slots,
            self.group_ptr,
            self.root_groups, self.coarse_of, doc_ids,
            features, self.n_cols, block_start, RANGE_BLOCK_ROWS)

    def _check(self, arrays, name):
        # The arrays come from a file: an inconsistent one would send the
        # kernel's unchecked loops outside their buffers.
        def fail(what):
            raise CorruptIndexError(
                f"segment {name} has a malformed inverted file ({what}); run verify() and "
                "restore the file from a backup")

        missing = [a for a in ARRAYS if a not in arrays]
        if missing:
            fail(f"missing {', '.join(missing)}")
        n_roots, n_cols, n_rows = self.n_roots, self.n_cols, self.n_rows
        ptr, rows = np.asarray(arrays["ptr"]), np.asarray(arrays["rows"])
        values, dense = np.asarray(arrays["values"]), np.asarray(arrays["dense"])
        columns, dense_ptr = np.asarray(arrays["dense_columns"]), np.asarray(arrays["dense_ptr"])
        if ptr.shape != (n_roots * n_cols + 1,) or ptr[0] != 0 or np.any(np.diff(ptr) < 0) \
                or ptr[-1] != len(rows) or len(values) != len(rows):
            fail("posting pointers do not match the postings")
        try:
            _inverted_build.check_postings(np.ascontiguousarray(ptr, dtype=np.int64),
                                     np.ascontiguousarray(rows, dtype=np.int32), n_rows)
        except ValueError as exc:
            fail(str(exc))
        if dense_ptr.shape != (n_roots + 1,) or dense_ptr[0] != 0 \
                or np.any(np.diff(dense_ptr) < 0) or dense_ptr[-1] != len(columns):
            fail("dense-column pointers do not match the dense columns")
        if dense.ndim != 2 or dense.shape != (n_rows, len(columns)):
            fail(f"the dense block has shape {dense.shape}; expected {(n_rows, len(columns))}")
        if len(columns) and (columns.min() < 0 or columns.max() >= n_cols):
            fail(f"a dense column is outside 0..{n_cols - 1}")
        for r in range(n_roots):
            own = columns[dense_ptr[r]:dense_ptr[r + 1]]
            if len(np.unique(own)) != len(own):
                fail(f"root {r} lists a dense column twice")
            # A dense column keeps no postings.
            if len(own) and np.any(ptr[r * n_cols + own + 1] != ptr[r * n_cols + own]):
                fail(f"root {r} has postings for a dense column")

    def row_norms(self, p):
        """The row norms for this p, as the kernel takes them (RowNorms of
        low, high, coarse_root, group_root): per root and row the posted and
        dense norms; the 1/p power of each group norm, per coarse group and
        row, and per row and dense group. The two most recent p values are
        kept."""
        features = self.features
        if p not in self._norms:
            if len(self._norms) >= 2:
                del self._norms[next(iter(self._norms))]
            shape = (self.n_roots, self.n_rows)
            low, high = np.zeros(shape), np.zeros(shape)
            for r, (indptr, indices, data) in enumerate(features):
                slot = self.col_slot[r * self.n_cols:(r + 1) * self.n_cols]
                w = self.weight[r * self.n_cols:(r + 1) * self.n_cols]
                _inverted_build.split_power_sums(
                    np.ascontiguousarray(indptr, dtype=np.int64),
                    np.ascontiguousarray(indices, dtype=np.int32),
                    np.ascontiguousarray(data, dtype=np.float64),
                    w, slot, p, low[r], high[r])
            n_groups = len(self.group_ptr) - 1
            group_root = np.zeros((self.n_rows, n_groups))
            _inverted_build.group_norms(self.dense, self.dense_weight, self.group_of, n_groups, p,
                                        group_root)
            coarse_root = np.zeros((self.n_roots * _inverted_build.COARSE_GROUPS, self.n_rows))
            _inverted_build.coarse_norms(self.dense, self.dense_weight, self.coarse_of, p, coarse_root)
            self._norms[p] = _inverted_search.RowNorms(low, high, coarse_root, group_root)
        return self._norms[p]


def _check_constants():
    # The kernel's chunks must not span two 65,536-row blocks of posting
    # offsets, and row ranges start at block-table boundaries.
    if CHUNK < 1 or CHUNK & (CHUNK - 1) or CHUNK > 1 << 16:
        raise ValueError(f"CHUNK is {CHUNK}; expected a power of two up to 65536")
    if RANGE_BLOCK_ROWS < 1 or (1 << 16) % RANGE_BLOCK_ROWS:
        raise ValueError(f"RANGE_BLOCK_ROWS is {RANGE_BLOCK_ROWS}; expected a divisor of 65536")


def search(files, mask, queries, positions, eta, k, p, n_threads=None):
    """Exact k nearest rows over several segments' inverted files.

    ``files``: InvertedFile per segment; ``mask``: uint8, one per row of the
    segments one after the other, nonzero where the row may be returned;
    ``queries``: raw query rows per selected root, as (indptr, indices,
    data) of the same number of rows; ``positions``: the selected roots.
    Values are p-th powers for one root, else sum_s eta_s S_p. Returns
    (values, segments, rows, docs), each (n_queries, k): query i's t-th best
    is row ``rows[i, t]`` of ``files[segments[i, t]]``, document
    ``docs[i, t]``; unused places hold inf and -1. Ties go to the lower
    document id.
    """
    _check_constants()
    n_q = len(queries[0][0]) - 1
    values = np.empty((n_q, k))
    segments = np.empty((n_q, k), dtype=np.int64)
    rows = np.empty((n_q, k), dtype=np.int64)
    docs = np.empty((n_q, k), dtype=np.int64)
    indptr, indices, data = queries[0] if len(queries) == 1 else stack_rows(queries)
    _inverted_search.search_segments(
        [f.kernel for f in files], [f.row_norms(p) for f in files], mask,
        np.ascontiguousarray(indptr, dtype=np.int64), np.ascontiguousarray(indices, dtype=np.int32),
        np.ascontiguousarray(data, dtype=np.float64), n_q, np.asarray(positions, dtype=np.int64),
        np.ascontiguousarray(eta, dtype=np.float64), k, p, CHUNK, MIN_CANDIDATES,
        values, segments, rows, docs, n_threads=n_threads)
    return values, segments, rows, docs

