"""The files of an index directory: the writer lock, the graph file and the
segment files, their checksums and durable writes.

Layout of an index directory::

    catalog.sqlite      the commit point (WAL): meta, roots, segments, documents,
                        and any table a layer above adds (see ``catalog.py``)
    graph.h5            written once: nodes, edges, lengths, one tree per root
    segments/NNNNNN.h5  written once, never modified: raw measures (with each
                        row's normalising factor) + the inverted file
    lost+found/         segment files no commit lists, moved here by verify(repair=True)
    write.lock          flock()ed by the one writer
    commit.lock         flock()ed by the writer from a new segment's rename to
                        its commit, and shared by verify() and an opening
                        reader while they list files no commit refers to
    readers.lock        flock()ed, shared, by readers while they load a snapshot,
                        and exclusively by a writer while it deletes segment files

A segment file is first written under a temporary name, fsynced and renamed;
only then does one SQLite transaction make it (and its documents) visible.
A crash before that commit leaves a file that no commit lists; as the
same is true of the files of commits a damaged catalog lost, such a file is
never deleted, only moved to ``lost+found/`` by ``verify(repair=True)``.
Files are deleted only after the transaction that stops referencing them has
committed: temporary files, and the files of segments a merge replaced,
which that merge's commit lists in ``meta.retired_files``.

This module reads and writes files; the SQL is in ``catalog.py``, and what
the arrays mean for search in ``inverted.py`` and ``query.py``.
"""
import contextlib
import datetime as _dt
import errno
import fcntl
import hashlib
import json
import mmap
import os
import re
import shutil
import tempfile
import time
from dataclasses import dataclass, field

import h5py
import numpy as np

from ..errors import ADVICE, CorruptIndexError, DiskFullError, IndexLockedError, SobolevIndexError
from ..graph import Graph, ShortestPathTree

# Format 4 stores each distinct posting list of a segment once, the slots
# of several roots sharing it (see inverted.share_lists); format 3 stored
# the inverted file in the forms a search reads, one list per slot, and
# format 2 before it did not. Both are still read.
FORMAT_VERSION = 4
READABLE_VERSIONS = (2, 3, 4)
FORMAT_NAME = "sobolev-index"
CATALOG = "catalog.sqlite"
GRAPH_FILE = "graph.h5"
SEGMENT_DIR = "segments"
LOCK_FILE = "write.lock"
PIN_FILE = "readers.lock"
COMMIT_LOCK = "commit.lock"
TMP_PREFIX = "tmp-"
LOST_DIR = "lost+found"
# The dataset of a segment file with each row's key, label and fields.
RECORDS = "stored/records"


def utc_now():
    """The current UTC time as ISO 8601 text, to the millisecond."""
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="milliseconds")


def current_umask():
    """The process's umask: from /proc where Linux offers it (reading it
    with os.umask means setting it, for every thread, for a moment)."""
    try:
        with open("/proc/self/status", encoding="ascii") as handle:
            for line in handle:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def require_new_directory(path):
    """Refuse a ``path`` that exists and is not an empty directory: an index,
    or a folder of files made for one, is only ever created fresh."""
    if os.path.exists(path) and (not os.path.isdir(path) or os.listdir(path)):
        raise FileExistsError(f"{path} exists and is not an empty directory; choose a new path")


