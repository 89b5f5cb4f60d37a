"""Every wait of a sharded index on Dask is bounded (issue 28): when the
workers die, a search or a write either finishes on the restarted workers
(the exact answer, or the write committed and reported) or raises
ShardError naming the shards, within ``task_timeout`` seconds; it never
hangs.

The cluster is a LocalCluster of two worker processes of one thread each,
whose workers (and the workers their nannies start again after a kill)
load a preload module (_support/children/delayed_shards.py) that delays the
search (or write) of each shard by the number of seconds in a file, while
the file exists: a search as slow as a test needs, on the restarted workers
too. Each test runs the operation in a thread and joins it with a timeout,
so that a hang fails the test instead of stalling the run.
"""
import math
import os
import re
import shutil
import signal
import threading
import time

import numpy as np
import pytest

distributed = pytest.importorskip(
    "distributed", reason="dask.distributed is not installed (pip install 'sobolev-index[distributed]')")

from _support.expected import RefModel, check_topk, expected_dists  # noqa: E402
from _support.graphs import random_graph  # noqa: E402
from _support.measures import random_measures  # noqa: E402
from _support.processes import SHARD_DELAY_ENV, child_script  # noqa: E402

from sobolev_index.distributed import (  # noqa: E402
    ShardedIndex,
    ShardedWriteError,
    ShardError,
)

N_NODES = 40
SHARDS = 3
K = 7
# The bound the tests give; the nannies start a killed worker again in 1-3 s.
BOUND = 30.0
# What a test allows above the bound (a last status round trip, the thread's
# start): a hang is any longer.
SLACK = 10.0


@pytest.fixture(scope="module")
def slow_cluster(tmp_path_factory):
    """(client, delay file) of a LocalCluster whose searches of a shard
    sleep as long as the delay file says (and writes, as its ".write"
    twin says)."""
    import dask
    from distributed import Client, LocalCluster

    delay = str(tmp_path_factory.mktemp("preload") / "delay")
    # As tests/_support/cluster.py: a killed worker's nanny gets 120 s to
    # start a new one on a loaded machine.
    with dask.config.set({"distributed.deploy.lost-worker-timeout": "120s"}), \
            LocalCluster(n_workers=2, processes=True, threads_per_worker=1,
                         dashboard_address=":0", preload=[child_script("delayed_shards.py")],
                         env={SHARD_DELAY_ENV: delay}) as local, \
            Client(local) as client:
        yield client, delay


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """A sharded index of 100 measures and the reference distances of its
    first queries to each document (tests/reference.py, not the index)."""
    spec = random_graph(17, N_NODES)
    measures = random_measures(np.random.default_rng(3), N_NODES, 100)
    path = tmp_path_factory.mktemp("waits") / "sharded"
    with ShardedIndex.create(path, spec.lib(), shards=SHARDS) as sharded:
        keys = sharded.add(measures)
        roots, eta, p = sharded.roots, sharded.eta, sharded.p
    model = RefModel(spec, roots)
    alphas = {key: model.alphas(m) for key, m in zip(keys, measures)}
    queries = measures[:6]
    expected = [expected_dists(model, model.alphas(q), alphas, p, eta) for q in queries]
    return {"path": path, "keys": keys, "queries": queries, "expected": expected}


def assert_exact(result, built, what):
    """The k nearest of every query, as brute force over the documents finds them."""
    order = {key: i for i, key in enumerate(built["keys"])}
    for q in range(len(built["queries"])):
        check_topk(result.keys[q], result.distances[q], built["expected"][q], K, order=order,
                   what=f"{what}, query {q}")


def in_thread(call):
    """Start ``call()`` in a thread: (the thread, the dict that gets
    "value" or "error", and "seconds")."""
    out = {}

    def run():
        started = time.monotonic()
        try:
            out["value"] = call()
        except Exception as exc:  # judged by the caller
            out["error"] = exc
        out["seconds"] = time.monotonic() - started

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, out


def joined(thread, out, bound, what):
    """``out`` once ``thread`` ends; fails the test if it runs on past
    ``bound + SLACK`` seconds."""
    thread.join(bound + SLACK)
    assert not thread.is_alive(), (
        f"{what} had not returned {bound + SLACK:g} s later (task_timeout={bound:g} s): "
        "it hangs")
    return out


def kill_workers(client, pause=0.0):
    """SIGKILL every worker process of the cluster, ``pause`` seconds apart."""
    pids = client.run(os.getpid)
    for n, pid in enumerate(pids.values()):
        if n and pause:
            time.sleep(pause)
        os.kill(pid, signal.SIGKILL)
    return list(pids)


