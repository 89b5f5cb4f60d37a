"""What a reader of an index sees: one committed state, loaded from the
catalog and the files it lists.

A :class:`Snapshot` holds the meta values, the graph and its trees, the
roots and their weights, and every committed segment (its arrays
memory-mapped, with a mask of its live rows). Documents stay in the
catalog, looked up by key or id when needed, so loading costs the same for
a thousand documents or ten million. The other components of an index work
from it: ``query.py`` searches it, ``writer.py`` changes it and the
catalog together, ``explain.py`` splits its distances. A reader keeps its
snapshot, and the catalog's read transaction with it, until it loads a
newer one (``refresh``).
"""
import math
import os
import warnings

import numpy as np
import scipy.sparse as sp

from ..errors import ADVICE, CorruptIndexError, KeyNotFoundError, UnlistedSegmentsWarning
from ..graph import normalise_eta
from . import storage
from .arguments import check_str_keys, root_positions
from .catalog import Catalog
from .catalog_sql import checked_heads
from .csr import stack_rows
from .segment import Segment

# How often a reader retries a snapshot whose files a writer just replaced.
SNAPSHOT_RETRIES = 5
# Seconds an opening reader waits for a commit under way before it looks
# for segment files no commit lists (it skips the look after that).
COMMIT_PAUSE_WAIT = 5.0


