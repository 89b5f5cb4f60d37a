"""The command line on sharded indexes: ``sobolev-index shard`` splits a text
index built by ``build``, and search, add, info, gram (--zarr), get, delete,
compact and knn-graph take the sharded index, in this process and with
``--scheduler`` on a Dask LocalCluster.

Every answer is compared with the same command on the unsplit index (or a
copy of it given the same adds): identical keys and distances, since the
sharded index gives a single index's answers exactly.
"""
import json
import math
import os
import shutil

import numpy as np
import pytest

distributed = pytest.importorskip(
    "distributed", reason="dask.distributed is not installed (pip install 'sobolev-index[distributed]')")

from _support import corpus as tc  # noqa: E402
from _support.cli import run  # noqa: E402
from _support.cluster import local_cluster  # noqa: E402
from _support.index import assert_unchanged, snapshot  # noqa: E402

from sobolev_index import SobolevIndex  # noqa: E402
from sobolev_index.distributed import ShardedIndex, route  # noqa: E402

SHARDS = 3
TEXTS = ["space1 space2 the music3", "cooking4 cooking5", "music1 music7 a space1"]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """A text index built by the CLI (with a deletion, so the split copies
    live documents only) and its split into SHARDS shards; not to be
    modified: copy them first."""
    directory = tmp_path_factory.mktemp("cli-sharded")
    corpus_path, vectors_path = tc.make_files(str(directory))
    source = directory / "source"
    run("build", source, "--corpus", corpus_path, "--vectors", vectors_path, "--nodes", 12,
        "--roots", 2, "--silent")
    run("delete", source, "space-3", "music-5")
    split = directory / "split"
    result = run("shard", source, split, "--shards", SHARDS, "--batch-size", 17, "--json",
                 "--silent")
    return source, split, json.loads(result.stdout), corpus_path, vectors_path


@pytest.fixture
def writable(built, tmp_path):
    source, split, _, corpus_path, vectors_path = built
    shutil.copytree(source, tmp_path / "source")
    shutil.copytree(split, tmp_path / "split")
    return tmp_path / "source", tmp_path / "split", vectors_path


@pytest.fixture(scope="module")
def cluster():
    with local_cluster() as client:
        yield client


def search_json(index, *args):
    return json.loads(run("search", index, *args, "--json").stdout)


def assert_same_hits(got, want, what=""):
    """Identical search records: keys, labels and distances bit for bit."""
    assert [[h["key"] for h in q] for q in got] == [[h["key"] for h in q] for q in want], what
    assert [[h["label"] for h in q] for q in got] == [[h["label"] for h in q] for q in want]
    assert [[h["distance"] for h in q] for q in got] == \
        [[h["distance"] for h in q] for q in want], what


def text_args(texts=TEXTS):
    return [arg for text in texts for arg in ("--text", text)]


# --------------------------------------------------------------------- shard
def test_shard_reports_what_it_copied(built):
    source, split, report, _, _ = built
    with SobolevIndex.open(source) as single:
        keys = single.keys_in_order()
        n_words = len(single.catalog.query("SELECT word FROM words"))
    assert report["documents"] == len(keys) and report["shards"] == SHARDS
    assert report["kind"] == "text" and report["words"] == n_words
    assert report["per_shard"] == [sum(route(k, SHARDS) == i for k in keys)
                                   for i in range(SHARDS)]
    assert {"manifest.json", "shard-000", "shard-001", "shard-002"} <= set(
        os.listdir(split))
    with ShardedIndex.open(split) as sharded:
        assert sharded.keys_in_order() == keys


