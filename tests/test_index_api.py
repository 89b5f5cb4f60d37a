"""SobolevIndex API: create / open / add / get / delete / upsert / search / compact.

Expected values come from tests/reference.py (distances) and from fresh
``tree.features_of`` calls (features); nothing is read back from the index to
build an expectation.
"""

import math
import os
import re
import stat
import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from _support.expected import RefModel, check_topk, expected_dists
from _support.graphs import pick_roots, random_graph
from _support.index import assert_unchanged, snapshot
from _support.measures import assert_csr_identical, assert_same_measure, random_measures

from sobolev_index import (
    Graph,
    KeyNotFoundError,
    SobolevIndex,
    SobolevIndexError,
)

N_NODES = 30


@pytest.fixture(scope="module")
def spec():
    return random_graph(7, N_NODES, extra=30, kind="euclidean")


@pytest.fixture(scope="module")
def roots1(spec):
    return pick_roots(spec, 1, seed=3)


@pytest.fixture(scope="module")
def roots3(spec):
    return pick_roots(spec, 3, seed=4)


def _docs(seed, count, n=N_NODES):
    rng = np.random.default_rng(seed)
    # random real masses: no two measures coincide (self-queries then have a unique 0)
    return random_measures(rng, n, count, dup=True)


def _keys(prefix, count):
    return [f"{prefix}{i}" for i in range(count)]


def _create(path, spec, roots, **kw):
    return SobolevIndex.create(str(path), spec.lib(), roots=list(roots), **kw)


def _ref_check(idx, model, docs_by_key, queries, k, p, eta, positions=None, res=None,
               order=None, what=""):
    """Search ``queries`` (measures) and compare with the reference."""
    alphas = {key: model.alphas(m) for key, m in docs_by_key.items()}
    if res is None:
        kw = {} if positions is None else {"roots": positions}
        res = idx.search(queries, k=k, p=p, **kw)
    assert len(res.keys) == len(queries)
    D = np.asarray(res.distances)
    # min(k, N) columns for N live documents
    assert D.shape == (len(queries), min(k, len(idx)))
    for qi, q in enumerate(queries):
        exp = expected_dists(model, model.alphas(q), alphas, p, eta, positions)
        check_topk(res.keys[qi], D[qi], exp, k, order=order, what=f"{what} query {qi} p={p}")
    return res


# --------------------------------------------------------------------------- create / open
def test_create_open_close_and_context_manager(tmp_path, spec, roots1):
    path = tmp_path / "idx"
    graph = spec.lib()
    idx = SobolevIndex.create(str(path), graph, roots=list(roots1), p=2)
    try:
        assert os.path.isdir(path)
        assert os.path.isfile(path / "catalog.sqlite")
        assert os.path.isfile(path / "graph.h5")
        assert os.path.isdir(path / "segments")
        assert np.asarray(idx.roots).dtype == np.int64
        assert np.asarray(idx.roots).tolist() == list(roots1)
        np.testing.assert_allclose(np.asarray(idx.eta, dtype=float), [1.0])
        assert idx.p == 2
        assert idx.graph.n_nodes == N_NODES
        assert len(idx.trees) == 1 and idx.trees[0].root == roots1[0]
        assert np.array_equal(idx.trees[0].parent, graph.tree(roots1[0]).parent)
        assert len(idx) == 0 and list(idx) == []
        assert os.path.samefile(str(idx.path), str(path))
        keys = idx.add(_docs(1, 3), keys=["a", "b", "c"])
        assert keys == ["a", "b", "c"]
    finally:
        idx.close()
    with SobolevIndex.open(str(path), "r") as r:
        assert len(r) == 3 and list(r) == ["a", "b", "c"]
        assert r.p == 2
        assert np.asarray(r.roots).tolist() == list(roots1)
        assert r.graph.n_nodes == N_NODES
        np.testing.assert_array_equal(r.graph.lengths, graph.lengths)
        np.testing.assert_array_equal(r.graph.edges, graph.edges)
    # context manager on a writer releases the lock: a second writer can then open at once
    with SobolevIndex.open(str(path), "a") as w:
        w.add(_docs(2, 1), keys=["d"])
    with SobolevIndex.open(str(path), "a", timeout=None) as w:
        assert list(w) == ["a", "b", "c", "d"]


def test_create_default_roots_and_eta(tmp_path, spec):
    graph = spec.lib()
    with SobolevIndex.create(str(tmp_path / "one"), graph) as idx:
        expect, _ = graph.roots(1, "center")
        assert np.asarray(idx.roots).tolist() == np.asarray(expect).tolist()
    with SobolevIndex.create(str(tmp_path / "three"), graph, roots=3, seed=5) as idx:
        expect, _ = graph.roots(3, "random", seed=5)
        assert np.asarray(idx.roots).tolist() == np.asarray(expect).tolist()
        np.testing.assert_allclose(idx.eta, [1 / 3] * 3)
    with SobolevIndex.create(str(tmp_path / "eta"), graph, roots=pick_roots(spec, 2, 9),
                             eta=[3.0, 1.0]) as idx:
        np.testing.assert_allclose(idx.eta, [0.75, 0.25], rtol=1e-15)
    # an empty existing directory is accepted
    os.mkdir(tmp_path / "empty")
    with SobolevIndex.create(str(tmp_path / "empty"), graph) as idx:
        assert len(idx) == 0


def test_create_refuses_existing_index_and_nonempty_dir(tmp_path, spec, roots1):
    path = tmp_path / "idx"
    with _create(path, spec, roots1) as idx:
        idx.add(_docs(3, 4), keys=_keys("k", 4))
    before = snapshot(str(path))
    with pytest.raises(FileExistsError, match="exists and is not an empty directory") as e:
        _create(path, spec, roots1)
    assert str(e.value), "error without a message"
    assert_unchanged(before, str(path), "create over an existing index")
    other = tmp_path / "other"
    other.mkdir()
    (other / "precious.txt").write_text("do not delete")
    with pytest.raises(FileExistsError, match="exists and is not an empty directory"):
        _create(other, spec, roots1)
    assert sorted(os.listdir(other)) == ["precious.txt"]
    assert (other / "precious.txt").read_text() == "do not delete"


