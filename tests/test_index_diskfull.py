"""A full disk while a segment or the catalog is written: one clear
DiskFullError (CLI: one 'Error: no space left ...' line), nothing of the
operation committed, no process crash, and the index valid and unchanged.

Faults are injected into the file writes in-process; where the machine
allows mounting a small tmpfs (root on Linux), a real full disk is tried
too, in a child process so that a crash could not take the test run down.
"""
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import uuid

import numpy as np
import pytest
from _support.index import assert_unchanged, snapshot
from _support.processes import child_env

from sobolev_index import Graph, SobolevIndex
from sobolev_index.errors import DiskFullError
from sobolev_index.index import catalog as catalog_module
from sobolev_index.index import storage


def _index(path, n_docs=20, seed=0):
    rng = np.random.default_rng(seed)
    graph = Graph.from_points(rng.normal(size=(300, 3)), n_nodes=40, seed=0)
    with SobolevIndex.create(path, graph) as index:
        index.add(_measures(rng, n_docs), keys=[f"k{i}" for i in range(n_docs)])
    return rng


def _measures(rng, n):
    return [(rng.choice(40, 6, replace=False), rng.random(6) + 0.1) for _ in range(n)]


def test_a_segment_write_that_hits_a_full_disk(tmp_path, monkeypatch):
    path = tmp_path / "ix"
    rng = _index(path)
    before = snapshot(str(path))
    real = storage.write_file

    def half_then_full(target, data):
        with open(target, "wb") as handle:
            handle.write(bytes(data)[: len(data) // 2])
        raise OSError(28, "No space left on device", target)

    monkeypatch.setattr(storage, "write_file", half_then_full)
    with SobolevIndex.open(path, "a") as index:
        with pytest.raises(DiskFullError,
                           match="no space left on the device.*this write was not committed"):
            index.add(_measures(rng, 5), keys=[f"n{i}" for i in range(5)])
        assert "n0" not in index and len(index) == 20
        monkeypatch.setattr(storage, "write_file", real)
        assert_unchanged(before, str(path), "add that hit a full disk")
        index.add(_measures(rng, 2), keys=["after1", "after2"])  # the handle still works
    assert not [f for f in os.listdir(path / "segments") if f.startswith("tmp-")]
    with SobolevIndex.open(path) as index:
        assert index.verify()["ok"] and len(index) == 22


def test_too_little_free_space_is_refused_before_writing(tmp_path, monkeypatch):
    path = tmp_path / "ix"
    rng = _index(path)
    before = snapshot(str(path))
    usage = shutil.disk_usage(path)
    monkeypatch.setattr(storage.shutil, "disk_usage",
                        lambda _: usage._replace(free=1000))
    with SobolevIndex.open(path, "a") as index:
        with pytest.raises(DiskFullError,
                           match=r"needed about .* MB, 0.0 MB free\); this write was not made"):
            index.add(_measures(rng, 3), keys=["a", "b", "c"])
    assert_unchanged(before, str(path), "add refused for lack of space")


def test_a_catalog_commit_that_hits_a_full_disk(tmp_path, monkeypatch):
    path = tmp_path / "ix"
    rng = _index(path)
    real = catalog_module.Catalog._insert

    def full(self, table, rows):
        real(self, table, rows)
        raise sqlite3.OperationalError("database or disk is full")

    monkeypatch.setattr(catalog_module.Catalog, "_insert", full)
    with SobolevIndex.open(path, "a") as index:
        with pytest.raises(DiskFullError, match="while committing"):
            index.add(_measures(rng, 3), keys=["a", "b", "c"])
        assert "a" not in index
    monkeypatch.undo()
    with SobolevIndex.open(path) as index:
        report = index.verify()
        assert report["ok"] and len(index) == 20 and "a" not in index, report
    assert sorted(os.listdir(path / "segments")) == ["000001.h5"]


def _mount_small_tmpfs(directory, megabytes):
    if sys.platform != "linux" or os.geteuid() != 0 or shutil.which("mount") is None:
        return "mounting a tmpfs needs root on Linux"
    os.makedirs(directory)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={megabytes}M", "tmpfs",
                           str(directory)], capture_output=True, text=True)
    if done.returncode != 0:
        return f"this machine does not allow mounting a tmpfs ({done.stderr.strip()})"
    return None


