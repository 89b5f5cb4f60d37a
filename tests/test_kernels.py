"""Kernels (Prop. 4.5) and scikit-learn interop (thread independence: test_threads.py)."""


import numpy as np
import pytest
import reference as ref
from _support.graphs import pick_roots, random_graph
from _support.measures import random_measures
from sklearn.neighbors import NearestNeighbors
from sklearn.svm import SVC

from sobolev_index import (
    Graph,
    SobolevFeatures,
    pairwise_sobolev,
    sobolev_kernel,
)


def _setup(seed=0, n=30, kind="euclidean", n_roots=1, n_measures=40):
    spec = random_graph(seed, n, extra=n, kind=kind)
    roots = pick_roots(spec, n_roots, seed)
    g = spec.lib()
    trees = g.trees(roots)
    Rs = [spec.ref_tree(r) for r in roots]
    rng = np.random.default_rng(seed)
    X = random_measures(rng, n, n_measures)
    return spec, trees, Rs, X


# --------------------------------------------------------------------------- kernels
@pytest.mark.parametrize("p", [1, 2, 1.5])
@pytest.mark.parametrize("power", [False, True])
def test_kernel_values_vs_reference(p, power):
    spec, (t,), (R,), X = _setup(1, n=20, n_measures=12)
    F = t.features_of(X)
    Y = X[:5]
    for tt in (0.3, 2.0):
        D = ref.ref_pairwise(X, Y, R, p, power=power)
        K = sobolev_kernel(F, t.features_of(Y), trees=t, p=p, t=tt, power=power)
        assert K.shape == (12, 5) and K.dtype == np.float64
        np.testing.assert_allclose(K, np.exp(-tt * D), rtol=1e-10, atol=0)
        KK = sobolev_kernel(F, trees=t, p=p, t=tt, power=power)
        np.testing.assert_allclose(KK, np.exp(-tt * ref.ref_pairwise(X, None, R, p, power=power)),
                                   rtol=1e-10, atol=0)
        assert np.array_equal(KK, KK.T) and np.all(np.diag(KK) == 1.0)


def test_kernel_sliced_vs_reference():
    spec, trees, Rs, X = _setup(2, n=25, n_roots=3, n_measures=10)
    eta = np.array([0.5, 0.3, 0.2])
    Fs = [t.features_of(X) for t in trees]
    K = sobolev_kernel(Fs, trees=trees, p=2, t=0.7, eta=eta)
    np.testing.assert_allclose(K, np.exp(-0.7 * ref.ref_pairwise(X, None, Rs, 2, eta=list(eta))),
                               rtol=1e-10)


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("p", [1, 2])
@pytest.mark.parametrize("power", [False, True])
@pytest.mark.parametrize("n_roots", [1, 3])
def test_gram_matrix_positive_semidefinite(seed, p, power, n_roots):
    # several roots with power=True: a convex combination of the negative definite
    # S_p^p (Prop. 4.5) is negative definite, so the kernel is still PSD
    spec, trees, _, X = _setup(seed + 20, n=40, kind=["euclidean", "random"][seed % 2],
                               n_roots=n_roots, n_measures=60)
    Fs = [t.features_of(X) for t in trees]
    F = Fs if n_roots > 1 else Fs[0]
    tt_ = trees if n_roots > 1 else trees[0]
    D = pairwise_sobolev(F, trees=tt_, p=p)
    med = np.median(D[D > 0] ** (p if power else 1))
    n = len(X)
    for scale in (0.1, 1.0, 10.0):
        K = sobolev_kernel(F, trees=tt_, p=p, t=scale / med, power=power)
        assert np.array_equal(K, K.T)
        lam = np.linalg.eigvalsh(K)
        assert lam.min() >= -1e-8 * n, (scale, lam.min())


def test_kernel_input_validation():
    spec, (t,), _, X = _setup(3, n=15, n_measures=4)
    F = t.features_of(X)
    for bad_t in (0.0, -1.0, np.nan, np.inf):
        with pytest.raises(ValueError):
            sobolev_kernel(F, trees=t, p=1, t=bad_t)
    with pytest.raises(ValueError):
        sobolev_kernel(F, trees=t, p=np.inf, power=True)
    with pytest.raises(ValueError):
        sobolev_kernel(F, trees=t, p=0.5)


# --------------------------------------------------------------------------- scikit-learn
def _nn_matrix(Z_fit, Z_query, metric, n_fit):
    nn = NearestNeighbors(algorithm="brute", metric=metric).fit(Z_fit)
    dist, idx = nn.kneighbors(Z_query, n_neighbors=n_fit)
    D = np.empty((Z_query.shape[0], n_fit))
    D[np.arange(Z_query.shape[0])[:, None], idx] = dist
    return D


