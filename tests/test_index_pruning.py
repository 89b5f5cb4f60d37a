"""The cluster-pruned scan must return exactly what a brute-force scan returns.

Small thresholds force every segment into clusters with bounding boxes, so the
pruned path runs on test-sized data; the expected results come from
``pairwise_sobolev`` on freshly computed features, which shares no code with
the pruning.
"""
import numpy as np
import pytest

import sobolev_index.index as index_module
from sobolev_index import Graph, SobolevIndex, pairwise_sobolev


@pytest.fixture(params=[1.0, 0.0], ids=["always-prune", "always-full-scan"])
def clustered_index(tmp_path, monkeypatch, request):
    # A fraction of 1.0 makes every query take the pruned path; 0.0 makes the
    # probe hand every segment back to the blocked full scan.
    monkeypatch.setattr(index_module, "PRUNE_MAX_FRACTION", request.param)
    monkeypatch.setattr(index_module, "PRUNE_MIN_ROWS", 64)
    monkeypatch.setattr(index_module, "ROWS_PER_CLUSTER", 16)
    rng = np.random.default_rng(7)
    anchors = rng.normal(size=(6, 5)) * 4
    points = np.concatenate([a + rng.normal(size=(80, 5)) for a in anchors])
    graph = Graph.from_points(points, n_nodes=150, edges="log", seed=3)
    topic_nodes = [np.unique(graph.assignment[i * 80:(i + 1) * 80]) for i in range(6)]
    measures = []
    for i in range(700):
        nodes = topic_nodes[i % 6]
        pick = rng.choice(nodes, size=rng.integers(2, 12))
        measures.append((pick, rng.random(len(pick)) + 0.1))
    index = SobolevIndex.create(tmp_path / "idx", graph, roots=3, seed=1)
    keys = index.add(measures[:300], labels=[str(i % 6) for i in range(300)])
    keys += index.add(measures[300:], labels=[str(i % 6) for i in range(300, 700)])
    assert all(s.data.cluster_offsets is not None for s in index._segments)
    yield index, measures, keys
    index.close()


def brute_force(index, measures, alive, queries, k, p, positions):
    trees = [index.trees[r] for r in positions]
    eta = index.eta[positions]
    F = [t.features_of(measures) for t in trees]
    Q = [t.features_of(queries) for t in trees]
    D = pairwise_sobolev(Q, F, trees=trees, p=p, eta=eta)
    D[:, ~alive] = np.inf
    return D


@pytest.mark.parametrize("p", [1, 2, 1.5, np.inf])
@pytest.mark.parametrize("positions", [[0], [0, 1, 2]])
def test_pruned_search_equals_brute_force(clustered_index, p, positions):
    index, measures, keys = clustered_index
    deleted = keys[::7]
    index.delete(deleted)
    alive = np.ones(len(keys), dtype=bool)
    alive[::7] = False
    queries = measures[1:40:3]
    k = 9
    result = index.search(queries, k=k, p=p, roots=positions)
    D = brute_force(index, measures, alive, queries, k, p, positions)
    for i in range(len(queries)):
        expected = np.sort(D[i])[:k]
        np.testing.assert_allclose(result.distances[i], expected, rtol=1e-10, atol=1e-14)
        for key, dist in zip(result.keys[i], result.distances[i]):
            j = keys.index(key)
            assert alive[j]
            assert D[i, j] == pytest.approx(dist, rel=1e-10, abs=1e-14)


def test_pruned_search_with_label_filter_and_threads(clustered_index):
    index, measures, keys = clustered_index
    queries = measures[5:25]
    labels = np.array([str(i % 6) for i in range(len(keys))])
    one = index.search(queries, k=5, p=1, where={"label": "2"}, n_threads=1)
    two = index.search(queries, k=5, p=1, where={"label": "2"}, n_threads=2)
    assert one.keys == two.keys
    assert np.array_equal(one.distances, two.distances)
    D = brute_force(index, measures, labels == "2", queries, 5, 1, [0, 1, 2])
    for i in range(len(queries)):
        np.testing.assert_allclose(one.distances[i], np.sort(D[i])[:5], rtol=1e-10)
        assert all(labels[keys.index(key)] == "2" for key in one.keys[i])


def test_near_duplicates_are_found_exactly(tmp_path, monkeypatch):
    # Rows that differ from the query by 1e-9 relative: the k-th distance is
    # tiny, and the pruning must not skip their cluster on rounding.
    monkeypatch.setattr(index_module, "PRUNE_MIN_ROWS", 64)
    monkeypatch.setattr(index_module, "ROWS_PER_CLUSTER", 16)
    monkeypatch.setattr(index_module, "PRUNE_MAX_FRACTION", 1.0)
    rng = np.random.default_rng(11)
    graph = Graph.from_points(rng.normal(size=(400, 4)), n_nodes=80, seed=2)
    base_nodes = rng.choice(80, size=10, replace=False)
    base_masses = rng.random(10) + 0.5
    measures = [(base_nodes, base_masses * (1 + 1e-9 * rng.normal(size=10))) for _ in range(300)]
    measures += [(rng.choice(80, size=6), rng.random(6) + 0.1) for _ in range(300)]
    with SobolevIndex.create(tmp_path / "idx", graph, roots=2, seed=0) as index:
        keys = index.add(measures)
        for p in (1, 2, 3):
            for positions in ([0], [0, 1]):
                result = index.search([(base_nodes, base_masses)], k=5, p=p, roots=positions)
                trees = [index.trees[r] for r in positions]
                D = pairwise_sobolev([t.features_of([(base_nodes, base_masses)]) for t in trees],
                                     [t.features_of(measures) for t in trees],
                                     trees=trees, p=p, eta=index.eta[positions])
                np.testing.assert_allclose(result.distances[0], np.sort(D[0])[:5], rtol=1e-6)
                assert all(keys.index(k) < 300 for k in result.keys[0])


def test_identical_documents_leave_empty_clusters(tmp_path, monkeypatch):
    # Identical rows make several seeds the same point, so some clusters are empty.
    monkeypatch.setattr(index_module, "PRUNE_MIN_ROWS", 64)
    monkeypatch.setattr(index_module, "ROWS_PER_CLUSTER", 8)
    monkeypatch.setattr(index_module, "PRUNE_MAX_FRACTION", 1.0)
    rng = np.random.default_rng(5)
    graph = Graph.from_points(rng.normal(size=(200, 3)), n_nodes=40, seed=1)
    measures = [([1, 2, 3], [0.2, 0.3, 0.5])] * 200 + [([4, 5], None)] * 5
    with SobolevIndex.create(tmp_path / "idx", graph, seed=0) as index:
        index.add(measures)
        offsets = np.asarray(index._segments[0].data.cluster_offsets)
        assert np.any(np.diff(offsets) == 0)
        result = index.search([([4, 5], None)], k=7, p=1)
        assert result.distances[0][:5].tolist() == [0.0] * 5
        assert result.distances[0][5] > 0


def test_threads_give_identical_results_above_the_serial_threshold(clustered_index, monkeypatch):
    # Small scans run serially; lower the threshold so that two threads really run.
    import sobolev_index._features as features_module

    monkeypatch.setattr(features_module, "SERIAL_BELOW", 1)
    index, measures, keys = clustered_index
    one = index.search(measures[:30], k=6, p=2, n_threads=1)
    two = index.search(measures[:30], k=6, p=2, n_threads=2)
    assert one.keys == two.keys
    assert np.array_equal(one.distances, two.distances)
