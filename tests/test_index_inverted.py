"""The inverted-file search must return exactly what a brute-force scan returns.

The module constants are lowered so that test-sized segments exercise every
path: dense columns with their group bounds, many row chunks per query,
several row ranges per query (single queries), more tied candidates than
places, and k-th values carried from one segment or range to another. Expected results come from
``pairwise_sobolev`` on freshly computed features, which shares no code with
the inverted file.
"""
import itertools
import os
import sqlite3

import numpy as np
import pytest

import sobolev_index.index.inverted as inverted_module
from sobolev_index import CorruptIndexError, Graph, SobolevIndex, pairwise_sobolev
from sobolev_index.index.storage import file_checksum

LAYOUTS = {
    # Dense columns in every segment, 4 groups, 64-row chunks, and single
    # queries split into ranges of 32-row blocks (ranges start mid-chunk).
    "dense-small-chunks": dict(DENSE_MIN_ROWS=16, DENSE_MIN_FRACTION=0.3, DENSE_GROUPS=4,
                               CHUNK=64, RANGE_BLOCK_ROWS=32),
    # Only postings; ranges of 128-row blocks, chunks of 128 rows.
    "postings-only": dict(DENSE_MIN_FRACTION=2.0, CHUNK=128, RANGE_BLOCK_ROWS=128),
    # One column per group: the group bound is the exact dense part.
    "dense-exact-groups": dict(DENSE_MIN_ROWS=16, DENSE_MIN_FRACTION=0.1, DENSE_GROUPS=1000),
}


def _apply(monkeypatch, layout):
    for name, value in LAYOUTS[layout].items():
        assert hasattr(inverted_module, name), name
        monkeypatch.setattr(inverted_module, name, value)


@pytest.fixture(params=sorted(LAYOUTS))
def topic_index(tmp_path, monkeypatch, request):
    _apply(monkeypatch, request.param)
    rng = np.random.default_rng(7)
    anchors = rng.normal(size=(6, 5)) * 4
    points = np.concatenate([a + rng.normal(size=(80, 5)) for a in anchors])
    graph = Graph.from_points(points, n_nodes=150, edges="log", seed=3)
    topic_nodes = [np.unique(graph.assignment[i * 80:(i + 1) * 80]) for i in range(6)]
    measures = []
    for i in range(700):
        pick = rng.choice(topic_nodes[i % 6], size=rng.integers(2, 12))
        measures.append((pick, rng.random(len(pick)) + 0.1))
    index = SobolevIndex.create(tmp_path / "idx", graph, roots=3, seed=1)
    keys = index.add(measures[:300], labels=[str(i % 6) for i in range(300)])
    keys += index.add(measures[300:], labels=[str(i % 6) for i in range(300, 700)])
    if request.param != "postings-only":
        assert all(s.data.inverted["dense_ptr"][-1] > 0 for s in index._segments)
    yield index, measures, keys
    index.close()


def brute_force(index, measures, alive, queries, p, positions):
    trees = [index.trees[r] for r in positions]
    F = [t.features_of(measures) for t in trees]
    Q = [t.features_of(queries) for t in trees]
    D = pairwise_sobolev(Q, F, trees=trees, p=p, eta=index.eta[positions])
    D[:, ~alive] = np.inf
    return D


def check(result, D, keys, alive, k):
    for i in range(D.shape[0]):
        expected = np.sort(D[i])[:k]
        np.testing.assert_allclose(result.distances[i], expected, rtol=1e-10, atol=1e-14)
        for key, dist in zip(result.keys[i], result.distances[i]):
            j = keys.index(key)
            assert alive[j]
            assert D[i, j] == pytest.approx(dist, rel=1e-10, abs=1e-14)


@pytest.mark.parametrize("p", [1, 2, 1.5, 3, np.inf])
@pytest.mark.parametrize("positions", [[0], [0, 1, 2]])
def test_search_equals_brute_force(topic_index, p, positions):
    index, measures, keys = topic_index
    index.delete(keys[::7])
    alive = np.ones(len(keys), dtype=bool)
    alive[::7] = False
    queries = measures[1:40:3] + [(np.array([0, 5, 9]), np.array([1.0, 2.0, 3.0]))]
    D = brute_force(index, measures, alive, queries, p, positions)
    check(index.search(queries, k=9, p=p, roots=positions), D, keys, alive, 9)
    # One query at a time: the rows are split into ranges between threads.
    for q in range(0, len(queries), 5):
        result = index.search(queries[q:q + 1], k=4, p=p, roots=positions, n_threads=2)
        check(result, D[q:q + 1], keys, alive, 4)