@contextlib.contextmanager
def staged_directory(path, prefix):
    """A new directory beside ``path``, yielded to be filled, then renamed
    to ``path`` (an empty directory there is replaced) and the rename made
    durable; on any error it is removed instead. A crash therefore never
    leaves a half-made index at ``path``. The directory gets the mode any
    new directory gets (0o777 less the umask), not mkdtemp's private one."""
    parent = os.path.dirname(os.path.abspath(path)) or "."
    os.makedirs(parent, exist_ok=True)
    staging = tempfile.mkdtemp(prefix=prefix, dir=parent)
    try:
        os.chmod(staging, 0o777 & ~current_umask())
        yield staging
        if os.path.isdir(path):
            os.rmdir(path)
        os.rename(staging, path)
        fsync_path(parent, directory=True)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def file_checksum(path):
    """The SHA-256 of the file at ``path``, as hex text."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def checksum_error(path, expected, found, what="file"):
    """The CorruptIndexError of a ``what`` at ``path`` whose SHA-256 is
    ``found`` where its commit recorded ``expected``."""
    return CorruptIndexError(
        f"{what} {path} fails its checksum: the catalog records sha256 {short_digest(expected)}, "
        f"the file has {short_digest(found)}; it changed after it was written. Run `sobolev-index "
        "verify INDEX` (verify()) for a full report, and restore the file from a backup")


def short_digest(digest):
    """A checksum as messages show it: its first 16 hex digits (any other
    value as its repr)."""
    return f"{digest[:16]}..." if isinstance(digest, str) and len(digest) > 16 else repr(digest)


def fsync_path(path, directory=False):
    """Flush a file (or, with ``directory=True``, a directory entry) to disk."""
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

    # Index directories this process holds the lock of: a second writer in the
    # same process is told so, rather than "another process".
    _held = set()

    def __init__(self, index_path, timeout=None):
        self.path = os.path.join(index_path, LOCK_FILE)
        self._key = os.path.realpath(index_path)
        self._fd = None
        try:
            self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            if exc.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
                raise SobolevIndexError(
                    f"{index_path} cannot be opened for writing ({exc.strerror})"
                    f"{ADVICE['read_only']}") from None
            raise
        deadline = None if timeout is None else time.monotonic() + max(0.0, float(timeout))
        while True:
            try:
                fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                WriterLock._held.add(self._key)
                return
            except OSError as exc:
                if exc.errno not in (errno.EAGAIN, errno.EACCES):
                    os.close(self._fd)
                    raise
            if deadline is None or time.monotonic() >= deadline:
                os.close(self._fd)
                self._fd = None
                waited = "" if timeout is None else f" after waiting {timeout} s"
                if self._key in WriterLock._held:
                    raise IndexLockedError(
                        f"this process already has {index_path} open for writing{waited}; "
                        "use that handle, or close it before opening another writer")
                raise IndexLockedError(
                    f"another process is writing to {index_path}{waited}; "
                    f"{ADVICE['wait_for_writer']}")
            time.sleep(0.05)

    def release(self):
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None
            WriterLock._held.discard(self._key)


# Files up to this size are built in memory and written with plain file
# calls: a full disk is then an ordinary Python error. HDF5 itself can crash
# the process when a write fails inside its close.
IMAGE_IN_MEMORY_MAX = 512 << 20
def check_free_space(directory, needed):
    """DiskFullError before anything is written, when ``directory``'s file
    system has less than ``needed`` bytes (plus a margin) free."""
    free = shutil.disk_usage(directory).free
    if free < needed:
        raise DiskFullError(
            errno.ENOSPC,
            f"no space left on the device of {directory} (needed about {_megabytes(needed)}, "
            f"{_megabytes(free)} free); this write was not made")


def _megabytes(n):
    return f"{n / 2**20:,.1f} MB"


class SegmentClaim:
    """A writer's exclusive flock on ``commit.lock``, taken just before a
    new segment file gets its final name and released once the commit that
    lists it has succeeded or failed. ``verify()`` and a reader's open in
    another process hold the lock shared while they list the files no
    commit refers to (see commits_paused), so they never mistake a commit
    in progress for a file no commit will ever list. The lock is on a file
    of its own: HDF5 locks the segment files themselves when it opens them."""

    def __init__(self, index_path=None):
        self._fd = None
        if index_path is not None:
            self._fd = os.open(os.path.join(index_path, COMMIT_LOCK), os.O_RDWR | os.O_CREAT,
                               0o666)
            try:
                fcntl.flock(self._fd, fcntl.LOCK_EX)
            except BaseException:
                os.close(self._fd)
                self._fd = None
                raise

    def release(self):
        if self._fd is not None:
            os.close(self._fd)  # and with it the lock
            self._fd = None

    def __del__(self):
        self.release()


@contextlib.contextmanager
def commits_paused(index_path, wait=None):
    """Hold ``commit.lock`` shared: no segment file is between its rename
    and its commit meanwhile (see SegmentClaim). Where the lock file can be
    neither opened nor made (a read-only copy), no writer can be at work
    either, and nothing is held. With ``wait`` (seconds), yields False if
    a commit still holds the lock after that long (True once held)."""
    with _flocked(os.path.join(index_path, COMMIT_LOCK), wait=wait) as held:
        yield held


def _no_space(exc, directory, name, expected_bytes):
    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return DiskFullError(
            errno.ENOSPC, f"no space left on the device of {directory} while writing "
            f"{name} (needed about {_megabytes(expected_bytes)}); this write was not "
            "committed")
    return None


@contextlib.contextmanager
def _durable_h5(directory, name, expected_bytes, claim=None):
    """An HDF5 file to fill, with the format attributes set; written under a
    temporary name, then fsynced and renamed to ``name`` in ``directory``,
    and the directory fsynced. ``expected_bytes`` (about the size of the
    arrays) is checked against the free space first. On any failure the
    temporary file is removed and nothing else is touched. With ``claim``
    (a list), the file's SegmentClaim, taken before the rename, is
    appended to it; the caller releases it after its commit."""
    check_free_space(directory, expected_bytes)
    tmp = os.path.join(directory, TMP_PREFIX + name)
    in_memory = expected_bytes <= IMAGE_IN_MEMORY_MAX
    try:
        # The core driver keeps the whole file in memory (nothing is written
        # by HDF5); its image is then written out below.
        options = dict(driver="core", backing_store=False,
                       block_size=max(1 << 16, int(expected_bytes))) if in_memory else {}
        with h5py.File(tmp, "w", **options) as f:
            f.attrs["format"] = FORMAT_NAME
            f.attrs["format_version"] = FORMAT_VERSION
            yield f
            if in_memory:
                f.flush()
                image = f.id.get_file_image()
        if in_memory:
            write_file(tmp, image)
            del image
        fsync_path(tmp)
    except BaseException as exc:
        _remove_quietly(tmp)
        full = _no_space(exc, directory, name, expected_bytes)
        if full is not None:
            raise full from None
        raise
    final = os.path.join(directory, name)
    held = SegmentClaim(os.path.dirname(directory) if claim is not None else None)
    try:
        os.replace(tmp, final)
    except BaseException as exc:
        held.release()
        _remove_quietly(tmp)
        full = _no_space(exc, directory, name, expected_bytes)
        if full is not None:
            raise full from None
        raise
    try:
        fsync_path(directory, directory=True)
    except BaseException as exc:
        # Not durable, and not committed: it goes, like a failed write.
        held.release()
        _remove_quietly(final)
        full = _no_space(exc, directory, name, expected_bytes)
        if full is not None:
            raise full from None
        raise
    if claim is not None:
        claim.append(held)


def write_file(path, data):
    """Write ``data`` (bytes-like) to a new file at ``path`` with plain file
    calls, so that a full disk raises OSError here."""
    with open(path, "wb") as handle:
        view = memoryview(data)
        for start in range(0, len(view), 1 << 24):
            handle.write(view[start:start + (1 << 24)])


def _remove_quietly(path):
    try:
        os.unlink(path)
    except OSError:
        pass


# -------------------------------------------------------------------- graph
def write_graph(index_path, graph, trees):
    """Write the graph and its trees durably; return the file's checksum."""
    arrays = [graph.edges, graph.lengths, graph.coords, graph.assignment] + \
        [a for t in trees for a in (t.parent, t.length, t.distance, t.depth)]
    expected = sum(np.asarray(a).nbytes for a in arrays if a is not None) + (1 << 16)
    with _durable_h5(index_path, GRAPH_FILE, expected) as f:
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
    return file_checksum(os.path.join(index_path, GRAPH_FILE))