# --------------------------------------------------------------------------- add / get / iter
def test_add_returns_keys_and_generated_keys_unique(tmp_path, spec, roots1):
    path = tmp_path / "idx"
    with _create(path, spec, roots1) as idx:
        k1 = idx.add(_docs(4, 25))
        assert isinstance(k1, list) and len(k1) == 25
        assert all(isinstance(k, str) and k for k in k1)
        assert len(set(k1)) == 25
        k2 = idx.add(_docs(5, 10), keys=_keys("given", 10))
        assert k2 == _keys("given", 10)
        k3 = idx.add(_docs(6, 25))
        assert len(set(k1) | set(k3)) == 50
        assert not (set(k3) & set(k2))
    with SobolevIndex.open(str(path), "a") as idx:
        # generated keys stay unique across sessions, and after deleting the newest docs
        idx.delete(k3[-5:])
        k4 = idx.add(_docs(7, 30))
        assert len(set(k4)) == 30
        assert not (set(k4) & (set(k1) | set(k2) | set(k3)))
        assert len(idx) == 25 + 10 + 20 + 30
        assert list(idx) == k1 + k2 + k3[:-5] + k4


def _lookalikes(key, bumps):
    """Keys a generator might produce later: the key's last integer bumped up."""
    m = re.search(r"(\d+)(?!.*\d)", key)
    if not m:
        return [f"{key}{i}" for i in bumps]
    n = int(m.group(1))
    return [key[:m.start()] + str(n + i) + key[m.end():] for i in bumps]


def test_generated_keys_never_collide_with_user_keys(tmp_path, spec, roots1):
    """A user key that looks like a future generated key must not make add() fail
    or be shadowed: generated keys are unique among live keys."""
    with _create(tmp_path / "idx", spec, roots1) as idx:
        first = idx.add(_docs(50, 2))
        # 30 user keys ahead of the generator: the 30 documents themselves use up
        # 30 ids, so the next generated keys land on the squatted names
        squatters = [k for k in _lookalikes(first[-1], range(31, 61)) if k not in idx]
        idx.add(_docs(51, len(squatters)), keys=squatters)
        before = set(idx)
        more = idx.add(_docs(52, 10))  # must not raise DuplicateKeyError
        assert len(set(more)) == 10
        assert not (set(more) & before), f"generated keys {set(more) & before} were already live"
        assert len(idx) == len(before) + 10
        for key in squatters:  # the user's documents are untouched
            assert key in idx


def test_get_len_iter_contains_roundtrip(tmp_path, spec, roots1):
    docs = _docs(8, 12)
    # one measure with duplicate nodes and unnormalised masses, one with masses None
    docs[3] = (np.array([4, 9, 4, 17]), np.array([2.0, 1.0, 3.0, 0.5]))
    docs[5] = (np.array([1, 2, 3]), None)
    keys = _keys("doc-", 12)
    labels = ["x" if i % 3 == 0 else ("y" if i % 3 == 1 else None) for i in range(12)]
    fields = [{"i": i, "name": f"n{i}", "tags": ["a", i]} if i % 2 else None for i in range(12)]
    path = tmp_path / "idx"
    with _create(path, spec, roots1) as idx:
        assert idx.add(docs, keys=keys, labels=labels, fields=fields) == keys
        for mode_idx in (idx,):
            assert len(mode_idx) == 12
    for mode in ("r", "a"):
        with SobolevIndex.open(str(path), mode) as idx:
            assert len(idx) == 12
            assert list(idx) == keys
            assert "doc-0" in idx and "doc-11" in idx
            assert "doc-12" not in idx and "nope" not in idx
            for i, key in enumerate(keys):
                doc = idx.get(key)
                assert doc["key"] == key
                nodes, masses = docs[i]
                if masses is None:
                    masses = np.ones(len(nodes))
                assert np.asarray(doc["nodes"]).dtype.kind in "iu"
                assert np.asarray(doc["masses"]).dtype.kind == "f"
                assert_same_measure(doc["nodes"], doc["masses"], nodes, masses, N_NODES, key)
                assert doc["label"] == labels[i]
                assert (doc["fields"] or None) == fields[i]
                assert doc.get("added_at") is not None
            with pytest.raises(KeyNotFoundError) as e:
                idx.get("missing-key")
            assert "missing-key" in str(e.value)
            assert isinstance(e.value, KeyError)


def test_add_sparse_matrix_of_masses(tmp_path, spec, roots1):
    rng = np.random.default_rng(11)
    M = sp.random(6, N_NODES, density=0.15, random_state=rng, format="csr") * 5
    M = sp.csr_matrix(M)
    for i in range(6):  # make sure no row is empty
        if M[i].nnz == 0:
            M[i, i] = 1.0
    M = sp.csr_matrix(M)
    tree = spec.lib().tree(roots1[0])
    with _create(tmp_path / "idx", spec, roots1) as idx:
        keys = idx.add(M, keys=_keys("m", 6))
        assert keys == _keys("m", 6)
        for i, key in enumerate(keys):
            row = M[i]
            doc = idx.get(key)
            assert_same_measure(doc["nodes"], doc["masses"], row.indices, row.data, N_NODES, key)
        assert_csr_identical(idx.features(keys, root=0), tree.features_of(M), "sparse add")