def test_label_filter_and_thread_counts_agree(topic_index, parallel_everywhere):
    index, measures, keys = topic_index
    queries = measures[5:25]
    labels = np.array([str(i % 6) for i in range(len(keys))])
    for p in (1, 2):
        one = index.search(queries, k=5, p=p, where={"label": "2"}, n_threads=1)
        two = index.search(queries, k=5, p=p, where={"label": "2"}, n_threads=2)
        assert one.keys == two.keys
        assert np.array_equal(one.distances, two.distances)
        D = brute_force(index, measures, labels == "2", queries, p, [0, 1, 2])
        check(one, D, keys, labels == "2", 5)
        single_one = index.search(queries[:1], k=5, p=p, n_threads=1)
        single_two = index.search(queries[:1], k=5, p=p, n_threads=2)
        assert single_one.keys == single_two.keys
        assert np.array_equal(single_one.distances, single_two.distances)


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_near_duplicates_are_found_exactly(tmp_path, monkeypatch, layout):
    # Rows 1e-9 (relative) from the query: the k-th distance is tiny next to
    # the norms that the shared-column identity cancels.
    _apply(monkeypatch, layout)
    rng = np.random.default_rng(11)
    graph = Graph.from_points(rng.normal(size=(400, 4)), n_nodes=80, seed=2)
    base_nodes = rng.choice(80, size=10, replace=False)
    base_masses = rng.random(10) + 0.5
    measures = [(base_nodes, base_masses * (1 + 1e-9 * rng.normal(size=10))) for _ in range(300)]
    measures += [(rng.choice(80, size=6), rng.random(6) + 0.1) for _ in range(300)]
    with SobolevIndex.create(tmp_path / "idx", graph, roots=2, seed=0) as index:
        keys = index.add(measures)
        for p in (1, 2, 3, np.inf):
            for positions in ([0], [0, 1]):
                result = index.search([(base_nodes, base_masses)], k=5, p=p, roots=positions)
                D = brute_force(index, measures, np.ones(600, bool),
                                [(base_nodes, base_masses)], p, positions)
                order = np.lexsort((np.arange(600), D[0]))[:5]
                np.testing.assert_allclose(result.distances[0], D[0, order], rtol=1e-6)
                assert all(keys.index(k) < 300 for k in result.keys[0])


@pytest.mark.parametrize("p", [1, 2, 3, np.inf])
def test_more_ties_than_candidate_slots(tmp_path, monkeypatch, p):
    # 200 identical rows tie at distance 0, far more than the 28 candidate
    # places a row range has (4 k): the full list is settled at once, again
    # and again, and ties go to the lowest document ids.
    _apply(monkeypatch, "dense-small-chunks")
    monkeypatch.setattr(inverted_module, "MIN_CANDIDATES", 8)
    rng = np.random.default_rng(5)
    graph = Graph.from_points(rng.normal(size=(200, 3)), n_nodes=40, seed=1)
    measures = [([4, 5], None)] * 3 + [([1, 2, 3], [0.2, 0.3, 0.5])] * 200 + [([4, 6], None)] * 5
    with SobolevIndex.create(tmp_path / "idx", graph, seed=0) as index:
        keys = index.add(measures)
        result = index.search([([1, 2, 3], [0.2, 0.3, 0.5])], k=7, p=p)
        assert result.distances[0].tolist() == [0.0] * 7
        assert result.keys[0] == keys[3:10]
        single = index.search([([1, 2, 3], [0.2, 0.3, 0.5])], k=7, p=p, n_threads=2)
        assert single.keys == result.keys


