"""The catalog: the SQLite database that is an index's commit point.

It holds the ``meta`` values, the roots, the committed segments and the
documents (key, segment, row, label, fields, tombstone); a segment file is
part of the index once, and only once, a transaction here refers to it
(see ``storage.py`` for the files). Layers above may add their own tables
through :meth:`Catalog.transaction`, in the same commit as meta values.
"""
import datetime as _dt
import json
import os
import re
import sqlite3
import urllib.parse
from dataclasses import dataclass

import numpy as np
import sqlite_utils

from ..errors import ADVICE, CorruptIndexError, NotAnIndexError, UnsupportedFormatError
from .catalog_sql import (
    Transaction,
    end_read,
    in_chunks,
    label_conditions,
    meta_values,
    storable,
    text_chunks,
)
from .storage import (
    CATALOG,
    FORMAT_NAME,
    FORMAT_VERSION,
    READABLE_VERSIONS,
    check_segment_name,
)

SCHEMA = {
    "meta": ({"name": str, "value": str}, "name"),
    "roots": ({"position": int, "node": int, "eta": float}, "position"),
    "segments": ({"id": int, "file": str, "rows": int, "nnz": int, "bytes": int,
                  "checksum": str, "created_at": str}, "id"),
    "documents": ({"id": int, "key": str, "segment": int, "row": int, "n_supports": int,
                   "label": str, "fields": str, "deleted": int, "added_at": str}, "id"),
}

# The table of node names a text index adds (the ingest layer writes it:
# word -> graph node and document frequency). The index reads it only to
# name the nodes of an explanation (explain.py).
WORDS_TABLE = "words"

# A time as the writers record it (storage.utc_now), and as ISO 8601 writes it.
_ISO_TIME = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,6})?(Z|[+-]\d{2}:\d{2})?")
# The column types sqlite-utils declares for the Python types of SCHEMA.
_DECLARED = {int: ("INTEGER",), str: ("TEXT",), float: ("REAL", "FLOAT")}

# Opening reads the rows of the tombstoned documents (few) through this.
TOMBSTONE_INDEX = "CREATE INDEX documents_tombstones ON documents(segment, row) WHERE deleted = 1"


def _for_fromisoformat(value):
    """``value`` (matched by _ISO_TIME) as Python 3.10's fromisoformat takes
    it too: the zone "Z" as +00:00, a fraction padded to six digits."""
    if value.endswith("Z"):
        value = value[:-1] + "+00:00"
    fraction = re.search(r"\.(\d{1,6})", value)
    if fraction:
        value = value[:fraction.start(1)] + fraction.group(1).ljust(6, "0") + \
            value[fraction.end(1):]
    return value


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


@dataclass
class Heads:
    """What opening an index reads from the catalog: everything but the
    documents, which are looked up by key or id when needed, plus the rows
    of tombstoned documents (few: a merge drops them)."""

    meta: dict
    roots: list
    segments: list          # dicts from the segments table, by id
    tombstones: np.ndarray  # (segment, row) of each tombstoned document


def file_identity(path):
    """(device, inode) of the file at ``path``, or None when it is gone: a
    reader of a catalog tells by it that the file was replaced (an index
    rebuilt and moved into place) rather than written."""
    try:
        info = os.stat(path)
    except OSError:
        return None
    return info.st_dev, info.st_ino


def readonly_uri(path, immutable=False):
    """The SQLite URI that opens the database file ``path`` read-only
    (``immutable``: also without looking for other connections' changes).
    The path is percent-encoded: in a URI, "?", "#" and "%" would otherwise
    end or change the file name."""
    uri = "file:" + urllib.parse.quote(os.path.abspath(os.fspath(path))) + "?mode=ro"
    return uri + "&immutable=1" if immutable else uri


