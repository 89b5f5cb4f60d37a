"""The sqlite-utils plugin (sobolev_index.sqlite_plugin), through sqlite-utils'
own command line and Python API: the S_p functions on an index's catalog
agree with the library and the project's CLI; the catalog is read-only,
held to the limits of `sobolev-index sql`, and followed as writers commit;
every other database is left alone."""
import gc
import json
import math
import os
import shutil
import sqlite3
import subprocess
import sys
import time
import warnings

import click
import pytest
import sqlite_utils
from _support.cli import run
from _support.index import assert_unchanged, small_text_index, snapshot
from click.testing import CliRunner
from sqlite_utils import plugins
from sqlite_utils.cli import cli

from sobolev_index import SobolevIndex, sqlite_plugin
from sobolev_index.index import sql as sql_module

SLOW_CTE = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c"


@pytest.fixture(scope="module", autouse=True)
def plugin():
    """The plugin registered with sqlite-utils: by its entry point when
    installed, else by hand for this module."""
    getattr(plugins, "ensure_plugins_loaded", lambda: None)()
    registered_here = not plugins.pm.is_registered(sqlite_plugin)
    sqlite_plugin.register()
    yield sqlite_plugin
    if registered_here:
        plugins.pm.unregister(sqlite_plugin)


@pytest.fixture(scope="module")
def index_path(tmp_path_factory):
    return small_text_index(tmp_path_factory.mktemp("sqliteplugin"))


@pytest.fixture
def catalog(index_path):
    return os.path.join(index_path, "catalog.sqlite")


@pytest.fixture
def reader(index_path):
    with SobolevIndex.open(index_path) as opened:
        yield opened


@pytest.fixture
def db(catalog):
    database = sqlite_utils.Database(catalog)
    yield database
    database.close()


@pytest.fixture
def messages(monkeypatch):
    """The messages of the exceptions raised inside SQLite's callbacks
    (the plugin's refusals, its functions' errors), which Python hands to
    sys.unraisablehook."""
    seen = []
    monkeypatch.setattr(sys, "unraisablehook",
                        lambda unraisable: seen.append(str(unraisable.exc_value)))
    return seen


def sqlite_utils_cli(*args, input=None):
    return CliRunner().invoke(cli, [str(a) for a in args], input=input)


def _p_arg(p):
    return math.inf if p == "inf" else p


# ------------------------------------------------------------- the functions
@pytest.mark.parametrize("p", [None, 2, "inf"])
def test_query_distances_agree_with_the_cli_and_the_api(catalog, index_path, reader, p):
    p_sql = "" if p is None else ", :p"
    params = [] if p is None else ["-p", "p", p]
    result = sqlite_utils_cli("query", catalog,
                              f"select key, sobolev_distance(key, 'space-5'{p_sql}) as d from "
                              "documents where deleted = 0 order by d, id limit 5", *params)
    assert result.exit_code == 0, result.output
    rows = json.loads(result.output)
    expected = reader.search("space-5", k=5, p=_p_arg(p))
    assert [r["key"] for r in rows] == expected.keys[0]
    assert [r["d"] for r in rows] == pytest.approx(expected.distances[0].tolist(), rel=1e-10,
                                                   abs=1e-12)
    for row in rows:
        assert row["d"] == pytest.approx(reader.distance(row["key"], "space-5", p=_p_arg(p)),
                                         rel=1e-10, abs=1e-12)
        cli_p = [] if p is None else ["-p", p]
        project = json.loads(run("distance", index_path, row["key"], "space-5", *cli_p,
                                 "--json").output)
        assert row["d"] == pytest.approx(project["distance"], rel=1e-10, abs=1e-12)


@pytest.mark.parametrize("p", [None, 1.5, "inf"])
def test_sobolev_knn_agrees_with_search(db, reader, p):
    for key in ("space-3", "cooking-7"):
        args = [key, 7] + ([] if p is None else [p])
        marks = ", ".join("?" * len(args))
        got = json.loads(db.execute(f"select sobolev_knn({marks})", args).fetchone()[0])
        expected = reader.search(key, k=7, p=_p_arg(p)).to_records()[0]
        assert [h["key"] for h in got] == [h["key"] for h in expected]
        assert [h["distance"] for h in got] == pytest.approx(
            [h["distance"] for h in expected], rel=1e-12)
    # A key that is not live (music-0 is deleted) gives NULL, as in `sobolev-index sql`.
    assert db.execute("select sobolev_knn('music-0', 3), sobolev_distance('nope', 'space-1')"
                      ).fetchone() == (None, None)


