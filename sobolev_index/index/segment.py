"""One segment held in memory: its arrays (memory-mapped from its file, see
``storage.py``), which of its rows are live and their labels, and what a
search builds from it on first use: the inverted file, and the feature rows
scaled for a p. Arrays read from the file are checked once, before any
compiled loop reads them.
"""
import math

import numpy as np

from .. import _pairwise
from ..errors import CorruptIndexError
from . import inverted
from .csr import check_csr


class Segment:
    """A committed segment: ``id``, ``file``, ``data`` (a SegmentData),
    ``live`` (bool per row: not deleted) and ``labels`` (per row)."""

    def __init__(self, row, data, live, labels):
        self.id = int(row["id"])
        self.file = row["file"]
        self.data = data
        self.live = live
        self.labels = labels
        # Built on first use: the inverted file (key "inverted") and the
        # scaled rows with their norms (key (root position, p)).
        self._scaled = {}
        self._checked = set()

    @property
    def rows(self):
        return self.data.rows

    def _corrupt(self, what):
        return CorruptIndexError(
            f"segment {self.file} has {what}; run verify() and restore the file from a backup")

    def feature_rows(self, position, n_cols):
        """The stored (indptr, indices, data) of root ``position``, checked
        to be a CSR matrix of ``n_cols`` columns (once per root)."""
        indptr, indices, data = self.data.features[position]
        if position not in self._checked:
            try:
                check_csr(indptr, indices, len(data), n_cols)
            except ValueError as exc:
                raise self._corrupt(f"malformed features for root {position} ({exc})") from None
            self._checked.add(position)
        return indptr, indices, data

    def inverted_file(self, trees, weight):
        """The segment's inverted file, checked once; and its feature rows,
        checked too, since exact distances are merged from them. ``weight``:
        the trees' edge lengths, one after the other."""
        if "inverted" not in self._scaled:
            if self.data.inverted is None:
                raise self._corrupt("no inverted file")
            for position, tree in enumerate(trees):
                self.feature_rows(position, tree.n_nodes)
            self._scaled["inverted"] = inverted.InvertedFile(
                self.data.inverted, self.rows, trees, self.file, self.data.features,
                self.data.doc_ids, weight)
        return self._scaled["inverted"]

    def scaled(self, position, p, tree):
        """Row arrays of root ``position`` scaled by w^(1/p), and their norms."""
        key = (position, p)
        if key not in self._scaled:
            indptr, indices, data = self.feature_rows(position, tree.n_nodes)
            factor = np.ones(tree.n_nodes) if math.isinf(p) else tree.length ** (1.0 / p)
            values, norms = _pairwise.scale_rows(indptr, indices, data, factor, p)
            self._forget_other_p(p)
            self._scaled[key] = (indptr, indices, values, norms)
        return self._scaled[key]

    def _forget_other_p(self, p):
        # Scaled copies cost as much memory as the features; keep those of
        # the two most recent p values (all roots), not one per p ever used.
        ps = list(dict.fromkeys(key[-1] for key in self._scaled if key != "inverted"))
        if p not in ps and len(ps) >= 2:
            oldest = ps[0]
            for key in [key for key in self._scaled if key != "inverted" and key[-1] == oldest]:
                del self._scaled[key]
