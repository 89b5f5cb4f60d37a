"""Graph construction (from_points / from_edges), validation, shortest-path trees, roots."""

import math
import re
import warnings

import numpy as np
import pytest
import reference as ref
from _support.graphs import GraphSpec, random_graph
from _support.measures import random_measures, to_csr_input
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components
from scipy.sparse.csgraph import dijkstra as sp_dijkstra
from scipy.spatial.distance import cdist

from sobolev_index import (
    AssumptionError,
    AssumptionWarning,
    Graph,
    ShortestPathTree,
    SobolevIndexError,
    pairwise_sobolev,
)


# --------------------------------------------------------------------------- helpers
def _csgraph(n, edges, lengths):
    A = coo_matrix((np.asarray(lengths, float), (edges[:, 0], edges[:, 1])), shape=(n, n))
    return (A + A.T).tocsr()


def _edge_length_map(edges, lengths):
    return {tuple(sorted((int(a), int(b)))): float(w) for (a, b), w in zip(edges, lengths)}


def _check_canonical_edges(g):
    E = g.edges
    assert E.dtype == np.int64 and E.ndim == 2 and E.shape[1] == 2
    assert g.lengths.dtype == np.float64 and g.lengths.shape == (E.shape[0],)
    assert np.all(E[:, 0] < E[:, 1]), "edges must satisfy edges[:,0] < edges[:,1]"
    assert np.all(E >= 0) and np.all(E < g.n_nodes)
    assert len({tuple(e) for e in E.tolist()}) == len(E), "duplicate edges"
    assert np.all(np.isfinite(g.lengths)) and np.all(g.lengths > 0)


def _check_connected(g):
    ncomp, _ = connected_components(_csgraph(g.n_nodes, g.edges, g.lengths), directed=False)
    assert ncomp == 1


def _check_lengths_euclidean(g):
    C = g.coords
    expect = np.linalg.norm(C[g.edges[:, 0]] - C[g.edges[:, 1]], axis=1)
    np.testing.assert_allclose(g.lengths, expect, rtol=1e-12, atol=0)


def _blobs(seed, n=400, d=2, centers=6):
    rng = np.random.default_rng(seed)
    c = rng.uniform(-10, 10, size=(centers, d))
    lab = rng.integers(centers, size=n)
    return c[lab] + rng.normal(scale=0.7, size=(n, d))


def _datasets():
    rng = np.random.default_rng(7)
    return {
        "uniform2d": rng.random((300, 2)),
        "blobs3d": _blobs(1, n=500, d=3),
        "gauss10d": rng.normal(size=(250, 10)),
    }


# --------------------------------------------------------------------------- from_points
@pytest.mark.parametrize("name", list(_datasets()))
@pytest.mark.parametrize("M", [5, 17, 40])
def test_from_points_basic_and_assignment(name, M):
    X = _datasets()[name]
    g = Graph.from_points(X, n_nodes=M, edges="log", seed=0)
    assert 1 <= g.n_nodes <= M
    assert g.n_nodes == M  # all points distinct and more numerous than M
    assert g.coords.shape == (g.n_nodes, X.shape[1]) and g.coords.dtype == np.float64
    a = g.assignment
    assert a.shape == (len(X),) and a.dtype == np.int64
    assert a.min() >= 0 and a.max() < g.n_nodes
    # every point is assigned to (one of) its nearest node coordinate(s)
    D = cdist(X, g.coords)
    np.testing.assert_allclose(D[np.arange(len(X)), a], D.min(axis=1), rtol=1e-12, atol=1e-12)
    _check_canonical_edges(g)
    _check_connected(g)
    _check_lengths_euclidean(g)


@pytest.mark.parametrize("name", list(_datasets()))
@pytest.mark.parametrize("M", [2, 8, 25, 60])
def test_from_points_farthest_point_guarantee(name, M):
    """Gonzalez: covering radius r_M <= min distance between two distinct centres."""
    X = _datasets()[name]
    g = Graph.from_points(X, n_nodes=M, edges="log", seed=3)
    D = cdist(X, g.coords)
    cover = D.min(axis=1).max()
    C = cdist(g.coords, g.coords)
    np.fill_diagonal(C, np.inf)
    assert cover <= C.min() * (1 + 1e-12), (cover, C.min())


