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

__all__ = ["MeasureBatch", "as_measure_batch", "TOTAL_MIN", "TOTAL_MAX"]

# The range of a measure's total mass: below TOTAL_MIN normalising would
# divide by a (near) subnormal number, above TOTAL_MAX the sum could overflow.
TOTAL_MIN = _features.TOTAL_MIN
TOTAL_MAX = _features.TOTAL_MAX


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

    def rows(self, start, stop):
        """Measures ``start`` to ``stop - 1`` as a batch of their own, without
        checking them again: views of this batch's arrays, the row pointers
        shifted to start at 0. For writing one checked batch in parts."""
        start, stop, _ = slice(start, stop).indices(len(self))
        stop = max(start, stop)
        first, last = self.indptr[start], self.indptr[stop]
        return MeasureBatch(
            indptr=self.indptr[start:stop + 1] - first,
            nodes=self.nodes[first:last],
            masses=self.masses[first:last],
            row_scale=self.row_scale[start:stop],
        )


# Iterables that are not a sequence of measures, or not a (nodes, masses)
# pair: a str iterates over its characters, a dict over its keys, a set in no
# fixed order; "ab" or {"nodes": .., "masses": ..} would even unpack as a pair.
_NOT_SEQUENCES = (str, bytes, dict, set, frozenset)
# The types a node id or a mass may have inside an object array or a list
# (a bool is refused on its own, as isinstance(True, int) holds).
_REAL_TYPES = (int, float, np.integer, np.floating)


def _measure_of(position, indptr):
    return int(np.searchsorted(indptr, position, side="right") - 1)


def _namer(names):
    """What error messages call measure i: "measure i", or ``names[i]`` (a
    key, or the file and line the measure came from)."""
    if names is None:
        return lambda i: f"measure {i}"
    return lambda i: str(names[i])


def _shown(value, width=60):
    """``repr`` of a value for a message, NumPy scalars as plain Python
    values (1.5, not np.float64(1.5)), cut to ``width`` characters."""
    if isinstance(value, np.generic):
        value = value.item()
    text = repr(value)
    return text if len(text) <= width else text[:width - 3] + "..."


def _integer_nodes(nodes, indptr, name):
    """Accept whole-number floats as node ids; name the first other value."""
    if np.issubdtype(nodes.dtype, np.floating):
        integral = np.isfinite(nodes) & (nodes == np.round(nodes))
        if integral.all():
            return nodes.astype(np.int64)
        pos = int(np.flatnonzero(~integral)[0])
    else:
        pos = 0
    kind = "a boolean, not an integer" if nodes.dtype.kind == "b" else "not an integer"
    raise InvalidMeasureError(
        f"{name(_measure_of(pos, indptr))} has node {_shown(nodes[pos])}, {kind}; "
        "node ids must be integers"
    )


def _first_bool(values):
    """Position of the first bool (Python or NumPy) among ``values``, or
    None. np.asarray turns [True, 2] into [1, 2], so a list is looked at
    before that is lost; one C-level pass over the element types."""
    types = set(map(type, values))
    if bool not in types and np.bool_ not in types:
        return None
    return next(j for j, v in enumerate(values) if isinstance(v, (bool, np.bool_)))


def _first_not_real(array):
    """Position of the first element of a 1-D object (or other non-numeric)
    array that is not a real number, or None."""
    return next((j for j, v in enumerate(array.tolist())
                 if isinstance(v, bool) or not isinstance(v, _REAL_TYPES)), None)


def _flat_array(values, what, i, name):
    """``values`` (the nodes or masses of measure i) as an array; a ragged
    or nested sequence is refused here, where numpy would raise its own
    ValueError."""
    try:
        return np.asarray(values)
    except (ValueError, TypeError):
        expected = "node ids (integers)" if what == "nodes" else "masses (real numbers), one per node"
        raise InvalidMeasureError(
            f"{name(i)} has {what} {_shown(values)}, which is not a flat sequence "
            f"(some items are sequences of another length); expected a 1-D sequence of {expected}"
        ) from None


