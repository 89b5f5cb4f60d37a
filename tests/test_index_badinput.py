"""Bad input, corrupt and foreign files, format versions and writer locks.

Every bad call must raise a specific exception with a message, and leave the index
exactly as it was: the same catalog content (an SQL dump of every table) and the
same sha256 for every file under the index directory.
"""

import os
import re
import shutil
import sqlite3
import subprocess
import sys
import time

import numpy as np
import pytest
import scipy.sparse as sp
from _support.graphs import pick_roots, random_graph
from _support.index import assert_unchanged, file_hashes, set_format_version, snapshot
from _support.measures import random_measures
from _support.processes import child_env, child_script

from sobolev_index import (
    CorruptIndexError,
    DuplicateKeyError,
    Graph,
    IndexLockedError,
    InvalidMeasureError,
    KeyNotFoundError,
    NotAnIndexError,
    SobolevIndex,
    SobolevIndexError,
    UnsupportedFormatError,
)

N = 30
SPEC = random_graph(404, N, extra=30, kind="euclidean")
ROOTS = pick_roots(SPEC, 2, seed=4)


def _docs(seed, count):
    return random_measures(np.random.default_rng(seed), N, count)


@pytest.fixture(scope="module")
def template(tmp_path_factory):
    """An index with two segments, a tombstone, labels and fields (closed)."""
    path = tmp_path_factory.mktemp("tpl") / "idx"
    with SobolevIndex.create(str(path), SPEC.lib(), roots=ROOTS) as idx:
        idx.add(_docs(1, 12), keys=[f"a{i}" for i in range(12)], labels=["x"] * 12,
                fields=[{"i": i} for i in range(12)])
        idx.add(_docs(2, 9), keys=[f"b{i}" for i in range(9)])
        idx.delete(["a3"])
    return path


@pytest.fixture
def index_path(template, tmp_path):
    path = tmp_path / "idx"
    shutil.copytree(template, path)
    return path


def _segment_files(path):
    seg = os.path.join(path, "segments")
    return sorted(f for f in os.listdir(seg) if f.endswith(".h5"))


def _search_state(idx):
    res = idx.search(_docs(99, 2), k=30, p=1)
    return list(idx), res.keys, np.asarray(res.distances).tolist()


# --------------------------------------------------------------------------- bad measures
GOOD = _docs(3, 2)
BAD_MEASURES = {
    "nan mass": ((np.array([1, 2]), np.array([0.5, np.nan])), r"nan"),
    "inf mass": ((np.array([1, 2]), np.array([0.5, np.inf])), r"inf"),
    "negative mass": ((np.array([1, 2, 3]), np.array([0.5, -0.25, 1.0])), r"-0\.25"),
    "all-zero masses": ((np.array([4, 5]), np.array([0.0, 0.0])), r"\S"),
    "masses summing past float64": ((np.array([4, 5]), np.array([1e308, 1e308])), r"1e\+300"),
    # 1 / total would be inf: the measure's features would be inf or NaN.
    "subnormal total": ((np.array([0, 1]), np.array([1e-320, 1e-320])), r"e-320, below 1e-300"),
    "total too small to normalise": ((np.array([4, 5]), np.array([3e-301, 3e-301])),
                                     r"6e-301.*1e-300"),
    "unknown node": ((np.array([1, N + 7]), np.array([0.5, 0.5])), str(N + 7)),
    "negative node": ((np.array([-1, 2]), np.array([0.5, 0.5])), r"-1"),
    "empty measure": ((np.array([], dtype=np.int64), np.array([])), r"\S"),
    "empty measure, masses None": ((np.array([], dtype=np.int64), None), r"\S"),
    "length mismatch": ((np.array([1, 2, 3]), np.array([0.5, 0.5])), r"\S"),
    "non-integer node": ((np.array([1.5, 2.0]), np.array([0.5, 0.5])), r"1\.5"),
}