def test_features_equal_fresh_tree_features(tmp_path, spec, roots3):
    docs = _docs(9, 20)
    keys = _keys("f", 20)
    graph = spec.lib()
    with _create(tmp_path / "idx", spec, roots3) as idx:
        idx.add(docs[:7], keys=keys[:7])
        idx.add(docs[7:], keys=keys[7:])
        for r, root in enumerate(roots3):
            tree = graph.tree(root)
            expect = tree.features_of(docs)
            got = idx.features(keys, root=r)
            assert_csr_identical(got, expect, f"root {r}")
            assert got.shape == (20, N_NODES)
            # a single key gives a one-row matrix
            assert_csr_identical(idx.features(keys[8], root=r), tree.features_of([docs[8]]),
                                 f"root {r} single")
            # features of the stored (normalised) measure agree too
            doc = idx.get(keys[4])
            again = tree.features_of([(doc["nodes"], doc["masses"])])
            np.testing.assert_allclose(idx.features(keys[4], root=r).toarray(), again.toarray(),
                                       rtol=1e-14, atol=1e-16)
        assert_csr_identical(idx.features(keys[::-1], root=0),
                             graph.tree(roots3[0]).features_of(docs[::-1]), "reversed order")
        idx.compact()
        for r, root in enumerate(roots3):
            assert_csr_identical(idx.features(keys, root=r), graph.tree(root).features_of(docs),
                                 f"root {r} after compact")


# --------------------------------------------------------------------------- delete / upsert
def test_delete_then_search_never_returns_deleted(tmp_path, spec, roots1):
    docs = _docs(10, 30)
    keys = _keys("d", 30)
    model = RefModel(spec, roots1)
    queries = _docs(11, 6)
    path = tmp_path / "idx"
    gone = set(keys[::3])
    with _create(path, spec, roots1) as idx:
        idx.add(docs[:15], keys=keys[:15])
        idx.add(docs[15:], keys=keys[15:])
        n = idx.delete(sorted(gone))
        assert n == len(gone)
        assert len(idx) == 30 - len(gone)
        assert list(idx) == [k for k in keys if k not in gone]
        live = {k: m for k, m in zip(keys, docs) if k not in gone}
        for key in gone:
            assert key not in idx
            with pytest.raises(KeyNotFoundError):
                idx.get(key)
            with pytest.raises(KeyNotFoundError):
                idx.search(key, k=3)
        # every live doc is returned with k = len, no deleted key ever is
        for p in (1, 2, math.inf):
            res = _ref_check(idx, model, live, queries, 30, p, [1.0], what="after delete")
            for row in res.keys:
                assert not (set(row) & gone)
        # deleting again, or deleting a mix with one unknown key, deletes nothing
        before = snapshot(str(path))
        with pytest.raises(KeyNotFoundError) as e:
            idx.delete([keys[1], keys[0]])  # keys[0] is already deleted
        assert keys[0] in str(e.value)
        assert keys[1] in idx and len(idx) == 30 - len(gone)
        with pytest.raises(KeyNotFoundError):
            idx.delete(["never-there"])
        assert_unchanged(before, str(path), "delete with unknown key")
        idx.compact()
        assert len(idx) == 30 - len(gone)
        for p in (1, 2):
            _ref_check(idx, model, live, queries, 30, p, [1.0], what="after compact")
    with SobolevIndex.open(str(path), "r") as idx:
        assert list(idx) == [k for k in keys if k not in gone]
        res = _ref_check(idx, model, live, queries, 40, 1, [1.0], what="after reopen")
        for row in res.keys:
            assert not (set(row) & gone)


def test_delete_everything_then_search_is_empty(tmp_path, spec, roots1):
    docs = _docs(12, 5)
    with _create(tmp_path / "idx", spec, roots1) as idx:
        keys = idx.add(docs)
        assert idx.delete(keys) == 5
        assert len(idx) == 0 and list(idx) == []
        res = idx.search(_docs(13, 2), k=3)
        assert res.keys == [[], []]
        assert np.asarray(res.distances).shape == (2, 0)
        idx.compact()
        assert len(idx) == 0
        res = idx.search(_docs(13, 2), k=3)
        assert res.keys == [[], []]


def test_upsert_replaces_and_adds(tmp_path, spec, roots1):
    docs = _docs(14, 10)
    keys = _keys("u", 10)
    new = _docs(15, 4)
    tree = spec.lib().tree(roots1[0])
    model = RefModel(spec, roots1)
    with _create(tmp_path / "idx", spec, roots1) as idx:
        idx.add(docs, keys=keys, labels=["old"] * 10)
        out = idx.upsert(new, keys=["u2", "u7", "fresh1", "fresh2"], labels=["new"] * 4,
                         fields=[{"v": 2}, None, {"v": 3}, None])
        assert out == ["u2", "u7", "fresh1", "fresh2"]
        assert len(idx) == 12
        assert set(idx) == set(keys) | {"fresh1", "fresh2"}
        current = dict(zip(keys, docs))
        current.update(zip(["u2", "u7", "fresh1", "fresh2"], new))
        for key, m in current.items():
            doc = idx.get(key)
            assert_same_measure(doc["nodes"], doc["masses"], m[0], m[1], N_NODES, key)
            assert doc["label"] == ("new" if key in ("u2", "u7", "fresh1", "fresh2") else "old")
            assert_csr_identical(idx.features(key), tree.features_of([m]), key)
        assert idx.get("u2")["fields"] == {"v": 2}
        # the old content of u2 is gone from search: querying with it finds no exact match
        res = idx.search([docs[2]], k=12, p=1)
        exp = expected_dists(model, model.alphas(docs[2]),
                             {k: model.alphas(m) for k, m in current.items()}, 1, [1.0])
        check_topk(res.keys[0], res.distances[0], exp, 12, what="old u2 content")
        # querying with the new content finds u2 at 0
        res = idx.search([new[0]], k=1, p=2)
        assert res.keys[0] == ["u2"]
        assert abs(res.distances[0][0]) <= 1e-12
        # upsert of a key that is not there yet behaves like add
        idx.upsert([new[1]], keys=["solo"])
        assert "solo" in idx and len(idx) == 13


