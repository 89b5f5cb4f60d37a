"""Exactness of SobolevIndex.search.

* p = 1 and p = 2 with one root: the same neighbours as scikit-learn's brute-force
  ``NearestNeighbors`` (manhattan / euclidean) on w^(1/p)-scaled edge masses.  The
  edge masses and weights come from tests/reference.py (its Dijkstra tree), not from
  the library.
* p in {1.5, 3, inf} with one root and the sliced case (several roots, unequal eta)
  for p in {1, 2, 1.5, 3, inf}: tests/reference.py brute force.
* The same results, bit for bit, with 1 and with 2 threads (``n_threads=``,
  and in child processes with OMP_NUM_THREADS=1 / 2), with the serial
  threshold lowered so that the parallel loops really run (the
  ``parallel_everywhere`` fixture; skipped, with the reason, below 2 threads).

Keys must agree up to ties (only between equal distances), distances to 1e-10
relative.
"""

import json
import math

import numpy as np
import pytest
import reference as ref
import scipy.sparse as sp
from _support.expected import RefModel, assert_same_key_sets, check_topk, expected_dists
from _support.graphs import pick_roots, random_graph
from _support.measures import random_measures, to_csr_input
from _support.processes import SERIAL_THRESHOLD_ENV, child_env, child_script, run_python
from sklearn.neighbors import NearestNeighbors

from sobolev_index import SobolevIndex


def _child_search(path, queries, k, p, threads, tmp_path, roots=None):
    """Search in a child with OMP_NUM_THREADS=threads and the serial threshold
    at 1; returns keys and distances, after checking the child's thread count."""
    qfile = tmp_path / f"queries-{threads}.npz"
    indptr, nodes, masses = to_csr_input(queries)
    np.savez(qfile, indptr=indptr, nodes=nodes, masses=masses)
    args = [str(path), str(qfile), k, "inf" if math.isinf(p) else repr(float(p))]
    if roots is not None:
        args.append(json.dumps(roots))
    r = run_python(child_script("search_dump.py"), args, script=True,
                   env=child_env(OMP_NUM_THREADS=threads, **{SERIAL_THRESHOLD_ENV: 1}))
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["threads"] == threads, f"the child ran with {out['threads']} threads, not {threads}"
    return out["keys"], np.array(out["distances"], dtype=float)


def _same_results(a, b, what):
    """Two (keys, distances) results are identical, bit for bit."""
    assert [list(r) for r in a[0]] == [list(r) for r in b[0]], what
    assert np.array_equal(np.asarray(a[1]), np.asarray(b[1])), what


# --------------------------------------------------------------------------- reference features
def ref_alpha_matrix(rt, measures):
    """Dense edge masses from the reference tree's explicit root paths."""
    A = np.zeros((len(measures), rt.n_nodes))
    for i, (nodes, masses) in enumerate(measures):
        rho = ref.dense_measure(nodes, masses, rt.n_nodes)
        for u in np.flatnonzero(rho):
            A[i, rt.paths[u][:-1]] += rho[u]
    return A


def exact_lp(Zd, zq, p):
    diff = np.abs(Zd - zq)
    if p == 1:
        return diff.sum(axis=1)
    return np.sqrt((diff * diff).sum(axis=1))