# ----------------------------------------------------------------- reading
def test_sqlite_utils_reads_the_catalog(catalog, db):
    result = sqlite_utils_cli("tables", catalog, "--counts", "--columns", "--schema")
    assert result.exit_code == 0, result.output
    tables = {t["table"]: t for t in json.loads(result.output)}
    assert tables["documents"]["count"] == 60 and "key" in tables["documents"]["columns"]
    result = sqlite_utils_cli("rows", catalog, "documents", "-c", "key", "--where",
                              "deleted = 0", "--order", "id", "--limit", "2")
    assert result.exit_code == 0 and json.loads(result.output) == [{"key": "space-0"},
                                                                   {"key": "space-1"}]
    for args in (["schema", catalog], ["indexes", catalog], ["dump", catalog],
                 ["query", catalog, "select count(*) as n from pragma_table_info('meta')"]):
        result = sqlite_utils_cli(*args)
        assert result.exit_code == 0, (args, result.output)
    assert "CREATE TABLE" in sqlite_utils_cli("schema", catalog).output
    # The Python API's reads, and the PRAGMAs that describe the schema.
    assert {"meta", "documents", "segments"} <= set(db.table_names())
    assert db["documents"].count == 60
    assert "label" in {c.name for c in db["documents"].columns}
    assert db["documents"].indexes and db["documents"].pks == ["id"]
    assert [r["key"] for r in db["documents"].rows_where("deleted = 0", order_by="id",
                                                                  limit=1)] == ["space-0"]
    assert db.execute("PRAGMA table_info(meta)").fetchall()
    assert db.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    # A connection wrapped again (sqlite-utils sets recursive_triggers then).
    again = sqlite_utils.Database(db.conn)
    assert again.execute("select sobolev_distance('space-1', 'space-1')").fetchone() == (0.0,)


# ------------------------------------------------------- other databases
@pytest.mark.parametrize("kind", ["plain file", "memory", "catalog.sqlite, no meta table",
                                  "catalog.sqlite, another meta table"])
def test_other_databases_are_left_alone(tmp_path, monkeypatch, kind):
    if kind == "plain file":
        path = str(tmp_path / "plain.db")
    elif kind == "memory":
        path = ":memory:"
    else:
        os.mkdir(tmp_path / "notindex")
        path = str(tmp_path / "notindex" / "catalog.sqlite")
        # Another application's catalog.
        table = "meta" if kind.endswith("another meta table") else "items"
        sqlite_utils.Database(path, execute_plugins=False)[table].insert({"name": "x"})
    if not kind.startswith("catalog.sqlite"):
        # The path alone tells: nothing of the index is opened.
        def refuse(*args, **kwargs):
            raise AssertionError("SobolevIndex.open called for a database that is no catalog")
        monkeypatch.setattr(SobolevIndex, "open", refuse)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        db = sqlite_utils.Database(path)
    with pytest.raises(sqlite3.OperationalError, match="no such function: sobolev_distance"):
        db.execute("select sobolev_distance('a', 'b')")
    db["t"].insert({"x": 1})
    db.execute("PRAGMA user_version = 7")
    db.execute("create temp table scratch (y)")
    assert db.execute("select count(*), hex(randomblob(2000000)) is not null from t"
                      ).fetchone() == (1, 1)
    assert db.execute("PRAGMA user_version").fetchone() == (7,)
    db.close()