# --------------------------------------------------------------------------- search
@pytest.mark.parametrize("p", [1, 2, 1.5, 3, math.inf])
def test_search_by_stored_key_returns_itself_first(tmp_path, spec, roots3, p):
    docs = _docs(16, 25)
    keys = _keys("s", 25)
    model = RefModel(spec, roots3)
    with _create(tmp_path / "idx", spec, roots3) as idx:
        idx.add(docs[:10], keys=keys[:10])
        idx.add(docs[10:], keys=keys[10:])
        alphas = {k: model.alphas(m) for k, m in zip(keys, docs)}
        eta = [1 / 3] * 3
        # a single key
        res = idx.search("s4", k=5, p=p)
        assert len(res.keys) == 1
        assert res.keys[0][0] == "s4"
        assert abs(res.distances[0][0]) <= 1e-12
        check_topk(res.keys[0], res.distances[0],
                   expected_dists(model, alphas["s4"], alphas, p, eta), 5, what="s4")
        # a list of keys
        some = ["s0", "s13", "s24", "s9"]
        res = idx.search(some, k=4, p=p)
        assert len(res.keys) == 4
        for qi, key in enumerate(some):
            assert res.keys[qi][0] == key
            assert abs(res.distances[qi][0]) <= 1e-12
            check_topk(res.keys[qi], res.distances[qi],
                       expected_dists(model, alphas[key], alphas, p, eta), 4, what=key)


def test_search_default_p_is_index_p(tmp_path, spec, roots1):
    docs = _docs(17, 15)
    model = RefModel(spec, roots1)
    queries = _docs(18, 3)
    with _create(tmp_path / "idx", spec, roots1, p=3) as idx:
        keys = idx.add(docs)
        res = idx.search(queries, k=4)
        _ref_check(idx, model, dict(zip(keys, docs)), queries, 4, 3, [1.0], res=res, what="p=3 default")
        res_inf = idx.search(queries, k=4, p=math.inf)
        _ref_check(idx, model, dict(zip(keys, docs)), queries, 4, math.inf, [1.0], res=res_inf)


def test_search_where_label_and_keys(tmp_path, spec, roots1):
    docs = _docs(19, 30)
    keys = _keys("w", 30)
    labels = [["x", "y", "z", None][i % 4] for i in range(30)]
    model = RefModel(spec, roots1)
    queries = _docs(20, 4)
    with _create(tmp_path / "idx", spec, roots1) as idx:
        idx.add(docs, keys=keys, labels=labels)
        idx.delete(["w0", "w1"])  # w0 has label x, w1 label y: must stay invisible
        live = {k: m for k, m, lab in zip(keys, docs, labels) if k not in ("w0", "w1")}
        lab = dict(zip(keys, labels))
        for where, allowed in [
            ({"label": "x"}, {k for k in live if lab[k] == "x"}),
            ({"label": ["x", "z"]}, {k for k in live if lab[k] in ("x", "z")}),
            ({"keys": ["w3", "w5", "w7", "w0", "w29"]}, {"w3", "w5", "w7", "w29"}),
        ]:
            for p in (1, 2):
                res = idx.search(queries, k=5, p=p, where=where)
                sub = {k: m for k, m in live.items() if k in allowed}
                _ref_check(idx, model, sub, queries, 5, p, [1.0], res=res, what=f"where={where}")
                for row in res.keys:
                    assert set(row) <= allowed
        # a label nobody has: nothing found, and a warning that says so
        with pytest.warns(UserWarning, match="no live document has the label 'nobody'"):
            res = idx.search(queries, k=3, where={"label": "nobody"})
        assert all(row == [] for row in res.keys)
        assert np.all(np.isinf(np.asarray(res.distances)))
        # where by keys with a stored-key query
        res = idx.search("w2", k=10, where={"keys": ["w2", "w6"]})
        assert set(res.keys[0]) == {"w2", "w6"} and res.keys[0][0] == "w2"


def test_k_larger_than_number_of_docs(tmp_path, spec, roots1):
    docs = _docs(21, 7)
    model = RefModel(spec, roots1)
    queries = _docs(22, 3)
    with _create(tmp_path / "idx", spec, roots1) as idx:
        keys = idx.add(docs)
        for p in (1, 2, math.inf):
            res = idx.search(queries, k=20, p=p)
            D = np.asarray(res.distances)
            # every live document, and no column for the ones that do not exist
            assert D.shape == (3, 7)
            assert all(len(row) == 7 for row in res.keys)
            assert np.all(np.isfinite(D))
            _ref_check(idx, model, dict(zip(keys, docs)), queries, 20, p, [1.0], res=res)


def test_ties_broken_by_insertion_order(tmp_path, spec, roots1):
    base = _docs(23, 4)
    # identical measures under different keys, inserted out of alphabetical order
    docs = [base[0], base[1], base[0], base[2], base[0], base[1]]
    keys = ["zz", "m", "aa", "q", "c", "b"]
    with _create(tmp_path / "idx", spec, roots1) as idx:
        idx.add(docs[:3], keys=keys[:3])
        idx.add(docs[3:], keys=keys[3:])
        for p in (1, 2, math.inf):
            res = idx.search([base[0]], k=3, p=p)
            assert res.keys[0] == ["zz", "aa", "c"], (p, res.keys[0])
            D = np.asarray(res.distances)[0]
            assert D[0] == D[1] == D[2]
            assert abs(D[0]) <= 1e-12
            res = idx.search([base[1]], k=2, p=p)
            assert res.keys[0] == ["m", "b"]
        idx.compact()
        res = idx.search([base[0]], k=3, p=1)
        assert res.keys[0] == ["zz", "aa", "c"]


