"""Where the shards of a :class:`ShardedIndex` live and how work reaches them.

Every operation on a shard is a module-level function ``task(shard, ...)``
that runs next to the shard: in this process on a thread (``LocalShards``,
here), or on the Dask worker that holds it (``DaskShards``, in
``dask_shards.py``). On Dask, each shard is opened inside a task, by path,
and the open index stays in that worker's memory as the task's result;
tasks that use it depend on that future, so the scheduler runs them where
it is. If the worker dies, the scheduler opens the shard again elsewhere
from its lineage (the open task) and reruns the tasks that needed it; a
shard's state is what its directory holds, since every write is committed
before its task returns. An open HDF5 or SQLite handle is never pickled: a
shard moved between workers is opened again by path there. Every wait of
the client is bounded (``DaskShards.bounded``): an operation that gets no
answer in time raises ShardError, whatever the workers do.
"""
import contextlib
import math
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from ..errors import IndexLockedError, add_note
from ..index import SobolevIndex
from ..index.results import ShardHits
from .errors import ShardMovedError

# How long, by default, one operation of a sharded index on Dask (opening
# it, a search, a write, ...) waits for its shards' tasks before it gives up
# with ShardError: ten minutes, far above what a batch takes on a working
# cluster (a 200-query batch over 10^5 documents takes a fraction of a
# second) and above the 3 x 30 s a writer's shard may wait for its lock
# when it is opened again, yet finite, so that a cluster that lost every
# worker gives an error rather than a hang.
TASK_SECONDS = 600.0

# How long a worker opening a shard for writing waits for its write lock:
# a finite time, so that a task never hangs on a lock another process holds.
WORKER_LOCK_SECONDS = 30.0


