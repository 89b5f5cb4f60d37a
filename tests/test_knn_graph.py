"""The exact k-NN graph of an index (``SobolevIndex.knn_graph`` and the
``knn-graph`` command), checked against distances from ``reference.py``:
every row holds the k smallest distances to other documents (ties may pick
either document), at their reference values."""
import json
import os
import warnings

import numpy as np
import pytest
import scipy.io
import scipy.sparse as sp
from _support.cli import run
from reference import ref_pairwise, ref_tree

from sobolev_index import Graph, SobolevIndex

N_NODES = 30


def _measures(n, seed):
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        nodes = rng.choice(N_NODES, size=int(rng.integers(1, 6)), replace=False)
        out.append((np.sort(nodes), rng.random(len(nodes)) + 0.1))
    return out


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """An index of 70 documents (two of them copies of others, one deleted)
    over 2 roots, with the reference distance matrix of its live documents."""
    rng = np.random.default_rng(11)
    graph = Graph.from_points(rng.normal(size=(N_NODES, 2)), n_nodes=N_NODES, edges="log", seed=1)
    measures = _measures(68, 2)
    measures += [measures[5], measures[40]]  # duplicates: distance 0
    path = tmp_path_factory.mktemp("knn") / "ix"
    with SobolevIndex.create(path, graph, roots=2, seed=3, on_violation="perturb") as index:
        index.add(measures[:40], keys=[f"d{i}" for i in range(40)])
        index.add(measures[40:], keys=[f"d{i}" for i in range(40, 70)])
        index.delete(["d7"])
        roots = index.roots.tolist()
    live = [i for i in range(70) if i != 7]
    trees = [ref_tree(graph.n_nodes, graph.edges, graph.lengths, r) for r in roots]
    reference = {p: ref_pairwise([measures[i] for i in live], None, trees, p) for p in (1, 2)}
    return path, [f"d{i}" for i in live], reference