@pytest.mark.parametrize("array,damage", [
    ("post_rows", "row-out-of-range"),
    ("post_rows", "descending"),
    ("ptr", "decreasing"),
    ("dense", "wrong-shape"),
    ("dense_columns", "out-of-range"),
    ("post_values", "outside-0-1"),
    ("dense", "outside-0-1"),
    ("post_values", "float64"),
    ("block_start", "off-by-one"),
    ("block_start", "missing-table"),
    ("norm_low", "nan"),
    ("norm_high", "wrong-shape"),
    ("norm_p", "below-1"),
    ("ptr", "float-nan"),
    ("dense_columns", "float"),
    ("block_start", "float"),
    ("norm_low", "float32"),
    ("norm_high", "int"),
    ("norm_p", "nan-with-norms"),
    ("block_rows", "not-a-divisor"),
    ("block_start", "past-the-list"),
    ("ptr", "unsigned-nonmonotone"),
    ("dense_ptr", "unsigned"),
    ("norm_group", "nan"),
    ("norm_coarse", "negative"),
    ("norm_group", "wrong-shape"),
    ("group_labels", "out-of-range"),
    ("coarse_labels", "out-of-range"),
    ("group_labels", "missing-one"),
    ("slot_list", "out-of-range"),
    ("slot_list", "negative"),
    ("slot_list", "wrong-shape"),
    ("slot_list", "float"),
    ("slot_list", "missing"),
    ("slot_list", "dense-column-with-postings"),
])
@pytest.mark.slow
def test_malformed_inverted_file_is_reported(tmp_path, monkeypatch, array, damage):
    # Arrays read from a file reach unchecked loops; a malformed one must be
    # a CorruptIndexError, never a crash or a wrong answer.
    _apply(monkeypatch, "dense-small-chunks")
    rng = np.random.default_rng(3)
    graph = Graph.from_points(rng.normal(size=(200, 3)), n_nodes=40, seed=1)
    measures = [(rng.choice(40, size=5), None) for _ in range(100)]
    with SobolevIndex.create(tmp_path / "idx", graph, seed=0) as index:
        index.add(measures)
        segment = index._segments[0]
        arrays = {name: np.array(values) for name, values in segment.data.inverted.items()}
        # (With 32-row ranges, the 100 rows have a table of range starts.)
        assert arrays["block_start"].shape[1] == 5
        if damage == "row-out-of-range":
            arrays["post_rows"][3] = 100
        elif damage == "descending":
            start = int(np.flatnonzero(np.diff(arrays["ptr"]) >= 2)[0])
            at = arrays["ptr"][start]
            rows = arrays["post_rows"]
            rows[at], rows[at + 1] = rows[at + 1], rows[at]
        elif damage == "decreasing":
            arrays["ptr"][5] = arrays["ptr"][6] + 1
        elif damage == "wrong-shape":
            arrays[array] = arrays[array][:-1]
        elif damage == "missing":
            del arrays[array]
        elif damage == "dense-column-with-postings":
            # A dense column's slot made to read a list with postings.
            dense_slot = int(arrays["dense_columns"][0])
            arrays[array][dense_slot] = int(np.flatnonzero(np.diff(arrays["ptr"]))[0])
        elif array == "slot_list" and damage == "out-of-range":
            arrays[array][7] = len(arrays["ptr"]) - 1
        elif array == "slot_list" and damage == "negative":
            arrays[array][7] = -1
        elif damage == "outside-0-1":
            # The float32 rounding allowance holds for edge masses in [0, 1].
            assert arrays[array].size
            arrays[array].reshape(-1)[0] = 1.5 if array == "post_values" else -0.25
        elif damage == "float64":
            arrays[array] = arrays[array].astype(np.float64)
        elif damage == "off-by-one":
            # A list said to enter a range one posting later than it does.
            lists = np.flatnonzero(arrays["block_start"][:, 2] < arrays["block_start"][:, 3])
            arrays["block_start"][lists[0], 2] += 1
        elif damage == "missing-table":
            arrays["block_start"] = arrays["block_start"][:, :0]
        elif damage == "nan":
            arrays[array][0, 7 if array == "norm_low" else 0] = np.nan
        elif damage == "negative":
            arrays[array][0, 7] = -1.0
        elif damage == "missing-one":
            # Group labels without the rest of what is stored with them.
            del arrays["norm_coarse"]
        elif damage == "below-1":
            arrays[array][0] = 0.5
        elif damage == "float-nan":
            arrays[array] = arrays[array].astype(np.float64)
            arrays[array][5] = np.nan
        elif damage == "float":
            arrays[array] = arrays[array].astype(np.float64)
        elif damage == "float32":
            arrays[array] = arrays[array].astype(np.float32)
        elif damage == "int":
            arrays[array] = arrays[array].astype(np.int64)
        elif damage == "nan-with-norms":
            # No p for the stored norms, yet norms are there: not what build writes.
            arrays[array][0] = np.nan
        elif damage == "not-a-divisor":
            arrays[array][0] = 3000
        elif damage == "past-the-list":
            # The last list with postings in its first range, said to end
            # that range far past every posting: nothing may be read before
            # the table is found wrong.
            c = int(np.flatnonzero(arrays[array][:, 1] > arrays[array][:, 0])[-1])
            arrays[array][c, 1] = arrays["ptr"][-1] + 10**6
        elif damage == "unsigned-nonmonotone":
            # Unsigned pointers never have a negative difference: a list
            # said to start 2^40 postings in must not be read.
            arrays[array] = arrays[array].astype(np.uint64)
            arrays[array][5], arrays[array][6] = 2**40, 2**40 + 10
        elif damage == "unsigned":
            arrays[array] = arrays[array].astype(np.uint64)
        elif array == "group_labels":
            arrays[array][-1] = 10**6
        elif array == "coarse_labels":
            arrays[array][0] = 4  # root 0's coarse groups are 0..3
        else:
            arrays["dense_columns"][0] = 40
        segment.data.inverted = arrays
        segment._inverted = None
        # Every stored measure as a query: every posting list is read (a
        # search checks the lists it reads, at first use).
        with pytest.raises(CorruptIndexError, match="inverted file"):
            index.search(measures, k=3, p=1)


def test_stored_group_norms_are_what_a_search_would_compute(tmp_path):
    """Segments store each row's group norms for the index's p (a search at
    that p maps them instead of computing them from the dense block); a
    segment without them, as written before, computes them and answers the
    same, bit for bit."""
    import h5py

    from sobolev_index.index import inverted

    rng = np.random.default_rng(8)
    graph = Graph.from_points(rng.normal(size=(300, 3)), n_nodes=60, seed=1)
    measures = [(rng.choice(60, size=6), rng.random(6) + 0.1) for _ in range(400)]
    queries = [(rng.choice(60, size=5), rng.random(5) + 0.1) for _ in range(8)]
    path = tmp_path / "idx"
    with SobolevIndex.create(path, graph, roots=2, seed=0, p=2) as index:
        index.add(measures)
        inv = index._segments[0].inverted_file(index.trees, index._edge_weight)
        assert inv.stored_group_norms is not None and inv.dense.shape[1] > 0
        group_of, coarse_of = inverted.dense_groups(index.trees, inv._arrays["dense_columns"],
                                                    inv.dense_ptr)
        assert np.array_equal(group_of, inv.group_of)
        assert np.array_equal(coarse_of, inv.coarse_of)
        group, coarse = inv.group_norms(2.0)
        assert np.array_equal(group, inv.stored_group_norms[1])
        assert np.array_equal(coarse, inv.stored_group_norms[0])
        # At the index's p the norms come from the file, not the dense block.
        inv._norms.clear()
        computed = inv.group_norms
        inv.group_norms = lambda p: pytest.fail(f"group norms computed at p = {p}")
        inv.row_norms(2.0)
        inv.group_norms = computed
        inv._norms.clear()
        before = {p: index.search(queries, k=5, p=p) for p in (1, 2, np.inf)}
        # A label moved to another group of its root (in range, so only a
        # comparison with the trees' grouping can tell): the stored norms
        # are not used, and the answers stay exact.
        segment = index._segments[0]
        arrays = {name: np.array(values) for name, values in segment.data.inverted.items()}
        labels = arrays["group_labels"]
        h = int(np.flatnonzero(labels != labels[0])[0])
        labels[h] = labels[0]
        segment.data.inverted = arrays
        segment._inverted = None
        inv = segment.inverted_file(index.trees, index._edge_weight)
        assert inv.stored_groups_differ and inv.stored_group_norms is None
        for p, result in before.items():
            again = index.search(queries, k=5, p=p)
            assert again.keys == result.keys
            assert np.array_equal(again.distances, result.distances)
    segment = path / "segments" / os.listdir(path / "segments")[0]
    with h5py.File(segment, "r+") as f:
        for name in inverted.GROUP_ARRAYS:
            del f[f"inverted/{name}"]
    with sqlite3.connect(path / "catalog.sqlite") as db:
        db.execute("UPDATE segments SET checksum = ?", (file_checksum(str(segment)),))
    db.close()
    with SobolevIndex.open(path) as index:
        inv = index._segments[0].inverted_file(index.trees, index._edge_weight)
        assert inv.stored_group_norms is None
        for p, result in before.items():
            again = index.search(queries, k=5, p=p)
            assert again.keys == result.keys
            assert np.array_equal(again.distances, result.distances)
        assert index.verify()["ok"]