def shard_error_in_time(exc, seconds, bound, shards=range(SHARDS)):
    """A ShardError within the bound that names the shards it gives up on."""
    assert isinstance(exc, ShardError), f"not a ShardError: {exc!r}"
    assert seconds <= bound + SLACK, f"ShardError after {seconds:.1f} s, bound {bound:g} s"
    assert exc.shards and set(exc.shards) <= set(shards), exc.shards
    assert f"shard(s) {', '.join(map(str, exc.shards))} " in str(exc), str(exc)
    assert f"{bound:g} s" in str(exc), str(exc)


def assert_honest(error, live, writer):
    """A ShardedWriteError of an add (``live``: the keys of the add that are
    live now) reports every key it says committed, and names every failed
    shard whose part did commit as one that may have."""
    assert set(error.committed) <= live, "a key reported committed is not there"
    assert error.failed and set(error.failed) <= set(range(SHARDS)), error.failed
    named = re.search(r"the part\(s\) of shard\(s\) ([0-9, ]+) may have been committed too",
                      str(error))
    named = {int(i) for i in named.group(1).split(", ")} if named else set()
    for i in error.failed:
        if any(writer.shard_of(key) == i for key in live - set(error.committed)):
            assert i in named, f"shard {i} committed its part, and the error does not say so: {error}"


# ------------------------------------------------------------- workers killed
@pytest.mark.slow
def test_both_workers_killed_during_a_search(slow_cluster, built):
    """The issue's reproduction: a search of about 3 s, both workers
    killed during it, 0.3 s apart, so that the second dies before the
    first one's replacement has joined (the issue's 1 s apart hangs only
    when the restart is that slow). It used to hang for ever: the shards'
    open tasks, pinned loosely to the dead workers, were put back while no
    worker was running, and Dask never gave them to the new ones. Now the
    search answers exactly (on the restarted workers) or raises ShardError
    in time, and the next search answers exactly."""
    client, delay = slow_cluster
    try:
        with ShardedIndex.open(built["path"], client=client, task_timeout=BOUND) as reader:
            assert_exact(reader.search(built["queries"], k=K), built, "before the kills")
            with open(delay, "w") as f:
                f.write("1.5")  # a worker holds two of the three shards: 3 s
            thread, out = in_thread(lambda: reader.search(built["queries"], k=K))
            time.sleep(1.0)
            assert thread.is_alive(), "the search ended before the workers were killed"
            kill_workers(client, pause=0.3)
            assert thread.is_alive(), "the search ended before the workers were killed"
            joined(thread, out, BOUND, "the search during the kills")
            if "error" in out:
                shard_error_in_time(out["error"], out["seconds"], BOUND)
            else:
                assert out["seconds"] <= BOUND + SLACK
                assert_exact(out["value"], built, "during the kills")
            os.remove(delay)
            client.wait_for_workers(2, timeout=60)
            thread, out = in_thread(lambda: reader.search(built["queries"], k=K))
            joined(thread, out, BOUND, "the search after the kills")
            assert "error" not in out, f"the search after the kills failed: {out['error']!r}"
            assert_exact(out["value"], built, "after the kills")
    finally:
        if os.path.exists(delay):
            os.remove(delay)
        client.wait_for_workers(2, timeout=60)


@pytest.mark.slow
def test_a_search_at_once_after_both_idle_workers_are_killed(slow_cluster, built):
    """Both idle workers SIGKILLed and a search sent at once, while the
    scheduler may still list them: it used to hang for ever (as above);
    now it answers exactly once the workers are back, or raises ShardError
    in time, and the next search answers exactly."""
    client, _ = slow_cluster
    try:
        with ShardedIndex.open(built["path"], client=client, task_timeout=BOUND) as reader:
            assert_exact(reader.search(built["queries"], k=K), built, "before the kills")
            kill_workers(client)
            thread, out = in_thread(lambda: reader.search(built["queries"], k=K))
            joined(thread, out, BOUND, "the search after the kills")
            if "error" in out:
                shard_error_in_time(out["error"], out["seconds"], BOUND)
            else:
                assert_exact(out["value"], built, "at once after the kills")
            client.wait_for_workers(2, timeout=60)
            assert_exact(reader.search(built["queries"], k=K), built, "once the workers are back")
    finally:
        client.wait_for_workers(2, timeout=60)


