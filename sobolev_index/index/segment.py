"""One segment held in memory: its arrays (memory-mapped from its file, see
``storage.py``), which of its rows are live, and the
inverted file a search builds from it on first use. Arrays read from the
file are checked once, before any compiled loop reads them.
"""
import numpy as np

from ..errors import CorruptIndexError
from . import inverted
from .csr import check_csr


class Segment:
    """A committed segment: ``id``, ``file``, ``data`` (a SegmentData) and
    ``live`` (bool per row: not deleted)."""

    def __init__(self, row, data, live):
        self.id = int(row["id"])
        self.file = row["file"]
        self.data = data
        self.live = live
        # Built on a segment's first search.
        self._inverted = None
        # Feature arrays per root position, once checked.
        self._checked = {}

    @property
    def rows(self):
        return self.data.rows

    def _corrupt(self, what):
        return CorruptIndexError(
            f"segment {self.file} has {what}; run verify() and restore the file from a backup")

    def feature_rows(self, position, n_cols):
        """The stored (indptr, indices, data) of root ``position`` as
        contiguous int64, int32 and float64 arrays, checked to be a CSR
        matrix of ``n_cols`` columns (once per root). Every reader of stored
        features goes through here before any compiled loop sees them."""
        if position not in self._checked:
            indptr, indices, data = self.data.features[position]
            try:
                data = np.ascontiguousarray(data, dtype=np.float64)
                indptr, indices = check_csr(indptr, indices, len(data), n_cols)
            except ValueError as exc:
                raise self._corrupt(f"malformed features for root {position} ({exc})") from None
            # Edge masses of probability measures: a value outside [0, 1]
            # (or NaN) would give wrong distances without any error.
            if len(data) and not (data.min() >= 0.0 and data.max() <= 1.0 + 1e-9):
                raise self._corrupt(f"a feature value outside [0, 1] for root {position}")
            self._checked[position] = (indptr, indices, data)
        return self._checked[position]

    def measure_rows(self, n_nodes):
        """The stored measures (indptr, nodes, masses), checked once to be
        rows of node ids below ``n_nodes`` with finite masses >= 0 (a merge
        copies them by these pointers)."""
        if "measures" not in self._checked:
            data = self.data
            indptr = np.asarray(data.indptr, dtype=np.int64)
            nodes, masses = np.asarray(data.nodes), np.asarray(data.masses)
            if (indptr.shape != (self.rows + 1,) or (len(indptr) and indptr[0] != 0)
                    or np.any(np.diff(indptr) < 0) or indptr[-1] != len(nodes)
                    or len(masses) != len(nodes)):
                raise self._corrupt("malformed measure pointers")
            if len(nodes) and (nodes.min() < 0 or nodes.max() >= n_nodes):
                raise self._corrupt(f"a measure node outside 0..{n_nodes - 1}")
            if len(masses) and not (np.isfinite(masses).all() and masses.min() >= 0):
                raise self._corrupt("a measure mass that is not finite and >= 0")
            self._checked["measures"] = (indptr, nodes, masses)
        return self._checked["measures"]

    def inverted_file(self, trees, weight):
        """The segment's inverted file, checked once; and its feature rows,
        checked too, since exact distances are merged from them. ``weight``:
        the trees' edge lengths, one after the other."""
        if self._inverted is None:
            if self.data.inverted is None:
                raise self._corrupt("no inverted file")
            features = [self.feature_rows(position, tree.n_nodes)
                        for position, tree in enumerate(trees)]
            arrays = self.data.inverted
            if self.data.version == 2:
                arrays = inverted.from_v2(arrays, self.rows, self.file)
            self._inverted = inverted.InvertedFile(
                arrays, self.rows, trees, self.file, features, self.data.doc_ids, weight)
        return self._inverted