def watch_commits(path):
    """(connection, version): a read-only connection to the catalog at
    ``path`` whose ``PRAGMA data_version`` changes exactly when another
    connection commits, and that version now. Taken before an index is
    opened, a commit landing in between counts as a change. Raises
    sqlite3.Error where SQLite cannot watch the file (a directory where it
    cannot make the -shm file)."""
    conn = sqlite3.connect(readonly_uri(path), uri=True, isolation_level=None,
                           check_same_thread=False, timeout=30)
    try:
        return conn, conn.execute("PRAGMA data_version").fetchone()[0]
    except BaseException:
        conn.close()
        raise


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
        self.readonly = readonly
        self.conn = probe if readonly else self._connect_writer()
        self.db = sqlite_utils.Database(self.conn, execute_plugins=False)

    def _connect_readonly(self):
        conn = sqlite3.connect(readonly_uri(self.path), uri=True, isolation_level=None,
                               check_same_thread=False, timeout=30)
        try:
            conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
        except UnicodeDecodeError as exc:
            # A damaged schema text (sqlite_master holds the CREATE statements).
            conn.close()
            raise self._unreadable(exc) from None
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
            conn = sqlite3.connect(readonly_uri(self.path, immutable=True), uri=True,
                                   isolation_level=None, check_same_thread=False)
        except sqlite3.DatabaseError as exc:
            conn.close()
            raise self._unreadable(exc) from None
        return conn

    def _unreadable(self, exc):
        # An SQLite file that SQLite cannot read is a damaged catalog (say,
        # truncated by a full disk), not some other kind of file.
        try:
            with open(self.path, "rb") as handle:
                header = handle.read(16)
        except OSError:
            header = b""
        if header == b"SQLite format 3\x00":
            return CorruptIndexError(
                f"{self.path} is a damaged SQLite database ({exc}); restore it from a backup")
        return NotAnIndexError(f"{self.path} is not a sobolev-index catalog ({exc})")

    def _connect_writer(self):
        conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False,
                               timeout=30)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=FULL")
        try:
            # Catalogs made before this index existed get it from their first
            # writer; without it, opening scans the documents for tombstones.
            conn.execute(TOMBSTONE_INDEX.replace("CREATE INDEX", "CREATE INDEX IF NOT EXISTS"))
        except sqlite3.OperationalError:
            pass  # a full disk, say: opening still works, only slower
        return conn

    @classmethod
    def create(cls, index_path, meta, roots, eta):
        path = os.path.join(index_path, CATALOG)
        conn = sqlite3.connect(path, isolation_level=None)
        conn.execute("PRAGMA journal_mode=WAL")
        db = sqlite_utils.Database(conn, execute_plugins=False)
        conn.execute("BEGIN")
        for name, (columns, pk) in SCHEMA.items():
            db[name].create(columns, pk=pk, not_null={pk})
        db["documents"].create_index(["segment"])
        db["documents"].create_index(["label"])
        # Keys are unique among live documents; a tombstone keeps its key.
        conn.execute("CREATE UNIQUE INDEX documents_live_key ON documents(key) WHERE deleted = 0")
        conn.execute(TOMBSTONE_INDEX)
        conn.executemany("INSERT INTO meta (name, value) VALUES (?, ?)",
                         [(k, json.dumps(v)) for k, v in meta.items()])
        conn.executemany("INSERT INTO roots (position, node, eta) VALUES (?, ?, ?)",
                         [(i, int(n), float(e)) for i, (n, e) in enumerate(zip(roots, eta))])
        conn.execute("COMMIT")
        conn.close()

    def _check_format(self, conn):
        try:
            rows = dict(conn.execute("SELECT name, value FROM meta").fetchall())
        except sqlite3.OperationalError as exc:
            if "no such table" in str(exc):
                raise NotAnIndexError(
                    f"{self.path} is not a sobolev-index catalog ({exc})") from None
            raise self._unreadable(exc) from None
        except sqlite3.DatabaseError as exc:
            raise self._unreadable(exc) from None
        try:
            name = json.loads(rows.get("format", "null"))
            version = json.loads(rows.get("format_version", "null"))
        except (TypeError, ValueError):
            name = version = None
        if name != FORMAT_NAME:
            raise NotAnIndexError(f"{self.path} is not a sobolev-index catalog")
        if version not in READABLE_VERSIONS:
            newer = isinstance(version, int) and version > FORMAT_VERSION
            raise UnsupportedFormatError(
                f"{self.path} has format version {version}; this release of sobolev-index "
                f"reads versions {', '.join(map(str, READABLE_VERSIONS))}. "
                + ("A newer release wrote it: upgrade sobolev-index" if newer
                   else "Rebuild the index")
            )
        self.format_version = version

    def close(self):
        if self.conn is not None:
            self.conn.close()
            self.conn = None

    # -------------------------------------------------------------- reading
    def snapshot(self, lenient=False):
        """Everything a reader needs, read inside one transaction.

        A key or label that is not valid UTF-8 is a CorruptIndexError
        naming its document; with ``lenient`` (verify(), which reports such
        rows itself) it is read with its bad bytes escaped as ``\\xNN``.

        A read-only catalog keeps that transaction open until the next
        snapshot() or close(): in WAL mode it then goes on seeing exactly
        this commit, so what a reader looks up later (a document's fields,
        a table of words) agrees with the segments it loaded, even after a
        writer deleted and compacted those documents. It does not block the
        writer; it only keeps the log from being folded in past this commit
        while the reader lives (refresh() moves it on).
        """
        heads, docs = self._read_committed(lambda conn: self._documents(conn, lenient))
        meta, roots, segments = heads.meta, heads.roots, heads.segments
        if docs:
            ids, keys, segs, rows, labels, deleted = zip(*docs)
        else:
            ids, keys, segs, rows, labels, deleted = (), (), (), (), (), ()
        try:
            return Snapshot(
                meta=meta, roots=roots, segments=segments,
                doc_ids=np.asarray(ids, dtype=np.int64), keys=list(keys),
                segment_of=np.asarray(segs, dtype=np.int64),
                row_of=np.asarray(rows, dtype=np.int64),
                labels=list(labels), deleted=np.asarray(deleted, dtype=bool),
            )
        except (TypeError, ValueError) as exc:
            raise CorruptIndexError(
                f"{self.path}: the documents table holds malformed rows ({exc}); restore the "
                "catalog from a backup") from None

    def heads(self):
        """The catalog's :class:`Heads`, read inside one transaction, which a
        read-only catalog keeps open like :meth:`snapshot`: later look-ups of
        documents answer from the same commit."""
        heads, tombstones = self._read_committed(lambda conn: conn.execute(
            "SELECT segment, row FROM documents WHERE deleted = 1").fetchall())
        try:
            heads.tombstones = np.asarray(tombstones, dtype=np.int64).reshape(-1, 2)
        except (TypeError, ValueError) as exc:
            raise CorruptIndexError(
                f"{self.path}: the documents table holds malformed rows ({exc}); restore the "
                "catalog from a backup") from None
        return heads

    def _read_committed(self, more):
        """(Heads without tombstones, more(conn)), read in one transaction
        that stays open on a read-only catalog."""
        conn = self.conn
        if conn.in_transaction:
            conn.execute("COMMIT")
        conn.execute("BEGIN")
        try:
            meta = meta_values(conn.execute("SELECT name, value FROM meta"), self.path)
            roots = conn.execute("SELECT node, eta FROM roots ORDER BY position").fetchall()
            cursor = conn.execute(
                "SELECT id, file, rows, nnz, bytes, checksum, created_at FROM segments ORDER BY id"
            )
            columns = [c[0] for c in cursor.description]
            segments = [dict(zip(columns, row)) for row in cursor]
            for row in segments:
                check_segment_name(row["file"], f"the catalog's segment {row['id']}")
            extra = more(conn)
        except (sqlite3.DatabaseError, UnicodeDecodeError) as exc:
            end_read(conn)
            raise CorruptIndexError(
                f"{self.path} cannot be read ({exc}); restore it from a backup") from None
        except BaseException:
            end_read(conn)
            raise
        if not self.readonly:
            # A writer's own writes begin their own transactions.
            conn.execute("COMMIT")
        return Heads(meta=meta, roots=roots, segments=segments, tombstones=None), extra

    # ------------------------------------------------- documents by key or id
    # Keys and labels are read as bytes and decoded here, so that one that
    # is not valid UTF-8 (a damaged file) is a CorruptIndexError naming its
    # document, never a key with replacement characters.
    def live_documents(self, keys):
        """{key: (doc id, segment, row)} for those of ``keys`` that are live."""
        found = {}
        for marks, chunk in text_chunks(storable(keys)):
            for doc_id, seg, row, key in self._rows(
                    f"SELECT id, segment, row, CAST(key AS BLOB) FROM documents "
                    f"WHERE deleted = 0 AND key IN ({marks})", chunk):
                found[self._text(key, doc_id, "key")] = (int(doc_id), int(seg), int(row))
        return found

    def documents_by_id(self, doc_ids):
        """{doc id: (key, label)} for ``doc_ids`` (live or tombstoned)."""
        found = {}
        for marks, chunk in in_chunks(doc_ids):
            for doc_id, key, label in self._rows(
                    "SELECT id, CAST(key AS BLOB), CAST(label AS BLOB) FROM documents "
                    f"WHERE id IN ({marks})", chunk):
                found[int(doc_id)] = (self._text(key, doc_id, "key"),
                                      self._text(label, doc_id, "label"))
        return found

    def records_by_id(self, doc_ids):
        """{doc id: (key, label, fields as JSON text or None, added_at)} for
        ``doc_ids`` (live or tombstoned): what a segment keeps of each of
        its documents."""
        found = {}
        for marks, chunk in in_chunks(doc_ids):
            for doc_id, key, label, fields, added in self._rows(
                    "SELECT id, CAST(key AS BLOB), CAST(label AS BLOB), CAST(fields AS BLOB), "
                    f"added_at FROM documents WHERE id IN ({marks})", chunk):
                found[int(doc_id)] = (self._text(key, doc_id, "key"),
                                      self._text(label, doc_id, "label"),
                                      self._text(fields, doc_id, "fields"), added)
        return found

    def documents_of(self, doc_ids):
        """{doc id: (key, deleted, added_at)} for those of ``doc_ids`` the
        catalog has, live or tombstoned."""
        found = {}
        for marks, chunk in in_chunks(doc_ids):
            for doc_id, key, deleted, added in self._rows(
                    "SELECT id, CAST(key AS BLOB), deleted, added_at FROM documents "
                    f"WHERE id IN ({marks})", chunk):
                found[int(doc_id)] = (self._text(key, doc_id, "key"), bool(deleted), added)
        return found

    def checkpoint(self):
        """Copy the commits of the log into the database file, without
        waiting for readers (a reader's snapshot holds back the commits
        after it): (frames in the log, frames copied), or None when the
        checkpoint failed (a full disk, say). A writer deletes the files a
        commit stopped using once that commit's frames are copied: a log
        lost afterwards (a copy of the directory without it) then still
        leaves a catalog whose files exist."""
        try:
            _, log, done = self.conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        except sqlite3.Error:
            return None
        return int(log), int(done)

    def live_ids_and_keys(self):
        """[(doc id, key)] of the live documents, in id order."""
        return [(int(doc_id), self._text(key, doc_id, "key")) for doc_id, key in self._text_rows(
            "SELECT id, {} FROM documents WHERE deleted = 0 ORDER BY id", ["key"])]

    def live_keys(self, labels=None):
        """The keys of the live documents in id order, or of those with one
        of ``labels`` (None: no label)."""
        if labels is None:
            return [key for _, key in self.live_ids_and_keys()]
        out = []
        for where, params in label_conditions(labels):
            out += self._rows(f"SELECT id, CAST(key AS BLOB) FROM documents WHERE deleted = 0 "
                              f"AND {where}", params)
        return [self._text(key, doc_id, "key") for doc_id, key in sorted(out)]

    def live_rows_with_labels(self, labels):
        """(segment ids, rows) as int64 arrays, and the set of the labels
        found, for the live documents with one of ``labels`` (None: no
        label)."""
        parts, present = [], set()
        for where, params in label_conditions(labels):
            parts.append(np.asarray(self._rows(
                f"SELECT segment, row FROM documents WHERE deleted = 0 AND {where}", params),
                dtype=np.int64).reshape(-1, 2))
            present.update(self._text(label, doc_id, "label") for doc_id, label in self._rows(
                f"SELECT min(id), CAST(label AS BLOB) FROM documents WHERE deleted = 0 "
                f"AND {where} GROUP BY label", params))
        rows = np.concatenate(parts) if parts else np.zeros((0, 2), dtype=np.int64)
        return rows[:, 0], rows[:, 1], present

    def _text(self, raw, doc_id, column):
        """A text value of the documents table, read as bytes: decoded, or
        a CorruptIndexError naming the document when it is not UTF-8."""
        if raw is None or isinstance(raw, str):
            return raw
        try:
            return bytes(raw).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise CorruptIndexError(
                f"{self.path}: the {column} of document {doc_id} is not valid UTF-8 text "
                f"({exc.reason} at byte {exc.start}); the catalog is damaged: run "
                "`sobolev-index verify INDEX` (verify()) and restore it from a backup") from None

    def _text_rows(self, sql, columns, params=()):
        """Rows of ``sql`` with ``columns`` read as text, or as bytes (for
        _text) where one does not decode."""
        try:
            return self.conn.execute(sql.format(*columns), params).fetchall()
        except sqlite3.DatabaseError as exc:
            if "decode" not in str(exc):
                raise CorruptIndexError(f"{self.path} cannot be read ({exc}); {ADVICE['verify']} "
                                        "restore the catalog from a backup") from None
        return self._rows(sql.format(*(f"CAST({c} AS BLOB)" for c in columns)), params)

    def _rows(self, sql, params=()):
        try:
            return self.conn.execute(sql, params).fetchall()
        except sqlite3.DatabaseError as exc:
            raise CorruptIndexError(
                f"{self.path} cannot be read ({exc}); {ADVICE['verify']} restore the catalog "
                "from a backup") from None

    def _documents(self, conn, lenient=False):
        query = "SELECT id, {key}, segment, row, {label}, deleted FROM documents ORDER BY id"
        try:
            return conn.execute(query.format(key="key", label="label")).fetchall()
        except sqlite3.OperationalError as exc:
            if "decode" not in str(exc):
                raise
        # A key or label that is not valid UTF-8 (a damaged file): an error
        # naming the document, or (lenient) its bad bytes escaped, so that
        # verify() can go on and report the row.
        rows = conn.execute(query.format(key="CAST(key AS BLOB)", label="CAST(label AS BLOB)"))

        def text(raw, doc_id, column):
            if lenient:
                return None if raw is None else bytes(raw).decode("utf-8", "backslashreplace")
            return self._text(raw, doc_id, column)

        return [(i, text(k, i, "key"), s, r, text(lab, i, "label"), d)
                for i, k, s, r, lab, d in rows]

    def document_by_id(self, doc_id):
        try:
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
        except (sqlite3.DatabaseError, ValueError) as exc:
            raise CorruptIndexError(
                f"{self.path}: the catalog row of document {doc_id} cannot be read ({exc}); "
                "restore the catalog from a backup") from None
        return doc

    def integrity_problems(self):
        """What SQLite's own integrity check finds wrong with the catalog
        file (pages, indexes, constraints, text encoding), as messages; []
        when it finds nothing."""
        try:
            rows = self.conn.execute("PRAGMA integrity_check").fetchall()
        except sqlite3.DatabaseError as exc:
            return [f"the catalog cannot be checked: {exc}"]
        found = [str(row[0]) for row in rows if row[0] != "ok"]
        # Text that is not valid UTF-8 passes the page checks but cannot be
        # read back; every key, label, fields value and name must decode.
        return found + self.text_problems() + self._schema_problems()

    def _schema_problems(self):
        """Columns of the index's own tables that are missing or declared
        with another type: the integrity check accepts any schema text that
        parses, so a damaged one (a flipped byte in a CREATE statement) would
        go unseen, and change how later writes are stored."""
        found = []
        for table, (columns, _) in SCHEMA.items():
            try:
                declared = {name: kind.upper() for _, name, kind, *_ in
                            self.conn.execute(f"PRAGMA table_info({table})")}
            except (sqlite3.DatabaseError, UnicodeDecodeError) as exc:
                found.append(f"table {table}: its definition cannot be read ({exc})")
                continue
            for name, kind in columns.items():
                if declared.get(name) not in _DECLARED[kind]:
                    found.append(f"table {table}: column {name} is declared as "
                                 f"{declared.get(name)!r}; expected {' or '.join(_DECLARED[kind])}")
        return found

    def segment_files(self):
        """The file names of the committed segments, each checked to be a
        segment file name: a writer removes files by this list's complement,
        so a bad name must stop it before anything is deleted."""
        rows = self._rows("SELECT id, file FROM segments")
        return [check_segment_name(name, f"the catalog's segment {seg_id}")
                for seg_id, name in rows]

    def segment_documents(self, segment_id):
        """(ids, rows, deleted) of the documents the catalog puts in one
        segment, as arrays ordered by row."""
        found = self._rows("SELECT id, row, deleted FROM documents WHERE segment = ? ORDER BY row",
                           (int(segment_id),))
        out = np.asarray(found, dtype=np.int64).reshape(-1, 3)
        return out[:, 0], out[:, 1], out[:, 2]

    def retired_files(self):
        """The files of segments that committed merges replaced and that may
        still be on disk (``meta.retired_files``), each name checked."""
        names = self.meta_value("retired_files") or []
        if not isinstance(names, list):
            raise CorruptIndexError(f"{self.path}: meta.retired_files is {names!r}; expected a "
                                    "list of segment file names; restore it from a backup")
        return [check_segment_name(name, "the catalog's meta.retired_files") for name in names]

    def latest_files(self):
        """(segment files, retired files) of the latest commit, past the
        snapshot a read-only catalog holds (which this ends)."""
        if self.readonly and self.conn.in_transaction:
            self.conn.execute("COMMIT")
        self.conn.execute("BEGIN")
        try:
            return self.segment_files(), self.retired_files()
        finally:
            self.conn.execute("COMMIT")

    def existing_segments(self, segment_ids):
        """Those of ``segment_ids`` that a committed segment has."""
        found = set()
        for marks, chunk in in_chunks(segment_ids):
            found.update(row[0] for row in self.conn.execute(
                f"SELECT id FROM segments WHERE id IN ({marks})", chunk))
        return found

    def segment_checksums(self, segment_ids):
        """{segment id: the SHA-256 its commit recorded} for those of
        ``segment_ids`` that a committed segment has."""
        found = {}
        for marks, chunk in in_chunks(segment_ids):
            found.update((int(seg_id), checksum) for seg_id, checksum in self._rows(
                f"SELECT id, checksum FROM segments WHERE id IN ({marks})", chunk))
        return found

    def meta_value(self, name):
        rows = self._rows("SELECT value FROM meta WHERE name = ?", (name,))
        return None if not rows else meta_values([(name, rows[0][0])], self.path)[name]

    def content_problems(self):
        """Values the tables hold that no writer writes: a deleted flag
        other than 0 or 1, fields that are not a JSON object, a time that
        is not ISO 8601, two live documents with one key."""
        found = []
        checks = [
            ("SELECT id, deleted FROM documents WHERE deleted NOT IN (0, 1)",
             lambda i, v: f"documents: document {i} has deleted = {v!r}; expected 0 or 1"),
            ("SELECT key, count(*) FROM documents WHERE deleted = 0 GROUP BY key "
             "HAVING count(*) > 1",
             lambda k, n: f"documents: {n} live documents have the key {k!r}"),
        ]
        for sql, describe in checks:
            found += [describe(*row) for row in self.conn.execute(sql).fetchall()[:20]]
        for doc_id, fields in self.conn.execute(
                "SELECT id, fields FROM documents WHERE fields IS NOT NULL"):
            try:
                ok = isinstance(json.loads(fields), dict)
            except (TypeError, ValueError):
                ok = False
            if not ok:
                found.append(f"documents: document {doc_id} has fields {fields!r:.80}, which is "
                             "not a JSON object")
        for table, column in (("documents", "added_at"), ("segments", "created_at")):
            for row_id, value in self.conn.execute(
                    f"SELECT id, {column} FROM {table} WHERE {column} IS NOT NULL"):
                try:
                    # fromisoformat alone takes any character between the
                    # date and the time.
                    if not _ISO_TIME.fullmatch(value):
                        raise ValueError(value)
                    _dt.datetime.fromisoformat(_for_fromisoformat(value))
                except (TypeError, ValueError):
                    found.append(f"{table}: row {row_id} has {column} {value!r}, which is not "
                                 "an ISO 8601 time")
        return found

    def has_table(self, name):
        """Whether the catalog has a table of this name (tables other than
        the index's own are added by the layers above, such as ``words``)."""
        row = self.conn.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (name,)).fetchone()
        return row is not None

    def query(self, sql, params=()):
        """All rows of one read-only statement, as tuples. Text that is not
        valid UTF-8 (a damaged catalog) is a CorruptIndexError naming the
        first such row, not SQLite's decoding error."""
        try:
            return self.conn.execute(sql, params).fetchall()
        except sqlite3.OperationalError as exc:
            if "decode" not in str(exc):
                raise
        found = self.text_problems(limit=1)
        where = found[0] if found else "a text value does not decode"
        raise CorruptIndexError(
            f"{self.path}: {where}; the catalog is damaged: run `sobolev-index verify INDEX` "
            "(verify()) and restore it from a backup")

    def text_problems(self, limit=None):
        """The rows whose key, label, fields, segment file name or meta
        value is not valid UTF-8, as messages (at most ``limit``)."""
        found = []
        for table, column in (("documents", "key"), ("documents", "label"),
                              ("documents", "fields"), ("segments", "file"), ("meta", "value")):
            try:
                cursor = self.conn.execute(
                    f"SELECT rowid, CAST({column} AS BLOB) FROM {table} WHERE {column} IS NOT NULL")
                for rowid, raw in cursor:
                    try:
                        bytes(raw).decode("utf-8")
                    except UnicodeDecodeError:
                        found.append(f"table {table}, row {rowid}: {column} is not valid UTF-8 text")
                        if limit is not None and len(found) >= limit:
                            return found
            except sqlite3.DatabaseError as exc:
                found.append(f"table {table} cannot be read: {exc}")
        return found

    # -------------------------------------------------------------- writing
    def transaction(self):
        """A write transaction (the index's own writes use one too).

        ``with catalog.transaction() as tx:`` then ``tx.execute(sql, params)``,
        ``tx.executemany(sql, rows)`` and ``tx.set_meta(values)``; everything
        commits together when the block ends, or nothing does if it raises.
        Layers above add their own tables this way.
        """
        return Transaction(self)

    def abandon_transaction(self):
        """Roll back a transaction that an interrupted write left open, if any."""
        if self.conn.in_transaction:
            self.conn.execute("ROLLBACK")

    def set_meta(self, values):
        """Set ``meta`` values (JSON) in one transaction."""
        with self.transaction():
            self._set_meta(values)

    def commit_segment(self, segment_row, documents, tombstone_ids=(), next_ids=None):
        """One transaction: new segment + its documents (+ tombstones for upsert)."""
        with self.transaction():
            self._tombstone(tombstone_ids)
            self._insert("segments", [segment_row])
            self._insert("documents", documents)
            if next_ids:
                self._set_meta(next_ids)

    def tombstone(self, doc_ids):
        with self.transaction():
            self._tombstone(doc_ids)

    def replace_segments(self, old_ids, segment_row, moved, dropped_ids, next_ids):
        """One transaction for a merge: the new segment replaces the old ones.

        ``moved`` is a list of (doc_id, new_row); ``dropped_ids`` are tombstoned
        documents of the old segments, now forgotten.
        """
        with self.transaction():
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
        for marks, chunk in in_chunks(doc_ids):
            self.conn.execute(f"UPDATE documents SET deleted = 1 WHERE id IN ({marks})", chunk)

    def _delete_in(self, table, column, values):
        for marks, chunk in in_chunks(values):
            self.conn.execute(f"DELETE FROM {table} WHERE {column} IN ({marks})", chunk)

    def _set_meta(self, values):
        self.conn.executemany(
            "INSERT OR REPLACE INTO meta (name, value) VALUES (?, ?)",
            [(k, json.dumps(v)) for k, v in values.items()],
        )