# ----------------------------------------------------------- read-only rules
def test_writes_are_refused_and_the_index_stays_whole(catalog, index_path, tmp_path, messages):
    before = snapshot(index_path)
    db = sqlite_utils.Database(catalog)
    other = tmp_path / "other.db"
    refused = {
        "insert into meta (name, value) values ('x', '1')": "INSERT INTO meta",
        "update documents set label = 'x'": "UPDATE documents",
        "delete from documents": "DELETE FROM documents",
        "create table t (x)": "changing the schema",
        "create temp table t (x)": "changing the schema",
        "drop table words": "changing the schema",
        "alter table meta add column extra": "ALTER TABLE meta",
        "create index i on documents(label)": "changing the schema",
        "analyze": "",
        "vacuum": "",
        f"vacuum into '{tmp_path / 'copy.db'}'": "ATTACH (or VACUUM)",
        f"attach '{other}' as other": "ATTACH (or VACUUM)",
        "PRAGMA journal_mode = delete": "PRAGMA journal_mode = delete",
        "PRAGMA query_only = 0": "PRAGMA query_only = 0",
        "PRAGMA writable_schema = 1": "PRAGMA writable_schema = 1",
        "PRAGMA user_version = 3": "PRAGMA user_version = 3",
        "PRAGMA wal_checkpoint(TRUNCATE)": "PRAGMA wal_checkpoint",
        "begin immediate": None,  # query_only: it would take the write lock
    }
    for statement, words in refused.items():
        messages.clear()
        with pytest.raises(sqlite3.DatabaseError,
                           match="not authorized|authorization denied|readonly database"):
            db.execute(statement)
        if words is not None:
            assert any("is refused" in m and words in m and "commit point" in m
                       for m in messages), (statement, messages)
    # sqlite-utils' own writes
    for write in (lambda: db["meta"].insert({"name": "y", "value": "2"}),
                  lambda: db["documents"].delete_where("id = 1"),
                  lambda: db["words"].drop(),
                  lambda: db["documents"].update(1, {"label": "x"})):
        with pytest.raises(sqlite3.DatabaseError):
            write()
    # Reads work after all that.
    assert db.execute("select count(*) from documents").fetchone() == (60,)
    db.close()
    # ... and through the command line
    for args, stdin in ((["insert", catalog, "meta", "-"], '{"name": "z", "value": "3"}'),
                        (["query", catalog, "update documents set deleted = 1"], None),
                        (["create-table", catalog, "extra", "id", "integer"], None),
                        (["drop-table", catalog, "words"], None),
                        (["add-column", catalog, "meta", "extra"], None)):
        result = sqlite_utils_cli(*args, input=stdin)
        assert result.exit_code != 0, (args, result.output)
    assert not other.exists() and not (tmp_path / "copy.db").exists()
    gc.collect()
    assert_unchanged(before, index_path)
    with SobolevIndex.open(index_path) as opened:
        assert opened.verify()["ok"]


def test_functions_off_the_list_are_refused(catalog, db, messages):
    db.register_fts4_bm25()  # registered by sqlite-utils, not allowed here
    for statement, name in (("select load_extension('/nonexistent/lib')", "load_extension"),
                            ("select hex(fts3_tokenizer('simple'))", "fts3_tokenizer"),
                            ("select rank_bm25(x'00')", "rank_bm25")):
        messages.clear()
        with pytest.raises(sqlite3.DatabaseError, match="not authorized"):
            db.execute(statement)
        assert any(f"function {name} is not allowed" in m for m in messages), messages
    result = sqlite_utils_cli("query", catalog, "select twice(2)", "--functions",
                              "def twice(x):\n    return 2 * x\n")
    assert result.exit_code == 1 and "not authorized to use function: twice" in result.output
    # SQLite's own functions and ours still work.
    assert db.execute("select upper('a'), json_extract('[1, 2]', '$[1]'), "
                      "sobolev_distance('space-1', 'space-1')").fetchone() == ("A", 2, 0.0)


def test_a_bad_p_names_its_value(catalog, db, messages, monkeypatch):
    for statement, words in (("select sobolev_distance('space-1', 'space-2', 0.5)", "p is 0.5"),
                             ("select sobolev_knn('space-1', 3, 'abc')", "p is 'abc'"),
                             ("select sobolev_knn('space-1', 0)", "k is 0")):
        messages.clear()
        with pytest.raises(sqlite3.OperationalError, match="user-defined function raised"):
            db.execute(statement).fetchall()
        assert any(words in m for m in messages), (statement, messages)
    # sqlite-utils' command line prints the message above its own error
    # (Python's default hook writes it to stderr).
    monkeypatch.setattr(sys, "unraisablehook", sys.__unraisablehook__)
    result = sqlite_utils_cli("query", catalog,
                              "select sobolev_distance('space-1', 'space-2', 0.5)")
    assert result.exit_code == 1
    assert "p is 0.5; expected a number in [1, inf]" in result.output, result.output
    assert "Error: user-defined function raised exception" in result.output


