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

    Each row is the feature vector of one measure, as
    :meth:`ShortestPathTree.features` makes it. Over several trees the
    distance is the sliced S_p, ``sum_r eta_r S_p^(r)``. With FY=None the
    result is exactly symmetric with a zero diagonal.

    Parameters
    ----------
    FX : sparse matrix or ndarray of shape (n_x, n_nodes), or list of them
        Features of the first measures: one matrix for one tree, or a list
        of one matrix per tree in ``trees``. Values are finite and >= 0.
    FY : sparse matrix or ndarray of shape (n_y, n_nodes), or list of them, optional
        Features of the second measures, given as ``FX`` is. None (the
        default): ``FX`` with itself.
    trees : ShortestPathTree or list of ShortestPathTree
        The tree (or trees) the features were made on. Required.
    p : float or "inf", default 1
        The order, in [1, inf].
    eta : array-like of shape (n_trees,), optional
        Weights of the trees: finite, >= 0 with a positive sum, normalised
        to sum 1. None (the default) means equal weights.
    n_threads : int, optional
        Threads of the computation. None (the default) or <= 0 means every
        thread OpenMP offers; results do not depend on it.

    Returns
    -------
    ndarray of shape (n_x, n_y), float64
        ``D[i, j]`` is S_p between row i of ``FX`` and row j of ``FY`` (of
        ``FX`` when FY=None).

    Raises
    ------
    TypeError
        If ``trees`` is missing or not a ShortestPathTree or a non-empty
        list of them.
    ValueError
        If ``p`` or ``eta`` is not valid, the number of feature matrices is
        not the number of trees, or a matrix has the wrong number of
        columns, a negative or non-finite value, or a column outside the
        tree.

    See Also
    --------
    sobolev_distance : S_p between two measures, from their difference.
    sobolev_kernel : exp(-t S_p) from the same features.

    Notes
    -----
    For one tree with edge lengths w and features ``alpha``::

        S_p(mu, nu) = (sum over edges e of w_e |alpha_mu(e) - alpha_nu(e)|^p)^(1/p)
        S_inf(mu, nu) = max over edges e of |alpha_mu(e) - alpha_nu(e)|

    For p above 16 the sum is taken relative to each pair's largest
    difference, so that no power underflows and S_p tends to S_inf as p
    grows; for p > 2, pairs whose p-th power is tiny are recomputed that
    way, so that near-duplicates keep a small positive distance.

    Examples
    --------
    >>> from sobolev_index import Graph, pairwise_sobolev
    >>> graph = Graph.from_edges(4, [(0, 1), (1, 2), (2, 3), (3, 0)], [1.0, 2.0, 1.5, 1.0])
    >>> measures = [([1], None), ([2], None), ([1, 3], [0.5, 0.5])]
    >>> tree = graph.tree(0)
    >>> F = tree.features_of(measures)
    >>> pairwise_sobolev(F, trees=tree, p=1).round(4).tolist()
    [[0.0, 3.5, 1.0], [3.5, 0.0, 2.5], [1.0, 2.5, 0.0]]
    >>> pairwise_sobolev(F[:1], F, trees=tree, p=2).round(4).tolist()
    [[0.0, 1.8708, 0.7071]]

    Sliced over two roots, the second weighed a third as much as the first:

    >>> trees = graph.trees([0, 2])
    >>> F = [t.features_of(measures) for t in trees]
    >>> pairwise_sobolev(F, trees=trees, p=1, eta=[3, 1]).round(4).tolist()
    [[0.0, 3.125, 1.1875], [3.125, 0.0, 2.3125], [1.1875, 2.3125, 0.0]]
    """
    return sliced_pairwise(FX, FY, trees, p, eta, n_threads, power=False)


def sobolev_kernel(FX, FY=None, trees=None, p=1, t=1.0, power=False, eta=None, n_threads=None):
    """exp(-t S_p), or exp(-t S_p^p) with ``power=True``.

    Both are positive definite for 1 <= p <= 2 (Prop. 4.5). Over several
    trees, ``power=True`` uses ``sum_r eta_r (S_p^(r))^p``, which keeps the
    kernel positive definite; ``power=False`` uses the sliced distance.

    Parameters
    ----------
    FX : sparse matrix or ndarray of shape (n_x, n_nodes), or list of them
        Features of the first measures, as for :func:`pairwise_sobolev`.
    FY : sparse matrix or ndarray of shape (n_y, n_nodes), or list of them, optional
        Features of the second measures. None (the default): ``FX`` with
        itself.
    trees : ShortestPathTree or list of ShortestPathTree
        The tree (or trees) the features were made on. Required.
    p : float or "inf", default 1
        The order, in [1, inf]; finite with ``power=True``.
    t : float, default 1.0
        The bandwidth: a positive, finite number.
    power : bool, default False
        Take the exponential of ``-t S_p^p`` rather than of ``-t S_p``.
    eta : array-like of shape (n_trees,), optional
        Weights of the trees, normalised to sum 1. None (the default) means
        equal weights.
    n_threads : int, optional
        Threads of the computation. None (the default) or <= 0 means every
        thread OpenMP offers; results do not depend on it.

    Returns
    -------
    ndarray of shape (n_x, n_y), float64
        The kernel matrix, values in [0, 1] (0 where ``t`` times the
        distance is too large for float64); exactly symmetric with a
        diagonal of 1 when FY=None.

    Raises
    ------
    ValueError
        If ``t`` is not positive and finite, ``p`` is not valid or infinite
        with ``power=True``, or the features or ``eta`` are not valid (as
        for :func:`pairwise_sobolev`).
    TypeError
        If ``trees`` is missing or not trees.

    See Also
    --------
    pairwise_sobolev : The distances the kernel is made of.

    Examples
    --------
    >>> from sobolev_index import Graph, sobolev_kernel
    >>> graph = Graph.from_edges(4, [(0, 1), (1, 2), (2, 3), (3, 0)], [1.0, 2.0, 1.5, 1.0])
    >>> tree = graph.tree(0)
    >>> F = tree.features_of([([1], None), ([2], None), ([1, 3], [0.5, 0.5])])
    >>> sobolev_kernel(F, trees=tree, p=1, t=0.5).round(4).tolist()
    [[1.0, 0.1738, 0.6065], [0.1738, 1.0, 0.2865], [0.6065, 0.2865, 1.0]]
    >>> sobolev_kernel(F, trees=tree, p=2, t=0.5, power=True).round(4).tolist()
    [[1.0, 0.1738, 0.7788], [0.1738, 1.0, 0.3679], [0.7788, 0.3679, 1.0]]
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
    Over several trees it is the sliced distance ``sum_r eta_r S_p^(r)``.

    Parameters
    ----------
    mu : tuple of (nodes, masses)
        The first measure: node ids and their masses (``masses=None``: equal
        masses). Masses are finite and >= 0 with a positive sum.
    nu : tuple of (nodes, masses)
        The second measure, given as ``mu`` is.
    trees : ShortestPathTree or list of ShortestPathTree
        The tree, or the trees of the sliced distance.
    p : float or "inf", default 1
        The order, in [1, inf].
    eta : array-like of shape (n_trees,), optional
        Weights of the trees, normalised to sum 1. None (the default) means
        equal weights.
    normalize : bool, default True
        Divide each measure's masses by their sum. With False they are used
        as given.

    Returns
    -------
    float
        S_p(mu, nu), a NumPy float64.

    Raises
    ------
    InvalidMeasureError
        If a measure is empty, names an unknown node or has bad masses.
    TypeError
        If ``trees`` is not a ShortestPathTree or a non-empty list of them.
    ValueError
        If ``p`` or ``eta`` is not valid.

    See Also
    --------
    pairwise_sobolev : S_p between many measures at once.

    Notes
    -----
    For one tree with edge lengths w, and ``alpha_mu(e)`` the mass of mu
    below edge e::

        S_p(mu, nu) = (sum over edges e of w_e |alpha_mu(e) - alpha_nu(e)|^p)^(1/p)

    The sum is taken relative to the largest difference, so that no term
    underflows for large p, and S_p tends to S_inf (the largest
    difference) as p grows.

    Examples
    --------
    >>> from sobolev_index import Graph, sobolev_distance
    >>> graph = Graph.from_edges(4, [(0, 1), (1, 2), (2, 3), (3, 0)], [1.0, 2.0, 1.5, 1.0])
    >>> mu, nu = ([1], None), ([1, 3], [0.5, 0.5])
    >>> round(float(sobolev_distance(mu, nu, graph.tree(0), p=1)), 4)
    1.0
    >>> round(float(sobolev_distance(mu, nu, graph.tree(0), p="inf")), 4)
    0.5
    >>> round(float(sobolev_distance(mu, nu, graph.trees([0, 2]), p=1)), 4)
    1.375
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

    :meth:`transform` takes a sequence of ``(nodes, masses)`` pairs or an
    N x n_nodes (sparse) matrix of node masses. The parameters are checked
    by :meth:`fit`, not by the constructor.

    Parameters
    ----------
    trees : ShortestPathTree or list of ShortestPathTree
        The tree, or (for p=1) the trees whose features are stacked.
    p : float or "inf", default 1
        The order, in [1, inf]; 1 with several trees.
    eta : array-like of shape (n_trees,), optional
        Weights of the trees, normalised to sum 1. None (the default) means
        equal weights.
    normalize : bool, default True
        Divide each measure's masses by their sum. With False they are used
        as given.

    Attributes
    ----------
    trees_ : list of ShortestPathTree
        The trees, after :meth:`fit`.
    p_ : float
        The order as a float.
    eta_ : ndarray of shape (n_trees,), float64
        The normalised weights.
    n_features_out_ : int
        Number of output columns, the sum of the trees' numbers of nodes.

    See Also
    --------
    pairwise_sobolev : The same distances, from the unscaled features.

    Examples
    --------
    >>> from sobolev_index import Graph, SobolevFeatures
    >>> graph = Graph.from_edges(4, [(0, 1), (1, 2), (2, 3), (3, 0)], [1.0, 2.0, 1.5, 1.0])
    >>> measures = [([1], None), ([2], None), ([1, 3], [0.5, 0.5])]
    >>> X = SobolevFeatures(graph.tree(0), p=2).fit_transform(measures)
    >>> X.shape
    (3, 4)
    >>> from scipy.spatial.distance import pdist
    >>> pdist(X.toarray(), "euclidean").round(4).tolist()
    [1.8708, 0.7071, 1.4142]

    With several trees, for p=1, l1 on the output is the sliced S_1:

    >>> X = SobolevFeatures(graph.trees([0, 2]), p=1).fit_transform(measures)
    >>> pdist(X.toarray(), "cityblock").round(4).tolist()
    [2.75, 1.375, 2.125]
    """

    def __init__(self, trees=None, p=1, eta=None, normalize=True):
        self.trees = trees
        self.p = p
        self.eta = eta
        self.normalize = normalize

    def get_params(self, deep=True):
        """The parameters given to the constructor, as scikit-learn asks for them.

        Parameters
        ----------
        deep : bool, default True
            Accepted for scikit-learn; there are no nested estimators.

        Returns
        -------
        dict
            ``trees``, ``p``, ``eta`` and ``normalize``.
        """
        return {"trees": self.trees, "p": self.p, "eta": self.eta, "normalize": self.normalize}

    def set_params(self, **params):
        """Set constructor parameters by name, as scikit-learn does.

        Call :meth:`fit` again for them to take effect.

        Parameters
        ----------
        **params
            New values of ``trees``, ``p``, ``eta`` or ``normalize``.

        Returns
        -------
        SobolevFeatures
            This transformer.

        Raises
        ------
        ValueError
            If a name is not one of the parameters.
        """
        for name, value in params.items():
            if name not in self.get_params():
                raise ValueError(f"unknown parameter {name!r} for SobolevFeatures")
            setattr(self, name, value)
        return self

    def fit(self, X=None, y=None):
        """Check the parameters and keep them for :meth:`transform`.

        Nothing is learnt from the data.

        Parameters
        ----------
        X : object, optional
            Ignored.
        y : object, optional
            Ignored.

        Returns
        -------
        SobolevFeatures
            This transformer, fitted.

        Raises
        ------
        TypeError
            If ``trees`` is not a ShortestPathTree or a non-empty list of
            them.
        ValueError
            If ``p`` or ``eta`` is not valid, or several trees are given with
            p other than 1.
        """
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
        """The scaled edge masses of measures.

        Parameters
        ----------
        X : sequence of (nodes, masses) pairs, or array-like or sparse matrix
            The measures: ``(nodes, masses)`` pairs (``masses=None``: equal
            masses), or an N x n_nodes array or SciPy sparse matrix of node
            masses.

        Returns
        -------
        scipy.sparse.csr_matrix of shape (N, n_columns)
            float64 rows with sorted indices: each tree's features, the
            value of edge v multiplied by ``w_v^(1/p)`` (unscaled for p =
            inf) and, with several trees, by the tree's eta. ``n_columns``
            is ``n_features_out_``, the sum of the trees' numbers of nodes.

        Raises
        ------
        RuntimeError
            If the transformer is not fitted.
        InvalidMeasureError
            If a measure is empty, names an unknown node or has bad masses.
        """
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
        """:meth:`fit`, then :meth:`transform` of ``X``.

        Parameters
        ----------
        X : sequence of (nodes, masses) pairs, or array-like or sparse matrix
            The measures, as for :meth:`transform`.
        y : object, optional
            Ignored.

        Returns
        -------
        scipy.sparse.csr_matrix of shape (N, n_columns)
            The scaled edge masses of ``X``, ``n_features_out_`` columns.

        Raises
        ------
        TypeError, ValueError, InvalidMeasureError
            As :meth:`fit` and :meth:`transform` raise them.
        """
        return self.fit(X, y).transform(X)