class Snapshot:
    """The committed state an index works from (see the module's docstring).

    ``catalog`` is the connection it reads documents through; ``check``
    hashes every segment file when first loaded (``open(check=True)``).
    ``generation`` grows whenever the contents change, for callers that
    cache per index (the SQL functions); ``eta_cache`` and ``scope_cache``
    are the query side's caches, emptied when the contents change.
    """

    def __init__(self, path, mode, catalog, check=False):
        self.path = path
        self.mode = mode
        self.catalog = catalog
        self.check = check
        self.hashed = frozenset()
        self.graph = None
        self.segments = []
        self.segment_by_id = {}
        self.loaded = False
        self.generation = 0
        self.n_live = 0
        self.eta_cache = {}
        self.scope_cache = None

    def load(self):
        """Load the catalog's latest commit. The first load also looks for
        segment files no commit lists, and warns of them. A reader moving
        to a newer commit reads it through a connection of its own, and
        keeps its old snapshot (state and catalog transaction) unless the
        new one loads in full."""
        opening = not self.loaded
        fresh = self.mode == "r" and self.loaded
        catalog = Catalog(self.path, readonly=True) if fresh else self.catalog
        try:
            state = self._read(catalog, unlisted=opening)
        except BaseException:
            if fresh:
                catalog.close()
            raise
        unlisted = state.pop("_unlisted", None)
        for name, value in state.items():
            setattr(self, name, value)
        self.eta_cache = {}
        if fresh:
            old, self.catalog = self.catalog, catalog
            old.close()
        self.loaded = True
        self.changed()
        if unlisted:
            self._warn_unlisted(unlisted)

    def _read(self, catalog, unlisted=False):
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
            "(--dry-run lists them first)", UnlistedSegmentsWarning, stacklevel=7)

    def _state_of(self, heads):
        """The attributes of a loaded committed state, read but not yet set:
        the meta values, the graph, and each segment's arrays
        (memory-mapped) with its live rows. Documents stay in the catalog,
        looked up by key or id when needed, so opening costs the same for a
        thousand documents or ten million."""
        meta = heads.meta
        p, roots, eta = checked_heads(self.path, meta, heads.roots)
        state = {"p": p, "roots": roots, "eta": eta, "meta": meta}
        if self.graph is None:
            # Hashed at every open: the whole file is read here anyway, and
            # damage in it would give wrong distances without an error.
            expected = meta.get("graph_checksum")
            if expected is not None and not isinstance(expected, str):
                raise CorruptIndexError(
                    f"{self.path}: the catalog's meta value graph_checksum is {expected!r}, not "
                    f"a SHA-256; {ADVICE['verify']} restore the catalog from a backup")
            graph, trees = storage.read_graph(self.path, len(roots), expected)
            if [t.root for t in trees] != roots.tolist():
                raise CorruptIndexError(
                    f"{self.path}: graph.h5 has trees for roots {[t.root for t in trees]} "
                    f"but the catalog lists roots {roots.tolist()}; restore from a backup")
            # One copy for every segment's inverted file: a search reads it
            # in each of them, and it then stays in the cache.
            state.update(graph=graph, trees=trees, edge_weight=np.concatenate(
                [t.length for t in trees]).astype(np.float64))
        segments, hashed = [], set()
        for row in heads.segments:
            # Segments are hashed by verify(), by a merge or an export (which
            # read them whole) and with check=True: hashing every file at
            # each open would cost as much as reading the whole index.
            checksum = None
            if self.check and row["file"] not in self.hashed:
                checksum = row["checksum"]
                if not isinstance(checksum, str):
                    raise CorruptIndexError(
                        f"{self.path}: the catalog records {checksum!r} as the checksum of "
                        f"segment {row['file']}, not a SHA-256; {ADVICE['verify']} restore the "
                        "catalog from a backup")
            data = storage.read_segment(self.path, row["file"], len(roots), checksum)
            hashed.add(row["file"])
            if data.rows != row["rows"] or len(data.doc_ids) != data.rows:
                raise CorruptIndexError(
                    f"segment {row['file']} has {data.rows} rows but the catalog says "
                    f"{row['rows']}: the file was replaced or damaged; {ADVICE['verify']} restore "
                    "it from a backup")
            segments.append(Segment(row, data, np.ones(data.rows, dtype=bool)))
        by_id = {s.id: s for s in segments}
        for seg_id, row in heads.tombstones.tolist():
            segment = by_id.get(seg_id)
            if segment is None or not 0 <= row < segment.rows:
                raise CorruptIndexError(
                    f"{self.path}: the catalog has a deleted document at row {row} of segment "
                    f"{seg_id}, which {'has no such row' if segment else 'it does not list'}; "
                    f"{ADVICE['verify']} restore the catalog from a backup")
            segment.live[row] = False
        state.update(segments=segments, segment_by_id=by_id)
        if self.check:
            state["hashed"] = frozenset(hashed)
        return state

    def changed(self):
        # The contents changed: scopes cached for where=None are stale, and
        # callers that cache per index (the SQL functions) see a new number.
        self.scope_cache = None
        self.n_live = sum(int(np.count_nonzero(s.live)) for s in self.segments)
        self.generation += 1

    # ---------------------------------------------------------------- reads
    def existing_keys(self, keys):
        """SobolevIndex.existing_keys: one look-up for many keys."""
        if isinstance(keys, str) or not hasattr(keys, "__iter__"):
            raise TypeError(f"keys is {keys!r:.60}; expected a list of keys")
        return set(self.catalog.live_documents([k for k in keys if isinstance(k, str)]))

    def __contains__(self, key):
        """Whether ``key`` is a live document (``key in index``)."""
        return isinstance(key, str) and bool(self.catalog.live_documents([key]))

    def locate(self, key):
        """(doc id, segment, row) of ``key`` (see locate_many)."""
        return self.locate_many([key])[0]

    def locate_many(self, keys):
        """(doc id, segment, row) of each of ``keys``, checked against the
        segment; KeyNotFoundError names the first key that is not live."""
        check_str_keys(keys)
        found = self.catalog.live_documents(keys)
        out = []
        for key in keys:
            place = found.get(key)
            if place is None:
                raise KeyNotFoundError(f"key {key!r} is not in the index")
            doc_id, seg_id, row = place
            segment = self.segment_by_id.get(seg_id)
            if segment is None or not (0 <= row < segment.rows and segment.live[row]
                                       and segment.data.doc_ids[row] == doc_id):
                where = segment.file if segment is not None else f"segment {seg_id}"
                raise CorruptIndexError(
                    f"{where} does not hold document {key!r} (id {doc_id}) at row {row}, where "
                    f"the catalog puts it: a file was replaced or damaged; {ADVICE['verify']} "
                    "restore it from a backup")
            out.append((doc_id, segment, row))
        return out

    def get(self, key):
        """SobolevIndex.get: the measure of ``key`` (masses normalised) and its metadata."""
        doc_id, segment, row = self.locate(key)
        data = segment.data
        start, stop = data.indptr[row], data.indptr[row + 1]
        masses = data.masses[start:stop]
        doc = self.catalog.document_by_id(doc_id) or {}
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
        """SobolevIndex.stored_measures: the measures of ``keys`` exactly as stored."""
        keys = [keys] if isinstance(keys, str) else list(keys)
        places = self.locate_many(keys)
        named = self.documents_named([doc_id for doc_id, _, _ in places])
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
        """SobolevIndex.ids_and_keys: the live documents in id order."""
        rows = self.catalog.live_ids_and_keys()
        return (np.array([doc_id for doc_id, _ in rows], dtype=np.int64),
                [key for _, key in rows])

    def features(self, keys, root=0):
        """SobolevIndex.features: rebuilt from the stored measures, in the order of ``keys``."""
        root = self.root_positions([root])[0]
        single = isinstance(keys, str)
        keys = [keys] if single else list(keys)
        places = self.locate_many(keys)
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
            parts.append(self.segment_by_id[seg_id].features_of_rows(
                rows[picked], self.trees[root]))
            order.append(picked)
        indptr, indices, data = stack_rows(parts)
        out = sp.csr_matrix((data, indices, indptr), shape=shape)[
            np.argsort(np.concatenate(order), kind="stable")]
        out.has_sorted_indices = True
        return out

    def info(self):
        """SobolevIndex.info: counts, sizes and the graph's parameters."""
        deleted = sum(int((~s.live).sum()) for s in self.segments)
        size = 0
        for directory, _, files in os.walk(self.path):
            for name in files:
                try:
                    size += os.path.getsize(os.path.join(directory, name))
                except OSError:  # a file merged away while we walk
                    pass
        return {
            "path": os.path.abspath(self.path),
            "documents": self.n_live,
            "deleted": deleted,
            "segments": len(self.segments),
            "nodes": int(self.graph.n_nodes),
            "edges": int(self.graph.n_edges),
            "roots": self.roots.tolist(),
            "eta": self.eta.tolist(),
            "p": "inf" if math.isinf(self.p) else self.p,
            "bytes": size,
            "graph": self.graph.params,
            "format_version": int(self.meta["format_version"]),
            "segments_in_older_format": sum(
                1 for s in self.segments if s.data.version < storage.FORMAT_VERSION),
            "created_at": self.meta.get("created_at"),
        }

    def documents_named(self, doc_ids):
        """{doc id: (key, label)} from the catalog, for ids a search found."""
        named = self.catalog.documents_by_id(sorted(set(doc_ids)))
        missing = set(doc_ids) - set(named)
        if missing:
            raise CorruptIndexError(
                f"{self.path}: a segment holds document id {min(missing)}, which the catalog "
                f"does not list; {ADVICE['verify']} restore from a backup")
        return named

    def root_positions(self, roots):
        """Positions into ``self.roots``, checked: all by default."""
        return root_positions(roots, len(self.roots))

    def selected_roots(self, roots):
        """The positions of ``roots`` (all by default) and their eta, renormalised."""
        positions = self.root_positions(roots)
        # The same few root selections come back query after query.
        key = tuple(positions)
        if key not in self.eta_cache:
            self.eta_cache[key] = normalise_eta(self.eta[positions], len(positions))
        return positions, self.eta_cache[key]

    def keys_with_labels(self, labels):
        """Live keys whose label is one of ``labels``, in insertion order."""
        wanted = {labels} if isinstance(labels, str) or labels is None else set(labels)
        return self.catalog.live_keys(wanted)