def test_small_but_normal_totals_are_searchable(index_path):
    # Just above the limit, normalising is exact enough: the measure is kept
    # and found at distance 0 from the same measure at ordinary scale.
    tiny = (np.array([4, 5]), np.array([2e-300, 6e-300]))
    plain = (np.array([4, 5]), np.array([1.0, 3.0]))
    with SobolevIndex.open(str(index_path), "a") as idx:
        idx.add([tiny], keys=["tiny"])
        result = idx.search([plain], k=1, p=2)
        assert result.keys[0] == ["tiny"]
        assert result.distances[0][0] <= 1e-12
        np.testing.assert_allclose(idx.get("tiny")["masses"], [0.25, 0.75], rtol=1e-12)


@pytest.mark.parametrize("case", sorted(BAD_MEASURES))
@pytest.mark.parametrize("how", ["add", "add-generated", "upsert"])
def test_bad_measure_rejected_and_nothing_written(index_path, case, how):
    bad, pattern = BAD_MEASURES[case]
    batch = [GOOD[0], GOOD[1], bad]
    with SobolevIndex.open(str(index_path), "a") as idx:
        state = _search_state(idx)
        before = snapshot(str(index_path))
        with pytest.raises(InvalidMeasureError) as e:
            if how == "add":
                idx.add(batch, keys=["n1", "n2", "n3"])
            elif how == "add-generated":
                idx.add(batch)
            else:
                idx.upsert(batch, keys=["a0", "new1", "b2"])
        msg = str(e.value)
        assert msg and re.search(pattern, msg, flags=re.IGNORECASE), (
            f"message {msg!r} does not name the bad value ({pattern})"
        )
        assert isinstance(e.value, ValueError)
        assert_unchanged(before, str(index_path), f"{how} with {case}")
        assert _search_state(idx) == state
        assert "n1" not in idx and "new1" not in idx


@pytest.mark.parametrize("case", ["negative", "wrong width", "zero row"])
def test_bad_sparse_matrix_rejected(index_path, case):
    M = sp.lil_matrix((3, N))
    M[0, 1] = 1.0
    M[1, 2] = 2.0
    M[2, 5] = 1.0
    if case == "negative":
        M[2, 6] = -3.0
    elif case == "wrong width":
        M = sp.lil_matrix((3, N + 1))
        M[0, 1] = M[1, 1] = M[2, 1] = 1.0
    else:
        M[2, 5] = 0.0
    M = sp.csr_matrix(M)
    if case == "zero row":
        M.eliminate_zeros()
    with SobolevIndex.open(str(index_path), "a") as idx:
        before = snapshot(str(index_path))
        with pytest.raises(InvalidMeasureError) as e:
            idx.add(M, keys=["s1", "s2", "s3"])
        assert str(e.value)
        assert_unchanged(before, str(index_path), f"sparse {case}")


def test_no_measures_at_all(index_path):
    with SobolevIndex.open(str(index_path), "a") as idx:
        before = snapshot(str(index_path))
        try:
            out = idx.add([])
        except ValueError as e:
            assert str(e)
        else:
            assert out == []
        assert_unchanged(before, str(index_path), "add([])")


# --------------------------------------------------------------------------- keys
@pytest.mark.parametrize("keys", [
    ["new1", "a0", "new2"],          # a live key
    ["new1", "new1", "new2"],        # repeated within the batch
    ["b8", "b8", "new3"],            # both
])
def test_duplicate_keys_without_upsert(index_path, keys):
    with SobolevIndex.open(str(index_path), "a") as idx:
        state = _search_state(idx)
        before = snapshot(str(index_path))
        with pytest.raises(DuplicateKeyError) as e:
            idx.add(_docs(5, 3), keys=keys)
        dup = [k for k in keys if keys.count(k) > 1 or k in ("a0", "b8")][0]
        assert dup in str(e.value)
        assert isinstance(e.value, ValueError)
        assert_unchanged(before, str(index_path), f"duplicate keys {keys}")
        assert _search_state(idx) == state
        assert "new1" not in idx and "new2" not in idx and "new3" not in idx


def test_deleted_key_can_be_added_again(index_path):
    with SobolevIndex.open(str(index_path), "a") as idx:
        assert "a3" not in idx
        assert idx.add(_docs(6, 1), keys=["a3"]) == ["a3"]
        assert "a3" in idx


