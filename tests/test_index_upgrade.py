"""Indexes written by older releases (formats 2 and 3): read as they are,
refused for writing with a pointer to ``upgrade``, and rewritten by it in
the current format without losing or changing anything a reader sees.

``tests/data/index_v2`` and ``index_v3`` were written by the releases before
formats 3 and 4 (see tests/data/README.md). Expected search results come
from ``reference.py`` on the measures the index returns, not from the
index's own search.
"""
import json
import os
import shutil
import sqlite3
from pathlib import Path

import h5py
import numpy as np
import pytest
from _support.cli import run
from _support.index import assert_unchanged, snapshot
from reference import ref_pairwise, ref_tree

from sobolev_index import (
    CorruptIndexError,
    OlderFormatError,
    SobolevIndex,
    UnsupportedFormatError,
)
from sobolev_index.index import storage

DATA = Path(__file__).resolve().parent / "data"
LIVE = 133  # 135 documents, two deleted
NEW = storage.FORMAT_VERSION


def _copy(tmp_path, version):
    path = tmp_path / f"index_v{version}"
    shutil.copytree(DATA / f"index_v{version}", path)
    # The lock files an index directory has (not kept in tests/data).
    for name in (storage.LOCK_FILE, storage.PIN_FILE, storage.COMMIT_LOCK):
        (path / name).touch()
    return path


@pytest.fixture(params=[2, 3], ids=["format-2", "format-3"])
def old_path(request, tmp_path):
    """A copy of an index an older release wrote, in format 2 or 3."""
    return _copy(tmp_path, request.param)


@pytest.fixture
def v2_path(tmp_path):
    return _copy(tmp_path, 2)


def _old_version(path):
    return int(path.name.rsplit("v", 1)[1])


def _segment_versions(path):
    out = []
    for name in sorted(os.listdir(path / "segments")):
        with h5py.File(path / "segments" / name, "r") as f:
            out.append(int(f.attrs["format_version"]))
    return out


def _catalog_version(path):
    db = sqlite3.connect(path / "catalog.sqlite")
    try:
        return json.loads(db.execute(
            "SELECT value FROM meta WHERE name = 'format_version'").fetchone()[0])
    finally:
        db.close()


def _contents(index):
    """Every live document as the index returns it: key -> (nodes, masses, label)."""
    out = {}
    for key in index:
        doc = index.get(key)
        order = np.argsort(doc["nodes"])
        out[key] = (doc["nodes"][order].tolist(), doc["masses"][order].tolist(), doc["label"])
    return out


def _brute_force(index, contents, queries, k, p):
    """Keys and distances of the k nearest documents by reference.py."""
    graph = index.graph
    trees = [ref_tree(graph.n_nodes, graph.edges, graph.lengths, int(root))
             for root in index.roots]
    keys = list(contents)
    X = [(np.array(contents[key][0]), np.array(contents[key][1])) for key in keys]
    D = ref_pairwise(queries, X, trees, p, eta=index.eta)
    out = []
    for row in D:
        order = np.lexsort((np.arange(len(keys)), row))[:k]
        out.append(([keys[j] for j in order], row[order]))
    return out


def _assert_search_is_exact(index, contents, p):
    rng = np.random.default_rng(5)
    queries = [(rng.choice(index.graph.n_nodes, size=4, replace=False), rng.random(4) + 0.1)
               for _ in range(6)]
    result = index.search(queries, k=7, p=p)
    for i, (keys, distances) in enumerate(_brute_force(index, contents, queries, 7, p)):
        np.testing.assert_allclose(result.distances[i], distances, rtol=1e-9, atol=1e-12)
        # Every document nearer than the k-th is found (ties at the k-th
        # distance may be cut either way).
        nearer = {key for key, d in zip(keys, distances) if d < distances[-1] * (1 - 1e-9)}
        assert nearer <= set(result.keys[i]), (nearer, result.keys[i])


