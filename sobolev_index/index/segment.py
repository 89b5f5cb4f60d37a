"""One segment held in memory: its arrays (memory-mapped from its file, see
``storage.py``), which of its rows are live, and its inverted file, checked
on first use. Arrays read from the file are checked once, before any
compiled loop reads them (each posting list when a search first reads it,
see InvertedFile.check_lists), except the supports of the stored measures
and the dense values, which the search kernel checks in each row it reads
(``measure_rows`` and InvertedFile.check_dense check them in full for
what reads them all). Features are not stored: they are rebuilt from
the measures, by the same code and to the same bits as when the rows were
added.
"""
import numpy as np

from .. import _features
from ..errors import ADVICE, CorruptIndexError
from ..measures import checked_batch, normalising_factors
from . import inverted
from .csr import gather_rows


class Segment:
    """A committed segment: ``id``, ``file``, ``data`` (a SegmentData) and
    ``live`` (bool per row: not deleted)."""

    def __init__(self, row, data, live):
        self.id = int(row["id"])
        self.file = row["file"]
        # Nonzero features over all roots, as the catalog counts them: the
        # merge policy and the scan cache size segments by it.
        nnz = row["nnz"]
        if isinstance(nnz, bool) or not isinstance(nnz, (int, np.integer)) or nnz < 0:
            raise CorruptIndexError(
                f"the catalog gives segment {self.file} {nnz!r} nonzero features; expected an "
                f"integer >= 0; {ADVICE['verify']} restore the catalog from a backup")
        self.nnz = int(nnz)
        self.data = data
        self.live = live
        # Built on a segment's first search.
        self._inverted = None
        # Arrays checked once (measures, row factors) and features rebuilt
        # for a scan (per root position).
        self._checked = {}

    @property
    def rows(self):
        return self.data.rows

    def _corrupt(self, what):
        return CorruptIndexError(
            f"segment {self.file} has {what}; {ADVICE['verify']} restore the file from a backup")

    def feature_rows(self, position, tree):
        """The features of every row for root ``position`` (whose tree is
        ``tree``), rebuilt from the stored measures as when they were added:
        (indptr, indices, data) as contiguous int64, int32 and float64
        arrays, kept for later calls (the scan of a finite p > 16 decides
        when to ask, see search.SCAN_CACHE_BYTES)."""
        key = ("features", position)
        if key not in self._checked:
            self._checked[key] = self.features_of_rows(None, tree)
        return self._checked[key]

    def cached_feature_rows(self, position):
        """What :meth:`feature_rows` keeps for root ``position``, or None."""
        return self._checked.get(("features", position))

    def cached_feature_bytes(self):
        """Bytes of the features kept by :meth:`feature_rows`."""
        return sum(sum(a.nbytes for a in arrays) for key, arrays in list(self._checked.items())
                   if isinstance(key, tuple) and key[0] == "features")

    def feature_bytes(self, n_roots):
        """About what :meth:`feature_rows` keeps for one of ``n_roots`` roots."""
        return 12 * self.nnz // max(n_roots, 1) + 8 * (self.rows + 1)

    def features_of_rows(self, rows, tree):
        """Like :meth:`feature_rows` for the rows ``rows`` only (all for
        None), not kept; only those rows' measures are checked."""
        if rows is None:
            indptr, nodes, masses = self.measure_rows(tree.n_nodes)
            scale = self.row_scale(tree.n_nodes)
        else:
            indptr, nodes, masses, scale = self.measures_of_rows(rows, tree.n_nodes)
        return tree.feature_arrays_of_batch(checked_batch(indptr, nodes, masses, scale))

    def measures_of_rows(self, rows, n_nodes):
        """(indptr, nodes, masses, normalising factors) of the rows ``rows``,
        those rows' measures checked."""
        indptr, nodes, masses = self.measure_pointers(n_nodes)
        rows = np.asarray(rows, dtype=np.int64)
        indptr, nodes, masses = gather_rows(indptr, (nodes, masses), rows)
        self._check_supports(nodes, masses, n_nodes)
        return indptr, nodes, masses, self.row_scale(n_nodes)[rows]

    def row_scale(self, n_nodes):
        """What each row's masses are multiplied by to sum to 1: stored since
        format 3, computed as when the rows were added for format 2; checked
        once to be finite and positive."""
        if "row_scale" not in self._checked:
            indptr, _, masses = self.measure_pointers(n_nodes)
            if self.data.row_scale is None:
                scale = normalising_factors(indptr, masses)
            elif np.asarray(self.data.row_scale).dtype != np.float64:
                raise self._corrupt(f"normalising factors of type "
                                    f"{np.asarray(self.data.row_scale).dtype}; expected float64")
            else:
                scale = np.ascontiguousarray(self.data.row_scale, dtype=np.float64)
            if scale.shape != (self.rows,) or not (np.isfinite(scale).all()
                                                   and (scale > 0).all()):
                raise self._corrupt("a row whose masses do not sum to a positive finite total")
            self._checked["row_scale"] = scale
        return self._checked["row_scale"]

    def measure_rows(self, n_nodes):
        """The stored measures (indptr, nodes, masses), checked once to be
        rows of node ids below ``n_nodes`` with finite masses >= 0 (a merge
        copies them by these pointers)."""
        if "measures" not in self._checked:
            indptr, nodes, masses = self.measure_pointers(n_nodes)
            self._check_supports(nodes, masses, n_nodes)
            self._checked["measures"] = (indptr, nodes, masses)
        return self._checked["measures"]

    def measure_pointers(self, n_nodes):
        """The stored measures with their types and row pointers checked,
        once, but not their supports: a search checks those of each
        candidate (and _check_supports those of rows it rebuilds), so that a
        first search does not read every measure. Node ids wider than int32
        are checked here in full, since the kernel reads int32."""
        if "pointers" not in self._checked:
            data = self.data
            indptr, nodes, masses = (np.asarray(a) for a in (data.indptr, data.nodes, data.masses))
            if indptr.dtype.kind not in "iu" or nodes.dtype.kind not in "iu" \
                    or masses.dtype != np.float64:
                raise self._corrupt(f"measures of types {indptr.dtype}/{nodes.dtype}/"
                                    f"{masses.dtype}; expected integers/integers/float64")
            indptr = indptr.astype(np.int64, copy=False)
            # (Every measure has at least one support.)
            if (indptr.shape != (self.rows + 1,) or (len(indptr) and indptr[0] != 0)
                    or np.any(np.diff(indptr) <= 0) or indptr[-1] != len(nodes)
                    or len(masses) != len(nodes)):
                raise self._corrupt("malformed measure pointers")
            if nodes.dtype.itemsize > 4:
                self._check_supports(nodes, masses, n_nodes)
            self._checked["pointers"] = (indptr, nodes, masses)
        return self._checked["pointers"]

    def _check_supports(self, nodes, masses, n_nodes):
        """CorruptIndexError unless ``nodes`` lie in 0..n_nodes-1 and
        ``masses`` are finite and >= 0."""
        bad_node, bad_mass = _features.check_stored_rows(
            np.ascontiguousarray(nodes, dtype=np.int32) if nodes.dtype.itemsize <= 4
            else np.clip(nodes, -1, n_nodes).astype(np.int32), masses, n_nodes)
        if bad_node:
            raise self._corrupt(f"a measure node outside 0..{n_nodes - 1}")
        if bad_mass:
            raise self._corrupt("a measure mass that is not finite and >= 0")

    def inverted_file(self, trees, weight):
        """The segment's inverted file, checked once (its posting lists as
        searches read them); and its measures' pointers, checked too (the
        kernel checks each candidate's supports), since exact distances are
        computed from them.
        ``weight``: the trees' edge lengths, one after the other."""
        if self._inverted is None:
            if self.data.inverted is None:
                raise self._corrupt("no inverted file")
            n_nodes = trees[0].n_nodes
            measures = self.measure_pointers(n_nodes)
            scale = self.row_scale(n_nodes)
            arrays = self.data.inverted
            if self.data.version == 2:
                arrays = inverted.from_v2(arrays, self.rows, self.file)
            elif self.data.version == 3:
                arrays = inverted.from_v3(arrays)
            self._inverted = inverted.InvertedFile(
                arrays, self.rows, trees, self.file, measures, scale, self.data.doc_ids, weight)
        return self._inverted
