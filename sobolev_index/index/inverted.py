"""A segment's inverted file over edges: how it is built, checked and searched.

Each segment stores its rows' features column by column (posting lists) for
every root, except for the few columns present in most rows, which are kept
as a dense block (see ``_inverted_search.pyx`` for the bounds this allows);
the features themselves are not stored, but rebuilt from the measures
where exact values need them. A query then reads the postings of its own
edges only, and the dense block only for rows whose lower bound can still
reach the top k; at p = inf it reads every row's dense values instead,
which bound S_inf from below.

This module knows nothing of files or SQLite: ``storage.py`` writes and reads
the arrays, ``query.py`` decides which segments to search and with what.

In order: the layout's constants; writing (``build``, its stored form
``_stored_form`` and ``share_lists``, which stores a list once for all the
roots' edges that have it); older formats (``from_v3``, ``from_v2``); the
dense columns' groups (``dense_groups``, ``subtree_groups``) and norms;
reading (``InvertedFile``: the checks of a file's arrays, lists checked at
first use, row norms per p); and ``search``, the call into the kernel.
"""
import math
import threading

import numpy as np

from ..errors import ADVICE, CorruptIndexError
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
# block, so that a range finds its start at once; each segment records the
# block size it was written with, so a later change applies to new segments.
RANGE_BLOCK_ROWS = 8192
# With fewer queries than this many per thread, a query's segments are cut
# into row ranges (of whole RANGE_BLOCK_ROWS blocks) until there are about
# this many units per thread. Each range keeps its own k best and computes
# their exact values, so more ranges balance the threads better but cost
# more exact values (see docs/benchmarks.md).
RANGES_PER_WORKER = 1
# Candidate places per row range (at least 4 k): rows that may reach the top
# k wait there, and only those still in reach when the range is done get an
# exact value; ties beyond this many get theirs at once.
MIN_CANDIDATES = 64
# Dense columns of a root are cut into about this many groups (pieces of the
# tree, see subtree_groups), and each row keeps its norm per group: a
# tighter bound than the whole dense norm, read before the row's dense values.
DENSE_GROUPS = 16

# The arrays a segment file stores (format 4): the search's own forms, so a
# reader maps them and searches at once (see InvertedFile).
ARRAYS = ("ptr", "slot_list", "post_rows", "post_values", "block_rows", "block_start", "dense",
          "dense_columns", "dense_ptr", "norm_p", "norm_low", "norm_high")
# Stored values are edge masses of probability measures: in [0, 1], with
# room for the rounding of a sum (the kernel checks the dense values it
# reads against the same bound).
VALUE_MAX = _inverted_build.VALUE_MAX
# Stored beside them since 2026-11-26 (segments without them compute them at
# their first search): each dense slot's group and coarse group, and each
# row's group norms for norm_p, so that a search at the index's p reads
# them from the file instead of computing them from the whole dense block.
GROUP_ARRAYS = ("group_labels", "coarse_labels", "norm_group", "norm_coarse")
# The largest float32: group norms are held at most at it.
FLOAT32_MAX = _inverted_build.FLOAT32_MAX_VALUE
# What format 2 stored: int32 rows, float64 values and dense block.
ARRAYS_V2 = ("ptr", "rows", "values", "dense", "dense_columns", "dense_ptr")
# Format 3 stored one posting list per slot, in slot order, and no
# slot_list: slot s read list s (see from_v3).


