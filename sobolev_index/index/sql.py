"""S_p inside SQL: functions registered on an index's catalog connection, so
that metadata and distances meet in one query.

    SELECT key, label, sobolev_distance(key, 'tweet-17') AS d
    FROM documents WHERE label = 'positive' AND deleted = 0 ORDER BY d LIMIT 10

``sobolev_distance(key_a, key_b[, p])`` is exact S_p between two stored
documents (sliced over the index's roots); ``sobolev_knn(query_key, k[, p])``
returns the query's k nearest stored documents as a JSON list of
``{"key", "distance", "label"}``, the same as :meth:`SobolevIndex.search`.
Keys that are not live give NULL.
"""
import inspect
import json
import math
import sqlite3
import sys
import time
import weakref
from collections import OrderedDict

from ..distances import check_p, difference_distance, pairwise_sobolev
from ..errors import SobolevIndexError
from ..graph import normalise_eta

__all__ = ["register_functions", "run_query", "iter_query", "FUNCTIONS", "DEFAULT_TIMEOUT"]

FUNCTIONS = ("sobolev_distance", "sobolev_knn")
# Seconds a query may run before the CLI stops it (--timeout); the API has
# no limit unless one is given.
DEFAULT_TIMEOUT = 60.0
# Distances from one document to every live document are kept for as many
# (document, p) pairs as fit in this many bytes (at least MIN_COLUMNS): a
# query that pairs many keys with many others then costs about one
# Gram-matrix row per distinct key, not one distance computation per pair.
CACHE_BYTES = 256 << 20
MIN_COLUMNS = 16


def _p_of(value):
    if value is None:
        return None
    if isinstance(value, str) and value.lower() == "inf":
        return math.inf
    try:
        return float(value)
    except (TypeError, ValueError):
        raise ValueError(f"p is {value!r}; expected a number >= 1 or 'inf'") from None


def register_functions(index, db=None):
    """Register the S_p functions on ``db`` (a sqlite-utils Database; by
    default the index's own catalog connection)."""
    db = db if db is not None else index.catalog.db
    errors = _errors_of(db)

    def keeping_errors(fn):
        # SQLite replaces an exception raised in a function by "user-defined
        # function raised exception"; keep ours so that run_query can say
        # what was wrong.
        def wrapped(*args):
            deadline = _DEADLINES.get(db)
            if deadline is not None and time.monotonic() > deadline:
                # One call can take long (a k-NN search over every row):
                # the progress handler alone would let the query overrun.
                raise _TimedOut()
            try:
                return fn(*args)
            except Exception as exc:
                errors.append(exc)
                raise
        wrapped.__signature__ = inspect.signature(fn)
        return wrapped

    columns = _columns_of(index)

    def distance(key_a, key_b, p=None):
        if key_a not in index or key_b not in index:
            return None
        return columns.distance(str(key_a), str(key_b), _p_of(p))

    def knn(query_key, k, p=None):
        if query_key not in index:
            return None
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise ValueError(f"sobolev_knn: k is {k!r}; expected an integer >= 1")
        found = index.search(str(query_key), k=int(k), p=_p_of(p))
        return json.dumps(found.to_records()[0])

    # sqlite-utils takes the SQL arity from the Python signature, so each
    # optional argument gets its own registration.
    def sobolev_distance_2(key_a, key_b):
        return distance(key_a, key_b)

    def sobolev_distance_3(key_a, key_b, p):
        return distance(key_a, key_b, p)

    def sobolev_knn_2(query_key, k):
        return knn(query_key, k)

    def sobolev_knn_3(query_key, k, p):
        return knn(query_key, k, p)

    for fn, name in ((sobolev_distance_2, "sobolev_distance"), (sobolev_distance_3, "sobolev_distance"),
                     (sobolev_knn_2, "sobolev_knn"), (sobolev_knn_3, "sobolev_knn")):
        db.register_function(keeping_errors(fn), deterministic=True, replace=True, name=name)
    return db


