"""Sobolev transport distances, Gram matrices, kernels and scikit-learn interop.

Features are the edge-mass rows made by :meth:`ShortestPathTree.features`
(one CSR matrix per tree). For one tree with edge lengths w,

    S_p(mu, nu)^p = sum_v w_v |alpha_mu(v) - alpha_nu(v)|^p,   S_inf = max_v |...|,

and over several roots the sliced distance is sum_r eta_r S_p^(r) (Def. 4.6).
"""
import math
from typing import NamedTuple

import numpy as np
import scipy.sparse as sp

from . import _pairwise
from .graph import ShortestPathTree, normalise_eta

__all__ = [
    "check_p",
    "sobolev_distance",
    "pairwise_sobolev",
    "sobolev_kernel",
    "SobolevFeatures",
    "difference_distance",
    "sliced_pairwise",
]


# Above this p the identity-based loops (which sum p-th powers) are not
# used: |d|^p underflows for small differences (0.01^p is 0 in float64 from
# p = 154, and the distance of two near-equal measures from far lower p), so
# S_p is computed relative to the largest difference instead, and tends to
# S_inf as p grows.
LARGE_P = 16.0


def check_p(p):
    """Return p as a float in [1, inf]; 'inf' is accepted."""
    if isinstance(p, str) and p.strip().lower() in ("inf", "infinity"):
        return math.inf
    if isinstance(p, bool) or not isinstance(p, (int, float, np.integer, np.floating)):
        raise ValueError(f"p is {p!r}; expected a number in [1, inf]")
    p = float(p)
    if not p >= 1.0:  # also rejects NaN
        raise ValueError(f"p is {p}; expected a number in [1, inf]")
    return p


def _tree_list(trees):
    if isinstance(trees, ShortestPathTree):
        return [trees]
    if trees is None:
        raise TypeError("trees is required: a ShortestPathTree or a list of them")
    trees = list(trees)
    if not trees or not all(isinstance(t, ShortestPathTree) for t in trees):
        raise TypeError("trees must be a ShortestPathTree or a non-empty list of them")
    return trees


def _feature_list(F, trees, name):
    if sp.issparse(F) or isinstance(F, np.ndarray):
        F = [F]
    F = list(F)
    if len(F) != len(trees):
        raise ValueError(f"{name} has features for {len(F)} trees; expected {len(trees)}, one per tree")
    return [_checked_features(f, t, name) for f, t in zip(F, trees)]


def _checked_features(F, tree, name):
    """CSR (int64 indptr, int32 indices, float64 data, sorted) or a clear error."""
    F = sp.csr_matrix(F)
    if F.shape[1] != tree.n_nodes:
        raise ValueError(
            f"{name} has {F.shape[1]} columns; expected one per node of the tree ({tree.n_nodes})"
        )
    if F.dtype != np.float64:
        F = F.astype(np.float64)
    if not np.all(np.isfinite(F.data)) or np.any(F.data < 0):
        raise ValueError(f"{name} has negative or non-finite values; edge masses are finite and >= 0")
    if F.nnz and (int(F.indices.min()) < 0 or int(F.indices.max()) >= tree.n_nodes):
        # SciPy does not check column indices; the compiled loops trust them.
        raise ValueError(f"{name} has a column index outside 0..{tree.n_nodes - 1}")
    if not F.has_canonical_format:
        F = F.copy()
        F.sum_duplicates()
    return F


class FeatureRows(NamedTuple):
    """Feature rows as plain CSR arrays (int64 indptr, int32 indices,
    float64 data, sorted columns), with the shape of the matrix."""
    indptr: np.ndarray
    indices: np.ndarray
    data: np.ndarray
    shape: tuple


def _scaled_rows(F, tree, p):
    """(indptr, indices, data) of the feature rows ``F`` (a CSR matrix, or
    anything with those three arrays) with each value multiplied by its
    edge's w**(1/p), so that S_p is a plain l_p distance between rows."""
    if math.isinf(p):
        data = F.data
    elif p == 1.0:
        data = F.data * tree.length[F.indices]
    else:
        data = F.data * tree.length[F.indices] ** (1.0 / p)
    return (np.ascontiguousarray(F.indptr, dtype=np.int64),
            np.ascontiguousarray(F.indices, dtype=np.int32),
            np.ascontiguousarray(data, dtype=np.float64))


def _powers(FX, FY, tree, p, n_threads):
    """sum_v w_v |x_v - y_v|^p for every pair (max |.| for p = inf)."""
    symmetric = FY is None
    x = _scaled_rows(FX, tree, p)
    y = x if symmetric else _scaled_rows(FY, tree, p)
    n_y = FX.shape[0] if symmetric else FY.shape[0]
    out = np.zeros((FX.shape[0], n_y), dtype=np.float64)
    _pairwise.pairwise_powers(*x, *y, tree.n_nodes, p, symmetric, out, n_threads=n_threads)
    return out