# -------------------------------------------------------------------- limits
def test_a_slow_statement_is_stopped_at_the_time_limit(catalog, messages, monkeypatch):
    monkeypatch.setattr(sql_module, "DEFAULT_TIMEOUT", 0.3)
    db = sqlite_utils.Database(catalog)
    started = time.monotonic()
    with pytest.raises(sqlite3.OperationalError, match="interrupted"):
        db.execute(SLOW_CTE).fetchall()
    assert time.monotonic() - started < 3
    assert any("longer than 0.3 s" in m and "--timeout" in m for m in messages), messages
    # Each statement has its own time: one started after the last one's
    # deadline (and prepared then) runs.
    time.sleep(0.4)
    assert db.execute("WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c "
                      "WHERE x < 1000) SELECT count(*) FROM c WHERE x > 0").fetchone() == (1000,)
    # A slow S_p function is stopped too: it looks at the deadline itself.
    real = SobolevIndex.search

    def slow_search(self, *args, **kwargs):
        time.sleep(0.1)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(SobolevIndex, "search", slow_search)
    started = time.monotonic()
    with pytest.raises(sqlite3.OperationalError):
        db.execute("select count(sobolev_knn(key, 3)) from documents").fetchall()
    assert time.monotonic() - started < 2
    db.close()
    # The command line, stopped the same way.
    result = sqlite_utils_cli("query", catalog, SLOW_CTE)
    assert result.exit_code == 1 and "Error: interrupted" in result.output


def test_nested_pragma_statements_keep_the_limits_of_their_statement(catalog, messages,
                                                                       monkeypatch):
    # A pragma_* table-valued function runs a PRAGMA statement of its own
    # at each use; it must not start the statement's time or budget anew.
    monkeypatch.setattr(sql_module, "DEFAULT_TIMEOUT", 0.3)
    db = sqlite_utils.Database(catalog)
    nested = ("WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) "
              "FROM c WHERE (SELECT count(*) FROM pragma_table_info(CASE c.x % 2 WHEN 0 "
              "THEN 'meta' ELSE 'documents' END)) > 0")
    started = time.monotonic()
    with pytest.raises(sqlite3.OperationalError, match="interrupted"):
        db.execute(nested).fetchall()
    assert time.monotonic() - started < 3
    monkeypatch.setattr(sql_module, "DEFAULT_MAX_WORK", 50_000)
    with pytest.raises(sqlite3.OperationalError):
        db.execute("SELECT count(sobolev_knn(key, 3)) FROM documents d "
                   "WHERE (SELECT count(*) FROM pragma_table_info(d.key)) = 0").fetchall()
    assert any("work limit of 50,000 units" in m for m in messages), messages
    db.close()


def test_the_work_budget_holds(db, messages, monkeypatch):
    monkeypatch.setattr(sql_module, "DEFAULT_MAX_WORK", 10)
    with pytest.raises(sqlite3.OperationalError):
        db.execute("select sobolev_knn('space-1', 3)").fetchall()
    assert any("work limit of 10 units" in m and "--max-work" in m for m in messages), messages
    monkeypatch.undo()
    assert db.execute("select length(sobolev_knn('space-1', 3)) > 0").fetchone() == (1,)


def test_values_over_the_length_limit_fail(db):
    with pytest.raises(sqlite3.DataError, match="too big"):
        db.execute("select length(randomblob(2000000))").fetchall()


# ---------------------------------------------------- the index it opened
def test_a_long_lived_connection_follows_commits(index_path, tmp_path, monkeypatch):
    path = str(tmp_path / "ix")
    shutil.copytree(index_path, path)
    db = sqlite_utils.Database(os.path.join(path, "catalog.sqlite"))
    refreshes = []
    real_refresh = SobolevIndex.refresh
    monkeypatch.setattr(SobolevIndex, "refresh",
                        lambda self: (refreshes.append(1), real_refresh(self))[1])
    query = "select sobolev_distance('space-1', 'space-2'), sobolev_distance('copy', 'space-1')"
    assert db.execute(query).fetchone()[1] is None
    assert db.execute(query).fetchone()[1] is None and refreshes == []  # nothing committed
    with SobolevIndex.open(path, "a") as writer:
        stored = writer.get("space-1")
        writer.add([(stored["nodes"], stored["masses"])], keys=["copy"])
        writer.delete(["space-2"])
    assert db.execute(query).fetchone() == (None, 0.0)
    assert len(refreshes) == 1
    hits = json.loads(db.execute("select sobolev_knn('space-1', 2)").fetchone()[0])
    assert {h["key"] for h in hits} == {"space-1", "copy"}
    db.close()


