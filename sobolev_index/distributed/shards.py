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
Every wait of the client is bounded (``DaskShards.bounded``): an operation
that gets no answer in time raises ShardError, whatever the workers do.
"""
import asyncio
import contextlib
import os
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from ..errors import IndexLockedError, add_note
from ..index import SobolevIndex
from ..index.results import ShardHits
from .errors import ShardError, ShardMovedError

# How long, by default, one operation of a sharded index on Dask (opening
# it, a search, a write, ...) waits for its shards' tasks before it gives up
# with ShardError: ten minutes, far above what a batch takes on a working
# cluster (a 200-query batch over 10^5 documents takes a fraction of a
# second) and above the 3 x 30 s a writer's shard may wait for its lock
# when it is opened again, yet finite, so that a cluster that lost every
# worker gives an error rather than a hang.
TASK_SECONDS = 600.0

# How long DaskShards trusts the scheduler's answer to where the shards are.
HOLDERS_SECONDS = 2.0
# How long a worker opening a shard for writing waits for its write lock:
# a finite time, so that a task never hangs on a lock another process holds.
WORKER_LOCK_SECONDS = 30.0
# How often DaskShards, waiting for the tasks of its shards, checks that
# the workers a writer's tasks are pinned to still hold those shards, and
# that no task it waits for is one that no worker will run (_stranded).
HOME_CHECK_SECONDS = 1.0
# How long a question to the scheduler made after an operation's deadline
# (why its shards did not answer) waits for the answer.
LAST_QUESTION_SECONDS = 1.0
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
# What a wait or a gather raises when one of its futures was cancelled
# (distributed's FutureCancelledError derives from it).
_CANCELLED = asyncio.CancelledError


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
                         result.stats, absent, len(index), result.ids, result.scores)


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

    Every wait is bounded. Each operation (``bounded``: an open, a map, or
    a whole search or write of ShardedIndex) has ``task_timeout`` seconds;
    past them, the tasks not yet answered are cancelled and map to a
    ShardError that names their shards and why (``_timed_out``). While it
    waits, it asks the scheduler every HOME_CHECK_SECONDS whether a task it
    waits for is one no worker will ever run (``_stranded``: its workers
    all died at once), and opens its shards and sends it again.
    """

    def __init__(self, client, paths, mode, task_timeout=TASK_SECONDS):
        self.client = client
        self.paths = list(paths)
        self.mode = mode
        self.strict = mode == "a"
        self.task_timeout = float(task_timeout)
        self.version = uuid.uuid4().hex[:12]
        self.futures = []
        self._holders_known, self._holders_at = None, 0.0
        self._homes = {}
        # Writer shards whose home was found not to hold them: rehomed
        # before their next task.
        self._lost = set()
        self._reopened = 0
        # Shards whose open task was placed on a given worker (see _stranded).
        self._open_pinned = {}
        # Per thread: the deadline of the operation under way (bounded) and
        # the shards seen lost during it (named in a timeout's cause).
        self._local = threading.local()

    # ---------------------------------------------------------------- bounds
    @contextlib.contextmanager
    def bounded(self, seconds=None):
        """Within the block, every wait shares one deadline, ``seconds``
        (default ``task_timeout``) from its start; a block inside another
        shares the outer one's."""
        local = self._local
        if getattr(local, "deadline", None) is not None:
            yield
            return
        local.deadline = time.monotonic() + (self.task_timeout if seconds is None else seconds)
        local.lost = set()
        try:
            yield
        finally:
            local.deadline = None

    def _left(self):
        """Seconds left of the operation under way (``task_timeout`` outside one)."""
        deadline = getattr(self._local, "deadline", None)
        return self.task_timeout if deadline is None else deadline - time.monotonic()

    def _seen_lost(self, shards):
        lost = getattr(self._local, "lost", None)
        if lost is not None:
            lost.update(shards)

    def _call(self, make, seconds=None):
        """The result of ``make()``, a coroutine of the client's asynchronous
        API (made and run in the client's event loop), waiting at most
        ``seconds`` (default: what is left of the operation, at least
        LAST_QUESTION_SECONDS). Raises TimeoutError past that."""
        if seconds is None:
            seconds = max(self._left(), LAST_QUESTION_SECONDS)
        return self.client.sync(make, callback_timeout=seconds)

    def _wait(self, futures, seconds):
        """Wait up to ``seconds`` for ``futures`` to be done (or cancelled);
        the caller reads their statuses. With this class's client:
        distributed.wait alone uses the process's default client, which may
        be another."""
        from distributed import wait

        if seconds <= 0 or not futures:
            return
        with self.client.as_current():
            try:
                wait(futures, timeout=seconds)
            except (*_TIMEOUTS, _CANCELLED):
                pass

    def _why(self, shards):
        """Why ``shards`` did not answer in time, as far as the scheduler
        tells (asked briefly: the operation's time is up)."""
        try:
            workers = len(self._call(lambda: self.client.scheduler.identity(n_workers=-1),
                                     LAST_QUESTION_SECONDS)["workers"])
        except (*_TIMEOUTS, OSError, KeyError):
            workers = None
        lost = sorted(set(shards) & getattr(self._local, "lost", set()))
        if workers == 0:
            return ("the Dask cluster has no workers left (they died or were stopped, and none "
                    "has joined since)")
        if lost:
            return (f"the workers that held shard(s) {', '.join(map(str, lost))} died or left "
                    "during the call, and the shards were not open again on other workers in "
                    "time")
        return ("their tasks were still running or waiting for a worker (tasks that take "
                "longer than the bound, or a busy cluster)")

    def _timed_out(self, shards, may_have_run=None, why=None):
        """The ShardError of ``shards`` that did not answer within
        task_timeout; ``may_have_run``: for a write, whether its task may
        have run (True), or was not sent (False)."""
        shards = sorted(set(shards))
        why = self._why(shards) if why is None else why
        message = (f"shard(s) {', '.join(map(str, shards))} of "
                   f"{os.path.dirname(self.paths[shards[0]]) or '.'} did not answer within "
                   f"{self.task_timeout:g} s (task_timeout): {why}")
        if may_have_run:
            message += "; the task was sent and may have run: whether it wrote is not known"
        elif may_have_run is False:
            message += "; the task was not sent: nothing of it ran"
        return ShardError(message, shards[0], self.paths[shards[0]],
                          TimeoutError(f"no answer within {self.task_timeout:g} s"),
                          shards=shards, may_have_run=may_have_run)

    def _stranded(self, keys):
        """Those of ``keys`` (tasks placed on given workers, not done) that no
        worker will run. A task pinned loosely to workers that are all gone
        runs anywhere if a worker is running when it becomes ready; if none
        is (every worker died at once), the scheduler sets it aside
        ('no-worker'), and gives such a task to a worker that joins only if
        its restriction names that worker, which a restarted worker's new
        address never does: it would wait for ever. (A task placed nowhere
        in particular runs on the next worker to join.) An answer that does
        not come in time counts as none stranded: the deadline bounds the
        wait."""
        keys = list(keys)
        if not keys:
            return set()
        try:
            states = self._call(lambda: self.client.scheduler.get_task_status(keys=keys))
        except (*_TIMEOUTS, OSError):
            return set()
        return {key for key, state in states.items() if state == "no-worker"}

    # ------------------------------------------------------------- opening
    def _open_task(self, i, worker=None):
        """The task that opens shard i, on ``worker`` if it is free (a
        shard opened again gets a new key: the old one may still name
        stand-ins on some workers)."""
        key = f"shard-{i}-{self.version}" + (f"-{self._reopened}" if self._reopened else "")
        placed = {"workers": [worker], "allow_other_workers": True} if worker else {}
        self._open_pinned[i] = bool(worker)
        timeout = WORKER_LOCK_SECONDS if self.strict else None
        return self.client.submit(open_shard, self.paths[i], self.mode, timeout, key=key,
                                  pure=False, **placed)

    def _reopen(self, i):
        """Open shard i again, under a new key, wherever the scheduler puts it."""
        old = self.futures[i]
        self._reopened += 1
        self.futures[i] = self._open_task(i)
        self._homes.pop(i, None)
        self._holders_known = None
        self._seen_lost([i])
        old.release()

    def open(self):
        """Open the shards, round-robin on the workers, and wait for them
        (within task_timeout): {shard: exception} of those that failed, or
        that did not open in time (ShardError)."""
        with self.bounded():
            n = len(self.paths)
            try:
                workers = sorted(self._call(
                    lambda: self.client.scheduler.identity(n_workers=-1))["workers"])
            except _TIMEOUTS:
                return {i: self._timed_out(range(n), why="the scheduler did not answer")
                        for i in range(n)}
            if not workers:
                raise ShardError("the Dask cluster has no workers; start some before "
                                 "opening a sharded index on it", 0, None,
                                 shards=list(range(n)))
            self.futures = [self._open_task(i, workers[i % len(workers)]) for i in range(n)]
            while True:
                waiting = [i for i, future in enumerate(self.futures) if not future.done()]
                if not waiting:
                    break
                left = self._left()
                if left <= 0:
                    why = self._why(waiting)
                    for i in waiting:
                        self.futures[i].cancel()
                    return {i: self._timed_out(waiting, why=why) for i in waiting}
                self._wait([self.futures[i] for i in waiting], min(HOME_CHECK_SECONDS, left))
                self._reopen_stranded(i for i in waiting if not self.futures[i].done())
            failed = {i: future.exception(timeout=LAST_QUESTION_SECONDS)
                      for i, future in enumerate(self.futures) if future.status == "error"}
            failed.update((i, RuntimeError(f"the open task of shard {i} was cancelled"))
                          for i, future in enumerate(self.futures)
                          if future.status == "cancelled")
            if not failed:
                holders = self._fresh_holders()
                for i in range(n):
                    self._home(i, holders.get(self.futures[i].key))
            return failed

    def _reopen_stranded(self, shards):
        """Open again those of ``shards`` whose open task no worker will run
        (``_stranded``; it never ran, so a writer's lock is not held by it):
        the set of them."""
        keys = {self.futures[i].key: i for i in shards if self._open_pinned.get(i)}
        stranded = {keys[key] for key in self._stranded(keys)}
        for i in stranded:
            self._reopen(i)
        return stranded

    # --------------------------------------------------------------- homes
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
        """{shard future's key: workers holding it}, asked now; the last
        answer (or none) if the scheduler does not answer in time."""
        keys = [future.key for future in self.futures]
        try:
            found = self._call(lambda: self.client.scheduler.who_has(keys=keys))
        except _TIMEOUTS:
            return self._holders_known or {}
        self._holders_known = {key: tuple(found.get(key) or ()) for key in keys}
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
        REOPEN_ATTEMPTS times; an open that no worker will run
        (``_stranded``) is sent again, as often as the deadline allows.
        None when the shard cannot be opened: its tasks then raise why.
        Past the operation's deadline, raises ShardError (no task of the
        shard was sent)."""
        self._homes.pop(i, None)
        reopened = unlisted = 0
        while True:
            left = self._left()
            if left <= 0:
                raise self._timed_out([i], may_have_run=False)
            future = self.futures[i]
            self._wait([future], min(HOME_CHECK_SECONDS, left))
            if not future.done():
                # Lost with its worker: the scheduler opens it again, unless
                # it cannot place it.
                self._seen_lost([i])
                self._reopen_stranded([i])
                continue
            if future.status == "finished":
                listed = sorted(self._fresh_holders().get(future.key, ()))
                if not listed and unlisted < 50:
                    # Lost since (its worker died): the scheduler opens it
                    # again from its task, and _wait() waits for that.
                    unlisted += 1
                    time.sleep(min(0.2, max(self._left(), 0.0)))
                    continue
                try:
                    answers = self.client.run(
                        holds_writer, future.key, workers=listed, on_error="return",
                        callback_timeout=max(self._left(), LAST_QUESTION_SECONDS)) \
                        if listed else {}
                except _TIMEOUTS:
                    continue
                live = sorted(w for w, yes in answers.items() if yes is True)
                if live:
                    self._homes[i] = live[0]
                    return live[0]
            elif future.status == "error":
                if reopened and not isinstance(future.exception(timeout=LAST_QUESTION_SECONDS),
                                               IndexLockedError):
                    return None
            elif future.status != "cancelled":
                continue  # lost: opened again by the scheduler
            if reopened == REOPEN_ATTEMPTS:
                return None
            reopened += 1
            self._reopen(i)

    # --------------------------------------------------------- the results
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
        worker is waited for again.

        A reader's task that no worker will run, or that waits for the
        open task of a shard that no worker will run (``_stranded``), is
        sent again with ``again(job)`` once those shards are opened again.
        Past the operation's deadline (``bounded``), the tasks not answered
        are cancelled and map to a ShardError naming their shards."""
        jobs = dict(jobs)
        tries = dict.fromkeys(jobs, 0)
        done, out = {}, {}
        while True:
            # Not done any more: its result was lost with its worker.
            for job in [job for job, (future, _) in done.items()
                        if not future.done() and job not in out]:
                jobs[job] = done.pop(job)
            if not jobs:
                if self._fetched(done, out, shards_of):
                    break
                continue
            left = self._left()
            if left <= 0:
                self._give_up(jobs, shards_of, out)
                break
            pending = [future for future, _ in jobs.values() if not future.done()]
            self._wait(pending, min(HOME_CHECK_SECONDS, left))
            for job, (future, _) in jobs.items():
                if not future.done():
                    self._seen_lost(i for i in shards_of(job)
                                    if self.futures[i].status != "finished")
            if not self.strict and again is not None:
                self._send_stranded_again(jobs, shards_of, again)
            holders = None
            for job, (future, home) in list(jobs.items()):
                # Whether the task about to be sent again may have run: not
                # if it reached a stand-in.
                moved = False
                if future.done():
                    moved = self.strict and future.status == "error" and isinstance(
                        future.exception(timeout=LAST_QUESTION_SECONDS), ShardMovedError)
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
                    out[job] = future.exception(timeout=LAST_QUESTION_SECONDS) \
                        if future.status == "error" else \
                        ShardMovedError(f"the worker {home} that held shard(s) "
                                        f"{', '.join(map(str, shards_of(job)))} for writing "
                                        "lost them while the task waited or ran (whether it "
                                        "ran is not known)")
                    continue
                tries[job] += 1
                try:
                    jobs[job] = again(job)
                except ShardError:
                    # Its shards were not found again in time.
                    del jobs[job]
                    out[job] = self._timed_out(shards_of(job), may_have_run=not moved)
        for job, (future, _) in done.items():
            if job not in out:
                out[job] = future.exception(timeout=LAST_QUESTION_SECONDS) \
                    if future.status == "error" else RuntimeError(
                        f"the task of shard(s) {', '.join(map(str, shards_of(job)))} was "
                        f"{future.status}")
        return out

    def _send_stranded_again(self, jobs, shards_of, again):
        """Send again (``again(job)``) the reader's jobs not done whose task,
        or the open task of one of whose shards, no worker will run
        (``_stranded``), those shards opened again first. One question to
        the scheduler for all of them."""
        waiting = {job: future for job, (future, _) in jobs.items() if not future.done()}
        opens = {self.futures[i].key: i for job in waiting for i in shards_of(job)
                 if self._open_pinned.get(i) and not self.futures[i].done()}
        pinned = {future.key: job for job, future in waiting.items()
                  if jobs[job][1] is not None}
        if not opens and not pinned:
            return
        stranded = self._stranded(list(opens) + list(pinned))
        reopened = {opens[key] for key in stranded if key in opens}
        for i in reopened:
            self._reopen(i)
        for job, future in waiting.items():
            if future.key in stranded or reopened.intersection(shards_of(job)):
                future.cancel()
                jobs[job] = again(job)

    def _give_up(self, jobs, shards_of, out):
        """Past the deadline: cancel ``jobs`` (a task not started never
        runs) and map each to a ShardError naming all their shards."""
        shards = sorted({i for job in jobs for i in shards_of(job)})
        why = self._why(shards)
        for job, (future, _) in jobs.items():
            future.cancel()
            out[job] = self._timed_out(shards, may_have_run=True if self.strict else None,
                                       why=why)
        jobs.clear()

    def _fetched(self, done, out, shards_of):
        """Fetch into ``out`` the results of the finished jobs in ``done``, in
        one round trip; False if one was lost with its worker meanwhile (it
        is then waited for again). Bounded: a gather of a result lost while
        it is fetched would wait for the scheduler to compute it again (a
        writer's task: on the dead worker it is pinned to). A timeout
        cancels the transfer, so each try allows twice as long as the one
        before, within the operation's deadline: a large result over a slow
        network gets through."""
        bound = HOME_CHECK_SECONDS
        while True:
            waiting = [job for job, (future, _) in done.items()
                       if job not in out and future.status == "finished"]
            if not waiting:
                break
            left = self._left()
            if left <= 0:
                shards = sorted({i for job in waiting for i in shards_of(job)})
                for job in waiting:
                    out[job] = self._timed_out(
                        shards, may_have_run=True if self.strict else None,
                        why="their tasks finished, but the results could not be fetched in "
                            "time")
                break
            futures = [done[job][0] for job in waiting]
            try:
                out.update(zip(waiting, self._call(
                    lambda futures=futures: self.client.gather(futures, asynchronous=True),
                    min(bound, left))))
            except _TIMEOUTS:
                bound = min(2 * bound, 60.0)  # slow, or lost: the statuses say which
            except (Exception, _CANCELLED):
                if all(future.status == "finished" for future in futures):
                    raise
                # Cancelled or lost meanwhile: the statuses say which.
        return all(job in out or future.done() for job, (future, _) in done.items())

    # ---------------------------------------------------------- operations
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
        with self.bounded():
            holders = self._holders()
            groups, out = {}, {}
            for i in sorted(args_of):
                try:
                    home = self._where(i, holders)
                except ShardError as exc:  # a writer's shard not found in time
                    out[i] = exc
                    continue
                groups.setdefault(home if home else ("alone", i), []).append(i)

            def send(group, home):
                return (self.client.submit(
                    task, [self.futures[i] for i in group], [args_of[i] for i in group],
                    *extra, pure=False, **self._placed(home)), home)

            def again(group):
                # A reader's group, its shards opened again: where the first is.
                return send(group, self._where(group[0], self._holders()))

            jobs = {tuple(group): send(group, home if isinstance(home, str) else None)
                    for home, group in groups.items()}
            for group, found in self._outcomes(jobs, lambda group: group,
                                               None if self.strict else again).items():
                if isinstance(found, BaseException):
                    out.update((i, found) for i in group)
                else:
                    out.update(zip(group, found))
            return out

    def map(self, task, args_of, pinned=False):
        """As LocalShards.map; ``pinned`` (a write) asks the scheduler where
        the shards are now rather than trust a recent answer. A shard whose
        task was not answered in time maps to a ShardError."""
        with self.bounded():
            holders = self._fresh_holders() if pinned else self._holders()
            jobs, out = {}, {}
            for i, args in args_of.items():
                try:
                    jobs[i] = self._submit(i, task, args, holders)
                except ShardError as exc:  # a writer's shard not found in time: not sent
                    out[i] = exc
            out.update(self._outcomes(jobs, lambda i: (i,), lambda i: self._submit(
                i, task, args_of[i], self._fresh_holders())))
            return out

    def close(self):
        """Close the shards that are open (within CLOSE_SECONDS, or
        task_timeout if shorter) and release them all."""
        try:
            with self.bounded(min(CLOSE_SECONDS, self.task_timeout)):
                holders = self._fresh_holders()
                # A shard not open now has nothing to close; releasing it
                # is enough.
                closing = [self.client.submit(close, future, pure=False, **self._placed(
                    self._home(i, holders.get(future.key))))
                    for i, future in enumerate(self.futures) if future.status == "finished"]
                # A close pinned to a worker that just died would wait for
                # ever; releasing the shard closes it there anyway.
                self._wait(closing, self._left())
        except Exception:
            pass
        for future in self.futures:
            future.release()
        self.futures = []