def _checked_nodes(values, i, name, n_nodes):
    """The nodes of measure i as a 1-D int or float array (floats are
    checked for whole numbers with the whole batch). Booleans, text,
    complex and other objects are refused, naming the first one."""
    nodes = _flat_array(values, "nodes", i, name)
    if nodes.ndim != 1:
        raise InvalidMeasureError(
            f"{name(i)} has nodes of shape {nodes.shape}; expected a 1-D sequence of node ids"
        )
    kind = nodes.dtype.kind
    if kind in "iuf":
        j = None if isinstance(values, np.ndarray) else _first_bool(values)
        if j is None:
            return nodes
        bad = values[j]
    elif kind == "b":
        bad = nodes[0]
    else:
        j = _first_not_real(nodes)
        if j is None:
            # Numbers only: Python ints beyond int64 (and maybe floats), so
            # some node is outside the graph.
            big = next(j for j, v in enumerate(nodes.tolist()) if not -1 < v < n_nodes)
            raise InvalidMeasureError(
                f"{name(i)} has node {_shown(nodes[big])}, but the graph's nodes are "
                f"0..{n_nodes - 1}"
            )
        bad = nodes[j]
    kind = "a boolean, not an integer" if isinstance(bad, (bool, np.bool_)) else "not an integer"
    raise InvalidMeasureError(
        f"{name(i)} has node {_shown(bad)}, {kind}; node ids must be integers"
    )


def _checked_masses(values, nodes, i, name):
    """The masses of measure i as a 1-D real array of one mass per node
    (finiteness and signs are checked with the whole batch)."""
    if values is None:
        return np.ones(len(nodes))
    masses = _flat_array(values, "masses", i, name)
    if masses.shape != nodes.shape:
        raise InvalidMeasureError(
            f"{name(i)} has {len(nodes)} nodes but masses of shape {masses.shape}; "
            "expected one mass per node"
        )
    kind = masses.dtype.kind
    if kind in "iuf":
        j = None if isinstance(values, np.ndarray) else _first_bool(values)
        if j is None:
            return masses
        bad = values[j]
    elif kind == "b":
        bad = masses[0]
    else:
        j = _first_not_real(masses)
        if j is None:
            # Python ints (some beyond int64): as floats, or too large for one.
            try:
                return masses.astype(np.float64)
            except OverflowError:
                big = next(j for j, v in enumerate(masses.tolist()) if abs(v) > 1e308)
                raise InvalidMeasureError(
                    f"{name(i)} has mass {_shown(masses[big])} at node {_shown(nodes[big])}, "
                    "too large for a float64; masses must be finite"
                ) from None
        bad = masses[j]
    kind = "a boolean" if isinstance(bad, (bool, np.bool_)) else "not a real number"
    raise InvalidMeasureError(
        f"{name(i)} has mass {_shown(bad)}, {kind}; masses must be real numbers"
    )


def _from_pairs(measures, n_nodes, name):
    node_parts, mass_parts, lengths = [], [], []
    for i, item in enumerate(measures):
        try:
            if isinstance(item, _NOT_SEQUENCES):
                raise TypeError
            nodes, masses = item
        except (TypeError, ValueError):
            raise InvalidMeasureError(
                f"{name(i)} is {type(item).__name__!s} {item!r:.80}; expected a (nodes, masses) pair"
            ) from None
        nodes = _checked_nodes(nodes, i, name, n_nodes)
        masses = _checked_masses(masses, nodes, i, name)
        node_parts.append(nodes)
        mass_parts.append(masses)
        lengths.append(len(nodes))
    indptr = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=indptr[1:])
    nodes = np.concatenate(node_parts) if node_parts else np.zeros(0, np.int64)
    masses = np.concatenate(mass_parts) if mass_parts else np.zeros(0)
    return indptr, nodes, masses