def test_given_ids_order_ties_and_survive_merges(tmp_path, spec, roots1):
    """Ids given to add (as a sharded index gives them) are the documents'
    ids: ties go to the lower id whatever the order of the adds, generated
    keys name them, next_id goes on above the largest, and compaction and
    reopening keep them."""
    base = _docs(29, 3)
    with _create(tmp_path / "idx", spec, roots1) as idx:
        assert idx.next_id == 1
        # Added first, with high ids; then lower ids are refused.
        assert idx.add([base[0], base[1]], ids=[40, 45]) == ["doc-40", "doc-45"]
        assert idx.next_id == 46
        assert idx.add([base[0]], keys=["late"]) == ["late"]
        assert idx.get("late")["id"] == 46
        idx.add([base[0], base[2]], keys=["later", "z"], ids=[100, 101])
        idx.upsert([base[0]], ["doc-45"], ids=[205])
        assert idx.next_id == 206
        for p in (1, 2, math.inf):
            assert idx.search([base[0]], k=5, p=p).keys[0][:4] == ["doc-40", "late", "later",
                                                                    "doc-45"]
        want = [(idx.get(k)["id"], k) for k in idx.keys_in_order()]
        assert want == [(40, "doc-40"), (46, "late"), (100, "later"), (101, "z"),
                        (205, "doc-45")]
        ids, keys = idx.ids_and_keys()
        assert ids.dtype == np.int64 and list(zip(ids.tolist(), keys)) == want
        idx.compact()
        assert list(zip(*[a.tolist() if hasattr(a, "tolist") else a
                          for a in idx.ids_and_keys()])) == want
    with SobolevIndex.open(str(tmp_path / "idx")) as idx:
        assert idx.next_id == 206
        assert idx.search([base[0]], k=4, p=1).keys[0] == ["doc-40", "late", "later", "doc-45"]


@pytest.mark.parametrize("ids, message", [
    ([5], "1 ids were given for 2 measures"),
    ([3, 3], "ids 3 and 3 .places 0 and 1. do not rise"),
    ([4, 2], "ids 4 and 2 .places 0 and 1. do not rise"),
    ([0, 7], "id 0 is below the index's next id 1"),
    ([1.0, 2.0], "id 0 is 1.0; expected an integer"),
    ([True, False], "id 0 is True; expected an integer"),
    ([3, None], "id 1 is None; expected an integer"),
    ([3, True], "id 1 is True; expected an integer"),
    ([np.bool_(True), 3], "id 0 is np.True_; expected an integer"),
    (np.array([True, False]), "id 0 is True; expected an integer"),
    ([-2**70, 5], "id -1180591620717411303424 is below the index's next id 1"),
    (np.array([1.5, 2.5]), "id 0 is 1.5; expected an integer"),
    ("12", "expected a list of 2 document ids"),
    ({1: 2}, "expected a list of 2 document ids"),
    ([[1, 2]], r"shape \(1, 2\) of ids were given"),
    (np.array([2**64 - 1, 2**64 - 2], dtype=np.uint64), "too large"),
    ([5, 2**64], "id 18446744073709551616 is too large"),
    ([5, 2**63 - 2], "is too large; expected ids below 9223372036854775806"),
])
def test_bad_ids_raise_and_write_nothing(tmp_path, spec, roots1, ids, message):
    with _create(tmp_path / "idx", spec, roots1) as idx:
        before = snapshot(idx.path)
        with pytest.raises(ValueError, match=message):
            idx.add(_docs(3, 2), ids=ids)
        assert_unchanged(before, idx.path)
        assert len(idx) == 0 and idx.next_id == 1


def test_ids_may_be_numpy_integers_and_the_last_id_must_leave_room(tmp_path, spec, roots1):
    with _create(tmp_path / "idx", spec, roots1) as idx:
        assert idx.add(_docs(3, 2), ids=[np.int64(4), np.int32(9)]) == ["doc-4", "doc-9"]
        assert idx.add(_docs(4, 2), ids=list(np.arange(12, 14))) == ["doc-12", "doc-13"]
        assert idx.add(_docs(5, 1), ids=np.array([20], dtype=np.uint64)) == ["doc-20"]
        idx.reserve_ids(2**63 - 3)
        before = snapshot(idx.path)
        with pytest.raises(ValueError, match="2 more documents would take ids beyond"):
            idx.add(_docs(6, 2))
        assert_unchanged(before, idx.path)
        assert idx.add(_docs(6, 1)) == [f"doc-{2**63 - 3}"]
        assert idx.next_id == 2**63 - 2


def test_reserve_ids_raises_next_id_for_good(tmp_path, spec, roots1):
    with _create(tmp_path / "idx", spec, roots1) as idx:
        idx.add(_docs(3, 2))
        idx.reserve_ids(10)
        idx.reserve_ids(4)  # below: nothing changes
        assert idx.next_id == 10
        for bad in (0, -3, 2**63, 1.5, True, "9"):
            with pytest.raises(ValueError, match="next_id is"):
                idx.reserve_ids(bad)
    with SobolevIndex.open(str(tmp_path / "idx"), mode="a") as idx:
        assert idx.next_id == 10
        assert idx.add(_docs(4, 1)) == ["doc-10"]


