"""Search statistics (``search(..., stats=True)`` and ``search --stats``):
per query, what the search read and the time of its phases, checked
against what must hold whatever the pruning (every result was scored
exactly, every row of the scope was bounded, a scan reads every row) and
against brute force (the rows nearer than the k-th were all read)."""
import json
import math

import numpy as np
import pytest
from _support.cli import run
from reference import ref_pairwise, ref_tree

from sobolev_index import Graph, SobolevIndex

N_NODES = 40
COUNTS = ("segments", "rows", "bounded", "refined", "rows_read", "blocks", "blocks_scored",
          "exact")
PHASES = ("postings", "bounds", "scoring", "exact")


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """600 documents over one root in three segments of 200 (dense blocks),
    20 of them deleted, labels x/y; 9 queries."""
    rng = np.random.default_rng(31)
    graph = Graph.from_points(rng.normal(size=(N_NODES, 2)), n_nodes=N_NODES, edges="log", seed=3)
    measures = []
    for _ in range(609):
        nodes = np.sort(rng.choice(N_NODES, size=int(rng.integers(1, 9)), replace=False))
        measures.append((nodes, rng.random(len(nodes)) + 0.05))
    docs, queries = measures[:600], measures[600:]
    keys = [f"d{i}" for i in range(600)]
    labels = ["x" if i % 4 else "y" for i in range(600)]
    path = tmp_path_factory.mktemp("stats") / "ix"
    with SobolevIndex.create(path, graph, roots=1, seed=2, on_violation="perturb") as index:
        for lo in range(0, 600, 200):
            index.add(docs[lo:lo + 200], keys=keys[lo:lo + 200], labels=labels[lo:lo + 200])
        index.delete(keys[5:600:30])
        root = int(index.roots[0])
    live = [i for i in range(600) if i % 30 != 5]
    tree = ref_tree(graph.n_nodes, graph.edges, graph.lengths, root)
    reference = {p: ref_pairwise(queries, [docs[i] for i in live], tree, p) for p in (1, 2)}
    return dict(path=path, queries=queries, live=live, labels=labels, reference=reference)


def _per_query(result):
    return result.stats["queries"]


@pytest.mark.parametrize("p", [1, 2, 1.5])
def test_per_query_counts_add_up_and_bound_what_the_search_did(built, p):
    k = 7
    with SobolevIndex.open(built["path"]) as index:
        result = index.search(built["queries"], k=k, p=p, stats=True, n_threads=1)
    per_query = _per_query(result)
    assert len(per_query) == len(built["queries"])
    for name in COUNTS:
        assert result.stats[name] == sum(q[name] for q in per_query), name
    n_live = len(built["live"])
    for q, stats in enumerate(per_query):
        # Every row the search may return is bounded; three segments of
        # fewer than 8,192 rows are three blocks.
        assert stats["segments"] == 3 and stats["blocks"] == 3
        assert stats["rows"] == stats["bounded"] == n_live
        assert 1 <= stats["blocks_scored"] <= stats["blocks"]
        # Every result got its exact value; exact values go to rows read.
        assert len(result.keys[q]) == k <= stats["exact"] <= stats["rows_read"]
        # Rows read had a group bound first (these segments have dense groups).
        assert stats["rows_read"] <= stats["refined"] <= stats["bounded"]
        # ...and the pruning pays: far fewer than every row is read.
        assert stats["rows_read"] < n_live / 2
        assert set(stats["seconds"]) == set(PHASES)
        assert all(s >= 0.0 for s in stats["seconds"].values())
        assert sum(stats["seconds"].values()) > 0.0
    assert set(result.stats["seconds"]) == {"features", "search", "names", "total"}
    assert result.stats["seconds"]["total"] >= result.stats["seconds"]["search"] > 0.0