# --------------------------------------------------------------------------- p = 1, 2 vs sklearn
@pytest.fixture(scope="module")
def big(tmp_path_factory):
    """200-node graph, ~3000 documents in 3 segments with tombstones, 40 queries."""
    spec = random_graph(101, 200, extra=200, kind="euclidean")
    root = pick_roots(spec, 1, seed=1)[0]
    rng = np.random.default_rng(102)
    docs = random_measures(rng, spec.n, 3000, k=None)
    for i in range(0, 3000, 7):  # some larger supports
        docs[i] = (rng.integers(spec.n, size=25), rng.uniform(0.05, 1, 25))
    path = tmp_path_factory.mktemp("big") / "idx"
    with SobolevIndex.create(str(path), spec.lib(), roots=[root]) as idx:
        keys = []
        for s in range(0, 3000, 1000):
            keys += idx.add(docs[s:s + 1000])
        gone = set(keys[::20]) | set(keys[1500:1520])
        idx.delete(sorted(gone))
    live = [i for i, k in enumerate(keys) if k not in gone]
    queries = random_measures(rng, spec.n, 30) + [docs[i] for i in live[5:500:50]]
    rt = spec.ref_tree(root)
    A = ref_alpha_matrix(rt, [docs[i] for i in live])
    AQ = ref_alpha_matrix(rt, queries)
    return dict(spec=spec, root=root, path=path, keys=np.array([keys[i] for i in live]),
                A=A, AQ=AQ, rt=rt, queries=queries)


@pytest.mark.parametrize("p,metric", [(1, "manhattan"), (2, "euclidean")])
@pytest.mark.parametrize("k", [1, 10])
def test_matches_sklearn_brute_force(big, p, metric, k):
    w = big["rt"].w ** (1.0 / p)
    Zd = big["A"] * w
    Zq = big["AQ"] * w
    Zd_sp, Zq_sp = sp.csr_matrix(Zd), sp.csr_matrix(Zq)
    Zd_sp.sort_indices()
    Zq_sp.sort_indices()
    nn = NearestNeighbors(n_neighbors=k, algorithm="brute", metric=metric).fit(Zd_sp)
    _, sk_idx = nn.kneighbors(Zq_sp)
    keys = big["keys"]
    with SobolevIndex.open(str(big["path"]), "r") as idx:
        res = idx.search(big["queries"], k=k, p=p)
    for qi in range(len(big["queries"])):
        exp = dict(zip(keys.tolist(), exact_lp(Zd, Zq[qi], p).tolist()))
        what = f"p={p} query {qi}"
        check_topk(res.keys[qi], res.distances[qi], exp, k, what=what)
        assert_same_key_sets(res.keys[qi], keys[np.sort(sk_idx[qi])].tolist(), exp,
                             what=what + " vs sklearn")


@pytest.mark.parametrize("p", [1, 2])
@pytest.mark.slow
def test_big_search_is_the_same_with_1_and_2_threads(big, p, tmp_path, parallel_everywhere):
    k = 10
    with SobolevIndex.open(str(big["path"]), "r") as idx:
        results = {f"in-process, {t} thread(s)": idx.search(big["queries"], k=k, p=p, n_threads=t)
                   for t in (1, 2)}
    results = {how: (r.keys, r.distances) for how, r in results.items()}
    # child processes with OMP_NUM_THREADS=1 and 2 (slow to start: once per p)
    for t in (1, 2):
        results[f"child, OMP_NUM_THREADS={t}"] = _child_search(big["path"], big["queries"], k,
                                                              p, t, tmp_path)
    (first_how, first), *others = results.items()
    w = big["rt"].w ** (1.0 / p)
    for qi in range(len(big["queries"])):
        exp = dict(zip(big["keys"].tolist(), exact_lp(big["A"] * w, big["AQ"][qi] * w, p).tolist()))
        check_topk(first[0][qi], first[1][qi], exp, k, what=f"{first_how} p={p} query {qi}")
    for how, result in others:
        _same_results(result, first, f"{how} vs {first_how}, p={p}")


