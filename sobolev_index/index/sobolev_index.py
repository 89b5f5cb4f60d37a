"""SobolevIndex: a persistent, incrementally updatable, exact k-NN index under S_p.

This module holds the index's lifecycle and writes: create, open, close and
refresh (loading a committed snapshot), get, features and info, and add,
upsert, delete, compact and the tiered merges. Queries are executed by
``search.py`` (``SearchMixin``) and ``verify()`` by ``verify.py``; the
files are ``storage.py``'s and the commit point ``catalog.py``'s, where the
on-disk protocol is described.
"""
import math
import os
import shutil
import tempfile
import warnings

import numpy as np
import scipy.sparse as sp

from ..distances import check_p
from ..errors import (
    CorruptIndexError,
    DuplicateKeyError,
    KeyNotFoundError,
    NotAnIndexError,
    OlderFormatError,
    UnlistedSegmentsWarning,
)
from ..graph import Graph
from ..measures import MeasureBatch, as_measure_batch, checked_batch
from . import inverted, storage
from .arguments import (
    MAX_ID,
    check_room,
    check_sample_size,
    check_str_keys,
    checked_column,
    checked_ids,
    checked_keys,
    json_fields,
    keys_to_delete,
)
from .base import IndexBase
from .catalog import Catalog
from .catalog_sql import checked_heads
from .csr import gather_rows, stack_rows
from .explain import ExplainMixin
from .recover import recover_lost
from .results import SearchResult
from .search import SearchMixin
from .segment import Segment
from .verify import VERIFY_SAMPLE, verify_index, verify_path

__all__ = ["SobolevIndex", "SearchResult"]

# Segments whose row counts share floor(log_TIER(rows)) form a tier; a tier
# holding TIER segments is merged, so a corpus of N rows has O(TIER * log N)
# segments however it was added, as long as merges stay below the cap next.
TIER = 8
# A merge holds the merged rows' features and builds their inverted file in
# memory, about 55 bytes per nonzero feature (measured). Merges stop at this
# many live nonzeros, about 7 GB of writer memory and 1.7 GB on disk, so a
# writer's memory stays bounded however large the index grows; a segment
# holding more than half of it is left out of tier merges (two of them
# would not fit).
MAX_SEGMENT_NNZ = 2 ** 27
# How often a reader retries a snapshot whose files a writer just replaced.
SNAPSHOT_RETRIES = 5


# Seconds an opening reader waits for a commit under way before it looks
# for segment files no commit lists (it skips the look after that).
COMMIT_PAUSE_WAIT = 5.0


