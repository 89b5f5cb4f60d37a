"""Baseline distances of the paper (bench/paper/baselines.py) against direct
computations: graph OT, WMD, spanning trees and tree-Wasserstein."""
from collections import Counter

import numpy as np
import pytest
from _support.bench import bench_module
from _support.measures import dense
from scipy.sparse import csgraph
from scipy.spatial.distance import cdist

from sobolev_index import Graph, pairwise_sobolev

ot = pytest.importorskip("ot")
baselines = bench_module("paper.baselines")
graph_ot_distances = baselines.graph_ot_distances
spanning_tree_graph = baselines.spanning_tree_graph
tree_wasserstein_distances = baselines.tree_wasserstein_distances
wmd_distances = baselines.wmd_distances


def small_graph(n_nodes=30, seed=0):
    rng = np.random.default_rng(seed)
    return Graph.from_points(rng.normal(size=(300, 3)), n_nodes=n_nodes, edges="log", seed=seed)


def random_measures(n_nodes, count, seed=0, max_support=8):
    """Measures with duplicate nodes, a zero mass, None masses and one-node supports."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(count):
        k = int(rng.integers(1, max_support + 1))
        nodes = rng.integers(0, n_nodes, size=k)
        if i % 4 == 0:
            out.append((nodes, None))
            continue
        masses = rng.random(k) * 3
        if i % 4 == 1 and k > 1:
            masses[0] = 0.0
        out.append((nodes, masses))
    return out


def brute_force_ot(graph, measures):
    C = csgraph.shortest_path(graph.adjacency(), directed=False)
    vecs = [dense(*m, graph.n_nodes) for m in measures]
    n = len(vecs)
    D = np.zeros((n, n))
    for i in range(n):
        for j in range(i + 1, n):
            D[i, j] = D[j, i] = ot.emd2(vecs[i], vecs[j], C, numItermax=10**7)
    return D


def explicit_tree_wasserstein(tree, measures):
    """sum over edges of w_e |mu(side_e) - nu(side_e)|, a side found by cutting e."""
    vecs = np.array([dense(*m, tree.n_nodes) for m in measures])
    n = len(vecs)
    D = np.zeros((n, n))
    for e, (_, v) in enumerate(tree.edges):
        keep = np.ones(tree.n_edges, dtype=bool)
        keep[e] = False
        cut = Graph(tree.n_nodes, tree.edges[keep], tree.lengths[keep])
        n_comp, labels = csgraph.connected_components(cut.adjacency(), directed=False)
        assert n_comp == 2
        side = vecs[:, labels == labels[v]].sum(axis=1)
        D += tree.lengths[e] * np.abs(side[:, None] - side[None, :])
    return D


def test_graph_ot_equals_brute_force_shortest_paths_and_emd2():
    graph = small_graph()
    measures = random_measures(graph.n_nodes, 14, seed=1)
    got = graph_ot_distances(graph, measures, n_jobs=1)
    D = got["distances"]
    np.testing.assert_allclose(D, brute_force_ot(graph, measures), rtol=0, atol=1e-9)
    assert np.array_equal(D, D.T) and not np.any(np.diag(D))
    assert got["n_pairs"] == 14 * 13 // 2
    assert 0 <= got["preprocessing_seconds"] <= got["seconds"]
    # the fast path gives ot.emd2's values bitwise
    via_emd2 = graph_ot_distances(graph, measures, n_jobs=1, solver="emd2")["distances"]
    assert np.array_equal(D, via_emd2)


def test_graph_ot_per_row_mode_and_n_jobs_give_identical_results():
    graph = small_graph(n_nodes=40, seed=2)
    measures = random_measures(graph.n_nodes, 30, seed=3)
    calls = []
    one = graph_ot_distances(graph, measures, n_jobs=1)
    two = graph_ot_distances(graph, measures, n_jobs=2, progress=lambda d, t: calls.append((d, t)))
    per_row = graph_ot_distances(graph, measures, n_jobs=2, max_matrix_bytes=0)
    assert one["mode"] == "matrix" and per_row["mode"] == "per-row"
    assert np.array_equal(one["distances"], two["distances"])
    assert np.array_equal(one["distances"], per_row["distances"])
    total = 30 * 29 // 2
    assert calls and calls[-1] == (total, total)
    assert [d for d, _ in calls] == sorted(d for d, _ in calls)


def test_on_a_tree_ot_equals_tree_wasserstein_and_sobolev_s1():
    graph = small_graph(n_nodes=35, seed=4)
    tree = spanning_tree_graph(graph, "random", seed=7)
    measures = random_measures(tree.n_nodes, 12, seed=5)
    explicit = explicit_tree_wasserstein(tree, measures)
    tw = tree_wasserstein_distances(tree, measures)
    np.testing.assert_allclose(tw["distances"], explicit, rtol=0, atol=1e-12)
    assert np.array_equal(tw["distances"], tw["distances"].T)
    # any root gives the same value
    other = tree_wasserstein_distances(tree, measures, root=17)["distances"]
    np.testing.assert_allclose(other, explicit, rtol=0, atol=1e-12)
    # W_1 with the tree metric (exact OT) = TW
    w1 = graph_ot_distances(tree, measures, n_jobs=1)["distances"]
    np.testing.assert_allclose(w1, explicit, rtol=0, atol=1e-9)
    # Sobolev S_1 on the tree, from sobolev_index directly
    t = tree.tree(9)
    s1 = pairwise_sobolev(t.features_of(measures), trees=t, p=1)
    np.testing.assert_allclose(s1, explicit, rtol=0, atol=1e-12)


def test_tree_wasserstein_refuses_a_graph_with_a_cycle():
    with pytest.raises(ValueError, match="tree"):
        tree_wasserstein_distances(small_graph(), [([0], None), ([1], None)])


def test_wmd_matches_direct_emd2_with_cdist_and_is_the_same_for_n_jobs():
    rng = np.random.default_rng(6)
    V, d = 200, 384
    vectors = rng.normal(size=(V, d)).astype(np.float32)
    vectors[5] = vectors[6]  # two words with one vector: distance exactly 0
    docs = []
    for i in range(25):
        k = int(rng.integers(1, 16))
        words = rng.integers(0, V, size=k)
        docs.append((words, None if i % 5 == 0 else rng.integers(1, 4, size=k)))
    docs.append((np.array([5, 7]), np.array([1.0, 1.0])))
    docs.append((np.array([6, 7]), np.array([1.0, 1.0])))
    gram = wmd_distances(docs, vectors, n_jobs=1)
    exact = wmd_distances(docs, vectors, n_jobs=1, ground="cdist")
    assert gram["ground"] == "gram" and exact["ground"] == "cdist"
    X = vectors.astype(np.float64)
    for i, j in [(0, 1), (2, 9), (3, 24), (10, 11), (7, 7), (25, 26), (0, 26)]:
        a, b = (dense(*docs[i], V), dense(*docs[j], V))
        sa, sb = np.flatnonzero(a), np.flatnonzero(b)
        want = ot.emd2(a[sa], b[sb], cdist(X[sa], X[sb]), numItermax=10**7)
        assert exact["distances"][i, j] == pytest.approx(want, rel=1e-12, abs=1e-12)
        assert gram["distances"][i, j] == pytest.approx(want, rel=1e-10, abs=1e-12)
    assert exact["distances"][25, 26] == 0.0 and gram["distances"][25, 26] == 0.0
    two = wmd_distances(docs, vectors, n_jobs=2)
    assert np.array_equal(gram["distances"], two["distances"])
    D = gram["distances"]
    assert np.array_equal(D, D.T) and not np.any(np.diag(D))


def _connected_tree(tree, n_nodes):
    assert tree.n_nodes == n_nodes and tree.n_edges == n_nodes - 1
    n_comp, _ = csgraph.connected_components(tree.adjacency(), directed=False)
    assert n_comp == 1


def _edge_set(g):
    return {(int(u), int(v)) for u, v in g.edges}


@pytest.mark.parametrize("kind", ["random", "uniform"])
def test_random_spanning_trees(kind):
    graph = small_graph(n_nodes=60, seed=8)
    lengths = {(int(u), int(v)): w for (u, v), w in zip(graph.edges, graph.lengths)}
    trees = [spanning_tree_graph(graph, kind, seed=s) for s in range(4)]
    mst = spanning_tree_graph(graph, "mst")
    for tree in trees + [mst]:
        _connected_tree(tree, graph.n_nodes)
        assert _edge_set(tree) <= set(lengths)
        assert all(w == lengths[(int(u), int(v))] for (u, v), w in zip(tree.edges, tree.lengths))
        assert tree.coords is graph.coords or np.array_equal(tree.coords, graph.coords)
        assert mst.lengths.sum() <= tree.lengths.sum() + 1e-12
    assert len({frozenset(_edge_set(t)) for t in trees}) > 1
    assert _edge_set(spanning_tree_graph(graph, kind, seed=2)) == _edge_set(trees[2])
    scipy_mst = csgraph.minimum_spanning_tree(graph.adjacency())
    assert mst.lengths.sum() == pytest.approx(scipy_mst.sum(), rel=1e-12)


@pytest.mark.slow
def test_wilson_is_uniform_on_k4():
    # K4 has 16 spanning trees; 1600 draws, each tree ~100 times
    edges = [(0, 1), (0, 2), (0, 3), (1, 2), (1, 3), (2, 3)]
    graph = Graph.from_edges(4, edges, np.arange(1.0, 7.0))
    counts = Counter(frozenset(_edge_set(spanning_tree_graph(graph, "uniform", seed=s)))
                     for s in range(1600))
    assert len(counts) == 16
    chi2 = sum((c - 100) ** 2 / 100 for c in counts.values())
    assert chi2 < 45  # 15 degrees of freedom: p < 1e-4 beyond this


def test_sliced_wasserstein_diagrams_matches_scipy_wasserstein_on_each_direction():
    from scipy.stats import wasserstein_distance

    rng = np.random.default_rng(3)
    diagrams = []
    for n in (4, 7, 1):
        birth = rng.random(n)
        diagrams.append(np.column_stack([birth, birth + rng.random(n)]))
    D = baselines.sliced_wasserstein_diagrams(diagrams, n_directions=8)
    angles = np.linspace(-np.pi / 2, np.pi / 2, 8, endpoint=False)

    def expected(a, b):
        total = 0.0
        for theta in angles:
            line = np.array([np.cos(theta), np.sin(theta)])
            # Each side: its own points and the diagonal points nearest the other's.
            diag_a = np.repeat(a.mean(axis=1, keepdims=True), 2, axis=1)
            diag_b = np.repeat(b.mean(axis=1, keepdims=True), 2, axis=1)
            u = np.vstack([a, diag_b]) @ line
            v = np.vstack([b, diag_a]) @ line
            # SciPy's W_1 is per unit mass; these are len(u) unit masses each.
            total += len(u) * wasserstein_distance(u, v)
        return total / len(angles)

    for i in range(3):
        assert D[i, i] == 0
        for j in range(3):
            if i != j:
                assert D[i, j] == pytest.approx(expected(diagrams[i], diagrams[j]), rel=1e-12)
                assert D[i, j] == D[j, i]
