"""Documents stay in the catalog: opening an index reads the segment list and
the tombstones, not a row per document, and every look-up by key, id or
label goes to SQLite. These tests make reading every document row fail, and
check that opening, searching and writing still work and agree with what
was added (the expected keys and labels come from the test's own records)."""
import sqlite3

import numpy as np
import pytest
from _support.graphs import pick_roots, random_graph
from _support.measures import random_measures

from sobolev_index import CorruptIndexError, KeyNotFoundError, SobolevIndex
from sobolev_index.index.catalog import Catalog

N = 40
SPEC = random_graph(21, N, extra=30)
ROOTS = pick_roots(SPEC, 2, seed=1)


def _docs(seed, count):
    return random_measures(np.random.default_rng(seed), N, count)


@pytest.fixture
def no_full_reads(monkeypatch):
    """Reading all document rows (what opening did before) now fails."""
    def refuse(*args, **kwargs):
        raise AssertionError("every document row was read")

    monkeypatch.setattr(Catalog, "snapshot", refuse)
    monkeypatch.setattr(Catalog, "_documents", staticmethod(refuse))


@pytest.fixture
def built(tmp_path):
    path = str(tmp_path / "idx")
    records = {}
    with SobolevIndex.create(path, SPEC.lib(), roots=ROOTS) as idx:
        for batch in range(3):
            keys = [f"b{batch}-{i}" for i in range(7)]
            labels = ["even" if i % 2 == 0 else "odd" for i in range(7)]
            measures = _docs(batch, 7)
            idx.add(measures, keys=keys, labels=labels)
            records.update({k: (m, lab) for k, m, lab in zip(keys, measures, labels)})
        idx.delete(["b0-1", "b2-6"])
    for key in ("b0-1", "b2-6"):
        del records[key]
    return path, records


def test_open_search_and_get_without_reading_every_document(built, no_full_reads):
    path, records = built
    with SobolevIndex.open(path) as idx:
        assert len(idx) == len(records)
        assert list(idx) == sorted(records, key=lambda k: (int(k[1]), int(k.split("-")[1])))
        assert "b1-3" in idx and "b0-1" not in idx and 5 not in idx
        assert idx.existing_keys(["b1-3", "b0-1", "nope", 7]) == {"b1-3"}
        for key, (measure, label) in list(records.items())[:5]:
            got = idx.get(key)
            assert got["label"] == label
            np.testing.assert_array_equal(np.sort(got["nodes"]), np.sort(measure[0]))
        # Every document is found from its own measure, with its label.
        found = idx.search([m for m, _ in records.values()], k=1, p=2)
        for key, hits, labels, dist in zip(records, found.keys, found.labels, found.distances):
            assert dist[0] <= 1e-9 and hits[0] == key
            assert labels[0] == records[key][1]
        # By key, filtered by label and by keys.
        hits = idx.search("b1-2", k=len(records), where={"label": "odd"})
        assert sorted(hits.keys[0]) == sorted(k for k, (_, lab) in records.items()
                                              if lab == "odd")
        assert set(hits.labels[0]) == {"odd"}
        hits = idx.search("b1-2", k=5, where={"keys": ["b2-0", "b0-1", "b1-4"]})
        assert sorted(hits.keys[0]) == ["b1-4", "b2-0"]
        assert idx.keys_with_labels("even") == [k for k in records if records[k][1] == "even"]
        with pytest.raises(KeyNotFoundError, match="b0-1"):
            idx.get("b0-1")
        with pytest.raises(KeyNotFoundError, match="nope"):
            idx.features(["b1-1", "nope"])


def test_writes_without_reading_every_document(built, no_full_reads):
    path, records = built
    with SobolevIndex.open(path, "a") as idx:
        keys = idx.add(_docs(9, 3))  # keys made by the index
        assert all(k in idx for k in keys)
        idx.upsert(_docs(10, 2), keys=["b1-0", "new"], labels=["odd", "odd"])
        assert idx.get("b1-0")["label"] == "odd"
        assert idx.delete(["b2-0", keys[0]]) == 2
        assert len(idx) == len(records) + 3 + 1 - 2
        idx.compact()
        assert len(idx) == len(records) + 2
        assert idx.segments[0][1] == len(idx)
    with SobolevIndex.open(path) as idx:
        assert len(idx) == len(records) + 2
        assert "b2-0" not in idx and "new" in idx


