"""An index as a web server holds it: opened read-only, one snapshot per
request, moved to the latest commit between requests, and used by one
thread at a time.

A reader's snapshot is an open read transaction on the catalog
(``Catalog.snapshot``); while it is open, SQLite cannot start the
write-ahead log again from its beginning, so a server that kept it open
while idle would let a writer's log grow without bound. The server
therefore holds the snapshot only while requests are in flight
(:class:`RequestGate`): the first request after a quiet moment takes it up
again (reloading only if a writer committed), requests that overlap share
it, and the last one to finish lets it go.

Nothing here imports Datasette: the plugin (``plugin.py``) keeps one
:class:`ServedIndex` per catalog database it serves.
"""
import asyncio
import logging
import os
import sqlite3
import threading
from contextlib import contextmanager

from ..errors import SobolevIndexError
from ..index.catalog import file_identity, watch_commits
from ..index.storage import CATALOG

__all__ = ["ServedIndex", "RequestGate", "IndexUnavailableError", "catalog_path",
           "index_of_catalog"]

log = logging.getLogger(__name__)


class IndexUnavailableError(SobolevIndexError):
    """The served index cannot be read now: deleted, replaced, or its
    latest commit does not load. Requests get status 503 with the message."""


def catalog_path(index_path):
    """The catalog file of the index directory ``index_path``."""
    return os.path.join(os.fspath(index_path), CATALOG)


def index_of_catalog(path):
    """The index directory whose catalog is the SQLite file ``path``, or
    None when ``path`` is not named like a catalog (another database
    Datasette serves)."""
    if not path or os.path.basename(os.fspath(path)) != CATALOG:
        return None
    return os.path.dirname(os.path.abspath(os.fspath(path)))


class ServedIndex:
    """One index opened for reading (``SobolevIndex.open(path)``, mode "r"),
    for a server whose requests run on several threads.

    ``lock`` is held by whoever uses :attr:`index` (a ``SobolevIndex`` and
    its catalog connection are not made for concurrent use): the pages
    through :meth:`snapshot`, the SQL functions for each whole call.
    :meth:`pin`, :meth:`stale` and :meth:`release` move the snapshot; a
    :class:`RequestGate` calls them so that no request sees it move.

    ``immutable``: the caller promises that nothing writes to the index
    while it is served, so it is opened once and never followed.
    """

    def __init__(self, path, immutable=False):
        self.path = os.path.abspath(os.fspath(path))
        self.catalog = catalog_path(self.path)
        self.immutable = immutable
        self.lock = threading.RLock()
        # The probe has a lock of its own: asking it must not wait for a
        # page that holds the index.
        self._probe_lock = threading.Lock()
        self._probe = None
        self.refreshes = 0
        # How many times the index was opened again (another catalog file
        # moved into place): connections made for an older one are stale.
        self.epoch = 0
        self._open()
        self.gate = RequestGate(self)

    def _open(self):
        from ..index import SobolevIndex
        from ..ingest.fill import index_kind

        # The catalog file opened: one deleted, or replaced by another file
        # (an index rebuilt and renamed into place), is noticed by its
        # device and inode.
        identity = file_identity(self.catalog)
        # The probe is connected before the index is opened, so that a commit
        # landing in between is seen as a change.
        probe, version = (None, None) if self.immutable else self._connect_probe()
        try:
            index = SobolevIndex.open(self.path)
        except BaseException:
            if probe is not None:
                probe.close()
            raise
        with self._probe_lock:
            self._probe = probe
        self._identity = identity
        self._version = version
        self.index = index
        self.kind = index_kind(index)
        self.pinned = True
        self._pin_version = self._catalog_version()

    # ------------------------------------------------------------ versions
    def _connect_probe(self):
        # (connection, version) of our own: the index's connection holds its
        # read transaction while pinned, so it cannot be asked then.
        try:
            return watch_commits(self.catalog)
        except sqlite3.Error as exc:
            # A catalog SQLite cannot watch (a directory where the -shm file
            # cannot be made): the index's own connection is asked when a
            # request finds it released.
            log.warning("cannot watch %s for commits (%s); following them between quiet "
                        "moments only", self.path, exc)
            return None, None

    def _probe_version(self):
        if self._probe is None:
            return None
        with self._probe_lock:
            return self._probe.execute("PRAGMA data_version").fetchone()[0]

    def _catalog_version(self):
        """data_version of the index's catalog connection, inside its read
        transaction: unchanged from one transaction to the next exactly when
        no other connection committed in between."""
        return self.index.catalog.conn.execute("PRAGMA data_version").fetchone()[0]

    def _replaced(self):
        """Whether another catalog file took the opened one's place; raises
        :class:`IndexUnavailableError` when there is none."""
        now = file_identity(self.catalog)
        if now is None:
            raise IndexUnavailableError(
                f"the index at {self.path} was deleted while it was served; serve it again "
                "once it is back")
        return now != self._identity

    def _reopen(self):
        """Serve the index now at :attr:`path` (a rebuild moved into place)
        instead of the one opened; a failure leaves nothing open, and the
        next request tries again."""
        old, probe = self.index, self._probe
        with self._probe_lock:
            self._probe = None
        old.close()
        if probe is not None:
            probe.close()
        self.epoch += 1
        self.refreshes += 1
        self.pinned = False
        try:
            self._open()
        except Exception as exc:  # noqa: BLE001 - one clear error for the request
            self._identity = None  # opened again at the next request
            raise IndexUnavailableError(
                f"the index at {self.path} was replaced while it was served, and the new one "
                f"cannot be opened ({exc})") from None
        log.warning("%s was replaced while it was served; serving the new index", self.path)

    # ---------------------------------------------------- moving the snapshot
    def stale(self):
        """Whether the index must move before another request shares its
        snapshot: a writer committed since it was taken, or another index
        took its place. Raises :class:`IndexUnavailableError` when it is
        gone."""
        if self.immutable:
            return False
        if self._replaced():
            return True
        version = self._probe_version()
        return version is not None and version != self._version

    def pin(self):
        """Hold a read transaction on the latest commit: take the released
        snapshot up again if no writer committed since, else load the
        latest; open the index again when another took its place. Raises
        :class:`IndexUnavailableError` when the index is gone or its latest
        commit does not load (the request that asked gets the message; the
        next one tries again)."""
        if self.immutable:
            return
        with self.lock:
            if self._replaced():
                self._reopen()
                return
            version = self._probe_version()
            conn = self.index.catalog.conn
            if not self.pinned:
                try:
                    conn.execute("BEGIN")
                    conn.execute("SELECT count(*) FROM meta").fetchone()
                    if self._catalog_version() == self._pin_version:
                        self.pinned = True
                        self._version = version
                        return
                except sqlite3.Error as exc:
                    raise IndexUnavailableError(
                        f"the index at {self.path} cannot be read now ({exc})") from None
                finally:
                    if not self.pinned and conn.in_transaction:
                        # A newer commit: this transaction would not agree
                        # with the loaded segments.
                        conn.execute("COMMIT")
            elif version is None or version == self._version:
                return
            try:
                self.index.refresh()
            except Exception as exc:  # noqa: BLE001 - one clear error for the request
                if self.pinned:
                    # refresh() keeps the previous snapshot, whole, when the
                    # next one fails to load (a writer replacing files).
                    log.warning("could not load the latest snapshot of %s (%s); serving the "
                                "previous one", self.path, exc)
                    return
                raise IndexUnavailableError(
                    f"the index at {self.path} cannot be read now ({exc})") from None
            self.pinned = True
            self._version = version
            self._pin_version = self._catalog_version()
            self.refreshes += 1

    def release(self):
        """End the read transaction, so that writers' checkpoints can start
        the log again; the next :meth:`pin` takes it up again. Nothing may
        use :attr:`index` until then."""
        if self.immutable:
            return
        with self.lock:
            if self.pinned:
                conn = self.index.catalog.conn
                if conn.in_transaction:
                    conn.execute("COMMIT")
            self.pinned = False

    def refresh_if_changed(self):
        """Pin the latest commit; returns True when the index moved (for
        callers without a :class:`RequestGate`)."""
        before = self.refreshes
        self.pin()
        return self.refreshes != before

    @contextmanager
    def snapshot(self):
        """The index, held by this caller until the block ends. Within a
        request the gate has pinned it; elsewhere it is pinned here."""
        with self.lock:
            if not self.pinned:
                self.pin()
            yield self.index

    def close(self):
        with self.lock, self._probe_lock:
            self.index.close()
            if self._probe is not None:
                self._probe.close()
                self._probe = None