def test_stored_measures_are_the_measures_as_added(tmp_path, spec, roots1):
    """stored_measures gives the nodes and masses exactly as added (not
    normalised again, as get's are), the label and the id; a query made
    of them finds the document at distance exactly 0."""
    rng = np.random.default_rng(8)
    nodes = np.array([3, 1, 7, 3], dtype=np.int64)  # a node twice, out of order
    masses = rng.random(4) * 7.0
    with _create(tmp_path / "idx", spec, roots1) as idx:
        idx.add(_docs(4, 3), keys=["a", "b", "c"])
        idx.add([(nodes, masses)], keys=["odd"], labels=["L"])
        (doc,) = idx.stored_measures(["odd"])
        assert doc["key"] == "odd" and doc["label"] == "L" and doc["id"] == idx.get("odd")["id"]
        assert doc["nodes"].dtype == np.int64 and doc["masses"].dtype == np.float64
        np.testing.assert_array_equal(doc["nodes"], nodes)
        # What the index stores of a measure: masses as given, scaled to sum 1.
        assert np.allclose(doc["masses"] * masses.sum() / doc["masses"].sum(), masses)
        found = idx.search([(doc["nodes"], doc["masses"])], k=1)
        assert found.keys[0] == ["odd"] and found.distances[0, 0] == 0.0
        assert [d["key"] for d in idx.stored_measures(["c", "a"])] == ["c", "a"]
        with pytest.raises(KeyNotFoundError, match="'nope'"):
            idx.stored_measures(["a", "nope"])


@pytest.mark.parametrize("p", [1, 2, 1.5, 3, math.inf])
def test_roots_subset_and_sliced(tmp_path, spec, roots3, p):
    docs = _docs(24, 25)
    eta = [0.5, 0.3, 0.2]
    model = RefModel(spec, roots3)
    queries = _docs(25, 4)
    with _create(tmp_path / "idx", spec, roots3, eta=eta) as idx:
        keys = idx.add(docs)
        by_key = dict(zip(keys, docs))
        _ref_check(idx, model, by_key, queries, 6, p, eta, what="all roots")
        for positions in ([0, 2], [1], [2, 0, 1]):
            _ref_check(idx, model, by_key, queries, 6, p, eta, positions=positions,
                       what=f"roots={positions}")


def test_search_sparse_matrix_queries(tmp_path, spec, roots1):
    docs = _docs(26, 15)
    model = RefModel(spec, roots1)
    rng = np.random.default_rng(27)
    Q = sp.csr_matrix(rng.uniform(0, 1, (3, N_NODES)) * (rng.random((3, N_NODES)) < 0.2))
    for i in range(3):
        if Q[i].nnz == 0:
            Q[i, 0] = 1.0
    Q = sp.csr_matrix(Q)
    queries = [(Q[i].indices, Q[i].data) for i in range(3)]
    with _create(tmp_path / "idx", spec, roots1) as idx:
        keys = idx.add(docs)
        res = idx.search(Q, k=5, p=2)
        _ref_check(idx, model, dict(zip(keys, docs)), queries, 5, 2, [1.0], res=res)


def test_search_after_reopen_equals_search_before(tmp_path, spec, roots3):
    docs = _docs(28, 40)
    queries = _docs(29, 5)
    path = tmp_path / "idx"
    with _create(path, spec, roots3) as idx:
        keys = idx.add(docs[:20])
        keys += idx.add(docs[20:])
        idx.delete(keys[5:9])
        before = {p: idx.search(queries, k=8, p=p) for p in (1, 2, math.inf)}
        before_key = idx.search(keys[0], k=8)
    for mode in ("r", "a"):
        with SobolevIndex.open(str(path), mode) as idx:
            for p, res in before.items():
                again = idx.search(queries, k=8, p=p)
                assert again.keys == res.keys
                assert np.array_equal(np.asarray(again.distances), np.asarray(res.distances))
            again = idx.search(keys[0], k=8)
            assert again.keys == before_key.keys
            assert np.array_equal(np.asarray(again.distances), np.asarray(before_key.distances))


def test_compact_keeps_results_and_features(tmp_path, spec, roots3):
    docs = _docs(30, 60)
    queries = _docs(31, 4)
    model = RefModel(spec, roots3)
    graph = spec.lib()
    path = tmp_path / "idx"
    with _create(path, spec, roots3) as idx:
        keys = []
        for s in range(0, 60, 12):
            keys += idx.add(docs[s:s + 12])
        gone = keys[::7]
        idx.delete(gone)
        live = {k: m for k, m in zip(keys, docs) if k not in gone}
        res1 = _ref_check(idx, model, live, queries, 10, 2, [1 / 3] * 3, what="before compact")
        idx.compact()
        segs = [f for f in os.listdir(path / "segments") if not f.startswith(".")]
        assert len([f for f in segs if f.endswith(".h5")]) == 1, segs
        res2 = _ref_check(idx, model, live, queries, 10, 2, [1 / 3] * 3, what="after compact")
        assert res1.keys == res2.keys
        assert list(idx) == [k for k in keys if k not in gone]
        live_keys = list(live)
        for r, root in enumerate(roots3):
            assert_csr_identical(idx.features(live_keys, root=r),
                                 graph.tree(root).features_of(list(live.values())), f"root {r}")
        report = idx.verify()
        assert report["ok"] is True, report


def test_many_small_adds_are_merged(tmp_path, spec, roots1):
    docs = _docs(32, 64)
    path = tmp_path / "idx"
    with _create(path, spec, roots1) as idx:
        for m in docs:
            idx.add([m])
        segs = [f for f in os.listdir(path / "segments") if f.endswith(".h5")]
        assert len(segs) <= 20, f"{len(segs)} segments after 64 single-document adds"
        assert len(idx) == 64
        model = RefModel(spec, roots1)
        _ref_check(idx, model, dict(zip(list(idx), docs)), _docs(33, 3), 5, 1, [1.0])