def test_tombstones_are_read_at_open(built):
    path, records = built
    with SobolevIndex.open(path) as idx:
        assert sum(live for _, _, live in idx.segments) == len(records)
        assert sum(rows for _, rows, _ in idx.segments) == len(records) + 2
        found = idx.search(_docs(0, 7)[1:2], k=len(records) + 2, p=1)
        assert "b0-1" not in found.keys[0]
        assert len(found.keys[0]) == len(records)


def test_a_tombstone_outside_every_segment_is_corruption(built):
    path, _ = built
    con = sqlite3.connect(f"{path}/catalog.sqlite")
    con.execute("UPDATE documents SET row = 999 WHERE key = 'b0-1'")
    con.commit()
    con.close()
    with pytest.raises(CorruptIndexError, match="row 999"):
        SobolevIndex.open(path)


def test_a_catalog_without_the_tombstone_index_gets_it_from_its_writer(built):
    path, records = built
    con = sqlite3.connect(f"{path}/catalog.sqlite")
    con.execute("DROP INDEX documents_tombstones")
    con.commit()
    con.close()
    with SobolevIndex.open(path) as idx:  # a reader: still opens
        assert len(idx) == len(records)
    SobolevIndex.open(path, "a").close()
    con = sqlite3.connect(f"{path}/catalog.sqlite")
    names = {row[0] for row in con.execute("SELECT name FROM sqlite_master WHERE type='index'")}
    con.close()
    assert "documents_tombstones" in names


# ------------------------------------------------ found by review
def test_the_label_none_selects_unlabelled_documents(tmp_path):
    path = str(tmp_path / "idx")
    with SobolevIndex.create(path, SPEC.lib(), roots=ROOTS) as idx:
        idx.add(_docs(1, 4), keys=["a", "b", "c", "d"], labels=["x", None, "x", None])
    with SobolevIndex.open(path) as idx:
        hits = idx.search("a", k=4, where={"label": None})
        assert sorted(hits.keys[0]) == ["b", "d"] and hits.labels[0] == [None, None]
        hits = idx.search("a", k=4, where={"label": [None, "x"]})
        assert sorted(hits.keys[0]) == ["a", "b", "c", "d"]
        assert idx.keys_with_labels([None]) == ["b", "d"]
        assert idx.gram(labels=[None])[1] == ["b", "d"]


def test_lookups_of_text_sqlite_cannot_take_find_nothing(built):
    path, _ = built
    with SobolevIndex.open(path) as idx:
        assert "k\ud800" not in idx
        assert idx.existing_keys(["k\ud800", "b1-1"]) == {"b1-1"}
        with pytest.raises(KeyNotFoundError):
            idx.get("k\udcff")
        assert idx.search("b1-1", k=3, where={"keys": ["\udcff"]}).keys == [[]]
        assert idx.keys_with_labels(["\udcff"]) == []
        with pytest.raises(TypeError, match="expected a list of keys"):
            idx.existing_keys("b1-1")


def test_an_interrupted_refresh_keeps_the_old_snapshot(built, monkeypatch):
    from sobolev_index.index import storage

    path, records = built
    reader = SobolevIndex.open(path)
    before = reader.search("b1-2", k=5)
    with SobolevIndex.open(path, "a") as writer:
        writer.delete(["b1-2", "b0-0"])
        writer.compact()
    real = storage.read_segment

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(storage, "read_segment", interrupted)
    with pytest.raises(KeyboardInterrupt):
        reader.refresh()
    monkeypatch.setattr(storage, "read_segment", real)
    # Still the old snapshot, in full: its segments and its catalog agree.
    after = reader.search("b1-2", k=5)
    assert after.keys == before.keys and np.array_equal(after.distances, before.distances)
    assert reader.get("b0-0")["key"] == "b0-0" and len(reader) == len(records)
    assert reader.search("b1-2", k=5, where={"keys": ["b0-0"]}).keys == [["b0-0"]]
    reader.refresh()
    assert "b1-2" not in reader and len(reader) == len(records) - 2
    reader.close()


def test_submodules_are_attributes_of_the_package():
    import sobolev_index

    assert sobolev_index.distances.pairwise_sobolev is sobolev_index.pairwise_sobolev
    assert sobolev_index.errors.CorruptIndexError is CorruptIndexError
    assert sobolev_index.index.SobolevIndex is SobolevIndex


@pytest.mark.parametrize("roots", [0.5, np.float64(1), "0", None])
def test_a_scalar_root_that_is_not_a_position(built, roots):
    path, _ = built
    with SobolevIndex.open(path) as idx:
        if roots is None:
            assert idx.search("b1-1", k=2, roots=None).keys  # all roots
            return
        with pytest.raises(ValueError, match="roots is"):
            idx.search("b1-1", k=2, roots=roots)