class RequestGate:
    """Requests in flight share one snapshot of a :class:`ServedIndex`.

    :meth:`enter` before a request and :meth:`exit` after it, on the event
    loop. The first request after a quiet moment pins the snapshot (loading
    the latest commit if there is one); a request that finds a newer commit
    while others are in flight waits for them to finish (and holds back new
    ones) and then moves the snapshot; the last request to finish releases
    it. So every page, SQL query or table view is computed from one commit,
    and the read transaction is open only while requests are.
    """

    # Seconds a request waits for those in flight to finish before it
    # shares their snapshot instead of moving it.
    drain_seconds = 30.0

    def __init__(self, served):
        self.served = served
        self.active = 0
        self.pending = False
        self._condition = None
        self._loop = None

    def _cond(self):
        # Made on the loop that uses it (the gate may be made on a thread).
        loop = asyncio.get_running_loop()
        if self._loop is not loop:
            self._condition, self._loop = asyncio.Condition(), loop
        return self._condition, loop

    async def enter(self):
        """Wait until the request may run on a current snapshot. Raises
        :class:`IndexUnavailableError` (the request is then not counted)."""
        cond, loop = self._cond()
        run = lambda fn: loop.run_in_executor(None, fn)  # noqa: E731
        async with cond:
            while True:
                while self.pending:
                    await cond.wait()
                if self.active == 0:
                    await run(self.served.pin)
                    self.active = 1
                    return
                if not await run(self.served.stale):
                    self.active += 1
                    return
                # Hold back new requests until those in flight are done.
                self.pending = True
                deadline = loop.time() + self.drain_seconds
                try:
                    while self.active and loop.time() < deadline:
                        try:
                            await asyncio.wait_for(cond.wait(), deadline - loop.time())
                        except asyncio.TimeoutError:
                            break
                finally:
                    self.pending = False
                    cond.notify_all()
                if self.active:
                    # Still in flight (one waiting for this one: a request
                    # a plugin makes inside another): share their snapshot.
                    self.active += 1
                    return

    async def exit(self):
        """The request is done; the last one releases the snapshot."""
        cond, loop = self._cond()
        async with cond:
            self.active -= 1
            try:
                if self.active == 0 and not self.pending:
                    await loop.run_in_executor(None, self.served.release)
            finally:
                cond.notify_all()