def _from_matrix(matrix, n_nodes):
    if matrix.dtype.kind not in "iuf":
        # Booleans are not masses; scipy would refuse text or objects with a
        # list of the dtypes it supports.
        raise InvalidMeasureError(
            f"the mass matrix has dtype {matrix.dtype}; expected real numbers"
        )
    matrix = sp.csr_matrix(matrix)
    if matrix.shape[1] != n_nodes:
        raise InvalidMeasureError(
            f"the mass matrix has {matrix.shape[1]} columns; expected one per node ({n_nodes})"
        )
    matrix.sum_duplicates()
    return matrix.indptr.astype(np.int64), matrix.indices, matrix.data


def _check_measures_argument(measures):
    """Refuse a ``measures`` that is neither a matrix nor an iterable of
    pairs, naming what it is."""
    expected = ("expected a sequence of (nodes, masses) pairs, an N x n_nodes array of masses "
                "or a SciPy sparse matrix")
    if isinstance(measures, np.ndarray):
        if measures.ndim != 2 and not (measures.ndim == 1 and measures.dtype == object):
            raise InvalidMeasureError(
                f"measures is an array of shape {measures.shape} and dtype {measures.dtype}; "
                + expected)
        return
    if isinstance(measures, _NOT_SEQUENCES) or not hasattr(measures, "__iter__"):
        raise TypeError(f"measures is {type(measures).__name__} {measures!r:.60}; " + expected)


def as_measure_batch(measures=None, *, indptr=None, nodes=None, masses=None,
                     n_nodes, normalize=True, names=None):
    """Validate measures and return a :class:`MeasureBatch`.

    Give either ``measures`` (a sequence of ``(nodes, masses)`` pairs, where
    ``masses=None`` means equal masses, or an N x n_nodes array or sparse
    matrix of node masses) or the CSR triple ``indptr, nodes, masses``.
    Duplicate nodes within a measure are allowed; their masses add up.

    Node ids are integers (or floats with whole values), never booleans;
    masses are real numbers, never booleans. A bad measure raises
    :class:`InvalidMeasureError` naming it and the value: "measure i", or
    ``names[i]`` when ``names`` (one per measure, e.g. "point set 'a'") is
    given. A ``measures`` that is not a sequence, a matrix or None raises
    TypeError.
    """
    name = _namer(names)
    if measures is not None:
        if indptr is not None or nodes is not None or masses is not None:
            raise TypeError("give either measures or indptr/nodes/masses, not both")
        if sp.issparse(measures) or (isinstance(measures, np.ndarray) and measures.ndim == 2):
            indptr, nodes, masses = _from_matrix(measures, n_nodes)
        else:
            _check_measures_argument(measures)
            indptr, nodes, masses = _from_pairs(measures, n_nodes, name)
    elif indptr is None and nodes is None and masses is None:
        raise TypeError("measures is None; expected a sequence of (nodes, masses) pairs, an "
                        "N x n_nodes array of masses or a SciPy sparse matrix (or indptr, nodes "
                        "and masses)")
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
            nodes = _integer_nodes(nodes, indptr, name)
        except InvalidMeasureError:
            if np.all(np.diff(indptr) >= 0):
                _raise_if_empty(indptr, name)
                raise
            raise bad_indptr from None
    if masses.dtype.kind not in "iuf":
        if np.any(np.diff(indptr) < 0):
            raise bad_indptr
        _raise_if_empty(indptr, name)
        _raise_if_outside(nodes, indptr, n_nodes, name)
        pos = 0 if masses.dtype.kind == "b" else _first_not_real(masses)
        where = "" if pos is None else (
            f"; {name(_measure_of(pos, indptr))} has mass {_shown(masses[pos])}")
        raise InvalidMeasureError(f"masses have dtype {masses.dtype}{where}; expected real numbers")
    masses = np.ascontiguousarray(masses, dtype=np.float64)
    nodes32 = np.empty(len(nodes), dtype=np.int32)
    # One compiled pass: a single query is checked in microseconds.
    problem, pos = _features.check_batch(
        indptr, np.ascontiguousarray(nodes, dtype=np.int64), masses, n_nodes, nodes32)
    if problem == _features.BATCH_BAD_INDPTR:
        raise bad_indptr
    if problem == _features.BATCH_EMPTY:
        _raise_if_empty(indptr, name)
    elif problem == _features.BATCH_NODE_RANGE:
        _raise_if_outside(nodes, indptr, n_nodes, name)
    elif problem == _features.BATCH_NOT_FINITE:
        raise InvalidMeasureError(
            f"{name(_measure_of(pos, indptr))} has mass {masses[pos]} at node {nodes[pos]}; "
            "masses must be finite"
        )
    elif problem == _features.BATCH_NEGATIVE:
        raise InvalidMeasureError(
            f"{name(_measure_of(pos, indptr))} has mass {masses[pos]} at node {nodes[pos]}; "
            "masses must be >= 0"
        )
    elif problem == _features.BATCH_ZERO_TOTAL:
        raise InvalidMeasureError(
            f"{name(pos)} has total mass 0.0; at least one mass must be positive"
        )
    elif problem == _features.BATCH_TOO_LARGE:
        # Their sum could overflow, which would scale the measure to zero.
        raise InvalidMeasureError(
            f"{name(pos)} has masses that sum to more than {TOTAL_MAX:g} "
            "(near the float64 limit, inf); divide its masses by a common factor"
        )
    elif problem == _features.BATCH_TOO_SMALL and normalize:
        # Normalising would divide by a (near) subnormal number.
        total = float(np.sum(masses[indptr[pos]:indptr[pos + 1]]))
        raise InvalidMeasureError(
            f"{name(pos)} has masses that sum to {total:g}, below {TOTAL_MIN:g}, "
            "too small to normalise exactly; multiply its masses by a common factor"
        )
    row_scale = (normalising_factors(indptr, masses) if normalize
                 else np.ones(max(len(indptr) - 1, 0)))
    return MeasureBatch(
        indptr=indptr,
        nodes=nodes32,
        masses=masses,
        row_scale=np.ascontiguousarray(row_scale, dtype=np.float64),
    )