def build(features, n_cols, weight, p, trees):
    """The inverted file of one segment's feature rows (one CSR per root,
    of the index's ``trees``), as the arrays a segment file stores.

    Column c of root r is slot r * n_cols + c; it reads posting list
    ``slot_list[slot]``, whose postings are ``post_rows[ptr[l]:ptr[l + 1]]``
    (offsets within 65,536-row blocks, see _inverted_build.block_offsets)
    with their float32 values. Slots whose lists are equal share one (see
    share_lists): an edge whose subtree is the same under several roots
    has the same masses in every row. ``block_start`` is where each list
    enters each range of ``block_rows``
    (RANGE_BLOCK_ROWS) rows (no columns for a segment of one range). ``dense``
    (float32) holds the dense columns of all roots side by side, root r's
    being ``dense_columns[dense_ptr[r]:dense_ptr[r + 1]]``. ``norm_low`` and
    ``norm_high`` are each row's sum_c w_c x_c^p over its posted and its
    dense columns (their float32 values), per root, for ``norm_p`` = ``p``
    (``weight``: the trees' edge lengths one after the other), the values
    that a search at the index's own p would otherwise compute on first
    use; for p = inf there are none (``norm_p`` is NaN). ``group_labels``
    and ``coarse_labels`` are each dense slot's group and coarse group (see
    dense_groups), ``norm_group`` (rows x groups) and ``norm_coarse``
    (coarse groups x rows) the rows' group norms for ``norm_p`` as float32,
    none for p = inf.
    """
    ptrs, rows, values, denses, columns = [], [], [], [], []
    offset = 0
    n_rows = len(features[0][0]) - 1 if features else 0
    n_roots = len(features)
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
    dense_ptr = np.zeros(n_roots + 1, dtype=np.int64)
    np.cumsum([len(c) for c in columns], out=dense_ptr[1:])
    ptr = np.concatenate(ptrs + [[offset]]).astype(np.int64)
    rows = np.concatenate(rows).astype(np.int32) if rows else np.zeros(0, np.int32)
    values = np.concatenate(values) if values else np.zeros(0)
    dense = np.ascontiguousarray(np.hstack(denses)) if denses else np.zeros((n_rows, 0))
    columns = np.concatenate(columns).astype(np.int32) if columns else np.zeros(0, np.int32)
    arrays = _stored_form(ptr, rows, values, dense, columns, dense_ptr, n_rows)
    finite = not np.isinf(p)
    low, high = (power_sums(arrays, n_rows, n_roots, n_cols, weight, float(p)) if finite
                 else (np.zeros((0, 0)), np.zeros((0, 0))))
    arrays.update(norm_p=np.array([float(p) if finite else np.nan]), norm_low=low,
                  norm_high=high)
    group_of, coarse_of = dense_groups(trees, columns, dense_ptr)
    arrays.update(group_labels=group_of, coarse_labels=coarse_of)
    if finite:
        group, coarse = _group_norms(arrays["dense"], weight[_dense_slots(arrays, n_cols)],
                                     group_of, coarse_of, n_roots, float(p))
    else:
        group, coarse = np.zeros((0, 0), np.float32), np.zeros((0, 0), np.float32)
    arrays.update(norm_group=group, norm_coarse=coarse)
    return arrays


def _dense_slots(arrays, n_cols):
    """Slot (root * n_cols + column) of each dense column, root by root."""
    dense_ptr = np.asarray(arrays["dense_ptr"], dtype=np.int64)
    columns = np.asarray(arrays["dense_columns"], dtype=np.int64)
    return np.concatenate([r * n_cols + columns[dense_ptr[r]:dense_ptr[r + 1]]
                           for r in range(len(dense_ptr) - 1)] or [np.zeros(0, np.int64)])


def _group_norms(dense, dense_weight, group_of, coarse_of, n_roots, p):
    """(per row and group, per coarse group and row) norms of the dense
    block's groups for p, as float32 (see _inverted_build.group_norms)."""
    n_rows = dense.shape[0]
    n_groups = int(group_of.max()) + 1 if len(group_of) else 0
    group = np.zeros((n_rows, n_groups), dtype=np.float32)
    coarse = np.zeros((n_roots * _inverted_build.COARSE_GROUPS, n_rows), dtype=np.float32)
    _inverted_build.group_norms(np.ascontiguousarray(dense, dtype=np.float32),
                                np.ascontiguousarray(dense_weight, dtype=np.float64),
                                np.ascontiguousarray(group_of, dtype=np.int64),
                                np.ascontiguousarray(coarse_of, dtype=np.int64), p, group, coarse)
    return group, coarse


def dense_groups(trees, dense_columns, dense_ptr):
    """(group_of, coarse_of), int64: each dense slot's group and coarse
    group. Groups are pieces of the tree (subtree_groups), about
    DENSE_GROUPS per root, numbered over all roots so that root r's form a
    range above root r - 1's; coarse groups are COARSE_GROUPS per root, root
    r's numbered r * COARSE_GROUPS + 0..COARSE_GROUPS - 1 (some may be
    empty)."""
    n_coarse = _inverted_build.COARSE_GROUPS
    dense_columns = np.asarray(dense_columns, dtype=np.int64)
    group_of = np.zeros(len(dense_columns), dtype=np.int64)
    coarse_of = np.zeros(len(dense_columns), dtype=np.int64)
    base = 0
    for r, tree in enumerate(trees):
        start, stop = int(dense_ptr[r]), int(dense_ptr[r + 1])
        coarse = subtree_groups(tree.parent, dense_columns[start:stop], n_coarse)
        if len(coarse) and coarse.max() >= n_coarse:
            # Pooled tops come in more groups than asked for: merge
            # neighbours (any partition gives a valid bound).
            coarse = coarse * n_coarse // (int(coarse.max()) + 1)
        coarse_of[start:stop] = r * n_coarse + coarse
        labels = subtree_groups(tree.parent, dense_columns[start:stop], DENSE_GROUPS)
        group_of[start:stop] = base + labels
        base += int(labels.max()) + 1 if len(labels) else 0
    return group_of, coarse_of