@pytest.mark.parametrize("roots", [1, 3])
def test_a_damaged_posting_list_is_found_when_a_search_reads_it(tmp_path, roots):
    """Posting lists are checked when a search first reads them: a search
    that does not read the damaged list gives the undamaged answer, one
    that reads it raises, and checking every list finds it. With several
    roots the damaged list is one of the last root's, which other slots may
    share: a search reads it when the query has any of them."""
    rng = np.random.default_rng(5)
    graph = Graph.from_points(rng.normal(size=(200, 3)), n_nodes=40, seed=1)
    measures = [(rng.choice(40, size=3, replace=False), None) for _ in range(100)]
    with SobolevIndex.create(tmp_path / "idx", graph, roots=roots, seed=0) as index:
        index.add(measures)
        inv = index._segments[0].inverted_file(index.trees, index._edge_weight)
        # A posted column of the last root, and queries that avoid it there.
        r = roots - 1
        slots = r * inv.n_cols + np.arange(inv.n_cols)
        lists = inv.slot_list[slots]
        lengths = inv.ptr[lists + 1] - inv.ptr[lists]
        column = int(np.flatnonzero((lengths > 0) & (inv.col_slot[slots] < 0))[-1])
        damaged = int(lists[column])
        sharing = set(np.flatnonzero(inv.slot_list == damaged).tolist())
        features = [index.trees[t].features_of(measures) for t in range(roots)]

        def reads(i):
            return any(t * inv.n_cols + c in sharing
                       for t in range(roots) for c in features[t][i].indices.tolist())

        avoiding = [m for i, m in enumerate(measures) if not reads(i)]
        reading = [m for i, m in enumerate(measures) if reads(i)]
        assert avoiding and reading
        before = index.search(avoiding[:5], k=4, p=1)
        segment = index._segments[0]
        arrays = {name: np.array(values) for name, values in segment.data.inverted.items()}
        arrays["post_values"][inv.ptr[damaged]] = 7.5
        segment.data.inverted = arrays
        segment._inverted = None
        after = index.search(avoiding[:5], k=4, p=1)
        assert after.keys == before.keys
        assert np.array_equal(after.distances, before.distances)
        with pytest.raises(CorruptIndexError, match=f"posting list {damaged} "):
            index.search(reading[:1], k=4, p=1)
        with pytest.raises(CorruptIndexError, match="inverted file"):
            segment.inverted_file(index.trees, index._edge_weight).check_lists()


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("n_groups", [1, 3, 16])
def test_subtree_groups_are_pieces_of_the_tree(seed, n_groups):
    # Any partition gives a valid bound; these check that the groups are
    # what the bound's tightness relies on: connected pieces of the tree.
    rng = np.random.default_rng(seed)
    n = 200
    parent = np.array([-1] + [int(rng.integers(0, v)) for v in range(1, n)])
    # A dense part is closed upwards (an edge's parent edge is in at least
    # as many rows), except at the root, which has no edge.
    chosen = set()
    for v in rng.choice(np.arange(1, n), size=40, replace=False):
        while v > 0 and int(v) not in chosen:
            chosen.add(int(v))
            v = parent[v]
    columns = np.array(sorted(chosen))
    labels = inverted_module.subtree_groups(parent, columns, n_groups)
    assert labels.shape == columns.shape
    assert set(labels.tolist()) == set(range(labels.max() + 1))
    tops = [c for c in columns if parent[c] not in chosen]
    if len(tops) > 2 * n_groups:
        assert labels.max() + 1 == 2 * n_groups
        return
    assert labels.max() + 1 <= max(n_groups, len(tops))
    label_of = dict(zip(columns.tolist(), labels.tolist()))
    for g in range(labels.max() + 1):
        members = [c for c in columns if label_of[c] == g]
        entry = [c for c in members if label_of.get(int(parent[c])) != g]
        assert len(entry) == 1, (g, members)