# --------------------------------------------------------------------- helpers
def checked_task_timeout(value):
    """``task_timeout`` as a float: a finite number of seconds > 0 (every
    wait on Dask is bounded; there is no 'wait for ever')."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)) \
            or not math.isfinite(value) or value <= 0:
        raise ValueError(f"task_timeout is {value!r}; expected a number of seconds > 0 "
                         f"(finite; the default is {TASK_SECONDS:g})")
    return float(value)


class Shard:
    """An open shard (``index``, a :class:`SobolevIndex`) and where it is
    (``path``, ``mode``). Pickled, a reader is its path and mode: unpickling
    opens the index again. A writer cannot be moved: it holds the shard's
    write lock where it is, so a copy unpickled elsewhere is a
    :class:`MovedWriter`, whose tasks raise :class:`ShardMovedError` at once
    (rather than wait for that lock forever). DaskShards pins a writer's
    tasks to the worker that holds it, and opens it again when only copies
    are left (see DaskShards._rehome)."""

    def __init__(self, path, mode, timeout=None):
        self.path = path
        self.mode = mode
        self.index = SobolevIndex.open(path, mode=mode, timeout=timeout)
        # Tasks of one shard can run at once on a worker's threads; a write
        # and a search of the same index must not.
        self.lock = threading.Lock()

    def __reduce__(self):
        if self.mode == "a":
            return (_moved_writer, (self.path,))
        return (open_shard, (self.path, self.mode))

    def __sizeof__(self):
        # What moving it would cost (opening it again): large, so that the
        # scheduler runs its tasks where it already is.
        return 1 << 30


def open_shard(path, mode="r", timeout=None):
    """Open the shard directory ``path`` (a task on a Dask worker, or a call
    in this process), waiting up to ``timeout`` seconds for its write lock
    (mode ``"a"``; None: as long as it takes)."""
    try:
        return Shard(path, mode, timeout)
    except IndexLockedError as exc:
        if timeout is not None:
            add_note(exc, f"(a Dask worker waits {timeout:g} s for a shard's write lock; "
                          "close the other writer of this shard, or the sharded index "
                          "that holds it, and open the sharded index again)")
        raise


def _moved_writer(path):
    return MovedWriter(path)


class MovedWriter:
    """What a writer's shard becomes when unpickled on another worker: not a
    second writer waiting for the lock the first one holds, but a stand-in
    whose every task raises :class:`ShardMovedError`. (Raising while
    unpickling would not do: Dask retries a transfer that fails to
    deserialise, and the task would wait for ever.)"""

    def __init__(self, path):
        self.path = path
        self.mode = "a"

    @property
    def lock(self):
        raise ShardMovedError(
            f"this Dask worker holds a copy of the shard {self.path} (made when the shard "
            "was sent to another worker, or spilled to disk and read back), not the writer "
            "that holds, or held, the shard's write lock: a copy cannot write")

    index = lock

    def __reduce__(self):
        return (_moved_writer, (self.path,))


try:  # Tell Dask what a shard costs to move, where Dask is installed.
    from dask.sizeof import sizeof as _dask_sizeof

    @_dask_sizeof.register(Shard)
    def _sizeof_shard(shard):
        return 1 << 30
except ImportError:  # the in-process shards need no Dask
    pass


# ------------------------------------------------------------------ the tasks
def describe(shard):
    """What a sharded index checks of each shard at open: graph checksum,
    roots, eta, p, live documents."""
    with shard.lock:
        return describe_index(shard.index)


def describe_index(index):
    return {"graph_checksum": index.catalog.meta_value("graph_checksum"),
            "roots": index.roots.tolist(), "eta": index.eta.tolist(), "p": index.p,
            "documents": len(index), "next_id": index.next_id}


def search(shard, queries, kwargs, n_queries):
    """``index.search(queries, **kwargs)`` as plain data, a
    :class:`~sobolev_index.index.results.ShardHits`. With ``where={"label": ...}``, only
    the wanted labels this shard has are searched for (none: nothing is
    searched), and ``absent`` is the set of the others: a single index warns
    of labels no document has, and the sharded index warns once, of those
    that no shard has, rather than once per shard that lacks them."""
    with shard.lock:
        index = shard.index
        absent = set()
        where = kwargs.get("where")
        if isinstance(where, dict) and "label" in where:
            wanted = where["label"]
            wanted = set(wanted) if isinstance(wanted, (list, tuple, set, frozenset)) \
                else {wanted}
            present = index.catalog.live_rows_with_labels(wanted)[2]
            absent = wanted - set(present)
            if not present:
                return _nothing_found(n_queries, kwargs, absent, len(index))
            kwargs = dict(kwargs, where=dict(where, label=sorted(present)))
        result = index.search(queries, **kwargs)
        return ShardHits(result.distances, result.keys, result.labels, result.truncated,
                         result.stats, absent, len(index), result.ids, result.scores,
                         result.certified)


def search_in_turn(shards, args, k):
    """The k nearest of each query in each of ``shards`` (those in one
    place), searched one after another: as :func:`search` with ``args[j]``
    for ``shards[j]``, except that after the first, a shard searches each
    query within the k-th smallest distance the shards before it found
    (``radius`` per query, ``limit`` k). A document farther than that cannot
    be among the k nearest of all shards, so the answer merged from all of
    them is unchanged, and the shard prunes from its first row as one index
    of all their documents would, instead of from its own k-th distance.
    Returns each shard's result, or the exception it raised."""
    out = []
    best = bounds = None
    for shard, (queries, kwargs, n_queries) in zip(shards, args):
        if bounds is not None and np.isfinite(bounds).any():
            kwargs = dict(kwargs, k=None, radius=bounds, limit=k)
        try:
            found = search(shard, queries, kwargs, n_queries)
        except Exception as exc:  # reported per shard by the caller
            out.append(exc)
            continue
        out.append(found)
        if best is None:
            best = [np.zeros(0)] * n_queries
        for q in range(n_queries):
            hits = np.asarray(found.distances[q], dtype=np.float64)[:len(found.keys[q])]
            best[q] = np.sort(np.concatenate([best[q], hits]))[:k]
        bounds = np.array([row[k - 1] if len(row) >= k else np.inf for row in best])
    return out


def _nothing_found(n_queries, kwargs, absent, live):
    """The ShardHits of a shard with nothing in scope."""
    if kwargs.get("radius") is None:
        distances = np.zeros((n_queries, 0))
    else:
        distances = [np.zeros(0) for _ in range(n_queries)]
    empty = [[] for _ in range(n_queries)]
    return ShardHits(distances, empty, [[] for _ in range(n_queries)], [False] * n_queries,
                     None, absent, live, [[] for _ in range(n_queries)],
                     [[] for _ in range(n_queries)])


def stored_measures(shard, keys):
    """(nodes, masses, label, id) of each of ``keys``, the measures as stored
    (see SobolevIndex.stored_measures): a query built from them has exactly
    the features the index holds for the key."""
    with shard.lock:
        return [(doc["nodes"], doc["masses"], doc["label"], doc["id"])
                for doc in shard.index.stored_measures(keys)]


def committed_part(shard, batch, keys, labels, ids):
    """Which of ``keys`` (a shard's part of a batch, ``batch`` its measures,
    ``ids`` their document ids, whose write reported an error) are live in
    the shard's latest commit with exactly these ids, measures and labels:
    committed although the write raised (a worker that died after the
    commit, and whose task Dask ran again, gets an error from the rerun)."""
    with shard.lock:
        index = shard.index
        index.refresh()
        live = index.existing_keys(keys)
        mine = [j for j, key in enumerate(keys) if key in live]
        out = []
        for j, doc in zip(mine, index.stored_measures([keys[j] for j in mine])):
            a, b = int(batch.indptr[j]), int(batch.indptr[j + 1])
            if (doc["id"] == int(ids[j]) and doc["label"] == labels[j]
                    and np.array_equal(doc["nodes"], batch.nodes[a:b])
                    and np.array_equal(doc["masses"], batch.masses[a:b])):
                out.append(keys[j])
        return out