def read_graph(index_path, n_roots, checksum=None):
    """The graph and its first ``n_roots`` trees. With ``checksum`` (the
    SHA-256 recorded when the file was written), the file is hashed first,
    so that damage is found before HDF5 parses the file: a flipped bit in
    an array would otherwise pass as a different graph."""
    path = os.path.join(index_path, GRAPH_FILE)
    try:
        if checksum is not None:
            found = file_checksum(path)
            if found != checksum:
                raise checksum_error(path, checksum, found, "graph file")
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
    except (OSError, KeyError, ValueError, IndexError, TypeError, AttributeError,
            RuntimeError) as exc:
        # IndexError: a parent pointer outside the tree, for instance;
        # RuntimeError and AttributeError: h5py on a damaged file's metadata.
        raise CorruptIndexError(f"{path} is unreadable or damaged ({exc}); restore it from a "
                                "backup") from None
    return graph, trees


# ----------------------------------------------------------------- segments
@dataclass
class SegmentData:
    """The arrays of one segment. ``features[r]`` is (indptr, indices, data)
    for root r: held while a segment is written (the inverted file is built
    from them), and read from format-2 files; formats 3 and 4 do not store
    them, as they are rebuilt from the measures exactly. ``row_scale[i]`` is
    what row i's masses are multiplied by to sum to 1 (stored since format
    3)."""

    doc_ids: np.ndarray
    indptr: np.ndarray
    nodes: np.ndarray
    masses: np.ndarray
    features: list = field(default_factory=list)
    row_scale: np.ndarray = None
    # The inverted file over edges (see inverted.py): arrays by name.
    inverted: dict = None
    # The segment file's format version (what write_segment writes).
    version: int = FORMAT_VERSION
    # One JSON object per row: the document's key, label and fields, kept
    # beside its measure so that a segment the catalog lost can be added
    # again (see recover.py). Written when given; no search reads it.
    records: list = None

    @property
    def rows(self):
        return len(self.doc_ids)

    @property
    def nnz(self):
        """Nonzero features over all roots: known while the segment is
        written (formats 3 and 4 do not store the features)."""
        return int(sum(len(f[1]) for f in self.features))