def test_a_commit_while_the_connection_is_prepared_is_followed(index_path, tmp_path, monkeypatch):
    # A commit landing just after the index took its snapshot, while the
    # connection is prepared: the version was read before the snapshot, so
    # the first S_p call moves the index to the commit.
    path = str(tmp_path / "ix")
    shutil.copytree(index_path, path)
    real_open = SobolevIndex.open.__func__

    def open_then_commit(cls, directory, *args, **kwargs):
        opened = real_open(cls, directory, *args, **kwargs)
        if kwargs.get("mode", args[0] if args else "r") == "r":
            with real_open(cls, directory, "a") as writer:
                stored = writer.get("space-1")
                writer.add([(stored["nodes"], stored["masses"])], keys=["late"])
        return opened

    monkeypatch.setattr(SobolevIndex, "open", classmethod(open_then_commit))
    db = sqlite_utils.Database(os.path.join(path, "catalog.sqlite"))
    monkeypatch.undo()
    assert db.execute("select sobolev_distance('late', 'space-1')").fetchone() == (0.0,)
    db.close()


@pytest.mark.parametrize("name", ["q?x", "h#x", "pc%41"])
def test_an_index_under_a_path_with_uri_characters(index_path, tmp_path, messages, name):
    # "?", "#" and "%" end or change a file name in an SQLite URI: the
    # read-only connections encode them.
    path = tmp_path / name / "ix"
    shutil.copytree(index_path, path)
    with SobolevIndex.open(str(path)) as reader:
        assert reader.search("space-1", k=1).to_records()[0][0]["key"] == "space-1"
    db = sqlite_utils.Database(str(path / "catalog.sqlite"))
    assert db.execute("select sobolev_distance('space-1', 'space-1')").fetchone() == (0.0,)
    with pytest.raises(sqlite3.DatabaseError):
        db.execute("update meta set value = 'x'")
    assert any("UPDATE meta is refused" in m for m in messages), messages
    db.close()
    assert sorted(os.listdir(tmp_path / name)) == ["ix"]  # no stray file beside it


def test_the_index_is_closed_with_the_connection(catalog, monkeypatch):
    opened = []
    real_open = SobolevIndex.open
    monkeypatch.setattr(SobolevIndex, "open", lambda *args, **kwargs: (
        opened.append(real_open(*args, **kwargs)), opened[-1])[1])
    db = sqlite_utils.Database(catalog)
    db.execute("select sobolev_distance('space-1', 'space-2')").fetchone()
    assert len(opened) == 1 and not opened[0]._closed
    db.close()
    assert opened[0]._closed
    # A connection dropped without close() goes too: nothing the plugin
    # registered holds it.
    db = sqlite_utils.Database(catalog)
    db.execute("select sobolev_knn('space-1', 2)").fetchone()
    assert len(opened) == 2 and not opened[1]._closed
    del db
    gc.collect()
    assert opened[1]._closed


def test_an_index_that_cannot_be_opened_stays_read_only(index_path, tmp_path, messages):
    path = str(tmp_path / "damaged")
    shutil.copytree(index_path, path)
    with open(os.path.join(path, "graph.h5"), "r+b") as handle:
        handle.truncate(100)
    with pytest.warns(RuntimeWarning, match="cannot be opened.*read-only"):
        db = sqlite_utils.Database(os.path.join(path, "catalog.sqlite"))
    assert db["documents"].count == 60
    with pytest.raises(sqlite3.OperationalError, match="no such function"):
        db.execute("select sobolev_distance('space-1', 'space-2')")
    with pytest.raises(sqlite3.DatabaseError, match="not authorized"):
        db.execute("delete from documents")
    db.close()