def _group_layout(group_of, dense_ptr):
    """(group_slots, group_ptr, root_groups) of checked group labels: the
    dense slots group by group (group g is group_slots[group_ptr[g]:
    group_ptr[g + 1]]), and root r's groups root_groups[r]:root_groups[r + 1]."""
    n_groups = int(group_of.max()) + 1 if len(group_of) else 0
    group_slots = np.argsort(group_of, kind="stable").astype(np.int64)
    group_ptr = np.zeros(n_groups + 1, dtype=np.int64)
    np.cumsum(np.bincount(group_of, minlength=n_groups), out=group_ptr[1:])
    root_groups = [0]
    for r in range(len(dense_ptr) - 1):
        own = group_of[dense_ptr[r]:dense_ptr[r + 1]]
        root_groups.append(int(own.max()) + 1 if len(own) else root_groups[-1])
    return group_slots, group_ptr, np.asarray(root_groups, dtype=np.int64)


def power_sums(arrays, n_rows, n_roots, n_cols, weight, p):
    """(low, high): each row's sum_c w_c x_c^p over its posted and its dense
    columns, per root, from the stored float32 values of ``arrays`` (in the
    forms :func:`build` gives them, and checked)."""
    low, high = np.zeros((n_roots, n_rows)), np.zeros((n_roots, n_rows))
    dense_ptr = np.ascontiguousarray(arrays["dense_ptr"], dtype=np.int64)
    slots = _dense_slots(arrays, n_cols)
    weight = np.ascontiguousarray(weight, dtype=np.float64)
    _inverted_build.posted_power_sums(
        np.ascontiguousarray(arrays["ptr"], dtype=np.int64),
        np.ascontiguousarray(arrays["slot_list"], dtype=np.int32),
        np.ascontiguousarray(arrays["post_rows"], dtype=np.uint16),
        np.ascontiguousarray(arrays["block_start"], dtype=np.int64), n_rows,
        int(arrays["block_rows"][0]),
        np.ascontiguousarray(arrays["post_values"], dtype=np.float32), weight, n_cols, p, low)
    _inverted_build.dense_power_sums(
        np.ascontiguousarray(arrays["dense"], dtype=np.float32),
        np.ascontiguousarray(weight[slots]), dense_ptr, p, high)
    return low, high


def _stored_form(ptr, rows, values, dense, dense_columns, dense_ptr, n_rows):
    """Postings (int64 ``ptr`` per slot, int32 ``rows``, float64 ``values``)
    and the dense block as format 4 stores them, without the norms: each
    distinct list once (share_lists), as 6-byte postings, the table of range
    starts (none for a segment of one range), a float32 dense block."""
    slot_list, ptr, rows, values = share_lists(
        ptr, rows, _inverted_build.to_float32(np.ascontiguousarray(values, dtype=np.float64)))
    if n_rows <= RANGE_BLOCK_ROWS:
        block_start = np.zeros((len(ptr) - 1, 0), dtype=np.int64)
    else:
        block_start = _inverted_build.block_starts(ptr, rows, n_rows, RANGE_BLOCK_ROWS)
    dense = np.ascontiguousarray(dense, dtype=np.float64)
    return {
        "ptr": ptr,
        "slot_list": slot_list,
        "post_rows": _inverted_build.block_offsets(rows),
        "post_values": values,
        "block_rows": np.array([RANGE_BLOCK_ROWS], dtype=np.int64),
        "block_start": block_start,
        "dense": _inverted_build.to_float32(dense.reshape(-1)).reshape(dense.shape),
        "dense_columns": dense_columns,
        "dense_ptr": dense_ptr,
    }


def share_lists(ptr, rows, values):
    """The posting lists of every slot (``ptr`` per slot, int32 ``rows``,
    float32 ``values``), each distinct list once: ``(slot_list, ptr, rows,
    values)`` where slot s reads list ``slot_list[s]`` (int32), whose
    postings are ``rows[ptr[l]:ptr[l + 1]]``. List 0 is the empty list.

    A slot shares the list of the first slot with the same hash when the
    two lists are equal, rows and value bits compared in full, so a slot
    reads exactly what it would read from a list of its own (a list whose
    hash collides with an unequal one keeps its own). With several roots
    most lists are shared: an edge whose subtree holds the same nodes under
    two roots has the same mass in every row, and away from the roots most
    subtrees do. The lists keep the order of their first slots."""
    ptr = np.ascontiguousarray(ptr, dtype=np.int64)
    rows = np.ascontiguousarray(rows, dtype=np.int32)
    values = np.ascontiguousarray(values, dtype=np.float32)
    slot_list = np.zeros(len(ptr) - 1, dtype=np.int32)
    posted = np.flatnonzero(np.diff(ptr))
    if len(posted):
        hashes = _list_hashes(ptr, rows, values)[posted]
        _, first, inverse = np.unique(hashes, return_index=True, return_inverse=True)
        # np.unique's index is the first occurrence: the earliest slot.
        candidate = posted[first[inverse.reshape(-1)]]
        same = _inverted_build.lists_equal(ptr, rows, values, posted, candidate).view(bool)
        owner = np.where(same, candidate, posted)
        kept = np.flatnonzero(owner == posted)
        number = np.zeros(len(slot_list), dtype=np.int32)
        number[posted[kept]] = np.arange(1, len(kept) + 1, dtype=np.int32)
        slot_list[posted] = number[owner]
        kept = posted[kept]
    else:
        kept = np.zeros(0, dtype=np.int64)
    lengths = ptr[kept + 1] - ptr[kept]
    out_ptr = np.zeros(len(kept) + 2, dtype=np.int64)
    np.cumsum(lengths, out=out_ptr[2:])
    at = np.repeat(ptr[kept] - out_ptr[1:-1], lengths) + np.arange(out_ptr[-1], dtype=np.int64)
    return slot_list, out_ptr, rows[at], values[at]