def test_segment_longer_than_one_block_of_row_offsets(tmp_path):
    # Postings keep row offsets within 65,536-row blocks: a segment of more
    # rows has lists that run on into the next block, where offsets start
    # again at 0, and chunks and row ranges that end at the block boundary.
    rng = np.random.default_rng(17)
    graph = Graph.from_points(rng.normal(size=(300, 3)), n_nodes=30, seed=4)
    n = 70_000
    sizes = rng.integers(1, 4, size=n)
    indptr = np.concatenate([[0], np.cumsum(sizes)])
    nodes = rng.integers(0, 30, size=indptr[-1])
    masses = rng.random(indptr[-1]) + 0.05
    measures = [(nodes[indptr[i]:indptr[i + 1]], masses[indptr[i]:indptr[i + 1]])
                for i in range(n)]
    with SobolevIndex.create(tmp_path / "idx", graph, seed=0) as index:
        keys = index.add(measures)
        assert [s.rows for s in index._segments] == [n]
        queries = [measures[i] for i in (3, 65_530, 65_537, 69_999)] + [([7, 8, 9], None)]
        alive = np.ones(n, dtype=bool)
        for p in (1, 2, 3):
            D = brute_force(index, measures, alive, queries, p, [0])
            check(index.search(queries, k=6, p=p), D, keys, alive, 6)
            for q in range(len(queries)):
                check(index.search(queries[q:q + 1], k=6, p=p, n_threads=2), D[q:q + 1],
                      keys, alive, 6)


@pytest.mark.parametrize("p", [1, 2, 1.5])
def test_exact_values_from_measures_with_zero_masses_and_repeated_nodes(tmp_path, p):
    # Exact values rebuild each candidate's features from its stored
    # measure; zero masses (edges with value 0) and a node given twice
    # (masses add up) must give the values of the features computed apart.
    rng = np.random.default_rng(21)
    graph = Graph.from_points(rng.normal(size=(300, 3)), n_nodes=60, seed=4)
    measures = []
    for i in range(400):
        nodes = rng.choice(60, size=6)  # with repeats
        masses = rng.random(6) + 0.1
        masses[i % 3] = 0.0
        measures.append((nodes, masses))
    queries = measures[:5] + [(np.array([3, 3, 7]), np.array([0.0, 1.0, 2.0]))]
    with SobolevIndex.create(tmp_path / "idx", graph, roots=2, seed=0) as index:
        keys = index.add(measures)
        for positions in ([0], [0, 1]):
            D = brute_force(index, measures, np.ones(400, bool), queries, p, positions)
            check(index.search(queries, k=6, p=p, roots=positions), D, keys,
                  np.ones(400, bool), 6)


def test_searches_in_python_threads_at_once_agree_with_one_at_a_time(topic_index):
    # Each search lends its threads buffers from a shared pool: searches
    # running at once in several Python threads must never share one.
    from concurrent.futures import ThreadPoolExecutor

    index, measures, _ = topic_index
    queries = [measures[i:i + 1] for i in range(0, 240, 3)]
    alone = [index.search(q, k=5, p=1 + (i % 2), n_threads=2) for i, q in enumerate(queries)]
    with ThreadPoolExecutor(max_workers=4) as pool:
        together = list(pool.map(lambda iq: index.search(iq[1], k=5, p=1 + (iq[0] % 2),
                                                         n_threads=2), enumerate(queries)))
    for a, b in zip(alone, together):
        assert a.keys == b.keys
        assert np.array_equal(a.distances, b.distances)


@pytest.mark.parametrize("p", [1, 2, np.inf])
def test_search_stats_count_what_was_read(topic_index, p):
    index, measures, keys = topic_index
    index.delete(keys[:10])
    queries = measures[20:26]
    result = index.search(queries, k=5, p=p)
    stats = result.stats
    assert stats["rows"] == len(index) * len(queries)
    # Every result was computed exactly, from rows read in full.
    assert len(queries) * 5 <= stats["exact"] <= stats["rows_read"] <= stats["rows"]
    if np.isinf(p):
        # Every live row's dense values are read for its bound; the bound
        # rules most of them out, unless there is no dense block.
        assert stats["rows_read"] == stats["rows"]
        if all(s.data.inverted["dense_ptr"][-1] > 0 for s in index._segments):
            assert stats["exact"] < stats["rows"] / 4, stats
        else:
            assert stats["exact"] == stats["rows"], stats
    one_label = index.search(queries, k=5, p=p, where={"label": "2"})
    assert one_label.stats["rows"] == sum(1 for i in range(10, len(keys)) if i % 6 == 2) * 6


@pytest.mark.parametrize("p", [1, 2])
def test_float32_rounding_of_tiny_values_in_the_row_is_allowed_for(tmp_path, p):
    # Below float32's normal range its rounding error is absolute: two rows
    # whose only difference from the query is a value of about 1e-45 swap
    # places when rounded (1.55 * 2^-149 -> 2 * 2^-149, 1.45 * 2^-149 ->
    # 2^-149). The row norms are sums of the rounded values, so the
    # allowance must cover the row's tiny values, not only the query's.
    rng = np.random.default_rng(0)
    graph = Graph.from_points(rng.normal(size=(300, 3)), n_nodes=40, seed=1)
    tiny = 2.0 ** -149
    with SobolevIndex.create(tmp_path / "idx", graph, roots=1, seed=0) as index:
        tree = index.trees[0]
        root = int(tree.root)
        height = tree.distance
        pairs = [(a, b) for a in range(40) for b in range(40)
                 if root not in (a, b) and 0.55 < height[a] / height[b] < 0.9]
        b1, b2 = pairs[0]
        measures = [([root, b1], [1.0, 1.55 * tiny]), ([root, b2], [1.0, 1.45 * tiny])]
        keys = index.add(measures, keys=["x1", "x2"])
        query = [([root], [1.0])]
        D = brute_force(index, measures, np.ones(2, bool), query, p, [0])
        assert D[0, 0] < D[0, 1]  # x1 is the nearer, by a hair
        assert index.search(query, k=1, p=p).keys == [["x1"]]
        check(index.search(query, k=2, p=p), D, keys, np.ones(2, bool), 2)