# ------------------------------------------------------------ the module
def test_importing_the_plugin_loads_nothing_heavy(tmp_path):
    # sqlite-utils imports the plugin in every process that uses it: only a
    # catalog connection may load the index (and NumPy, SciPy, h5py).
    code = (
        "import sys, tempfile, os\n"
        "import sqlite_utils\n"
        "before = set(sys.modules)\n"
        "from sobolev_index import sqlite_plugin\n"
        "sqlite_plugin.register()\n"
        "sqlite_utils.Database(memory=True).execute('select 1')\n"
        "plain = os.path.join(tempfile.mkdtemp(), 'plain.db')\n"
        "sqlite_utils.Database(plain)['t'].insert({'x': 1})\n"
        "other = os.path.join(tempfile.mkdtemp(), 'catalog.sqlite')\n"
        "sqlite_utils.Database(other)['meta'].insert({'name': 'format', 'value': '\"x\"'})\n"
        "sqlite_utils.Database(other)['meta'].count\n"
        "heavy = ('numpy', 'scipy', 'h5py', 'sobolev_index.index')\n"
        "print(sorted(m for m in heavy if m in set(sys.modules) - before))\n")
    # From a neutral folder: from the checkout's root, "python -c" would
    # import the source tree, unbuilt after a plain `pip install .`.
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]", out.stdout


def test_a_locked_catalog_of_another_application_is_left_at_once(tmp_path):
    # Readers of an index's catalog (WAL) never wait for its writer; a file
    # named catalog.sqlite under another application's exclusive lock is
    # not an index's, and is not waited for.
    path = str(tmp_path / "catalog.sqlite")
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("CREATE TABLE t (x)")
    other.execute("BEGIN EXCLUSIVE")
    other.execute("INSERT INTO t VALUES (1)")
    started = time.monotonic()
    db = sqlite_utils.Database(path)
    assert time.monotonic() - started < 5
    other.execute("COMMIT")
    other.close()
    assert db.execute("SELECT count(*) FROM t").fetchone() == (1,)
    with pytest.raises(sqlite3.OperationalError, match="no such function"):
        db.execute("SELECT sobolev_distance('a', 'b')")
    db["t"].insert({"x": 2})  # not guarded: writes work
    db.close()


def test_the_catalog_name_is_the_index_s():
    from sobolev_index.index import storage

    assert sqlite_plugin.CATALOG_NAME == storage.CATALOG
    assert sqlite_plugin.INDEX_FORMAT == storage.FORMAT_NAME


def test_the_plugin_is_installed_for_sqlite_utils():
    from importlib.metadata import entry_points

    if not any(ep.value == "sobolev_index.sqlite_plugin"
               for ep in entry_points(group="sqlite_utils")):
        pytest.skip("the sqlite_utils entry point of sobolev-index is not installed (a tree "
                    "whose package metadata predates it): install the package to test it")
    found = [p for p in plugins.get_plugins()
             if p["name"] in ("sobolev-index", "sobolev_index", "sobolev_index.sqlite_plugin")]
    assert found and "prepare_connection" in found[0]["hooks"], plugins.get_plugins()
    assert "register_commands" in found[0]["hooks"]
    assert "sobolev-search" in cli.commands


# ------------------------------------------------------------ the command
@pytest.fixture(scope="module")
def search_cli():
    group = click.Group()
    sqlite_plugin.register_commands(group)
    return group


def test_sobolev_search_prints_the_nearest_documents(search_cli, index_path, catalog, reader):
    expected = reader.search("space-3", k=4, p=2).to_records()[0]
    for where in (index_path, catalog):
        result = CliRunner().invoke(search_cli, ["sobolev-search", where, "space-3", "-k", "4",
                                                 "-p", "2", "--json"])
        assert result.exit_code == 0, result.output
        got = json.loads(result.output)
        assert [h["key"] for h in got] == [h["key"] for h in expected]
        assert [h["distance"] for h in got] == pytest.approx([h["distance"] for h in expected])
    result = CliRunner().invoke(search_cli, ["sobolev-search", index_path, "space-3"])
    lines = result.output.splitlines()
    assert result.exit_code == 0 and lines[0] == "rank\tdistance\tkey\tlabel"
    assert len(lines) == 11 and lines[1].split("\t")[2] == "space-3"


@pytest.mark.parametrize("args, words", [
    (["nope"], "sqlite-utils rows"),
    (["space-3", "-p", "0.5"], "p is 0.5"),
    (["space-3", "-p", "abc"], "p is 'abc'"),
])
def test_sobolev_search_errors_say_what_to_do(search_cli, index_path, tmp_path, args, words):
    result = CliRunner().invoke(search_cli, ["sobolev-search", index_path, *args])
    assert result.exit_code == 1 and "Error:" in result.output and words in result.output, \
        result.output
    result = CliRunner().invoke(search_cli, ["sobolev-search", str(tmp_path), "space-3"])
    assert result.exit_code == 1 and "give an index directory" in result.output
