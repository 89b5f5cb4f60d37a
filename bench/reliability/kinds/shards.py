"""A sharded index on Dask whose workers die (the kind ``dask-kill``).

A LocalCluster of two worker processes (one thread each, restarted by their
nannies when killed) holds the three shards of a small sharded index. A
worker preload (the test-suite's ``children/delayed_shards.py``) slows the
search of each shard by a set time while a file exists, on the restarted
workers too, so that a k-NN search lasts long enough to be hit. Both
workers are SIGKILLed, during a search or idle just before one, and the
search's outcome is compared with a single index given the same documents.
The promise: the exact result, or a ShardError naming the shards within
``task_timeout``; never a hang, a wrong result, or another error.
"""
import os
import random
import shutil
import threading
import time

from _support.processes import SHARD_DELAY_ENV, child_script

from ..faults import sigkill_all

# Seconds each shard's search sleeps during a trial: a worker holding two of
# the three shards answers after about twice as long.
SHARD_DELAY = 1.0
# The bound the trials give the sharded index, and what a trial allows
# above it before it counts a hang.
TASK_TIMEOUT = 30.0
SLACK = 10.0
K = 7
N_NODES = 40
DOCUMENTS = 80
SHARDS = 3

def _corpus(seed):
    """A connected graph of N_NODES nodes (each edge once) and DOCUMENTS
    random measures, from the standard library's generator."""
    from sobolev_index import Graph

    rng = random.Random(seed)
    lengths = {}
    for i in range(1, N_NODES):
        lengths[(rng.randrange(i), i)] = rng.uniform(0.5, 2.0)
    while len(lengths) < 2 * N_NODES:
        a, b = sorted(rng.sample(range(N_NODES), 2))
        lengths.setdefault((a, b), rng.uniform(0.5, 2.0))
    graph = Graph.from_edges(N_NODES, list(lengths), list(lengths.values()))
    measures = []
    for _ in range(DOCUMENTS):
        size = rng.randint(1, 8)
        measures.append((rng.sample(range(N_NODES), size),
                         [rng.uniform(0.1, 1.0) for _ in range(size)]))
    return graph, measures


def _same(got, want):
    """Whether two SearchResults hold the same keys and distances, bit for bit."""
    return got.keys == want.keys and got.distances.tolist() == want.distances.tolist()


def _kill_all(client, pause, rng):
    """SIGKILL every worker process, ``pause`` seconds (at most) apart."""
    sigkill_all(list(client.run(os.getpid).values()), pause, rng)


def _trial(run, client, path, queries, want, delay, during, rng):
    """One search with both workers killed (``during`` it, or idle just
    before it): its outcome class and a detail."""
    from sobolev_index.distributed import ShardedIndex, ShardError

    with ShardedIndex.open(path, client=client, task_timeout=TASK_TIMEOUT) as reader:
        if not _same(reader.search(queries, k=K), want):
            return "wrong result", "before any kill"
        if during:
            with open(delay, "w") as f:
                f.write(str(SHARD_DELAY))
        else:
            _kill_all(client, 0.0, rng)
        out = {}

        def search():
            started = time.monotonic()
            try:
                out["value"] = reader.search(queries, k=K)
            except Exception as exc:  # classified below
                out["error"] = exc
            out["seconds"] = time.monotonic() - started

        thread = threading.Thread(target=search, daemon=True)
        thread.start()
        if during:
            # The worker with two shards answers after 2 x SHARD_DELAY.
            time.sleep(rng.uniform(0.2, 1.6 * SHARD_DELAY))
            _kill_all(client, 1.0, rng)
        thread.join(TASK_TIMEOUT + SLACK)
        if os.path.exists(delay):
            os.remove(delay)
        if thread.is_alive():
            return "hang", f"no answer {TASK_TIMEOUT + SLACK:g} s after the search began"
        seconds = out["seconds"]
        if "error" in out:
            exc = out["error"]
            if isinstance(exc, ShardError):
                if seconds <= TASK_TIMEOUT + SLACK:
                    return "ShardError in time", f"{seconds:.1f} s: {exc}"
                return "ShardError late", f"{seconds:.1f} s: {exc}"
            return "other error", f"{type(exc).__name__}: {exc}"
        if not _same(out["value"], want):
            return "wrong result", f"keys {out['value'].keys[:2]}..., want {want.keys[:2]}..."
        return "exact result", f"{seconds:.1f} s"