def deleted_part(shard, keys):
    """Which of ``keys`` are not live in the shard's latest commit (a delete
    that reported an error may have committed)."""
    with shard.lock:
        shard.index.refresh()
        live = shard.index.existing_keys(keys)
        return [key for key in keys if key not in live]


def write(shard, batch, keys, labels, fields, upsert, ids):
    """Add (or upsert) one shard's part of a batch with its global document
    ids; returns the shard's live count."""
    with shard.lock:
        index = shard.index
        if upsert:
            index.upsert(batch, keys, labels=labels, fields=fields, ids=ids)
        else:
            index.add(batch, keys, labels=labels, fields=fields, ids=ids)
        return len(index)


def delete(shard, keys):
    with shard.lock:
        count = shard.index.delete(keys)
        return count, len(shard.index)


def call(shard, method, *args, **kwargs):
    """``index.method(*args, **kwargs)``, for the operations whose result is
    plain data (len, info, get, verify, compact, existing_keys, ...)."""
    with shard.lock:
        attribute = getattr(shard.index, method)
        return attribute(*args, **kwargs) if callable(attribute) else attribute


def verify(shard, kwargs):
    """``index.verify(**kwargs)``, with ``describe`` of the shard."""
    with shard.lock:
        report = shard.index.verify(**kwargs)
        report["describe"] = describe_index(shard.index)
        return report


def set_ingest_meta(shard, meta, words):
    """Give the shard the ingest layer's ``meta`` values and, for a text
    index, its ``words`` table ([word, node, df] rows), in one commit."""
    from ..ingest.words import add_words

    with shard.lock:
        catalog = shard.index.catalog
        if words is not None:
            add_words(catalog, words, meta=meta)
        elif meta:
            catalog.set_meta(meta)


def query_batch(queries):
    """The queries themselves: a task whose result the workers share."""
    return queries


def contains(shard, key):
    with shard.lock:
        return key in shard.index


def size(shard):
    with shard.lock:
        return len(shard.index)


def refresh(shard):
    with shard.lock:
        shard.index.refresh()
        return len(shard.index)


def close(shard):
    with shard.lock:
        shard.index.close()


def holds_writer(key, dask_worker=None):
    """Run on a Dask worker (``client.run``): whether its result ``key`` is
    a shard open for writing, rather than a stand-in copy of one."""
    found = dask_worker.data.get(key) if dask_worker is not None else None
    return isinstance(found, Shard) and found.mode == "a"


# ------------------------------------------------------------------ placements
class LocalShards:
    """The shards opened in this process; tasks run on a pool of threads
    (one per shard), so the shards' parts of a write or radius search run
    at once; a k-NN search goes through the shards in turn
    (``map_in_turn``), each with every thread it is given."""

    def __init__(self, paths, mode):
        self.paths = list(paths)
        self.mode = mode
        self.shards = []
        self._pool = ThreadPoolExecutor(max_workers=len(self.paths),
                                        thread_name_prefix="sobolev-shard")

    def open(self):
        """Open the shards in order: {shard: exception} of those that failed
        (the others stay open, for close)."""
        failed = {}
        for i, path in enumerate(self.paths):
            try:
                self.shards.append(open_shard(path, self.mode))
            except Exception as exc:  # named by the caller
                self.shards.append(None)
                failed[i] = exc
        return failed

    def bounded(self, seconds=None):
        """No bound: the shards' tasks run on this process's threads."""
        return contextlib.nullcontext()

    def run(self, i, task, *args):
        return task(self.shards[i], *args)

    def scatter(self, data, nbytes):
        return data

    def map_in_turn(self, task, args_of, *extra):
        """{shard: result} of ``task(shards, [args], *extra)`` over every shard
        in ``args_of`` at once, in this thread (see search_in_turn)."""
        order = sorted(args_of)
        return dict(zip(order, task([self.shards[i] for i in order],
                                    [args_of[i] for i in order], *extra)))

    def map(self, task, args_of, pinned=False):
        """{shard: task(shard, *args)} for each shard in ``args_of`` (shard ->
        args), all at once; a shard whose task raised maps to its exception.
        ``pinned`` (a write) matters only on Dask."""
        futures = {i: self._pool.submit(task, self.shards[i], *args)
                   for i, args in args_of.items()}
        out = {}
        for i, future in futures.items():
            try:
                out[i] = future.result()
            except Exception as exc:  # reported per shard by the caller
                out[i] = exc
        return out

    def close(self):
        for shard in self.shards:
            if shard is not None:
                close(shard)
        self.shards = []
        self._pool.shutdown(wait=True)