def test_shard_table_and_refusals(built, tmp_path):
    source, split, _, _, _ = built
    out = run("shard", source, tmp_path / "two", "--shards", 2, "--silent").output
    assert "into 2 shards" in out and "shard  documents" in out
    before = snapshot(source)
    result = run("shard", source, split, "--shards", 2, ok=False)
    assert result.exit_code == 1 and result.output.startswith("Error: ")
    result = run("shard", source, tmp_path / "zero", "--shards", 0, ok=False)
    assert result.exit_code == 2 and "--shards" in result.output
    result = run("shard", tmp_path / "nowhere", tmp_path / "x", "--shards", 2, ok=False)
    assert result.exit_code == 1 and "does not exist" in result.output
    assert not (tmp_path / "zero").exists() and not (tmp_path / "x").exists()
    assert_unchanged(before, source, "shard reads its source only")


# -------------------------------------------------------------------- search
@pytest.mark.parametrize("p", ["1", "2", "inf"])
@pytest.mark.slow
def test_search_equals_the_source(built, p):
    source, split, _, _, _ = built
    for args in (text_args() + ["-k", 12], ["--key", "space-1", "--key", "cooking-7", "-k", 30],
                 text_args(TEXTS[:1]) + ["--label", "music", "--roots", "1"],
                 text_args(TEXTS[1:]) + ["--radius", "0.8", "--limit", "4"]):
        want = search_json(source, *args, "-p", p)
        assert want[0], args
        assert_same_hits(search_json(split, *args, "-p", p), want, f"{args} p={p}")


def test_every_shard_answers_text_queries_on_its_own(built):
    source, split, _, _, _ = built
    found = []
    for i in range(SHARDS):
        hits = search_json(split / f"shard-{i:03d}", *text_args(), "-k", 50)
        assert all(route(h["key"], SHARDS) == i for q in hits for h in q)
        found.append(hits)
    # Together they hold the source's answers, at the same distances.
    want = search_json(source, *text_args(), "-k", 50)
    for q, hits in enumerate(want):
        merged = sorted((h["distance"], h["key"]) for f in found for h in f[q])
        assert [d for d, _ in merged][:len(hits)] == [h["distance"] for h in hits]


def test_search_table_and_stats(built):
    _, split, _, _, _ = built
    out = run("search", split, *text_args(TEXTS[:1]), "-k", 3, "--stats").output
    assert out.startswith(f"query: {TEXTS[0]}") and "rank  distance" in out
    assert "wall time: search" in out and "merge" in out and "statistics:" in out


# ---------------------------------------------------------------------- info
def test_info_shows_each_shard_and_the_totals(built):
    source, split, report, _, _ = built
    info = json.loads(run("info", split, "--json").stdout)
    single = json.loads(run("info", source, "--json").stdout)
    assert info["documents"] == single["documents"] == report["documents"]
    for name in ("nodes", "edges", "roots", "p", "words", "weighting", "recipe"):
        assert info[name] == single[name], name
    assert [s["documents"] for s in info["shards"]] == report["per_shard"]
    assert info["segments"] == sum(s["segments"] for s in info["shards"])
    assert info["bytes"] > sum(s["bytes"] for s in info["shards"])  # and the manifest
    out = run("info", split).output
    lines = out.splitlines()
    assert f"shards     {SHARDS}" in out
    table = lines[lines.index(next(line for line in lines if line.startswith("shard "))):]
    assert [line.split()[1] for line in table[2:2 + SHARDS]] == [
        f"{n:,}" for n in report["per_shard"]]
    assert table[2 + SHARDS].split()[:2] == ["total", f"{report['documents']:,}"]