def kind_shard_waits(run):
    """Both Dask workers of a sharded index killed during a search, or just before one."""
    expected = ("the exact result (a single index's keys and distances, bit for bit) once "
                "the nannies have started the workers again, or a ShardError naming the shards "
                f"within task_timeout ({TASK_TIMEOUT:g} s here) plus {SLACK:g} s; never a hang, "
                "a wrong result or another error")
    setup = (f"LocalCluster of 2 worker processes (1 thread each, restarted by their nannies); "
             f"a {SHARDS}-shard index of {DOCUMENTS} documents; a {K}-NN search of 6 queries "
             f"whose shard searches a worker preload slows by {SHARD_DELAY:g} s each")
    ok = ["exact result", "ShardError in time"]
    rows = {
        True: run.row("dask-kill-search", "sharded",
                      "Both Dask workers killed (SIGKILL) during a sharded search",
                      setup + f"; both workers SIGKILLed 0.2-{1.6 * SHARD_DELAY:g} s into the "
                      "search, 0-1 s apart", expected, ok),
        False: run.row("dask-kill-idle-search", "sharded",
                       "Both idle Dask workers killed (SIGKILL), then a sharded search at once",
                       setup + "; both workers SIGKILLed while idle, and the search sent at "
                       "once, while the scheduler may still list them", expected, ok),
    }
    started = time.monotonic()
    try:
        import dask
        from distributed import Client, LocalCluster
    except ImportError:
        for row in rows.values():
            row.skipped = "dask.distributed is not installed (pip install 'sobolev-index[distributed]')"
        run.finish(list(rows.values()), started)
        return
    from sobolev_index import SobolevIndex
    from sobolev_index.distributed import ShardedIndex

    work = run.dir("shard-waits")
    graph, measures = _corpus(run.seed)
    path = os.path.join(work, "sharded")
    shutil.rmtree(path, ignore_errors=True)
    shutil.rmtree(os.path.join(work, "single"), ignore_errors=True)
    with ShardedIndex.create(path, graph, shards=SHARDS) as sharded:
        keys = sharded.add(measures)
    queries = measures[:6]
    with SobolevIndex.create(os.path.join(work, "single"), graph) as single:
        if single.add(measures) != keys:
            raise RuntimeError("the single index named the documents otherwise than the "
                               "sharded one")
        want = single.search(queries, k=K)
    delay = os.path.join(work, "delay")
    # Trials alternate between the rows; each costs a kill, the workers'
    # restart and a search (about 5 s on 2 cores).
    trials = 2 if run.quick else max(4, min(8, run.trials // 2))
    budget = 15.0 if run.quick else 55.0
    rng = random.Random(run.seed)
    # A killed worker's nanny gets 120 s to start a new one (LocalCluster's
    # default of 15 s can pass on a loaded machine while it starts).
    with dask.config.set({"distributed.deploy.lost-worker-timeout": "120s"}), \
            LocalCluster(n_workers=2, processes=True, threads_per_worker=1,
                         dashboard_address=":0", preload=[child_script("delayed_shards.py")],
                         env={SHARD_DELAY_ENV: delay}) as cluster, \
            Client(cluster) as client:
        for n in range(trials):
            if n and time.monotonic() - started > budget:
                run.log(f"  dask-kill: {n} of {trials} trials within {budget:g} s")
                break
            during = n % 2 == 0
            try:
                outcome, detail = _trial(run, client, path, queries, want, delay, during, rng)
            except Exception as exc:  # outside the search: opening, or the first search
                outcome, detail = "other error", f"{type(exc).__name__}: {exc}"
            rows[during].add(outcome, detail)
            if outcome == "hang":
                rows[during].notes.append("trials stopped after a hang")
                break
            client.wait_for_workers(2, timeout=120)
    run.finish(list(rows.values()), started)