def test_from_points_duplicates_collapse():
    rng = np.random.default_rng(0)
    P = np.array([[0.0, 0.0], [3.0, 1.0], [-2.0, 5.0]])
    X = P[rng.permutation(np.repeat(np.arange(3), 50))]
    g = Graph.from_points(X, n_nodes=10, edges="log", seed=0)
    assert g.n_nodes == 3
    # the nodes are exactly the three distinct points, and every copy maps to its own point
    D = cdist(P, g.coords)
    assert np.allclose(D.min(axis=1), 0.0)
    np.testing.assert_allclose(g.coords[g.assignment], X, atol=1e-12)
    _check_connected(g)
    _check_canonical_edges(g)


def test_from_points_fewer_distinct_points_than_nodes():
    X = np.array([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0], [1.0, 0.0], [0.0, 0.0]])
    g = Graph.from_points(X, n_nodes=50, edges="sqrt", seed=1)
    assert g.n_nodes == 3
    np.testing.assert_allclose(g.coords[g.assignment], X, atol=1e-12)
    _check_connected(g)


@pytest.mark.parametrize("edges", ["log", "sqrt", "knn"])
def test_from_points_same_seed_same_graph(edges):
    X = _blobs(5, n=300, d=4)
    g1 = Graph.from_points(X, n_nodes=30, edges=edges, k=4, seed=11)
    g2 = Graph.from_points(X, n_nodes=30, edges=edges, k=4, seed=11)
    assert g1.n_nodes == g2.n_nodes
    assert np.array_equal(g1.edges, g2.edges)
    assert np.array_equal(g1.lengths, g2.lengths)
    assert np.array_equal(g1.coords, g2.coords)
    assert np.array_equal(g1.assignment, g2.assignment)


@pytest.mark.parametrize("M", [10, 30, 60])
@pytest.mark.parametrize("seed", [0, 1])
def test_from_points_log_edges(M, seed):
    X = _blobs(seed + 10, n=400, d=3)
    g = Graph.from_points(X, n_nodes=M, edges="log", seed=seed)
    m = g.n_nodes
    assert 2 <= m <= M
    max_pairs = m * (m - 1) // 2
    target = min(math.ceil(m * math.log(m)), max_pairs)
    E = len(g.edges)
    # at most ~ M ln M sampled pairs plus (n_components - 1) <= M - 1 connecting edges
    assert E <= min(target + m - 1, max_pairs)
    assert E >= m - 1
    # sampled "about M ln M" distinct pairs, not just a spanning tree
    assert E >= 0.5 * target
    _check_canonical_edges(g)
    _check_connected(g)
    _check_lengths_euclidean(g)


@pytest.mark.parametrize("M", [10, 30, 60])
def test_from_points_sqrt_edges(M):
    X = _blobs(4, n=400, d=2)
    g = Graph.from_points(X, n_nodes=M, edges="sqrt", seed=2)
    m = g.n_nodes
    max_pairs = m * (m - 1) // 2
    target = min(math.ceil(m**1.5), max_pairs)
    E = len(g.edges)
    assert m - 1 <= E <= min(target + m - 1, max_pairs)
    assert E >= 0.5 * target
    _check_canonical_edges(g)
    _check_connected(g)
    _check_lengths_euclidean(g)


@pytest.mark.parametrize("k", [1, 3, 6])
def test_from_points_knn_edges(k):
    X = _blobs(8, n=500, d=3, centers=4)
    g = Graph.from_points(X, n_nodes=40, edges="knn", k=k, seed=0)
    m = g.n_nodes
    _check_canonical_edges(g)
    _check_connected(g)
    _check_lengths_euclidean(g)
    have = {tuple(e) for e in g.edges.tolist()}
    C = cdist(g.coords, g.coords)
    np.fill_diagonal(C, np.inf)
    for i in range(m):
        for j in np.argsort(C[i], kind="stable")[: min(k, m - 1)]:
            assert tuple(sorted((i, int(j)))) in have, f"node {i} not linked to its neighbour {j}"
    # no more than the kNN edges plus a spanning set of connectors
    assert len(g.edges) <= m * min(k, m - 1) + m - 1


