"""recover() brings back the documents of segment files no commit lists.

After a lost ``catalog.sqlite-wal``, the acknowledged documents of the lost
commits drop out of the live index; their segment files stay (and
``verify(repair=True)`` moves them to ``lost+found/``). ``recover`` adds
them again under their keys, labels and fields, leaves out keys that are
live, and reports each key. Expected measures come from the generator that
made them, not from the index.
"""
import json
import os

import h5py
import numpy as np
import pytest
from _support.graphs import pick_roots, random_graph
from _support.measures import random_measures
from _support.processes import run_python
from click.testing import CliRunner

from sobolev_index import SobolevIndex, UnlistedSegmentsWarning
from sobolev_index.cli import main
from sobolev_index.index import storage

N = 60
SPEC = random_graph(11, N, extra=40)
ROOTS = pick_roots(SPEC, 2, seed=2)
# Every index here has lost commits; the warning is checked where it matters.
pytestmark = pytest.mark.filterwarnings("ignore::sobolev_index.UnlistedSegmentsWarning")


def _docs(seed, count):
    return random_measures(np.random.default_rng(seed), N, count)


@pytest.fixture
def index_path(tmp_path):
    path = tmp_path / "idx"
    with SobolevIndex.create(str(path), SPEC.lib(), roots=ROOTS) as idx:
        idx.add(_docs(1, 10), keys=[f"a{i}" for i in range(10)])
    return str(path)


def _batch_keys(b, count):
    return [f"b{b}-{i}" for i in range(count)]


def _add_then_die(path, sizes, compact=False, upsert=False):
    """In a child: add batches of ``sizes`` (keys b<batch>-<i>, label
    "L<batch>", fields {"n": i}) with one writer, then, if asked, upsert
    b0-1 (measure of seed 300, label "upserted") and compact, and exit
    without closing the writer, so that the commits stay in the catalog's
    WAL."""
    code = f"""
import os, numpy as np
from _support.measures import random_measures
from sobolev_index import SobolevIndex, UnlistedSegmentsWarning
idx = SobolevIndex.open({path!r}, "a")
for b, size in enumerate({list(sizes)!r}):
    keys = [f"b{{b}}-{{i}}" for i in range(size)]
    idx.add(random_measures(np.random.default_rng(100 + b), {N}, size), keys=keys,
            labels=[f"L{{b}}"] * size, fields=[{{"n": i}} for i in range(size)])
    print("acknowledged", b, flush=True)
if {upsert!r}:
    idx.upsert(random_measures(np.random.default_rng(300), {N}, 1), keys=["b0-1"],
               labels=["upserted"], fields=[{{"n": 99}}])
if {compact!r}:
    idx.compact()
os._exit(0)
"""
    done = run_python(code)
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("acknowledged") == len(sizes)


def _lose_the_wal(path):
    for suffix in ("-wal", "-shm"):
        os.unlink(os.path.join(path, "catalog.sqlite" + suffix))


def _dense(nodes, masses):
    out = np.zeros(N)
    np.add.at(out, np.asarray(nodes), np.asarray(masses, dtype=float))
    return out / out.sum()


def _assert_batch_restored(idx, b, size, but=()):
    expected = _docs(100 + b, size)
    for i, key in enumerate(_batch_keys(b, size)):
        if key in but:
            continue
        doc = idx.get(key)
        assert doc["label"] == f"L{b}" and doc["fields"] == {"n": i}
        np.testing.assert_allclose(_dense(doc["nodes"], doc["masses"]), _dense(*expected[i]),
                                   rtol=1e-12, atol=1e-15)