@pytest.mark.slow
def test_merges_stop_at_the_segment_size_cap(tmp_path, spec, roots1, monkeypatch):
    """No tier merge writes a segment of more than MAX_SEGMENT_NNZ nonzeros
    (the writer's memory bound), nor compact past its estimate of the live
    rows' nonzeros; results stay exact and compact still drops every
    deleted document."""
    from sobolev_index.index import merge_policy as module

    docs = _docs(34, 96)
    path = tmp_path / "idx"
    model = RefModel(spec, roots1)
    with _create(path, spec, roots1) as idx:
        idx.add(docs[:8])
        idx.add(docs[8:16])
        per_doc = sum(s.nnz for s in idx._segments) / 16
        # About 24 documents' worth: tiers of one-document segments merge,
        # then two or three of the 8-row results, never more; compact
        # cannot make one segment.
        cap = int(24 * per_doc)
        monkeypatch.setattr(module, "MAX_SEGMENT_NNZ", cap)
        for m in docs[16:]:
            idx.add([m])
        keys = list(idx)
        live = dict(zip(keys, docs))
        sizes = [s.nnz for s in idx._segments]
        merged = [s for s in idx._segments if s.rows > 8]
        assert len(idx) == len(docs)
        assert merged, f"no merge happened: segment rows {[s.rows for s in idx._segments]}"
        assert max(sizes) <= cap, (sizes, cap)
        _ref_check(idx, model, live, _docs(35, 3), 10, 1, [1.0], what="after capped merges")
        gone = keys[::7]
        idx.delete(gone)
        for key in gone:
            del live[key]
        before = len(idx._segments)
        idx.compact()
        after = [s.nnz for s in idx._segments]
        assert 1 < len(after) < before, (before, after)
        # With deleted rows the policy estimates a segment's live nonzeros
        # from its share of live rows: about, not at most, the cap.
        assert max(after) <= 1.25 * cap, (after, cap)
        assert all(s.live.all() for s in idx._segments), "compact left deleted rows"
        assert list(idx) == [k for k in keys if k not in set(gone)]
        for p in (1, 2):
            _ref_check(idx, model, live, _docs(36, 3), 20, p, [1.0], what="after capped compact")
    with SobolevIndex.open(str(path), "r") as r:
        assert len(r) == len(live)
        assert r.verify()["ok"] is True


def test_orphan_segment_ignored_and_repaired(tmp_path, spec, roots1):
    """An uncommitted segment file (what a crash leaves) is invisible to readers;
    verify(repair=True) removes it and nothing else."""
    path = tmp_path / "idx"
    docs = _docs(60, 10)
    with _create(path, spec, roots1) as idx:
        keys = idx.add(docs[:6])
        keys += idx.add(docs[6:])
        before = idx.search(_docs(61, 2), k=10)
    segdir = path / "segments"
    committed = sorted(os.listdir(segdir))
    # an orphan: a copy of a committed segment under a name no commit refers to
    with open(segdir / committed[0], "rb") as fh:
        payload = fh.read()
    orphan = "999999.h5"
    (segdir / orphan).write_bytes(payload)
    with SobolevIndex.open(str(path), "r") as r:
        assert len(r) == 10 and list(r) == keys
        again = r.search(_docs(61, 2), k=10)
        assert again.keys == before.keys
        report = r.verify()
        assert isinstance(report, dict)
    assert (segdir / orphan).exists(), "a reader removed a file"
    with SobolevIndex.open(str(path), "a") as w:
        w.verify(repair=True)
        report = w.verify()
        assert report["ok"] is True, report
        assert len(w) == 10
    assert not (segdir / orphan).exists()
    assert sorted(os.listdir(segdir)) == committed


def test_verify_ok_on_healthy_index(tmp_path, spec, roots3):
    with _create(tmp_path / "idx", spec, roots3) as idx:
        idx.add(_docs(34, 20))
        idx.add(_docs(35, 20))
        report = idx.verify()
        assert isinstance(report, dict)
        assert report["ok"] is True and report["problems"] == []


def test_reader_cannot_write(tmp_path, spec, roots1):
    path = tmp_path / "idx"
    with _create(path, spec, roots1) as idx:
        keys = idx.add(_docs(36, 5))
    before = snapshot(str(path))
    allowed = (SobolevIndexError, PermissionError, ValueError, OSError, RuntimeError)
    with SobolevIndex.open(str(path), "r") as r:
        for action in (
            lambda: r.add(_docs(37, 1)),
            lambda: r.add(_docs(37, 1), keys=["new"]),
            lambda: r.upsert(_docs(37, 1), keys=[keys[0]]),
            lambda: r.delete([keys[1]]),
            lambda: r.compact(),
        ):
            with pytest.raises(Exception) as e:
                action()
            assert isinstance(e.value, allowed), f"unclear error type {type(e.value)!r}: {e.value}"
            assert str(e.value)
        assert len(r) == 5
    assert_unchanged(before, str(path), "writes through a reader")
    with SobolevIndex.open(str(path), "r") as r:
        assert list(r) == keys


def test_reader_sees_snapshot_until_refresh(tmp_path, spec, roots1):
    path = tmp_path / "idx"
    w = _create(path, spec, roots1)
    try:
        first = w.add(_docs(38, 5))
        r = SobolevIndex.open(str(path), "r")
        try:
            assert len(r) == 5
            second = w.add(_docs(39, 4))
            w.delete(first[:2])
            # the reader still sees the snapshot it opened
            assert len(r) == 5 and list(r) == first
            res = r.search(_docs(40, 1), k=20)
            assert set(res.keys[0]) == set(first)
            r.refresh()
            assert list(r) == first[2:] + second
            res = r.search(_docs(40, 1), k=20)
            assert set(res.keys[0]) == set(first[2:] + second)
            w.compact()
            r.refresh()
            assert list(r) == first[2:] + second
        finally:
            r.close()
    finally:
        w.close()


def test_bad_search_arguments(tmp_path, spec, roots1):
    with _create(tmp_path / "idx", spec, roots1) as idx:
        idx.add(_docs(41, 5), keys=_keys("a", 5))
        for bad in (dict(k=0), dict(k=-1), dict(p=0.5), dict(p=float("nan")), dict(roots=[5]),
                    dict(roots=[])):
            with pytest.raises(ValueError) as e:
                idx.search(_docs(42, 1), **{"k": 3, **bad})
            assert str(e.value)
        with pytest.raises(KeyNotFoundError) as e:
            idx.search(["a0", "zzz"], k=2)
        assert "zzz" in str(e.value)
        with pytest.raises(ValueError) as e:
            idx.search([(np.array([N_NODES + 3]), np.array([1.0]))], k=2)
        assert str(N_NODES + 3) in str(e.value)


