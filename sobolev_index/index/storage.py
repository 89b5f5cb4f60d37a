"""On-disk format: immutable HDF5 segments plus one transactional SQLite catalog.

Layout of an index directory::

    catalog.sqlite      the commit point (WAL): meta, roots, segments, documents
                        (and words, word -> node, for an index built from text)
    graph.h5            written once: nodes, edges, lengths, one tree per root
    segments/NNNNNN.h5  written once, never modified: raw measures + features
    write.lock          flock()ed by the one writer

A segment file is first written under a temporary name, fsynced and renamed;
only then does one SQLite transaction make it (and its documents) visible.
A crash before that commit leaves an orphan file that readers never look at
and the next writer removes. Files are deleted only after the transaction
that stops referencing them has committed.

This module knows files and SQL, nothing about search.
"""
import datetime as _dt
import errno
import fcntl
import hashlib
import json
import os
import sqlite3
import time
from dataclasses import dataclass, field

import h5py
import numpy as np
import sqlite_utils

from ..errors import (
    CorruptIndexError,
    IndexLockedError,
    NotAnIndexError,
    UnsupportedFormatError,
)
from ..graph import Graph, ShortestPathTree

FORMAT_VERSION = 2
FORMAT_NAME = "sobolev-index"
CATALOG = "catalog.sqlite"
GRAPH_FILE = "graph.h5"
SEGMENT_DIR = "segments"
LOCK_FILE = "write.lock"
TMP_PREFIX = "tmp-"


def _now():
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="milliseconds")


def require_new_directory(path):
    """Refuse a ``path`` that exists and is not an empty directory: an index,
    or a folder of files made for one, is only ever created fresh."""
    if os.path.exists(path) and (not os.path.isdir(path) or os.listdir(path)):
        raise FileExistsError(f"{path} exists and is not an empty directory; choose a new path")