class _Columns:
    """S_p between stored documents for the SQL function, per index and kept
    across queries until the index changes (its ``generation``).

    A pair is computed from the two documents' feature rows (kept for the
    most recent keys). A second key asked for again gets its distances to
    every live document computed at once (a Gram-matrix row), kept while
    they fit in CACHE_BYTES; past that, pairs are computed one by one (rows
    are never evicted, so they are never computed twice). A query that pairs
    many keys with the same others then costs one row per key, and one whose
    keys do not repeat costs one pair each."""

    ROWS = 20_000

    def __init__(self, index):
        self.index = index
        self.generation = None

    def _reset(self):
        self.generation = self.index.generation
        self.rows = OrderedDict()
        self.columns = {}
        self.asked = set()
        self.all_features = None

    def _row(self, key):
        row = self.rows.get(key)
        if row is None:
            index = self.index
            row = [index.features([key], root=r) for r in range(len(index.roots))]
            self.rows[key] = row
            if len(self.rows) > self.ROWS:
                self.rows.popitem(last=False)
        else:
            self.rows.move_to_end(key)
        return row

    def _column(self, key, p):
        index = self.index
        if self.all_features is None:
            self.keys = list(index)
            self.position = {k: i for i, k in enumerate(self.keys)}
            self.all_features = [index.features(self.keys, root=r)
                                 for r in range(len(index.roots))]
            self.max_columns = max(MIN_COLUMNS, CACHE_BYTES // (8 * max(1, len(self.keys))))
        at = self.position[key]
        if len(self.columns) >= self.max_columns:
            return None
        column = pairwise_sobolev([F[at:at + 1] for F in self.all_features], self.all_features,
                                  trees=index.trees, p=p, eta=index.eta)[0]
        self.columns[(key, p)] = column
        return column

    def distance(self, key_a, key_b, p):
        index = self.index
        if self.generation != index.generation:
            self._reset()
        p = index.p if p is None else check_p(p)
        column = self.columns.get((key_b, p))
        if column is None and (key_b, p) in self.asked:
            column = self._column(key_b, p)
        if column is not None:
            return float(column[self.position[key_a]])
        self.asked.add((key_b, p))
        return difference_distance(self._row(key_a), self._row(key_b), index.trees, p,
                                   normalise_eta(index.eta, len(index.trees)))


# One per index, kept while the index is alive (the functions are registered
# again for every query, the cache outlives them).
_COLUMNS = weakref.WeakKeyDictionary()


def _columns_of(index):
    columns = _COLUMNS.get(index)
    if columns is None:
        columns = _COLUMNS[index] = _Columns(index)
    return columns


# Per Database: the exceptions our functions raised, newest last; and the
# deadline of the query running on it, if it has one.
_ERRORS = weakref.WeakKeyDictionary()
_DEADLINES = weakref.WeakKeyDictionary()
# SQLite steps between two checks of the deadline.
PROGRESS_STEPS = 1_000


class _TimedOut(Exception):
    """Raised by a function called after the query's deadline."""


def _errors_of(db):
    return _ERRORS.setdefault(db, [])


# Reads, and calls of functions, are all a query may do: a read-only
# connection would still let ATTACH open (and write) another database.
_ALLOWED = {sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqlite3.SQLITE_FUNCTION}


def _authorize(action, *args):
    return sqlite3.SQLITE_OK if action in _ALLOWED else sqlite3.SQLITE_DENY


def _allow_all(action, *args):
    return sqlite3.SQLITE_OK


# What removes the authorizer: None from Python 3.11 on; before, None is
# taken as a callback that fails, which denies every later statement, so
# one that allows everything stands in.
_NO_AUTHORIZER = None if sys.version_info >= (3, 11) else _allow_all


def run_query(index, query, params=None, timeout=None):
    """Run one SQL statement on a read-only view of the index's catalog with
    the S_p functions registered. Returns (column names, rows as tuples).
    See :func:`iter_query` for ``timeout``, and to stream the rows."""
    columns, rows = iter_query(index, query, params, timeout)
    return columns, list(rows)


def iter_query(index, query, params=None, timeout=None):
    """Like :func:`run_query`, but the rows come one at a time as the
    caller iterates, so a large result is never held whole. A query (the
    iteration included) that runs longer than ``timeout`` seconds (None:
    no limit) is stopped with a SobolevIndexError."""
    if index.writable:
        raise SobolevIndexError("run SQL on an index opened with mode='r'; it must not write")
    if timeout is not None and not (isinstance(timeout, (int, float)) and timeout > 0):
        raise ValueError(f"timeout is {timeout!r}; expected a number of seconds > 0, or None")
    db = register_functions(index)
    errors = _errors_of(db)
    errors.clear()
    conn = db.conn
    deadline = None if timeout is None else time.monotonic() + timeout

    def past_deadline():
        return deadline is not None and time.monotonic() > deadline

    def fail(exc):
        if past_deadline():
            return SobolevIndexError(f"the SQL query ran longer than {timeout:g} s and was "
                                     "stopped; pass a larger timeout (--timeout SECONDS)")
        if errors:
            return SobolevIndexError(f"SQL error in a sobolev function: {errors[-1]}")
        message = str(exc)
        if "not authorized" in message or "readonly" in message:
            message += " (sobolev-index sql is read-only: SELECT statements only)"
        return SobolevIndexError(f"SQL error: {message}")

    # The authorizer acts while a statement is prepared; the progress handler
    # (called every few thousand SQLite steps; a true result interrupts the
    # query) while it runs. Neither is left on the connection between rows,
    # so a row iterator that is never finished leaves the connection as it was.
    conn.set_authorizer(_authorize)
    conn.set_progress_handler(past_deadline, PROGRESS_STEPS)
    _DEADLINES[db] = deadline
    try:
        cursor = db.execute(query, params or [])
    except sqlite3.Error as exc:
        raise fail(exc) from None
    finally:
        conn.set_authorizer(_NO_AUTHORIZER)
        conn.set_progress_handler(None, 0)
        _DEADLINES.pop(db, None)
    columns = [c[0] for c in cursor.description] if cursor.description else []

    def rows():
        while True:
            conn.set_progress_handler(past_deadline, PROGRESS_STEPS)
            _DEADLINES[db] = deadline
            try:
                batch = cursor.fetchmany(1000)
            except sqlite3.Error as exc:
                raise fail(exc) from None
            finally:
                conn.set_progress_handler(None, 0)
                _DEADLINES.pop(db, None)
            if not batch:
                return
            yield from batch

    return columns, rows()