@pytest.mark.slow
def test_a_real_full_disk(tmp_path):
    mount = tmp_path / f"small-{uuid.uuid4().hex[:6]}"
    reason = _mount_small_tmpfs(mount, 16)
    if reason:
        pytest.skip(reason)
    try:
        # In a child: add batches until the disk is full, printing each
        # acknowledged batch; a crash there fails this test, not the run.
        script = f"""
import json, sys
import numpy as np
from sobolev_index import Graph, SobolevIndex
from sobolev_index.errors import DiskFullError
rng = np.random.default_rng(1)
graph = Graph.from_points(rng.normal(size=(2000, 3)), n_nodes=400, seed=0)
with SobolevIndex.create({str(mount / "ix")!r}, graph) as index:
    for b in range(10_000):
        batch = [(rng.choice(400, 40, replace=False), rng.random(40) + 0.1) for _ in range(200)]
        try:
            index.add(batch, keys=[f"b{{b}}-{{i}}" for i in range(200)])
        except DiskFullError as exc:
            print(json.dumps({{"full": str(exc)}}), flush=True)
            sys.exit(0)
        print(json.dumps({{"ack": b}}), flush=True)
"""
        # cwd: not a source checkout, whose unbuilt package "-c" would import
        done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                              env=child_env(), timeout=300, cwd=str(tmp_path))
        assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
        lines = [json.loads(line) for line in done.stdout.splitlines()]
        acked = [line["ack"] for line in lines if "ack" in line]
        assert "no space left" in lines[-1]["full"] and acked
        with SobolevIndex.open(mount / "ix") as index:
            assert index.verify()["ok"]
            assert {f"b{b}-0" for b in acked} <= set(index)  # nothing acknowledged is lost
    finally:
        # lazy: memory maps of the index may outlive this test's handles
        subprocess.run(["umount", "-l", str(mount)], capture_output=True)


def test_the_cli_says_no_space_left_in_one_line(tmp_path, monkeypatch):
    from _support.cli import run

    clouds = tmp_path / "clouds.jsonl"
    clouds.write_text("".join(json.dumps({"key": f"c{i}", "points": [[i, 0.0], [0.0, i]]}) + "\n"
                              for i in range(6)))
    run("build", tmp_path / "pts", "--points", clouds, "--nodes", 4)
    before = snapshot(str(tmp_path / "pts"))
    usage = shutil.disk_usage(tmp_path)
    monkeypatch.setattr(storage.shutil, "disk_usage", lambda _: usage._replace(free=1000))
    more = tmp_path / "more.jsonl"
    more.write_text(json.dumps({"key": "m", "points": [[1.0, 1.0]]}) + "\n")
    result = run("add", tmp_path / "pts", more, ok=False)
    assert result.exit_code == 1
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: no space left on the device")
    assert "[Errno" not in lines[0] and "Traceback" not in result.output
    assert_unchanged(before, str(tmp_path / "pts"), "add on a full disk")


@pytest.mark.parametrize("step", ["rename", "directory fsync"])
@pytest.mark.parametrize("operation", ["add", "compact"])
def test_a_full_disk_at_the_rename_or_the_directory_sync(tmp_path, monkeypatch, step, operation):
    # After the file is written: its rename, or the fsync of the directory
    # that makes the rename durable, fails. Neither a temporary file nor an
    # uncommitted segment may stay behind (no writer would remove the latter).
    path = tmp_path / "ix"
    rng = _index(path)
    with SobolevIndex.open(path, "a") as index:
        index.add(_measures(rng, 3), keys=["x0", "x1", "x2"])
    before = snapshot(str(path))
    full = OSError(28, "No space left on device")
    if step == "rename":
        real_replace = os.replace

        def replace(src, dst):
            if os.path.basename(src).startswith(storage.TMP_PREFIX):
                raise full
            return real_replace(src, dst)

        monkeypatch.setattr(storage.os, "replace", replace)
    else:
        real_fsync = storage.fsync_path

        def fsync_path(target, directory=False):
            if directory and os.path.basename(target) == storage.SEGMENT_DIR:
                raise full
            return real_fsync(target, directory)

        monkeypatch.setattr(storage, "fsync_path", fsync_path)
    with SobolevIndex.open(path, "a") as index:
        with pytest.raises(DiskFullError, match="no space left"):
            if operation == "add":
                index.add(_measures(rng, 2), keys=["n0", "n1"])
            else:
                index.compact()
        monkeypatch.undo()
        assert_unchanged(before, str(path), f"{operation} that failed at the {step}")
        assert len(index) == 23
    report = SobolevIndex.verify_path(str(path))
    assert report["ok"] and not report["unlisted"] and not report["orphans"], report
