"""One contract, three indexes: the same API cases run against a single
SobolevIndex, a ShardedIndex searched in this process, and a ShardedIndex
whose shards live on the workers of a Dask LocalCluster.

Everything an index answers is checked against something independent of
it: distances and neighbours against tests/reference.py by brute force
(tie-tolerant), keys and ids against the calls the test made. Error cases
check the error type and the words that name the bad value, which
``index/arguments.py`` makes the same for every kind of index.
"""
import math

import numpy as np
import pytest
from _support.expected import RefModel, check_topk, expected_dists
from _support.graphs import pick_roots, random_graph
from _support.measures import assert_same_measure, random_measures

from sobolev_index import IndexBase, SearchResult, SobolevIndex, open_index
from sobolev_index.errors import (
    DuplicateKeyError,
    InvalidMeasureError,
    KeyNotFoundError,
    SobolevIndexError,
)

N_NODES = 30
KINDS = ["single", "sharded", "sharded-dask"]


@pytest.fixture(scope="module")
def spec():
    return random_graph(23, N_NODES)


@pytest.fixture(scope="module")
def roots(spec):
    return pick_roots(spec, 2, seed=1)


@pytest.fixture(scope="module")
def cluster():
    pytest.importorskip("distributed", reason="dask.distributed is not installed "
                        "(pip install 'sobolev-index[distributed]')")
    from _support.cluster import local_cluster

    with local_cluster() as client:
        yield client


@pytest.fixture(params=KINDS)
def kind(request):
    return request.param


@pytest.fixture
def make(kind, request, tmp_path, spec, roots):
    """``make(p=1)``: a new, empty index of this kind over the test graph,
    open for writing, and ``make.reopen(mode)``: the same index opened
    again through ``open_index``."""
    client = None
    if kind != "single":
        pytest.importorskip("dask", reason="dask is not installed")
        if kind == "sharded-dask":
            client = request.getfixturevalue("cluster")
    path = tmp_path / "index"
    opened = []

    def create(p=1):
        if kind == "single":
            index = SobolevIndex.create(path, spec.lib(), roots=roots, p=p)
        else:
            from sobolev_index.distributed import ShardedIndex

            index = ShardedIndex.create(path, spec.lib(), roots=roots, p=p, shards=3,
                                        client=client)
        opened.append(index)
        return index

    def reopen(mode="r"):
        index = open_index(path, mode=mode, client=client)
        opened.append(index)
        return index

    create.reopen = reopen
    create.client = client
    yield create
    for index in opened:
        index.close()


def corpus(seed=0, n=60):
    """Measures with a few exact repeats (ties at every distance), labels
    in four groups."""
    rng = np.random.default_rng(seed)
    measures = random_measures(rng, N_NODES, n)
    for j in (3, 7, 11):
        measures.append(measures[j])
    labels = [f"group-{i % 4}" for i in range(len(measures))]
    return measures, labels


def filled(make, p=1):
    index = make(p=p)
    measures, labels = corpus()
    keys = [f"m{i}" for i in range(len(measures))]
    index.add(measures[:30], keys=keys[:30], labels=labels[:30])
    index.add(measures[30:], keys=keys[30:], labels=labels[30:])
    return index, dict(zip(keys, measures)), dict(zip(keys, labels)), keys


def reference_model(spec, index):
    return RefModel(spec, index.roots)


# ------------------------------------------------------------- the contract
def test_every_index_is_an_index_base(make, kind):
    index = make()
    assert isinstance(index, IndexBase)
    assert (type(index) is SobolevIndex) == (kind == "single")
    assert index.writable and len(index) == 0 and index.next_id == 1
    index.close()
    with make.reopen("r") as reader:
        assert isinstance(reader, IndexBase) and type(reader) is type(index)
        assert not reader.writable


def test_closed_and_read_only_indexes_refuse_work(make):
    index = make()
    index.add([(np.array([1, 2]), np.array([0.5, 0.5]))], keys=["a"])
    index.close()
    index.close()  # closing twice does nothing
    with pytest.raises(SobolevIndexError, match="is closed"):
        index.search("a")
    reader = make.reopen("r")
    with pytest.raises(SobolevIndexError, match="open for reading; open it with mode='a'"):
        reader.add([(np.array([1]), np.array([1.0]))], keys=["b"])
    with pytest.raises(SobolevIndexError, match="open for reading"):
        reader.delete(["a"])
    with pytest.raises(SobolevIndexError, match="open for reading"):
        reader.verify(repair=True)
    for sample in (0, 2.5, "64"):
        with pytest.raises(ValueError, match=f"sample is {sample!r}"):
            reader.verify(sample=sample)
    assert reader.verify(sample=3)["ok"]
    assert len(reader) == 1 and "a" in reader and "b" not in reader


