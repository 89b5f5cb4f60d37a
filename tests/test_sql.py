"""The SQL functions agree with SobolevIndex.search and .distance."""
import json
import math
import shutil
import sqlite3

import pytest

from sobolev_index import SobolevIndex
from sobolev_index.errors import SobolevIndexError
from sobolev_index.index.sql import iter_query, register_functions, run_query


@pytest.fixture(scope="module")
def index_path(text_index_path):
    return text_index_path


@pytest.fixture
def reader(index_path):
    with SobolevIndex.open(index_path) as opened:
        yield opened


@pytest.mark.parametrize("p", [None, 1, 2, 1.5, "inf"])
def test_sobolev_knn_equals_search(reader, p):
    for key in ("space-3", "cooking-7", "music-9"):
        args = [key, 7] + ([] if p is None else [p])
        marks = ", ".join("?" * len(args))
        _, rows = run_query(reader, f"SELECT sobolev_knn({marks})", args)
        got = json.loads(rows[0][0])
        expected = reader.search(key, k=7, p=None if p is None else
                                 (math.inf if p == "inf" else p)).to_records()[0]
        assert [h["key"] for h in got] == [h["key"] for h in expected]
        assert [h["distance"] for h in got] == pytest.approx([h["distance"] for h in expected],
                                                              rel=1e-12)


@pytest.mark.parametrize("p", [1, 2, 3])
def test_sobolev_distance_ranks_like_search(reader, p):
    """ORDER BY sobolev_distance gives the same neighbours and distances (to
    1e-10) as an exact search."""
    _, rows = run_query(
        reader,
        "SELECT key, sobolev_distance(key, 'space-5', ?) AS d FROM documents "
        "WHERE deleted = 0 ORDER BY d, id LIMIT 10", [p])
    expected = reader.search("space-5", k=10, p=p)
    assert [r[0] for r in rows] == expected.keys[0]
    assert [r[1] for r in rows] == pytest.approx(expected.distances[0].tolist(), rel=1e-10,
                                                 abs=1e-12)


def test_deleted_and_unknown_keys_give_null(reader):
    _, rows = run_query(reader, "SELECT sobolev_distance('music-0', 'space-1'), "
                                "sobolev_knn('nope', 3), sobolev_distance('space-1', 'space-1')")
    assert rows == [(None, None, 0.0)]


def test_sql_is_read_only(reader, index_path, tmp_path):
    with pytest.raises(SobolevIndexError, match="read-only"):
        run_query(reader, "UPDATE documents SET label = 'x'")
    copy = tmp_path / "ix"  # the session's index is not opened for writing
    shutil.copytree(index_path, copy)
    with SobolevIndex.open(str(copy), "a") as writer:
        with pytest.raises(SobolevIndexError, match="mode='r'"):
            run_query(writer, "SELECT 1")


def test_bad_sql_and_bad_k_are_errors(reader):
    with pytest.raises(SobolevIndexError, match="no such table"):
        run_query(reader, "SELECT * FROM nowhere")
    with pytest.raises(SobolevIndexError, match="k is 0; expected an integer >= 1"):
        run_query(reader, "SELECT sobolev_knn('space-1', 0)")
    with pytest.raises(SobolevIndexError, match="p is 'abc'; expected a number"):
        run_query(reader, "SELECT sobolev_distance('space-1', 'space-2', 'abc')")
    with pytest.raises(SobolevIndexError, match=r"p is 0\.5"):
        run_query(reader, "SELECT sobolev_distance('space-1', 'space-2', 0.5)")
    # The connection works normally after a failed query.
    assert run_query(reader, "SELECT 1")[1] == [(1,)]


