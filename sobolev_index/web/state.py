"""An index as a web server holds it: opened read-only, one snapshot at a
time, moved to the latest commit between requests, and used by one thread
at a time.

Nothing here imports Datasette: the plugin (``plugin.py``) keeps one
:class:`ServedIndex` per catalog database it serves.
"""
import logging
import os
import sqlite3
import stat
import threading
from contextlib import contextmanager

from ..index.storage import CATALOG

__all__ = ["ServedIndex", "catalog_path", "index_of_catalog", "is_frozen"]

log = logging.getLogger(__name__)


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


def is_frozen(index_path):
    """True when no process can change the index, so that its catalog may
    be opened ``immutable`` (SQLite then takes no locks and never looks for
    changes): neither the directory nor the catalog has a write permission
    bit for anyone, and no write-ahead log holds commits that an immutable
    reader would not see."""
    path = os.fspath(index_path)
    catalog = catalog_path(path)
    try:
        modes = [os.stat(path).st_mode, os.stat(catalog).st_mode]
        wal = os.path.getsize(catalog + "-wal") if os.path.exists(catalog + "-wal") else 0
    except OSError:
        return False
    writable = stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH
    return wal == 0 and not any(mode & writable for mode in modes)


class ServedIndex:
    """One index opened for reading (``SobolevIndex.open(path)``, mode "r"),
    for a server whose requests run on several threads.

    :meth:`snapshot` hands the index to one caller at a time (a
    ``SobolevIndex`` and its catalog connection are not made for concurrent
    use), after moving it to the latest committed snapshot if a writer
    committed since the last request: a page is computed from one snapshot,
    whole. ``frozen``: the index cannot change (see :func:`is_frozen`), so
    it is never refreshed.
    """

    def __init__(self, path, frozen=False):
        from ..index import SobolevIndex
        from ..ingest.fill import index_kind

        self.path = os.path.abspath(os.fspath(path))
        self.frozen = frozen
        self.lock = threading.RLock()
        self.refreshes = 0
        # The probe is connected before the index is opened, so that a commit
        # landing in between is seen as a change at the first request.
        self._probe = None if frozen else self._connect_probe()
        self._version = self._data_version()
        self.index = SobolevIndex.open(self.path)
        self.kind = index_kind(self.index)

    def _connect_probe(self):
        # PRAGMA data_version on a connection of our own changes exactly when
        # another connection commits; the index's connection keeps its read
        # transaction open (its snapshot), so it cannot be asked.
        try:
            conn = sqlite3.connect(f"file:{catalog_path(self.path)}?mode=ro", uri=True,
                                   isolation_level=None, check_same_thread=False, timeout=30)
            conn.execute("PRAGMA data_version").fetchone()
            return conn
        except sqlite3.Error as exc:
            # A catalog SQLite cannot watch (a read-only directory holding a
            # log): refresh before every request instead.
            log.warning("cannot watch %s for commits (%s); refreshing at every request",
                        self.path, exc)
            return None

    def _data_version(self):
        if self._probe is None:
            return None
        with self.lock:
            return self._probe.execute("PRAGMA data_version").fetchone()[0]

    def refresh_if_changed(self):
        """Move to the latest committed snapshot if the catalog changed since
        the last one. A snapshot that fails to load (a writer in the middle
        of replacing files) leaves the current one in place, to be tried
        again at the next request; returns True when the index moved."""
        if self.frozen:
            return False
        with self.lock:
            version = self._data_version()
            if version is not None and version == self._version:
                return False
            try:
                self.index.refresh()
            except Exception as exc:  # noqa: BLE001 - keep serving the snapshot we have
                log.warning("could not load the latest snapshot of %s (%s); serving the "
                            "previous one", self.path, exc)
                return False
            self._version = version
            self.refreshes += 1
            return True

    @contextmanager
    def snapshot(self):
        """The index, current and held by this caller until the block ends."""
        with self.lock:
            self.refresh_if_changed()
            yield self.index

    def locked(self):
        """A stand-in for the index that takes the lock around every call,
        for the SQL functions (``index.sql.register_functions``), which run on
        Datasette's query threads."""
        return _LockedIndex(self)

    def close(self):
        with self.lock:
            self.index.close()
            if self._probe is not None:
                self._probe.close()
                self._probe = None


class _LockedIndex:
    """What the SQL functions read of an index, each read under the lock.
    Methods are wrapped on the way out; plain values (generation, trees,
    roots, p, eta) are read as they are at the time."""

    def __init__(self, served):
        self._served = served

    def __contains__(self, key):
        with self._served.lock:
            return key in self._served.index

    def __iter__(self):
        with self._served.lock:
            return iter(list(self._served.index))

    def __len__(self):
        with self._served.lock:
            return len(self._served.index)

    def __getattr__(self, name):
        value = getattr(self._served.index, name)
        if not callable(value):
            return value
        lock = self._served.lock

        def call(*args, **kwargs):
            with lock:
                return getattr(self._served.index, name)(*args, **kwargs)

        return call