def test_keys_ids_and_insertion_order(make):
    index = make()
    measures, labels = corpus()
    generated = index.add(measures[:5])
    assert generated == [f"doc-{i}" for i in range(1, 6)]
    # A user key that takes a generated name pushes the next one aside.
    index.add(measures[5:6], keys=["doc-7"])
    more = index.add(measures[6:8])
    assert more == ["doc-7.1", "doc-8"]
    order = generated + ["doc-7"] + more
    assert index.keys_in_order() == order
    assert list(index) == order
    ids, keys = index.ids_and_keys()
    assert keys == order and ids.tolist() == list(range(1, 9))
    assert index.next_id == 9
    assert index.existing_keys(["doc-1", "nope", "doc-8"]) == {"doc-1", "doc-8"}
    assert len(index) == 8


def test_get_returns_what_was_stored(make, spec):
    index, measures, labels, keys = filled(make)
    for key in (keys[0], keys[31], keys[-1]):
        doc = index.get(key)
        assert doc["key"] == key and doc["label"] == labels[key]
        nodes, masses = measures[key]
        assert_same_measure(doc["nodes"], doc["masses"], nodes, masses, N_NODES, what=key)
    with pytest.raises(KeyNotFoundError, match="'absent'"):
        index.get("absent")


def test_bad_writes_name_the_value_and_write_nothing(make):
    index, measures, labels, keys = filled(make)
    before = (len(index), index.next_id, index.keys_in_order())
    one = [measures[keys[0]]]
    with pytest.raises(DuplicateKeyError, match="'m0'"):
        index.add(one, keys=["m0"])
    with pytest.raises(DuplicateKeyError, match="appears twice in this batch"):
        index.add(one * 2, keys=["x", "x"])
    with pytest.raises(ValueError, match="key 0 is ''; keys must be non-empty str"):
        index.add(one, keys=[""])
    with pytest.raises(ValueError, match="2 keys were given for 1 measures"):
        index.add(one, keys=["x", "y"])
    with pytest.raises(ValueError, match=r"id 1 is below the index's next id"):
        index.add(one, keys=["x"], ids=[1])
    with pytest.raises(ValueError, match=r"labels\[0\] is 5; expected str or None"):
        index.add(one, keys=["x"], labels=[5])
    with pytest.raises(ValueError, match=r"fields\[0\] cannot be stored as JSON"):
        index.add(one, keys=["x"], fields=[{"v": math.nan}])
    with pytest.raises(InvalidMeasureError):
        index.add([(np.array([N_NODES + 5]), np.array([1.0]))], keys=["x"])
    with pytest.raises(KeyNotFoundError, match="nothing was deleted"):
        index.delete(["m1", "absent"])
    with pytest.raises(TypeError, match="keys are str"):
        index.delete([1])
    assert (len(index), index.next_id, index.keys_in_order()) == before


def test_bad_searches_name_the_value(make):
    index, _, _, _ = filled(make)
    with pytest.raises(ValueError, match="k is 0; expected an integer >= 1"):
        index.search("m0", k=0)
    with pytest.raises(ValueError, match="give one of them"):
        index.search("m0", k=3, radius=1.0)
    with pytest.raises(ValueError, match="limit is 3 without a radius"):
        index.search("m0", limit=3)
    with pytest.raises(ValueError, match=r"radius is -1\.0; expected a number >= 0"):
        index.search("m0", radius=-1.0)
    with pytest.raises(ValueError, match=r"roots is \[5\]; expected distinct positions in 0\.\.1"):
        index.search("m0", roots=[5])
    with pytest.raises(ValueError, match="where is"):
        index.search("m0", where={"colour": "red"})
    with pytest.raises(KeyNotFoundError, match="'absent'"):
        index.search("absent")
    with pytest.raises(ValueError, match=r"candidates is 3; expected at least k \(5\)"):
        index.search("m0", k=5, candidates=3)
    with pytest.raises(ValueError, match="candidates is 10 with a radius"):
        index.search("m0", radius=1.0, candidates=10)
    with pytest.raises(ValueError, match="candidate_roots is 1 without candidates"):
        index.search("m0", candidate_roots=1)
    with pytest.raises(ValueError, match=r"candidate_roots is 3; expected at most the number "
                                         r"of roots searched \(2\)"):
        index.search("m0", candidates=10, candidate_roots=3)
    with pytest.raises(ValueError, match="candidates is 0; expected an integer >= 1"):
        index.search("m0", candidates=0)