@pytest.mark.parametrize("operation", ["add", "compact"])
def test_interrupt_after_the_catalog_committed_keeps_the_data(tmp_path, monkeypatch, operation):
    """Ctrl-C can land after SQLite committed but before the call returned:
    the new segment file is then referenced and must not be removed."""
    from sobolev_index import Graph, SobolevIndex
    from sobolev_index.index import catalog

    rng = np.random.default_rng(9)
    graph = Graph.from_points(rng.normal(size=(80, 2)), n_nodes=10, seed=0)
    measures = [(rng.choice(10, 3, replace=False), rng.random(3) + 0.1) for _ in range(6)]
    path = str(tmp_path / "ix")
    with SobolevIndex.create(path, graph) as index:
        index.add(measures[:3], keys=["a", "b", "c"])
        index.delete(["b"])
        name = "commit_segment" if operation == "add" else "replace_segments"
        real = getattr(catalog.Catalog, name)

        def commit_then_interrupt(self, *args, **kwargs):
            real(self, *args, **kwargs)
            raise KeyboardInterrupt

        monkeypatch.setattr(catalog.Catalog, name, commit_then_interrupt)
        with pytest.raises(KeyboardInterrupt):
            if operation == "add":
                index.add(measures[3:], keys=["d", "e", "f"])
            else:
                index.compact()
        monkeypatch.undo()
        expected = {"a", "c", "d", "e", "f"} if operation == "add" else {"a", "c"}
        assert set(index) == expected  # the writer's own view caught up
        index.add(measures[:1], keys=["g"])  # and it can go on writing
    with SobolevIndex.open(path) as reader:
        assert set(reader) == expected | {"g"}
        assert reader.verify()["ok"]
        assert reader.search("a", k=1).keys[0] == ["a"]


def test_index_directory_honours_the_umask(tmp_path, spec, roots1):
    # An index directory is made in a private staging directory and renamed;
    # it must end with the mode of any new directory, not drwx------.
    old = os.umask(0o022)
    try:
        with _create(tmp_path / "shared", spec, roots1):
            pass
        os.umask(0o077)
        with _create(tmp_path / "private", spec, roots1):
            pass
    finally:
        os.umask(old)
    for name, mode in (("shared", 0o755), ("private", 0o700)):
        assert stat.S_IMODE(os.stat(tmp_path / name).st_mode) == mode, name
        assert stat.S_IMODE(os.stat(tmp_path / name / "segments").st_mode) == mode, name


def test_create_like_copies_graph_trees_roots_eta_and_p(tmp_path):
    import hashlib

    # A ring of equal edges: shortest paths tie, and the trees depend on
    # the seed the source was created with.
    ring = np.array([[i, (i + 1) % 6] for i in range(6)])
    graph = Graph.from_edges(6, ring, np.ones(6))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        source = SobolevIndex.create(tmp_path / "a", graph, roots=[0, 3], eta=[1.0, 3.0], p=2,
                                     seed=5, on_violation="perturb")
    with source:
        source.add([([1, 4], [1.0, 2.0])], keys=["x"])
        with SobolevIndex.create_like(tmp_path / "b", source) as copy:
            assert len(copy) == 0 and copy.p == 2
            assert copy.roots.tolist() == [0, 3] and copy.eta.tolist() == [0.25, 0.75]
            for t, u in zip(source.trees, copy.trees):
                assert np.array_equal(t.parent, u.parent) and np.array_equal(t.length, u.length)
            copy.add([([1, 4], [1.0, 2.0])], keys=["x"])
            assert copy.features(["x"])[0].toarray().tolist() == \
                source.features(["x"])[0].toarray().tolist()
    digest = [hashlib.sha256((tmp_path / d / "graph.h5").read_bytes()).hexdigest() for d in "ab"]
    assert digest[0] == digest[1]
    with pytest.raises(FileExistsError):
        with SobolevIndex.open(tmp_path / "a") as source:
            SobolevIndex.create_like(tmp_path / "b", source)
    with pytest.raises(TypeError, match="expected an open SobolevIndex"):
        SobolevIndex.create_like(tmp_path / "c", str(tmp_path / "a"))


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc/self/fd (Linux)")
def test_a_reader_holds_one_descriptor_per_segment_file_and_none_once_closed(tmp_path):
    """Segment arrays are views of one memory map per file: a map per array
    held a descriptor each (about twenty per segment), and a long-lived
    process with many open segments ran into the limit of select() and of
    the open-file limit."""
    import gc

    rng = np.random.default_rng(3)
    graph = Graph.from_points(rng.normal(size=(200, 3)), n_nodes=30, seed=0)
    with SobolevIndex.create(tmp_path / "idx", graph, roots=3, seed=0) as index:
        for _ in range(4):
            index.add([(rng.choice(30, size=3, replace=False), None) for _ in range(20)])
    gc.collect()
    before = len(os.listdir("/proc/self/fd"))
    reader = SobolevIndex.open(tmp_path / "idx")
    reader.search([([1, 2], [0.5, 0.5])], k=3)
    n_segments = reader.info()["segments"]
    held = len(os.listdir("/proc/self/fd")) - before
    assert n_segments >= 2
    # One map per segment, plus the catalog (its file, -wal and -shm) and
    # the lock files.
    assert held <= n_segments + 6, (held, n_segments)
    reader.close()
    del reader
    gc.collect()
    assert len(os.listdir("/proc/self/fd")) == before
