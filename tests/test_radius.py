"""Radius search (``SobolevIndex.search(queries, radius=r, limit=...)`` and
``search --radius``), checked against distances from ``reference.py``:
every live document within r is found, none beyond it, nearest first, at
its reference distance; a document at exactly the distance a search
reported is within that radius; ``limit`` keeps the nearest and says when
it cut; bad radii are refused by name. One radius per query (an array)
finds, query by query, what a search with that query's radius alone
finds, and with a limit of k the k nearest within each query's bound."""
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
    (a number, or one per query; up to rounding at its edge), at their
    reference distances, nearest first."""
    live_keys = [built["keys"][i] for i in built["live"]]
    radii = np.broadcast_to(np.asarray(radius, dtype=float), (len(result.keys),))
    for q in range(len(result.keys)):
        radius = float(radii[q])
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
@pytest.mark.slow
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


@pytest.mark.parametrize("radius", [-1, -0.5, float("nan"), "1", None, True, b"1", {1.0}])
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
@pytest.mark.slow
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


# ------------------------------------------------------------ one radius per query
def _radii(reference, seed):
    """One radius per query, at a different rank of its reference distances
    each (a few documents to dozens), with 0 and inf among them."""
    rng = np.random.default_rng(seed)
    ordered = np.sort(reference, axis=1)
    radii = ordered[np.arange(len(reference)), rng.integers(0, 60, size=len(reference))]
    radii = radii * rng.uniform(0.999, 1.001, size=len(radii))  # not always at a distance
    radii[2], radii[5] = 0.0, math.inf
    return radii


def _assert_same(a, b, what):
    """Identical keys, labels, ids and distances, query by query."""
    assert a.keys == b.keys and a.labels == b.labels and a.ids == b.ids, what
    assert a.truncated == b.truncated, what
    for x, y in zip(a.distances, b.distances):
        np.testing.assert_array_equal(x, y, err_msg=what)


@pytest.mark.parametrize("p", [1, 2, math.inf, 20])
@pytest.mark.parametrize("roots", [None, [1]])
def test_radii_per_query_find_what_each_query_finds_alone(built, p, roots):
    """Against the reference distances, and query by query against a search
    of that query alone with its own radius (scalar), with and without a
    limit and ``where``; several roots (sliced) and one; the scan of p = 20."""
    queries = built["queries"]
    reference = _reference(built, queries, p, roots)
    radii = _radii(reference, 1)
    with SobolevIndex.open(built["path"]) as index:
        result = index.search(queries, radius=radii, p=p, roots=roots)
        assert isinstance(result.radius, np.ndarray) and result.radius.dtype == np.float64
        np.testing.assert_array_equal(result.radius, radii)
        _check_within(result, reference, built, radii, what=f"p={p}, roots={roots}")
        assert result.keys[5] and len(result.keys[5]) == len(built["live"])  # inf: all
        sizes = [len(keys) for keys in result.keys]
        assert len(set(sizes)) > 4, sizes  # the radii really differ
        for limit, where in ((None, None), (4, None), (None, {"label": "b"}),
                             (3, {"label": ["a"]})):
            per_query = index.search(queries, radius=radii.tolist(), p=p, roots=roots,
                                     limit=limit, where=where)
            for q, (query, radius) in enumerate(zip(queries, radii)):
                alone = index.search([query], radius=float(radius), p=p, roots=roots,
                                     limit=limit, where=where)
                assert per_query.keys[q] == alone.keys[0], (limit, where, q)
                assert per_query.ids[q] == alone.ids[0], (limit, where, q)
                assert per_query.truncated[q] == alone.truncated[0], (limit, where, q)
                np.testing.assert_array_equal(per_query.distances[q], alone.distances[0])
            if limit is not None:
                assert any(per_query.truncated), (limit, where)


@pytest.mark.parametrize("p", [1, 2, math.inf, 20])
def test_radii_per_query_do_not_depend_on_the_threads(built, p, parallel_everywhere):
    reference = _reference(built, built["queries"], p)
    radii = _radii(reference, 2)
    with SobolevIndex.open(built["path"]) as index:
        for limit in (None, 5):
            one, two = (index.search(built["queries"], radius=radii, p=p, limit=limit,
                                     n_threads=threads) for threads in (1, 2))
            _assert_same(one, two, f"p={p}, limit={limit}")
        # A single query: its segments are cut into row ranges, searched in
        # parallel, each starting from the query's radius.
        for q in (0, 3):
            one, two = (index.search([built["queries"][q]], radius=radii[q:q + 1], p=p,
                                     n_threads=threads) for threads in (1, 2))
            _assert_same(one, two, f"p={p}, query {q}")


@pytest.mark.parametrize("p", [1, 2, 1.5, math.inf, 20])
@pytest.mark.parametrize("roots", [None, [0]])
def test_the_k_nearest_within_a_bound_per_query(built, p, roots):
    """With a limit of k, radius b_q gives the first entries of the plain
    k-NN result whose distance is at most b_q: what a shard needs given the
    k-th distance the shards before it found."""
    queries = built["queries"] + [built["measures"][3]]  # d3 has two copies
    k = 6
    rng = np.random.default_rng(3)
    with SobolevIndex.open(built["path"]) as index:
        knn = index.search(queries, k=k, p=p, roots=roots)
        farthest = float(knn.distances[:, -1].max())
        bounds = rng.uniform(0.0, 1.2 * farthest, size=len(queries))
        # A bound exactly at a k-NN distance (ties at it are kept), below
        # every result, and none.
        bounds[0], bounds[1] = knn.distances[0, 2], knn.distances[1, k - 1]
        bounds[2], bounds[3] = 0.5 * knn.distances[2, 0], math.inf
        bounds[-1] = 0.0
        within = index.search(queries, radius=bounds, limit=k, p=p, roots=roots)
    seen = set()
    for q, bound in enumerate(bounds):
        n = int(np.count_nonzero(knn.distances[q] <= bound))
        seen.add(n)
        assert within.keys[q] == knn.keys[q][:n], (q, bound)
        assert within.ids[q] == knn.ids[q][:n], (q, bound)
        np.testing.assert_array_equal(within.distances[q], knn.distances[q][:n])
        # A k-NN result has no more than k; the limit cut only if the k-th
        # distance is within the bound (and more lie within it).
        assert not within.truncated[q] or n == k
    assert within.keys[-1] == ["d3", "d257", "d258"]
    assert {0, k} < seen, seen  # empty, full and partial rows were all checked


def test_stored_keys_with_radii_per_query_come_first(built):
    with SobolevIndex.open(built["path"]) as index:
        result = index.search(["d258", "d150", "d4"], radius=[0.0, math.inf, 0.0], p=1)
        assert result.keys[0] == ["d258", "d3", "d257"]
        assert result.keys[1][0] == "d150" and len(result.keys[1]) == len(built["live"])
        assert result.keys[2] == ["d4"]
        limited = index.search(["d258", "d150"], radius=np.array([0.0, 0.0]), limit=1, p=1)
        assert limited.keys == [["d258"], ["d150"]] and limited.truncated == [True, True]


def test_the_radius_array_given_is_copied(built):
    radii = np.full(len(built["queries"]), 0.3)
    with SobolevIndex.open(built["path"]) as index:
        result = index.search(built["queries"], radius=radii)
    radii[:] = -1.0
    assert (result.radius == 0.3).all()
    assert "radius=per query" in repr(result)


@pytest.mark.parametrize("radius, match", [
    ([1.0], r"radius has 1 value\(s\) for 12 queries; expected one radius per query"),
    ([0.5] * 13, r"radius has 13 value\(s\) for 12 queries"),
    (np.zeros(0), r"radius has 0 value\(s\) for 12 queries"),
    (np.ones((12, 1)), r"radius is .*of shape \(12, 1\); expected a number >= 0, or a 1-D"),
    (np.array(0.5), r"of shape \(\); expected a number >= 0, or a 1-D"),
    ([[1.0], [1.0, 2.0]], r"of shape ragged"),
    ([0.1] * 4 + [float("nan")] + [0.1] * 7, r"radius\[4\] is nan; expected a number >= 0"),
    (np.array([0.1] * 11 + [np.nan]), r"radius\[11\] is nan; expected a number >= 0"),
    (np.array([0.1, -2.0] + [0.1] * 10), r"radius\[1\] is -2.0; expected a number >= 0"),
    ([0.1] * 11 + [-1], r"radius\[11\] is -1.0; expected a number >= 0"),
    (["1"] * 12, r"radius\[0\] is '1'; expected a number >= 0"),
    (np.array(["1"] * 12), r"radius\[0\] is np.str_\('1'\)|radius\[0\] is '1'"),
    ([0.1] * 11 + [True], r"radius\[11\] is True; expected a number >= 0"),
    ("1", r"radius is '1'; expected a number >= 0"),
])
def test_a_bad_radius_per_query_is_refused_by_name(built, radius, match):
    with SobolevIndex.open(built["path"]) as index:
        with pytest.raises(ValueError, match=match):
            index.search(built["queries"], radius=radius)
        with pytest.raises(ValueError, match=match):
            index.search(built["queries"], radius=radius, p=20)  # the scan


def test_the_checks_a_sharded_index_shares():
    """checked_search_args checks the values before the queries are known;
    radius_for_queries their number once they are."""
    from sobolev_index.index.arguments import checked_search_args, radius_for_queries

    k, radius = checked_search_args(None, [0.5, math.inf, 10 ** 400], 3)
    assert k is None and radius.dtype == np.float64
    assert radius.tolist() == [0.5, math.inf, math.inf]
    assert radius_for_queries(radius, 3) is radius
    assert radius_for_queries(0.5, 7) == 0.5
    with pytest.raises(ValueError, match=r"radius has 3 value\(s\) for 2 queries"):
        radius_for_queries(radius, 2)
    # A number keeps its type and messages.
    assert checked_search_args(None, 2, None) == (None, 2.0)
    with pytest.raises(ValueError, match=r"^radius is -1.0; expected a number >= 0"):
        checked_search_args(None, -1, None)
    with pytest.raises(ValueError, match=r"k is 3 and radius is a list of 20 values; give one"):
        checked_search_args(3, [1.0] * 20, None)


def test_the_kernel_refuses_a_bound_of_the_wrong_length_or_value():
    from sobolev_index.index import _inverted_search

    def call(bound, n_q=2):
        out = [np.empty((n_q, 1)), *(np.empty((n_q, 1), dtype=np.int64) for _ in range(3))]
        return _inverted_search.search_segments(
            [], [], np.zeros(0, np.uint8), np.zeros(n_q + 1, np.int64), np.zeros(0, np.int32),
            np.zeros(0), n_q, np.zeros(1, np.int64), np.ones(1), 1, 1.0, 64, 8, *out, [],
            np.zeros(0, np.int32), bound=bound)

    call(np.array([0.0, math.inf]))
    call(None)
    with pytest.raises(ValueError, match=r"bound is a float64 array of shape \(3,\); "
                                         r"expected float64 of shape \(2,\)"):
        call(np.zeros(3))
    with pytest.raises(ValueError, match=r"bound\[1\] is nan; expected a value >= 0"):
        call(np.array([1.0, np.nan]))
    with pytest.raises(ValueError, match=r"bound\[0\] is -1.0; expected a value >= 0"):
        call(np.array([-1.0, 1.0]))
    with pytest.raises(ValueError, match="bound is a float32 array"):
        call(np.zeros(2, np.float32))


@pytest.mark.parametrize("limit", [None, 50])
def test_each_query_prunes_with_its_own_radius(built, limit):
    """A small radius prunes its query's rows before their values, an
    infinite one in the same batch none: each query's threshold starts at
    its own radius."""
    queries = built["queries"]
    reference = _reference(built, queries, 1)
    radii = np.sort(reference, axis=1)[:, 1].copy()
    radii[[1, 6]] = math.inf
    with SobolevIndex.open(built["path"]) as index:
        per_query = index.search(queries, radius=radii, p=1, limit=limit, stats=True)
    rows = len(built["live"])
    exact = [q["exact"] for q in per_query.stats["queries"]]
    for q, n in enumerate(exact):
        if math.isinf(radii[q]):
            assert n >= min(rows, 51 if limit else rows), (q, exact)
        else:
            assert n < rows / 4, (q, exact)