# (A name of its own, so that a test can make every list's hash collide.)
_list_hashes = _inverted_build.list_hashes


def from_v3(arrays):
    """A format-3 segment's inverted file in the arrays of format 4: one
    list per slot, in slot order, so slot s reads list s."""
    if "slot_list" in arrays:
        return arrays
    out = dict(arrays)
    out["slot_list"] = np.arange(max(len(np.asarray(arrays["ptr"])) - 1, 0), dtype=np.int32)
    return out


def from_v2(arrays, n_rows, name):
    """A format-2 segment's inverted file (int32 rows, float64 values) in
    the arrays of format 4, built in memory, without norms: what a reader
    of an index written by an older release searches."""
    missing = [a for a in ARRAYS_V2 if a not in arrays]
    if missing:
        _fail(name, f"missing {', '.join(missing)}")
    ptr, rows = np.asarray(arrays["ptr"]), np.asarray(arrays["rows"])
    if ptr.dtype.kind != "i" or rows.dtype.kind != "i":
        _fail(name, f"posting pointers and rows of types {ptr.dtype}/{rows.dtype}; expected "
                    "signed integers")
    ptr = ptr.astype(np.int64, copy=False)
    if ptr.ndim != 1 or len(ptr) < 1 or ptr[0] != 0 or np.any(np.diff(ptr) < 0) \
            or ptr[-1] != len(rows) or len(arrays["values"]) != len(rows):
        _fail(name, "posting pointers do not match the postings")
    ptr = np.ascontiguousarray(ptr)
    rows = np.ascontiguousarray(rows, dtype=np.int32)
    try:
        _inverted_build.check_postings(ptr, rows, n_rows)
    except ValueError as exc:
        _fail(name, str(exc))
    values = np.ascontiguousarray(arrays["values"], dtype=np.float64)
    if len(values) and not np.isfinite(values).all():
        _fail(name, "a posting value is not finite")
    dense = np.asarray(arrays["dense"])
    if not np.isfinite(dense).all():
        _fail(name, "a dense value is not finite")
    stored = _stored_form(ptr, rows, values, dense, arrays["dense_columns"],
                          arrays["dense_ptr"], n_rows)
    stored.update(norm_p=np.array([np.nan]), norm_low=np.zeros((0, 0)),
                  norm_high=np.zeros((0, 0)))
    return stored