@pytest.mark.slow
def test_a_write_at_once_after_both_idle_workers_are_killed(slow_cluster, built, tmp_path):
    """The same for a writer: its add either returns (every key committed,
    each exactly once) or raises an error that says what committed, in
    time; it used to hang for ever in the writer's wait for its shards
    (DaskShards._rehome). The writer goes on afterwards."""
    client, _ = slow_cluster
    path = tmp_path / "copy"
    shutil.copytree(built["path"], path)
    extra = random_measures(np.random.default_rng(9), N_NODES, 12)
    keys = [f"new-{i}" for i in range(len(extra))]
    try:
        with ShardedIndex.open(path, mode="a", client=client, task_timeout=BOUND) as writer:
            assert len(writer) == len(built["keys"])
            kill_workers(client)
            thread, out = in_thread(lambda: writer.add(extra, keys=keys))
            joined(thread, out, 2 * BOUND, "the add after the kills")  # its check gets a bound too
            client.wait_for_workers(2, timeout=60)
            live = writer.existing_keys(keys)
            if "error" in out:
                exc = out["error"]
                assert isinstance(exc, (ShardedWriteError, ShardError)), repr(exc)
                if isinstance(exc, ShardedWriteError):
                    assert_honest(exc, live, writer)
            else:
                assert out["value"] == keys
                assert live == set(keys), "add returned, but not every key is committed"
            missing = [key for key in keys if key not in live]
            if missing:
                writer.upsert([extra[keys.index(key)] for key in missing], keys=missing)
            assert writer.existing_keys(keys) == set(keys)
            assert len(writer) == len(built["keys"]) + len(keys)
            assert writer.verify()["ok"]
    finally:
        client.wait_for_workers(2, timeout=60)


# ------------------------------------------------------------------ the bound
@pytest.mark.slow
def test_a_bound_shorter_than_the_search_raises_shard_error_in_time(slow_cluster, built):
    """A search whose tasks take 2-4 s, with task_timeout=1: ShardError naming
    every shard and the bound, within the bound (plus the last round trip);
    the reader answers exactly once the tasks are quick again."""
    client, delay = slow_cluster
    try:
        with ShardedIndex.open(built["path"], client=client, task_timeout=1.0) as reader:
            assert_exact(reader.search(built["queries"], k=K), built, "before")
            with open(delay, "w") as f:
                f.write("2")  # a worker holds two of the three shards: 4 s
            started = time.monotonic()
            with pytest.raises(ShardError) as caught:
                reader.search(built["queries"], k=K)
            seconds = time.monotonic() - started
            assert seconds < 1.0 + 2.0, f"ShardError after {seconds:.1f} s, bound 1 s"
            assert caught.value.shards == list(range(SHARDS))
            assert "shard(s) 0, 1, 2" in str(caught.value)
            assert "within 1 s" in str(caught.value)
            assert "still running" in str(caught.value)
            os.remove(delay)
            # The cancelled tasks, sent at `started` to idle workers, run to
            # their end (a running task cannot be stopped); then the reader
            # answers within its bound.
            time.sleep(max(0.0, started + 5.0 - time.monotonic()))
            assert_exact(reader.search(built["queries"], k=K), built, "after")
    finally:
        if os.path.exists(delay):
            os.remove(delay)


@pytest.mark.slow
def test_a_write_longer_than_the_bound_reports_only_what_committed(slow_cluster, built,
                                                                     tmp_path):
    """task_timeout=1 and writes of 2 s per shard, which cannot be stopped
    once they run: the add raises ShardedWriteError (or returns, if every
    part is found committed in time), and never reports a key committed
    that is not, nor leaves a committed part unmentioned: a part whose
    outcome is not known is named as one that may have committed."""
    client, delay = slow_cluster
    path = tmp_path / "copy"
    shutil.copytree(built["path"], path)
    extra = random_measures(np.random.default_rng(10), N_NODES, 12)
    keys = [f"slow-{i}" for i in range(len(extra))]
    try:
        with ShardedIndex.open(path, mode="a", client=client, task_timeout=1.0) as writer:
            with open(delay + ".write", "w") as f:
                f.write("2")
            started = time.monotonic()
            try:
                returned, error = writer.add(extra, keys=keys), None
            except ShardedWriteError as exc:
                returned, error = None, exc
            seconds = time.monotonic() - started
            # The write and then the question of what committed, each bounded.
            assert seconds < 2 * 1.0 + 3.0, f"the add took {seconds:.1f} s"
            os.remove(delay + ".write")
            # Every write sent runs to its end (a worker holds two shards).
            time.sleep(max(0.0, started + 5.0 - time.monotonic()))
            live = writer.existing_keys(keys)
            if error is None:
                assert returned == keys and live == set(keys)
            else:
                assert all(isinstance(exc, ShardError) and exc.may_have_run
                           for exc in error.failed.values()), error.failed
                assert_honest(error, live, writer)
            missing = [key for key in keys if key not in live]
            if missing:
                writer.upsert([extra[keys.index(key)] for key in missing], keys=missing)
            assert writer.existing_keys(keys) == set(keys) and writer.verify()["ok"]
    finally:
        if os.path.exists(delay + ".write"):
            os.remove(delay + ".write")


@pytest.mark.parametrize("value", [0, -1, math.nan, math.inf, "10", True, None])
def test_a_bad_task_timeout_is_refused(built, value):
    with pytest.raises(ValueError, match=r"task_timeout is .*; expected a number of seconds > 0"):
        ShardedIndex.open(built["path"], task_timeout=value)
