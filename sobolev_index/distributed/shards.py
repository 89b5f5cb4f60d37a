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
import asyncio
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from ..errors import IndexLockedError, add_note
from ..index import SobolevIndex
from .errors import ShardMovedError

# How long DaskShards trusts the scheduler's answer to where the shards are.
HOLDERS_SECONDS = 2.0
# How long a worker opening a shard for writing waits for its write lock:
# a finite time, so that a task never hangs on a lock another process holds.
WORKER_LOCK_SECONDS = 30.0
# How often DaskShards, waiting for the tasks of a writer's shards, checks
# that the workers they are pinned to still hold those shards.
HOME_CHECK_SECONDS = 1.0
# How many times a task of a writer's shard is sent again after its shard
# moved (its worker died, retired or spilled it).
REHOME_ATTEMPTS = 3
# How many times a writer's shard is opened again in a row while its lock
# is still held (by a worker that left the cluster during a write).
REOPEN_ATTEMPTS = 3
# How long closing the shards on Dask waits for the workers.
CLOSE_SECONDS = 30.0
# A query batch at least this large goes to the workers once, as a task's
# result; a smaller one is sent with each shard's task.
SHARED_QUERY_BYTES = 1 << 18
# What distributed.wait raises on a timeout (two classes before Python 3.11).
_TIMEOUTS = (TimeoutError, asyncio.TimeoutError)


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
    new for each open), placed round-robin on the workers. A large query
    batch goes to the workers once (``scatter``); a k-NN search is one task
    per worker for the shards it holds (``map_in_turn``), other work one
    task per shard, each on the worker that holds its shard (its *home*).

    A reader's tasks are pinned loosely (``allow_other_workers``): once its
    worker is gone, the scheduler opens the shard again elsewhere from the
    open task and runs them there. A writer's shard cannot move: it holds
    the shard's write lock where it is, and a copy of it on another worker
    is a :class:`MovedWriter`. Its tasks are pinned strictly, so that work
    stealing never sends one to a copy, and this class follows the shard
    when its home loses it (``_rehome``).
    """

    def __init__(self, client, paths, mode):
        self.client = client
        self.paths = list(paths)
        self.mode = mode
        self.strict = mode == "a"
        self.version = uuid.uuid4().hex[:12]
        workers = sorted(client.scheduler_info(n_workers=-1)["workers"])
        if not workers:
            raise RuntimeError("the Dask cluster has no workers; start some before opening "
                               "a sharded index on it")
        self._holders_known, self._holders_at = None, 0.0
        self._homes = {}
        # Writer shards whose home was found not to hold them: rehomed
        # before their next task.
        self._lost = set()
        self._reopened = 0
        self.futures = [self._open_task(i, workers[i % len(workers)])
                        for i in range(len(self.paths))]

    def _open_task(self, i, worker=None):
        """The task that opens shard i, on ``worker`` if it is free (a
        shard opened again gets a new key: the old one may still name
        stand-ins on some workers)."""
        key = f"shard-{i}-{self.version}" + (f"-{self._reopened}" if self._reopened else "")
        placed = {"workers": [worker], "allow_other_workers": True} if worker else {}
        timeout = WORKER_LOCK_SECONDS if self.strict else None
        return self.client.submit(open_shard, self.paths[i], self.mode, timeout, key=key,
                                  pure=False, **placed)

    def _wait(self, futures, timeout=None):
        """``distributed.wait`` for futures of this class's client (wait()
        alone uses the process's default client, which may be another)."""
        from distributed import wait

        with self.client.as_current():
            wait(futures, timeout=timeout)

    def open(self):
        """Wait for the shards to open: {shard: exception} of those that failed."""
        self._wait(self.futures)
        failed = {i: future.exception() for i, future in enumerate(self.futures)
                  if future.status == "error"}
        if not failed:
            holders = self._fresh_holders()
            for i in range(len(self.futures)):
                self._home(i, holders.get(self.futures[i].key))
        return failed

    def _placed(self, home):
        """Where a task for shards at ``home`` may run: there, and for a
        reader's shards elsewhere too once that worker is gone. Without a
        restriction the scheduler may treat a shard's tasks as root tasks
        and run them on another worker, moving the shard there."""
        if home is None:
            return {}
        return {"workers": [home], "allow_other_workers": not self.strict}

    def _where(self, i, holders):
        """Shard i's home, given ``holders`` (from ``who_has``). A writer's
        shard that its home no longer holds, or holds as a stand-in (a task
        there raised ShardMovedError: ``_lost``), is found, or opened, again
        first: the other workers listed may hold only stand-ins."""
        listed = holders.get(self.futures[i].key)
        if self.strict and (i in self._lost or not listed
                            or self._homes.get(i, listed[0]) not in listed):
            self._lost.discard(i)
            return self._rehome(i)
        return self._home(i, listed)

    def _submit(self, i, task, args, holders):
        """``task(shard i, *args)`` submitted at shard i's home: (future, home)."""
        where = self._where(i, holders)
        return (self.client.submit(task, self.futures[i], *args, pure=False,
                                   **self._placed(where)), where)

    def _holders(self):
        """{shard future's key: workers holding it}, asked of the scheduler
        at most every HOLDERS_SECONDS (a round trip per call would cost as
        much as a small search). A stale answer costs little: a reader's
        task then runs where the shard is, and a writer's task pinned to a
        worker that lost its shard is sent again (``_outcomes``)."""
        now = time.monotonic()
        if self._holders_known is None or now - self._holders_at > HOLDERS_SECONDS:
            self._fresh_holders()
        return self._holders_known

    def _fresh_holders(self):
        """{shard future's key: workers holding it}, asked now."""
        self._holders_known = self.client.who_has(self.futures)
        self._holders_at = time.monotonic()
        return self._holders_known

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

    def _rehome(self, i):
        """The worker where writer shard i is open, after the worker that
        held it lost it: it died (the scheduler then opens the shard again
        elsewhere, from the open task), or it retired or spilled the shard,
        which leaves only copies, stand-ins. The workers listed as holding
        it are asked which holds the writer itself; if none does, or its
        open failed, the shard is opened again under a new key (the
        stand-ins go with the old one). A worker that left the cluster in
        the middle of a write may hold the shard's lock until that write
        ends: an open that times out on the lock is tried again, up to
        REOPEN_ATTEMPTS times. None when the shard cannot be opened: its
        tasks then raise why."""
        self._homes.pop(i, None)
        reopened = unlisted = 0
        while True:
            future = self.futures[i]
            try:
                self._wait([future])
            except Exception:
                if not future.done():
                    raise
                # cancelled: opened again below
            if future.status == "finished":
                listed = sorted(self._fresh_holders().get(future.key, ()))
                if not listed and unlisted < 50:
                    # Lost since (its worker died): the scheduler opens it
                    # again from its task, and _wait() waits for that.
                    unlisted += 1
                    time.sleep(0.2)
                    continue
                answers = self.client.run(holds_writer, future.key, workers=listed,
                                          on_error="return") if listed else {}
                live = sorted(w for w, yes in answers.items() if yes is True)
                if live:
                    self._homes[i] = live[0]
                    return live[0]
            elif future.status == "error":
                if reopened and not isinstance(future.exception(), IndexLockedError):
                    return None
            elif future.status != "cancelled":
                continue  # lost: opened again by the scheduler
            if reopened == REOPEN_ATTEMPTS:
                return None
            reopened += 1
            self._reopened += 1
            self.futures[i] = self._open_task(i)
            future.release()

    def _outcomes(self, jobs, shards_of, again=None):
        """{job: its result, or the exception its task raised} of ``jobs``
        ({job: (future, home)}, ``shards_of(job)`` the shards it uses).

        A writer's task pinned to a home that no longer holds one of its
        shards (checked every HOME_CHECK_SECONDS while it waits) would wait
        for ever; one that raised ShardMovedError reached a stand-in. Either
        is sent again with ``again(job)`` (a new (future, home)), which
        rehomes its shards first, up to REHOME_ATTEMPTS times; without ``again``,
        or past that, it maps to a ShardMovedError. A task that reached a
        stand-in did nothing; one cancelled because its worker left may
        have run, and is checked as Dask's own rerun of it would be (see
        ShardedIndex.add). A finished task whose result was lost with its
        worker is waited for again."""
        jobs = dict(jobs)
        tries = dict.fromkeys(jobs, 0)
        done, out = {}, {}
        while True:
            # Not done any more: its result was lost with its worker.
            for job in [job for job, (future, _) in done.items()
                        if not future.done() and job not in out]:
                jobs[job] = done.pop(job)
            if not jobs:
                if self.strict and not self._fetched(done, out):
                    continue
                break
            pending = [future for future, _ in jobs.values() if not future.done()]
            if pending:
                try:
                    self._wait(pending, HOME_CHECK_SECONDS if self.strict else None)
                except _TIMEOUTS:
                    pass
            holders = None
            for job, (future, home) in list(jobs.items()):
                if future.done():
                    moved = self.strict and future.status == "error" and isinstance(
                        future.exception(), ShardMovedError)
                    if not moved:
                        done[job] = jobs.pop(job)
                        continue
                    self._lost.update(shards_of(job))
                else:
                    if not self.strict or home is None:
                        continue
                    holders = holders if holders is not None else self._fresh_holders()
                    if all(home in holders.get(self.futures[i].key, ())
                           for i in shards_of(job)):
                        continue
                    future.cancel()
                    self._lost.update(shards_of(job))
                if again is None or tries[job] >= REHOME_ATTEMPTS:
                    del jobs[job]
                    out[job] = future.exception() if future.status == "error" else \
                        ShardMovedError(f"the worker {home} that held shard(s) "
                                        f"{', '.join(map(str, shards_of(job)))} for writing "
                                        "lost them while the task waited or ran (whether it "
                                        "ran is not known)")
                    continue
                tries[job] += 1
                jobs[job] = again(job)
        if not self.strict:
            finished = [job for job, (future, _) in done.items()
                        if future.status == "finished"]
            # One round trip for all the results.
            out.update(zip(finished, self.client.gather([done[job][0] for job in finished])))
        for job, (future, _) in done.items():
            if job not in out:
                out[job] = future.exception() if future.status == "error" else RuntimeError(
                    f"the task of shard(s) {', '.join(map(str, shards_of(job)))} was "
                    f"{future.status}")
        return out

    def _fetched(self, done, out):
        """Fetch into ``out`` the results of the finished writer's jobs in
        ``done``; False if one was lost with its worker meanwhile (it is
        then waited for again). Each with a bound: a gather of a result
        lost while it is fetched would wait for the scheduler to compute it
        again, on the dead worker the task is pinned to."""
        for job, (future, _) in done.items():
            # A timeout cancels the transfer: each try allows twice as long,
            # so that a large result over a slow network gets through.
            bound = HOME_CHECK_SECONDS
            while job not in out and future.status == "finished":
                try:
                    out[job] = future.result(timeout=bound)
                except _TIMEOUTS:
                    bound = min(2 * bound, 60.0)  # slow, or lost: the status says which
                except Exception:
                    if future.status == "finished":
                        raise
                    # Cancelled or lost meanwhile: the status says which.
            if job not in out and not future.done():
                return False
        return True

    def run(self, i, task, *args):
        out = self.map(task, {i: args})[i]
        if isinstance(out, BaseException):
            raise out
        return out

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
        holders = self._holders()
        groups = {}
        for i in sorted(args_of):
            home = self._where(i, holders)
            groups.setdefault(home if home else ("alone", i), []).append(i)
        jobs = {}
        for home, group in groups.items():
            home = home if isinstance(home, str) else None
            jobs[tuple(group)] = (self.client.submit(
                task, [self.futures[i] for i in group], [args_of[i] for i in group], *extra,
                pure=False, **self._placed(home)), home)
        out = {}
        for group, found in self._outcomes(jobs, lambda group: group).items():
            if isinstance(found, BaseException):
                out.update((i, found) for i in group)
            else:
                out.update(zip(group, found))
        return out

    def map(self, task, args_of, pinned=False):
        """As LocalShards.map; ``pinned`` (a write) asks the scheduler where
        the shards are now rather than trust a recent answer."""
        holders = self._fresh_holders() if pinned else self._holders()
        jobs = {i: self._submit(i, task, args, holders) for i, args in args_of.items()}
        return self._outcomes(jobs, lambda i: (i,), lambda i: self._submit(
            i, task, args_of[i], self._fresh_holders()))

    def close(self):
        try:
            holders = self._fresh_holders()
            closing = [self.client.submit(close, future, pure=False, **self._placed(
                self._home(i, holders.get(future.key)))) for i, future in enumerate(self.futures)]
            # A close pinned to a worker that just died would wait for ever;
            # releasing the shard closes it there anyway.
            self._wait(closing, CLOSE_SECONDS)
        except Exception:
            pass
        for future in self.futures:
            future.release()
        self.futures = []