def _fail(name, what):
    raise CorruptIndexError(
        f"segment {name} has a malformed inverted file ({what}); {ADVICE['verify']} "
        "restore the file from a backup")


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
    ``measures`` and ``row_scale``: the segment's measures, (indptr, nodes,
    masses), their pointers checked (the kernel checks each candidate's
    supports), and each row's normalising factor, from which exact values
    are computed; ``doc_ids``: the segment's document ids;
    ``weight``: the trees' edge lengths, one after the other (one array
    that every segment shares)."""

    def __init__(self, arrays, n_rows, trees, name, measures, row_scale, doc_ids, weight):
        self.n_rows = n_rows
        self.n_roots = len(trees)
        self.n_cols = trees[0].n_nodes
        self.name = name
        self._check(arrays, name)
        self.ptr = np.ascontiguousarray(arrays["ptr"], dtype=np.int64)
        self.slot_list = np.ascontiguousarray(arrays["slot_list"], dtype=np.int32)
        # Posting lists already checked (see check_lists), one flag per list;
        # and the whole dense block (check_dense).
        self._list_checked = np.zeros(len(self.ptr) - 1, dtype=np.uint8)
        self._dense_checked = False
        self._lists_lock = threading.Lock()
        # Mapped from the file as they are: a query streams 6 bytes per
        # posting (row offset within its 65,536-row block, float32 value)
        # and reads the dense block's float32 values for the few rows whose
        # bounds pass. The kernel allows for the rounding, which relies on
        # the values being edge masses of probability measures, in [0, 1].
        self.post_rows = np.ascontiguousarray(arrays["post_rows"], dtype=np.uint16)
        self.post_values = np.ascontiguousarray(arrays["post_values"], dtype=np.float32)
        self.dense = np.ascontiguousarray(arrays["dense"], dtype=np.float32)
        block_start = np.ascontiguousarray(arrays["block_start"], dtype=np.int64)
        self.block_rows = int(arrays["block_rows"][0])
        self.norm_p = float(np.asarray(arrays["norm_p"])[0])
        # Each row's norms for norm_p, as the file stores them (see build).
        self.stored_norms = (arrays["norm_low"], arrays["norm_high"])
        self._arrays = {name: arrays[name] for name in ARRAYS if not name.startswith("norm_")}
        self.dense_ptr = np.ascontiguousarray(arrays["dense_ptr"], dtype=np.int64)
        dense_columns = np.asarray(arrays["dense_columns"], dtype=np.int64)
        self.weight = np.ascontiguousarray(weight, dtype=np.float64)
        self.col_slot = np.full(self.n_roots * self.n_cols, -1, dtype=np.int32)
        slots = _dense_slots(arrays, self.n_cols)
        self.col_slot[slots] = np.arange(len(slots), dtype=np.int32)
        self.dense_weight = np.ascontiguousarray(self.weight[slots])
        self.root_weight = self.weight.reshape(self.n_roots, self.n_cols).sum(axis=1)
        # Each dense slot's group and coarse group (the groups' norms bound
        # the dense part; every row's first bound sums over the coarse
        # ones), computed as build does. The rows' group norms for norm_p
        # are read from the file when it stores them with the same groups:
        # stored labels that differ (damaged, or made by another grouping)
        # leave the norms to be computed from the dense block instead, since
        # norms of other groups would not bound the query's.
        self.group_of, self.coarse_of = dense_groups(trees, dense_columns, self.dense_ptr)
        self.stored_group_norms = None
        self.stored_groups_differ = False
        if any(a in arrays for a in GROUP_ARRAYS):
            group_of, coarse_of, norms = self._checked_groups(arrays, name, len(dense_columns))
            if np.array_equal(group_of, self.group_of) and np.array_equal(coarse_of,
                                                                          self.coarse_of):
                self.stored_group_norms = norms
            else:
                self.stored_groups_differ = True
        self.group_slots, self.group_ptr, self.root_groups = _group_layout(self.group_of,
                                                                          self.dense_ptr)
        self._norms = {}
        self._norms_lock = threading.Lock()
        # The table of range starts, None for a segment of one range.
        self.block_start = block_start if block_start.shape[1] else None
        self._block_table = block_start
        self.kernel = _inverted_search.SegmentArrays(
            self.ptr, self.slot_list, self.post_rows, self.post_values, self.col_slot,
            self.weight, self.dense, self.dense_ptr, self.dense_weight, self.root_weight, self.group_slots,
            self.group_ptr, self.root_groups, self.coarse_of, doc_ids,
            measures, row_scale, self.n_roots, self.n_cols, self.block_start, self.block_rows)

    def _check(self, arrays, name):
        # The arrays come from a file: an inconsistent one would send the
        # kernel's unchecked loops outside their buffers.
        def fail(what):
            _fail(name, what)

        missing = [a for a in ARRAYS if a not in arrays]
        if missing:
            fail(f"missing {', '.join(missing)}")
        n_roots, n_cols, n_rows = self.n_roots, self.n_cols, self.n_rows
        given = {a: np.asarray(arrays[a]) for a in ARRAYS}
        # Types first: a float pointer array could hold NaN, which passes
        # every comparison below and becomes a huge negative integer, and an
        # unsigned one never has a negative difference. Pointers are signed
        # integers, compared as int64.
        kinds = {"ptr": "i", "slot_list": "i", "block_rows": "i", "block_start": "i",
                 "dense_columns": "i",
                 "dense_ptr": "i", "post_rows": np.uint16, "post_values": np.float32,
                 "dense": np.float32, "norm_p": np.float64, "norm_low": np.float64,
                 "norm_high": np.float64}
        for a, kind in kinds.items():
            dtype = given[a].dtype
            if (dtype.kind != "i") if kind == "i" else (dtype != kind):
                fail(f"{a} holds {dtype} values; expected "
                     + ("signed integers" if kind == "i" else np.dtype(kind).name))
            if kind == "i":
                given[a] = given[a].astype(np.int64, copy=False)
        ptr, rows = given["ptr"], given["post_rows"]
        values, dense = given["post_values"], given["dense"]
        columns, dense_ptr = given["dense_columns"], given["dense_ptr"]
        slot_list = given["slot_list"]
        # At most one list per slot, and the empty one.
        if ptr.ndim != 1 or not 1 <= len(ptr) <= n_roots * n_cols + 2 or ptr[0] != 0 \
                or np.any(np.diff(ptr) < 0) or ptr[-1] != len(rows) \
                or values.shape != rows.shape or rows.ndim != 1:
            fail("posting pointers do not match the postings")
        if slot_list.shape != (n_roots * n_cols,) or (
                len(slot_list) and (slot_list.min() < 0 or slot_list.max() >= len(ptr) - 1)):
            fail(f"the list of each slot has shape {slot_list.shape} or names a list outside "
                 f"0..{len(ptr) - 2}; expected one list per slot, {n_roots * n_cols}")
        block_rows = given["block_rows"]
        if block_rows.shape != (1,) or not 1 <= block_rows[0] <= 1 << 16 \
                or (1 << 16) % int(block_rows[0]):
            fail(f"the rows per range are {block_rows.tolist()}; expected a divisor of 65536")
        block_rows = int(block_rows[0])
        block_start = given["block_start"]
        if block_start.ndim != 2:
            fail(f"the table of range starts has {block_start.ndim} dimensions; expected 2")
        if (n_rows > block_rows) != (block_start.shape[1] > 0):
            fail(f"a segment of {n_rows} rows with a table of {block_start.shape[1]} range "
                 "starts per list")
        # The table's shape here; each posting list, with its values, when a
        # search first reads it (check_lists).
        try:
            _inverted_build.check_block_postings(
                np.ascontiguousarray(ptr, dtype=np.int64), np.ascontiguousarray(rows),
                np.ascontiguousarray(block_start, dtype=np.int64), n_rows, block_rows,
                np.ascontiguousarray(values), VALUE_MAX, np.zeros(0, dtype=np.int64))
        except ValueError as exc:
            fail(str(exc))
        # The dense values: by the kernel, in the rows it reads, and in full
        # (check_dense) before anything reads them all.
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
            lists = slot_list[r * n_cols + own]
            if len(own) and np.any(ptr[lists + 1] != ptr[lists]):
                fail(f"root {r} has postings for a dense column")
        norm_p = given["norm_p"]
        low, high = given["norm_low"], given["norm_high"]
        if norm_p.shape != (1,) or not (np.isnan(norm_p[0]) or 1.0 <= norm_p[0] < np.inf):
            fail(f"the p of the stored row norms is {norm_p.tolist()}; expected one p >= 1")
        expected = (0, 0) if np.isnan(norm_p[0]) else (n_roots, n_rows)
        if not (low.shape == high.shape == expected
                and (low.size == 0 or (np.isfinite(low).all() and np.isfinite(high).all()
                                       and low.min() >= 0 and high.min() >= 0))):
            fail(f"row norms of shapes {low.shape} and {high.shape}, or not finite and >= 0; "
                 f"expected {expected} each")

    def _checked_groups(self, arrays, name, n_dense):
        """Stored group labels and group norms, checked: (group_of,
        coarse_of, (coarse norms, group norms) or None for p = inf)."""
        def fail(what):
            _fail(name, what)

        missing = [a for a in GROUP_ARRAYS if a not in arrays]
        if missing:
            fail(f"missing {', '.join(missing)}")
        n_coarse = _inverted_build.COARSE_GROUPS
        labels = []
        for a in ("group_labels", "coarse_labels"):
            given = np.asarray(arrays[a])
            if given.dtype.kind != "i" or given.shape != (n_dense,):
                fail(f"{a} of type {given.dtype} and shape {given.shape}; expected {n_dense} "
                     "signed integers")
            labels.append(given.astype(np.int64))
        group_of, coarse_of = labels
        end = 0
        for r in range(self.n_roots):
            lo, hi = self.dense_ptr[r], self.dense_ptr[r + 1]
            own, coarse = group_of[lo:hi], coarse_of[lo:hi]
            if len(own) == 0:
                continue
            # Root r's groups above root r - 1's, and at most 2 n + 1 of them
            # for n slots (a piece of the tree may be empty).
            if own.min() < end or own.max() >= end + 2 * len(own) + 1:
                fail(f"root {r}'s dense groups are numbered {own.min()}..{own.max()}")
            end = int(own.max()) + 1
            if coarse.min() < r * n_coarse or coarse.max() >= (r + 1) * n_coarse:
                fail(f"root {r}'s coarse groups are numbered {coarse.min()}..{coarse.max()}")
        group = np.asarray(arrays["norm_group"])
        coarse = np.asarray(arrays["norm_coarse"])
        if np.isnan(self.norm_p):
            if group.shape != (0, 0) or coarse.shape != (0, 0):
                fail("group norms without a p")
            return group_of, coarse_of, None
        shapes = ((self.n_rows, end), (self.n_roots * n_coarse, self.n_rows))
        for what, array, shape in (("group", group, shapes[0]), ("coarse", coarse, shapes[1])):
            if array.dtype != np.float32 or array.shape != shape:
                fail(f"{what} norms of type {array.dtype} and shape {array.shape}; expected "
                     f"float32 of shape {shape}")
            low, high = _inverted_build.float32_range(np.ascontiguousarray(array).reshape(-1))
            # (NaN fails both comparisons.)
            if array.size and not (low >= 0.0 and high <= FLOAT32_MAX):
                fail(f"a {what} norm that is not finite and >= 0")
        return group_of, coarse_of, (coarse, group)

    def check_dense(self):
        """Check every value of the dense block, once: in [0, 1]. (A search
        at the index's p reads the dense values of the rows whose bounds
        pass only, and the kernel checks those; what reads them all calls
        this first.)"""
        with self._lists_lock:
            if not self._dense_checked:
                low, high = _inverted_build.float32_range(self.dense.reshape(-1))
                # (NaN fails both comparisons.)
                if self.dense.size and not (low >= 0.0 and high <= VALUE_MAX):
                    _fail(self.name, "a dense value is outside [0, 1]")
                self._dense_checked = True

    def check_lists(self, slots=None):
        """Check the posting lists of ``slots`` (int64, r * n_cols + column;
        all for None) and their values, each list once: the order and bounds
        of their rows, their table of range starts and their values in
        [0, 1]. A search checks the lists of its query's columns before the
        kernel reads them, so that opening and a first search read only
        those."""
        with self._lists_lock:
            flags = self._list_checked
            lists = None
            if slots is not None:
                slots = np.asarray(slots, dtype=np.int64)
                if len(slots) and (slots.min() < 0 or slots.max() >= len(self.slot_list)):
                    raise ValueError(f"slots {slots.min()}..{slots.max()} asked for; the "
                                     f"segment has 0..{len(self.slot_list) - 1}")
                lists = self.slot_list[slots].astype(np.int64)
            todo = np.flatnonzero(flags == 0) if lists is None else \
                np.unique(lists[flags[lists] == 0])
            if len(todo) == 0:
                return
            try:
                _inverted_build.check_block_postings(
                    self.ptr, self.post_rows, self._block_table, self.n_rows, self.block_rows,
                    self.post_values, VALUE_MAX, todo.astype(np.int64, copy=False))
            except ValueError as exc:
                _fail(self.name, str(exc))
            flags[todo] = 1

    def row_norms(self, p):
        """The row norms for this p, as the kernel takes them (RowNorms of
        low, high, coarse_root, group_root): per root and row the posted and
        dense norms; the 1/p power of each group norm, per coarse group and
        row, and per row and dense group. The two most recent p values are
        kept (searches in several threads may ask at once)."""
        if math.isinf(p):
            # The p = inf search reads the dense block only.
            return _NO_NORMS
        with self._norms_lock:
            if p not in self._norms:
                if len(self._norms) >= 2:
                    del self._norms[next(iter(self._norms))]
                self._norms[p] = self._row_norms(p)
            return self._norms[p]

    def power_sums(self, p):
        """(low, high) as :func:`build` stores them, for any finite p,
        computed from the stored values (every posting list, checked
        first)."""
        self.check_lists()
        self.check_dense()
        return power_sums(self._arrays, self.n_rows, self.n_roots, self.n_cols, self.weight, p)

    def _row_norms(self, p):
        if p == self.norm_p and self.stored_group_norms is not None:
            # Mapped from the file as they are.
            coarse_root, group_root = self.stored_group_norms
            return _inverted_search.RowNorms(*self.stored_norms, coarse_root, group_root)
        low, high = self.stored_norms if p == self.norm_p else self.power_sums(p)
        # The group norms are kept as float32, at most its largest value
        # (the kernel allows for both): most of what a reader holds per row.
        group_root, coarse_root = self.group_norms(p)
        return _inverted_search.RowNorms(low, high, coarse_root, group_root)

    def group_norms(self, p):
        """(per row and group, per coarse group and row) norms of the dense
        groups for p, computed from the dense block."""
        self.check_dense()
        return _group_norms(self.dense, self.dense_weight, self.group_of, self.coarse_of,
                            self.n_roots, p)


_NO_NORMS = _inverted_search.RowNorms(np.zeros(0), np.zeros(0), np.zeros(0, np.float32),
                                      np.zeros(0, np.float32))


def _check_constants():
    # The kernel's chunks must not span two 65,536-row blocks of posting
    # offsets, and row ranges start at block-table boundaries.
    if CHUNK < 1 or CHUNK & (CHUNK - 1) or CHUNK > 1 << 16:
        raise ValueError(f"CHUNK is {CHUNK}; expected a power of two up to 65536")
    if RANGE_BLOCK_ROWS < 1 or (1 << 16) % RANGE_BLOCK_ROWS:
        raise ValueError(f"RANGE_BLOCK_ROWS is {RANGE_BLOCK_ROWS}; expected a divisor of 65536")


# What search() reports per query (see _inverted_search.COUNT_NAMES and
# TIME_NAMES): the kernel's counts, and with ``timing`` its seconds per phase.
COUNT_NAMES = _inverted_search.COUNT_NAMES
TIME_NAMES = _inverted_search.TIME_NAMES


def search(files, mask, queries, positions, eta, k, p, trees, n_threads=None, bound=math.inf,
           limit=True, timing=False):
    """Exact k nearest rows over several segments' inverted files, or
    every row within a bound.

    ``files``: InvertedFile per segment; ``mask``: uint8, one per row of the
    segments one after the other, nonzero where the row may be returned;
    ``queries``: raw query rows per selected root, as (indptr, indices,
    data) of the same number of rows; ``positions``: the selected roots;
    ``trees``: the index's trees (every root's, not only the selected).
    Values are p-th powers for one root (S_inf itself at p = inf), else
    sum_s eta_s S_p. Returns
    (values, segments, rows, docs), each (n_queries, k): query i's t-th best
    is row ``rows[i, t]`` of ``files[segments[i, t]]``, document
    ``docs[i, t]``; unused places hold inf and -1. Ties go to the lower
    document id.

    A radius search gives ``bound`` (in the same units): a number for
    every query, or a 1-D array of one per query (inf: no bound). Rows
    whose value exceeds their query's bound are never results, and it
    prunes from the start as the k-th value would: with a limit, the k
    best within the bound. With ``limit`` False there is no k (``k`` is
    ignored): every row within its query's bound is a result, and the
    four outputs are lists of one array per query instead, best first.

    Also returns the statistics: {name: int64 array of one value per
    query} for COUNT_NAMES, and {"seconds": {name: float array}} for
    TIME_NAMES (zeros unless ``timing``); see search_segments. The posting
    lists of the query's
    columns are checked first (InvertedFile.check_lists), and each
    candidate's stored measure and the dense values the kernel reads by the
    kernel: CorruptIndexError for a bad one.
    """
    _check_constants()
    n_q = len(queries[0][0]) - 1
    grow = not limit
    k = 0 if grow else k
    values = np.empty((n_q, k))
    segments = np.empty((n_q, k), dtype=np.int64)
    rows = np.empty((n_q, k), dtype=np.int64)
    docs = np.empty((n_q, k), dtype=np.int64)
    indptr, indices, data = queries[0] if len(queries) == 1 else stack_rows(queries)
    bound = np.asarray(bound, dtype=np.float64)
    if bound.ndim == 0:
        bound = np.full(n_q, float(bound))
    elif bound.shape != (n_q,):
        raise ValueError(f"bound has shape {bound.shape}; expected a number or one value per "
                         f"query, shape ({n_q},)")
    if not math.isinf(p) and files:
        # The posting lists of the query's columns (p = inf reads none).
        n_cols = files[0].n_cols
        slots = np.unique(np.concatenate([positions[s] * n_cols + np.asarray(q[1], dtype=np.int64)
                                          for s, q in enumerate(queries)]))
        for f in files:
            f.check_lists(slots)
    try:
        counts, seconds, grown = _inverted_search.search_segments(
            [f.kernel for f in files], [f.row_norms(p) for f in files], mask,
            np.ascontiguousarray(indptr, dtype=np.int64),
            np.ascontiguousarray(indices, dtype=np.int32),
            np.ascontiguousarray(data, dtype=np.float64), n_q,
            np.asarray(positions, dtype=np.int64), np.ascontiguousarray(eta, dtype=np.float64),
            k, p, CHUNK, MIN_CANDIDATES, values, segments, rows, docs,
            [tree.parent32 for tree in trees],
            np.array([tree.root for tree in trees], dtype=np.int32), n_threads=n_threads,
            bound=np.ascontiguousarray(bound), grow=grow, timing=bool(timing),
            ranges_per_worker=RANGES_PER_WORKER)
    except _inverted_search.BadStoredValue as exc:
        g, row, dense = exc.args
        if dense:
            _fail(files[g].name, f"a dense value outside [0, 1] in row {row}")
        raise CorruptIndexError(
            f"segment {files[g].name} has a stored measure with a node outside the graph or a "
            f"mass that is not finite and >= 0 (row {row}); {ADVICE['verify']} restore the file "
            "from a backup") from None
    stats = {name: counts[:, c] for c, name in enumerate(COUNT_NAMES)}
    stats["seconds"] = {name: seconds[:, c] for c, name in enumerate(TIME_NAMES)}
    if grow:
        values, segments, rows, docs = _split_by_query(grown, n_q)
    return values, segments, rows, docs, stats


def _split_by_query(grown, n_q):
    """The unordered results of a search without a limit, (query, value,
    doc, segment, row) arrays, as one array per query of each of values,
    segments, rows and docs, by ascending value, ties by document id."""
    query, value, doc, segment, row = grown
    order = np.lexsort((doc, value, query))
    query, value, doc, segment, row = (a[order] for a in (query, value, doc, segment, row))
    cuts = np.searchsorted(query, np.arange(n_q + 1))
    return tuple([a[cuts[i]:cuts[i + 1]] for i in range(n_q)]
                 for a in (value, segment, row, doc))