# Below this, the p-th power of a distance may have underflowed (for
# p > 2, the powers of differences of 1e-20 and less are subnormal or 0).
_TINY_POWER = 1e-280


def _recompute_tiny(part, pairs, FX, FY, tree, p):
    """S_p of the ``pairs`` (i, j) whose p-th power was tiny, from the two
    rows relative to their largest difference: near-duplicates keep their
    small but positive distance instead of 0."""
    if len(pairs) == 0:
        return
    x = _scaled_rows(FX, tree, math.inf)
    y = _scaled_rows(FY, tree, math.inf)
    scale = tree.length ** (1.0 / p)
    out = np.zeros((1, 1))
    for i, j in pairs:
        if FX is FY and i == j:
            continue
        _pairwise.pairwise_lp(*_one_row(x, i), *_one_row(y, j), scale, p, False, out,
                              n_threads=1)
        part[i, j] = out[0, 0]


def _one_row(rows, i):
    indptr, indices, data = rows
    lo, hi = indptr[i], indptr[i + 1]
    return np.array([0, hi - lo], dtype=np.int64), indices[lo:hi], data[lo:hi]


def _large_p(FX, FY, tree, p, n_threads):
    """S_p (not its power) for every pair, relative to each pair's largest
    difference, for p above LARGE_P: the kernel weighs the raw rows itself."""
    symmetric = FY is None
    x = _scaled_rows(FX, tree, math.inf)  # unscaled, as contiguous arrays
    y = x if symmetric else _scaled_rows(FY, tree, math.inf)
    n_y = FX.shape[0] if symmetric else FY.shape[0]
    out = np.zeros((FX.shape[0], n_y), dtype=np.float64)
    _pairwise.pairwise_lp(*x, *y, tree.length ** (1.0 / p), p, symmetric, out,
                          n_threads=n_threads)
    return out


def sliced_pairwise(FX, FY, trees, p, eta, n_threads=None, power=False):
    """sum_r eta_r S_p^(r) between the rows of FX and FY (FY=None: FX with
    itself), or sum_r eta_r (S_p^(r))^p with ``power=True``: the matrix of
    :func:`pairwise_sobolev`, and what :func:`sobolev_kernel` takes exp(-t .) of."""
    trees = _tree_list(trees)
    p = check_p(p)
    eta = normalise_eta(eta, len(trees))
    FX = _feature_list(FX, trees, "FX")
    FY = None if FY is None else _feature_list(FY, trees, "FY")
    return _sliced(FX, FY, trees, p, eta, n_threads, power)


def sliced_rows(FX, FY, trees, p, eta, n_threads=1):
    """The matrix of :func:`sliced_pairwise` between :class:`FeatureRows`
    that the caller built from checked measures (an index's stored rows and
    its queries), with ``eta`` as given: no check and no conversion, for
    the many small blocks of a search's re-ranking."""
    return _sliced(FX, FY, trees, p, eta, n_threads, False)


def _sliced(FX, FY, trees, p, eta, n_threads, power):
    """sliced_pairwise on checked rows: per tree, anything with indptr,
    indices, data and shape."""
    total = None
    for r, tree in enumerate(trees):
        if LARGE_P < p < math.inf:
            part = _large_p(FX[r], None if FY is None else FY[r], tree, p, n_threads)
            if power:
                np.power(part, p, out=part)
        else:
            part = _powers(FX[r], None if FY is None else FY[r], tree, p, n_threads)
            if not power and not math.isinf(p) and p != 1.0:
                tiny = np.argwhere(part < _TINY_POWER) if p > 2.0 else ()
                np.power(part, 1.0 / p, out=part)
                _recompute_tiny(part, tiny, FX[r], FX[r] if FY is None else FY[r], tree, p)
        part *= eta[r]
        total = part if total is None else np.add(total, part, out=total)
    return total


def pairwise_sobolev(FX, FY=None, trees=None, p=1, eta=None, n_threads=None):
    """Matrix of S_p between the rows of FX and FY (FY=None: FX with itself).

    ``FX``/``FY`` are feature matrices from :meth:`ShortestPathTree.features`,
    or lists of them, one per tree in ``trees`` (sliced S_p, weights ``eta``,
    equal by default). With FY=None the result is exactly symmetric with a
    zero diagonal. ``n_threads`` defaults to all OpenMP threads; results do
    not depend on it.
    """
    return sliced_pairwise(FX, FY, trees, p, eta, n_threads, power=False)