def test_a_failing_function_is_reported_once_and_not_printed_as_unraisable(reader, monkeypatch):
    # Where callback tracebacks are on (Datasette's import turns them on
    # for the process; left on here), sqlite3 hands an exception raised in
    # a function to sys.unraisablehook as well as failing the statement.
    # The runner reports the function's error; it is not printed again.
    sqlite3.enable_callback_tracebacks(True)
    unraisable = []
    monkeypatch.setattr("sys.unraisablehook", unraisable.append)
    failing = {
        "SELECT sobolev_distance('space-1', 'space-2', 0.5)": r"p is 0\.5",
        # the statement would return no row: the error still comes out
        "SELECT 1 WHERE sobolev_distance('space-1', 'space-2', 0.5) > 0": r"p is 0\.5",
        "SELECT key FROM documents WHERE id = 3 AND sobolev_knn(key, 0) IS NOT NULL": "k is 0",
        # the first call's error, not a later call's
        "SELECT sobolev_knn('space-1', 0), sobolev_knn('space-2', 3)": "k is 0",
        "SELECT sobolev_distance(d.key, e.key, 'abc') FROM documents d, documents e": "p is 'abc'",
    }
    for statement, message in failing.items():
        with pytest.raises(SobolevIndexError, match=f"SQL error in a sobolev function: .*{message}"):
            run_query(reader, statement)
    # A failure deep in a streamed result (row 1,001, read with the first
    # batch of 1,000) raises, and the index stays usable.
    _, rows = iter_query(reader, "SELECT a.id, sobolev_distance('space-1', 'space-2', CASE WHEN "
                                 "(a.id - 1) * 60 + b.id = 1001 THEN 0.5 END) FROM documents a, "
                                 "documents b")
    with pytest.raises(SobolevIndexError, match=r"p is 0\.5"):
        list(rows)
    assert "space-1" in reader and reader.search("space-1", k=1).to_records()[0][0]["key"] == "space-1"
    assert run_query(reader, "SELECT count(*) FROM documents")[1][0][0] > 0
    assert unraisable == []
    # On a caller's own connection (no statement of iter_query running)
    # nobody reports the error: sqlite3 prints it as it prints any.
    import sqlite_utils

    db = sqlite_utils.Database(sqlite3.connect(":memory:"), execute_plugins=False)
    register_functions(reader, db)
    with pytest.raises(sqlite3.OperationalError, match="user-defined function raised"):
        db.execute("SELECT sobolev_distance('space-1', 'space-2', 0.5)").fetchall()
    assert len(unraisable) == 1 and "p is 0.5" in str(unraisable[0].exc_value)


def test_attach_and_pragmas_are_refused(reader, index_path, tmp_path):
    target = tmp_path / "other.db"
    for statement in (f"ATTACH '{target}' AS other",
                      f"ATTACH '{index_path}/catalog.sqlite' AS again",
                      "PRAGMA journal_mode=DELETE"):
        with pytest.raises(SobolevIndexError, match="read-only"):
            run_query(reader, statement)
    assert not target.exists()


def test_functions_on_another_connection(reader):
    """Registered on any sqlite-utils Database, e.g. one that attaches the catalog."""
    import sqlite_utils

    db = sqlite_utils.Database(sqlite3.connect(":memory:"))
    register_functions(reader, db)
    value = db.execute("SELECT sobolev_distance('space-1', 'music-2', 2)").fetchone()[0]
    assert value == pytest.approx(reader.distance("space-1", "music-2", p=2), rel=1e-12)


def test_huge_k_returns_every_live_document_in_small_memory(reader):
    # k far beyond the index: every live document comes back, sorted, and
    # no buffer is sized by k (a billion float64 per query is 8 GB).
    import tracemalloc

    import numpy as np

    n_live = len(reader)
    everything = reader.search(["space-3"], k=n_live, p=1)
    tracemalloc.start()
    huge = reader.search(["space-3"], k=10**9, p=1)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert peak < 50 * 2**20, peak
    assert len(huge.keys[0]) == n_live and huge.keys == everything.keys
    assert np.all(np.diff(huge.distances[0]) >= 0)
    _, rows = run_query(reader, "SELECT sobolev_knn('space-3', 1000000000)")
    assert [hit["key"] for hit in json.loads(rows[0][0])] == everything.keys[0]
    with pytest.raises(ValueError, match="at most"):
        reader.search(["space-3"], k=10**30)