def test_recover_after_a_lost_wal_restores_every_acknowledged_document(index_path):
    sizes = [7, 5]
    _add_then_die(index_path, sizes, upsert=True)
    assert os.path.getsize(os.path.join(index_path, "catalog.sqlite-wal")) > 0
    _lose_the_wal(index_path)
    with pytest.warns(UnlistedSegmentsWarning, match="3 segment files in segments/ that no "):
        with SobolevIndex.open(index_path) as idx:
            assert len(idx) == 10  # the lost commits' documents are gone
    with SobolevIndex.open(index_path, "a") as idx:
        report = idx.recover()
        assert sorted(e["key"] for e in report["restored"]) == sorted(
            _batch_keys(0, 7) + _batch_keys(1, 5))
        assert report["unreadable"] == [] and len(report["moved"]) == 3
        # b0-1 is in two files: the upsert's version, added last, wins.
        assert [(e["key"], e["reason"]) for e in report["skipped"]] == [
            ("b0-1", "an older version of a key restored from another file")]
        assert len(idx) == 22
        upserted = idx.get("b0-1")
        assert upserted["label"] == "upserted" and upserted["fields"] == {"n": 99}
        np.testing.assert_allclose(_dense(upserted["nodes"], upserted["masses"]),
                                   _dense(*_docs(300, 1)[0]), rtol=1e-12, atol=1e-15)
        for b, size in enumerate(sizes):
            _assert_batch_restored(idx, b, size, but=["b0-1"])
        # The restored documents are searched like any other.
        hits = idx.search(_docs(100, 1), k=1)
        assert hits.keys[0][0] == "b0-0" and hits.distances[0][0] == pytest.approx(0, abs=1e-12)
    assert SobolevIndex.verify_path(index_path)["ok"]
    # The files are kept aside, and a second recover reads none of them:
    # a document deleted in between stays deleted.
    lost = os.path.join(index_path, storage.LOST_DIR)
    assert sorted(os.listdir(os.path.join(lost, "recovered"))) == sorted(
        os.path.basename(name) for name in report["files"])
    with SobolevIndex.open(index_path, "a") as idx:
        idx.delete(["b1-0"])
        again = idx.recover()
        assert "b1-0" not in idx
    assert again["restored"] == again["skipped"] == again["files"] == []


def test_a_document_the_catalog_still_has_is_left_out(index_path):
    # A merge killed after its file got its name but before its commit
    # leaves a file of documents the catalog still lists; one deleted since
    # must not come back.
    with SobolevIndex.open(index_path, "a") as idx:
        idx.add(_docs(2, 4), keys=[f"x{i}" for i in range(4)])
        listed = set(os.listdir(os.path.join(index_path, "segments")))
        idx.compact()
    merged = (set(os.listdir(os.path.join(index_path, "segments"))) - listed).pop()
    with SobolevIndex.open(index_path, "a") as idx:
        idx.delete(["a3"])
    # The merged file, as if its commit had never landed.
    os.makedirs(os.path.join(index_path, storage.LOST_DIR))
    import shutil

    shutil.copy(os.path.join(index_path, "segments", merged),
                os.path.join(index_path, storage.LOST_DIR, merged))
    with SobolevIndex.open(index_path, "a") as idx:
        report = idx.recover()
        assert report["restored"] == [] and "a3" not in idx and len(idx) == 13
    reasons = {e["key"]: e["reason"] for e in report["skipped"]}
    assert reasons["a3"] == "deleted since (the catalog keeps its tombstone)"
    assert reasons["x0"] == "the catalog has this document" and len(reasons) == 14


def test_a_lost_upsert_of_a_live_key_is_named_and_restored_on_request(index_path):
    # a1 was live before the lost commits; its upsert was acknowledged, then
    # lost with the log: the live, older version must not win in silence.
    code = f"""
import os, numpy as np
from _support.measures import random_measures
from sobolev_index import SobolevIndex
idx = SobolevIndex.open({index_path!r}, "a")
idx.upsert(random_measures(np.random.default_rng(400), {N}, 1), keys=["a1"], labels=["new"])
print("acknowledged", flush=True)
os._exit(0)
"""
    done = run_python(code)
    assert done.returncode == 0 and "acknowledged" in done.stdout, done.stderr
    _lose_the_wal(index_path)
    with SobolevIndex.open(index_path, "a") as idx:
        assert idx.get("a1")["label"] is None
        dry = idx.recover(dry_run=True)
        assert dry["restored"] == [] and "the lost version is newer" in dry["skipped"][0]["reason"]
        report = idx.recover(replace_newer=True)
        assert [(e["key"], e["replaced"]) for e in report["restored"]] == [("a1", True)]
        doc = idx.get("a1")
        assert doc["label"] == "new" and len(idx) == 10
        np.testing.assert_allclose(_dense(doc["nodes"], doc["masses"]),
                                   _dense(*_docs(400, 1)[0]), rtol=1e-12, atol=1e-15)


def test_fields_that_utf8_cannot_encode_are_kept_in_the_records(index_path):
    # A field may hold a lone surrogate (the catalog keeps it as a JSON
    # escape); the segment's records must too, in add and in every merge.
    with SobolevIndex.open(index_path, "a") as idx:
        idx.add(_docs(3, 2), keys=["s0", "s1"], fields=[{"x": "\udcff"}, None])
        idx.compact()
        assert idx.get("s0")["fields"] == {"x": "\udcff"}