@pytest.mark.parametrize("p", [1, 2, math.inf])
def test_an_infinite_radius_counts_every_row_as_read_and_exact(built, p, parallel_everywhere):
    """Nothing can be pruned: each count meets the number of rows, in one
    thread or two (each unit's counts are its own, summed once)."""
    n_live = len(built["live"])
    with SobolevIndex.open(built["path"]) as index:
        for threads in (1, 2):
            result = index.search(built["queries"], radius=math.inf, p=p, stats=True,
                                  n_threads=threads)
            for q, stats in enumerate(_per_query(result)):
                assert len(result.keys[q]) == n_live
                assert stats["exact"] == stats["rows_read"] == stats["rows"] == n_live
                assert stats["blocks_scored"] == stats["blocks"] == 3


def test_where_narrows_the_rows_counted(built):
    with SobolevIndex.open(built["path"]) as index:
        only_y = index.search(built["queries"], k=3, where={"label": "y"}, stats=True)
    n_y = sum(1 for i in built["live"] if built["labels"][i] == "y")
    for stats in _per_query(only_y):
        assert stats["rows"] == stats["bounded"] == n_y


def test_p_inf_bounds_every_row_from_its_dense_values_and_a_scan_computes_all(built):
    n_live = len(built["live"])
    with SobolevIndex.open(built["path"]) as index:
        at_inf = index.search(built["queries"], k=3, p=math.inf, stats=True)
        scanned = index.search(built["queries"], k=3, p=20, stats=True)
    for stats in _per_query(at_inf):
        assert stats["rows_read"] == stats["rows"] == stats["bounded"] == n_live
        assert 3 <= stats["exact"] < n_live
        assert stats["refined"] == 0 and stats["seconds"]["postings"] == 0.0
    for stats in _per_query(scanned):
        assert stats["rows_read"] == stats["exact"] == stats["rows"] == n_live
        assert stats["bounded"] == stats["refined"] == 0
        assert stats["blocks"] == stats["blocks_scored"] == 3
        assert stats["seconds"]["scoring"] > 0.0


def test_a_radius_prunes_like_a_kth_distance(built):
    """Rows beyond a small radius are ruled out by their bounds: few are read."""
    reference = built["reference"][1]
    radius = float(np.sort(reference, axis=1)[:, 2].min())
    with SobolevIndex.open(built["path"]) as index:
        tight = index.search(built["queries"], radius=radius, p=1, stats=True, n_threads=1)
        knn = index.search(built["queries"], k=3, p=1, stats=True, n_threads=1)
    for q, (a, b) in enumerate(zip(_per_query(tight), _per_query(knn))):
        within = int(np.sum(reference[q] <= radius))
        assert within <= a["exact"] <= a["rows_read"] < len(built["live"]) / 4
        # The radius is at most this query's 3rd distance from the start:
        # it reads no more than the k-NN search, which must find its bound.
        assert a["rows_read"] <= b["rows_read"], q


def test_without_stats_only_the_totals_are_kept(built):
    with SobolevIndex.open(built["path"]) as index:
        plain = index.search(built["queries"], k=4)
        counted = index.search(built["queries"], k=4, stats=True)
    assert "queries" not in plain.stats and "seconds" not in plain.stats
    assert plain.keys == counted.keys
    np.testing.assert_array_equal(plain.distances, counted.distances)
    assert plain.stats["rows"] == counted.stats["rows"] == len(built["live"]) * 9


def test_search_stats_on_the_command_line(built):
    path = built["path"]
    out = json.loads(run("search", path, "--key", "d1", "--key", "d2", "-k", "3", "--stats",
                         "--json").stdout)
    assert len(out["results"]) == 2 and len(out["results"][0]) == 3
    assert len(out["stats"]["queries"]) == 2
    assert out["stats"]["rows"] == 2 * len(built["live"])
    assert set(out["stats"]["queries"][0]) == set(COUNTS) | {"seconds"}
    table = run("search", path, "--key", "d1", "-k", "3", "--stats").stdout
    assert "statistics:" in table and "ms postings" in table and "wall time:" in table
    # Without --stats the JSON is the list of results, as before.
    plain = json.loads(run("search", path, "--key", "d1", "-k", "3", "--json").stdout)
    assert plain == out["results"][:1]