@pytest.mark.parametrize("extra", [0, 5])
def test_room_for_every_point_makes_each_distinct_point_a_node(extra):
    rng = np.random.default_rng(6)
    X = rng.normal(size=(30, 3))
    X = np.vstack([X, X[[4, 4, 17]]])  # three repeats of two points
    g = Graph.from_points(X, n_nodes=len(X) + extra, edges="knn", k=3, seed=0)
    assert g.n_nodes == 30
    np.testing.assert_array_equal(g.coords[g.assignment], X)
    assert len({tuple(c) for c in g.coords.tolist()}) == 30
    _check_connected(g)


@pytest.mark.parametrize("edges", ["knn", "log"])
def test_points_distinct_but_zero_apart_in_float64_share_a_node(edges):
    # 0 and 1e-200 are different numbers, but their squared difference
    # underflows: as far as any length goes they are one point.
    X = np.array([[0.0], [1e-200], [1.0], [2.0], [3.5]])
    g = Graph.from_points(X, n_nodes=10, edges=edges, k=2, seed=0)
    assert g.n_nodes == 4
    assert g.assignment[0] == g.assignment[1]
    assert (g.lengths > 0).all()
    _check_connected(g)


def test_knn_components_are_joined_by_their_shortest_gaps():
    # Three far-apart clusters of 6 points: with k = 2 the nearest-node
    # edges stay inside each cluster, so the graph needs two joins. The
    # joins of a minimum spanning forest over the clusters are the shortest
    # gaps, here computed by brute force over all cross-cluster pairs.
    rng = np.random.default_rng(3)
    centres = np.array([[0.0, 0.0], [100.0, 0.0], [100.0, 170.0]])
    X = np.vstack([c + rng.normal(size=(6, 2)) for c in centres])
    g = Graph.from_points(X, n_nodes=18, edges="knn", k=2, seed=0)
    _check_connected(g)
    cluster = np.argmin(cdist(g.coords, centres), axis=1)
    crossing = [tuple(e) for e in g.edges.tolist() if cluster[e[0]] != cluster[e[1]]]
    D = cdist(g.coords, g.coords)

    def shortest(a, b):
        rows, cols = np.flatnonzero(cluster == a), np.flatnonzero(cluster == b)
        i, j = np.unravel_index(np.argmin(D[np.ix_(rows, cols)]), (len(rows), len(cols)))
        return tuple(sorted((int(rows[i]), int(cols[j]))))

    # Clusters 0-1 are 100 apart, 1-2 are 170, 0-2 about 197: the spanning
    # forest joins 0-1 and 1-2, each by its closest pair.
    assert sorted(crossing) == sorted([shortest(0, 1), shortest(1, 2)])


def test_from_points_invalid_input():
    X = np.random.default_rng(0).random((20, 2))
    with pytest.raises(ValueError):
        Graph.from_points(X, n_nodes=0)
    with pytest.raises(ValueError):
        Graph.from_points(X, n_nodes=5, edges="bogus")
    Xn = X.copy()
    Xn[3, 1] = np.nan
    with pytest.raises(ValueError):
        Graph.from_points(Xn, n_nodes=5)


# --------------------------------------------------------------------------- from_edges
_FIXED_EDGES = np.array(
    [(0, 1), (1, 2), (2, 4), (4, 3), (3, 5), (5, 6), (6, 8), (2, 9), (8, 7), (0, 4),
     (1, 5), (6, 9), (3, 8), (0, 6), (4, 9)],
    dtype=np.int64,
)


def _valid_spec():
    # 10 nodes, 15 edges; the corrupted edges (index 5 and 7) never mention node 5 or 7
    # after corruption, and the graph stays connected without them.
    lengths = 1.0 + np.arange(15) / 20.0
    return GraphSpec(10, _FIXED_EDGES.copy(), lengths)