def test_a_runaway_query_is_stopped_by_the_timeout(reader):
    import time

    started = time.monotonic()
    with pytest.raises(SobolevIndexError, match="longer than 0.5 s"):
        run_query(reader, "SELECT count(*) FROM documents a, documents b, documents c, "
                          "documents d, documents e", timeout=0.5)
    assert time.monotonic() - started < 5
    # the connection is usable afterwards, with no limit left behind
    assert run_query(reader, "SELECT count(*) FROM documents", timeout=None)[1][0][0] > 0


def test_the_timeout_also_stops_slow_function_calls(reader, monkeypatch):
    # Each sobolev_knn call here takes 0.2 s, far fewer SQLite steps than
    # the progress handler counts between two looks at the clock: the
    # functions themselves must stop once the time is up.
    import time

    real = type(reader).search

    def slow_search(self, *args, **kwargs):
        time.sleep(0.2)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(type(reader), "search", slow_search)
    started = time.monotonic()
    with pytest.raises(SobolevIndexError, match="longer than 0.5 s"):
        run_query(reader, "SELECT count(sobolev_knn(key, 3)) FROM documents", timeout=0.5)
    assert time.monotonic() - started < 1.5
    monkeypatch.undo()
    # No deadline is left behind for calls outside run_query.
    time.sleep(0.1)
    key = next(iter(reader))
    assert reader.catalog.db.execute("SELECT sobolev_distance(?, ?)", [key, key]).fetchone() \
        == (0.0,)


def test_rows_stream_instead_of_being_fetched_at_once(reader):
    from sobolev_index.index.sql import iter_query

    columns, rows = iter_query(reader, "SELECT a.key FROM documents a, documents b")
    assert columns == ["key"]
    first = [next(rows) for _ in range(5)]
    assert len(first) == 5 and all(len(row) == 1 for row in first)
    rows.close()  # abandoning the iteration releases the statement and the limits
    assert run_query(reader, "SELECT 1")[1] == [(1,)]


@pytest.mark.slow
def test_pairwise_sql_distances_cost_about_a_gram_row_per_key(reader, monkeypatch):
    # Every pair of the documents: the functions reuse the index's features
    # and compute one distance column per distinct second key, instead of a
    # full distance computation per pair (which took minutes on 500 x 460
    # pairs).
    import sobolev_index.index.sql as sql_module

    keys = list(reader)
    columns = []
    real = sql_module.pairwise_sobolev

    def counted(*args, **kwargs):
        columns.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(sql_module, "pairwise_sobolev", counted)
    monkeypatch.setattr(type(reader), "distance", None)  # the per-pair path is not taken
    _, rows = run_query(reader, "SELECT a.key, b.key, sobolev_distance(a.key, b.key) FROM "
                                "documents a, documents b WHERE a.deleted = 0 AND b.deleted = 0")
    monkeypatch.undo()
    assert len(rows) == len(keys) ** 2
    assert len(columns) == len(keys)
    got = {(a, b): d for a, b, d in rows}
    # With room for only 3 rows, the other keys go pair by pair: no row is
    # ever computed twice, and the answers are the same.
    monkeypatch.setattr(sql_module, "pairwise_sobolev", counted)
    monkeypatch.setattr(sql_module, "MIN_COLUMNS", 3)
    monkeypatch.setattr(sql_module, "CACHE_BYTES", 0)
    reader.refresh()  # a new generation: the per-index cache starts again
    columns.clear()
    _, again = run_query(reader, "SELECT a.key, b.key, sobolev_distance(a.key, b.key) FROM "
                                 "documents a, documents b WHERE a.deleted = 0 AND b.deleted = 0")
    monkeypatch.undo()
    assert len(columns) == 3
    for (a, b, d), (a2, b2, d2) in zip(rows, again):
        assert (a, b) == (a2, b2) and math.isclose(d, d2, rel_tol=1e-9, abs_tol=1e-12)
    for a, b in [(keys[0], keys[1]), (keys[5], keys[2]), (keys[-1], keys[3]), (keys[4], keys[4])]:
        assert math.isclose(got[(a, b)], reader.distance(a, b), rel_tol=1e-9, abs_tol=1e-12)