@pytest.mark.parametrize(
    "p,metric,atol",
    [(1, "manhattan", 1e-12), (2, "euclidean", 1e-7), (np.inf, "chebyshev", 1e-12)],
)
def test_sobolev_features_nearest_neighbors(p, metric, atol):
    spec, (t,), (R,), X = _setup(7, n=45, n_measures=50)
    Y = random_measures(np.random.default_rng(70), spec.n, 15)
    sf = SobolevFeatures(t, p=p).fit()
    ZX = sf.transform(X)
    ZY = sf.transform(Y)
    for Z in (ZX, ZY):
        assert Z.format == "csr" and Z.dtype == np.float64 and Z.shape[1] == spec.n
        assert Z.has_sorted_indices
        for i in range(Z.shape[0]):
            assert np.all(np.diff(Z.indices[Z.indptr[i] : Z.indptr[i + 1]]) > 0)
    # scaling: column v is multiplied by w_v^(1/p)
    wpow = R.w ** (0.0 if np.isinf(p) else 1.0 / p)
    A = np.array([ref.ref_features(R, *m) for m in X])
    np.testing.assert_allclose(ZX.toarray(), A * wpow, rtol=1e-12, atol=1e-15)
    expect = pairwise_sobolev(t.features_of(Y), t.features_of(X), trees=t, p=p)
    np.testing.assert_allclose(expect, ref.ref_pairwise(Y, X, R, p), rtol=1e-10, atol=1e-13)
    # scikit-learn has no sparse chebyshev: hand it a dense copy there
    fitZ, qZ = (ZX, ZY) if metric != "chebyshev" else (ZX.toarray(), ZY.toarray())
    D = _nn_matrix(fitZ, qZ, metric, len(X))
    np.testing.assert_allclose(D, expect, rtol=1e-9, atol=atol)
    # the nearest neighbour found by scikit-learn is a nearest neighbour for S_p
    nn = NearestNeighbors(n_neighbors=1, algorithm="brute", metric=metric).fit(fitZ)
    _, idx = nn.kneighbors(qZ)
    got = expect[np.arange(len(Y)), idx[:, 0]]
    assert np.all(got <= expect.min(axis=1) + max(atol, 1e-12) * 10)


def test_sobolev_features_sliced_l1():
    spec, trees, Rs, X = _setup(8, n=35, n_roots=3, n_measures=30)
    eta = np.array([0.2, 0.5, 0.3])
    sf = SobolevFeatures(trees, p=1, eta=eta).fit()
    Z = sf.transform(X)
    assert Z.format == "csr" and Z.has_sorted_indices and Z.shape == (30, 3 * spec.n)
    D = _nn_matrix(Z, Z, "manhattan", len(X))
    expect = ref.ref_pairwise(X, None, Rs, 1, eta=list(eta))
    np.testing.assert_allclose(D, expect, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(
        pairwise_sobolev([t.features_of(X) for t in trees], trees=trees, p=1, eta=eta),
        expect, rtol=1e-10, atol=1e-13,
    )
    # default eta is uniform
    Zu = SobolevFeatures(trees, p=1).fit().transform(X)
    np.testing.assert_allclose(_nn_matrix(Zu, Zu, "manhattan", len(X)),
                               ref.ref_pairwise(X, None, Rs, 1), rtol=1e-9, atol=1e-12)
    for p in (2, np.inf):
        with pytest.raises(ValueError):
            SobolevFeatures(trees, p=p).fit().transform(X)


def test_svc_precomputed_kernel():
    # two classes of measures living on two far-apart halves of a point cloud
    rng = np.random.default_rng(3)
    P = np.r_[rng.normal(size=(200, 2)), rng.normal(size=(200, 2)) + [6.0, 0.0]]
    g = Graph.from_points(P, n_nodes=30, edges="log", seed=0)
    a = g.assignment
    left, right = np.unique(a[:200]), np.unique(a[200:])
    left, right = np.setdiff1d(left, right), np.setdiff1d(right, left)
    assert len(left) and len(right)

    def sample(nodes, k):
        sel = rng.choice(nodes, size=min(k, len(nodes)), replace=True)
        return sel, rng.uniform(0.1, 1.0, size=len(sel))

    ms = [sample(left, 4) for _ in range(40)] + [sample(right, 4) for _ in range(40)]
    y = np.r_[np.zeros(40), np.ones(40)]
    perm = rng.permutation(80)
    ms, y = [ms[i] for i in perm], y[perm]
    roots, eta = g.roots(1, strategy="center", seed=0)
    t = g.tree(int(roots[0]))
    R = ref.RefTree(g.n_nodes, g.edges, g.lengths, int(roots[0]))
    F = t.features_of(ms)
    tr, te = np.arange(60), np.arange(60, 80)
    for p, power in ((1, False), (2, True), (2, False)):
        # bandwidth from the training distances (the paper uses distance quantiles)
        med = np.median(ref.ref_pairwise([ms[i] for i in tr], None, R, p, power=power))
        Ktr = sobolev_kernel(F[tr], trees=t, p=p, t=1.0 / med, power=power)
        Kte = sobolev_kernel(F[te], F[tr], trees=t, p=p, t=1.0 / med, power=power)
        np.testing.assert_allclose(
            Kte, np.exp(-ref.ref_pairwise([ms[i] for i in te], [ms[i] for i in tr], R, p,
                                          power=power) / med), rtol=1e-10)
        assert Kte.shape == (20, 60)
        clf = SVC(kernel="precomputed", C=10.0).fit(Ktr, y[tr])
        assert clf.score(Ktr, y[tr]) == 1.0
        assert clf.score(Kte, y[te]) >= 0.9