def normalising_factors(indptr, masses):
    """1 / the sum of each row's masses (CSR rows given by ``indptr``), the
    one computation of it: an index rebuilds features from stored measures
    to the same bits only if it computes these factors the same way. A row
    without mass gets inf."""
    if len(indptr) <= 1:
        return np.zeros(0)
    with np.errstate(divide="ignore"):
        return 1.0 / np.add.reduceat(masses, indptr[:-1])


def checked_batch(indptr, nodes, masses, row_scale):
    """A :class:`MeasureBatch` of arrays already checked elsewhere (the
    stored measures of an index, with their stored ``row_scale``), in the
    types the compiled loops take; nothing is checked again."""
    return MeasureBatch(indptr=np.ascontiguousarray(indptr, dtype=np.int64),
                        nodes=np.ascontiguousarray(nodes, dtype=np.int32),
                        masses=np.ascontiguousarray(masses, dtype=np.float64),
                        row_scale=np.ascontiguousarray(row_scale, dtype=np.float64))


def _raise_if_empty(indptr, name):
    empty = np.flatnonzero(np.diff(indptr) == 0)
    if len(empty):
        raise InvalidMeasureError(
            f"{name(empty[0])} is empty; every measure needs at least one (node, mass) pair"
        )


def _raise_if_outside(nodes, indptr, n_nodes, name):
    out_of_range = np.flatnonzero((nodes < 0) | (nodes >= n_nodes))
    if len(out_of_range):
        pos = out_of_range[0]
        raise InvalidMeasureError(
            f"{name(_measure_of(pos, indptr))} has node {nodes[pos]}, "
            f"but the graph's nodes are 0..{n_nodes - 1}"
        )