def test_row_scratch_comes_back_clean_and_per_node_count(tmp_path, topic_index):
    # The pool lends each search per-node buffers; the query buffer must be
    # all zeros again when they come back, and indexes on graphs of
    # different sizes get buffers of their own size.
    from sobolev_index.index import _inverted_search

    index, measures, _ = topic_index
    rng = np.random.default_rng(2)
    small = Graph.from_points(rng.normal(size=(100, 3)), n_nodes=20, seed=0)
    with SobolevIndex.create(tmp_path / "small", small, seed=0) as other:
        other.add([(rng.choice(20, 4), None) for _ in range(50)])
        for p in (1, 2):
            index.search(measures[:30], k=5, p=p, n_threads=2)
            other.search([(np.array([1, 2]), None)], k=3, p=p, n_threads=2)
            index.search(measures[:1], k=5, p=p, n_threads=2)
    pools = _inverted_search._POOL
    assert {index.graph.n_nodes, 20} <= set(pools)
    for n_nodes, scratches in pools.items():
        for scratch in scratches:
            assert scratch.query.shape == (max(1, n_nodes),)
            assert not scratch.query.any()


@pytest.mark.parametrize("scale", [1e-30, 1e40])
def test_group_norms_beyond_float32_are_exact(tmp_path, monkeypatch, scale):
    # The rows' group norms are kept as float32: edge lengths so small or
    # so large that they fall below its normal range or above its largest
    # value (where they are held at it) must still give exact results.
    _apply(monkeypatch, "dense-small-chunks")
    rng = np.random.default_rng(8)
    base = Graph.from_points(rng.normal(size=(300, 3)), n_nodes=40, seed=2)
    graph = Graph.from_edges(base.n_nodes, base.edges, base.lengths * scale)
    measures = [(rng.choice(40, size=5), rng.random(5) + 0.1) for _ in range(200)]
    with SobolevIndex.create(tmp_path / "idx", graph, roots=2, seed=0) as index:
        keys = index.add(measures)
        assert index._segments[0].data.inverted["dense_ptr"][-1] > 0
        queries = measures[:6]
        for p in (1, 2, 3):
            for positions in ([0], [0, 1]):
                D = brute_force(index, measures, np.ones(200, bool), queries, p, positions)
                result = index.search(queries, k=5, p=p, roots=positions)
                for i in range(len(queries)):
                    expected = np.sort(D[i])[:5]
                    np.testing.assert_allclose(result.distances[i], expected, rtol=1e-9)
                    for key, dist in zip(result.keys[i], result.distances[i]):
                        assert D[i, keys.index(key)] == pytest.approx(dist, rel=1e-9)


@pytest.mark.parametrize("p", [1, 2])
def test_a_thread_that_flushes_subnormals_still_finds_the_exact_nearest(tmp_path, p):
    # A thread in flush-to-zero mode (FTZ/DAZ) reads a subnormal float32
    # posting as 0: a row equal to the query, with a mass of 1e-40 on one
    # node, then gets a first bound of about twice that mass (at p = 1),
    # above the distance of a row without it. The allowance must widen, or
    # the row at distance 0 is missed. (x86 only: elsewhere the mode is not
    # set, and the search is the ordinary one.)
    from sobolev_index.index import _inverted_search

    rng = np.random.default_rng(0)
    graph = Graph.from_points(rng.normal(size=(300, 3)), n_nodes=40, seed=1)
    tiny = 1e-40  # normal as float64, subnormal as float32
    with SobolevIndex.create(tmp_path / "idx", graph, roots=1, seed=0) as index:
        root = int(index.trees[0].root)
        node = next(v for v in range(40) if v != root)
        query = ([root, node], [1.0, tiny])
        index.add([([root], [1.0]), query], keys=["root-only", "same"])
        was = _inverted_search._set_subnormal_flush(True)
        try:
            result = index.search([query], k=1, p=p, n_threads=1)
        finally:
            _inverted_search._set_subnormal_flush(was)
        assert result.keys == [["same"]]
        assert result.distances[0, 0] == 0.0


