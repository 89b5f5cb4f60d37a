"""Results must not depend on the thread count, also when the parallel loops
really run: small inputs stay serial below the serial threshold, so the
``parallel_everywhere`` fixture lowers it."""
import numpy as np

from sobolev_index import Graph, pairwise_sobolev


def test_features_and_matrices_do_not_depend_on_threads(parallel_everywhere):
    rng = np.random.default_rng(3)
    graph = Graph.from_points(rng.normal(size=(600, 5)), n_nodes=120, seed=4)
    tree = graph.tree(0)
    measures = [(rng.integers(0, 120, rng.integers(1, 25)), None) for _ in range(150)]
    one = tree.features_of(measures, n_threads=1)
    two = tree.features_of(measures, n_threads=2)
    assert np.array_equal(one.indptr, two.indptr)
    assert np.array_equal(one.indices, two.indices)
    assert np.array_equal(one.data, two.data)
    for p in (1, 2, 1.5, np.inf):
        a = pairwise_sobolev(one[:40], one, trees=tree, p=p, n_threads=1)
        b = pairwise_sobolev(one[:40], one, trees=tree, p=p, n_threads=2)
        assert np.array_equal(a, b), p
        s1 = pairwise_sobolev(one, trees=tree, p=p, n_threads=1)
        s2 = pairwise_sobolev(one, trees=tree, p=p, n_threads=2)
        assert np.array_equal(s1, s2), p
        # and the rectangular and symmetric paths agree with each other
        np.testing.assert_allclose(s1[:40], a, rtol=1e-12, atol=1e-15)