def _check_rows(graph, reference, k, include_self):
    n = reference.shape[0]
    assert graph.shape == (n, n) and sp.isspmatrix_csr(graph)
    for i in range(n):
        cols = graph.indices[graph.indptr[i]:graph.indptr[i + 1]]
        vals = graph.data[graph.indptr[i]:graph.indptr[i + 1]]
        assert len(cols) == min(k, n if include_self else n - 1)
        assert len(set(cols.tolist())) == len(cols)
        assert (i in cols.tolist()) == include_self
        assert (np.diff(vals) >= 0).all()  # increasing distance within a row
        np.testing.assert_allclose(vals, reference[i, cols], rtol=1e-9, atol=1e-12)
        others = np.delete(reference[i], i)
        best = np.sort(np.concatenate([[0.0], others]) if include_self else others)[:len(cols)]
        # The same k smallest distances; which of equally far documents is taken may differ.
        np.testing.assert_allclose(np.sort(vals), best, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("p", [1, 2])
@pytest.mark.parametrize("k", [1, 5, 200])
def test_rows_hold_the_k_nearest_other_documents(built, p, k):
    path, keys, reference = built
    with SobolevIndex.open(path) as index:
        assert index.keys_in_order() == keys
        with warnings.catch_warnings():
            # k = 200 is capped at the 68 other documents (with a warning).
            warnings.simplefilter("ignore", UserWarning)
            graph = index.knn_graph(k, p=p, batch=16)
    _check_rows(graph, reference[p], k, include_self=False)


def test_include_self_counts_the_document_as_one_of_its_k(built):
    path, keys, reference = built
    with SobolevIndex.open(path) as index:
        graph = index.knn_graph(4, include_self=True)
    _check_rows(graph, reference[1], 4, include_self=True)
    assert graph.diagonal().tolist() == [0.0] * len(keys)


def test_duplicates_are_each_others_neighbours_as_explicit_zeros(built):
    path, keys, _ = built
    with SobolevIndex.open(path) as index:
        graph = index.knn_graph(3)
    for a, b in (("d5", "d68"), ("d40", "d69")):
        i, j = keys.index(a), keys.index(b)
        row = dict(zip(graph.indices[graph.indptr[i]:graph.indptr[i + 1]].tolist(),
                       graph.data[graph.indptr[i]:graph.indptr[i + 1]].tolist()))
        assert row.get(j) == 0.0
    assert graph.nnz == 3 * len(keys)  # the zeros are stored, not dropped


def test_the_graph_is_the_same_whatever_the_batch_and_thread_count(built):
    path, _, _ = built
    with SobolevIndex.open(path) as index:
        a = index.knn_graph(6, batch=1, n_threads=1)
        b = index.knn_graph(6, batch=1000, n_threads=2)
    assert (a != b).nnz == 0 and (a.indices == b.indices).all()


def test_bad_arguments_are_refused(built):
    path, _, _ = built
    with SobolevIndex.open(path) as index:
        for bad in (0, -1, 2.0, True):
            with pytest.raises(ValueError, match="k is"):
                index.knn_graph(bad)
        with pytest.raises(ValueError, match="batch is 0"):
            index.knn_graph(3, batch=0)
        with pytest.raises(ValueError):
            index.knn_graph(3, p=0.5)


def test_progress_reaches_every_document(built):
    path, keys, _ = built
    seen = []
    with SobolevIndex.open(path) as index:
        index.knn_graph(2, batch=25, progress=lambda done, total: seen.append((done, total)))
    assert seen[-1] == (len(keys), len(keys))
    assert [d for d, _ in seen] == sorted(d for d, _ in seen)


def test_the_command_writes_npz_or_mtx_and_the_keys(built, tmp_path):
    path, keys, reference = built
    with SobolevIndex.open(path) as index:
        expected = index.knn_graph(5, p=2)
    out = json.loads(run("knn-graph", path, tmp_path / "g.npz", "-k", 5, "-p", 2, "--json").stdout)
    assert out["documents"] == len(keys) and out["entries"] == 5 * len(keys)
    assert json.loads((tmp_path / "g.npz.keys.json").read_text(encoding="utf-8")) == keys
    loaded = sp.load_npz(tmp_path / "g.npz").tocsr()
    assert (loaded != expected).nnz == 0 and loaded.nnz == expected.nnz
    run("knn-graph", path, tmp_path / "g.mtx", "-k", 5, "-p", 2, "--silent")
    market = sp.csr_matrix(scipy.io.mmread(tmp_path / "g.mtx"))
    np.testing.assert_allclose(market.toarray(), expected.toarray(), rtol=1e-15)
    assert market.nnz == expected.nnz  # explicit zeros kept

    refused = run("knn-graph", path, tmp_path / "g.txt", ok=False)
    assert refused.exit_code != 0 and "expected a .npz or .mtx file name" in refused.output
    assert not (tmp_path / "g.txt").exists()
    nowhere = run("knn-graph", path, tmp_path / "no" / "g.npz", ok=False)
    assert nowhere.exit_code != 0 and "does not exist" in nowhere.output
    assert sorted(os.listdir(tmp_path)) == ["g.mtx", "g.mtx.keys.json", "g.npz", "g.npz.keys.json"]


def test_scikit_learn_reads_the_graph_as_precomputed_neighbours(built):
    neighbors = pytest.importorskip("sklearn.neighbors", reason="scikit-learn is not installed")
    path, keys, reference = built
    with SobolevIndex.open(path) as index:
        graph = index.knn_graph(6)
    # What HDBSCAN and UMAP do with metric="precomputed": read the stored
    # entries (explicit zeros included) as each row's candidate neighbours.
    nn = neighbors.NearestNeighbors(n_neighbors=6, metric="precomputed").fit(graph)
    distances, _ = nn.kneighbors(graph.copy())
    for i in range(len(keys)):
        np.testing.assert_allclose(distances[i], np.sort(np.delete(reference[1][i], i))[:6],
                                   rtol=1e-9, atol=1e-12)


def test_the_readme_hdbscan_example_runs_and_keeps_duplicates_together(built):
    cluster = pytest.importorskip("sklearn.cluster", reason="scikit-learn is not installed")
    if not hasattr(cluster, "HDBSCAN"):
        pytest.skip("this scikit-learn has no HDBSCAN (it came in 1.3)")
    path, keys, _ = built
    with SobolevIndex.open(path) as index:
        # As in the README:
        graph = index.knn_graph(15)
        labels = cluster.HDBSCAN(metric="precomputed", min_cluster_size=5, copy=True).fit_predict(
            graph.maximum(graph.T))
        order = index.keys_in_order()
    assert len(labels) == len(order) == len(keys)
    # Two documents at distance 0 are one point to any clustering.
    for a, b in (("d5", "d68"), ("d40", "d69")):
        assert labels[order.index(a)] == labels[order.index(b)]


def test_the_readme_umap_example_runs_and_places_duplicates_together(built):
    umap = pytest.importorskip("umap", reason="umap-learn is not installed (pip install umap-learn)")
    path, keys, _ = built
    with SobolevIndex.open(path) as index:
        # As in the README:
        k = 15
        graph = index.knn_graph(k, include_self=True)      # UMAP counts each point as its own neighbour
        n = graph.shape[0]
        knn = (graph.indices.reshape(n, k), graph.data.reshape(n, k), None)
        embedding = umap.UMAP(n_neighbors=k, metric="precomputed", precomputed_knn=knn,
                              random_state=0).fit_transform(graph.maximum(graph.T))
        order = index.keys_in_order()
    assert embedding.shape == (len(keys), 2) and np.isfinite(embedding).all()
    spread = np.median(np.linalg.norm(embedding[:, None] - embedding[None], axis=2))
    # Two documents at distance 0 share their neighbours: they land together.
    for a, b in (("d5", "d68"), ("d40", "d69")):
        gap = np.linalg.norm(embedding[order.index(a)] - embedding[order.index(b)])
        assert gap < 0.2 * spread


def test_a_failed_write_leaves_neither_file(built, tmp_path, monkeypatch):
    from sobolev_index.ingest import pipelines

    path, keys, _ = built
    with SobolevIndex.open(path) as index:
        graph = index.knn_graph(3)
    real_replace = os.replace

    def fail_on_keys(src, dst):
        if str(dst).endswith(".keys.json"):
            raise OSError(28, "No space left on device")
        real_replace(src, dst)

    monkeypatch.setattr(pipelines.os, "replace", fail_on_keys)
    with pytest.raises(OSError):
        pipelines.save_knn_graph(str(tmp_path / "g.npz"), graph, keys)
    assert os.listdir(tmp_path) == []


def test_k_beyond_the_other_documents_is_capped_with_a_note(built, tmp_path):
    path, keys, reference = built
    n = len(keys)
    with SobolevIndex.open(path) as index:
        with pytest.warns(UserWarning, match=f"k is {n + 5}, more than the {n - 1} other"):
            graph = index.knn_graph(n + 5)
        with pytest.warns(UserWarning, match=f"k is {n + 1}, more than the {n} documents"):
            index.knn_graph(n + 1, include_self=True)
    _check_rows(graph, reference[1], n + 5, include_self=False)
    result = run("knn-graph", str(path), str(tmp_path / "g.npz"), "-k", str(n + 5), "--silent")
    assert result.exit_code == 0
    assert f"note: k is {n + 5}, more than the {n - 1} other documents there are" in result.stderr