def test_fixed_spec_is_valid():
    spec = _valid_spec()
    g = spec.lib()
    assert g.n_nodes == 10 and len(g.edges) == 15


def test_from_edges_roundtrip_canonical():
    spec = random_graph(5, 20, extra=25, kind="euclidean")
    g = spec.lib()
    assert g.n_nodes == 20
    _check_canonical_edges(g)
    assert g.assignment is None
    assert len(g.edges) == len(spec.edges)
    assert _edge_length_map(g.edges, g.lengths) == _edge_length_map(spec.edges, spec.lengths)
    np.testing.assert_array_equal(g.coords, spec.coords)
    g2 = Graph.from_edges(spec.n, spec.edges, spec.lengths)
    assert g2.coords is None


def _raises_naming(exc_match, fn):
    with pytest.raises(ValueError) as info:
        fn()
    msg = str(info.value)
    assert re.search(exc_match, msg, flags=re.IGNORECASE), msg
    return info.value


@pytest.mark.parametrize("bad", [0.0, -1.5, np.nan, np.inf, -np.inf])
def test_from_edges_bad_length_names_edge(bad):
    spec = _valid_spec()
    lengths = spec.lengths.copy()
    lengths[7] = bad
    _raises_naming(r"\b7\b", lambda: Graph.from_edges(spec.n, spec.edges, lengths))


def test_from_edges_self_loop_names_edge():
    spec = _valid_spec()
    e = spec.edges.copy()
    e[5] = (3, 3)
    err = _raises_naming(r"\b5\b", lambda: Graph.from_edges(spec.n, e, spec.lengths))
    assert isinstance(err, ValueError)


@pytest.mark.parametrize("bad_node", [10, 11, -1])
def test_from_edges_out_of_range_names_edge(bad_node):
    spec = _valid_spec()
    e = spec.edges.copy()
    e[7] = (2, bad_node)
    _raises_naming(r"\b7\b", lambda: Graph.from_edges(spec.n, e, spec.lengths))


def test_from_edges_disconnected_names_component():
    # two triangles, no edge between them
    edges = np.array([[0, 1], [1, 2], [0, 2], [3, 4], [4, 5], [3, 5]])
    err = _raises_naming(
        r"component|connected", lambda: Graph.from_edges(6, edges, np.ones(6) + np.arange(6))
    )
    assert isinstance(err, ValueError)
    # an isolated node is a component too
    edges = np.array([[0, 1], [1, 2]])
    _raises_naming(r"component|connected", lambda: Graph.from_edges(4, edges, [1.0, 2.0]))


def test_from_edges_shape_errors():
    spec = _valid_spec()
    with pytest.raises(ValueError):
        Graph.from_edges(spec.n, spec.edges, spec.lengths[:-1])
    with pytest.raises(ValueError):
        Graph.from_edges(spec.n, np.c_[spec.edges, spec.edges[:, :1]], spec.lengths)
    with pytest.raises(ValueError):
        Graph.from_edges(spec.n, spec.edges, spec.lengths, coords=np.zeros((spec.n - 1, 2)))


# --------------------------------------------------------------------------- trees
def _check_tree_against_scipy(g, t, root, spec):
    n = spec.n
    assert isinstance(t, ShortestPathTree)
    assert t.root == root and t.n_nodes == n
    assert t.parent.dtype == np.int64 and t.parent.shape == (n,)
    assert t.length.dtype == np.float64 and t.length.shape == (n,)
    assert t.depth.dtype == np.int64 and t.depth.shape == (n,)
    assert t.distance.dtype == np.float64 and t.distance.shape == (n,)
    assert t.parent[root] == -1 and t.length[root] == 0 and t.depth[root] == 0
    assert t.distance[root] == 0
    sp = sp_dijkstra(_csgraph(n, spec.edges, spec.lengths), directed=False, indices=root)
    np.testing.assert_allclose(t.distance, sp, rtol=1e-12, atol=0)
    lmap = _edge_length_map(spec.edges, spec.lengths)
    for v in range(n):
        if v == root:
            continue
        u = int(t.parent[v])
        assert 0 <= u < n
        assert t.length[v] == lmap[tuple(sorted((u, v)))]  # a real edge, its real length
        assert t.depth[v] == t.depth[u] + 1
        assert math.isclose(t.distance[v], t.distance[u] + t.length[v], rel_tol=1e-12)
    R = spec.ref_tree(root)
    np.testing.assert_array_equal(t.parent, R.parent)
    np.testing.assert_array_equal(t.depth, R.depth)
    np.testing.assert_array_equal(t.length, R.w)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("kind", ["euclidean", "random"])
