"""The shards of a :class:`ShardedIndex` on the workers of a Dask cluster,
and the deadline every wait for them shares.

:class:`DaskShards` keeps each shard open on a worker as the result of an
open task and sends the shard's work (the tasks of ``shards.py``) where it
lives. Every wait is bounded by one deadline per operation: tasks not
answered by then are cancelled and reported as ShardError, and a task that
no worker will run (its workers all died at once) is sent again rather
than waited for. ``shards.py`` holds the tasks and the in-process
placement; Dask is imported only here and only when a client is given.
"""
import asyncio
import contextlib
import os
import threading
import time
import uuid

from ..errors import IndexLockedError
from . import shards
from .errors import ShardError, ShardMovedError
from .shards import (
    TASK_SECONDS,
    close,
    holds_writer,
    open_shard,
    query_batch,
)

# How long DaskShards trusts the scheduler's answer to where the shards are.
HOLDERS_SECONDS = 2.0


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
        # Read at each open (tests shorten it).
        timeout = shards.WORKER_LOCK_SECONDS if self.strict else None
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
