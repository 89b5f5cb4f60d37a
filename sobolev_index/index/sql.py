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
import weakref

from ..errors import SobolevIndexError

__all__ = ["register_functions", "run_query", "FUNCTIONS"]

FUNCTIONS = ("sobolev_distance", "sobolev_knn")


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
            try:
                return fn(*args)
            except Exception as exc:
                errors.append(exc)
                raise
        wrapped.__signature__ = inspect.signature(fn)
        return wrapped

    def distance(key_a, key_b, p=None):
        if key_a not in index or key_b not in index:
            return None
        return index.distance(str(key_a), str(key_b), p=_p_of(p))

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


# Per Database: the exceptions our functions raised, newest last.
_ERRORS = weakref.WeakKeyDictionary()


def _errors_of(db):
    return _ERRORS.setdefault(db, [])


# Reads, and calls of functions, are all a query may do: a read-only
# connection would still let ATTACH open (and write) another database.
_ALLOWED = {sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqlite3.SQLITE_FUNCTION}


def _authorize(action, *args):
    return sqlite3.SQLITE_OK if action in _ALLOWED else sqlite3.SQLITE_DENY


def run_query(index, query, params=None):
    """Run one SQL statement on a read-only view of the index's catalog with
    the S_p functions registered. Returns (column names, rows as tuples)."""
    if index.writable:
        raise SobolevIndexError("run SQL on an index opened with mode='r'; it must not write")
    db = register_functions(index)
    errors = _errors_of(db)
    errors.clear()
    db.conn.set_authorizer(_authorize)
    try:
        cursor = db.execute(query, params or [])
        columns = [c[0] for c in cursor.description] if cursor.description else []
        rows = cursor.fetchall()
    except sqlite3.Error as exc:
        if errors:
            raise SobolevIndexError(f"SQL error in a sobolev function: {errors[-1]}") from None
        message = str(exc)
        if "not authorized" in message or "readonly" in message:
            message += " (sobolev-index sql is read-only: SELECT statements only)"
        raise SobolevIndexError(f"SQL error: {message}") from None
    finally:
        db.conn.set_authorizer(None)
    return columns, rows