def segment_record(key, label, fields_json, added_at):
    """A row's entry of ``stored/records``: its key, label, fields (JSON
    text or None) and the time it was added, as one JSON object. ASCII
    JSON: a field may hold a lone surrogate (as the JSON escape the catalog
    keeps), which UTF-8 cannot encode."""
    return json.dumps({"key": key, "label": label,
                       "fields": None if fields_json is None else json.loads(fields_json),
                       "added_at": added_at}, ensure_ascii=True, separators=(",", ":"))


def segment_name(segment_id):
    return f"{segment_id:06d}.h5"


# What segment_name makes: a file name and nothing else, so a name read from
# the catalog can never point outside INDEX/segments/.
_SEGMENT_NAME = re.compile(r"[0-9]{6,}\.h5")
# The id in a segment file's name, also under lost+found/ (where a suffix
# can follow).
_SEGMENT_ID = re.compile(r"([0-9]{6,})\.h5")


def check_segment_name(name, where="the catalog"):
    """CorruptIndexError unless ``name`` is a segment file name as this
    package writes them (digits + .h5, no directory part)."""
    if not isinstance(name, str) or not _SEGMENT_NAME.fullmatch(name):
        raise CorruptIndexError(
            f"{where} names the segment file {name!r}, which is not a segment file name "
            "(NNNNNN.h5 inside INDEX/segments/); the catalog was edited or damaged: restore it "
            "from a backup")
    return name


def write_segment(index_path, segment_id, data):
    """Write a segment durably under its final name; return (file, checksum,
    bytes, claim): the caller releases the SegmentClaim once its commit
    has succeeded or failed."""
    directory = os.path.join(index_path, SEGMENT_DIR)
    name = segment_name(segment_id)
    arrays = [data.doc_ids, data.indptr, data.nodes, data.masses, data.row_scale] + \
        list((data.inverted or {}).values())
    records = None if data.records is None else np.array(list(data.records), dtype=object)
    expected = sum(np.asarray(a).nbytes for a in arrays) + (1 << 16) + \
        (0 if records is None else sum(4 * len(r) + 16 for r in records))
    claim = []
    with _durable_h5(directory, name, expected, claim) as f:
        f.attrs["segment"] = segment_id
        f.attrs["rows"] = data.rows
        f.create_dataset("doc_ids", data=data.doc_ids)
        f.create_dataset("measures/indptr", data=data.indptr)
        f.create_dataset("measures/nodes", data=data.nodes)
        f.create_dataset("measures/masses", data=data.masses)
        f.create_dataset("measures/row_scale", data=data.row_scale)
        for array, values in (data.inverted or {}).items():
            f.create_dataset(f"inverted/{array}", data=values)
        if records is not None:
            f.create_dataset(RECORDS, data=records, dtype=h5py.string_dtype("utf-8"))
    final = os.path.join(directory, name)
    try:
        return name, file_checksum(final), os.path.getsize(final), claim[0]
    except BaseException:
        # Not committed, and no reader can have it open: it goes now.
        remove_uncommitted(index_path, [name])
        claim[0].release()
        raise


