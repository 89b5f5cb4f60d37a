"""Radius search (``SobolevIndex.search(queries, radius=r, limit=...)`` and
``search --radius``), checked against distances from ``reference.py``:
every live document within r is found, none beyond it, nearest first, at
its reference distance; a document at exactly the distance a search
reported is within that radius; ``limit`` keeps the nearest and says when
it cut; bad radii are refused by name."""
import json
import math

import numpy as np
import pytest
from _support.cli import run
from reference import ref_pairwise, ref_tree

from sobolev_index import Graph, SobolevIndex

N_NODES = 30
# p = 1, 2 and 1.5 take the inverted file's three kinds of arithmetic, inf
# its max bound, 20 the scan of large p.
P_VALUES = [1, 2, 1.5, math.inf, 20]


def _measures(n, seed):
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        nodes = rng.choice(N_NODES, size=int(rng.integers(1, 7)), replace=False)
        out.append((np.sort(nodes), rng.random(len(nodes)) + 0.05))
    return out


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """260 documents over 2 roots in three segments (two large enough for
    dense blocks), three copies of earlier ones (distance 0), one deleted,
    labels a/b; 12 new measures as queries."""
    rng = np.random.default_rng(5)
    graph = Graph.from_points(rng.normal(size=(N_NODES, 2)), n_nodes=N_NODES, edges="log", seed=2)
    measures = _measures(257, 6)
    measures += [measures[3], measures[3], measures[150]]
    keys = [f"d{i}" for i in range(260)]
    labels = ["a" if i % 3 else "b" for i in range(260)]
    path = tmp_path_factory.mktemp("radius") / "ix"
    with SobolevIndex.create(path, graph, roots=2, seed=4, on_violation="perturb") as index:
        for lo, hi in ((0, 100), (100, 200), (200, 260)):
            index.add(measures[lo:hi], keys=keys[lo:hi], labels=labels[lo:hi])
        index.delete(["d10"])
        roots, eta = index.roots.tolist(), index.eta.tolist()
    live = [i for i in range(260) if i != 10]
    trees = [ref_tree(graph.n_nodes, graph.edges, graph.lengths, r) for r in roots]
    queries = _measures(12, 7)
    return dict(path=path, measures=measures, keys=keys, labels=labels, live=live, trees=trees,
                eta=eta, queries=queries)


def _reference(built, queries, p, roots=None):
    """Reference distances, queries x live documents (sliced as the index)."""
    trees, eta = built["trees"], np.asarray(built["eta"])
    if roots is not None:
        trees = [trees[r] for r in roots]
        eta = eta[roots] / eta[roots].sum()
    docs = [built["measures"][i] for i in built["live"]]
    return ref_pairwise(queries, docs, trees, p, eta=list(eta))


def _check_within(result, reference, built, radius, rtol=1e-9, what=""):
    """Each query's results are exactly the live documents within the radius
    (up to rounding at its edge), at their reference distances, nearest first."""
    live_keys = [built["keys"][i] for i in built["live"]]
    for q in range(len(result.keys)):
        got = dict(zip(result.keys[q], result.distances[q].tolist()))
        assert len(got) == len(result.keys[q]), what
        assert (np.diff(result.distances[q]) >= 0).all(), what
        assert all(d <= radius for d in got.values()), what
        for j, key in enumerate(live_keys):
            d = reference[q, j]
            if d <= radius * (1 - rtol) - 1e-12:
                assert key in got, (what, q, key, d, radius)
            elif d > radius * (1 + rtol) + 1e-12:
                assert key not in got, (what, q, key, d, radius)
            if key in got:
                assert got[key] == pytest.approx(d, rel=rtol, abs=1e-12), (what, key)
        assert result.truncated[q] is False


@pytest.mark.parametrize("p", P_VALUES)
@pytest.mark.parametrize("roots", [None, [1]])
def test_every_document_within_the_radius_and_none_beyond(built, p, roots):
    reference = _reference(built, built["queries"], p, roots)
    # A radius around the 15th nearest of a typical query: some queries find
    # a few documents, others dozens.
    radius = float(np.median(np.sort(reference, axis=1)[:, 15]))
    with SobolevIndex.open(built["path"]) as index:
        result = index.search(built["queries"], radius=radius, p=p, roots=roots)
    assert result.radius == radius and isinstance(result.distances, list)
    assert 0 < sum(len(k) for k in result.keys) < reference.size
    _check_within(result, reference, built, radius, what=f"p={p}, roots={roots}")


