"""Limits on the SQL that reaches an index's catalog (`sobolev-index sql`,
run_query/iter_query and the web view's SQL page): only known functions,
SQLite's resource limits, the statement's deadline inside the S_p functions,
a per-statement budget of S_p work, and a search page that answers while
slow SQL runs."""
import asyncio
import re
import time
import urllib.parse

import pytest
from _support.cli import run

from sobolev_index import SobolevIndex
from sobolev_index.errors import SobolevIndexError
from sobolev_index.index import sql as sql_module
from sobolev_index.index.sql import iter_query, run_query

# A pointer-sized blob: the two-argument fts3_tokenizer registers it as a
# tokenizer module (under a name nothing here uses).
TOKENIZER_SET = "SELECT fts3_tokenizer('sobolev_test_tokenizer', x'0000000000000000')"
HUGE_BLOB = "SELECT length(randomblob(1000000000))"
# A k that only the slow searches of these tests ask for.
SLOW_K = 999


@pytest.fixture(scope="module")
def index_path(text_index_path):
    return text_index_path


@pytest.fixture
def reader(index_path):
    with SobolevIndex.open(index_path) as opened:
        yield opened


@pytest.fixture
def slow_searches(monkeypatch):
    """A search asking for SLOW_K neighbours takes 0.1 s more; the others
    (the search page's) run as usual."""
    real = SobolevIndex.search

    def search(self, queries, k=None, *args, **kwargs):
        if k == SLOW_K:
            time.sleep(0.1)
        return real(self, queries, k, *args, **kwargs)

    monkeypatch.setattr(SobolevIndex, "search", search)


# ------------------------------------------------------ functions by name
@pytest.mark.parametrize("query, name", [
    ("SELECT hex(fts3_tokenizer('simple'))", "fts3_tokenizer"),
    (TOKENIZER_SET, "fts3_tokenizer"),
    ("SELECT load_extension('/nonexistent/lib')", "load_extension"),
    ("SELECT sqlite_log(1, 'written to the error log')", "sqlite_log"),
    ("SELECT key FROM documents WHERE fts5_source_id() IS NOT NULL", "fts5_source_id"),
])
def test_functions_off_the_list_are_refused_by_name(reader, query, name):
    with pytest.raises(SobolevIndexError,
                       match=f"function {name} is not allowed in read-only queries"):
        run_query(reader, query)
    assert run_query(reader, "SELECT 1")[1] == [(1,)]


def test_sqlite_functions_and_ours_still_work(reader):
    query = ("SELECT count(*), max(length(key)), group_concat(DISTINCT label), "
             "json_extract('{\"a\": [1, 2]}', '$.a[1]'), '{\"b\": 3}' ->> 'b', "
             "round(sqrt(16.0) + pi(), 2), date('2024-02-28', '+1 day'), "
             "printf('%05.1f', 2.5), coalesce(NULL, upper('x')), "
             "sobolev_distance('space-1', 'space-1') FROM documents WHERE deleted = 0 "
             "AND key LIKE 'space-%'")
    _, rows = run_query(reader, query)
    assert rows[0][3:] == (2, 3, 7.14, "2024-02-29", "002.5", "X", 0.0)
    _, ranked = run_query(reader, "SELECT key, row_number() OVER (ORDER BY id) FROM documents "
                                  "WHERE deleted = 0 LIMIT 3")
    assert [r[1] for r in ranked] == [1, 2, 3]


def test_the_command_line_refuses_them_and_huge_values_at_once(index_path):
    for query, expected in [("SELECT hex(fts3_tokenizer('simple'))", "fts3_tokenizer"),
                            (HUGE_BLOB, "at most 1,048,576 bytes")]:
        started = time.monotonic()
        result = run("sql", index_path, query, "--timeout", 1, ok=False)
        seconds = time.monotonic() - started
        assert result.exit_code == 1, result.output
        assert "Error:" in result.output and expected in result.output, result.output
        assert "Traceback" not in result.output
        assert seconds < 1.0, seconds