# ------------------------------------------------------- add, get, delete, ...
def test_add_equals_adding_to_the_source(writable, tmp_path):
    source, split, _ = writable
    new = [{"key": "new-0", "text": "space1 cooking2 the", "label": "mixed",
            "fields": {"n": 1}},
           {"key": "new-1", "text": "music2 music3 space4", "label": "music"},
           {"key": "space-1", "text": "cooking1 cooking2", "label": "cooking"}]
    path = tmp_path / "new.jsonl"
    tc.write_jsonl(path, new)
    for index in (source, split):
        result = json.loads(run("add", index, path, "--upsert", "--vectors", "none",
                                "--json", "--silent").stdout)
        assert (result["added"], result["replaced"]) == (2, 1)
    got, want = (json.loads(run("get", index, "new-0", "space-1").stdout)
                 for index in (split, source))
    for doc in got + want:
        del doc["added_at"]
    assert got == want
    for p in ("1", "inf"):
        assert_same_hits(search_json(split, *text_args(), "-k", 20, "-p", p),
                         search_json(source, *text_args(), "-k", 20, "-p", p))
    left = [json.loads(run("delete", index, "new-1", "music-2", "--json").stdout)
            for index in (source, split)]
    assert left[0] == left[1] and left[0]["deleted"] == 2
    for index in (source, split):
        run("compact", index)
    assert json.loads(run("info", split, "--json").stdout)["deleted"] == 0
    assert_same_hits(search_json(split, "--key", "new-0", "-k", 30),
                     search_json(source, "--key", "new-0", "-k", 30))
    with ShardedIndex.open(split) as sharded:
        assert sharded.verify()["ok"]


def test_add_refuses_new_words_and_bad_input_and_writes_nothing(writable, tmp_path):
    _, split, vectors_path = writable
    path = tmp_path / "new.jsonl"
    tc.write_jsonl(path, [{"key": "w", "text": "space99 music99"}])
    before = [snapshot(p) for p in sorted(split.glob("shard-*"))]
    result = run("add", split, path, "--vectors", vectors_path, ok=False)
    assert result.exit_code == 2 and "words table" in result.output
    # Without vectors, a document of new words only has no word the index knows.
    result = run("add", split, path, ok=False)
    assert result.exit_code == 1 and "no word the index knows" in result.output
    tc.write_jsonl(path, [{"key": "music-1", "text": "music1"}])
    result = run("add", split, path, ok=False)
    assert result.exit_code == 1 and "'music-1' is already in the index" in result.output
    for snap, shard in zip(before, sorted(split.glob("shard-*"))):
        assert_unchanged(snap, shard, "refused add")


def test_knn_graph_equals_the_source(built, tmp_path):
    import scipy.sparse

    source, split, _, _, _ = built
    for index, name in ((source, "a.npz"), (split, "b.npz")):
        run("knn-graph", index, tmp_path / name, "-k", 4, "-p", "2", "--silent")
    a, b = (scipy.sparse.load_npz(tmp_path / name) for name in ("a.npz", "b.npz"))
    assert (a != b).nnz == 0 and a.nnz == 4 * a.shape[0]
    assert (tmp_path / "a.npz.keys.json").read_text() == (tmp_path / "b.npz.keys.json").read_text()


# ---------------------------------------------------------------------- gram
@pytest.mark.slow
def test_gram_writes_zarr_equal_to_the_single_index(built, tmp_path):
    zarr = pytest.importorskip("zarr", reason="zarr is not installed")
    source, split, _, _, _ = built
    with SobolevIndex.open(source) as single:
        keys = single.keys_in_order()
        want = single.gram(keys, p=2)[0]
        kernel = single.gram(keys[:9], t=0.5)[0]
    out = json.loads(run("gram", "--zarr", tmp_path / "d.zarr", split, "-p", "2", "--chunk", 13,
                         "--json").stdout)
    assert out["rows"] == len(keys) and out["chunks"] == [13, 13] and out["kind"] == "distance"
    stored = zarr.open_array(str(tmp_path / "d.zarr"), mode="r")
    assert stored.attrs["keys"] == keys and np.array_equal(stored[:], want)
    run("gram", split, "--zarr", tmp_path / "k.zarr", "--kernel", 0.5,
        *[arg for key in keys[:9] for arg in ("--keys", key)])
    assert np.array_equal(zarr.open_array(str(tmp_path / "k.zarr"), mode="r")[:], kernel)