def test_an_older_index_is_read_as_it_is(old_path):
    version = _old_version(old_path)
    before = snapshot(str(old_path))
    with SobolevIndex.open(old_path, "r") as index:
        assert index.info()["format_version"] == version
        assert index.info()["segments_in_older_format"] == 3
        assert len(index) == LIVE
        assert "d0-003" not in index and "d0-004" in index
        contents = _contents(index)
        assert contents["d0-001"][2] == "beta" and contents["d0-002"][2] is None
        # (p = inf computes exact values, and p > 16 scans, from features
        # rebuilt from the measures.)
        for p in (1, 2, 3.5, 20, np.inf):
            _assert_search_is_exact(index, contents, p)
        assert index.verify()["ok"]
    assert_unchanged(before, str(old_path), f"reading a format-{version} index")


def test_writing_to_an_older_index_is_refused_and_writes_nothing(old_path):
    version = _old_version(old_path)
    before = snapshot(str(old_path))
    with pytest.raises(OlderFormatError, match=rf"format version {version}.*SobolevIndex.upgrade"):
        SobolevIndex.open(old_path, "a")
    result = run("compact", old_path, ok=False)
    assert result.exit_code == 1
    assert "sobolev-index upgrade INDEX" in result.output
    assert "cannot read an upgraded index" in result.output
    assert_unchanged(before, str(old_path), "a refused write")


def test_upgrade_rewrites_every_segment_and_keeps_what_readers_see(old_path):
    version = _old_version(old_path)
    rng = np.random.default_rng(9)
    queries = [(rng.choice(48, size=3, replace=False), rng.random(3) + 0.1) for _ in range(8)]
    with SobolevIndex.open(old_path, "r") as index:
        contents = _contents(index)
        found = {p: index.search(queries, k=9, p=p) for p in (1, 2, np.inf)}
    assert _segment_versions(old_path) == [version] * 3

    report = SobolevIndex.upgrade(old_path)
    assert report["from_version"] == version and report["to_version"] == NEW == 4
    assert report["segments_rewritten"] == 3 and report["documents"] == LIVE
    assert _catalog_version(old_path) == NEW
    assert _segment_versions(old_path) == [NEW] * 3

    with SobolevIndex.open(old_path, "a") as index:
        assert index.info()["format_version"] == NEW
        assert _contents(index) == contents
        for p in (1, 2, 3.5, np.inf):
            _assert_search_is_exact(index, contents, p)
        # The same answers to the last bit: the rewritten lists hold what
        # the old ones held, shared or not.
        for p, before in found.items():
            after = index.search(queries, k=9, p=p)
            assert after.keys == before.keys
            assert np.array_equal(after.distances, before.distances)
        assert index.verify()["ok"]
        inv = index._segments[0].inverted_file(index.trees, index._edge_weight)
        if len(index.roots) > 1:
            # Lists equal under several roots are stored once.
            assert len(inv.ptr) - 1 < len(inv.slot_list)
        # Deleted documents were dropped, and the index takes writes again.
        assert index.info()["deleted"] == 0
        index.add([([1, 2], [0.5, 0.5])], keys=["new"])
        index.compact()
        assert len(index) == LIVE + 1

    again = SobolevIndex.upgrade(old_path)
    assert again["from_version"] == NEW and again["segments_rewritten"] == 0


class _Stop(BaseException):
    """Stands for a crash or a Ctrl-C at a chosen point of an upgrade."""


def _stop_at(monkeypatch, where):
    """Make the upgrade stop at ``where``: after the catalog's version is
    raised ("catalog"), after the first segment's commit ("first commit"),
    or inside the second rewrite, after its file is written and before its
    commit ("before a commit")."""
    from sobolev_index.index import catalog as catalog_module
    from sobolev_index.index.writer import Writer

    if where == "catalog":
        def stop(self, segments):
            raise _Stop
        monkeypatch.setattr(Writer, "merge", stop)
        return
    merges = []
    original_merge = Writer.merge

    def merge(self, segments):
        if merges and where == "first commit":
            raise _Stop
        merges.append(segments)
        return original_merge(self, segments)

    monkeypatch.setattr(Writer, "merge", merge)
    if where == "before a commit":
        original_replace = catalog_module.Catalog.replace_segments

        def replace(self, *args, **kwargs):
            if len(merges) == 2:
                raise _Stop
            return original_replace(self, *args, **kwargs)

        monkeypatch.setattr(catalog_module.Catalog, "replace_segments", replace)


