"""Where the shards of a :class:`ShardedIndex` live and how work reaches them.

Every operation on a shard is a module-level function ``task(shard, ...)``
that runs next to the shard: in this process on a thread (``LocalShards``),
or on the Dask worker that holds it (``DaskShards``). On Dask, each shard is
opened inside a task, by path, and the open index stays in that worker's
memory as the task's result; tasks that use it depend on that future, so the
scheduler runs them where it is. If the worker dies, the scheduler opens the
shard again elsewhere from its lineage (the open task) and reruns the tasks
that needed it; a shard's state is what its directory holds, since every
write is committed before its task returns. An open HDF5 or SQLite handle is
never pickled: a shard moved between workers is opened again by path there.
"""
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from ..index import SobolevIndex
from .errors import ShardMovedError

# How long DaskShards trusts the scheduler's answer to where the shards are.
HOLDERS_SECONDS = 2.0
# How long a worker opening a shard for writing waits for its write lock:
# a finite time, so that a task never hangs on a lock another process holds.
WORKER_LOCK_SECONDS = 30.0
# A query batch at least this large goes to the workers once, as a task's
# result; a smaller one is sent with each shard's task.
SHARED_QUERY_BYTES = 1 << 18


class Shard:
    """An open shard (``index``, a :class:`SobolevIndex`) and where it is
    (``path``, ``mode``). Pickled, a reader is its path and mode: unpickling
    opens the index again. A writer cannot be moved: it holds the shard's
    write lock where it is, so a copy unpickled elsewhere is a
    :class:`MovedWriter`, whose tasks raise :class:`ShardMovedError` at once
    (rather than wait for that lock forever); after its worker dies, the
    scheduler opens it again from the open task."""

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
    return Shard(path, mode, timeout)


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
            f"the shard {self.path} is open for writing on another Dask worker and cannot be "
            "moved (it holds the shard's write lock there); a task of a writer's shard must "
            "run where the shard is: this one was sent elsewhere")

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
    """``index.search(queries, **kwargs)`` as plain data: (distances, keys,
    labels, truncated, stats, absent, live, ids, scores), ``live`` the shard's count of
    live documents (a k-NN answer is min(k, live documents over all
    shards) wide, whatever ``where`` admits). With ``where={"label": ...}``, only
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
                empty = [[] for _ in range(n_queries)]
                return _nothing_found(n_queries, kwargs) + (absent, len(index), empty, empty)
            kwargs = dict(kwargs, where=dict(where, label=sorted(present)))
        result = index.search(queries, **kwargs)
        return (result.distances, result.keys, result.labels, result.truncated, result.stats,
                absent, len(index), result.ids, result.scores)


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
            hits = np.asarray(found[0][q], dtype=np.float64)[:len(found[1][q])]
            best[q] = np.sort(np.concatenate([best[q], hits]))[:k]
        bounds = np.array([row[k - 1] if len(row) >= k else np.inf for row in best])
    return out


def _nothing_found(n_queries, kwargs):
    empty = [[] for _ in range(n_queries)]
    if kwargs.get("radius") is None:
        distances = np.zeros((n_queries, 0))
    else:
        distances = [np.zeros(0) for _ in range(n_queries)]
    return distances, empty, [[] for _ in range(n_queries)], [False] * n_queries, None


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


class DaskShards:
    """The shards opened on the workers of a ``dask.distributed.Client``.

    Shard i is the result of the task ``shard-{i}-{version}`` (``version``
    new for each open), placed round-robin on the workers, moveable
    (``allow_other_workers``) so that the scheduler can open it again on
    another worker when its own dies. A large query batch goes to the
    workers once (``scatter``); a k-NN search is one task per worker for
    the shards it holds (``map_in_turn``), other work one task per shard.
    """

    def __init__(self, client, paths, mode):
        self.client = client
        self.paths = list(paths)
        self.mode = mode
        self.version = uuid.uuid4().hex[:12]
        workers = sorted(client.scheduler_info()["workers"])
        if not workers:
            raise RuntimeError("the Dask cluster has no workers; start some before opening "
                               "a sharded index on it")
        self._holders_known, self._holders_at = None, 0.0
        self._homes = {}
        timeout = WORKER_LOCK_SECONDS if mode == "a" else None
        self.futures = [
            client.submit(open_shard, path, mode, timeout, key=f"shard-{i}-{self.version}",
                          workers=[workers[i % len(workers)]], allow_other_workers=True,
                          pure=False)
            for i, path in enumerate(self.paths)]

    def open(self):
        """Wait for the shards to open: {shard: exception} of those that failed."""
        from distributed import wait

        wait(self.futures)
        failed = {i: future.exception() for i, future in enumerate(self.futures)
                  if future.status == "error"}
        if not failed:
            holders = self._fresh_holders()
            for i in range(len(self.futures)):
                self._home(i, holders.get(self.futures[i].key))
        return failed

    def _submit(self, i, task, args, holders):
        """Submit ``task(shard i, *args)`` on the worker that holds shard i
        (``holders``: from ``who_has``). Without the restriction the
        scheduler may treat a shard's tasks as root tasks and run them on
        another worker, moving the shard there (opening it a second time).
        The restriction is loose (``allow_other_workers``), for writes too:
        once that worker is gone, the task runs where the shard is opened
        again, and a write Dask reruns there is checked by the sharded
        index (see ShardedIndex.add). Strict pinning would leave a write
        waiting for ever for a dead worker; a writer's shard the scheduler
        moves while its worker lives becomes a MovedWriter, whose task fails
        at once. ``pinned`` (a write) asks the scheduler where the shard is
        now rather than trust a recent answer."""
        where = self._home(i, holders.get(self.futures[i].key))
        placed = {"workers": [where], "allow_other_workers": True} if where else {}
        return self.client.submit(task, self.futures[i], *args, pure=False, **placed)

    def _holders(self, shards):
        """{shard future's key: workers holding it}, asked of the scheduler
        at most every HOLDERS_SECONDS (a round trip per call would cost as
        much as a small search); a stale answer only names a worker the
        scheduler then passes over, since the restriction is loose."""
        now = time.monotonic()
        if self._holders_known is None or now - self._holders_at > HOLDERS_SECONDS:
            self._holders_known = self.client.who_has(self.futures)
            self._holders_at = now
        return self._holders_known

    def run(self, i, task, *args):
        return self._submit(i, task, args, self._holders([i])).result()

    def _home(self, i, where):
        """The worker for shard i's tasks, of those that hold it (``where``):
        the one used before while it still holds it. A writer's shard may be
        listed on a second worker where a stray task took a copy: that copy
        is a MovedWriter, so tasks stay where the shard was opened."""
        if not where:
            return None
        home = self._homes.get(i)
        if home not in where:
            home = self._homes[i] = sorted(where)[0]
        return home

    def _fresh_holders(self):
        """{shard future's key: workers holding it}, asked now (for writes,
        which are held to the worker named)."""
        self._holders_known = self.client.who_has(self.futures)
        self._holders_at = time.monotonic()
        return self._holders_known

    def scatter(self, data, nbytes):
        """``data`` (a query batch of ``nbytes``) as the tasks of every shard
        take it: itself when small (sent with each task), else a future that
        the workers share. Not ``client.scatter``: scattered data is lost with
        the worker that holds it, while the result of a task is computed
        again."""
        if nbytes < SHARED_QUERY_BYTES:
            return data
        return self.client.submit(query_batch, data, pure=False)

    def map_in_turn(self, task, args_of, *extra):
        """{shard: result} of ``task(shards, [args], *extra)`` (see
        search_in_turn), one task for the shards on each worker, run there;
        a shard whose home is unknown goes alone. A group's task that fails
        as a whole maps each of its shards to that error."""
        from distributed import wait

        holders = self._holders(list(args_of))
        groups = {}
        for i in sorted(args_of):
            home = self._home(i, holders.get(self.futures[i].key))
            groups.setdefault(home if home else ("alone", i), []).append(i)
        futures = {}
        for home, group in groups.items():
            placed = {"workers": [home], "allow_other_workers": True} \
                if isinstance(home, str) else {}
            futures[tuple(group)] = self.client.submit(
                task, [self.futures[i] for i in group], [args_of[i] for i in group], *extra,
                pure=False, **placed)
        wait(list(futures.values()))
        done = [group for group, f in futures.items() if f.status != "error"]
        out = {}
        for group, results in zip(done, self.client.gather([futures[g] for g in done])):
            out.update(zip(group, results))
        for group, f in futures.items():
            if f.status == "error":
                out.update((i, f.exception()) for i in group)
        return out

    def map(self, task, args_of, pinned=False):
        from distributed import wait

        holders = self._fresh_holders() if pinned else self._holders(list(args_of))
        futures = {i: self._submit(i, task, args, holders) for i, args in args_of.items()}
        wait(list(futures.values()))
        failed = {i: f.exception() for i, f in futures.items() if f.status == "error"}
        done = [i for i in futures if i not in failed]
        # One round trip for all the results.
        out = dict(zip(done, self.client.gather([futures[i] for i in done])))
        out.update(failed)
        return out

    def close(self):
        try:
            closing = [self.client.submit(close, f, pure=False) for f in self.futures]
            self.client.gather(closing, errors="skip")
        except Exception:
            pass
        for future in self.futures:
            future.release()
        self.futures = []