@pytest.mark.parametrize("p", [1, 2, math.inf])
def test_knn_search_matches_brute_force(make, spec, p):
    index, measures, labels, keys = filled(make, p=p)
    model = reference_model(spec, index)
    alphas = {key: model.alphas(m) for key, m in measures.items()}
    order = {key: i for i, key in enumerate(keys)}
    queries = [measures[keys[2]], measures[keys[40]], random_measures(
        np.random.default_rng(9), N_NODES, 1)[0]]
    found = index.search(queries, k=7)
    assert isinstance(found, SearchResult) and len(found) == 3
    for q, query in enumerate(queries):
        exp = expected_dists(model, model.alphas(query), alphas, p, index.eta)
        check_topk(found.keys[q], found.distances[q], exp, 7, order=order, what=f"query {q}")
        assert found.labels[q] == [labels[key] for key in found.keys[q]]
    # One root of the two, and the ids in insertion order.
    one = index.search(queries[:1], k=5, roots=[1])
    exp = expected_dists(model, model.alphas(queries[0]), alphas, p, index.eta, positions=[1])
    check_topk(one.keys[0], one.distances[0], exp, 5, order=order, what="root 1")
    ids, ordered = index.ids_and_keys()
    id_of = dict(zip(ordered, ids.tolist()))
    assert one.ids[0] == [id_of[key] for key in one.keys[0]]


@pytest.mark.parametrize("p", [1, 1.5, 2, math.inf])
def test_approximate_search_ranks_its_candidates_by_their_exact_distance(make, kind, spec, p):
    """candidates=C, candidate_roots=1: the answer is the k nearest over
    both roots among the C nearest on root 0 (brute force on each), with
    exact distances; an answer marked certified is the exact k nearest. A
    sharded index takes C candidates in each shard: more than C, among
    them the C nearest of all."""
    index, measures, labels, keys = filled(make, p=p)
    model = reference_model(spec, index)
    alphas = {key: model.alphas(m) for key, m in measures.items()}
    queries = [measures[keys[5]]] + random_measures(np.random.default_rng(4), N_NODES, 3)
    k, n_candidates = 5, 12
    found = index.search(queries, k=k, candidates=n_candidates, candidate_roots=1)
    assert len(found.certified) == len(queries)
    slack = 1e-9
    for q, query in enumerate(queries):
        qa = model.alphas(query)
        full = expected_dists(model, qa, alphas, p, index.eta)
        first = expected_dists(model, qa, alphas, p, index.eta, positions=[0])
        last = sorted(first.values())[n_candidates - 1]
        # Candidates: surely those nearer than the C-th on root 0, maybe
        # those tied with it.
        maybe = {key for key, d in first.items() if d <= last * (1 + slack) + 1e-12}
        sure = {key for key, d in first.items() if d < last * (1 - slack) - 1e-12}
        got = found.keys[q]
        assert len(got) == k
        if kind == "single":
            assert set(got) <= maybe, f"query {q}: {got} are not all candidates"
        dists = found.distances[q]
        assert list(dists) == sorted(dists)
        for key, d in zip(got, dists):
            assert math.isclose(d, full[key], rel_tol=1e-10, abs_tol=1e-12)
        # No sure candidate left out is nearer than the k-th result.
        for key in sure - set(got):
            assert full[key] >= dists[-1] * (1 - slack) - 1e-12, (q, key)
        if found.certified[q]:
            check_topk(got, dists, full, k, what=f"certified query {q}")
    # Candidates that hold every document (also under where): the exact
    # answer, certified.
    everything = index.search(queries, k=k, candidates=len(keys), candidate_roots=1)
    assert everything.certified == [True] * len(queries)
    group = index.search(queries[:1], k=k, candidates=len(keys), candidate_roots=1,
                         where={"label": "group-2"})
    for q, query in enumerate(queries):
        exp = expected_dists(model, model.alphas(query), alphas, p, index.eta)
        check_topk(everything.keys[q], everything.distances[q], exp, k, what=f"all, query {q}")
        if q == 0:
            sub = {key: d for key, d in exp.items() if labels[key] == "group-2"}
            check_topk(group.keys[0], group.distances[0], sub, k, what="label group-2")
    # A stored key leads its copies, at distance 0 exactly, as in an exact
    # search (m62 repeats m11).
    own = index.search(["m62"], k=3, candidates=12, candidate_roots=1)
    assert own.keys[0][:2] == ["m62", "m11"] and list(own.distances[0][:2]) == [0.0, 0.0]
    # As many candidate roots as roots searched: the exact search, certified.
    exact = index.search(queries, k=k, candidates=k)
    assert exact.certified == [True] * len(queries)
    plain = index.search(queries, k=k)
    assert plain.certified is None and exact.keys == plain.keys


