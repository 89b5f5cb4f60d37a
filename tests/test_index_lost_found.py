"""Segment files that no commit lists are never deleted.

A catalog can lose commits (its ``catalog.sqlite-wal`` deleted or lost with
a copy of the directory): the segment files of those commits then hold
acknowledged documents that the catalog no longer lists. A writer must not
delete or overwrite them; ``verify`` lists them with their document counts,
and ``verify(repair=True)`` moves them to ``INDEX/lost+found/``. Temporary
files and the files of segments a committed merge replaced are the only
files removed automatically.
"""
import hashlib
import json
import os
import shutil

import numpy as np
import pytest
from _support.graphs import pick_roots, random_graph
from _support.measures import random_measures
from _support.processes import run_python

from sobolev_index import CorruptIndexError, SobolevIndex
from sobolev_index.cli import main
from sobolev_index.index import storage

N = 60
SPEC = random_graph(11, N, extra=40)
ROOTS = pick_roots(SPEC, 1, seed=2)


def _docs(seed, count):
    return random_measures(np.random.default_rng(seed), N, count)


def _sha(path):
    with open(path, "rb") as handle:
        return hashlib.sha256(handle.read()).hexdigest()


def _segment_names(path):
    return sorted(n for n in os.listdir(os.path.join(path, "segments")) if n.endswith(".h5"))


@pytest.fixture
def index_path(tmp_path):
    path = tmp_path / "idx"
    with SobolevIndex.create(str(path), SPEC.lib(), roots=ROOTS) as idx:
        idx.add(_docs(1, 10), keys=[f"a{i}" for i in range(10)])
    return str(path)


def _add_then_die(path, batches):
    """In a child: add ``batches`` (lists of keys) with one writer and exit
    without closing it, so that the commits stay in the catalog's WAL."""
    code = f"""
import os, numpy as np
from _support.measures import random_measures
from sobolev_index import SobolevIndex
idx = SobolevIndex.open({path!r}, "a")
for b, keys in enumerate({batches!r}):
    idx.add(random_measures(np.random.default_rng(100 + b), {N}, len(keys)), keys=keys)
    print("acknowledged", b, flush=True)
os._exit(0)
"""
    done = run_python(code)
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("acknowledged") == len(batches)
    wal = os.path.join(path, "catalog.sqlite-wal")
    assert os.path.getsize(wal) > 0, "the commits were expected to be in the WAL"


def _lose_the_wal(path):
    for suffix in ("-wal", "-shm"):
        os.unlink(os.path.join(path, "catalog.sqlite" + suffix))


def test_a_lost_wal_never_costs_the_segment_files(index_path):
    batches = [[f"b{i}" for i in range(7)], [f"c{i}" for i in range(5)]]
    before = set(_segment_names(index_path))
    _add_then_die(index_path, batches)
    lost = sorted(set(_segment_names(index_path)) - before)
    assert len(lost) == 2
    hashes = {name: _sha(os.path.join(index_path, "segments", name)) for name in lost}
    _lose_the_wal(index_path)

    # The catalog is back at its last checkpoint: the batches are not listed.
    with SobolevIndex.open(index_path, "a") as idx:
        assert sorted(idx) == sorted(f"a{i}" for i in range(10))
        # A writer's open and its next commits neither delete nor overwrite them.
        idx.add(_docs(5, 4), keys=[f"d{i}" for i in range(4)])
        for name, digest in hashes.items():
            assert _sha(os.path.join(index_path, "segments", name)) == digest
        report = idx.verify()
    assert not report["ok"]
    unlisted = {entry["file"]: entry["documents"] for entry in report["unlisted"]}
    assert unlisted == {lost[0]: 7, lost[1]: 5}
    for name in lost:
        assert any(name in problem and "not in the catalog" in problem
                   for problem in report["problems"])

    with SobolevIndex.open(index_path, "a") as idx:
        repaired = idx.verify(repair=True)
        assert repaired["ok"], repaired["problems"]
        assert sorted(repaired["moved"]) == [f"lost+found/{name}" for name in lost]
        assert idx.verify()["ok"]
        assert "d3" in idx and "b0" not in idx
    for name, digest in hashes.items():
        assert _sha(os.path.join(index_path, "lost+found", name)) == digest
        assert not os.path.exists(os.path.join(index_path, "segments", name))


def test_a_planted_segment_file_is_kept_and_never_overwritten(index_path):
    """Without any WAL loss: a segment-named file the catalog does not list
    stays where it is, and new segments take ids above it."""
    segments = os.path.join(index_path, "segments")
    committed = _segment_names(index_path)[0]
    planted = storage.segment_name(7)
    shutil.copy(os.path.join(segments, committed), os.path.join(segments, planted))
    digest = _sha(os.path.join(segments, planted))
    tmp = os.path.join(segments, storage.TMP_PREFIX + storage.segment_name(8))
    with open(tmp, "wb") as handle:
        handle.write(b"half-written")
    with SobolevIndex.open(index_path, "a") as idx:
        # The temporary file goes at a writer's open; the planted one stays.
        assert not os.path.exists(tmp)
        for batch in range(8):
            idx.add(_docs(20 + batch, 1), keys=[f"n{batch}"])
        idx.compact()
        assert _sha(os.path.join(segments, planted)) == digest
        assert all(int(name[:-3]) > 7 for name in _segment_names(index_path) if name != planted)
        report = idx.verify()
    assert [entry["file"] for entry in report["unlisted"]] == [planted]
    assert report["unlisted"][0]["documents"] == 10