# --------------------------------------------------------------------------- reference, sliced
@pytest.fixture(scope="module")
def small(tmp_path_factory):
    """40-node graph, 3 roots, eta = (0.5, 0.3, 0.2), ~150 docs over several segments."""
    spec = random_graph(202, 40, extra=40, kind="random")
    roots = pick_roots(spec, 3, seed=2)
    rng = np.random.default_rng(203)
    docs = random_measures(rng, spec.n, 160)
    eta = [0.5, 0.3, 0.2]
    path1 = tmp_path_factory.mktemp("small") / "one"
    path3 = tmp_path_factory.mktemp("small") / "three"
    current = {}
    for path, rts in ((path1, roots[:1]), (path3, roots)):
        with SobolevIndex.create(str(path), spec.lib(), roots=list(rts),
                                 eta=None if len(rts) == 1 else eta) as idx:
            keys = []
            for s in range(0, 150, 50):
                keys += idx.add(docs[s:s + 50], keys=[f"k{i}" for i in range(s, s + 50)])
            idx.delete([f"k{i}" for i in range(0, 150, 9)])
            # replace ten docs with new content
            idx.upsert(docs[150:160], keys=[f"k{i}" for i in range(100, 110)])
    for i in range(150):
        if i % 9:
            current[f"k{i}"] = docs[i]
    for j, i in enumerate(range(100, 110)):
        current[f"k{i}"] = docs[150 + j]
    queries = random_measures(rng, spec.n, 8) + [docs[3], docs[155], docs[104]]
    m1 = RefModel(spec, roots[:1])
    m3 = RefModel(spec, roots)
    return dict(spec=spec, roots=roots, eta=eta, path1=path1, path3=path3, current=current,
                queries=queries, m1=m1, m3=m3,
                a1={k: m1.alphas(m) for k, m in current.items()},
                a3={k: m3.alphas(m) for k, m in current.items()},
                q1=[m1.alphas(q) for q in queries], q3=[m3.alphas(q) for q in queries])


def _check_ref(res_keys, res_d, model, qalphas, alphas, p, eta, k, positions=None, what=""):
    res_d = np.asarray(res_d)
    # k beyond the live documents returns them all: min(k, N) columns.
    k = min(k, len(alphas))
    assert res_d.shape == (len(qalphas), k)
    for qi, qa in enumerate(qalphas):
        exp = expected_dists(model, qa, alphas, p, eta, positions)
        check_topk(res_keys[qi], res_d[qi], exp, k, what=f"{what} query {qi}")


@pytest.mark.parametrize("p", [1, 2, 1.5, 3, math.inf])
def test_single_root_matches_reference(small, p):
    with SobolevIndex.open(str(small["path1"]), "r") as idx:
        for k in (1, 7, 200):
            res = idx.search(small["queries"], k=k, p=p)
            _check_ref(res.keys, res.distances, small["m1"], small["q1"], small["a1"], p,
                       [1.0], k, what=f"one root p={p} k={k}")


@pytest.mark.parametrize("p", [1, 2, 1.5, 3, math.inf])
def test_sliced_matches_reference(small, p):
    eta = small["eta"]
    with SobolevIndex.open(str(small["path3"]), "r") as idx:
        np.testing.assert_allclose(idx.eta, eta, rtol=1e-15)
        for k in (1, 6):
            res = idx.search(small["queries"], k=k, p=p)
            _check_ref(res.keys, res.distances, small["m3"], small["q3"], small["a3"], p,
                       eta, k, what=f"sliced p={p} k={k}")
        for positions in ([1, 2], [2]):
            res = idx.search(small["queries"], k=6, p=p, roots=positions)
            _check_ref(res.keys, res.distances, small["m3"], small["q3"], small["a3"], p,
                       eta, 6, positions=positions, what=f"sliced p={p} roots={positions}")