@pytest.mark.parametrize("p", P_VALUES)
def test_a_document_at_exactly_a_reported_distance_is_within_it(built, p):
    """The k-th distance of a k-NN search, used as the radius, finds the k-th
    document (and every one before it), whatever the rounding of powers."""
    with SobolevIndex.open(built["path"]) as index:
        for roots in (None, [0]):
            knn = index.search(built["queries"], k=8, p=p, roots=roots)
            for q in range(len(built["queries"])):
                radius = float(knn.distances[q, 7])
                found = index.search([built["queries"][q]], radius=radius, p=p, roots=roots)
                assert set(knn.keys[q]) <= set(found.keys[0]), (p, roots, q)
                assert found.distances[0][-1] == radius


@pytest.mark.parametrize("p", [1, 2, 1.5, math.inf, 20])
def test_radius_zero_finds_the_copies_of_a_stored_document_itself_first(built, p):
    with SobolevIndex.open(built["path"]) as index:
        # d3 has copies d257 and d258; d150 one copy, d259.
        result = index.search(["d258", "d150", "d4"], radius=0, p=p)
        assert result.keys == [["d258", "d3", "d257"], ["d150", "d259"], ["d4"]]
        assert all((d == 0.0).all() for d in result.distances)
        # A copy given as a measure finds every stored copy, in insertion order.
        measure = built["measures"][3]
        assert index.search([measure], radius=0.0, p=p).keys == [["d3", "d257", "d258"]]


@pytest.mark.parametrize("p", [1, 2, math.inf, 20])
def test_limit_keeps_the_nearest_and_says_when_it_cut(built, p):
    reference = _reference(built, built["queries"], p)
    radius = float(np.median(np.sort(reference, axis=1)[:, 15]))
    with SobolevIndex.open(built["path"]) as index:
        full = index.search(built["queries"], radius=radius, p=p)
        for limit in (1, 5, 40, 10_000):
            cut = index.search(built["queries"], radius=radius, p=p, limit=limit)
            for q in range(len(built["queries"])):
                n = len(full.keys[q])
                assert cut.keys[q] == full.keys[q][:limit], (limit, q)
                np.testing.assert_array_equal(cut.distances[q], full.distances[q][:limit])
                assert cut.truncated[q] == (n > limit), (limit, q, n)
        # Cut to the limit, a radius search is the k-NN search of k = limit
        # within the radius.
        knn = index.search(built["queries"], k=5, p=p)
        cut = index.search(built["queries"], radius=radius, p=p, limit=5)
        for q in range(len(built["queries"])):
            n = len(cut.keys[q])
            assert cut.keys[q] == knn.keys[q][:n]
            assert n == 5 or knn.distances[q, n] > radius


def test_infinite_radius_returns_every_live_document_in_knn_order(built, parallel_everywhere):
    """More results than a thread's first list holds (256), in parallel."""
    queries = built["queries"] + [built["measures"][0], built["measures"][3]]
    with SobolevIndex.open(built["path"]) as index:
        n = len(index)
        knn = index.search(queries, k=n, p=1)
        for threads in (1, 2):
            every = index.search(queries, radius=math.inf, p=1, n_threads=threads)
            assert every.keys == knn.keys
            for q in range(len(queries)):
                np.testing.assert_array_equal(every.distances[q], knn.distances[q])
        assert not any(every.truncated)


def test_where_restricts_a_radius_search(built):
    reference = _reference(built, built["queries"], 1)
    radius = float(np.median(np.sort(reference, axis=1)[:, 40]))
    with SobolevIndex.open(built["path"]) as index:
        every = index.search(built["queries"], radius=radius, p=1)
        only_b = index.search(built["queries"], radius=radius, p=1, where={"label": "b"})
        some = index.search(built["queries"], radius=radius, p=1,
                            where={"keys": ["d1", "d2", "d99", "d10"]})
    label = dict(zip(built["keys"], built["labels"]))
    for q in range(len(built["queries"])):
        assert only_b.keys[q] == [k for k in every.keys[q] if label[k] == "b"]
        assert some.keys[q] == [k for k in every.keys[q] if k in ("d1", "d2", "d99")]