class SobolevIndex(SearchMixin, ExplainMixin, IndexBase):
    """A persistent exact k-nearest-neighbour index of measures under S_p.

    Create one with :meth:`create`, open one with :meth:`open`. A writer
    (mode "a") holds the directory's writer lock until :meth:`close`; readers
    (mode "r") work from the snapshot committed when they opened (see
    :meth:`refresh`); the writer does not wait for them, except briefly to
    delete merged-away files while a reader loads a snapshot.
    """

    _mismatch = (CorruptIndexError, "run verify()")

    def __init__(self, path, mode, catalog, lock, check=False):
        self.path = path
        self.mode = mode
        self._catalog = catalog
        self._lock = lock
        self._closed = False
        # check=True: every segment is hashed when first loaded (see open).
        self._check = check
        self._hashed = frozenset()
        try:
            self._load()
        except BaseException:
            self.close()
            raise

    # ------------------------------------------------------------ lifecycle
    @classmethod
    def create(cls, path, graph, roots=None, eta=None, p=1, on_violation="raise", seed=0):
        """Create an index at ``path`` (a new or empty directory) and open it for writing.

        ``roots``: None picks one central root; an int n picks n random roots;
        a list gives the root nodes. ``eta`` weighs the roots (equal by
        default). ``p`` is the default p of :meth:`search`.
        """
        if not isinstance(graph, Graph):
            raise TypeError(f"graph is {type(graph).__name__}; expected a sobolev_index.Graph")
        path = os.fspath(path)
        storage.require_new_directory(path)
        p = check_p(p)
        if roots is None:
            root_nodes, eta = graph.roots(1, strategy="center", seed=seed, eta=eta,
                                          on_violation=on_violation)
        elif isinstance(roots, (int, np.integer)) and not isinstance(roots, bool):
            if roots < 1:
                raise ValueError(f"roots is {roots}; give a number of roots >= 1 or a list of nodes")
            root_nodes, eta = graph.roots(int(roots), strategy="random", seed=seed, eta=eta,
                                          on_violation=on_violation)
        elif not isinstance(roots, (list, tuple, np.ndarray)):
            raise ValueError(f"roots is {roots!r}; expected None, a number of roots or a list of nodes")
        else:
            root_nodes, eta = graph.roots(None, strategy=list(roots), seed=seed, eta=eta,
                                          on_violation=on_violation)
        trees = graph.trees(root_nodes, on_violation=on_violation, seed=seed)
        return cls._create_with(path, graph, trees, root_nodes, eta, p)

    @classmethod
    def create_like(cls, path, source):
        """Create an empty index at ``path`` with the graph, shortest-path
        trees, roots, eta and p of ``source`` (an open index), and open it
        for writing.

        The trees are copied, not rebuilt: where shortest paths tie, the
        source broke the ties with lengths perturbed from the seed it was
        created with, which the index does not keep. The new graph file
        holds the source's arrays, written in this release's format (for a
        source in this format, the same file to the byte); so features, and
        therefore distances and search results, agree to the bit. The
        catalog's other meta values (what a build recorded) are not copied.
        """
        if not isinstance(source, SobolevIndex):
            raise TypeError(f"source is {type(source).__name__}; expected an open SobolevIndex")
        source._check_open()
        path = os.fspath(path)
        storage.require_new_directory(path)
        return cls._create_with(path, source.graph, source.trees, source.roots, source.eta,
                                source.p)

    @classmethod
    def _create_with(cls, path, graph, trees, root_nodes, eta, p):
        # Build in a sibling directory and rename it into place, so a crash
        # never leaves a half-made index at ``path``.
        parent = os.path.dirname(os.path.abspath(path)) or "."
        os.makedirs(parent, exist_ok=True)
        staging = tempfile.mkdtemp(prefix=".sobolev-index-", dir=parent)
        try:
            # mkdtemp makes a private directory; the index gets the mode any
            # new directory gets (0o777 less the umask), like its segments/.
            os.chmod(staging, 0o777 & ~storage.current_umask())
            os.mkdir(os.path.join(staging, storage.SEGMENT_DIR))
            graph_checksum = storage.write_graph(staging, graph, trees)
            meta = {
                "format": storage.FORMAT_NAME,
                "format_version": storage.FORMAT_VERSION,
                "created_at": storage.utc_now(),
                "p": p if not math.isinf(p) else "inf",
                "n_nodes": graph.n_nodes,
                "n_edges": graph.n_edges,
                "dim": None if graph.coords is None else int(graph.coords.shape[1]),
                "graph": graph.params,
                "graph_checksum": graph_checksum,
                "next_doc_id": 1,
                "next_segment_id": 1,
            }
            Catalog.create(staging, meta, root_nodes, eta)
            if os.path.isdir(path):
                os.rmdir(path)
            os.rename(staging, path)
            storage.fsync_path(parent, directory=True)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        return cls.open(path, mode="a")

    @classmethod
    def open(cls, path, mode="r", timeout=None, check=False):
        """Open an index for reading (``"r"``) or writing (``"a"``).

        A second writer raises :class:`IndexLockedError`, at once or after
        ``timeout`` seconds.

        Opening checks the graph file against its checksum (it reads the
        whole file anyway), and the segment files against the catalog's
        list: files no commit lists get a warning. ``check=True`` also
        hashes every segment file, as :meth:`verify` does (which checks
        much more besides), and a reader's :meth:`refresh` then hashes the
        segments it has not seen: this reads the whole index, so it costs
        about as much as reading it from disk. A damaged file is a
        :class:`CorruptIndexError` naming it.
        """
        if mode not in ("r", "a"):
            raise ValueError(f"mode is {mode!r}; expected 'r' (read) or 'a' (append/write)")
        if not isinstance(check, bool):
            raise ValueError(f"check is {check!r}; expected True or False")
        path = _index_directory(path)
        if mode == "a":
            _check_writable_format(path)
        return cls._opened(path, mode, timeout, check)

    @classmethod
    def _opened(cls, path, mode, timeout, check=False):
        lock = storage.WriterLock(path, timeout) if mode == "a" else None
        try:
            catalog = Catalog(path, readonly=(mode == "r"))
        except BaseException:
            if lock is not None:
                lock.release()
            raise
        return cls(path, mode, catalog, lock, check)

    @classmethod
    def upgrade(cls, path, timeout=None):
        """Rewrite an index written in an older format in this release's
        format, in place; a no-op on an index already in it.

        The catalog's format version is raised first (releases that cannot
        read the new format then refuse the index rather than misread it),
        then every segment of an older format is rewritten on its own, one
        commit each, without its deleted documents. Interrupted, it leaves a
        readable and writable index, and running it again finishes the job.
        Takes the writer lock (waiting up to ``timeout`` seconds). Returns
        ``{"path", "from_version", "to_version", "segments_rewritten",
        "documents"}``.
        """
        path = _index_directory(path)
        index = cls._opened(path, "a", timeout)
        with index:
            before = int(index._meta["format_version"])
            if before != storage.FORMAT_VERSION:
                index._catalog.set_meta({"format_version": storage.FORMAT_VERSION})
                index._meta["format_version"] = storage.FORMAT_VERSION
            old = [s for s in index._segments if s.data.version != storage.FORMAT_VERSION]
            for segment in old:
                index._merge([segment])
            return {"path": os.path.abspath(path), "from_version": before,
                    "to_version": storage.FORMAT_VERSION, "segments_rewritten": len(old),
                    "documents": len(index)}

    def _release(self):
        if self._catalog is not None:
            self._catalog.close()
        if self._lock is not None:
            self._lock.release()

    def __repr__(self):
        state = "closed" if self._closed else self.mode
        return f"SobolevIndex({self.path!r}, {state}, documents={getattr(self, '_n_live', 0)})"

    # -------------------------------------------------------------- loading
    def _load(self):
        opening = not hasattr(self, "_segments")
        if self.mode == "a":
            self._remove_leftovers()
            # Above every file in segments/ and lost+found/: a new segment
            # never replaces a file, even one the catalog does not know.
            self._free_segment_id = storage.highest_segment_id(self.path) + 1
        # A reader moving to a newer commit reads it through a connection of
        # its own, and keeps its old snapshot (state and catalog transaction)
        # unless the new one loads in full.
        fresh = self.mode == "r" and hasattr(self, "_segments")
        catalog = Catalog(self.path, readonly=True) if fresh else self._catalog
        try:
            state = self._read_snapshot(catalog, unlisted=opening)
        except BaseException:
            if fresh:
                catalog.close()
            raise
        unlisted = state.pop("_unlisted", None)
        for name, value in state.items():
            setattr(self, name, value)
        self._eta_cache = {}
        if fresh:
            old, self._catalog = self._catalog, catalog
            old.close()
        self._changed()
        if unlisted:
            self._warn_unlisted(unlisted)

    def _read_snapshot(self, catalog, unlisted=False):
        """The state of the catalog's latest commit (see _state_of); with
        ``unlisted``, its ``_unlisted`` entry names the segment files that
        no commit lists (see _unlisted_files)."""
        missing = None
        for _ in range(SNAPSHOT_RETRIES):
            try:
                # Pinned: no writer deletes a segment file between our reading
                # the catalog and opening the files it names.
                with storage.files_pinned(self.path):
                    heads = catalog.heads()
                    state = self._state_of(heads)
                    if unlisted:
                        state["_unlisted"] = self._unlisted_files(heads)
                    return state
            except FileNotFoundError as exc:
                # Only where no pin could be held (a read-only copy): a newer
                # snapshot no longer refers to a merged-away file.
                missing = exc
                if self.mode == "a":
                    break
        raise CorruptIndexError(
            f"segment file {missing.filename} is missing although the catalog refers to it; "
            "restore it from a backup"
        )

    def _unlisted_files(self, heads):
        """Segment files in ``segments/`` that no commit lists (see
        storage.stray_files), called while the files are pinned (no writer
        deletes one meanwhile).

        A writer holds the writer lock: its snapshot ``heads`` is the
        latest commit, and no other writer can be at work. A reader looks
        again at those its snapshot does not list, in the latest commit,
        read while commits are paused (storage.commits_paused): a writer
        renames a new segment file into place only while it holds
        ``commit.lock`` (a SegmentClaim) and until its commit has landed or
        the file is removed, so a commit under way is never taken for a
        lost one."""
        committed = [row["file"] for row in heads.segments]
        retired = heads.meta.get("retired_files")
        retired = [name for name in retired if isinstance(name, str)] \
            if isinstance(retired, list) else []
        unlisted = storage.stray_files(self.path, committed, retired)[1]
        if not unlisted or self.mode == "a":
            return unlisted
        with storage.commits_paused(self.path, wait=COMMIT_PAUSE_WAIT) as paused:
            if not paused:
                # A writer stopped between a segment's rename and its
                # commit: this open does not wait for it, and says nothing
                # rather than take its file for a lost one.
                return []
            latest = Catalog(self.path, readonly=True)
            try:
                committed, retired = latest.latest_files()
            finally:
                latest.close()
            # Listed after the commit was read: a merged-away file forgotten
            # by a later commit is gone from the folder by then.
            still = storage.stray_files(self.path, committed, retired)[1]
        return [name for name in unlisted if name in still]

    def _warn_unlisted(self, names):
        shown = ", ".join(names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")
        files = "1 segment file" if len(names) == 1 else f"{len(names)} segment files"
        warnings.warn(
            f"{self.path}: {files} in segments/ that no commit of the catalog lists ({shown}): "
            "a writer was killed before its commit, or the catalog lost commits (a deleted "
            "catalog.sqlite-wal), and then they hold acknowledged documents. "
            f"`sobolev-index recover {self.path}` (recover()) moves them to "
            f"{storage.LOST_DIR}/ and adds back their documents whose keys are not live "
            "(--dry-run lists them first)", UnlistedSegmentsWarning, stacklevel=6)

    def _state_of(self, heads):
        """The attributes of a loaded committed state, read but not yet set:
        the meta values, the graph, and each segment's arrays
        (memory-mapped) with its live rows. Documents stay in the catalog,
        looked up by key or id when needed, so opening costs the same for a
        thousand documents or ten million."""
        meta = heads.meta
        p, roots, eta = checked_heads(self.path, meta, heads.roots)
        state = {"p": p, "roots": roots, "eta": eta, "_meta": meta}
        if not hasattr(self, "graph"):
            # Hashed at every open: the whole file is read here anyway, and
            # damage in it would give wrong distances without an error.
            expected = meta.get("graph_checksum")
            if expected is not None and not isinstance(expected, str):
                raise CorruptIndexError(
                    f"{self.path}: the catalog's meta value graph_checksum is {expected!r}, not "
                    "a SHA-256; run verify() and restore the catalog from a backup")
            graph, trees = storage.read_graph(self.path, len(roots), expected)
            if [t.root for t in trees] != roots.tolist():
                raise CorruptIndexError(
                    f"{self.path}: graph.h5 has trees for roots {[t.root for t in trees]} "
                    f"but the catalog lists roots {roots.tolist()}; restore from a backup")
            # One copy for every segment's inverted file: a search reads it
            # in each of them, and it then stays in the cache.
            state.update(graph=graph, trees=trees, _edge_weight=np.concatenate(
                [t.length for t in trees]).astype(np.float64))
        segments, hashed = [], set()
        for row in heads.segments:
            # Segments are hashed by verify(), by a merge or an export (which
            # read them whole) and with check=True: hashing every file at
            # each open would cost as much as reading the whole index.
            checksum = None
            if self._check and row["file"] not in self._hashed:
                checksum = row["checksum"]
                if not isinstance(checksum, str):
                    raise CorruptIndexError(
                        f"{self.path}: the catalog records {checksum!r} as the checksum of "
                        f"segment {row['file']}, not a SHA-256; run verify() and restore the "
                        "catalog from a backup")
            data = storage.read_segment(self.path, row["file"], len(roots), checksum)
            hashed.add(row["file"])
            if data.rows != row["rows"] or len(data.doc_ids) != data.rows:
                raise CorruptIndexError(
                    f"segment {row['file']} has {data.rows} rows but the catalog says "
                    f"{row['rows']}: the file was replaced or damaged; run verify() and restore "
                    "it from a backup")
            segments.append(Segment(row, data, np.ones(data.rows, dtype=bool)))
        by_id = {s.id: s for s in segments}
        for seg_id, row in heads.tombstones.tolist():
            segment = by_id.get(seg_id)
            if segment is None or not 0 <= row < segment.rows:
                raise CorruptIndexError(
                    f"{self.path}: the catalog has a deleted document at row {row} of segment "
                    f"{seg_id}, which {'has no such row' if segment else 'it does not list'}; "
                    "run verify() and restore the catalog from a backup")
            segment.live[row] = False
        state.update(_segments=segments, _segment_by_id=by_id)
        if self._check:
            state["_hashed"] = frozenset(hashed)
        return state

    def _changed(self):
        # The contents changed: scopes cached for where=None are stale, and
        # callers that cache per index (the SQL functions) see a new number.
        self._scope_cache = None
        self._n_live = sum(int(np.count_nonzero(s.live)) for s in self._segments)
        self.generation = getattr(self, "generation", 0) + 1

    def refresh(self):
        """Reload the latest committed snapshot (readers; writers are always current)."""
        self._check_open()
        self._load()

    def _remove_leftovers(self):
        """Remove temporary files and the files of segments merges replaced
        (see storage.stray_files). Segment files no commit lists stay, for
        verify() to report."""
        committed = self._catalog.segment_files()
        retired = self._catalog.retired_files()
        removable, _ = storage.stray_files(self.path, committed, retired)
        state = self._catalog.checkpoint()
        if state is None or state[0] != state[1]:
            # Until the log's commits are in the database file, the files
            # they retired are still those of an older commit.
            removable = [name for name in removable if name.startswith(storage.TMP_PREFIX)]
        storage.remove_files(self.path, removable)
        self._forget_retired(retired)

    def _forget_retired(self, retired):
        """Drop from ``meta.retired_files`` the names whose files are gone."""
        directory = os.path.join(self.path, storage.SEGMENT_DIR)
        still = [name for name in retired if os.path.exists(os.path.join(directory, name))]
        if still != list(retired):
            self._catalog.set_meta({"retired_files": still})
            if hasattr(self, "_meta"):
                self._meta["retired_files"] = still

    def _new_segment_id(self):
        segment_id = max(int(self._meta["next_segment_id"]), self._free_segment_id)
        self._free_segment_id = segment_id + 1
        return segment_id

    # ---------------------------------------------------------------- checks
    # ------------------------------------------------------------ inspection
    def __len__(self):
        return self._n_live

    def __iter__(self):
        """The live keys, in insertion order."""
        self._check_open()
        return iter(self._catalog.live_keys())

    def __contains__(self, key):
        self._check_open()
        return isinstance(key, str) and bool(self._catalog.live_documents([key]))

    def existing_keys(self, keys):
        """The set of those of ``keys`` that are live documents: one look-up
        for many keys, where ``key in index`` is one each."""
        self._check_open()
        if isinstance(keys, str) or not hasattr(keys, "__iter__"):
            raise TypeError(f"keys is {keys!r:.60}; expected a list of keys")
        return set(self._catalog.live_documents([k for k in keys if isinstance(k, str)]))

    @property
    def segments(self):
        """(id, rows, live rows) of each segment."""
        return [(s.id, s.rows, int(s.live.sum())) for s in self._segments]

    def _locate(self, key):
        return self._locate_many([key])[0]

    def _locate_many(self, keys):
        """(doc id, segment, row) of each of ``keys``, checked against the
        segment; KeyNotFoundError names the first key that is not live."""
        check_str_keys(keys)
        found = self._catalog.live_documents(keys)
        out = []
        for key in keys:
            place = found.get(key)
            if place is None:
                raise KeyNotFoundError(f"key {key!r} is not in the index")
            doc_id, seg_id, row = place
            segment = self._segment_by_id.get(seg_id)
            if segment is None or not (0 <= row < segment.rows and segment.live[row]
                                       and segment.data.doc_ids[row] == doc_id):
                where = segment.file if segment is not None else f"segment {seg_id}"
                raise CorruptIndexError(
                    f"{where} does not hold document {key!r} (id {doc_id}) at row {row}, where "
                    "the catalog puts it: a file was replaced or damaged; run verify() and "
                    "restore it from a backup")
            out.append((doc_id, segment, row))
        return out

    def get(self, key):
        """The stored measure and metadata of ``key``.

        Returns a dict with ``key``, ``nodes``, ``masses`` (normalised to sum
        1, duplicates as given), ``label``, ``fields`` and ``added_at``.
        """
        self._check_open()
        doc_id, segment, row = self._locate(key)
        data = segment.data
        start, stop = data.indptr[row], data.indptr[row + 1]
        masses = data.masses[start:stop]
        doc = self._catalog.document_by_id(doc_id) or {}
        return {
            "key": key,
            "nodes": np.asarray(data.nodes[start:stop], dtype=np.int64),
            "masses": masses / masses.sum(),
            "label": doc.get("label"),
            "fields": doc.get("fields"),
            "added_at": doc.get("added_at"),
            "id": doc_id,
        }

    def stored_measures(self, keys):
        """The measures of ``keys`` exactly as stored: a list of dicts with
        ``key``, ``id``, ``nodes`` (int64), ``masses`` (float64, the stored
        values, not divided by their sum again as :meth:`get`'s are) and
        ``label`` (copies: they outlive a merge of the segment). A query
        built from them has the very features the index holds for the key,
        to the last bit. KeyNotFoundError names the first key that is not
        live."""
        self._check_open()
        keys = [keys] if isinstance(keys, str) else list(keys)
        places = self._locate_many(keys)
        named = self._documents_named([doc_id for doc_id, _, _ in places])
        out = []
        for key, (doc_id, segment, row) in zip(keys, places):
            data = segment.data
            start, stop = int(data.indptr[row]), int(data.indptr[row + 1])
            out.append({"key": key, "id": int(doc_id),
                        "nodes": np.array(data.nodes[start:stop], dtype=np.int64),
                        "masses": np.array(data.masses[start:stop], dtype=np.float64),
                        "label": named[doc_id][1]})
        return out

    def ids_and_keys(self):
        """(ids, keys) of the live documents in id order (insertion order,
        unless ids were given): an int64 array and a list of str."""
        self._check_open()
        rows = self._catalog.live_ids_and_keys()
        return (np.array([doc_id for doc_id, _ in rows], dtype=np.int64),
                [key for _, key in rows])

    def features(self, keys, root=0):
        """Stored features (CSR, one row per key) for root position ``root``."""
        self._check_open()
        root = self._root_positions([root])[0]
        single = isinstance(keys, str)
        keys = [keys] if single else list(keys)
        places = self._locate_many(keys)
        shape = (len(places), self.graph.n_nodes)
        if not places:
            return sp.csr_matrix(shape)
        # Rebuilt from the stored measures, segment by segment, then put
        # back in the order of the keys.
        segment_of = np.array([segment.id for _, segment, _ in places])
        rows = np.array([row for _, _, row in places], dtype=np.int64)
        parts, order = [], []
        for seg_id in dict.fromkeys(segment_of.tolist()):
            picked = np.flatnonzero(segment_of == seg_id)
            parts.append(self._segment_by_id[seg_id].features_of_rows(
                rows[picked], self.trees[root]))
            order.append(picked)
        indptr, indices, data = stack_rows(parts)
        out = sp.csr_matrix((data, indices, indptr), shape=shape)[
            np.argsort(np.concatenate(order), kind="stable")]
        out.has_sorted_indices = True
        return out

    def info(self):
        """Counts and sizes: documents (live), deleted, segments, nodes,
        edges, roots, p, bytes on disk, and the graph's parameters; the
        format version, and how many segments are still in an older one
        (an index of an older release, or an interrupted upgrade)."""
        self._check_open()
        deleted = sum(int((~s.live).sum()) for s in self._segments)
        size = 0
        for directory, _, files in os.walk(self.path):
            for name in files:
                try:
                    size += os.path.getsize(os.path.join(directory, name))
                except OSError:  # a file merged away while we walk
                    pass
        return {
            "path": os.path.abspath(self.path),
            "documents": len(self),
            "deleted": deleted,
            "segments": len(self._segments),
            "nodes": int(self.graph.n_nodes),
            "edges": int(self.graph.n_edges),
            "roots": self.roots.tolist(),
            "eta": self.eta.tolist(),
            "p": "inf" if math.isinf(self.p) else self.p,
            "bytes": size,
            "graph": self.graph.params,
            "format_version": int(self._meta["format_version"]),
            "segments_in_older_format": sum(
                1 for s in self._segments if s.data.version < storage.FORMAT_VERSION),
            "created_at": self._meta.get("created_at"),
        }

    @property
    def catalog(self):
        """The SQLite catalog (``catalog.Catalog``): its ``db`` is a
        sqlite-utils Database on the index's connection."""
        self._check_open()
        return self._catalog

    # --------------------------------------------------------------- writing
    def add(self, measures, keys=None, labels=None, fields=None, ids=None):
        """Add a batch of measures; all or nothing. Returns their keys.

        Once this returns, the batch is durable: a crash cannot lose it.

        ``ids``: the document ids to give the batch, for an index whose
        documents are numbered together with other indexes' (the shards of a
        sharded index share one insertion order this way): strictly
        increasing integers, the first at least :attr:`next_id`. By default
        the documents take the next ids in turn. Ids order the documents:
        ties in a search go to the lower id.
        """
        return self._write(measures, keys, labels, fields, upsert=False, ids=ids)

    def upsert(self, measures, keys, labels=None, fields=None, ids=None):
        """Add measures, replacing live documents with the same keys (the new
        documents take new ids; ``ids`` as for :meth:`add`)."""
        if keys is None:
            raise ValueError("upsert needs keys: the documents to replace are found by key")
        return self._write(measures, keys, labels, fields, upsert=True, ids=ids)

    @property
    def next_id(self):
        """The id the next document added gets, unless told otherwise: above
        every id this index has given, deleted documents' included."""
        self._check_open()
        return int(self._meta["next_doc_id"])

    def reserve_ids(self, next_id):
        """Make :attr:`next_id` at least ``next_id`` (committed): no id below
        it is given afterwards. A copy of an index (its documents added with
        their ids) takes the source's next id this way, so documents added
        to the copy without ids are numbered as the source would number
        them."""
        self._check_writable()
        if isinstance(next_id, bool) or not isinstance(next_id, (int, np.integer)) \
                or not 1 <= next_id < MAX_ID:
            raise ValueError(f"next_id is {next_id!r}; expected an integer in 1..{MAX_ID - 1}")
        if int(next_id) > self.next_id:
            self._catalog.set_meta({"next_doc_id": int(next_id)})
            self._meta["next_doc_id"] = int(next_id)

    def _write(self, measures, keys, labels, fields, upsert, ids=None):
        self._check_writable()
        batch = as_measure_batch(measures, n_nodes=self.graph.n_nodes) \
            if not isinstance(measures, MeasureBatch) else measures
        n = len(batch)
        next_doc = int(self._meta["next_doc_id"])
        if ids is None:
            check_room(next_doc, n)
            doc_ids = np.arange(next_doc, next_doc + n, dtype=np.int64)
        else:
            doc_ids = checked_ids(ids, n, next_doc)
        keys = checked_keys(keys, doc_ids,
                            lambda some: self._catalog.live_documents(some))
        labels = checked_column("labels", labels, n, str)
        fields_json = [None if f is None else json_fields(f, i)
                       for i, f in enumerate(checked_column("fields", fields, n, dict))]
        existing = self._catalog.live_documents(keys)
        replaced = []
        for key in keys:
            if key in existing:
                if not upsert:
                    raise DuplicateKeyError(
                        f"key {key!r} is already in the index; use upsert() to replace it"
                    )
                replaced.append(existing[key])
        if n == 0:
            return []

        # The time the documents are recorded as added, in the catalog and
        # in the segment's records.
        now = storage.utc_now()
        # int64 indptr, int32 indices, float64 data: the arrays the segment stores.
        data = storage.SegmentData(
            doc_ids=doc_ids, indptr=batch.indptr, nodes=batch.nodes, masses=batch.masses,
            row_scale=batch.row_scale,
            features=[tree.feature_arrays_of_batch(batch) for tree in self.trees],
            records=[storage.segment_record(keys[i], labels[i], fields_json[i], now)
                     for i in range(n)],
        )
        data.inverted = inverted.build(data.features, self.graph.n_nodes, self._edge_weight,
                                       self.p, self.trees)
        segment_id = self._new_segment_id()
        row_of = np.arange(n)
        nnz = data.nnz
        file, checksum, nbytes, claim = storage.write_segment(self.path, segment_id, data)
        # From here to the end of the commit, any exception (a Ctrl-C
        # included) removes the file unless the commit landed, and releases
        # the claim.
        try:
            # Searched from here on as a reader would: mapped from the file,
            # not held in this process's memory.
            data = storage.read_segment(self.path, file, len(self.roots))
            segment_row = {"id": segment_id, "file": file, "rows": n, "nnz": nnz,
                           "bytes": nbytes, "checksum": checksum, "created_at": now}
            sizes = np.diff(batch.indptr)
            documents = [
                {"id": int(doc_ids[i]), "key": keys[i], "segment": segment_id,
                 "row": int(row_of[i]), "n_supports": int(sizes[i]), "label": labels[i],
                 "fields": fields_json[i], "deleted": 0, "added_at": now}
                for i in range(n)
            ]
            next_ids = {"next_doc_id": int(doc_ids[-1]) + 1, "next_segment_id": segment_id + 1}
            self._catalog.commit_segment(segment_row, documents, [r[0] for r in replaced],
                                         next_ids)
        except BaseException:
            self._after_failed_commit(segment_id, [file])
            raise
        finally:
            claim.release()
        self._meta.update(next_ids)
        self._tombstone_in_memory(replaced)
        segment = Segment(segment_row, data, np.ones(n, dtype=bool))
        self._segments.append(segment)
        self._segment_by_id[segment_id] = segment
        self._changed()
        try:
            self._merge_tiers()
        except Exception as exc:  # the batch is committed; a merge can wait
            warnings.warn(f"segments were not merged ({exc}); the next add or compact() retries",
                          RuntimeWarning, stacklevel=3)
        self._delete_retired()
        return keys

    def _after_failed_commit(self, segment_id, files, landed_if_gone=()):
        """Clean up after an exception around a catalog commit.

        A KeyboardInterrupt can arrive after SQLite committed but before the
        call returned: then the new file is referenced and must stay, and
        the in-memory state is reloaded from the catalog. Otherwise the file
        was never committed and goes: no reader can have it open, so it is
        removed at once, without waiting for the readers' pin."""
        catalog = self._catalog
        try:
            catalog.abandon_transaction()
            landed = bool(catalog.existing_segments([segment_id]))
            if not landed and landed_if_gone:
                landed = not catalog.existing_segments(landed_if_gone)
        except Exception:
            return  # unknown: keep the file; verify() lists it if no commit does
        if landed:
            self._load()
        else:
            storage.remove_uncommitted(self.path, files)

    def delete(self, keys):
        """Delete documents by key (tombstones, one transaction). Returns the count."""
        self._check_writable()
        keys = keys_to_delete(keys)
        found = self._catalog.live_documents(keys)
        missing = [k for k in keys if k not in found]
        if missing:
            raise KeyNotFoundError(
                f"{len(missing)} key(s) are not in the index, e.g. {missing[0]!r}; nothing was deleted"
            )
        places = sorted(set(found.values()))
        self._catalog.tombstone([doc_id for doc_id, _, _ in places])
        self._tombstone_in_memory(places)
        return len(places)

    def _tombstone_in_memory(self, places):
        """Mark rows dead: ``places`` are (doc id, segment id, row)."""
        for _, seg_id, row in places:
            self._segment_by_id[seg_id].live[row] = False
        self._changed()

    def compact(self):
        """Drop deleted documents and merge the segments into one; past
        ``MAX_SEGMENT_NNZ`` nonzero features, merge runs of consecutive
        segments up to that cap instead (one commit per run)."""
        self._check_writable()
        for group in _compact_groups(list(self._segments)):
            if len(group) > 1 or not group[0].live.all():
                self._merge(group)

    def _merge_tiers(self):
        while True:
            tiers = {}
            for segment in self._segments:
                if 2 * _live_nnz(segment) <= MAX_SEGMENT_NNZ:
                    tiers.setdefault(_tier(int(segment.live.sum())), []).append(segment)
            full = [group for group in tiers.values() if len(group) >= TIER]
            if not full:
                return
            # The tier's smallest, as many as fit under the cap (up to
            # TIER): at least two, since each holds at most half of it.
            group = sorted(full[0], key=_live_nnz)[:TIER]
            total, take = 0, 0
            while take < len(group) and total + _live_nnz(group[take]) <= MAX_SEGMENT_NNZ:
                total += _live_nnz(group[take])
                take += 1
            self._merge(group[:max(take, 2)])

    def _check_agrees_with_catalog(self, segment):
        """CorruptIndexError unless the catalog lists exactly the segment's
        rows, with its document ids and deletions: a merge rewrites the
        catalog's rows by the segment's ids, so a file that disagrees with
        the catalog must stop it before anything is written."""
        ids, rows, deleted = self._catalog.segment_documents(segment.id)
        if not (len(rows) == segment.rows and np.array_equal(rows, np.arange(segment.rows))
                and np.array_equal(ids, np.asarray(segment.data.doc_ids, dtype=np.int64))
                and np.array_equal(deleted == 0, segment.live)):
            raise CorruptIndexError(
                f"segment {segment.file} does not hold the documents the catalog lists in it; "
                "nothing was merged; run verify() and restore from a backup")

    def _merge(self, segments):
        """Replace ``segments`` by one segment of their live rows (doc-id order)."""
        # The merged rows get a new file and checksum: a damaged file must
        # stop the merge, or its damage would pass into a segment that
        # verify() finds in order.
        checksums = self._catalog.segment_checksums([s.id for s in segments])
        for segment in segments:
            if segment.id in checksums:  # else the check against the catalog below fails
                try:
                    storage.check_segment_checksum(self.path, segment.file, checksums[segment.id])
                except FileNotFoundError:
                    raise CorruptIndexError(
                        f"segment file {segment.file} is missing although the catalog lists it; "
                        "nothing was merged; run verify() and restore it from a backup") from None
        parts = []
        for segment in segments:
            # The features are rebuilt from the measures: checked first.
            segment.measure_rows(self.graph.n_nodes)
            segment.row_scale(self.graph.n_nodes)
            self._check_agrees_with_catalog(segment)
            rows = np.flatnonzero(segment.live)
            parts.append((segment, rows))
        dropped = [int(i) for s, _ in parts for i in s.data.doc_ids[~s.live]]
        doc_ids = np.concatenate([s.data.doc_ids[rows] for s, rows in parts])
        order = np.argsort(doc_ids, kind="stable")
        old_ids = [s.id for s in segments]
        segment_id = self._new_segment_id()
        # The old files are deleted after this commit; listed as retired
        # in it, they are known to be safe to delete should that not happen.
        retired = self._catalog.retired_files() + [s.file for s in segments]
        next_ids = {"next_doc_id": int(self._meta["next_doc_id"]),
                    "next_segment_id": segment_id + 1, "retired_files": retired}
        new_segment = None
        if len(doc_ids):
            data = _concat_rows(parts, order, self.trees)
            kept = self._catalog.records_by_id(data.doc_ids.tolist())  # with added_at
            data.records = [storage.segment_record(*kept[int(i)]) for i in data.doc_ids]
            data.inverted = inverted.build(data.features, self.graph.n_nodes, self._edge_weight,
                                           self.p, self.trees)
            nnz = data.nnz
            file, checksum, nbytes, claim = storage.write_segment(self.path, segment_id, data)
        else:
            file, claim = None, storage.SegmentClaim()
        # As in _write: from the write to the end of the commit, an exception
        # removes the new file unless the commit landed.
        try:
            if file is not None:
                # Mapped from the file from here on, as in _write.
                data = storage.read_segment(self.path, file, len(self.roots))
                segment_row = {"id": segment_id, "file": file, "rows": data.rows,
                               "nnz": nnz, "bytes": nbytes, "checksum": checksum,
                               "created_at": storage.utc_now()}
                new_segment = Segment(segment_row, data, np.ones(data.rows, dtype=bool))
                moved = list(zip(data.doc_ids.tolist(), range(data.rows)))
            else:
                segment_row, moved = None, []
            self._catalog.replace_segments(old_ids, segment_row, moved, dropped, next_ids)
        except BaseException:
            self._after_failed_commit(segment_id, [] if file is None else [file],
                                      landed_if_gone=old_ids)
            raise
        finally:
            claim.release()
        self._meta.update(next_ids)
        keep = [s for s in self._segments if s.id not in set(old_ids)]
        for seg_id in old_ids:
            self._segment_by_id.pop(seg_id, None)
        if new_segment is not None:
            keep.append(new_segment)
            self._segment_by_id[new_segment.id] = new_segment
        self._segments = keep
        self._changed()
        self._delete_retired([segment.file for segment in segments])

    def _delete_retired(self, merged=()):
        """Delete the files merges replaced, once SQLite has copied the
        commit that retired them from its log into catalog.sqlite: until
        then a lost log (catalog.sqlite-wal deleted, or a copy made without
        it) would bring back a commit that lists them. ``merged``: the files
        of the merge just committed, whose commit ends the log now. The
        checkpoint waits for no reader, and a reader's snapshot holds back
        the commits after it: files whose commit is not copied yet stay
        retired, and a later commit tries again (files retired by another
        process's merges wait for a log copied to its end). Files not
        removed (readers kept the pin, or an unlink failed) stay retired
        too."""
        retired = self._catalog.retired_files()
        if not retired:
            self._retire_marks = []
            return
        state = self._catalog.checkpoint()
        if state is None:
            return
        log, done = state
        marks = getattr(self, "_retire_marks", [])
        if merged:
            marks.append((list(merged), log))
        # A log shorter than a mark was started again, which SQLite does
        # only once every frame of the old one was copied.
        safe = {name for files, mark in marks if log < mark or done >= mark for name in files}
        if log == done:
            safe |= set(retired)
        self._retire_marks = [(files, mark) for files, mark in marks
                              if not set(files) <= safe]
        doomed = [name for name in retired if name in safe]
        if not doomed:
            return
        try:
            storage.remove_files(self.path, doomed)
            self._forget_retired(retired)
        except OSError as exc:
            warnings.warn(f"could not remove merged segment files: {exc}", RuntimeWarning,
                          stacklevel=3)

    def recover(self, dry_run=False, replace_newer=False):
        """Add again the documents of segment files no commit lists
        (writers only).

        A catalog that lost commits (its ``catalog.sqlite-wal`` deleted, or
        a copy made without it) no longer lists their segment files, and
        their documents drop out of the index. This moves such files from
        ``INDEX/segments/`` to ``INDEX/lost+found/`` (as
        ``verify(repair=True)`` does), then adds each document of the
        segment files in ``lost+found/`` under its key, label and fields,
        as a new document with a new id, except:

        - a document the catalog still has (its id with its key, live or
          deleted since) is left out;
        - a key that is live is left out, unless the lost version was added
          later than the live one and ``replace_newer`` is true (it then
          replaces it, as :meth:`upsert` does);
        - where a key is in several lost files, the version added last
          wins;
        - a document of a segment written before segments kept keys has no
          key to restore it under: it is reported by id.

        A writer killed between writing a segment and committing it leaves
        such a file too: its documents, never acknowledged, are restored as
        well. Files that cannot be read are reported. The files read then
        move to ``lost+found/recovered/``, so that a later recovery does not
        bring back documents deleted in between; nothing is removed.

        With ``dry_run``, nothing is moved or added: the report says what
        would be.

        Returns a dict: ``restored`` (``key``, ``id`` (the document's id in
        its file), ``file``, ``replaced``), ``skipped`` (``key``, ``id``,
        ``file``, ``reason``), ``unreadable`` (``file``, ``reason``),
        ``files`` (read), ``moved`` (from segments/) and ``dry_run``.
        """
        self._check_writable()
        return recover_lost(self, dry_run=bool(dry_run), replace_newer=bool(replace_newer))

    # ---------------------------------------------------------------- verify
    @classmethod
    def verify_path(cls, path, repair=False, sample=VERIFY_SAMPLE, seed=0, timeout=None):
        """:meth:`verify` for the index at ``path``, without opening it:
        reads the catalog and the graph but loads no segment, so an index
        that cannot be opened (a segment missing or damaged, a damaged graph
        or catalog) gets a report rather than an exception. ``repair=True``
        takes the writer lock (waiting up to ``timeout`` seconds)."""
        path = _index_directory(path)
        sample = check_sample_size(sample)
        return verify_path(path, repair=bool(repair), sample=sample, seed=seed, timeout=timeout)

    def verify(self, repair=False, sample=VERIFY_SAMPLE, seed=0):
        """Check files against the catalog; report problems instead of raising.

        Checks the catalog (SQLite's integrity check, text that does not
        decode, agreement between its tables and with the segments), the
        graph file and every segment's checksum, that each document points
        at its own row and each segment row is a listed document; every
        row's stored normalising factor (against its masses) and row norms
        (against the stored values), and each root's count of postings
        (against the rows' features); and that the inverted file holds the
        features of up to ``sample`` rows per segment, rebuilt from their
        measures (format 2: also the stored features, bit for bit).

        Temporary files and the files of segments a merge replaced are
        listed as ``orphans``. Other segment files no commit lists are
        problems, listed under ``unlisted`` with their document counts: a
        writer killed before its commit leaves one, and so does a catalog
        that lost commits (a deleted ``catalog.sqlite-wal``), in which case
        they hold acknowledged documents. ``repair=True`` (writers only)
        removes the orphans and moves the unlisted files to
        ``INDEX/lost+found/`` (``moved``); nothing is deleted that might
        hold data. A reader verifies the latest commit, through a
        connection of its own, and keeps its snapshot.
        """
        self._check_open()
        sample = check_sample_size(sample)
        if repair:
            self._check_writable()
        if self.writable:
            return verify_index(self.path, self._catalog, self.trees, self.graph.n_nodes,
                                sample=sample, seed=seed, repair=repair)
        latest = Catalog(self.path, readonly=True)
        try:
            # Pinned like a snapshot load: a merge meanwhile leaves the files
            # this commit names in place (the writer defers their deletion).
            with storage.files_pinned(self.path):
                return verify_index(self.path, latest, self.trees, self.graph.n_nodes,
                                    sample=sample, seed=seed, repair=False)
        finally:
            latest.close()


def _index_directory(path):
    """``path`` as a str, or NotAnIndexError unless it is an index directory
    (checked before a writer takes the lock, which would create a file)."""
    path = os.fspath(path)
    if not os.path.isdir(path):
        if os.path.exists(path):
            raise NotAnIndexError(f"{path} is a file, not a sobolev-index directory")
        raise NotAnIndexError(f"{path} does not exist; create an index there first")
    if not os.path.isfile(os.path.join(path, storage.CATALOG)):
        raise NotAnIndexError(
            f"{path} is not a sobolev-index directory: it has no {storage.CATALOG}"
        )
    return path


def _check_writable_format(path):
    """OlderFormatError unless the index at ``path`` is in the format this
    release writes (checked before the writer lock is taken)."""
    probe = Catalog(path, readonly=True)
    version = probe.format_version
    probe.close()
    if version != storage.FORMAT_VERSION:
        raise OlderFormatError(
            f"{path} is in format version {version}, which an older release wrote; this "
            f"release reads it but writes format {storage.FORMAT_VERSION} only. Rewrite it "
            "with SobolevIndex.upgrade(path), or open it with mode='r' to read it as it is")


def _tier(rows):
    return int(math.log(max(rows, 1), TIER))


def _live_nnz(segment):
    """The segment's nonzero features (from the catalog) times its share of
    live rows: exact when none is deleted, an estimate otherwise."""
    return segment.nnz * int(segment.live.sum()) // max(segment.rows, 1)


def _compact_groups(segments):
    """``segments`` cut into runs of at most MAX_SEGMENT_NNZ live nonzeros
    (a segment above it on its own)."""
    groups, total = [], 0
    for segment in segments:
        nnz = _live_nnz(segment)
        if groups and total + nnz <= MAX_SEGMENT_NNZ:
            groups[-1].append(segment)
            total += nnz
        else:
            groups.append([segment])
            total = nnz
    return groups


def _concat_rows(parts, order, trees):
    """Live rows of several segments, concatenated and put in ``order``,
    with their features rebuilt from their measures."""
    n_cols = trees[0].n_nodes
    starts = np.cumsum([0] + [segment.rows for segment, _ in parts])
    selected = np.concatenate([starts[i] + rows for i, (_, rows) in enumerate(parts)])[order]
    indptr, nodes, masses = stack_rows([segment.measure_rows(n_cols) for segment, _ in parts])
    scale = np.concatenate([segment.row_scale(n_cols) for segment, _ in parts])[selected]
    indptr, nodes, masses = gather_rows(indptr, (nodes, masses), selected)
    batch = checked_batch(indptr, nodes, masses, scale)
    doc_ids = np.concatenate([np.asarray(segment.data.doc_ids) for segment, _ in parts])
    return storage.SegmentData(
        doc_ids=doc_ids[selected], indptr=batch.indptr, nodes=batch.nodes, masses=batch.masses,
        row_scale=batch.row_scale,
        features=[tree.feature_arrays_of_batch(batch) for tree in trees])