@pytest.mark.parametrize("p", [1, 2, np.inf])
@pytest.mark.parametrize("damage", ["node", "mass"])
@pytest.mark.slow
def test_a_damaged_measure_is_found_when_a_search_rebuilds_it(tmp_path, p, damage):
    """A search checks the stored measures of its candidates before
    rebuilding their features (not every measure at its first search): a
    damaged one is a CorruptIndexError naming the row. (In a child: were
    the check missing, the rebuild would write outside its buffers.)"""
    import h5py
    from _support.processes import run_python

    rng = np.random.default_rng(9)
    graph = Graph.from_points(rng.normal(size=(200, 3)), n_nodes=40, seed=1)
    measures = [(rng.choice(40, size=4, replace=False), rng.random(4) + 0.1)
                for _ in range(100)]
    path = tmp_path / "idx"
    with SobolevIndex.create(path, graph, seed=0) as index:
        index.add(measures)
    segment = path / "segments" / os.listdir(path / "segments")[0]
    with h5py.File(segment, "r+") as f:
        at = int(f["measures/indptr"][7]) + 1
        if damage == "node":
            f["measures/nodes"][at] = 10**6
        else:
            f["measures/masses"][at] = np.nan
    with sqlite3.connect(path / "catalog.sqlite") as db:
        db.execute("UPDATE segments SET checksum = ?", (file_checksum(str(segment)),))
    db.close()
    nodes, masses = measures[7]
    # Row 7's own measure as the query: row 7 is a candidate.
    p_text = 'float("inf")' if np.isinf(p) else repr(float(p))
    script = (
        "import sys\n"
        "from sobolev_index import SobolevIndex, CorruptIndexError\n"
        "try:\n"
        f"    SobolevIndex.open({str(path)!r}).search([({nodes.tolist()}, {masses.tolist()})], "
        f"k=3, p={p_text})\n"
        "except CorruptIndexError as exc:\n"
        "    print('corrupt:', exc); sys.exit(3)\n")
    done = run_python(script)
    assert done.returncode == 3, (done.returncode, done.stdout, done.stderr)
    assert "stored measure" in done.stdout and "(row 7)" in done.stdout, done.stdout


@pytest.mark.parametrize("colliding", [False, True])
def test_share_lists_keeps_every_slots_postings(monkeypatch, colliding):
    """Each slot reads exactly its own postings, equal lists are stored
    once, list 0 is empty; lists whose hashes collide are compared in full
    (then unequal lists keep lists of their own)."""
    if colliding:
        monkeypatch.setattr(inverted_module, "_list_hashes",
                            lambda ptr, rows, values: np.zeros(len(ptr) - 1, np.uint64))
    rng = np.random.default_rng(2)
    pool = []
    for _ in range(6):
        n = int(rng.integers(1, 9))
        pool.append((np.sort(rng.choice(50, size=n, replace=False)).astype(np.int32),
                     rng.random(n).astype(np.float32)))
    # The same rows with other values, and values equal but for one bit.
    rows, values = pool[0]
    pool.append((rows, values[::-1].copy()))
    nudged = values.copy()
    nudged.view(np.uint32)[0] += 1
    pool.append((rows, nudged))
    chosen = [None if rng.random() < 0.2 else int(rng.integers(len(pool))) for _ in range(40)]
    lists = [pool[c] if c is not None else (np.zeros(0, np.int32), np.zeros(0, np.float32))
             for c in chosen]
    ptr = np.zeros(len(lists) + 1, dtype=np.int64)
    np.cumsum([len(r) for r, _ in lists], out=ptr[1:])
    all_rows = np.concatenate([r for r, _ in lists])
    all_values = np.concatenate([v for _, v in lists])

    slot_list, out_ptr, out_rows, out_values = inverted_module.share_lists(
        ptr, all_rows, all_values)
    assert out_ptr[0] == out_ptr[1] == 0
    for slot, (r, v) in enumerate(lists):
        lst = slot_list[slot]
        got_rows = out_rows[out_ptr[lst]:out_ptr[lst + 1]]
        got_values = out_values[out_ptr[lst]:out_ptr[lst + 1]]
        assert np.array_equal(got_rows, r)
        assert np.array_equal(got_values.view(np.uint32), v.view(np.uint32))
    used = {c for c in chosen if c is not None}
    if colliding:
        assert len(used) <= len(out_ptr) - 2 <= len(chosen)
    else:
        assert len(out_ptr) - 2 == len(used)