@pytest.mark.parametrize("p", [1, 2, 1.5, 3, math.inf])
@pytest.mark.slow
def test_small_search_is_the_same_with_1_and_2_threads(small, p, parallel_everywhere):
    cases = [("path1", "m1", "q1", "a1", [1.0], k, None) for k in (1, 7, 200)]
    cases += [("path3", "m3", "q3", "a3", small["eta"], k, None) for k in (1, 6)]
    cases += [("path3", "m3", "q3", "a3", small["eta"], 6, positions) for positions in ([1, 2], [2])]
    for path, m, q, a, eta, k, positions in cases:
        kw = {} if positions is None else {"roots": positions}
        what = f"{path} p={p} k={k} roots={positions}"
        with SobolevIndex.open(str(small[path]), "r") as idx:
            one = idx.search(small["queries"], k=k, p=p, n_threads=1, **kw)
            two = idx.search(small["queries"], k=k, p=p, n_threads=2, **kw)
        _check_ref(two.keys, two.distances, small[m], small[q], small[a], p, eta, k,
                   positions=positions, what=what + " 2 threads")
        _same_results((one.keys, one.distances), (two.keys, two.distances), what)


def test_p_inf_orders_rows_closer_than_float32_resolves(tmp_path):
    """The p = inf search bounds rows by their float32 dense values. Rows
    whose distances to the query are about 1e-9 and differ by far less
    than float32 can tell apart must still come back in exact order."""
    spec = random_graph(31, 40, extra=40, kind="euclidean")
    root = pick_roots(spec, 1, seed=2)[0]
    rng = np.random.default_rng(32)
    nodes = rng.choice(spec.n, 12, replace=False)
    base = rng.uniform(0.2, 1.0, 12)

    def near():
        return (nodes, base * (1 + rng.uniform(-1e-8, 1e-8, 12)))

    docs = [near() for _ in range(300)] + random_measures(rng, spec.n, 200)
    queries = [near() for _ in range(12)]
    model = RefModel(spec, [root])
    with SobolevIndex.create(str(tmp_path / "idx"), spec.lib(), roots=[root]) as idx:
        keys = idx.add(docs)
        assert idx._segments[0].inverted_file(idx.trees, idx._edge_weight).dense.shape[1] > 0
        res = idx.search(queries, k=5, p=math.inf)
    alphas = {key: model.alphas(m) for key, m in zip(keys, docs)}
    for qi, q in enumerate(queries):
        exp = expected_dists(model, model.alphas(q), alphas, math.inf, [1.0])
        assert 1e-12 < sorted(exp.values())[4] < 1e-7
        # Distances this small carry the reference's own rounding (1e-16).
        check_topk(res.keys[qi], res.distances[qi], exp, 5, atol=1e-14, what=f"query {qi}")


@pytest.mark.parametrize("p", [20.0, 64.0])
def test_scans_past_the_feature_cache_give_the_same_results(small, p, monkeypatch):
    """A scan (finite p > 16) over segments whose features do not fit the
    cache rebuilds them in chunks of rows: same results, nothing kept."""
    from sobolev_index.index import query as module

    with SobolevIndex.open(str(small["path3"]), "r") as idx:
        cached = idx.search(small["queries"], k=6, p=p)
        assert sum(s.cached_feature_bytes() for s in idx._segments) > 0
    # Several chunks of rows and of queries.
    monkeypatch.setattr(module, "SCAN_CHUNK_ROWS", 7)
    monkeypatch.setattr(module, "QUERY_CHUNK", 4)
    assert len(small["queries"]) > 4
    monkeypatch.setattr(module, "SCAN_CACHE_BYTES", 0)
    with SobolevIndex.open(str(small["path3"]), "r") as idx:
        assert max(s.rows for s in idx._segments) > 7, "no segment is cut into chunks"
        streamed = idx.search(small["queries"], k=6, p=p)
        assert sum(s.cached_feature_bytes() for s in idx._segments) == 0
        # Room for one root's features of one segment: some kept, some rebuilt.
        one = idx._segments[0].feature_bytes(len(idx.roots))
        monkeypatch.setattr(module, "SCAN_CACHE_BYTES", int(1.5 * one))
        mixed = idx.search(small["queries"], k=6, p=p)
        kept = sum(s.cached_feature_bytes() for s in idx._segments)
        full = sum(s.feature_bytes(len(idx.roots)) * len(idx.roots) for s in idx._segments)
        assert 0 < kept < full / 2, (kept, full)
    for what, result in (("streamed", streamed), ("partly kept", mixed)):
        _check_ref(result.keys, result.distances, small["m3"], small["q3"], small["a3"], p,
                   small["eta"], 6, what=f"{what} scan p={p}")
        _same_results((cached.keys, cached.distances), (result.keys, result.distances),
                      f"cached and {what} scans, p={p}")


