"""Crash safety: a writer process is SIGKILLed at random moments (also during
compact()), at least 20 times.  After every kill:

* open() succeeds without any repair, and a search runs;
* every acknowledged batch is present, with features bit-identical to a fresh
  ``tree.features_of`` of the batch's (deterministic) content;
* every batch is all-or-nothing, and nothing beyond the batches started is visible;
* verify() returns a report without raising, and after verify(repair=True) a
  verify() reports ok.
"""

import os
import random
import time

import numpy as np
import pytest
from _support.graphs import pick_roots, random_graph
from _support.index import batch_keys, batch_measures
from _support.measures import assert_csr_identical
from _support.processes import LineChild, child_script

from sobolev_index import SobolevIndex, pairwise_sobolev

N_KILLS = 24
COMPACT_EVERY = 3
MAX_SIZE = 24
TIME_BUDGET = 80.0  # seconds; the kill count is a hard minimum regardless


def _writer(path, start):
    """A crash_writer.py process whose stdout lines are collected by a thread."""
    return LineChild([child_script("crash_writer.py"), path, start, COMPACT_EVERY, MAX_SIZE])


def _parse(lines):
    started, acked = set(), set()
    for line in lines:
        parts = line.split()
        if len(parts) == 2 and parts[0] == "START":
            started.add(int(parts[1]))
        elif len(parts) == 2 and parts[0] == "ACK":
            acked.add(int(parts[1]))
    return started, acked


def _all_files(path):
    out = set()
    for root, _, files in os.walk(path):
        for name in files:
            if not name.endswith(("-shm", "-wal", ".lock")):
                out.add(os.path.relpath(os.path.join(root, name), path))
    return out


def _check_index(path, trees, n_nodes, acked, started, max_started, query):
    """All checks after a kill. Returns the set of batches present."""
    with SobolevIndex.open(str(path), "r") as idx:  # no repair before this open
        keys = list(idx)
        present_keys = set(keys)
        assert len(keys) == len(present_keys) == len(idx)
        by_batch = {}
        for key in keys:
            assert key.startswith("b") and len(key) == 11, f"foreign key {key!r}"
            by_batch.setdefault(int(key[1:7]), set()).add(key)
        for b, ks in by_batch.items():
            assert b <= max_started, f"batch {b} visible but never started (max {max_started})"
            expect = set(batch_keys(b, MAX_SIZE))
            assert ks == expect, (
                f"batch {b} is partly visible: {len(ks)} of {len(expect)} keys"
            )
        missing = sorted(b for b in acked if b not in by_batch)
        assert not missing, f"acknowledged batches lost: {missing}"
        # features of everything present, bit for bit, in one call per root
        present = sorted(by_batch)
        all_keys, all_measures = [], []
        for b in present:
            all_keys += batch_keys(b, MAX_SIZE)
            all_measures += batch_measures(b, n_nodes, max_size=MAX_SIZE)
        for r, tree in enumerate(trees):
            if all_keys:
                assert_csr_identical(idx.features(all_keys, root=r),
                                     tree.features_of(all_measures), f"features root {r}")
        # a search works and is exact on this snapshot (checked against the library's
        # pairwise matrix on fresh features, itself tested against the reference)
        if all_keys:
            k = min(5, len(all_keys))
            res = idx.search([query], k=k, p=1)
            D = sum(e * pairwise_sobolev(t.features_of([query]), t.features_of(all_measures),
                                         trees=t, p=1)[0]
                    for e, t in zip(idx.eta, trees))
            order = np.argsort(D, kind="stable")[:k]
            assert set(res.keys[0]) <= present_keys
            np.testing.assert_allclose(np.asarray(res.distances)[0], D[order], rtol=1e-9,
                                       atol=1e-12)
        report = idx.verify()
        assert isinstance(report, dict) and "ok" in report and "problems" in report
    return set(by_batch), report


@pytest.mark.slow
def test_sigkill_writer_many_times(tmp_path):
    rng = random.Random(12345)
    spec = random_graph(77, 300, extra=300, kind="euclidean")
    roots = pick_roots(spec, 2, seed=7)
    graph = spec.lib()
    trees = [graph.tree(r) for r in roots]
    path = tmp_path / "idx"
    SobolevIndex.create(str(path), graph, roots=roots).close()
    query = batch_measures(999999, spec.n, max_size=MAX_SIZE)[0]

    acked_all, started_all = set(), set()
    next_batch = 0
    kills = kills_in_compact = kills_in_add = 0
    not_ok_reports = []
    orphans_seen = 0
    t0 = time.monotonic()
    while kills < N_KILLS or (kills_in_compact < 5 and time.monotonic() - t0 < TIME_BUDGET):
        child = _writer(path, next_batch)
        ready = child.wait_for("READY", timeout=60)
        if ready is None:
            err = child.kill()
            pytest.fail(f"writer did not start after kill #{kills}:\n{err}")
        mode = kills % 3
        if mode == 0:  # at a random moment
            time.sleep(rng.uniform(0.0, 0.5))
        elif mode == 1:  # during (or right around) compact()
            i = child.wait_for("COMPACT ", timeout=30, after=ready)
            if i is not None:
                time.sleep(rng.uniform(0.0, 0.03))
        else:  # during add()
            i = child.wait_for("START ", timeout=30, after=ready + rng.randrange(1, 6))
            if i is not None:
                time.sleep(rng.uniform(0.0, 0.01))
        err = child.kill()
        kills += 1
        lines = child.text()
        assert child.ended()
        if "Traceback" in err:
            pytest.fail(f"writer raised before being killed (kill #{kills}):\n{err}")
        # where did the kill land (by the last line printed)?
        last = lines[-1]
        if last.startswith("COMPACT "):
            kills_in_compact += 1
        elif last.startswith("START "):
            kills_in_add += 1
        started, acked = _parse(lines)
        acked_all |= acked
        started_all |= started
        max_started = max(started_all) if started_all else -1

        present, report = _check_index(path, trees, spec.n, acked_all, started_all,
                                       max_started, query)
        files_before = _all_files(path)
        # verify(repair=True) by a writer leaves a healthy index
        with SobolevIndex.open(str(path), "a") as w:
            w.verify(repair=True)
            after = w.verify()
            assert after["ok"] is True, f"after repair (kill #{kills}): {after}"
            assert set(w) == {k for b in present for k in batch_keys(b, MAX_SIZE)}
        orphans_seen += bool(files_before - _all_files(path))
        if not report["ok"]:
            # problems found before the repair may only be about the files the
            # repair (or the writer's open) removed: orphans of the killed writer
            removed = files_before - _all_files(path)
            for problem in report["problems"]:
                assert "orphan" in problem.lower() or any(
                    os.path.basename(f) in problem for f in removed
                ), f"verify() reported a real problem after kill #{kills}: {report}; " \
                   f"files removed by repair: {sorted(removed)}"
            not_ok_reports.append(report)
        next_batch = max_started + 1

    elapsed = time.monotonic() - t0
    print(f"{kills} kills ({kills_in_compact} during compact, {kills_in_add} during add), "
          f"{len(acked_all)} batches acknowledged, {orphans_seen} kills left orphan files, "
          f"{len(not_ok_reports)} verify reports not ok before repair, {elapsed:.1f}s")
    assert kills >= 20
    assert kills_in_compact >= 1, "no kill landed during compact(); the test lost its point"
    assert len(acked_all) >= 20