@pytest.mark.parametrize("call", [
    "keys too short", "labels too long", "fields not json", "fields with nan", "fields with inf",
])
def test_bad_keys_labels_fields(index_path, call):
    docs = _docs(7, 2)
    with SobolevIndex.open(str(index_path), "a") as idx:
        before = snapshot(str(index_path))
        with pytest.raises((ValueError, TypeError)) as e:
            if call == "keys too short":
                idx.add(docs, keys=["only-one"])
            elif call == "labels too long":
                idx.add(docs, keys=["l1", "l2"], labels=["x", "y", "z"])
            elif call == "fields with nan":
                idx.add(docs, keys=["f1", "f2"], fields=[{"ok": 1}, {"v": float("nan")}])
            elif call == "fields with inf":
                idx.upsert(docs, keys=["f1", "f2"], fields=[{"v": [1, float("-inf")]}, None])
            else:
                idx.add(docs, keys=["f1", "f2"], fields=[{"ok": 1}, {"bad": object()}])
        assert str(e.value)
        if call.startswith("fields"):
            assert "cannot be stored as JSON" in str(e.value)
        assert_unchanged(before, str(index_path), call)


def test_delete_and_get_unknown_keys(index_path):
    with SobolevIndex.open(str(index_path), "a") as idx:
        before = snapshot(str(index_path))
        for bad in (["nope"], ["a0", "nope"], ["a3"], ["a0", "a0x"]):
            with pytest.raises(KeyNotFoundError) as e:
                idx.delete(bad)
            assert [k for k in bad if k not in ("a0",)][0] in str(e.value)
        with pytest.raises(KeyNotFoundError):
            idx.get("a3")
        assert "a0" in idx
        assert_unchanged(before, str(index_path), "delete unknown")


# --------------------------------------------------------------------------- corruption
def _largest_dataset_extent(h5file):
    import h5py

    found = []

    def visit(name, obj):
        if isinstance(obj, h5py.Dataset) and obj.size:
            off = obj.id.get_offset()
            if off is not None:
                found.append((obj.id.get_storage_size(), off, name))
            elif obj.chunks is not None:
                info = obj.id.get_chunk_info(0)
                found.append((info.size, info.byte_offset, name))

    with h5py.File(h5file, "r") as f:
        f.visititems(visit)
    assert found, f"no datasets with stored data in {h5file}"
    return max(found)


def _flip(path, offset):
    with open(path, "r+b") as fh:
        fh.seek(offset)
        b = fh.read(1)
        fh.seek(offset)
        fh.write(bytes([b[0] ^ 0x5A]))


def _expect_corruption_reported(index_path, segname):
    """open + search raises CorruptIndexError naming the segment, or verify reports it."""
    stem = os.path.splitext(segname)[0]
    try:
        idx = SobolevIndex.open(str(index_path), "r")
    except CorruptIndexError as e:
        assert stem in str(e), f"open raised {e!r} without naming segment {segname}"
        return "open"
    try:
        report = idx.verify()
        assert report["ok"] is False, f"verify did not notice the flipped byte: {report}"
        assert any(stem in p for p in report["problems"]), (
            f"verify problems {report['problems']} do not name segment {segname}"
        )
        try:
            idx.search(_docs(8, 2), k=5)
        except CorruptIndexError:
            pass  # fine; any other exception type is not
        return "verify"
    finally:
        idx.close()


@pytest.mark.parametrize("where", ["features data", "middle of file"])
def test_segment_with_one_byte_flipped(index_path, where):
    segs = _segment_files(index_path)
    assert len(segs) >= 2, segs
    target = os.path.join(index_path, "segments", segs[0])
    if where == "features data":
        size, offset, name = _largest_dataset_extent(target)
        pos = offset + size // 2
    else:
        pos = os.path.getsize(target) // 2
    _flip(target, pos)
    before = snapshot(str(index_path))
    _expect_corruption_reported(index_path, segs[0])
    assert_unchanged(before, str(index_path), "reading a corrupt index")
    _writer_keeps_corrupt_segment(index_path, segs[0])


