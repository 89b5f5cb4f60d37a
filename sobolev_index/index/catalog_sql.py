"""The catalog's SQL pieces: its write transaction, the checks of the
values it holds, and the helpers that build its statements.

``catalog.py`` holds the :class:`~sobolev_index.index.catalog.Catalog`
itself (its connections and queries); what is here knows SQLite, never the
index's files.
"""
import errno
import json
import math
import sqlite3

import numpy as np

from ..distances import check_p
from ..errors import ADVICE, CorruptIndexError, DiskFullError

# SQLite's result code for a full disk (sqlite3.SQLITE_FULL from Python 3.11 on).
SQLITE_FULL = 13


def checked_heads(path, meta, roots):
    """(p, roots, eta) from the catalog, checked: a damaged value is a
    CorruptIndexError naming it, not whatever float() would raise."""
    def bad(what):
        return CorruptIndexError(f"{path}: the catalog's {what}; {ADVICE['verify']} restore the "
                                 "catalog from a backup")

    p = meta.get("p")
    try:
        p = check_p("inf" if p == "inf" else p)
    except (TypeError, ValueError):
        raise bad(f"default p is {p!r}, not a number >= 1 or 'inf'") from None
    for name in ("next_doc_id", "next_segment_id", "n_nodes"):
        value = meta.get(name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise bad(f"meta value {name} is {value!r}, not a count")
    if not roots:
        raise bad("roots table is empty")
    nodes, eta = [], []
    for position, (node, weight) in enumerate(roots):
        if isinstance(node, bool) or not isinstance(node, int) or not 0 <= node < meta["n_nodes"]:
            raise bad(f"root {position} is node {node!r}, not a node of the graph")
        if isinstance(weight, bool) or not isinstance(weight, (int, float)) \
                or not math.isfinite(weight) or weight < 0:
            raise bad(f"root {position} has weight {weight!r}, not a finite number >= 0")
        nodes.append(node)
        eta.append(float(weight))
    return p, np.asarray(nodes, dtype=np.int64), np.asarray(eta, dtype=np.float64)


def end_read(conn):
    """End a read transaction that failed; on a damaged file even that can
    fail, and the error being raised says more."""
    try:
        conn.execute("COMMIT")
    except sqlite3.Error:
        pass


def meta_values(rows, path):
    meta = {}
    for name, value in rows:
        try:
            meta[name] = json.loads(value)
        except (TypeError, ValueError):
            raise CorruptIndexError(f"{path}: the meta value {name} is {value!r}, which is not "
                                    "JSON; restore the catalog from a backup") from None
    return meta


def storable(values):
    """Those of ``values`` that SQLite can take as text (a lone surrogate
    cannot be encoded: no stored key or label equals it)."""
    out = []
    for value in values:
        try:
            value.encode("utf-8")
        except (AttributeError, UnicodeEncodeError):
            continue
        out.append(value)
    return out


def label_conditions(labels):
    """(SQL condition, parameters) pieces that together select the labels
    ``labels``: IN lists of the text labels, and IS NULL for None."""
    labels = list(labels)
    text = sorted(storable([lab for lab in labels if isinstance(lab, str)]))
    out = [(f"label IN ({marks})", chunk) for marks, chunk in text_chunks(text)]
    if any(lab is None for lab in labels):
        out.append(("label IS NULL", []))
    return out


def text_chunks(values, size=500):
    """Like in_chunks, for text values."""
    values = list(values)
    for start in range(0, len(values), size):
        chunk = values[start:start + size]
        yield ",".join("?" * len(chunk)), chunk


def in_chunks(values, size=500):
    """(placeholders, integers) for ``IN (...)`` over ``values``, ``size``
    at a time: SQLite limits the parameters of one statement."""
    values = [int(v) for v in values]
    for start in range(0, len(values), size):
        chunk = values[start:start + size]
        yield ",".join("?" * len(chunk)), chunk


class Transaction:
    """BEGIN IMMEDIATE on entry; COMMIT on a clean exit, ROLLBACK otherwise."""

    def __init__(self, catalog):
        self._catalog = catalog
        self._conn = catalog.conn

    def __enter__(self):
        self._conn.execute("BEGIN IMMEDIATE")
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            try:
                self._conn.execute("COMMIT")
                return False
            except sqlite3.OperationalError as failed:
                exc = failed
        if self._conn.in_transaction:
            self._conn.execute("ROLLBACK")
        if isinstance(exc, sqlite3.OperationalError) and (
                getattr(exc, "sqlite_errorcode", None) == SQLITE_FULL
                or "disk is full" in str(exc)):
            raise DiskFullError(
                errno.ENOSPC, f"no space left on the device of {self._catalog.path} while "
                f"committing ({exc}); this write was not committed") from exc
        if exc_type is None:
            raise exc
        return False

    def execute(self, sql, params=()):
        return self._conn.execute(sql, params)

    def executemany(self, sql, rows):
        return self._conn.executemany(sql, rows)

    def set_meta(self, values):
        self._catalog._set_meta(values)
