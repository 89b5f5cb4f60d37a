"""Damage found when a file is opened or read whole, not only by verify().

The graph file is hashed at open (it is read whole there anyway) and the
sharded manifest carries a checksum of its content; a segment is hashed when
a merge or an export reads it whole, and at open with ``check=True``. Text
in the catalog that is not UTF-8 is an error naming the document, never a
key with replacement characters. Opening warns of segment files that no
commit lists, but never of the file of a commit under way.
"""
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import threading
import warnings

import h5py
import numpy as np
import pytest
from _support.graphs import pick_roots, random_graph
from _support.index import assert_unchanged, snapshot
from _support.measures import random_measures

from sobolev_index import CorruptIndexError, SobolevIndex
from sobolev_index.index import storage
from sobolev_index.ingest.export import export_index

N = 40
SPEC = random_graph(7, N, extra=30)
ROOTS = pick_roots(SPEC, 2, seed=3)
BATCHES = (6, 5, 4, 12)
QUERIES = random_measures(np.random.default_rng(9), N, 6)


@pytest.fixture(scope="module")
def template(tmp_path_factory):
    path = tmp_path_factory.mktemp("tpl") / "idx"
    rng = np.random.default_rng(1)
    with SobolevIndex.create(str(path), SPEC.lib(), roots=ROOTS) as index:
        for b, size in enumerate(BATCHES):
            index.add(random_measures(rng, N, size), keys=[f"{'abcd'[b]}{i}" for i in range(size)],
                      labels=[f"l{b}"] * size, fields=[{"i": i} for i in range(size)])
    return path


@pytest.fixture
def path(template, tmp_path):
    copy = tmp_path / "idx"
    shutil.copytree(template, copy)
    return str(copy)


def _results(index):
    found = index.search(QUERIES, k=8, p=1)
    return [list(keys) for keys in found.keys], np.asarray(found.distances)


def _data_spans(h5_path, prefix=""):
    """(dataset, file offset, bytes) of the contiguous datasets under ``prefix``."""
    spans = []

    def visit(name, obj):
        if isinstance(obj, h5py.Dataset) and name.startswith(prefix) \
                and obj.id.get_offset() is not None and obj.id.get_storage_size():
            spans.append((name, obj.id.get_offset(), obj.id.get_storage_size()))

    with h5py.File(h5_path, "r") as f:
        f.visititems(visit)
    return spans


def _flip(file, offset, xor=0x10):
    with open(file, "r+b") as handle:
        handle.seek(offset)
        value = handle.read(1)[0]
        handle.seek(offset)
        handle.write(bytes([value ^ xor]))


def _segment(path, i):
    return os.path.join(path, "segments", storage.segment_name(i))


def _flip_a_mass(path, i):
    """Flip one mantissa bit of the first mass of segment ``i``: still a
    valid measure, only a different one."""
    [(_, offset, _)] = _data_spans(_segment(path, i), "measures/masses")
    _flip(_segment(path, i), offset + 5, 0x01)


def _sql(path, statement):
    with sqlite3.connect(os.path.join(path, "catalog.sqlite")) as db:
        db.execute(statement)
    db.close()


def _disk_files(path):
    return sorted(n for n in os.listdir(os.path.join(path, "segments")) if n.endswith(".h5"))


def _committed(path):
    with sqlite3.connect(f"file:{os.path.join(path, 'catalog.sqlite')}?mode=ro", uri=True) as db:
        names = sorted(row[0] for row in db.execute("SELECT file FROM segments"))
    db.close()
    return names


