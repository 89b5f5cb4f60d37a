"""S_p for large finite p: no underflow to 0, agreement with the reference
computed relative to the largest difference, and convergence to S_inf, for
distances, distance matrices, the index's search and the SQL function."""
import math

import numpy as np
import pytest
import reference as ref
from _support.graphs import pick_roots, random_graph
from _support.measures import random_measures
from _support.settings import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from sobolev_index import SobolevIndex, pairwise_sobolev, sobolev_distance
from sobolev_index.index.sql import run_query

RTOL = 1e-9
# Finite p from just above 1 to float64's largest, log-uniformly.
LARGE = st.one_of(st.sampled_from([16.0, 17.0, 300.0, 500.0, 1e6, 1e308]),
                  st.floats(0.0, 308.0).map(lambda e: 10.0 ** e).filter(lambda p: p >= 1.0))


def _case(seed, n=14):
    spec = random_graph(seed, n, extra=n, kind=["euclidean", "random"][seed % 2])
    (root,) = pick_roots(spec, 1, seed)
    rng = np.random.default_rng(seed)
    return spec, root, random_measures(rng, n, 6)


@settings(max_examples=examples(40), deadline=None)
@given(seed=st.integers(0, 10_000), p=LARGE)
def test_distances_match_the_reference_for_any_p(seed, p):
    spec, root, X = _case(seed)
    tree, R = spec.lib().tree(root), spec.ref_tree(root)
    F = tree.features_of(X)
    D = pairwise_sobolev(F, trees=tree, p=p)
    expected = ref.ref_pairwise(X, None, R, p)
    np.testing.assert_allclose(D, expected, rtol=RTOL, atol=1e-15, err_msg=f"p={p}")
    for i, j in ((0, 1), (2, 5)):
        d = sobolev_distance(X[i], X[j], tree, p=p)
        assert math.isclose(d, expected[i, j], rel_tol=RTOL, abs_tol=1e-15), (p, i, j)
    # Between the weighted bounds of S_inf: (min w)^(1/p) S_inf <= S_p <= (sum w)^(1/p) S_inf,
    # so S_p -> S_inf as p grows (S_p >= S_inf itself needs every w >= 1).
    S_inf = pairwise_sobolev(F, trees=tree, p=math.inf)
    w = R.w[R.w > 0]
    low, high = w.min() ** (1.0 / p), w.sum() ** (1.0 / p)
    assert np.all(D >= low * S_inf * (1 - RTOL)) and np.all(D <= high * S_inf * (1 + RTOL))
    assert np.all((D > 0) == (S_inf > 0)), "a positive distance must not underflow to 0"


def test_far_large_p_equals_s_inf_and_never_underflows():
    spec, root, X = _case(3)
    tree = spec.lib().tree(root)
    F = tree.features_of(X)
    S_inf = pairwise_sobolev(F, trees=tree, p=math.inf)
    for p in (1e6, 1e308):
        np.testing.assert_allclose(pairwise_sobolev(F, trees=tree, p=p), S_inf, rtol=1e-5)
    # p = 500 used to give exactly 0 for every pair of distinct measures.
    off_diagonal = ~np.eye(len(X), dtype=bool)
    assert np.all(pairwise_sobolev(F, trees=tree, p=500)[off_diagonal] > 0)


@pytest.mark.parametrize("p", [3.0, 16.0, 17.0, 500.0, 1e6, 1e308])
def test_search_ranks_by_s_p_for_large_p(tmp_path, p):
    spec, _, X = _case(7, n=20)
    graph = spec.lib()
    roots = pick_roots(spec, 2, 7)
    keys = [f"m{i}" for i in range(len(X))]
    with SobolevIndex.create(tmp_path / "ix", graph, roots=list(roots)) as index:
        index.add(X, keys=keys)
    trees = [spec.ref_tree(r) for r in roots]
    expected = np.array([[ref.ref_sliced(q, x, trees, p) for x in X] for q in X[:3]])
    with SobolevIndex.open(tmp_path / "ix") as index:
        found = index.search(X[:3], k=4, p=p)
        for q in range(3):
            # the 4 smallest distances, each found key at its own distance
            np.testing.assert_allclose(found.distances[q], np.sort(expected[q])[:4],
                                       rtol=RTOL, atol=1e-15)
            own = [expected[q][keys.index(key)] for key in found.keys[q]]
            np.testing.assert_allclose(found.distances[q], own, rtol=RTOL, atol=1e-15)
        d = index.distance("m0", "m1", p=p)
        assert math.isclose(d, expected[0][1], rel_tol=RTOL), (p, d)
        _, rows = run_query(index, "SELECT sobolev_distance('m0', 'm1', ?)", [p])
        assert math.isclose(rows[0][0], expected[0][1], rel_tol=RTOL)


@pytest.mark.parametrize("p", [3.0, 8.0, 15.9, 16.0, 16.0001])
def test_near_duplicates_keep_a_positive_distance(p):
    # Features differing by about 1e-21: their p-th powers underflow for
    # p > 14, and the identity loses them for any p > 2; the distance must
    # still be the small positive S_p, the same from every function.
    spec, root, _ = _case(5)
    tree, R = spec.lib().tree(root), spec.ref_tree(root)
    mu = (np.array([1, 4]), np.array([1.0, 1e-21]))
    nu = (np.array([1]), np.array([1.0]))
    F = tree.features_of([mu, nu])
    expected = ref.ref_sobolev(mu, nu, R, p)
    assert 0 < expected < 1e-18
    for got in (pairwise_sobolev(F, trees=tree, p=p)[0, 1],
                pairwise_sobolev(F[:1], F, trees=tree, p=p)[0, 1],
                sobolev_distance(mu, nu, tree, p=p)):
        assert math.isclose(got, expected, rel_tol=RTOL), (p, got, expected)


def test_a_feature_matrix_with_a_column_outside_the_tree_is_refused():
    import scipy.sparse as sp

    spec, root, X = _case(2)
    tree = spec.lib().tree(root)
    F = tree.features_of(X)
    bad = sp.csr_matrix((F.data.copy(), F.indices.copy(), F.indptr.copy()), shape=F.shape)
    bad.indices[0] = tree.n_nodes + 5  # SciPy accepts it as it is
    for p in (1, 2, 3, 100):
        with pytest.raises(ValueError, match="column index outside"):
            pairwise_sobolev(bad, F, trees=tree, p=p)
