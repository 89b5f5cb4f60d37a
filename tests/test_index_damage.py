"""Damaged catalog values and API arguments that used to escape as the wrong
exception (found by bench/reliability.py): each is now a CorruptIndexError
at open, a problem in verify()'s report, or one clear ValueError/TypeError
with the index unchanged."""
import json
import shutil
import sqlite3

import numpy as np
import pytest
from _support.graphs import pick_roots, random_graph
from _support.index import assert_unchanged, snapshot
from _support.measures import random_measures

from sobolev_index import CorruptIndexError, SobolevIndex

N = 30
SPEC = random_graph(5, N, extra=20)
ROOTS = pick_roots(SPEC, 2, seed=2)


@pytest.fixture(scope="module")
def template(tmp_path_factory):
    path = tmp_path_factory.mktemp("tpl") / "idx"
    with SobolevIndex.create(str(path), SPEC.lib(), roots=ROOTS) as idx:
        idx.add(random_measures(np.random.default_rng(1), N, 8),
                keys=[f"a{i}" for i in range(8)], fields=[{"i": i} for i in range(8)])
    return path


@pytest.fixture
def path(template, tmp_path):
    copy = tmp_path / "idx"
    shutil.copytree(template, copy)
    return str(copy)


def _sql(path, statement, params=()):
    con = sqlite3.connect(f"{path}/catalog.sqlite")
    con.execute(statement, params)
    con.commit()
    con.close()


@pytest.mark.parametrize("value", ["0", '"abc"', "null", "{bad"])
def test_a_damaged_default_p(path, value):
    _sql(path, "UPDATE meta SET value = ? WHERE name = 'p'", (value,))
    with pytest.raises(CorruptIndexError, match="meta value p|default p"):
        SobolevIndex.open(path)
    report = SobolevIndex.verify_path(path)
    assert not report["ok"]
    assert any("p" in problem for problem in report["problems"])


def test_a_damaged_root_and_id_counter(path):
    _sql(path, "UPDATE roots SET node = NULL WHERE position = 1")
    with pytest.raises(CorruptIndexError, match="root 1"):
        SobolevIndex.open(path)
    _sql(path, "UPDATE roots SET node = 0 WHERE position = 1")
    _sql(path, "UPDATE meta SET value = '\"x\"' WHERE name = 'next_doc_id'")
    report = SobolevIndex.verify_path(path)  # reports, does not raise
    assert any("next_doc_id" in problem for problem in report["problems"])


@pytest.mark.parametrize("damage,expected", [
    ("UPDATE documents SET deleted = 7 WHERE key = 'a2'", "deleted = 7"),
    ("UPDATE documents SET fields = '{\"i\": ' WHERE key = 'a3'", "not a JSON object"),
    ("UPDATE documents SET fields = '[1, 2]' WHERE key = 'a3'", "not a JSON object"),
    ("UPDATE documents SET added_at = '2026-11-26T14:19:45.545+0:00' WHERE key = 'a1'",
     "ISO 8601"),
])
def test_verify_reports_values_no_writer_writes(path, damage, expected):
    _sql(path, damage)
    report = SobolevIndex.verify_path(path)
    assert not report["ok"]
    assert any(expected in problem for problem in report["problems"]), report["problems"]


@pytest.mark.parametrize("value", ["2026-11-26T14:19:45Z", "2026-11-26T14:19:45.5+01:00",
                                   "2026-11-26T14:19:45.123456", "2026-11-26T14:19:45"])
def test_verify_takes_every_iso_time_it_accepts(path, value):
    """Times another writer may store (a "Z" zone, a fraction of 1-6
    digits) are not reported: Python 3.10's fromisoformat alone refused
    some of them."""
    _sql(path, "UPDATE documents SET added_at = ? WHERE key = 'a1'", (value,))
    report = SobolevIndex.verify_path(path)
    assert report["ok"], report["problems"]


def test_verify_reports_two_live_documents_with_one_key(path):
    _sql(path, "DROP INDEX documents_live_key")
    _sql(path, "UPDATE documents SET key = 'a1' WHERE key = 'a2'")
    report = SobolevIndex.verify_path(path)
    assert any("2 live documents have the key 'a1'" in p for p in report["problems"])


@pytest.mark.parametrize("roots", [[0.5], [True], ["0"]])
def test_root_positions_must_be_integers(path, roots):
    with SobolevIndex.open(path) as idx:
        with pytest.raises(ValueError, match="roots is"):
            idx.search("a0", k=2, roots=roots)


@pytest.mark.parametrize("call", [
    lambda idx: idx.add(random_measures(np.random.default_rng(2), N, 1), keys=["k\udcff"]),
    lambda idx: idx.upsert(random_measures(np.random.default_rng(2), N, 1), keys=["a\udcff"]),
    lambda idx: idx.add(random_measures(np.random.default_rng(2), N, 1), labels=["l\udcff"]),
])
def test_text_that_utf8_cannot_store_is_refused_before_writing(path, call, monkeypatch):
    from sobolev_index.index import storage

    def no_write(*args, **kwargs):
        raise AssertionError("a segment was written for a batch that must be refused")

    monkeypatch.setattr(storage, "write_segment", no_write)
    before = snapshot(path)
    with SobolevIndex.open(path, "a") as idx:
        with pytest.raises(ValueError, match="surrogate"):
            call(idx)
    assert_unchanged(before, path, "text with a lone surrogate")


def test_fields_nested_too_deeply_and_delete_of_nothing(path):
    deep = {}
    inner = deep
    for _ in range(5000):
        inner["x"] = {}
        inner = inner["x"]
    before = snapshot(path)
    with SobolevIndex.open(path, "a") as idx:
        with pytest.raises(ValueError, match="nested too deeply"):
            idx.add(random_measures(np.random.default_rng(3), N, 1), fields=[deep])
        with pytest.raises(TypeError, match="expected a key"):
            idx.delete(None)
    assert_unchanged(before, path, "bad fields and delete(None)")
    # The ordinary fields are still there, as JSON.
    with SobolevIndex.open(path) as idx:
        assert idx.get("a5")["fields"] == json.loads('{"i": 5}')


def test_verify_reports_a_damaged_table_definition(path):
    # A flipped byte in a CREATE statement that still parses ("eta" REALx)
    # passes SQLite's integrity check.
    con = sqlite3.connect(f"{path}/catalog.sqlite")
    sql = con.execute("SELECT sql FROM sqlite_master WHERE name = 'roots'").fetchone()[0]
    con.execute("PRAGMA writable_schema = ON")
    con.execute("UPDATE sqlite_master SET sql = ? WHERE name = 'roots'",
                (sql.replace('"eta" REAL', '"eta" REALx'),))
    con.commit()
    con.close()
    report = SobolevIndex.verify_path(path)
    assert any("column eta is declared as 'REALX'" in p for p in report["problems"]), report