def read_segment(index_path, name, n_roots, checksum=None):
    """Load a segment's arrays; with ``checksum``, verify the file first."""
    path = os.path.join(index_path, SEGMENT_DIR, check_segment_name(name))
    if checksum is not None:
        check_segment_checksum(index_path, name, checksum)
    # Contiguous datasets are memory-mapped: opening costs no reads, and
    # the page cache is shared between processes searching one index. One
    # map per file, which the arrays keep alive: a map per array would hold
    # a file descriptor each (about twenty per segment).
    mapped = []

    def load(dataset):
        offset = dataset.id.get_offset()
        if offset is None or dataset.size == 0:
            return dataset[...]
        if not mapped:
            with open(path, "rb") as handle:
                mapped.append(mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ))
        return np.frombuffer(mapped[0], dtype=dataset.dtype, count=dataset.size,
                             offset=offset).reshape(dataset.shape)

    try:
        with h5py.File(path, "r") as f:
            if f.attrs.get("format") != FORMAT_NAME:
                raise CorruptIndexError(f"{path} is not a sobolev-index segment")
            version = f.attrs.get("format_version")
            version = version.item() if isinstance(version, np.generic) else version
            if version not in READABLE_VERSIONS:
                raise CorruptIndexError(
                    f"segment {path} has format version {version!r}; this release reads "
                    f"versions {', '.join(map(str, READABLE_VERSIONS))}: restore the file from "
                    "a backup, or open the index with the release that wrote it")
            data = SegmentData(
                version=int(version),
                doc_ids=load(f["doc_ids"]),
                indptr=load(f["measures/indptr"]),
                nodes=load(f["measures/nodes"]),
                masses=load(f["measures/masses"]),
            )
            if data.version == 2:
                data.features = [
                    (load(f[f"features/{r}/indptr"]), load(f[f"features/{r}/indices"]),
                     load(f[f"features/{r}/data"]))
                    for r in range(n_roots)]
            else:
                data.row_scale = load(f["measures/row_scale"])
            if "inverted" in f:
                data.inverted = {array: load(dataset) for array, dataset in f["inverted"].items()}
    except (OSError, KeyError, ValueError, TypeError, AttributeError, RuntimeError) as exc:
        # Besides OSError, h5py raises these on a file whose metadata is
        # damaged (an object that resolves to nothing, a broken heap).
        if not os.path.exists(path):
            # Merged away by a writer after the caller read the catalog.
            raise FileNotFoundError(errno.ENOENT, "segment file is gone", path) from None
        raise CorruptIndexError(f"segment {path} is unreadable ({exc})") from None
    return data


def check_segment_checksum(index_path, name, checksum):
    """CorruptIndexError unless the segment file ``name`` has the SHA-256
    ``checksum`` its commit recorded (FileNotFoundError if it is gone)."""
    path = os.path.join(index_path, SEGMENT_DIR, check_segment_name(name))
    found = file_checksum(path)
    if found != checksum:
        raise checksum_error(path, checksum, found, "segment")


def stray_files(index_path, committed_files, retired_files=()):
    """Files of ``INDEX/segments/`` that no commit refers to, as two sorted
    lists ``(removable, unlisted)``.

    ``removable``: temporary files (a write that never finished) and the
    files of segments that a committed merge replaced (``retired_files``);
    nothing refers to them, and any writer may remove them. ``unlisted``:
    every other segment file. A writer killed between writing a segment and
    committing it leaves one, but so does a catalog that lost commits (its
    ``-wal`` file gone): such a file may hold acknowledged documents, so it
    is never removed, only moved to ``lost+found/`` by ``verify(repair=True)``.
    Files of other names are not ours, and are never listed.
    """
    directory = os.path.join(index_path, SEGMENT_DIR)
    committed, retired = set(committed_files), set(retired_files)
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return [], []
    removable, unlisted = [], []
    for name in sorted(names):
        if name in committed:
            continue
        if name.startswith(TMP_PREFIX) or name in retired:
            removable.append(name)
        elif _SEGMENT_NAME.fullmatch(name):
            unlisted.append(name)
    return removable, unlisted


def highest_segment_id(index_path):
    """The largest segment id named by any file in ``segments/`` or
    ``lost+found/`` (0 if none): a new segment's id must be above it, so
    that no file of unknown content is ever overwritten."""
    highest = 0
    for sub in (SEGMENT_DIR, LOST_DIR):
        try:
            names = os.listdir(os.path.join(index_path, sub))
        except FileNotFoundError:
            continue
        for name in names:
            match = _SEGMENT_ID.match(name)
            if match:
                highest = max(highest, int(match.group(1)))
    return highest


