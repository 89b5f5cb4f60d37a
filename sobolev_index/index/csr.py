"""Rows in CSR form, as the index passes them around: ``(indptr, indices,
data)`` arrays (or ``(indptr, nodes, masses)`` for measures), row i being
``indices[indptr[i]:indptr[i + 1]]`` and the same slice of ``data``.

The one check that arrays read from a file form such a matrix, and the
slicing, gathering and stacking of rows that searches and merges need.
"""
import numpy as np

from . import _inverted_build


def check_csr(indptr, indices, n_values, n_cols):
    """ValueError unless ``indptr`` and ``indices`` form a CSR matrix of
    ``n_values`` values and ``n_cols`` columns, with sorted, distinct
    columns in each row. Returns the two arrays as the contiguous int64 and
    int32 arrays that were checked (no copy when they already are): compiled
    code trusts those, and only those."""
    indptr = np.ascontiguousarray(indptr, dtype=np.int64)
    indices = np.ascontiguousarray(indices, dtype=np.int32)
    _inverted_build.check_csr(indptr, indices, int(n_values), int(n_cols))
    return indptr, indices


def row_range(arrays, start, stop):
    """Rows ``start`` to ``stop`` of (indptr, indices, data), as contiguous
    int64, int32 and float64 arrays with indptr starting at 0."""
    indptr, indices, data = arrays
    lo, hi = indptr[start], indptr[stop]
    return (np.ascontiguousarray(indptr[start:stop + 1] - lo, dtype=np.int64),
            np.ascontiguousarray(indices[lo:hi], dtype=np.int32),
            np.ascontiguousarray(data[lo:hi], dtype=np.float64))


def gather_rows(indptr, arrays, rows):
    """Rows ``rows`` (in that order) of a CSR matrix given as ``indptr`` and
    its per-value ``arrays``: returns [indptr, *arrays] of the result."""
    indptr = np.asarray(indptr)
    sizes = indptr[1:][rows] - indptr[:-1][rows]
    new_indptr = np.zeros(len(rows) + 1, dtype=np.int64)
    np.cumsum(sizes, out=new_indptr[1:])
    starts = np.repeat(indptr[:-1][rows] - new_indptr[:-1], sizes)
    take = starts + np.arange(new_indptr[-1])
    return [new_indptr] + [np.asarray(a)[take] for a in arrays]


def stack_rows(blocks):
    """CSR matrices given as (indptr, *arrays) tuples, one's rows after the
    other's: returns [indptr, *arrays] of the result (int64 indptr; the
    other arrays keep their dtypes)."""
    nnz = np.cumsum([0] + [int(b[0][-1]) for b in blocks])
    indptr = np.concatenate([np.asarray(b[0][:-1], dtype=np.int64) + nnz[i]
                             for i, b in enumerate(blocks)] + [[nnz[-1]]]).astype(np.int64)
    return [indptr] + [np.concatenate([np.asarray(b[j]) for b in blocks])
                       for j in range(1, len(blocks[0]))]