# ------------------------------------------------------------ SQLite limits
def test_the_command_line_sets_the_work_and_value_limits(index_path):
    query = "SELECT length(sobolev_knn(key, 3)) AS n FROM documents LIMIT 2"
    assert run("sql", index_path, query).exit_code == 0
    result = run("sql", index_path, query, "--max-work", "10", ok=False)
    assert result.exit_code == 1 and "work limit of 10 units" in result.output \
        and "--max-work" in result.output
    big = "SELECT length(randomblob(2000000)) AS n"
    assert "1,048,576" in run("sql", index_path, big, ok=False).output
    assert '"n": 2000000' in run("sql", index_path, big, "--max-value-bytes", "3000000").output


def test_a_huge_value_fails_at_once_with_the_limit_named(reader):
    import sqlite3

    before = reader.catalog.db.conn.getlimit(sqlite3.SQLITE_LIMIT_LENGTH)
    for query in (HUGE_BLOB, "SELECT zeroblob(2000000)",
                  "SELECT length(replace(hex(zeroblob(600000)), '0', 'ab'))",
                  "SELECT group_concat(hex(randomblob(1000))) FROM documents a, documents b"):
        started = time.monotonic()
        with pytest.raises(SobolevIndexError, match=r"string or blob too big.*at most "
                                                    r"1,048,576 bytes"):
            run_query(reader, query, timeout=1)
        assert time.monotonic() - started < 0.5
    # The limit is the statement's: the index's own connection has its
    # limits back afterwards.
    conn = reader.catalog.db.conn
    assert conn.getlimit(sqlite3.SQLITE_LIMIT_LENGTH) == before
    assert run_query(reader, "SELECT length(randomblob(1000000))")[1] == [(1_000_000,)]
    # The limit can be raised.
    assert run_query(reader, "SELECT length(zeroblob(2000000))",
                     max_value_bytes=4_000_000)[1] == [(2_000_000,)]


def test_long_sql_and_deep_expressions_are_refused(reader):
    long_sql = "SELECT 1 " + " " * (2 << 20)
    with pytest.raises(SobolevIndexError, match="too big|too large"):
        run_query(reader, long_sql)
    with pytest.raises(SobolevIndexError, match="maximum depth 250"):
        run_query(reader, "SELECT " + " + ".join(["1"] * 300))
    with pytest.raises(SobolevIndexError, match="too many terms in compound SELECT"):
        run_query(reader, " UNION ALL ".join(["SELECT 1"] * 150))
    with pytest.raises(SobolevIndexError, match="pattern too complex|LIKE or GLOB pattern"):
        run_query(reader, "SELECT count(*) FROM documents WHERE key LIKE ?", ["%" * 2000])
    # Shorter than the limits: as before.
    assert run_query(reader, "SELECT " + " + ".join(["1"] * 200))[1] == [(200,)]


def test_stored_fields_are_read_whole(reader):
    _, rows = run_query(reader, "SELECT max(length(fields)), count(*) FROM documents")
    assert rows[0][1] == 60 and rows[0][0] > 0


# ------------------------------------------------ deadline and work budget
def knn_cost(index, k):
    return sql_module.KNN_WORK + len(index) + sql_module.RESULT_WORK * min(k, len(index))


def test_the_work_of_one_statement_is_bounded(reader, monkeypatch):
    calls = []
    real = SobolevIndex.search

    def counted(self, *args, **kwargs):
        calls.append(1)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(SobolevIndex, "search", counted)
    budget = 3 * knn_cost(reader, 5)
    with pytest.raises(SobolevIndexError, match=r"work limit of \d[\d,]* units.*max_work"):
        run_query(reader, "SELECT count(sobolev_knn(key, 5)) FROM documents", max_work=budget)
    assert len(calls) == 3
    # Each statement has the whole budget: three calls fit in the next one.
    _, rows = run_query(reader, "SELECT count(sobolev_knn(key, 5)) FROM (SELECT key FROM "
                                "documents WHERE deleted = 0 LIMIT 3)", max_work=budget)
    assert rows == [(3,)]
    calls.clear()
    # A call that alone costs more than the budget is refused before it searches.
    with pytest.raises(SobolevIndexError, match="work limit"):
        run_query(reader, "SELECT sobolev_knn('space-1', 5)", max_work=knn_cost(reader, 5) - 1)
    assert calls == []
    # None: no limit.
    _, rows = run_query(reader, "SELECT count(sobolev_knn(key, 5)) FROM documents",
                        max_work=None)
    assert rows == [(59,)]