def test_merged_files_go_once_a_reader_moves_past_the_merge(index_path):
    # A merge deletes its files only once its commit is copied out of the
    # log; a reader's snapshot holds that copy back, but only until it
    # refreshes past the merge.
    segments = os.path.join(index_path, "segments")
    reader = SobolevIndex.open(index_path)
    try:
        with SobolevIndex.open(index_path, "a") as idx:
            for r in range(4):
                idx.add(_docs(10 + r, 2), keys=[f"r{r}-0", f"r{r}-1"])
                idx.compact()
                reader.refresh()
                assert len(reader) == 12 + 2 * r
            # Kept: the live segment, and at most the files of the last
            # merge (the reader refreshed after it, but no commit since).
            assert len(os.listdir(segments)) <= 3, sorted(os.listdir(segments))
            idx.add(_docs(20, 1), keys=["last"])
            reader.refresh()
            idx.add(_docs(21, 1), keys=["after"])
            live = set(idx._catalog.segment_files())
            assert set(os.listdir(segments)) == live
    finally:
        reader.close()
    assert SobolevIndex.verify_path(index_path)["ok"]


def test_a_lost_wal_after_a_compaction_loses_nothing(index_path):
    # A compaction deletes the files it merged; before it did so with its
    # commit still only in the log, a lost log left a catalog that listed
    # deleted files: the index could not be opened.
    _add_then_die(index_path, [7, 5], compact=True)
    _lose_the_wal(index_path)
    with SobolevIndex.open(index_path) as idx:
        assert len(idx) == 22
        _assert_batch_restored(idx, 0, 7)
    assert SobolevIndex.verify_path(index_path)["ok"]


def test_a_live_key_wins_and_a_dry_run_changes_nothing(index_path):
    from _support.index import assert_unchanged, snapshot

    _add_then_die(index_path, [4])
    _lose_the_wal(index_path)
    with SobolevIndex.open(index_path, "a") as idx:
        idx.add(_docs(7, 1), keys=["b0-2"], labels=["newer"])
    before = snapshot(index_path)
    with SobolevIndex.open(index_path, "a") as idx:
        dry = idx.recover(dry_run=True)
    assert_unchanged(before, index_path, "a dry run")
    assert dry["dry_run"] and [e["key"] for e in dry["restored"]] == ["b0-0", "b0-1", "b0-3"]
    assert [(e["key"], e["reason"]) for e in dry["skipped"]] == [
        ("b0-2", "a live document has this key")]
    with SobolevIndex.open(index_path, "a") as idx:
        report = idx.recover()
        assert [e["key"] for e in report["restored"]] == ["b0-0", "b0-1", "b0-3"]
        assert idx.get("b0-2")["label"] == "newer"


def test_a_segment_without_keys_and_an_unreadable_file_are_reported(index_path):
    _add_then_die(index_path, [3, 2])
    _lose_the_wal(index_path)
    with SobolevIndex.open(index_path, "a") as idx:
        idx.verify(repair=True)
    lost = os.path.join(index_path, storage.LOST_DIR)
    first, second = sorted(os.listdir(lost))
    # A segment as written before segments kept keys: no records.
    with h5py.File(os.path.join(lost, first), "a") as f:
        del f["stored"]
    with open(os.path.join(lost, second), "r+b") as handle:
        handle.truncate(100)
    with SobolevIndex.open(index_path, "a") as idx:
        report = idx.recover()
        assert report["restored"] == [] and len(idx) == 10
    assert [e["file"] for e in report["unreadable"]] == [f"{storage.LOST_DIR}/{second}"]
    no_keys = [e for e in report["skipped"] if e["key"] is None]
    assert len(no_keys) == 3 and "no key to restore it under" in no_keys[0]["reason"]


def test_recover_on_the_command_line(index_path):
    _add_then_die(index_path, [3])
    _lose_the_wal(index_path)
    runner = CliRunner()
    # Another command that opens the index says so, in one line.
    done = runner.invoke(main, ["info", index_path])
    assert done.exit_code == 0, done.output
    assert done.stderr.count("\n") == 1 and done.stderr.startswith(
        f"warning: {index_path}: 1 segment file in segments/ that no commit") \
        and f"sobolev-index recover {index_path}" in done.stderr
    done = runner.invoke(main, ["recover", index_path, "--dry-run"])
    assert done.stderr == ""
    assert done.exit_code == 0, done.output
    assert "would restore b0-0 (id 11 in segments/" in done.output
    assert "would restore 3 document(s), left out 0, from 1 file(s); 10 in the index" \
        in done.output
    done = runner.invoke(main, ["recover", index_path, "--json"])
    assert done.exit_code == 0, done.output
    report = json.loads(done.output)
    assert [e["key"] for e in report["restored"]] == ["b0-0", "b0-1", "b0-2"]
    assert report["documents"] == 13 and report["moved"] == report["files"] \
        and len(report["files"]) == 1