def describe_segment_file(index_path, name):
    """What an unlisted segment file holds, read without trusting it: its
    size, and the number and id range of its documents, or why it cannot
    be read."""
    path = os.path.join(index_path, SEGMENT_DIR, check_segment_name(name, "a segment file"))
    out = {"file": name, "bytes": os.path.getsize(path), "documents": None,
           "first_id": None, "last_id": None}
    try:
        with h5py.File(path, "r") as f:
            doc_ids = np.asarray(f["doc_ids"][...], dtype=np.int64).reshape(-1)
    except (OSError, KeyError, ValueError, TypeError) as exc:
        out["error"] = f"unreadable ({exc})"
        return out
    out["documents"] = int(len(doc_ids))
    if len(doc_ids):
        out["first_id"], out["last_id"] = int(doc_ids.min()), int(doc_ids.max())
    return out


def move_to_lost_found(index_path, names):
    """Move segment files to ``INDEX/lost+found/`` (made if needed), never
    replacing a file there; returns the paths they now have, relative to
    the index directory."""
    lost = os.path.join(index_path, LOST_DIR)
    os.makedirs(lost, mode=0o777, exist_ok=True)
    moved = []
    for name in names:
        check_segment_name(name, "a file to move")
        target, suffix = name, 1
        while os.path.exists(os.path.join(lost, target)):
            target, suffix = f"{name}.{suffix}", suffix + 1
        os.rename(os.path.join(index_path, SEGMENT_DIR, name), os.path.join(lost, target))
        moved.append(f"{LOST_DIR}/{target}")
    if moved:
        fsync_path(lost, directory=True)
        fsync_path(os.path.join(index_path, SEGMENT_DIR), directory=True)
    return moved


# Seconds a writer tries to get readers.lock exclusively before it leaves
# the files it meant to delete to the next writer.
PIN_WAIT = 5.0


@contextlib.contextmanager
def files_pinned(index_path, exclusive=False, wait=None):
    """Hold ``readers.lock``: shared while a reader reads the catalog and
    opens the segment files it names, exclusive while a writer deletes
    segment files. Once opened (memory-mapped), a file stays readable after
    it is deleted, so a reader never finds a file of its snapshot gone, and
    a writer waits at most for the snapshot loads under way.

    Where the lock file can be neither opened nor made (a read-only copy of
    an index), nothing is held: no writer can delete files there either.
    With ``wait`` (seconds), gives up after that long and yields False.
    """
    with _flocked(os.path.join(index_path, PIN_FILE), exclusive, wait) as held:
        yield held


@contextlib.contextmanager
def _flocked(path, exclusive=False, wait=None):
    """Hold an flock on the lock file ``path`` (made if missing): yields
    True, or False when ``wait`` seconds passed first. Where the file can be
    neither opened nor made (a read-only copy of an index), nothing is held
    and True is yielded: no writer can be at work there."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    except OSError:
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            yield True
            return
    try:
        mode = fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH
        if wait is None:
            fcntl.flock(fd, mode)
        else:
            deadline = time.monotonic() + wait
            while True:
                try:
                    fcntl.flock(fd, mode | fcntl.LOCK_NB)
                    break
                except OSError as exc:
                    if exc.errno not in (errno.EAGAIN, errno.EACCES):
                        raise
                if time.monotonic() >= deadline:
                    yield False
                    return
                time.sleep(0.01)
        yield True
    finally:
        os.close(fd)  # and with it the lock


def remove_uncommitted(index_path, names):
    """Remove segment files that no commit ever listed (a write whose commit
    failed): no reader can have opened them, so no pin is waited for."""
    directory = os.path.join(index_path, SEGMENT_DIR)
    for name in names:
        check_segment_name(name, "a file to remove")
        _remove_quietly(os.path.join(directory, name))
    if names:
        try:
            fsync_path(directory, directory=True)
        except OSError:
            pass  # the file is gone or will be listed by verify(); nothing to undo


def remove_files(index_path, names):
    """Remove segment files by name, once no reader is loading a snapshot
    (see files_pinned); one already gone is not an error. Returns the names
    removed: none when readers kept the pin for PIN_WAIT seconds, in which
    case the files stay for a later writer (the caller keeps them listed as
    retired)."""
    names = list(names)
    for name in names:
        if not name.startswith(TMP_PREFIX):
            check_segment_name(name, "a file to remove")
    if not names:
        return []
    directory = os.path.join(index_path, SEGMENT_DIR)
    with files_pinned(index_path, exclusive=True, wait=PIN_WAIT) as pinned:
        if not pinned:
            return []
        for name in names:
            try:
                os.unlink(os.path.join(directory, name))
            except FileNotFoundError:
                pass
    return names