def test_pairs_and_rows_of_distances_are_charged(reader):
    one = sql_module.PAIR_WORK
    with pytest.raises(SobolevIndexError, match="work limit"):
        run_query(reader, "SELECT sobolev_distance('space-1', 'space-2'), "
                          "sobolev_distance('space-3', 'space-4')", max_work=2 * one - 1)
    assert run_query(reader, "SELECT sobolev_distance('space-1', 'space-2'), "
                             "sobolev_distance('space-3', 'space-4')",
                     max_work=2 * one)[1][0][0] > 0


@pytest.mark.parametrize("bad", [0, -5, 1.5, "many", True])
def test_a_bad_max_work_is_one_clear_error(reader, bad):
    with pytest.raises(ValueError, match=f"max_work is {re.escape(repr(bad))}; expected"):
        run_query(reader, "SELECT 1", max_work=bad)
    with pytest.raises(ValueError, match=f"max_value_bytes is {re.escape(repr(bad))}; expected"):
        run_query(reader, "SELECT 1", max_value_bytes=bad)


def test_the_default_budget_holds_when_none_is_given(reader, monkeypatch):
    # Each call made to cost a third of the default: the fourth is refused.
    monkeypatch.setattr(sql_module, "KNN_WORK", sql_module.DEFAULT_MAX_WORK // 3)
    with pytest.raises(SobolevIndexError, match="work limit of 20,000,000 units"):
        run_query(reader, "SELECT count(sobolev_knn(key, 5)) FROM documents")
    with pytest.raises(SobolevIndexError, match="work limit of 20,000,000 units"):
        _, rows = iter_query(reader, "SELECT sobolev_knn(key, 5) FROM documents")
        list(rows)


# ------------------------------------------------------------------ web
pytest.importorskip("datasette", reason="the web view needs Datasette (the [web] extra)")


def q(**params):
    return urllib.parse.urlencode(params)


class Web:
    """Datasette's in-process client on one event loop."""

    def __init__(self, ds):
        self.ds = ds
        self.loop = asyncio.new_event_loop()
        self.loop.run_until_complete(ds.invoke_startup())

    async def timed(self, path):
        started = time.monotonic()
        response = await self.ds.client.get(path)
        return time.monotonic() - started, response

    def get(self, path):
        return self.loop.run_until_complete(self.timed(path))

    def close(self):
        for db in self.ds.databases.values():
            db.close()
        self.loop.close()


@pytest.fixture
def web(index_path):
    from sobolev_index.web import make_datasette

    made = []

    def make(**kwargs):
        w = Web(make_datasette(index_path, name="ix", **kwargs))
        made.append(w)
        return w

    yield make
    for w in made:
        w.close()


def sql_path(sql):
    return f"/ix.json?{q(sql=sql)}"


@pytest.mark.parametrize("query, name", [
    ("SELECT hex(fts3_tokenizer('simple')) AS h", "fts3_tokenizer"),
    (TOKENIZER_SET, "fts3_tokenizer"),
    ("SELECT sqlite_log(1, 'x')", "sqlite_log"),
])
@pytest.mark.slow
def test_the_web_sql_page_refuses_functions_by_name(web, query, name):
    w = web()
    _, response = w.get(sql_path(query))
    assert response.status_code == 400, response.text
    assert f"function {name} is not allowed in read-only queries" in response.json()["error"]
    _, page = w.get(f"/ix?{q(sql=query)}")
    assert page.status_code == 400 and f"function {name} is not allowed" in page.text
    text = "SELECT json_extract(fields, '$.text') AS t FROM documents LIMIT 1"
    _, fine = w.get(f"/ix.json?{q(sql=text, _shape='array')}")
    assert fine.status_code == 200 and fine.json()[0]["t"]


def test_the_web_sql_page_refuses_huge_values_at_once(web):
    w = web()
    seconds, response = w.get(sql_path(HUGE_BLOB))
    assert response.status_code == 400, response.text
    assert "at most 1,048,576 bytes" in response.json()["error"]
    assert seconds < 1.0, seconds


def test_datasette_pages_of_the_catalog_still_work(web):
    w = web()
    for path in ("/ix", "/ix/documents", "/ix/documents?_facet=label&deleted=0",
                 "/ix/documents.json?_size=5&_sort_desc=id", "/ix/meta", "/ix/words?_sort=word",
                 "/-/versions.json", "/ix/documents?_facet_date=added_at"):
        _, response = w.get(path)
        assert response.status_code == 200, (path, response.text[:500])


def test_web_sql_functions_stop_at_the_time_limit(web, slow_searches):
    w = web(settings={"sql_time_limit_ms": 500})
    seconds, response = w.get(sql_path(f"SELECT count(sobolev_knn(key, {SLOW_K})) AS n "
                                       "FROM documents"))
    assert response.status_code == 400, response.text
    assert "sql_time_limit_ms" in response.json()["error"]
    assert seconds < 0.5 + 0.1 + 0.5, seconds


def test_web_sql_work_is_bounded_by_the_plugin_setting(web, reader):
    w = web(max_sql_work=3 * knn_cost(reader, 5))
    _, response = w.get(sql_path("SELECT count(sobolev_knn(key, 5)) AS n FROM documents"))
    assert response.status_code == 400, response.text
    assert "work limit" in response.json()["error"] and "max_sql_work" in response.json()["error"]
    _, response = w.get(sql_path("SELECT sobolev_knn('space-1', 5) AS n"))
    assert response.status_code == 200, response.text


def test_search_page_and_select_1_answer_while_slow_sql_runs(web, slow_searches):
    """Three slow SQL statements (more than Datasette's SQL threads can run
    besides) while the search page and `select 1` are asked for: the
    statements stop at the time limit, and the other two answer within a
    few seconds instead of waiting for them to finish (59 calls of 0.1 s
    each, taking turns at the index: 15 s and more for the three)."""
    w = web(settings={"sql_time_limit_ms": 500})
    search = f"/ix/-/search.json?{q(q='space1 space2', k=5)}"
    unloaded, response = w.get(search)
    assert response.status_code == 200
    slow = sql_path(f"SELECT count(sobolev_knn(key, {SLOW_K})) AS n FROM documents")

    async def loaded():
        statements = [asyncio.ensure_future(w.timed(slow)) for _ in range(3)]
        await asyncio.sleep(0.2)
        searched = await w.timed(search)
        one = await w.timed(sql_path("select 1"))
        return searched, one, [await s for s in statements]

    (search_seconds, searched), (one_seconds, one), statements = \
        w.loop.run_until_complete(loaded())
    assert searched.status_code == 200 and one.status_code == 200
    assert all(r.status_code == 400 for _, r in statements)
    assert max(s for s, _ in statements) < 3.0, statements
    assert search_seconds < max(2.0, 20 * unloaded), (search_seconds, unloaded)
    assert one_seconds < 2.5, one_seconds


def test_a_function_waiting_for_the_index_gives_up_at_the_time_limit(web):
    """While a page holds the index, an S_p function waits for it, holding
    its connection's SQLite mutex; the page's thread may need that mutex
    (its garbage collection freeing one of that connection's cursors), so
    the wait ends at the statement's deadline instead of never."""
    import threading

    from sobolev_index.web.plugin import served_index

    w = web(immutable=True, settings={"sql_time_limit_ms": 300})
    served = served_index(w.ds, "ix")
    held, done = threading.Event(), threading.Event()

    def hold():
        with served.lock:
            held.set()
            done.wait(5)

    holder = threading.Thread(target=hold)
    holder.start()
    held.wait()
    try:
        seconds, response = w.get(sql_path("SELECT sobolev_knn('space-1', 3) AS k"))
    finally:
        done.set()
        holder.join()
    assert response.status_code == 400, response.text
    assert "time limit (300 ms)" in response.json()["error"]
    assert seconds < 0.3 + 1.0, seconds
    _, response = w.get(sql_path("SELECT sobolev_knn('space-1', 3) AS k"))
    assert response.status_code == 200
