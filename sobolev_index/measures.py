"""Measures on graph nodes: validation and batching.

A measure is a set of (node, mass) pairs. Batches travel in CSR form:
``indptr`` (int64, N + 1), ``nodes`` (int32) and ``masses`` (float64), where
measure i is ``nodes[indptr[i]:indptr[i+1]]``. Everything is checked here,
before any compiled code runs, and errors name the measure and the value.
"""
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from . import _features
from .errors import InvalidMeasureError

__all__ = ["MeasureBatch", "as_measure_batch"]


@dataclass(frozen=True)
class MeasureBatch:
    """A validated batch of measures in CSR form.

    ``row_scale[i]`` is what measure i's masses are multiplied by: 1 / total
    mass when normalising, else 1.
    """

    indptr: np.ndarray
    nodes: np.ndarray
    masses: np.ndarray
    row_scale: np.ndarray

    def __len__(self):
        return len(self.indptr) - 1


def _measure_of(position, indptr):
    return int(np.searchsorted(indptr, position, side="right") - 1)


def _integer_nodes(nodes, indptr):
    """Accept whole-number floats as node ids; name the first other value."""
    if np.issubdtype(nodes.dtype, np.floating):
        integral = np.isfinite(nodes) & (nodes == np.round(nodes))
        if integral.all():
            return nodes.astype(np.int64)
        pos = int(np.flatnonzero(~integral)[0])
    else:
        pos = 0
    raise InvalidMeasureError(
        f"measure {_measure_of(pos, indptr)} has node {nodes[pos]!r}; node ids must be integers"
    )


def _from_pairs(measures):
    node_parts, mass_parts, lengths = [], [], []
    for i, item in enumerate(measures):
        try:
            nodes, masses = item
        except (TypeError, ValueError):
            raise InvalidMeasureError(
                f"measure {i} is {type(item).__name__!s} {item!r:.80}; expected a (nodes, masses) pair"
            ) from None
        nodes = np.asarray(nodes)
        if nodes.ndim != 1:
            raise InvalidMeasureError(
                f"measure {i} has nodes of shape {nodes.shape}; expected a 1-D sequence of node ids"
            )
        if masses is None:
            masses = np.ones(len(nodes))
        masses = np.asarray(masses)
        if masses.shape != nodes.shape:
            raise InvalidMeasureError(
                f"measure {i} has {len(nodes)} nodes but masses of shape {masses.shape}; "
                "expected one mass per node"
            )
        node_parts.append(nodes)
        mass_parts.append(masses)
        lengths.append(len(nodes))
    indptr = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=indptr[1:])
    nodes = np.concatenate(node_parts) if node_parts else np.zeros(0, np.int64)
    masses = np.concatenate(mass_parts) if mass_parts else np.zeros(0)
    return indptr, nodes, masses


def _from_matrix(matrix, n_nodes):
    matrix = sp.csr_matrix(matrix)
    if matrix.shape[1] != n_nodes:
        raise InvalidMeasureError(
            f"the mass matrix has {matrix.shape[1]} columns; expected one per node ({n_nodes})"
        )
    matrix.sum_duplicates()
    return matrix.indptr.astype(np.int64), matrix.indices, matrix.data