@pytest.mark.parametrize("where,rewritten", [
    ("catalog", 0), ("first commit", 1), ("before a commit", 1)])
@pytest.mark.slow
def test_an_interrupted_upgrade_leaves_a_working_index_and_can_be_finished(
        old_path, monkeypatch, where, rewritten):
    version = _old_version(old_path)
    with SobolevIndex.open(old_path, "r") as index:
        contents = _contents(index)
    _stop_at(monkeypatch, where)
    with pytest.raises(_Stop):
        SobolevIndex.upgrade(old_path)
    monkeypatch.undo()
    # The catalog is in the new format (older releases refuse it), the
    # segments rewritten so far too, the others still in the old one, and
    # no file of an unfinished rewrite is left: readable and writable.
    assert _catalog_version(old_path) == NEW
    assert sorted(_segment_versions(old_path)) == [version] * (3 - rewritten) + [NEW] * rewritten
    shown = run("info", old_path).output
    assert f"{NEW}, {3 - rewritten} segment(s) in an older format" in shown
    assert "sobolev-index upgrade INDEX" in shown
    with SobolevIndex.open(old_path, "a") as index:
        assert index.info()["segments_in_older_format"] == 3 - rewritten
        assert _contents(index) == contents
        _assert_search_is_exact(index, contents, 1)
        assert index.verify()["ok"]
    result = run("upgrade", old_path, "--json")
    report = json.loads(result.output)
    assert report["segments_rewritten"] == 3 - rewritten and report["from_version"] == NEW
    assert _segment_versions(old_path) == [NEW] * 3
    assert "older format" not in run("info", old_path).output
    with SobolevIndex.open(old_path, "r") as index:
        assert _contents(index) == contents
        assert index.verify()["ok"]
        assert index.info()["segments_in_older_format"] == 0


def test_cli_upgrade_says_what_it_did(old_path):
    version = _old_version(old_path)
    result = run("upgrade", old_path)
    assert (f"upgraded from format {version} to {NEW}: 3 segment(s) rewritten, 133 documents"
            in result.output)
    result = run("upgrade", old_path)
    assert f"already in format {NEW}; nothing to do" in result.output


def test_a_newer_format_is_refused_with_a_clear_message(v2_path):
    SobolevIndex.upgrade(v2_path)
    db = sqlite3.connect(v2_path / "catalog.sqlite")
    db.execute(f"UPDATE meta SET value = '{NEW + 1}' WHERE name = 'format_version'")
    db.commit()
    db.close()
    with pytest.raises(UnsupportedFormatError, match=f"version {NEW + 1}.*newer release"):
        SobolevIndex.open(v2_path, "r")


def test_a_format_2_segment_with_unsigned_pointers_is_corruption(v2_path):
    # The format-2 reader checks its postings before converting them: an
    # unsigned pointer array would pass an order check by wrapping around.
    name = sorted(os.listdir(v2_path / "segments"))[0]
    with h5py.File(v2_path / "segments" / name, "r+") as f:
        ptr = f["inverted/ptr"][...].astype(np.uint64)
        ptr[5], ptr[6] = 2**40, 2**40 + 10
        del f["inverted/ptr"]
        f["inverted/ptr"] = ptr
    with SobolevIndex.open(v2_path, "r") as index:
        with pytest.raises(CorruptIndexError, match="signed integers"):
            index.search([([1, 2], None)], k=3)


def test_a_segment_file_of_an_unknown_format_is_corruption(v2_path):
    SobolevIndex.upgrade(v2_path)
    name = sorted(os.listdir(v2_path / "segments"))[0]
    with h5py.File(v2_path / "segments" / name, "r+") as f:
        f.attrs["format_version"] = 7
    with pytest.raises(CorruptIndexError, match="format version 7"):
        SobolevIndex.open(v2_path, "r")


