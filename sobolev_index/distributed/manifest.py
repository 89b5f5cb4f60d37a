"""The files of a sharded index other than its shards: the manifest (which
shards there are, how keys are routed to them, what they share) and the
sequence table (the global insertion order of the documents).

::

    ROOT/manifest.json      format, version, shard directories, routing rule,
                            graph checksum, roots, eta and p; written once,
                            atomically (temporary name, fsync, rename, fsync
                            of the directory)
    ROOT/sequence.sqlite    key -> global sequence number of its live
                            document, and the next number to give
    ROOT/write.lock         held by the one writer of the sharded index
    ROOT/shard-NNN/         S ordinary SobolevIndex directories

The routing rule is ``int.from_bytes(blake2b(key.encode("utf-8"),
digest_size=8).digest(), "big") % S``: the same on every machine and in every
Python process (Python's own ``hash()`` of a str changes with each process).
"""
import hashlib
import json
import math
import os
import sqlite3
import tempfile

from ..errors import CorruptIndexError, NotAnIndexError, UnsupportedFormatError
from ..index import storage

MANIFEST = "manifest.json"
SEQUENCE = "sequence.sqlite"
FORMAT_NAME = "sobolev-index-sharded"
FORMAT_VERSION = 1
ROUTING = {"hash": "blake2b", "digest_size": 8, "encoding": "utf-8", "byteorder": "big"}
# Keys looked up in one SQL statement (SQLite's limit on parameters is 32,766).
LOOKUP_CHUNK = 10_000


def shard_name(i):
    """The directory of shard ``i`` inside the sharded index."""
    return f"shard-{i:03d}"


def route(key, shards):
    """The shard (0 .. shards - 1) that holds ``key``: blake2b of its UTF-8
    bytes, 8 bytes read big-endian, modulo the number of shards."""
    digest = hashlib.blake2b(key.encode(ROUTING["encoding"]),
                             digest_size=ROUTING["digest_size"]).digest()
    return int.from_bytes(digest, ROUTING["byteorder"]) % shards


def new_manifest(shards, graph_checksum, roots, eta, p):
    return {
        "format": FORMAT_NAME,
        "format_version": FORMAT_VERSION,
        "created_at": storage.utc_now(),
        "shards": [shard_name(i) for i in range(shards)],
        "routing": dict(ROUTING, modulo=shards),
        "graph_checksum": graph_checksum,
        "roots": [int(r) for r in roots],
        "eta": [float(e) for e in eta],
        "p": "inf" if math.isinf(p) else p,
    }


def write_manifest(root, manifest):
    """Write ``ROOT/manifest.json`` atomically: a temporary file in the same
    directory, flushed to disk, renamed over the final name, then the
    directory entry flushed, so a crash leaves the old file or the new one."""
    fd, tmp = tempfile.mkstemp(prefix=".manifest-", suffix=".tmp", dir=root)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(manifest, handle, indent=2, sort_keys=True)
            handle.write("\n")
            handle.flush()
            os.fsync(handle.fileno())
        os.rename(tmp, os.path.join(root, MANIFEST))
        storage.fsync_path(root, directory=True)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def read_manifest(root):
    """The manifest of the sharded index at ``root``, checked: NotAnIndexError
    when there is none, CorruptIndexError when it cannot be read or lacks a
    field, UnsupportedFormatError for a newer format."""
    root = os.fspath(root)
    path = os.path.join(root, MANIFEST)
    if not os.path.isdir(root):
        raise NotAnIndexError(f"{root} does not exist or is not a directory; create a sharded "
                              "index there first (ShardedIndex.create)")
    if not os.path.exists(path):
        raise NotAnIndexError(f"{root} has no {MANIFEST}: it is not a sharded sobolev-index")
    try:
        with open(path, encoding="utf-8") as handle:
            manifest = json.load(handle)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CorruptIndexError(f"{path} cannot be read as JSON ({exc}); restore it from a "
                                "backup") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT_NAME:
        raise NotAnIndexError(f"{path} is not the manifest of a sharded sobolev-index "
                              f"(format {manifest.get('format') if isinstance(manifest, dict) else None!r}, "
                              f"expected {FORMAT_NAME!r})")
    version = manifest.get("format_version")
    if version != FORMAT_VERSION:
        raise UnsupportedFormatError(
            f"{path} has format version {version!r}; this release reads version "
            f"{FORMAT_VERSION}")
    shards = manifest.get("shards")
    routing = manifest.get("routing")
    if (not isinstance(shards, list) or not shards
            or not all(isinstance(s, str) and s and os.sep not in s for s in shards)
            or not isinstance(routing, dict)
            or {k: routing.get(k) for k in ROUTING} != ROUTING
            or routing.get("modulo") != len(shards)
            or not isinstance(manifest.get("graph_checksum"), str)
            or not isinstance(manifest.get("roots"), list)
            or not isinstance(manifest.get("eta"), list)):
        raise CorruptIndexError(
            f"{path} lacks a valid shard list, routing rule ({ROUTING} modulo the number of "
            "shards), graph checksum, roots or eta; restore it from a backup")
    n_nodes, p = manifest.get("n_nodes"), manifest.get("p")
    roots, eta = manifest["roots"], manifest["eta"]
    problem = None
    if not _is_int(n_nodes) or n_nodes < 1:
        problem = f"n_nodes is {n_nodes!r}; expected the graph's number of nodes (>= 1)"
    elif p != "inf" and (not _is_number(p) or not 1 <= p < math.inf):
        problem = f"p is {p!r}; expected a number >= 1 or \"inf\""
    elif not roots or not all(_is_int(r) and 0 <= r < n_nodes for r in roots):
        problem = f"roots is {roots!r}; expected node ids in 0..{n_nodes - 1}"
    elif len(eta) != len(roots) or not all(_is_number(e) and 0 <= e < math.inf for e in eta):
        problem = f"eta is {eta!r}; expected {len(roots)} finite weights >= 0, one per root"
    if problem is not None:
        raise CorruptIndexError(f"{path}: {problem}; restore it from a backup")
    return manifest


