"""Sanity checks of tests/reference.py itself, against POT and SciPy only.

If these fail, the reference (not the library) is wrong; they do not import sobolev_index.
"""

import math

import numpy as np
import ot  # a test extra: missing means a broken install, not a skip
import pytest
import reference as ref
from _support.graphs import random_graph
from _support.measures import random_measure
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import dijkstra as sp_dijkstra


def _sp_dist(spec, root):
    n = spec.n
    A = coo_matrix((spec.lengths, (spec.edges[:, 0], spec.edges[:, 1])), shape=(n, n))
    return sp_dijkstra(A.tocsr(), directed=False, indices=root)


@pytest.mark.parametrize("seed", range(4))
def test_reference_dijkstra_matches_scipy(seed):
    spec = random_graph(seed, 30, extra=40, kind="random")
    for root in (0, 7, 29):
        dist, parent, plen = ref.dijkstra(spec.n, spec.edges, spec.lengths, root)
        np.testing.assert_allclose(dist, _sp_dist(spec, root), rtol=1e-13)
        for v in range(spec.n):
            if v != root:
                assert math.isclose(dist[v], dist[parent[v]] + plen[v], rel_tol=1e-13)


@pytest.mark.parametrize("seed", range(4))
def test_reference_tree_metric_and_floyd_warshall(seed):
    spec = random_graph(seed, 15, tree=True, kind="random")
    T = spec.ref_tree(3)
    np.testing.assert_allclose(
        ref.ref_tree_metric(T), ref.ref_graph_metric(spec.n, spec.edges, spec.lengths), rtol=1e-12
    )
    g = random_graph(seed, 15, extra=20, kind="euclidean")
    FW = ref.ref_graph_metric(g.n, g.edges, g.lengths)
    for r in range(g.n):
        np.testing.assert_allclose(FW[r], _sp_dist(g, r), rtol=1e-12)


@pytest.mark.parametrize("seed", range(5))
def test_reference_s1_equals_w1_on_trees(seed):
    spec = random_graph(seed, 14, tree=True, kind="random")
    rng = np.random.default_rng(seed)
    for root in range(0, 14, 3):
        T = spec.ref_tree(root)
        M = ref.ref_tree_metric(T)
        mu, nu = random_measure(rng, 14), random_measure(rng, 14)
        a, b = ref.dense_measure(*mu, 14), ref.dense_measure(*nu, 14)
        assert math.isclose(ref.ref_sobolev(mu, nu, T, 1), ot.emd2(a, b, M), rel_tol=1e-9)


def test_reference_inverse_and_gamma():
    spec = random_graph(3, 20, extra=15, kind="euclidean")
    T = spec.ref_tree(4)
    rng = np.random.default_rng(0)
    for _ in range(5):
        mu = random_measure(rng, 20)
        a = ref.ref_features(T, *mu)
        np.testing.assert_allclose(ref.ref_inverse(T, a), ref.dense_measure(*mu, 20), atol=1e-14)
    # gamma_v is the subtree of v: it contains v and the gammas of v's children
    for v, g in T.gamma.items():
        assert v in g
        for c in T.children[v]:
            assert T.gamma[c] < g


def test_reference_tie_detection_on_grid():
    # 3x3 unit grid, root at a corner: the opposite corner has 6 shortest paths
    n, edges = 9, []
    for i in range(3):
        for j in range(3):
            v = 3 * i + j
            if j < 2:
                edges.append((v, v + 1))
            if i < 2:
                edges.append((v, v + 3))
    ties = ref.tie_nodes(n, np.array(edges), np.ones(len(edges)), 0)
    assert ties == {4, 5, 7, 8}