def test_gram_refuses_what_does_not_fit(built, tmp_path):
    source, split, _, _, _ = built
    for args, words in (((split, tmp_path / "g.npy"), "Zarr"),
                        ((source, "--zarr", tmp_path / "g.zarr"), "not one"),
                        ((split,), "give OUTPUT"),
                        ((split, tmp_path / "g.npy", "--zarr", tmp_path / "g.zarr"), "give OUTPUT"),
                        ((source, tmp_path / "g.npy", "--chunk", 4), "--chunk"),
                        ((split, "--zarr", tmp_path / "g.zarr", "--label", "music"), "--label"),
                        ((source, tmp_path / "g.npy", "--scheduler", "tcp://x:1"), "--scheduler")):
        result = run("gram", *args, ok=False)
        assert result.exit_code == 2 and words in result.output, (args, result.output)
    assert not os.listdir(tmp_path)


# ------------------------------------------------------------------ refusals
def test_commands_of_one_index_name_the_shards(built):
    _, split, _, _, _ = built
    for args in (("sql", split, "SELECT 1"), ("distance", split, "space-1", "space-2"),
                 ("export", split, "out.jsonl"),
                 ("duplicates", split), ("explain", split, "space-1", "space-2")):
        result = run(*args, ok=False)
        assert result.exit_code == 1, args
        assert "is a sharded index" in result.output and "shard-000" in result.output, args
    # (upgrade takes a sharded index: test_index_upgrade.py upgrades an old one.)
    assert "nothing to do" in run("upgrade", split).output
    result = run("search", split.parent / "source", "--key", "space-1", "--scheduler",
                 "tcp://127.0.0.1:1", ok=False)
    assert result.exit_code == 2 and "not one" in result.output


# ----------------------------------------------------------------- on Dask
@pytest.mark.slow
def test_commands_with_a_scheduler(writable, cluster, tmp_path):
    zarr = pytest.importorskip("zarr", reason="zarr is not installed")
    source, split, _ = writable
    address = cluster.scheduler.address
    for p in ("1", "2", "inf"):
        assert_same_hits(search_json(split, *text_args(), "--key", "music-3", "-k", 9, "-p", p,
                                     "--scheduler", address),
                         search_json(source, *text_args(), "--key", "music-3", "-k", 9,
                                     "-p", p), f"p={p}")
    # The shards were opened on the workers, and closed with the command.
    assert not [key for key in cluster.who_has() if key.startswith("shard-")]
    info = json.loads(run("info", split, "--json", "--scheduler", address).stdout)
    assert info["documents"] == json.loads(run("info", source, "--json").stdout)["documents"]
    path = tmp_path / "new.jsonl"
    tc.write_jsonl(path, [{"key": f"dask-{i}", "text": text, "label": "dask"}
                          for i, text in enumerate(TEXTS)])
    for index, extra in ((source, ["--vectors", "none"]), (split, ["--scheduler", address])):
        added = json.loads(run("add", index, path, "--json", "--silent", *extra).stdout)
        assert added["added"] == len(TEXTS)
    assert_same_hits(search_json(split, *text_args(), "-k", 15, "--scheduler", address),
                     search_json(source, *text_args(), "-k", 15))
    run("gram", split, "--zarr", tmp_path / "d.zarr", "--chunk", 16, "--scheduler", address)
    with SobolevIndex.open(source) as single:
        want = single.gram(single.keys_in_order())[0]
    assert np.array_equal(zarr.open_array(str(tmp_path / "d.zarr"), mode="r")[:], want)
    assert math.isfinite(float(want.max()))


@pytest.mark.slow
def test_an_unreachable_scheduler_is_one_error(built, monkeypatch):
    import functools

    from sobolev_index.distributed import files

    # Waited for 1 s rather than the 10 s a command waits.
    monkeypatch.setattr(files, "connect", functools.partial(files.connect, timeout=1))
    _, split, _, _, _ = built
    result = run("info", split, "--scheduler", "tcp://127.0.0.1:9", ok=False)
    assert result.exit_code == 1
    assert result.output.startswith("Error: no Dask scheduler answered at tcp://127.0.0.1:9")