def file_checksum(path):
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _fsync_path(path, directory=False):
    fd = os.open(path, os.O_RDONLY | (os.O_DIRECTORY if directory else 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# --------------------------------------------------------------------- lock
class WriterLock:
    """Exclusive advisory lock on ``write.lock``; released on close or exit.

    flock() locks die with their process, so a killed writer never leaves a
    stale lock behind.
    """

    def __init__(self, index_path, timeout=None):
        self.path = os.path.join(index_path, LOCK_FILE)
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        deadline = None if timeout is None else time.monotonic() + max(0.0, float(timeout))
        while True:
            try:
                fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except OSError as exc:
                if exc.errno not in (errno.EAGAIN, errno.EACCES):
                    os.close(self._fd)
                    raise
            if deadline is None or time.monotonic() >= deadline:
                os.close(self._fd)
                self._fd = None
                waited = "" if timeout is None else f" after waiting {timeout} s"
                raise IndexLockedError(
                    f"another process is writing to {index_path}{waited}; open it with "
                    "mode='r' to read, or pass timeout=SECONDS to wait for the writer"
                )
            time.sleep(0.05)

    def release(self):
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None


# -------------------------------------------------------------------- graph
def write_graph(index_path, graph, trees):
    path = os.path.join(index_path, GRAPH_FILE)
    tmp = os.path.join(index_path, TMP_PREFIX + GRAPH_FILE)
    with h5py.File(tmp, "w") as f:
        f.attrs["format"] = FORMAT_NAME
        f.attrs["format_version"] = FORMAT_VERSION
        f.attrs["n_nodes"] = graph.n_nodes
        f.attrs["params"] = json.dumps(graph.params)
        f.create_dataset("edges", data=graph.edges)
        f.create_dataset("lengths", data=graph.lengths)
        if graph.coords is not None:
            f.create_dataset("coords", data=graph.coords)
        if graph.assignment is not None:
            f.create_dataset("assignment", data=graph.assignment)
        for r, tree in enumerate(trees):
            g = f.create_group(f"trees/{r}")
            g.attrs["root"] = tree.root
            g.attrs["perturbed"] = tree.perturbed
            g.create_dataset("parent", data=tree.parent)
            g.create_dataset("length", data=tree.length)
            g.create_dataset("distance", data=tree.distance)
            g.create_dataset("depth", data=tree.depth)
    _fsync_path(tmp)
    os.replace(tmp, path)
    _fsync_path(index_path, directory=True)
    return file_checksum(path)


def read_graph(index_path, n_roots):
    path = os.path.join(index_path, GRAPH_FILE)
    try:
        with h5py.File(path, "r") as f:
            if f.attrs.get("format") != FORMAT_NAME:
                raise CorruptIndexError(f"{path} is not a sobolev-index graph file")
            coords = f["coords"][...] if "coords" in f else None
            assignment = f["assignment"][...] if "assignment" in f else None
            graph = Graph(int(f.attrs["n_nodes"]), f["edges"][...], f["lengths"][...], coords,
                          assignment, json.loads(f.attrs["params"]))
            trees = []
            for r in range(n_roots):
                g = f[f"trees/{r}"]
                tree = ShortestPathTree(int(g.attrs["root"]), g["parent"][...], g["length"][...],
                                        g["distance"][...], bool(g.attrs["perturbed"]))
                trees.append(tree)
    except FileNotFoundError:
        raise CorruptIndexError(f"{path} is missing; the index cannot be read without it") from None
    except (OSError, KeyError, ValueError) as exc:
        raise CorruptIndexError(f"{path} is unreadable ({exc}); restore it from a backup") from None
    return graph, trees


# ----------------------------------------------------------------- segments
@dataclass
class SegmentData:
    """The arrays of one segment. ``features[r]`` is (indptr, indices, data) for root r."""

    doc_ids: np.ndarray
    indptr: np.ndarray
    nodes: np.ndarray
    masses: np.ndarray
    features: list = field(default_factory=list)
    # The inverted file over edges (see inverted.py): arrays by name.
    inverted: dict = None

    @property
    def rows(self):
        return len(self.doc_ids)

    @property
    def nnz(self):
        return int(sum(len(f[1]) for f in self.features))


def segment_name(segment_id):
    return f"{segment_id:06d}.h5"


def write_segment(index_path, segment_id, data):
    """Write a segment durably under its final name; return (file, checksum, bytes)."""
    directory = os.path.join(index_path, SEGMENT_DIR)
    name = segment_name(segment_id)
    tmp = os.path.join(directory, f"{TMP_PREFIX}{name}")
    with h5py.File(tmp, "w") as f:
        f.attrs["format"] = FORMAT_NAME
        f.attrs["format_version"] = FORMAT_VERSION
        f.attrs["segment"] = segment_id
        f.attrs["rows"] = data.rows
        f.create_dataset("doc_ids", data=data.doc_ids)
        f.create_dataset("measures/indptr", data=data.indptr)
        f.create_dataset("measures/nodes", data=data.nodes)
        f.create_dataset("measures/masses", data=data.masses)
        for r, (indptr, indices, values) in enumerate(data.features):
            f.create_dataset(f"features/{r}/indptr", data=indptr)
            f.create_dataset(f"features/{r}/indices", data=indices)
            f.create_dataset(f"features/{r}/data", data=values)
        for array, values in (data.inverted or {}).items():
            f.create_dataset(f"inverted/{array}", data=values)
    _fsync_path(tmp)
    final = os.path.join(directory, name)
    os.replace(tmp, final)
    _fsync_path(directory, directory=True)
    return name, file_checksum(final), os.path.getsize(final)


def read_segment(index_path, name, n_roots, checksum=None):
    """Load a segment's arrays; with ``checksum``, verify the file first."""
    path = os.path.join(index_path, SEGMENT_DIR, name)
    if checksum is not None and file_checksum(path) != checksum:
        raise CorruptIndexError(
            f"segment {path} fails its checksum: the file changed after it was committed; "
            "restore it from a backup"
        )
    def load(dataset):
        # Contiguous datasets are memory-mapped: opening costs no reads, and
        # the page cache is shared between processes searching one index.
        offset = dataset.id.get_offset()
        if offset is None or dataset.size == 0:
            return dataset[...]
        return np.memmap(path, dtype=dataset.dtype, mode="r", offset=offset, shape=dataset.shape)

    try:
        with h5py.File(path, "r") as f:
            if f.attrs.get("format") != FORMAT_NAME:
                raise CorruptIndexError(f"{path} is not a sobolev-index segment")
            data = SegmentData(
                doc_ids=load(f["doc_ids"]),
                indptr=load(f["measures/indptr"]),
                nodes=load(f["measures/nodes"]),
                masses=load(f["measures/masses"]),
                features=[
                    (load(f[f"features/{r}/indptr"]), load(f[f"features/{r}/indices"]),
                     load(f[f"features/{r}/data"]))
                    for r in range(n_roots)
                ],
            )
            if "inverted" in f:
                data.inverted = {array: load(dataset) for array, dataset in f["inverted"].items()}
    except (OSError, KeyError) as exc:
        if not os.path.exists(path):
            # Merged away by a writer after the caller read the catalog.
            raise FileNotFoundError(errno.ENOENT, "segment file is gone", path) from None
        raise CorruptIndexError(f"segment {path} is unreadable ({exc})") from None
    return data


# ------------------------------------------------------------------ catalog
SCHEMA = {
    "meta": ({"name": str, "value": str}, "name"),
    "roots": ({"position": int, "node": int, "eta": float}, "position"),
    "segments": ({"id": int, "file": str, "rows": int, "nnz": int, "bytes": int,
                  "checksum": str, "created_at": str}, "id"),
    "documents": ({"id": int, "key": str, "segment": int, "row": int, "n_supports": int,
                   "label": str, "fields": str, "deleted": int, "added_at": str}, "id"),
}


@dataclass
class Snapshot:
    """The committed state a reader works from."""

    meta: dict
    roots: list
    segments: list          # dicts from the segments table, by id
    doc_ids: np.ndarray     # per document (live and tombstoned), sorted by id
    keys: list
    segment_of: np.ndarray
    row_of: np.ndarray
    labels: list
    deleted: np.ndarray


class Catalog:
    """The SQLite commit point. One connection; writes happen in transactions."""

    def __init__(self, index_path, readonly):
        self.path = os.path.join(index_path, CATALOG)
        if not os.path.isfile(self.path):
            raise NotAnIndexError(
                f"{index_path} is not a sobolev-index directory: it has no {CATALOG}"
            )
        # The format is checked through a read-only connection first, so that
        # a foreign database is never switched to WAL or otherwise touched.
        probe = self._connect_readonly()
        try:
            self._check_format(probe)
        except BaseException:
            probe.close()
            raise
        if not readonly:
            probe.close()
        self.conn = probe if readonly else self._connect_writer()
        self.db = sqlite_utils.Database(self.conn)

    def _connect_readonly(self):
        conn = sqlite3.connect(f"file:{self.path}?mode=ro", uri=True, isolation_level=None,
                               check_same_thread=False, timeout=30)
        try:
            conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
        except sqlite3.OperationalError:
            # A WAL reader needs the -shm file; in a directory it may not
            # write, that file cannot be made. With no pending log the
            # database file alone is the whole committed state.
            conn.close()
            if os.access(os.path.dirname(self.path) or ".", os.W_OK):
                raise
            wal = self.path + "-wal"
            if os.path.exists(wal) and os.path.getsize(wal) > 0:
                raise CorruptIndexError(
                    f"{self.path} has a pending write-ahead log and its directory is not "
                    "writable; open the index once with write access to fold the log in"
                ) from None
            conn = sqlite3.connect(f"file:{self.path}?mode=ro&immutable=1", uri=True,
                                   isolation_level=None, check_same_thread=False)
        except sqlite3.DatabaseError as exc:
            conn.close()
            raise NotAnIndexError(f"{self.path} is not a sobolev-index catalog ({exc})") from None
        return conn

    def _connect_writer(self):
        conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False,
                               timeout=30)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=FULL")
        return conn

    @classmethod
    def create(cls, index_path, meta, roots, eta):
        path = os.path.join(index_path, CATALOG)
        conn = sqlite3.connect(path, isolation_level=None)
        conn.execute("PRAGMA journal_mode=WAL")
        db = sqlite_utils.Database(conn)
        conn.execute("BEGIN")
        for name, (columns, pk) in SCHEMA.items():
            db[name].create(columns, pk=pk, not_null={pk})
        db["documents"].create_index(["segment"])
        db["documents"].create_index(["label"])
        # Keys are unique among live documents; a tombstone keeps its key.
        conn.execute("CREATE UNIQUE INDEX documents_live_key ON documents(key) WHERE deleted = 0")
        conn.executemany("INSERT INTO meta (name, value) VALUES (?, ?)",
                         [(k, json.dumps(v)) for k, v in meta.items()])
        conn.executemany("INSERT INTO roots (position, node, eta) VALUES (?, ?, ?)",
                         [(i, int(n), float(e)) for i, (n, e) in enumerate(zip(roots, eta))])
        conn.execute("COMMIT")
        conn.close()

    def _check_format(self, conn):
        try:
            rows = dict(conn.execute("SELECT name, value FROM meta").fetchall())
        except sqlite3.DatabaseError as exc:
            raise NotAnIndexError(
                f"{self.path} is not a sobolev-index catalog ({exc})"
            ) from None
        try:
            name = json.loads(rows.get("format", "null"))
            version = json.loads(rows.get("format_version", "null"))
        except (TypeError, ValueError):
            name = version = None
        if name != FORMAT_NAME:
            raise NotAnIndexError(f"{self.path} is not a sobolev-index catalog")
        if version != FORMAT_VERSION:
            raise UnsupportedFormatError(
                f"{self.path} has format version {version}; this release of sobolev-index "
                f"reads version {FORMAT_VERSION}. Upgrade sobolev-index, or rebuild the index"
            )

    def close(self):
        if self.conn is not None:
            self.conn.close()
            self.conn = None

    # -------------------------------------------------------------- reading
    def snapshot(self):
        """Everything a reader needs, read inside one transaction."""
        conn = self.conn
        conn.execute("BEGIN")
        try:
            meta = {k: json.loads(v) for k, v in conn.execute("SELECT name, value FROM meta")}
            roots = conn.execute("SELECT node, eta FROM roots ORDER BY position").fetchall()
            cursor = conn.execute(
                "SELECT id, file, rows, nnz, bytes, checksum, created_at FROM segments ORDER BY id"
            )
            columns = [c[0] for c in cursor.description]
            segments = [dict(zip(columns, row)) for row in cursor]
            docs = conn.execute(
                "SELECT id, key, segment, row, label, deleted FROM documents ORDER BY id"
            ).fetchall()
        finally:
            conn.execute("COMMIT")
        if docs:
            ids, keys, segs, rows, labels, deleted = zip(*docs)
        else:
            ids, keys, segs, rows, labels, deleted = (), (), (), (), (), ()
        return Snapshot(
            meta=meta, roots=roots, segments=segments,
            doc_ids=np.asarray(ids, dtype=np.int64), keys=list(keys),
            segment_of=np.asarray(segs, dtype=np.int64), row_of=np.asarray(rows, dtype=np.int64),
            labels=list(labels), deleted=np.asarray(deleted, dtype=bool),
        )

    def document_by_id(self, doc_id):
        cursor = self.conn.execute(
            "SELECT id, key, segment, row, n_supports, label, fields, added_at FROM documents "
            "WHERE id = ?", (int(doc_id),)
        )
        row = cursor.fetchone()
        if row is None:
            return None
        columns = [c[0] for c in cursor.description]
        doc = dict(zip(columns, row))
        doc["fields"] = json.loads(doc["fields"]) if doc["fields"] else None
        return doc

    def meta_value(self, name):
        row = self.conn.execute("SELECT value FROM meta WHERE name = ?", (name,)).fetchone()
        return None if row is None else json.loads(row[0])

    def has_table(self, name):
        """Whether the catalog has a table of this name (tables other than
        the index's own are added by the layers above, such as ``words``)."""
        row = self.conn.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (name,)).fetchone()
        return row is not None

    def query(self, sql, params=()):
        """All rows of one read-only statement, as tuples."""
        return self.conn.execute(sql, params).fetchall()

    # -------------------------------------------------------------- writing
    def transaction(self):
        """A write transaction for tables the index does not own.

        ``with catalog.transaction() as tx:`` then ``tx.execute(sql, params)``,
        ``tx.executemany(sql, rows)`` and ``tx.set_meta(values)``; everything
        commits together when the block ends, or nothing does if it raises.
        """
        return _Transaction(self)

    def set_meta(self, values):
        """Set ``meta`` values (JSON) in one transaction."""
        with self._transaction():
            self._set_meta(values)

    def commit_segment(self, segment_row, documents, tombstone_ids=(), next_ids=None):
        """One transaction: new segment + its documents (+ tombstones for upsert)."""
        with self._transaction():
            self._tombstone(tombstone_ids)
            self._insert("segments", [segment_row])
            self._insert("documents", documents)
            if next_ids:
                self._set_meta(next_ids)

    def tombstone(self, doc_ids):
        with self._transaction():
            self._tombstone(doc_ids)

    def replace_segments(self, old_ids, segment_row, moved, dropped_ids, next_ids):
        """One transaction for a merge: the new segment replaces the old ones.

        ``moved`` is a list of (doc_id, new_row); ``dropped_ids`` are tombstoned
        documents of the old segments, now forgotten.
        """
        with self._transaction():
            if segment_row is not None:
                self._insert("segments", [segment_row])
                self.conn.executemany(
                    "UPDATE documents SET segment = ?, row = ? WHERE id = ?",
                    [(segment_row["id"], int(row), int(doc_id)) for doc_id, row in moved],
                )
            self._delete_in("documents", "id", dropped_ids)
            self._delete_in("segments", "id", old_ids)
            self._set_meta(next_ids)

    def _insert(self, table, rows):
        # Plain executemany: sqlite-utils' inserts commit on their own, which
        # would split the caller's transaction.
        if not rows:
            return
        columns = list(SCHEMA[table][0])
        self.conn.executemany(
            f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({', '.join('?' * len(columns))})",
            [tuple(row.get(c) for c in columns) for row in rows],
        )

    def _tombstone(self, doc_ids):
        doc_ids = [int(i) for i in doc_ids]
        for start in range(0, len(doc_ids), 500):
            chunk = doc_ids[start:start + 500]
            marks = ",".join("?" * len(chunk))
            self.conn.execute(f"UPDATE documents SET deleted = 1 WHERE id IN ({marks})", chunk)

    def _delete_in(self, table, column, values):
        values = [int(v) for v in values]
        for start in range(0, len(values), 500):
            chunk = values[start:start + 500]
            marks = ",".join("?" * len(chunk))
            self.conn.execute(f"DELETE FROM {table} WHERE {column} IN ({marks})", chunk)

    def _set_meta(self, values):
        self.conn.executemany(
            "INSERT OR REPLACE INTO meta (name, value) VALUES (?, ?)",
            [(k, json.dumps(v)) for k, v in values.items()],
        )

    def _transaction(self):
        return _Transaction(self)


class _Transaction:
    """BEGIN IMMEDIATE on entry; COMMIT on a clean exit, ROLLBACK otherwise."""

    def __init__(self, catalog):
        self._catalog = catalog
        self._conn = catalog.conn

    def __enter__(self):
        self._conn.execute("BEGIN IMMEDIATE")
        return self

    def __exit__(self, exc_type, exc, tb):
        self._conn.execute("COMMIT" if exc_type is None else "ROLLBACK")
        return False

    def execute(self, sql, params=()):
        return self._conn.execute(sql, params)

    def executemany(self, sql, rows):
        return self._conn.executemany(sql, rows)

    def set_meta(self, values):
        self._catalog._set_meta(values)


def orphan_files(index_path, committed_files):
    """Segment files (and temporary files) that no committed row refers to."""
    directory = os.path.join(index_path, SEGMENT_DIR)
    committed = set(committed_files)
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return []
    return sorted(n for n in names if n not in committed)


def remove_files(index_path, names):
    directory = os.path.join(index_path, SEGMENT_DIR)
    for name in names:
        try:
            os.unlink(os.path.join(directory, name))
        except FileNotFoundError:
            pass