def sobolev_kernel(FX, FY=None, trees=None, p=1, t=1.0, power=False, eta=None, n_threads=None):
    """exp(-t S_p), or exp(-t S_p^p) with ``power=True``.

    Both are positive definite for 1 <= p <= 2 (Prop. 4.5). Over several
    trees, ``power=True`` uses sum_r eta_r (S_p^(r))^p, which keeps the kernel
    positive definite; ``power=False`` uses the sliced distance.
    """
    if not (isinstance(t, (int, float, np.integer, np.floating)) and t > 0 and math.isfinite(t)):
        raise ValueError(f"t is {t!r}; expected a positive finite number")
    p = check_p(p)
    if power and math.isinf(p):
        raise ValueError("power=True needs a finite p; S_inf has no p-th power")
    values = sliced_pairwise(FX, FY, trees, p, eta, n_threads, power=power)
    np.multiply(values, -float(t), out=values)
    return np.exp(values, out=values)


def sobolev_distance(mu, nu, trees, p=1, eta=None, normalize=True):
    """S_p between two measures given as ``(nodes, masses)`` pairs.

    Computed by a direct sparse difference (not the scan of
    :func:`pairwise_sobolev`), so it is exact even for nearly equal measures.
    """
    trees = _tree_list(trees)
    p = check_p(p)
    eta = normalise_eta(eta, len(trees))
    pairs = [tree.features_of([mu, nu], normalize=normalize) for tree in trees]
    return difference_distance([F[0] for F in pairs], [F[1] for F in pairs], trees, p, eta)


def difference_distance(fa, fb, trees, p, eta):
    """sum_r eta_r S_p between one-row feature matrices fa[r] and fb[r], from
    their sparse difference: no cancellation, so exact for near-equal rows."""
    total = 0.0
    for r, tree in enumerate(trees):
        diff = (fa[r] - fb[r]).tocsr()
        values = np.abs(diff.data)
        largest = float(values.max(initial=0.0))
        if math.isinf(p) or largest == 0.0:
            part = largest
        else:
            # Relative to the largest difference, so that no term underflows
            # for large p and the result tends to S_inf.
            weights = tree.length[diff.indices]
            part = largest * float(np.sum(weights * (values / largest) ** p)) ** (1.0 / p)
        total += eta[r] * part
    return total


class SobolevFeatures:
    """scikit-learn transformer: measures -> w^(1/p)-scaled edge masses.

    On its output, S_p is the plain l_p distance, so ``NearestNeighbors``
    (metric "manhattan" for p=1, "euclidean" for p=2, "chebyshev" for inf) and
    ``pairwise_distances`` give S_p. Several trees are allowed for p=1 only:
    the rows are then the trees' features side by side, each scaled by its
    eta, and l1 on them is the sliced S_1. Indices are sorted, which
    scikit-learn's sparse manhattan needs.

    ``transform`` takes a sequence of ``(nodes, masses)`` pairs or an
    N x n_nodes (sparse) matrix of node masses.
    """

    def __init__(self, trees=None, p=1, eta=None, normalize=True):
        self.trees = trees
        self.p = p
        self.eta = eta
        self.normalize = normalize

    def get_params(self, deep=True):
        return {"trees": self.trees, "p": self.p, "eta": self.eta, "normalize": self.normalize}

    def set_params(self, **params):
        for name, value in params.items():
            if name not in self.get_params():
                raise ValueError(f"unknown parameter {name!r} for SobolevFeatures")
            setattr(self, name, value)
        return self

    def fit(self, X=None, y=None):
        self.trees_ = _tree_list(self.trees)
        self.p_ = check_p(self.p)
        if len(self.trees_) > 1 and self.p_ != 1.0:
            raise ValueError(
                f"p is {self.p_} with {len(self.trees_)} trees; several trees need p=1, because "
                "only then is the sliced distance one l_p norm of stacked features"
            )
        self.eta_ = normalise_eta(self.eta, len(self.trees_))
        self.n_features_out_ = sum(t.n_nodes for t in self.trees_)
        return self

    def transform(self, X):
        if not hasattr(self, "trees_"):
            raise RuntimeError("SobolevFeatures is not fitted; call fit() first")
        blocks = []
        for r, tree in enumerate(self.trees_):
            F = tree.features_of(X, normalize=self.normalize)
            indptr, indices, data = _scaled_rows(F, tree, self.p_)
            if len(self.trees_) > 1:
                data = data * self.eta_[r]
            blocks.append(sp.csr_matrix((data, indices, indptr), shape=F.shape))
        out = blocks[0] if len(blocks) == 1 else sp.hstack(blocks, format="csr")
        out.sort_indices()
        return out

    def fit_transform(self, X, y=None):
        return self.fit(X, y).transform(X)