@pytest.mark.parametrize("p", [1.5, math.inf])
@pytest.mark.slow
def test_sliced_omp_threads_in_child_processes(small, p, tmp_path, parallel_everywhere):
    got = [_child_search(small["path3"], small["queries"], 6, p, t, tmp_path) for t in (1, 2)]
    for keys, D in got:
        _check_ref(keys, D, small["m3"], small["q3"], small["a3"], p, small["eta"], 6,
                   what=f"child sliced p={p}")
    _same_results(got[0], got[1], f"children with 1 and 2 threads, p={p}")


def test_where_restricts_candidates_exactly(small):
    allowed = sorted(small["current"])[::3]
    with SobolevIndex.open(str(small["path3"]), "r") as idx:
        for p in (1, 2, math.inf):
            res = idx.search(small["queries"], k=5, p=p, where={"keys": allowed})
            sub = {k: small["a3"][k] for k in allowed}
            _check_ref(res.keys, res.distances, small["m3"], small["q3"], sub, p, small["eta"], 5,
                       what=f"where keys p={p}")


def test_a_stored_key_comes_first_among_its_duplicates(tmp_path):
    from sobolev_index import Graph, SobolevIndex

    rng = np.random.default_rng(4)
    graph = Graph.from_points(rng.normal(size=(60, 2)), n_nodes=12, seed=0)
    same = ([1, 4, 7], [0.2, 0.3, 0.5])
    other = ([2, 3], [0.5, 0.5])
    with SobolevIndex.create(str(tmp_path / "ix"), graph) as index:
        index.add([same, same, other, same, same], keys=["a", "b", "c", "d", "e"],
                  labels=["x", "y", "x", "x", "y"])
        # Plain ties go by insertion order...
        assert index.search([same], k=3).keys[0] == ["a", "b", "d"]
        # ...but the query document leads its duplicates, even when k would cut it off.
        assert index.search("e", k=2).keys[0] == ["e", "a"]
        assert index.search(["d", "c"], k=3).keys == [["d", "a", "b"], ["c", "a", "b"]]
        assert index.search("e", k=2).labels[0] == ["y", "x"]
        # A where filter that excludes the query is obeyed.
        assert index.search("e", k=2, where={"label": "x"}).keys[0] == ["a", "d"]


def test_search_sees_every_change_made_through_the_same_handle(tmp_path):
    # Searches without ``where`` reuse what they may return until the index
    # changes: each kind of change must show in the very next search.
    from sobolev_index import Graph

    rng = np.random.default_rng(5)
    graph = Graph.from_points(rng.normal(size=(60, 2)), n_nodes=12, seed=0)
    near = ([1, 4, 7], [0.2, 0.3, 0.5])
    far = ([2, 3], [0.5, 0.5])
    with SobolevIndex.create(str(tmp_path / "ix"), graph) as index:
        index.add([far, far], keys=["f1", "f2"])
        assert index.search([near], k=1).keys[0] != ["n1"]
        index.add([near], keys=["n1"])
        assert index.search([near], k=1).keys[0] == ["n1"]
        assert index.search([near], k=1).distances[0, 0] == 0.0
        index.delete(["n1"])
        assert "n1" not in index.search([near], k=3).keys[0]
        index.upsert([near], keys=["f2"])
        assert index.search([near], k=1).keys[0] == ["f2"]
        index.compact()
        assert index.search([near], k=3).keys[0] == ["f2", "f1"]