def as_measure_batch(measures=None, *, indptr=None, nodes=None, masses=None,
                     n_nodes, normalize=True):
    """Validate measures and return a :class:`MeasureBatch`.

    Give either ``measures`` (a sequence of ``(nodes, masses)`` pairs, where
    ``masses=None`` means equal masses, or an N x n_nodes array or sparse
    matrix of node masses) or the CSR triple ``indptr, nodes, masses``.
    Duplicate nodes within a measure are allowed; their masses add up.
    """
    if measures is not None:
        if indptr is not None or nodes is not None or masses is not None:
            raise TypeError("give either measures or indptr/nodes/masses, not both")
        if sp.issparse(measures) or (isinstance(measures, np.ndarray) and measures.ndim == 2):
            indptr, nodes, masses = _from_matrix(measures, n_nodes)
        else:
            indptr, nodes, masses = _from_pairs(measures)
    elif indptr is None or nodes is None or masses is None:
        raise TypeError("give measures, or all of indptr, nodes and masses")

    indptr = np.asarray(indptr)
    nodes = np.asarray(nodes)
    masses = np.asarray(masses)
    # dtype.kind, not np.issubdtype: a single query is checked in a few
    # microseconds, and issubdtype alone would cost more.
    if indptr.ndim != 1 or len(indptr) < 1 or indptr.dtype.kind not in "iu":
        raise InvalidMeasureError(
            f"indptr has dtype {indptr.dtype} and shape {indptr.shape}; "
            "expected a 1-D integer array of length N + 1"
        )
    bad_indptr = InvalidMeasureError(
        f"indptr must start at 0, never decrease and end at len(nodes) = {len(nodes)}; "
        f"it starts at {indptr[0]} and ends at {indptr[-1]}"
    )
    if indptr[0] != 0 or indptr[-1] != len(nodes):
        raise bad_indptr
    if nodes.shape != masses.shape or nodes.ndim != 1:
        raise InvalidMeasureError(
            f"nodes has shape {nodes.shape} and masses {masses.shape}; expected two 1-D arrays of one length"
        )
    indptr = np.ascontiguousarray(indptr, dtype=np.int64)
    if nodes.size and nodes.dtype.kind not in "iu":
        try:
            nodes = _integer_nodes(nodes, indptr)
        except InvalidMeasureError:
            if np.all(np.diff(indptr) >= 0):
                _raise_if_empty(indptr)
                raise
            raise bad_indptr from None
    if masses.dtype.kind not in "iuf":
        if np.any(np.diff(indptr) < 0):
            raise bad_indptr
        _raise_if_empty(indptr)
        _raise_if_outside(nodes, indptr, n_nodes)
        raise InvalidMeasureError(f"masses have dtype {masses.dtype}; expected real numbers")
    masses = np.ascontiguousarray(masses, dtype=np.float64)
    nodes32 = np.empty(len(nodes), dtype=np.int32)
    # One compiled pass: a single query is checked in microseconds.
    problem, pos = _features.check_batch(
        indptr, np.ascontiguousarray(nodes, dtype=np.int64), masses, n_nodes, nodes32)
    if problem == _features.BATCH_BAD_INDPTR:
        raise bad_indptr
    if problem == _features.BATCH_EMPTY:
        _raise_if_empty(indptr)
    elif problem == _features.BATCH_NODE_RANGE:
        _raise_if_outside(nodes, indptr, n_nodes)
    elif problem == _features.BATCH_NOT_FINITE:
        raise InvalidMeasureError(
            f"measure {_measure_of(pos, indptr)} has mass {masses[pos]} at node {nodes[pos]}; "
            "masses must be finite"
        )
    elif problem == _features.BATCH_NEGATIVE:
        raise InvalidMeasureError(
            f"measure {_measure_of(pos, indptr)} has mass {masses[pos]} at node {nodes[pos]}; "
            "masses must be >= 0"
        )
    elif problem == _features.BATCH_ZERO_TOTAL:
        raise InvalidMeasureError(
            f"measure {pos} has total mass 0.0; at least one mass must be positive"
        )
    elif problem == _features.BATCH_TOO_LARGE:
        # Their sum could overflow, which would scale the measure to zero.
        raise InvalidMeasureError(
            f"measure {pos} has masses that sum to more than {_features.TOTAL_MAX:g} "
            "(near the float64 limit, inf); divide its masses by a common factor"
        )
    elif problem == _features.BATCH_TOO_SMALL and normalize:
        # Normalising would divide by a (near) subnormal number.
        total = float(np.sum(masses[indptr[pos]:indptr[pos + 1]]))
        raise InvalidMeasureError(
            f"measure {pos} has masses that sum to {total:g}, below {_features.TOTAL_MIN:g}, "
            "too small to normalise exactly; multiply its masses by a common factor"
        )
    totals = np.add.reduceat(masses, indptr[:-1]) if len(indptr) > 1 else np.zeros(0)
    row_scale = 1.0 / totals if normalize else np.ones(len(totals))
    return MeasureBatch(
        indptr=indptr,
        nodes=nodes32,
        masses=masses,
        row_scale=np.ascontiguousarray(row_scale, dtype=np.float64),
    )


def _raise_if_empty(indptr):
    empty = np.flatnonzero(np.diff(indptr) == 0)
    if len(empty):
        raise InvalidMeasureError(
            f"measure {empty[0]} is empty; every measure needs at least one (node, mass) pair"
        )


def _raise_if_outside(nodes, indptr, n_nodes):
    out_of_range = np.flatnonzero((nodes < 0) | (nodes >= n_nodes))
    if len(out_of_range):
        pos = out_of_range[0]
        raise InvalidMeasureError(
            f"measure {_measure_of(pos, indptr)} has node {nodes[pos]}, "
            f"but the graph's nodes are 0..{n_nodes - 1}"
        )