def test_files_a_merge_replaced_are_removed_when_readers_let_go(index_path, monkeypatch):
    """A merge whose old files readers kept pinned leaves them as retired
    (meta.retired_files): verify calls them orphans, not problems, and the
    next writer to open removes them."""
    monkeypatch.setattr(storage, "PIN_WAIT", 0.05)
    with SobolevIndex.open(index_path, "a") as idx:
        idx.add(_docs(2, 3), keys=["x0", "x1", "x2"])
        old = _segment_names(index_path)
        assert len(old) == 2
        with storage.files_pinned(index_path):  # a reader loading a snapshot
            idx.compact()
        new = sorted(set(_segment_names(index_path)) - set(old))
        assert len(new) == 1 and set(old) <= set(_segment_names(index_path))
        report = idx.verify()
        assert report["ok"], report["problems"]
        assert report["orphans"] == old and report["unlisted"] == []
    with SobolevIndex.open(index_path, "a") as idx:
        assert _segment_names(index_path) == new
        assert idx._catalog.retired_files() == []
        assert idx.verify()["ok"]


def test_merge_files_are_removed_at_once_when_nothing_is_pinned(index_path):
    with SobolevIndex.open(index_path, "a") as idx:
        idx.add(_docs(2, 3), keys=["x0", "x1", "x2"])
        idx.compact()
        assert len(_segment_names(index_path)) == 1
        assert idx._catalog.retired_files() == []


def test_a_retired_name_outside_the_segments_directory_is_refused(index_path):
    import sqlite3

    con = sqlite3.connect(os.path.join(index_path, "catalog.sqlite"))
    con.execute("INSERT OR REPLACE INTO meta (name, value) VALUES ('retired_files', ?)",
                (json.dumps(["../catalog.sqlite"]),))
    con.commit()
    con.close()
    with pytest.raises(CorruptIndexError, match="retired_files"):
        SobolevIndex.open(index_path, "a")
    assert os.path.exists(os.path.join(index_path, "catalog.sqlite"))


# ------------------------------------------------ verify without opening
def test_verify_path_reports_on_an_index_that_cannot_be_opened(index_path):
    with SobolevIndex.open(index_path, "a") as idx:
        idx.add(_docs(2, 3), keys=["x0", "x1", "x2"])
    gone = _segment_names(index_path)[0]
    os.unlink(os.path.join(index_path, "segments", gone))
    with pytest.raises(CorruptIndexError):
        SobolevIndex.open(index_path)
    report = SobolevIndex.verify_path(index_path)
    assert not report["ok"]
    assert any(gone in problem and "missing" in problem for problem in report["problems"])
    # The other segment was still checked.
    assert report["segments"] == 2 and report["checked_rows"] == 3


def test_verify_path_reports_a_damaged_graph_and_catalog(index_path, tmp_path):
    graph = os.path.join(index_path, "graph.h5")
    with open(graph, "r+b") as handle:
        handle.truncate(200)
    report = SobolevIndex.verify_path(index_path)
    assert not report["ok"]
    assert any("graph.h5" in problem for problem in report["problems"])
    # Segment checksums are still checked without the graph.
    assert report["segments"] == 1

    other = str(tmp_path / "other")
    with SobolevIndex.create(other, SPEC.lib(), roots=ROOTS) as idx:
        idx.add(_docs(1, 3))
    with open(os.path.join(other, "catalog.sqlite"), "r+b") as handle:
        handle.truncate(3000)
    report = SobolevIndex.verify_path(other)
    assert not report["ok"]
    assert report["problems"][0].startswith("catalog:")
def test_the_cli_verify_reports_and_repairs_without_opening(index_path):
    from click.testing import CliRunner

    batches = [[f"b{i}" for i in range(6)]]
    _add_then_die(index_path, batches)
    _lose_the_wal(index_path)
    runner = CliRunner()
    result = runner.invoke(main, ["verify", index_path])
    assert result.exit_code == 1, result.output
    assert "not in the catalog" in result.output and "6 document(s)" in result.output
    assert "--repair" in result.output and "repair=True" not in result.output
    result = runner.invoke(main, ["verify", "--repair", "--json", index_path])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert len(report["moved"]) == 1 and report["moved"][0].startswith("lost+found/")
    assert report["unlisted"][0]["documents"] == 6
    assert runner.invoke(main, ["verify", index_path]).exit_code == 0

    # A missing segment: verify reports it (exit 1), it does not fail to open.
    os.unlink(os.path.join(index_path, "segments", _segment_names(index_path)[0]))
    result = runner.invoke(main, ["verify", index_path])
    assert result.exit_code == 1
    assert "missing" in result.output and "Error:" not in result.output


@pytest.mark.parametrize("where", ["before the commit", "while hashing"])
@pytest.mark.slow
def test_an_interrupted_add_leaves_no_file_and_no_held_lock(index_path, monkeypatch, where):
    # A Ctrl-C between the rename of a new segment and its commit: the file
    # goes (it was never committed, and no writer would remove it later),
    # and commit.lock is released (else the next add waits for ever).
    target, name = storage, "file_checksum" if where == "while hashing" else "utc_now"
    real = getattr(target, name)
    calls = []

    def interrupted(*args, **kwargs):
        calls.append(1)
        raise KeyboardInterrupt

    with SobolevIndex.open(index_path, "a") as idx:
        before = _segment_names(index_path)
        monkeypatch.setattr(target, name, interrupted)
        with pytest.raises(KeyboardInterrupt):
            idx.add(_docs(3, 2), keys=["i0", "i1"])
        monkeypatch.setattr(target, name, real)
        assert calls and _segment_names(index_path) == before
        done = run_python(f"from sobolev_index import SobolevIndex\n"
                          f"print(SobolevIndex.verify_path({index_path!r})['ok'])", timeout=30)
        assert done.stdout.strip() == "True", done.stderr
        idx.add(_docs(4, 2), keys=["i0", "i1"])  # the lock is free
    assert SobolevIndex.verify_path(index_path)["ok"]