def test_a_stored_key_comes_first_among_its_copies(make):
    index, measures, labels, keys = filled(make)
    # m62 repeats m11, which has the lower id: the query's own key leads.
    found = index.search(["m62", "m11"], k=3)
    assert found.keys[0][:2] == ["m62", "m11"] and found.distances[0][1] == 0.0
    assert found.keys[1][:2] == ["m11", "m62"]
    # where leaves the key out: it is not brought back.
    found = index.search("m62", k=3, where={"keys": ["m11", "m5"]})
    assert "m62" not in found.keys[0] and found.keys[0][0] == "m11"


def test_radius_and_where_match_brute_force(make, spec):
    index, measures, labels, keys = filled(make)
    model = reference_model(spec, index)
    alphas = {key: model.alphas(m) for key, m in measures.items()}
    query = measures[keys[4]]
    exp = expected_dists(model, model.alphas(query), alphas, 1, index.eta)
    radius = sorted(exp.values())[12]
    found = index.search([query], radius=radius)
    within = {key for key, d in exp.items() if d <= radius * (1 - 1e-9)}
    assert within <= set(found.keys[0]) <= {k for k, d in exp.items() if d <= radius * (1 + 1e-9)}
    assert list(found.distances[0]) == sorted(found.distances[0])
    assert found.truncated == [False]
    capped = index.search([query], radius=radius, limit=3)
    assert capped.keys[0] == found.keys[0][:3] and capped.truncated == [True]
    group = index.search([query], k=5, where={"label": "group-2"})
    sub = {key: d for key, d in exp.items() if labels[key] == "group-2"}
    check_topk(group.keys[0], group.distances[0], sub, 5, what="label group-2")


def test_upsert_delete_and_compact(make, spec):
    index, measures, labels, keys = filled(make)
    replacement = measures[keys[50]]
    index.upsert([replacement], ["m0"], labels=["new"])
    assert index.get("m0")["label"] == "new"
    assert index.keys_in_order()[-1] == "m0"  # an upsert is a new document
    assert index.delete(["m1", "m2"]) == 2
    assert "m1" not in index and len(index) == len(keys) - 2
    found = index.search("m50", k=2)
    assert found.keys[0] == ["m50", "m0"] and found.distances[0][1] == 0.0
    before = index.search("m9", k=6)
    index.compact()
    after = index.search("m9", k=6)
    assert after.keys == before.keys
    assert np.array_equal(after.distances, before.distances)
    assert index.verify()["ok"]


def test_reserve_ids_and_explicit_ids(make):
    index = make()
    measures, _ = corpus()
    index.reserve_ids(100)
    assert index.next_id == 100
    index.add(measures[:2], keys=["a", "b"], ids=[120, 130])
    assert index.next_id == 131
    assert index.ids_and_keys()[0].tolist() == [120, 130]
    with pytest.raises(ValueError, match="ids 140 and 135"):
        index.add(measures[:2], keys=["c", "d"], ids=[140, 135])


def test_knn_graph_matches_brute_force(make, spec):
    index, measures, _, _ = filled(make)
    model = reference_model(spec, index)
    keys = index.keys_in_order()
    alphas = {key: model.alphas(measures[key]) for key in keys}
    graph = index.knn_graph(4)
    assert graph.shape == (len(keys), len(keys))
    for i in (0, 11, 62):
        exp = expected_dists(model, alphas[keys[i]], alphas, 1, index.eta)
        del exp[keys[i]]
        row = slice(graph.indptr[i], graph.indptr[i + 1])
        check_topk([keys[j] for j in graph.indices[row]], graph.data[row], exp, 4,
                   what=f"row {i}")


def test_a_reader_sees_commits_after_refresh(make):
    writer = make()
    measures, _ = corpus()
    writer.add(measures[:3], keys=["a", "b", "c"])
    reader = make.reopen("r")
    writer.add(measures[3:5], keys=["d", "e"])
    writer.delete(["a"])
    assert len(reader) == 3 and "a" in reader
    reader.refresh()
    assert len(reader) == 4 and "a" not in reader and "e" in reader
    assert reader.keys_in_order() == ["b", "c", "d", "e"]
    assert reader.info()["documents"] == 4


def test_open_index_refuses_options_of_the_other_kind(make, kind, tmp_path):
    make().close()
    if kind == "single":
        with pytest.raises(ValueError, match="client is given, but .* is not a sharded index"):
            open_index(tmp_path / "index", client=object())
        with pytest.raises(ValueError, match="task_timeout is 5"):
            open_index(tmp_path / "index", task_timeout=5)
    else:
        with pytest.raises(ValueError, match="is a sharded index: check its shards"):
            open_index(tmp_path / "index", check=True, client=make.client)