def _is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool)


class SequenceTable:
    """``ROOT/sequence.sqlite``: the global insertion order of the documents.

    Each document added through the sharded index takes the next sequence
    number, in the order of its batch, as a single index gives it the next
    document id; a search breaks ties between shards by it. The writer
    records a batch's numbers before the shards commit it, and takes back the
    numbers of parts that fail. ``meta.next_seq`` is the next number.
    """

    def __init__(self, root, readonly):
        self.path = os.path.join(root, SEQUENCE)
        if readonly:
            if not os.path.exists(self.path):
                raise CorruptIndexError(f"{self.path} is missing; restore it from a backup")
            uri = "file:" + os.path.abspath(self.path) + "?mode=ro"
            self._conn = sqlite3.connect(uri, uri=True, check_same_thread=False)
        else:
            self._conn = sqlite3.connect(self.path, check_same_thread=False)
            self._conn.execute("PRAGMA journal_mode=WAL")
            self._conn.execute("PRAGMA synchronous=FULL")
        try:
            self._conn.execute("SELECT 1 FROM sequence LIMIT 1")
            self._conn.execute("SELECT value FROM meta WHERE name = 'next_seq'").fetchone()
        except sqlite3.DatabaseError as exc:
            self._conn.close()
            raise CorruptIndexError(f"{self.path} cannot be read ({exc}); restore it from a "
                                    "backup") from None

    @staticmethod
    def create(root):
        conn = sqlite3.connect(os.path.join(root, SEQUENCE))
        try:
            with conn:
                conn.execute("CREATE TABLE meta (name TEXT PRIMARY KEY, value INTEGER NOT NULL)")
                conn.execute("CREATE TABLE sequence (key TEXT PRIMARY KEY, "
                             "seq INTEGER NOT NULL) WITHOUT ROWID")
                conn.execute("INSERT INTO meta VALUES ('next_seq', 1)")
        finally:
            conn.close()

    def close(self):
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def next_seq(self):
        return int(self._conn.execute(
            "SELECT value FROM meta WHERE name = 'next_seq'").fetchone()[0])

    def lookup(self, keys):
        """{key: sequence number} of those of ``keys`` that have one."""
        keys = list(dict.fromkeys(keys))
        out = {}
        for start in range(0, len(keys), LOOKUP_CHUNK):
            chunk = keys[start:start + LOOKUP_CHUNK]
            marks = ",".join("?" * len(chunk))
            out.update(self._conn.execute(
                f"SELECT key, seq FROM sequence WHERE key IN ({marks})", chunk).fetchall())
        return out

    def assign(self, keys):
        """Give ``keys`` the next numbers, in order, in one transaction.
        Returns the numbers the keys had before (for :meth:`restore`)."""
        with self._conn:
            before = self.lookup(keys)
            first = self.next_seq()
            self._conn.executemany("INSERT OR REPLACE INTO sequence VALUES (?, ?)",
                                   [(key, first + i) for i, key in enumerate(keys)])
            self._conn.execute("UPDATE meta SET value = ? WHERE name = 'next_seq'",
                               (first + len(keys),))
        return first, before

    def restore(self, keys, before):
        """Put back the numbers ``keys`` had before :meth:`assign` (none: the
        row goes), for the parts of a batch that no shard committed."""
        with self._conn:
            for key in keys:
                if key in before:
                    self._conn.execute("INSERT OR REPLACE INTO sequence VALUES (?, ?)",
                                       (key, before[key]))
                else:
                    self._conn.execute("DELETE FROM sequence WHERE key = ?", (key,))
