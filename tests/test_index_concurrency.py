"""One writer process adds and compacts while two reader processes search.

No process may raise, and every reader observation must come from a committed
snapshot: batches are all-or-nothing, the live count is one of the counts the
writer committed, and search sees exactly the documents the snapshot lists.
"""

import json
import subprocess
import sys
import time

import numpy as np
import pytest
from _support.graphs import pick_roots, random_graph
from _support.index import BATCH_MAX_ENV, batch_keys, batch_measures, batch_size
from _support.processes import child_env, child_script

from sobolev_index import Graph, SobolevIndex

WRITER_SECONDS = 6.0
READER_SECONDS = 5.0


@pytest.mark.slow
def test_one_writer_two_readers(tmp_path):
    _one_writer_two_readers(tmp_path, WRITER_SECONDS, READER_SECONDS, compact_every=4)


@pytest.mark.parametrize("seconds", [10, pytest.param(60, marks=pytest.mark.slow)])
@pytest.mark.slow
def test_readers_never_see_corruption_while_a_writer_merges(tmp_path, seconds, monkeypatch):
    # One document per add: the size tiers merge every few adds, and every
    # merge deletes files that a reader opening at that moment may be about
    # to open. Readers must never report a missing or corrupt segment.
    monkeypatch.setenv(BATCH_MAX_ENV, "1")
    _one_writer_two_readers(tmp_path, seconds + 1, seconds, compact_every=10**9, min_acks=30)


def _one_writer_two_readers(tmp_path, writer_seconds, reader_seconds, compact_every,
                            min_acks=10):
    spec = random_graph(31, 150, extra=150, kind="euclidean")
    roots = pick_roots(spec, 2, seed=3)
    path = tmp_path / "idx"
    with SobolevIndex.create(str(path), spec.lib(), roots=roots) as idx:
        for b in range(3):
            idx.add(batch_measures(b, spec.n), keys=batch_keys(b))
    initial = sum(batch_size(b) for b in range(3))

    env = child_env()
    writer = subprocess.Popen(
        [sys.executable, child_script("concurrent_writer.py"), str(path), "3",
         str(writer_seconds), str(compact_every)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )
    first = writer.stdout.readline()
    assert first.startswith("READY"), first + writer.stderr.read()
    readers = []
    for seed in (1, 2):
        out = tmp_path / f"reader{seed}.json"
        proc = subprocess.Popen(
            [sys.executable, child_script("concurrent_reader.py"), str(path),
             str(reader_seconds), str(out), str(seed)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
        )
        readers.append((proc, out))
    w_out, w_err = writer.communicate(timeout=120)
    r_results = []
    for proc, out in readers:
        so, se = proc.communicate(timeout=120)
        r_results.append((proc.returncode, se, out))
    assert writer.returncode == 0, f"writer failed:\n{w_err}"
    lines = [first.strip()] + w_out.split("\n")
    assert "DONE" in lines, w_out
    assert int(first.split()[1]) == initial

    # counts committed by the writer, recomputed from the deterministic batch sizes
    committed = {initial}
    running = initial
    n_acks = 0
    for line in lines:
        parts = line.split()
        if parts and parts[0] == "ACK":
            b, n = int(parts[1]), int(parts[2])
            running += batch_size(b)
            assert n == running, f"writer saw len {n} after batch {b}, expected {running}"
            committed.add(running)
            n_acks += 1
    assert n_acks >= min_acks, f"writer committed only {n_acks} batches in {writer_seconds}s"
    if compact_every < 10**6:
        assert any(line.startswith("COMPACTED") for line in lines)

    for rc, err, out in r_results:
        assert rc == 0, f"reader failed:\n{err}"
        with open(out) as fh:
            data = json.load(fh)
        assert not data["errors"], data["errors"][:10]
        assert data["iterations"] >= 5, data
        bad = sorted(set(data["counts"]) - committed)
        assert not bad, f"reader saw live counts {bad} that were never committed"
        assert len(set(data["counts"])) >= 2, "reader never saw the writer's progress"

    with SobolevIndex.open(str(path), "r") as idx:
        assert len(idx) == running
        report = idx.verify()
        assert report["ok"] is True, report


def test_a_reader_answers_from_its_snapshot_after_delete_and_compact(tmp_path):
    # get() used to read fields and added_at from the live catalog, so a
    # reader opened before a delete + compact got fields=None for a document
    # its own snapshot still holds.
    rng = np.random.default_rng(8)
    graph = Graph.from_points(rng.normal(size=(200, 3)), n_nodes=20, seed=0)
    measures = [(rng.choice(20, 4, replace=False), None) for _ in range(6)]
    path = tmp_path / "ix"
    with SobolevIndex.create(path, graph) as writer:
        writer.add(measures[:3], keys=["a", "b", "c"], fields=[{"n": 1}, {"n": 2}, {"n": 3}])
        writer.add(measures[3:], keys=["d", "e", "f"])
    reader = SobolevIndex.open(path)
    try:
        before = reader.get("b")
        with SobolevIndex.open(path, "a") as writer:
            writer.delete(["b"])
            writer.compact()
            writer.add([measures[0]], keys=["g"], fields=[{"n": 7}])
        after = reader.get("b")
        assert after["fields"] == {"n": 2} and after["added_at"] == before["added_at"]
        np.testing.assert_array_equal(after["nodes"], before["nodes"])
        assert "g" not in reader and reader.search(measures[1:2], k=1).keys == [["b"]]
        reader.refresh()
        assert "b" not in reader and reader.get("g")["fields"] == {"n": 7}
    finally:
        reader.close()


@pytest.mark.slow
def test_verify_while_a_writer_commits_reports_no_damage(tmp_path, monkeypatch):
    # A segment file exists under its final name for a moment before the
    # commit that lists it: a verify at that moment must not report it as
    # a segment no commit lists (a writer holds commit.lock meanwhile).
    monkeypatch.setenv(BATCH_MAX_ENV, "1")
    spec = random_graph(32, 120, extra=100, kind="euclidean")
    path = tmp_path / "idx"
    with SobolevIndex.create(str(path), spec.lib(), roots=pick_roots(spec, 1, seed=1)) as idx:
        idx.add(batch_measures(0, spec.n), keys=batch_keys(0))
    writer = subprocess.Popen(
        [sys.executable, child_script("concurrent_writer.py"), str(path), "1", "6", str(10**9)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=child_env())
    assert writer.stdout.readline().startswith("READY")
    reports, bad = 0, []
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        report = SobolevIndex.verify_path(str(path), sample=1)
        reports += 1
        if not report["ok"]:
            bad.append(report["problems"])
        with SobolevIndex.open(str(path)) as reader:
            report = reader.verify(sample=1)
        if not report["ok"]:
            bad.append(report["problems"])
    out, err = writer.communicate(timeout=60)
    assert writer.returncode == 0, err
    assert out.count("ACK") >= 10, out
    assert reports >= 5
    assert not bad, bad[:3]