def test_an_index_of_an_older_format_can_be_copied_rebuilt_and_split(old_path, tmp_path):
    """create_like, a rebuild from an export and a split take the graph and
    trees of an index an older release wrote (a format-2 graph file is in
    an older form, so the new ones may differ from it in bytes, not in
    arrays)."""
    from sobolev_index.distributed import ShardedIndex, shard_index
    from sobolev_index.ingest.export import build_from_export, export_index

    with SobolevIndex.open(old_path) as source:
        keys = list(source)[:5]
        expected = source.search(keys, k=7)
        with SobolevIndex.create_like(tmp_path / "like", source) as like:
            assert like.roots.tolist() == source.roots.tolist()
            assert like.eta.tolist() == source.eta.tolist() and like.p == source.p
            for mine, theirs in zip(like.trees, source.trees):
                assert np.array_equal(mine.parent, theirs.parent)
                assert np.array_equal(mine.length, theirs.length)
    export_index(str(old_path), str(tmp_path / "e.jsonl"))
    rebuilt, _ = build_from_export(str(tmp_path / "rebuilt"), str(tmp_path / "e.jsonl"),
                                   str(old_path))
    with rebuilt:
        found = rebuilt.search(keys, k=7)
        assert found.keys == expected.keys
        assert np.array_equal(found.distances, expected.distances)
    shard_index(str(old_path), str(tmp_path / "sharded"), 2)
    with ShardedIndex.open(tmp_path / "sharded") as sharded:
        found = sharded.search(keys, k=7)
        assert found.keys == expected.keys
        assert np.array_equal(found.distances, expected.distances)


def test_a_sharded_index_of_an_older_format_is_upgraded_shard_by_shard(tmp_path, monkeypatch):
    """A sharded index whose shards an older release wrote: readable,
    refused for writing, and rewritten by `upgrade` on the sharded path
    (the CLI refuses the path of one shard), answering as before."""
    from sobolev_index import Graph
    from sobolev_index.distributed import ShardedIndex, ShardError

    rng = np.random.default_rng(4)
    graph = Graph.from_points(rng.normal(size=(300, 3)), n_nodes=40, k=5, edges="knn", seed=1)
    measures = [(rng.choice(40, size=int(rng.integers(1, 6)), replace=False), None)
                for _ in range(120)]
    path = tmp_path / "sharded"
    # What the previous release wrote: the same arrays, labelled format 3
    # (a format-3 reader takes lists that carry slot_list as they are).
    monkeypatch.setattr(storage, "FORMAT_VERSION", 3)
    with ShardedIndex.create(path, graph, roots=3, shards=2, on_violation="perturb") as index:
        index.add(measures[:80], keys=[f"k{i}" for i in range(80)])
        index.add(measures[80:], keys=[f"k{i}" for i in range(80, 120)])
    monkeypatch.undo()
    queries = measures[:6]
    with ShardedIndex.open(path) as index:
        before = index.search(queries, k=8, p=1)
    with pytest.raises(ShardError, match="format version 3"):
        ShardedIndex.open(path, "a")
    refused = run("upgrade", path / "shard-000", ok=False)
    assert refused.exit_code == 1 and str(path) in refused.output

    report = json.loads(run("upgrade", path, "--json").output)
    assert report["from_version"] == 3 and report["to_version"] == NEW
    assert report["shards"] == 2 and report["documents"] == 120
    assert report["segments_rewritten"] >= 2
    for shard in ("shard-000", "shard-001"):
        assert set(_segment_versions(path / shard)) == {NEW}
        assert _catalog_version(path / shard) == NEW
    with ShardedIndex.open(path, "a") as index:
        after = index.search(queries, k=8, p=1)
        assert after.keys == before.keys
        assert np.array_equal(after.distances, before.distances)
        assert index.verify()["ok"]
        index.add([([1, 2], [0.5, 0.5])], keys=["new"])
        assert len(index) == 121
    assert f"already in format {NEW}; nothing to do" in run("upgrade", path).output