def test_a_radius_search_counts_what_it_read(built):
    reference = _reference(built, built["queries"], 1)
    small = float(np.sort(reference, axis=1)[:, 1].min())
    with SobolevIndex.open(built["path"]) as index:
        tight = index.search(built["queries"], radius=small, p=1).stats
        wide = index.search(built["queries"], radius=math.inf, p=1).stats
    rows = len(built["live"]) * len(built["queries"])
    assert tight["rows"] == wide["rows"] == rows
    # A small radius prunes most rows before their values; inf none.
    assert tight["exact"] < rows / 4
    assert wide["exact"] == rows


@pytest.mark.parametrize("radius", [-1, -0.5, float("nan"), "1", None, True, [1.0]])
def test_a_bad_radius_is_refused_by_name(built, radius):
    with SobolevIndex.open(built["path"]) as index:
        if radius is None:
            # No radius: a k-NN search, which a limit cannot go with.
            with pytest.raises(ValueError, match="limit is 5 without a radius"):
                index.search(built["queries"], radius=None, limit=5)
            return
        with pytest.raises(ValueError, match=r"radius is .*expected a number >= 0"):
            index.search(built["queries"], radius=radius)


def test_k_with_a_radius_and_bad_limits_are_refused(built):
    with SobolevIndex.open(built["path"]) as index:
        with pytest.raises(ValueError, match="give one of them"):
            index.search(built["queries"], k=5, radius=1.0)
        for limit in (0, -3, 2.5, True):
            with pytest.raises(ValueError, match="limit is"):
                index.search(built["queries"], radius=1.0, limit=limit)


def test_search_radius_on_the_command_line(built):
    path = built["path"]
    with SobolevIndex.open(path) as index:
        expected = index.search(["d3", "d40"], radius=0.2).to_records()
        cut = index.search(["d3"], radius=0.0, limit=1)
    out = json.loads(run("search", path, "--key", "d3", "--key", "d40", "--radius", "0.2",
                         "--json").stdout)
    assert out == expected
    table = run("search", path, "--key", "d3", "--radius", "0").stdout
    assert "d257" in table and "d258" in table and "0.0000" in table
    # d3 has two copies at distance 0: a limit of 1 must cut, and say so.
    assert cut.truncated == [True]
    limited = run("search", path, "--key", "d3", "--radius", "0", "--limit", "1").stdout
    assert "more within the radius" in limited and "d257" not in limited
    bad = run("search", path, "--key", "d3", "--radius", "-1", ok=False)
    assert bad.exit_code != 0 and "radius is -1.0; expected a number >= 0" in bad.output
    both = run("search", path, "--key", "d3", "--radius", "1", "-k", "3", ok=False)
    assert both.exit_code != 0 and "give one of them" in both.output
    nan = run("search", path, "--key", "d3", "--radius", "nan", ok=False)
    assert nan.exit_code != 0 and "radius is nan" in nan.output


@pytest.mark.parametrize("p", [1, 2, 1.5, 20, math.inf])
def test_a_radius_beyond_every_power_returns_every_document(built, p):
    """1e200 ** p overflows a float: the radius still means every document,
    as inf does, and so does an integer too large for a float."""
    with SobolevIndex.open(built["path"]) as index:
        everything = index.search(built["queries"], radius=math.inf, p=p)
        for radius in (1e200, 10 ** 400):
            huge = index.search(built["queries"], radius=radius, p=p)
            assert huge.keys == everything.keys
            limited = index.search(built["queries"], radius=radius, p=p, limit=3)
            assert [keys[:3] for keys in everything.keys] == limited.keys
            assert all(limited.truncated)
        assert len(index.duplicates(1e200, p=p)) == 1


def test_a_query_with_nothing_within_the_radius_gets_an_empty_row(built):
    with SobolevIndex.open(built["path"]) as index:
        result = index.search(built["queries"][:2], radius=0.0)
    assert result.keys == [[], []] and [len(d) for d in result.distances] == [0, 0]
    assert result.to_records() == [[], []]