# ----------------------------------------------------------------- graph file
def test_a_flipped_byte_in_the_graph_file_is_found_at_open(path):
    """Flips in the trees' arrays (what a search reads): each is found at
    open, not passed on as different distances."""
    with SobolevIndex.open(path) as index:
        expected = _results(index)
    graph = os.path.join(path, "graph.h5")
    outcomes = {}
    for _, offset, size in _data_spans(graph, "trees/"):
        for at in (offset, offset + size // 2 + 1, offset + size - 2):
            _flip(graph, at)
            try:
                with SobolevIndex.open(path) as index:
                    got = _results(index)
                same = got[0] == expected[0] and np.array_equal(got[1], expected[1])
                outcome = "same results" if same else "silently wrong results"
            except CorruptIndexError as exc:
                # (A few flips break a tree's shape, which reading checks.)
                outcome = "detected by its checksum" if "graph.h5 fails its checksum" in str(exc) \
                    and "verify" in str(exc) else "detected by another check"
            outcomes[outcome] = outcomes.get(outcome, 0) + 1
            _flip(graph, at)  # and back
    assert set(outcomes) == {"detected by its checksum"}, outcomes
    with SobolevIndex.open(path) as index:  # undamaged again
        assert _results(index)[0] == expected[0]


def test_a_damaged_graph_checksum_value_is_named(path):
    _sql(path, "UPDATE meta SET value = '17' WHERE name = 'graph_checksum'")
    with pytest.raises(CorruptIndexError, match="graph_checksum is 17"):
        SobolevIndex.open(path)


# ------------------------------------------------------------------ segments
def test_compact_refuses_a_segment_that_fails_its_checksum(path):
    """A merge copies rows into a new segment with a new checksum: without
    the check, the damage would pass into it and verify() would say ok."""
    _flip_a_mass(path, 2)
    before = snapshot(path)
    with SobolevIndex.open(path, "a") as index:
        with pytest.raises(CorruptIndexError,
                           match=r"segment .*000002\.h5 fails its checksum: the catalog records "
                                 r"sha256 [0-9a-f]{16}\.\.\., the file has [0-9a-f]{16}\.\.\..*verify"):
            index.compact()
    assert_unchanged(before, path, "a refused compact")


def test_export_refuses_a_segment_that_fails_its_checksum(path, tmp_path):
    _flip_a_mass(path, 1)
    out = tmp_path / "export.jsonl"
    with pytest.raises(CorruptIndexError, match=r"000001\.h5 fails its checksum"):
        export_index(path, out)
    assert not out.exists() and os.listdir(tmp_path) == ["idx"]


def test_open_with_check_hashes_every_segment(path, monkeypatch):
    with SobolevIndex.open(path, check=True) as index:  # undamaged: opens
        assert len(index) == sum(BATCHES)
    _flip_a_mass(path, 3)
    for mode in ("r", "a"):
        with pytest.raises(CorruptIndexError, match=r"000003\.h5 fails its checksum"):
            SobolevIndex.open(path, mode, check=True)
    # Without check, open does not hash segments (what a search reads is
    # checked for shape, not for every value: verify() hashes them).
    SobolevIndex.open(path).close()
    with pytest.raises(ValueError, match="check is 'yes'; expected True or False"):
        SobolevIndex.open(path, check="yes")


def test_check_before_a_command_hashes_every_segment(path):
    from click.testing import CliRunner

    from sobolev_index.cli import main

    runner = CliRunner()
    assert runner.invoke(main, ["--check", "info", path]).exit_code == 0
    _flip_a_mass(path, 3)
    plain = runner.invoke(main, ["info", path])
    assert plain.exit_code == 0, plain.output
    checked = runner.invoke(main, ["--check", "info", path])
    assert checked.exit_code == 1 and "000003.h5 fails its checksum" in checked.output
    assert "Traceback" not in checked.output


def test_a_checking_reader_hashes_only_new_segments_on_refresh(path, monkeypatch):
    hashed = []
    real = storage.file_checksum

    def counted(file):
        hashed.append(os.path.basename(file))
        return real(file)

    monkeypatch.setattr(storage, "file_checksum", counted)
    reader = SobolevIndex.open(path, check=True)
    assert sorted(hashed) == sorted(["graph.h5"] + _committed(path))
    with SobolevIndex.open(path, "a") as writer:
        writer.add(random_measures(np.random.default_rng(5), N, 3), keys=["e0", "e1", "e2"])
    hashed.clear()
    reader.refresh()
    new = sorted(set(_committed(path)) - {storage.segment_name(i) for i in range(1, 5)})
    assert len(new) == 1 and hashed == new  # the write hashed its own file before
    assert "e1" in reader
    reader.close()


# ------------------------------------------------------------- catalog text
def test_a_key_that_does_not_decode_is_an_error_not_a_replacement(path):
    with SobolevIndex.open(path) as index:
        query = index.stored_measures(["b1"])[0]
        doc_id = query["id"]
    _sql(path, "UPDATE documents SET key = CAST(X'62ff7461' AS TEXT) WHERE key = 'b1'")
    with SobolevIndex.open(path) as index:
        message = rf"key of document {doc_id} is not valid UTF-8.*verify"
        with pytest.raises(CorruptIndexError, match=message):
            index.search([(query["nodes"], query["masses"])], k=3)
        with pytest.raises(CorruptIndexError, match=message):
            list(index)
        with pytest.raises(CorruptIndexError, match=message):
            index.ids_and_keys()
        with pytest.raises(CorruptIndexError, match=message):
            index.search([(query["nodes"], query["masses"])], k=3, where={"label": "l1"})
        # Documents that do not meet it are found as before.
        assert index.get("a1")["key"] == "a1"
        report = index.verify()
    assert any(f"row {doc_id}: key is not valid UTF-8" in p for p in report["problems"])


def test_a_label_that_does_not_decode_is_an_error(path):
    with SobolevIndex.open(path) as index:
        query = index.stored_measures(["c2"])[0]
    _sql(path, "UPDATE documents SET label = CAST(X'6cff' AS TEXT) WHERE key = 'c2'")
    with SobolevIndex.open(path) as index:
        with pytest.raises(CorruptIndexError,
                           match=rf"label of document {query['id']} is not valid UTF-8"):
            index.search([(query["nodes"], query["masses"])], k=1)


def test_export_names_the_row_whose_key_does_not_decode(path, tmp_path):
    _sql(path, "UPDATE documents SET key = CAST(X'62ff7461' AS TEXT) WHERE key = 'b1'")
    with SobolevIndex.open(path) as index:
        doc_id = int(index.catalog.query("SELECT id FROM documents WHERE segment = 2 AND row = 1")[0][0])
    with pytest.raises(CorruptIndexError, match=rf"table documents, row {doc_id}: key is not valid"):
        export_index(path, tmp_path / "out.jsonl")


# ------------------------------------------------------- unlisted segment files
def test_open_warns_of_segment_files_no_commit_lists(path):
    segments = os.path.join(path, "segments")
    for i in (11, 12):
        shutil.copy(_segment(path, 1), os.path.join(segments, storage.segment_name(i)))
    expected = r"2 segment files .*\(000011\.h5, 000012\.h5\).*sobolev-index recover .*--dry-run"
    with pytest.warns(UserWarning, match=expected):
        reader = SobolevIndex.open(path)
    with reader, warnings.catch_warnings():
        warnings.simplefilter("error")
        reader.refresh()  # said once, at open
    with pytest.warns(UserWarning, match=expected):
        writer = SobolevIndex.open(path, "a")
    with writer:
        assert len(writer.verify(repair=True)["moved"]) == 2
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        SobolevIndex.open(path).close()  # moved to lost+found/: no warning


def test_no_warning_for_temporary_or_merged_away_files(path):
    segments = os.path.join(path, "segments")
    with open(os.path.join(segments, storage.TMP_PREFIX + storage.segment_name(20)), "wb") as f:
        f.write(b"half-written")
    shutil.copy(_segment(path, 1), os.path.join(segments, storage.segment_name(21)))
    _sql(path, "INSERT OR REPLACE INTO meta (name, value) VALUES ('retired_files', "
               "'[\"000021.h5\"]')")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        SobolevIndex.open(path).close()


def test_no_warning_for_a_segment_a_writer_is_committing(path, monkeypatch):
    """A reader opening while a writer is between renaming its new segment
    into place and committing it sees a file no commit lists yet: that is
    a commit under way, not a lost one, and must not be warned of."""
    writer = SobolevIndex.open(path, "a")
    renamed, go_on = threading.Event(), threading.Event()
    real = writer._catalog.commit_segment

    def paused(*args, **kwargs):
        renamed.set()
        assert go_on.wait(30)
        return real(*args, **kwargs)

    monkeypatch.setattr(writer._catalog, "commit_segment", paused)
    errors = []

    def add():
        try:
            writer.add(random_measures(np.random.default_rng(6), N, 2), keys=["w0", "w1"])
        except BaseException as exc:  # noqa: BLE001 - reported by the test below
            errors.append(exc)

    thread = threading.Thread(target=add)
    thread.start()
    try:
        assert renamed.wait(30)
        in_flight = sorted(set(_disk_files(path)) - set(_committed(path)))
        assert len(in_flight) == 1  # the race is real: a segment file no commit lists
        timer = threading.Timer(0.5, go_on.set)
        timer.start()
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            reader = SobolevIndex.open(path)
        timer.join()
    finally:
        go_on.set()
        thread.join(30)
        writer.close()
    assert not errors, errors
    with reader:
        assert len(reader) in (sum(BATCHES), sum(BATCHES) + 2)
        reader.refresh()
        assert "w1" in reader


# ----------------------------------------------------------- sharded manifest
def test_a_manifest_changed_after_it_was_written_is_found(tmp_path):
    from sobolev_index.distributed import ShardedIndex

    with ShardedIndex.create(tmp_path / "s", SPEC.lib(), roots=ROOTS, shards=2):
        pass
    file = tmp_path / "s" / "manifest.json"
    good = file.read_text()
    manifest = json.loads(good)
    assert isinstance(manifest.get("checksum"), str)
    # A plausible value (the fields' own checks pass it): only the checksum can tell.
    manifest["eta"] = [0.25, 0.75]
    file.write_text(json.dumps(manifest, indent=2, sort_keys=True))
    for mode in ("r", "a"):
        with pytest.raises(CorruptIndexError, match=r"manifest\.json fails its checksum"):
            ShardedIndex.open(tmp_path / "s", mode=mode)
    # A manifest of a release that wrote none is read as before.
    manifest = json.loads(good)
    del manifest["checksum"]
    file.write_text(json.dumps(manifest, indent=2, sort_keys=True))
    ShardedIndex.open(tmp_path / "s").close()
    file.write_text(good)
    ShardedIndex.open(tmp_path / "s", mode="a").close()


@pytest.mark.slow
def test_readers_opening_next_to_a_busy_writer_are_never_warned(path):
    """Readers open again and again while a writer in another process adds
    one document at a time (its size tiers merge every few adds, and merges
    delete files): no open may warn of an unlisted file."""
    from _support.index import BATCH_MAX_ENV
    from _support.processes import child_env, child_script

    writer = subprocess.Popen(
        [sys.executable, child_script("concurrent_writer.py"), path, "100", "8", "5"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env=child_env(**{BATCH_MAX_ENV: 1}))
    opens = 0
    try:
        first = writer.stdout.readline()
        assert first.startswith("READY"), first + writer.stderr.read()
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            while writer.poll() is None:
                SobolevIndex.open(path).close()
                opens += 1
    finally:
        out, err = writer.communicate(timeout=60)
    assert writer.returncode == 0, err
    assert out.count("ACK") >= 10 and opens >= 20, (out.count("ACK"), opens)