def test_tree_consistent_with_scipy_and_reference(seed, kind):
    spec = random_graph(seed, 8 + 9 * seed, extra=2 * seed + 3, kind=kind)
    g = spec.lib()
    for root in {0, spec.n // 2, spec.n - 1}:
        assert not ref.tie_nodes(spec.n, spec.edges, spec.lengths, root)
        t = g.tree(root)
        assert t.perturbed is False
        _check_tree_against_scipy(g, t, root, spec)


def test_trees_and_invalid_root():
    spec = random_graph(2, 20, extra=10, kind="euclidean")
    g = spec.lib()
    ts = g.trees([3, 0, 17])
    assert [t.root for t in ts] == [3, 0, 17]
    for t in ts:
        _check_tree_against_scipy(g, t, t.root, spec)
    for bad in (-1, 20, 100):
        with pytest.raises(ValueError):
            g.tree(bad)
    with pytest.raises(ValueError):
        g.tree(0, on_violation="ignore-please")


def _grid(rows, cols):
    edges = []
    for i in range(rows):
        for j in range(cols):
            v = cols * i + j
            if j + 1 < cols:
                edges.append((v, v + 1))
            if i + 1 < rows:
                edges.append((v, v + cols))
    return np.array(edges, dtype=np.int64)


@pytest.mark.parametrize("root", [0, 5, 15])
def test_grid_violates_assumption(root):
    edges = _grid(4, 4)
    lengths = np.ones(len(edges))
    g = Graph.from_edges(16, edges, lengths)
    ties = ref.tie_nodes(16, edges, lengths, root)
    assert ties  # sanity of the reference
    with pytest.raises(AssumptionError) as info:
        g.tree(root)
    err = info.value
    assert isinstance(err, SobolevIndexError) and isinstance(err, ValueError)
    named = {int(x) for x in re.findall(r"(?<![\w.])\d+(?![\w.])", str(err))}
    assert named & ties, f"message names no node with two shortest paths: {err}"
    with pytest.raises(AssumptionError):
        g.tree(root, on_violation="raise")


@pytest.mark.parametrize("root", [0, 5, 15])
def test_grid_perturb(root):
    edges = _grid(4, 4)
    lengths = np.ones(len(edges))
    g = Graph.from_edges(16, edges, lengths)
    with pytest.warns(AssumptionWarning):
        t = g.tree(root, on_violation="perturb")
    assert t.perturbed is True
    assert t.root == root and t.parent[root] == -1
    # original graph untouched
    np.testing.assert_array_equal(g.lengths, np.ones(len(edges)))
    have = {tuple(e) for e in edges.tolist()}
    r0, c0 = divmod(root, 4)
    sp = sp_dijkstra(_csgraph(16, edges, lengths), directed=False, indices=root)
    for v in range(16):
        if v == root:
            continue
        u = int(t.parent[v])
        assert tuple(sorted((u, v))) in have
        assert abs(t.length[v] - 1.0) / 1.0 < 1e-6
        assert t.depth[v] == t.depth[u] + 1
        r, c = divmod(v, 4)
        assert t.depth[v] == abs(r - r0) + abs(c - c0)  # still a shortest path in hops
        assert math.isclose(t.distance[v], t.distance[u] + t.length[v], rel_tol=1e-6)
    np.testing.assert_allclose(t.distance, sp, rtol=1e-5)

    # distances computed on the perturbed tree equal the reference on that tree
    tree_edges = np.array([(v, t.parent[v]) for v in range(16) if v != root])
    tree_len = np.array([t.length[v] for v in range(16) if v != root])
    R = ref.RefTree(16, tree_edges, tree_len, root)
    np.testing.assert_array_equal(R.parent, t.parent)
    rng = np.random.default_rng(root)
    ms = random_measures(rng, 16, 6)
    F = t.features(*to_csr_input(ms))
    D = pairwise_sobolev(F, trees=t, p=1)
    np.testing.assert_allclose(D, ref.ref_pairwise(ms, None, R, 1), rtol=1e-10, atol=1e-13)


def test_grid_perturb_no_warning_when_unique():
    spec = random_graph(3, 15, extra=10, kind="random")
    g = spec.lib()
    with warnings.catch_warnings():
        warnings.simplefilter("error", AssumptionWarning)
        t = g.tree(4, on_violation="perturb")
    assert t.perturbed is False
    _check_tree_against_scipy(g, t, 4, spec)


# --------------------------------------------------------------------------- roots
def _check_roots(g, spec, roots, eta, n):
    roots = np.asarray(roots)
    assert roots.dtype == np.int64 and roots.shape == (n,)
    assert len(set(roots.tolist())) == n
    assert roots.min() >= 0 and roots.max() < g.n_nodes
    eta = np.asarray(eta)
    assert eta.dtype == np.float64 and eta.shape == (n,)
    assert np.all(eta > 0)
    assert math.isclose(eta.sum(), 1.0, rel_tol=0, abs_tol=1e-12)
    for r in roots.tolist():
        assert not ref.tie_nodes(spec.n, spec.edges, spec.lengths, r)


@pytest.mark.parametrize("strategy", ["random", "center"])
@pytest.mark.parametrize("n", [1, 3, 8])
def test_roots_strategies(strategy, n):
    spec = random_graph(17, 30, extra=30, kind="euclidean")
    g = spec.lib()
    roots, eta = g.roots(n, strategy=strategy, seed=0)
    _check_roots(g, spec, roots, eta, n)
    np.testing.assert_allclose(eta, np.full(n, 1.0 / n), rtol=1e-12)
    roots2, eta2 = g.roots(n, strategy=strategy, seed=0)
    assert np.array_equal(roots, roots2) and np.array_equal(eta, eta2)
    for t, r in zip(g.trees(roots), roots):
        assert t.root == r


def test_roots_explicit_list():
    spec = random_graph(17, 30, extra=30, kind="euclidean")
    g = spec.lib()
    roots, eta = g.roots(3, strategy=[4, 11, 29])
    assert roots.tolist() == [4, 11, 29]
    _check_roots(g, spec, roots, eta, 3)
    with pytest.raises(ValueError):
        g.roots(2, strategy=[4, 30])
    with pytest.raises(ValueError):
        g.roots(2, strategy="no-such-strategy")


def test_root_weights_normalised_once_stay_as_they_are():
    from sobolev_index.graph import normalise_eta

    rng = np.random.default_rng(5)
    changed_by_a_second_division = 0
    for _ in range(500):
        n = int(rng.integers(1, 12))
        weights = rng.random(n) * 10 ** rng.uniform(-3, 3) + 1e-9
        once = normalise_eta(weights, n)
        assert abs(once.sum() - 1.0) <= n * 2.0 ** -52
        np.testing.assert_allclose(once, weights / weights.sum(), rtol=1e-15)
        # A stored eta given again (a rebuild) must come back bit for bit,
        # although dividing it by its sum once more would often change it.
        assert np.array_equal(normalise_eta(once, n), once)
        changed_by_a_second_division += not np.array_equal(once / once.sum(), once)
    assert changed_by_a_second_division > 0


def test_nearest_nodes_refuses_points_that_are_not_finite():
    # argmin over NaN distances would quietly give node 0
    graph = Graph.from_edges(3, [(0, 1), (1, 2)], [1.0, 2.0], coords=[[0.0], [1.0], [3.0]])
    assert graph.nearest_nodes([[0.4], [2.5]]).tolist() == [0, 2]
    for bad in (np.nan, np.inf, -np.inf):
        with pytest.raises(ValueError, match=r"point 1 is \[.*\]; expected finite coordinates"):
            graph.nearest_nodes([[0.4], [bad]])