def test_a_slot_reads_its_roots_features_through_a_shared_list(tmp_path):
    """With several roots most posting lists are shared, and every slot's
    list holds the rows and values of its root's column, rebuilt from the
    measures by the tree (not by the inverted file)."""
    rng = np.random.default_rng(11)
    graph = Graph.from_points(rng.normal(size=(300, 3)), n_nodes=60, k=5, edges="knn", seed=2)
    measures = [(rng.choice(60, size=int(rng.integers(1, 6)), replace=False), None)
                for _ in range(150)]
    with SobolevIndex.create(tmp_path / "idx", graph, roots=4, seed=0,
                             on_violation="perturb") as index:
        index.add(measures)
        inv = index._segments[0].inverted_file(index.trees, index._edge_weight)
        assert len(inv.ptr) - 1 < len(inv.slot_list) // 2
        for r, tree in enumerate(index.trees):
            F = tree.features_of(measures).tocsc()
            for c in range(inv.n_cols):
                slot = r * inv.n_cols + c
                if inv.col_slot[slot] >= 0:
                    continue
                lst = inv.slot_list[slot]
                lo, hi = inv.ptr[lst], inv.ptr[lst + 1]
                column = F[:, c]
                assert np.array_equal(inv.post_rows[lo:hi], column.indices)
                assert np.array_equal(inv.post_values[lo:hi], column.data.astype(np.float32))


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_p1_over_several_roots_walks_shared_lists_once_and_stays_exact(
        tmp_path, monkeypatch, layout):
    """At p = 1 over several roots a search walks each shared list once per
    distinct query value. The documents use a few nodes only, so many
    edges of one tree (chains without supports) and of several trees
    share a list; queries on other nodes then have different values on
    slots that share a list. Both must give brute force's answers."""
    _apply(monkeypatch, layout)
    rng = np.random.default_rng(21)
    graph = Graph.from_points(rng.normal(size=(500, 3)), n_nodes=90, k=4, edges="knn", seed=4)
    used = rng.choice(90, size=25, replace=False)
    measures = []
    for _ in range(400):
        nodes = rng.choice(used, size=int(rng.integers(1, 6)), replace=False)
        measures.append((nodes, rng.random(len(nodes)) + 0.1))
    others = np.setdiff1d(np.arange(90), used)
    queries = [(rng.choice(others, size=3, replace=False), rng.random(3) + 0.1)
               for _ in range(6)]
    queries += [(np.concatenate([rng.choice(others, size=2, replace=False),
                                 rng.choice(used, size=2, replace=False)]), rng.random(4) + 0.1)
                for _ in range(6)]
    with SobolevIndex.create(tmp_path / "idx", graph, roots=4, seed=3,
                             on_violation="perturb") as index:
        keys = index.add(measures[:250]) + index.add(measures[250:])
        index.delete(keys[::9])
        alive = np.ones(len(keys), dtype=bool)
        alive[::9] = False
        # Some query meets one list under two slots with different values.
        differing = False
        for segment, (nodes, masses) in itertools.product(index._segments, queries):
            inv = segment.inverted_file(index.trees, index._edge_weight)
            seen = {}
            for r, tree in enumerate(index.trees):
                row = tree.features_of([(nodes, masses)])
                for c, v in zip(row.indices.tolist(), row.data.tolist()):
                    slot = r * inv.n_cols + c
                    if inv.col_slot[slot] >= 0:
                        continue
                    lst = int(inv.slot_list[slot])
                    if inv.ptr[lst + 1] > inv.ptr[lst]:
                        differing |= lst in seen and seen[lst] != v
                        seen.setdefault(lst, v)
        assert differing
        for positions in ([0, 1, 2, 3], [1, 3]):
            D = brute_force(index, measures, alive, queries, 1, positions)
            check(index.search(queries, k=7, p=1, roots=positions), D, keys, alive, 7)
            for q in range(len(queries)):
                one = index.search(queries[q:q + 1], k=5, p=1, roots=positions, n_threads=2)
                check(one, D[q:q + 1], keys, alive, 5)
            radius = float(np.median(np.sort(D, axis=1)[:, 6]))
            found = index.search(queries, radius=radius, p=1, roots=positions)
            for i in range(len(queries)):
                expected = np.sort(D[i][D[i] <= radius])
                np.testing.assert_allclose(found.distances[i], expected, rtol=1e-10, atol=1e-14)


def test_p1_merging_keeps_each_query_value_of_a_shared_list(tmp_path):
    """Edges u and its parent v share a list when no document has support
    at v or in v's other branches. A query with mass at both has different
    values there (q_v > q_u), so a merged search keeps two entries for the
    one list; the answers stay those of brute force. Folding both into
    u's entry would raise the bounds and upper values of the documents
    below u alike, which only loses them when the k-th result lies
    elsewhere: hence the larger k."""
    rng = np.random.default_rng(8)
    graph = Graph.from_points(rng.normal(size=(600, 2)), n_nodes=120, k=4, edges="knn", seed=5)
    with SobolevIndex.create(tmp_path / "idx", graph, roots=2, seed=0,
                             on_violation="perturb") as index:
        tree = index.trees[0]
        parent = tree.parent

        def clade(node):
            members = {node}
            changed = True
            while changed:
                grown = members | {c for c in range(len(parent)) if parent[c] in members}
                changed = grown != members
                members = grown
            return members

        # A chain edge u -> v = parent(u), u < v (u's entry comes first),
        # with room below u and a heavy edge v.
        pairs = [(len(clade(u)), u) for u in range(len(parent))
                 if parent[u] >= 0 and parent[parent[u]] >= 0 and u < parent[u]
                 and len(clade(u)) >= 4]
        _, u = max(pairs)
        v = int(parent[u])
        inside = sorted(clade(u))
        outside = sorted(set(range(len(parent))) - clade(v))
        # (Few enough below u that its edges are posted, not dense.)
        measures = [(rng.choice(inside, size=2, replace=False), rng.random(2) + 0.1)
                    for _ in range(60)]
        measures += [(rng.choice(outside, size=3, replace=False), rng.random(3) + 0.1)
                     for _ in range(240)]
        keys = index.add(measures)
        inv = index._segments[0].inverted_file(index.trees, index._edge_weight)
        assert inv.col_slot[u] < 0 and inv.col_slot[v] < 0
        assert inv.slot_list[u] == inv.slot_list[v]
        query = (np.array([u, v]), np.array([0.5, 0.5]))
        alive = np.ones(len(keys), dtype=bool)
        D = brute_force(index, measures, alive, [query], 1, [0, 1])
        # With k past the 60 documents below u, the k-th is a document
        # elsewhere, whose bound a fold would not raise: folding the two
        # values into u's entry would then lose documents below u.
        for k in (5, 30, 60, 70):
            for n_threads in (1, 2):
                check(index.search([query], k=k, p=1, n_threads=n_threads), D, keys, alive, k)