def _writer_keeps_corrupt_segment(index_path, segname):
    """A writer either refuses the corrupt index or opens it, but repair never
    deletes a committed (if corrupt) segment: it only removes orphans."""
    target = os.path.join(index_path, "segments", segname)
    try:
        w = SobolevIndex.open(str(index_path), "a")
    except CorruptIndexError:
        assert os.path.exists(target)
        return
    try:
        report = w.verify(repair=True)
        assert report["ok"] is False
    finally:
        w.close()
    assert os.path.exists(target), "verify(repair=True) deleted a committed segment"


def test_truncated_segment(index_path):
    segs = _segment_files(index_path)
    target = os.path.join(index_path, "segments", segs[-1])
    size = os.path.getsize(target)
    with open(target, "r+b") as fh:
        fh.truncate(size // 2)
    before = snapshot(str(index_path))
    _expect_corruption_reported(index_path, segs[-1])
    assert_unchanged(before, str(index_path), "reading a truncated segment")
    _writer_keeps_corrupt_segment(index_path, segs[-1])


@pytest.mark.parametrize("mode", ["r", "a"])
def test_missing_segment_file(index_path, mode):
    segs = _segment_files(index_path)
    os.remove(os.path.join(index_path, "segments", segs[0]))
    before = snapshot(str(index_path))
    with pytest.raises(CorruptIndexError) as e:
        SobolevIndex.open(str(index_path), mode)
    assert os.path.splitext(segs[0])[0] in str(e.value), str(e.value)
    assert not isinstance(e.value, NotAnIndexError)
    assert_unchanged(before, str(index_path), "open with a missing segment")


def test_missing_graph_file(index_path):
    os.remove(os.path.join(index_path, "graph.h5"))
    with pytest.raises(CorruptIndexError) as e:
        SobolevIndex.open(str(index_path), "r")
    assert "graph" in str(e.value)


# --------------------------------------------------------------------------- not an index
def _make_foreign(tmp_path, kind):
    p = tmp_path / "thing"
    if kind == "regular file":
        p.write_text("hello")
    elif kind == "empty directory":
        p.mkdir()
    elif kind == "directory with other files":
        p.mkdir()
        (p / "notes.txt").write_text("x")
        (p / "data.h5").write_bytes(b"\x89HDF\r\n\x1a\n" + b"\0" * 100)
    elif kind == "foreign sqlite catalog":
        p.mkdir()
        con = sqlite3.connect(p / "catalog.sqlite")
        con.execute("create table people (name text, age int)")
        con.execute("insert into people values ('ann', 3)")
        con.commit()
        con.close()
    elif kind == "garbage catalog":
        p.mkdir()
        (p / "catalog.sqlite").write_bytes(np.random.default_rng(0).bytes(4096))
    elif kind == "hdf5 file":
        import h5py

        with h5py.File(p, "w") as f:
            f["x"] = np.arange(5)
    return p


@pytest.mark.parametrize("kind", ["regular file", "empty directory", "directory with other files",
                                  "foreign sqlite catalog", "garbage catalog", "hdf5 file"])
@pytest.mark.parametrize("mode", ["r", "a"])
def test_not_an_index(tmp_path, kind, mode):
    p = _make_foreign(tmp_path, kind)
    before = file_hashes(str(tmp_path))
    expected = CorruptIndexError if kind == "garbage catalog" else NotAnIndexError
    with pytest.raises(expected) as e:
        SobolevIndex.open(str(p), mode)
    assert str(e.value)
    assert file_hashes(str(tmp_path)) == before, f"opening a {kind} changed files on disk"


@pytest.mark.parametrize("mode", ["r", "a"])
def test_nonexistent_path(tmp_path, mode):
    p = tmp_path / "does-not-exist"
    with pytest.raises((NotAnIndexError, FileNotFoundError)) as e:
        SobolevIndex.open(str(p), mode)
    assert str(e.value)
    assert not p.exists(), "open() created the missing path"


def test_unknown_format_version(index_path):
    what = set_format_version(str(index_path), 999999)
    before = snapshot(str(index_path))
    for mode in ("r", "a"):
        with pytest.raises(UnsupportedFormatError) as e:
            SobolevIndex.open(str(index_path), mode)
        assert "999999" in str(e.value), (what, str(e.value))
        assert isinstance(e.value, CorruptIndexError)
    assert_unchanged(before, str(index_path), "open of an unknown format version")


# --------------------------------------------------------------------------- writer lock
class Holder:
    def __init__(self, path, seconds):
        self.proc = subprocess.Popen(
            [sys.executable, child_script("hold_writer.py"), str(path), str(seconds)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env=child_env(),
        )
        line = self.proc.stdout.readline()
        if line.strip() != "READY":
            self.proc.kill()
            raise AssertionError(f"holder did not start: {line!r} {self.proc.stderr.read()}")

    def release(self):
        out, err = self.proc.communicate(timeout=60)  # closes stdin
        assert self.proc.returncode == 0, err
        return out


@pytest.mark.slow
def test_second_writer_in_other_process(index_path):
    holder = Holder(index_path, -1)
    try:
        before = snapshot(str(index_path))
        t0 = time.monotonic()
        with pytest.raises(IndexLockedError) as e:
            SobolevIndex.open(str(index_path), "a")
        assert time.monotonic() - t0 < 2.0, "without timeout the second writer must fail at once"
        assert str(e.value)
        # with a timeout: waits about that long, then raises
        t0 = time.monotonic()
        with pytest.raises(IndexLockedError):
            SobolevIndex.open(str(index_path), "a", timeout=1.0)
        waited = time.monotonic() - t0
        assert 0.9 <= waited < 10.0, f"waited {waited:.2f}s for a 1s timeout"
        # readers are not blocked by the writer
        with SobolevIndex.open(str(index_path), "r") as r:
            assert len(r) == 20
            r.search(_docs(9, 1), k=3)
        assert_unchanged(before, str(index_path), "refused second writer")
    finally:
        holder.release()
    # once released, a writer opens at once
    with SobolevIndex.open(str(index_path), "a") as w:
        w.add(_docs(10, 1), keys=["after"])


@pytest.mark.slow
def test_second_writer_waits_for_release(index_path):
    holder = Holder(index_path, 1.5)
    try:
        t0 = time.monotonic()
        with SobolevIndex.open(str(index_path), "a", timeout=30) as w:
            waited = time.monotonic() - t0
            w.add(_docs(11, 1), keys=["waited"])
        assert 0.5 <= waited < 25, f"waited {waited:.2f}s"
    finally:
        holder.release()
    with SobolevIndex.open(str(index_path), "r") as r:
        assert "waited" in r and len(r) == 21


def test_second_writer_in_same_process(index_path):
    with SobolevIndex.open(str(index_path), "a") as w:
        before = snapshot(str(index_path))
        with pytest.raises(IndexLockedError, match="this process already has"):
            SobolevIndex.open(str(index_path), "a")
        assert_unchanged(before, str(index_path), "same-process second writer")
        w.add(_docs(12, 1), keys=["still-writable"])
    with SobolevIndex.open(str(index_path), "a") as w:
        assert "still-writable" in w


def test_errors_are_sobolev_errors():
    for exc in (CorruptIndexError, DuplicateKeyError, IndexLockedError, InvalidMeasureError,
                KeyNotFoundError, NotAnIndexError, UnsupportedFormatError):
        assert issubclass(exc, SobolevIndexError)
    assert issubclass(NotAnIndexError, CorruptIndexError)
    assert issubclass(UnsupportedFormatError, CorruptIndexError)
    assert issubclass(DuplicateKeyError, ValueError)
    assert issubclass(InvalidMeasureError, ValueError)
    assert issubclass(KeyNotFoundError, KeyError)


@pytest.mark.parametrize("name", ["../../B.idx/segments/000001.h5", "/etc/passwd", "000001.h5/..",
                                  "notes.txt"])
def test_catalog_segment_names_are_not_trusted(tmp_path, name):
    # A catalog that names a file outside INDEX/segments/ must not make a
    # writer delete it (compact used to remove the other index's file).
    rng = np.random.default_rng(4)
    graph = Graph.from_points(rng.normal(size=(200, 3)), n_nodes=20, seed=0)
    measures = [(rng.choice(20, 4, replace=False), None) for _ in range(6)]
    for directory in ("A.idx", "B.idx"):
        with SobolevIndex.create(tmp_path / directory, graph) as index:
            index.add(measures[:3])
            index.add(measures[3:])
    victim = tmp_path / "B.idx" / "segments" / "000001.h5"
    victim_bytes = victim.read_bytes()
    with sqlite3.connect(tmp_path / "A.idx" / "catalog.sqlite") as db:
        db.execute("UPDATE segments SET file = ? WHERE id = 1", (name,))
    own_files = sorted(os.listdir(tmp_path / "A.idx" / "segments"))
    for mode in ("r", "a"):
        with pytest.raises(CorruptIndexError, match="not a segment file name"):
            SobolevIndex.open(tmp_path / "A.idx", mode)
        # nor does a writer's open delete A's own files on its way to the error
        assert sorted(os.listdir(tmp_path / "A.idx" / "segments")) == own_files
    with pytest.raises(CorruptIndexError):
        with SobolevIndex.open(tmp_path / "A.idx", "a") as index:
            index.compact()
    assert victim.read_bytes() == victim_bytes
    with SobolevIndex.open(tmp_path / "B.idx") as index:
        assert len(index) == 6


def test_files_that_are_not_ours_are_left_alone(tmp_path):
    # Only temporary and segment files are ever removed from INDEX/segments/.
    rng = np.random.default_rng(5)
    graph = Graph.from_points(rng.normal(size=(200, 3)), n_nodes=20, seed=0)
    with SobolevIndex.create(tmp_path / "ix", graph) as index:
        index.add([(rng.choice(20, 4, replace=False), None) for _ in range(3)])
    stray = tmp_path / "ix" / "segments" / "README.txt"
    stray.write_text("mine")
    leftover = tmp_path / "ix" / "segments" / "tmp-000009.h5"
    leftover.write_bytes(b"partial")
    with SobolevIndex.open(tmp_path / "ix") as index:
        assert index.verify()["orphans"] == ["tmp-000009.h5"]
    with SobolevIndex.open(tmp_path / "ix", "a") as index:  # a writer clears leftovers
        report = index.verify(repair=True)
    assert stray.read_text() == "mine" and not leftover.exists()
    assert report["ok"] and report["orphans"] == []


def _two_segment_index(tmp_path):
    rng = np.random.default_rng(6)
    graph = Graph.from_points(rng.normal(size=(200, 3)), n_nodes=20, seed=0)
    path = tmp_path / "ix"
    with SobolevIndex.create(path, graph) as index:
        index.add([(rng.choice(20, 4, replace=False), None) for _ in range(4)],
                  keys=["alpha", "beta", "gamma", "delta"])
        index.add([(rng.choice(20, 4, replace=False), None) for _ in range(3)],
                  keys=["eps", "zeta", "eta"])
    return path


CATALOG_DAMAGE = {
    # a key's bytes no longer UTF-8: get() would fail with a decode error
    "key not UTF-8": "UPDATE documents SET key = CAST(X'62ff7461' AS TEXT) WHERE key = 'beta'",
    "document row lost": "DELETE FROM documents WHERE key = 'gamma'",
    "document in an unlisted segment": "UPDATE documents SET segment = 99 WHERE key = 'eps'",
    "segment row count": "UPDATE segments SET rows = rows + 1 WHERE id = 1",
    # the merge policy and the scan cache size segments by this count
    "segment nonzero count": "UPDATE segments SET nnz = nnz + 1 WHERE id = 1",
    "segment nonzero count missing": "UPDATE segments SET nnz = NULL WHERE id = 1",
    "document support count": "UPDATE documents SET n_supports = n_supports + 1 "
                              "WHERE key = 'beta'",
    # (Python's fromisoformat takes any character between date and time.)
    "time with a letter for T": "UPDATE documents SET added_at = replace(added_at, 'T', 'k') "
                                "WHERE key = 'beta'",
    "negative row": "UPDATE documents SET row = -3 WHERE key = 'beta'",
    "id counter behind": "UPDATE meta SET value = '2' WHERE name = 'next_doc_id'",
}


@pytest.mark.parametrize("damage", sorted(CATALOG_DAMAGE))
def test_verify_checks_the_catalog(tmp_path, damage):
    path = _two_segment_index(tmp_path)
    with sqlite3.connect(path / "catalog.sqlite") as db:
        db.execute(CATALOG_DAMAGE[damage])
    if damage == "segment row count":
        # found at open already, naming the segment and both counts
        with pytest.raises(CorruptIndexError, match="has 4 rows but the catalog says 5"):
            SobolevIndex.open(path)
        return
    if damage == "segment nonzero count missing":
        with pytest.raises(CorruptIndexError, match="None nonzero features; expected an integer"):
            SobolevIndex.open(path)
        report = SobolevIndex.verify_path(path)
        assert not report["ok"] and any("nonzero features" in p for p in report["problems"]), \
            report
        return
    with SobolevIndex.open(path) as index:
        report = index.verify()
    assert not report["ok"], report
    assert any(p.startswith(("catalog:", "documents:", "segments:", "meta:", "segment "))
               for p in report["problems"]), report["problems"]


def test_verify_reports_a_damaged_catalog_page(tmp_path):
    # Bytes flipped inside the documents table's pages: SQLite's own check
    # (or reading the rows) must find it; verify must not say ok nor crash.
    path = _two_segment_index(tmp_path)
    raw = bytearray((path / "catalog.sqlite").read_bytes())
    at = raw.find(b"delta")
    assert at > 0
    raw[at - 40:at + 5] = bytes(45)  # the cell header and payload before the key
    (path / "catalog.sqlite").write_bytes(bytes(raw))
    try:
        index = SobolevIndex.open(path)
    except (CorruptIndexError, NotAnIndexError):
        return  # refused at open, with a clear error: also fine
    with index:
        report = index.verify()
    assert not report["ok"], report


def test_damage_and_environment_errors_are_clear(tmp_path, monkeypatch):
    # Each of these used to surface as a raw IndexError, OSError or a
    # misleading "not a sobolev-index catalog".
    import errno

    import h5py

    path = _two_segment_index(tmp_path)
    # a parent pointer outside the tree in graph.h5
    broken = tmp_path / "graph-broken"
    shutil.copytree(path, broken)
    with h5py.File(broken / "graph.h5", "r+") as f:
        f["trees/0/parent"][3] = 10**6
    with pytest.raises(CorruptIndexError, match="graph.h5"):
        SobolevIndex.open(broken)
    # a segment replaced by another valid segment (of another size)
    swapped = tmp_path / "swapped"
    shutil.copytree(path, swapped)
    shutil.copy(swapped / "segments" / "000002.h5", swapped / "segments" / "000001.h5")
    with pytest.raises(CorruptIndexError, match="000001.h5 has 3 rows but the catalog says 4"):
        SobolevIndex.open(swapped)
    # a truncated catalog is damaged, not "not an index"
    truncated = tmp_path / "truncated"
    shutil.copytree(path, truncated)
    catalog = truncated / "catalog.sqlite"
    catalog.write_bytes(catalog.read_bytes()[:3000])
    with pytest.raises(CorruptIndexError, match="damaged SQLite database"):
        SobolevIndex.open(truncated)
    # a read-only file system: a SobolevIndexError that says to read instead
    import os as os_module

    real_open = os_module.open

    def read_only(name, flags, *args):
        if str(name).endswith("write.lock"):
            raise OSError(errno.EROFS, "Read-only file system", name)
        return real_open(name, flags, *args)

    monkeypatch.setattr(os_module, "open", read_only)
    with pytest.raises(SobolevIndexError, match="Read-only file system.*mode='r'"):
        SobolevIndex.open(path, "a")
    monkeypatch.undo()
    with SobolevIndex.open(path, "a") as index:  # and nothing was left held
        assert len(index) == 7


def test_get_reports_a_fields_value_that_does_not_decode(tmp_path):
    path = _two_segment_index(tmp_path)
    with sqlite3.connect(path / "catalog.sqlite") as db:
        db.execute("UPDATE documents SET fields = CAST(X'7b22ff' AS TEXT) WHERE key = 'alpha'")
    with SobolevIndex.open(path) as index:
        with pytest.raises(CorruptIndexError, match="cannot be read"):
            index.get("alpha")
        assert index.get("beta")["key"] == "beta"
        assert any("fields is not valid UTF-8" in p for p in index.verify()["problems"])