def test_task_timeout_reaches_the_sharded_index(built, monkeypatch):
    from sobolev_index.distributed import ShardedIndex

    _, split, _, _, _ = built
    seen = []
    real = ShardedIndex.open.__func__

    def recording(cls, *args, **kwargs):
        seen.append(kwargs.get("task_timeout"))
        return real(cls, *args, **kwargs)

    monkeypatch.setattr(ShardedIndex, "open", classmethod(recording))
    want = search_json(split, *text_args(TEXTS[:1]))
    assert search_json(split, *text_args(TEXTS[:1]), "--task-timeout", "7.5") == want
    assert seen == [None, 7.5]
    for bad in ("0", "-1", "nan"):
        result = run("search", split, *text_args(TEXTS[:1]), "--task-timeout", bad, ok=False)
        assert result.exit_code == 2 and "--task-timeout" in result.output, result.output


# -------------------------------------------------------------------- verify
def test_verify_checks_every_shard(writable):
    _, split, _ = writable
    out = run("verify", split).output
    assert out.startswith("ok: ") and f"in {SHARDS} shards" in out
    report = json.loads(run("verify", split, "--json").stdout)
    assert report["ok"] and len(report["shards"]) == SHARDS
    segment = next((split / "shard-001" / "segments").iterdir())
    raw = bytearray(segment.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    segment.write_bytes(bytes(raw))
    result = run("verify", split, ok=False)
    assert result.exit_code == 1 and "PROBLEMS FOUND" in result.stdout
    assert "problem: shard 1 (" in result.stdout


# -------------------------------------------------------------- point clouds
def test_point_clouds_split_add_and_search(tmp_path):
    def clouds(path, keys, seed):
        rng = np.random.default_rng(seed)
        tc.write_jsonl(path, [{"key": key, "label": f"c{i % 3}",
                               "points": (rng.normal(size=(6, 3)) + 5.0 * (i % 3)).tolist()}
                              for i, key in enumerate(keys)])
        return path

    first = clouds(tmp_path / "a.jsonl", [f"p{i}" for i in range(30)], 0)
    more = clouds(tmp_path / "b.jsonl", ["q0", "q1", "q2", "q3"], 1)
    source, split = tmp_path / "source", tmp_path / "split"
    run("build", source, "--points", first, "--nodes", 15, "--roots", 2, "--silent")
    run("shard", source, split, "--shards", 2, "--silent")
    for index in (source, split):
        assert json.loads(run("add", index, more, "--json", "--silent").stdout)["added"] == 4
    assert json.loads(run("info", split, "--json").stdout)["documents"] == 34
    for p in ("1", "inf"):
        assert_same_hits(search_json(split, "--file", more, "-k", 7, "-p", p),
                         search_json(source, "--file", more, "-k", 7, "-p", p), f"p={p}")
    result = run("search", split, "--text", "words", ok=False)
    assert result.exit_code == 1 and "not built from text" in result.output


def test_writing_commands_refuse_a_shard_of_a_sharded_index(writable, tmp_path):
    """add, delete, compact, upgrade and verify --repair on a shard's
    directory: one error naming the sharded index, nothing written; reading
    the shard on its own still works."""
    _, split, vectors_path = writable
    shard = split / "shard-000"
    doc = tmp_path / "doc.txt"
    doc.write_text("space1 music1")
    before = snapshot(shard)
    for args in (("add", shard, doc, "--silent"), ("delete", shard, "space-1"),
                 ("compact", shard), ("upgrade", shard), ("verify", shard, "--repair")):
        result = run(*args, ok=False)
        assert result.exit_code == 1, (args, result.output)
        assert f"is a shard of the sharded index {split}" in result.output, args
        assert result.output.count("\n") == 1, result.output
    assert_unchanged(before, shard)
    assert run("verify", shard).output.startswith("ok: ")
    assert run("info", shard, "--json").exit_code == 0
