"""The write side of an index: adds, upserts, deletes and merges, each
committed in one catalog transaction and reflected in the snapshot.

A :class:`Writer` belongs to an index open for writing (it holds the
directory's writer lock). It writes a batch as one new segment file (see
``storage.py``) and commits it with its documents' rows; a crash before
the commit leaves a file no catalog row names. Merges rewrite the live
rows of several segments into one, retire the old files in the same
commit, and delete them once that commit is checkpointed out of SQLite's
log. Which segments to merge is ``merge_policy.py``'s choice.
"""
import os
import warnings

import numpy as np

from ..errors import ADVICE, CorruptIndexError, DuplicateKeyError, KeyNotFoundError
from ..measures import MeasureBatch, as_measure_batch, checked_batch
from . import inverted, storage
from .arguments import (
    MAX_ID,
    check_room,
    checked_column,
    checked_ids,
    checked_keys,
    json_fields,
    keys_to_delete,
)
from .csr import gather_rows, stack_rows
from .merge_policy import compact_groups, tier_merge
from .segment import Segment


class Writer:
    """Writes to the index whose snapshot is ``snap`` (see the module's
    docstring). ``free_segment_id`` is above every segment file in
    ``segments/`` and ``lost+found/``, so a new segment never replaces a
    file, even one the catalog does not know."""

    def __init__(self, snap):
        self.snap = snap
        self.free_segment_id = 1
        # (files, log position) of merges whose retired files wait for the
        # checkpoint that copies their commit (see delete_retired).
        self.retire_marks = []

    def prepare(self):
        """Before a load: clear what earlier writers left (temporary and
        retired files) and find the next free segment id."""
        self.remove_leftovers()
        self.free_segment_id = storage.highest_segment_id(self.snap.path) + 1

    def reload(self):
        """Load the latest commit again (after a commit whose outcome an
        exception hid)."""
        self.prepare()
        self.snap.load()

    def remove_leftovers(self):
        """Remove temporary files and the files of segments merges replaced
        (see storage.stray_files). Segment files no commit lists stay, for
        verify() to report."""
        committed = self.snap.catalog.segment_files()
        retired = self.snap.catalog.retired_files()
        removable, _ = storage.stray_files(self.snap.path, committed, retired)
        state = self.snap.catalog.checkpoint()
        if state is None or state[0] != state[1]:
            # Until the log's commits are in the database file, the files
            # they retired are still those of an older commit.
            removable = [name for name in removable if name.startswith(storage.TMP_PREFIX)]
        storage.remove_files(self.snap.path, removable)
        self.forget_retired(retired)

    def forget_retired(self, retired):
        """Drop from ``meta.retired_files`` the names whose files are gone."""
        directory = os.path.join(self.snap.path, storage.SEGMENT_DIR)
        still = [name for name in retired if os.path.exists(os.path.join(directory, name))]
        if still != list(retired):
            self.snap.catalog.set_meta({"retired_files": still})
            if self.snap.loaded:
                self.snap.meta["retired_files"] = still

    def new_segment_id(self):
        segment_id = max(int(self.snap.meta["next_segment_id"]), self.free_segment_id)
        self.free_segment_id = segment_id + 1
        return segment_id

    def reserve_ids(self, next_id):
        """SobolevIndex.reserve_ids: the next id raised to ``next_id``, committed."""
        if isinstance(next_id, bool) or not isinstance(next_id, (int, np.integer)) \
                or not 1 <= next_id < MAX_ID:
            raise ValueError(f"next_id is {next_id!r}; expected an integer in 1..{MAX_ID - 1}")
        if int(next_id) > int(self.snap.meta["next_doc_id"]):
            self.snap.catalog.set_meta({"next_doc_id": int(next_id)})
            self.snap.meta["next_doc_id"] = int(next_id)

    def write(self, measures, keys, labels, fields, upsert, ids=None):
        """SobolevIndex.add (``upsert`` False) or upsert: the batch checked
        whole, written as one segment, committed in one transaction, then
        the tiers merged. Returns the keys."""
        batch = as_measure_batch(measures, n_nodes=self.snap.graph.n_nodes) \
            if not isinstance(measures, MeasureBatch) else measures
        n = len(batch)
        next_doc = int(self.snap.meta["next_doc_id"])
        if ids is None:
            check_room(next_doc, n)
            doc_ids = np.arange(next_doc, next_doc + n, dtype=np.int64)
        else:
            doc_ids = checked_ids(ids, n, next_doc)
        keys = checked_keys(keys, doc_ids,
                            lambda some: self.snap.catalog.live_documents(some))
        labels = checked_column("labels", labels, n, str)
        fields_json = [None if f is None else json_fields(f, i)
                       for i, f in enumerate(checked_column("fields", fields, n, dict))]
        existing = self.snap.catalog.live_documents(keys)
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
            features=[tree.feature_arrays_of_batch(batch) for tree in self.snap.trees],
            records=[storage.segment_record(keys[i], labels[i], fields_json[i], now)
                     for i in range(n)],
        )
        data.inverted = inverted.build(data.features, self.snap.graph.n_nodes,
                                       self.snap.edge_weight, self.snap.p, self.snap.trees)
        segment_id = self.new_segment_id()
        row_of = np.arange(n)
        nnz = data.nnz
        file, checksum, nbytes, claim = storage.write_segment(self.snap.path, segment_id, data)
        # From here to the end of the commit, any exception (a Ctrl-C
        # included) removes the file unless the commit landed, and releases
        # the claim.
        try:
            # Searched from here on as a reader would: mapped from the file,
            # not held in this process's memory.
            data = storage.read_segment(self.snap.path, file, len(self.snap.roots))
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
            self.snap.catalog.commit_segment(segment_row, documents,
                                             [r[0] for r in replaced], next_ids)
        except BaseException:
            self.after_failed_commit(segment_id, [file])
            raise
        finally:
            claim.release()
        self.snap.meta.update(next_ids)
        self.tombstone_in_memory(replaced)
        segment = Segment(segment_row, data, np.ones(n, dtype=bool))
        self.snap.segments.append(segment)
        self.snap.segment_by_id[segment_id] = segment
        self.snap.changed()
        try:
            self.merge_tiers()
        except Exception as exc:  # the batch is committed; a merge can wait
            warnings.warn(f"segments were not merged ({exc}); the next add or compact() retries",
                          RuntimeWarning, stacklevel=3)
        self.delete_retired()
        return keys

    def after_failed_commit(self, segment_id, files, landed_if_gone=()):
        """Clean up after an exception around a catalog commit.

        A KeyboardInterrupt can arrive after SQLite committed but before the
        call returned: then the new file is referenced and must stay, and
        the in-memory state is reloaded from the catalog. Otherwise the file
        was never committed and goes: no reader can have it open, so it is
        removed at once, without waiting for the readers' pin."""
        catalog = self.snap.catalog
        try:
            catalog.abandon_transaction()
            landed = bool(catalog.existing_segments([segment_id]))
            if not landed and landed_if_gone:
                landed = not catalog.existing_segments(landed_if_gone)
        except Exception:
            return  # unknown: keep the file; verify() lists it if no commit does
        if landed:
            self.reload()
        else:
            storage.remove_uncommitted(self.snap.path, files)

    def delete(self, keys):
        """Delete documents by key (tombstones, one transaction). Returns the count."""
        keys = keys_to_delete(keys)
        found = self.snap.catalog.live_documents(keys)
        missing = [k for k in keys if k not in found]
        if missing:
            raise KeyNotFoundError(
                f"{len(missing)} key(s) are not in the index, e.g. {missing[0]!r}; nothing was deleted"
            )
        places = sorted(set(found.values()))
        self.snap.catalog.tombstone([doc_id for doc_id, _, _ in places])
        self.tombstone_in_memory(places)
        return len(places)

    def tombstone_in_memory(self, places):
        """Mark rows dead: ``places`` are (doc id, segment id, row)."""
        for _, seg_id, row in places:
            self.snap.segment_by_id[seg_id].live[row] = False
        self.snap.changed()

    def compact(self):
        """SobolevIndex.compact: merge runs of segments up to the cap (see
        merge_policy.compact_groups), one commit each."""
        for group in compact_groups(list(self.snap.segments)):
            if len(group) > 1 or not group[0].live.all():
                self.merge(group)

    def merge_tiers(self):
        """Merge full tiers (see merge_policy.tier_merge) until none is."""
        while True:
            group = tier_merge(self.snap.segments)
            if group is None:
                return
            self.merge(group)

    def _check_agrees_with_catalog(self, segment):
        """CorruptIndexError unless the catalog lists exactly the segment's
        rows, with its document ids and deletions: a merge rewrites the
        catalog's rows by the segment's ids, so a file that disagrees with
        the catalog must stop it before anything is written."""
        ids, rows, deleted = self.snap.catalog.segment_documents(segment.id)
        if not (len(rows) == segment.rows and np.array_equal(rows, np.arange(segment.rows))
                and np.array_equal(ids, np.asarray(segment.data.doc_ids, dtype=np.int64))
                and np.array_equal(deleted == 0, segment.live)):
            raise CorruptIndexError(
                f"segment {segment.file} does not hold the documents the catalog lists in it; "
                f"nothing was merged; {ADVICE['verify']} restore from a backup")

    def merge(self, segments):
        """Replace ``segments`` by one segment of their live rows (doc-id order)."""
        # The merged rows get a new file and checksum: a damaged file must
        # stop the merge, or its damage would pass into a segment that
        # verify() finds in order.
        checksums = self.snap.catalog.segment_checksums([s.id for s in segments])
        for segment in segments:
            if segment.id in checksums:  # else the check against the catalog below fails
                try:
                    storage.check_segment_checksum(self.snap.path, segment.file,
                                                   checksums[segment.id])
                except FileNotFoundError:
                    raise CorruptIndexError(
                        f"segment file {segment.file} is missing although the catalog lists it; "
                        f"nothing was merged; {ADVICE['verify']} restore it from a backup") from None
        parts = []
        for segment in segments:
            # The features are rebuilt from the measures: checked first.
            segment.measure_rows(self.snap.graph.n_nodes)
            segment.row_scale(self.snap.graph.n_nodes)
            self._check_agrees_with_catalog(segment)
            rows = np.flatnonzero(segment.live)
            parts.append((segment, rows))
        dropped = [int(i) for s, _ in parts for i in s.data.doc_ids[~s.live]]
        doc_ids = np.concatenate([s.data.doc_ids[rows] for s, rows in parts])
        order = np.argsort(doc_ids, kind="stable")
        old_ids = [s.id for s in segments]
        segment_id = self.new_segment_id()
        # The old files are deleted after this commit; listed as retired
        # in it, they are known to be safe to delete should that not happen.
        retired = self.snap.catalog.retired_files() + [s.file for s in segments]
        next_ids = {"next_doc_id": int(self.snap.meta["next_doc_id"]),
                    "next_segment_id": segment_id + 1, "retired_files": retired}
        new_segment = None
        if len(doc_ids):
            data = _concat_rows(parts, order, self.snap.trees)
            kept = self.snap.catalog.records_by_id(data.doc_ids.tolist())  # with added_at
            data.records = [storage.segment_record(*kept[int(i)]) for i in data.doc_ids]
            data.inverted = inverted.build(data.features, self.snap.graph.n_nodes,
                                           self.snap.edge_weight, self.snap.p, self.snap.trees)
            nnz = data.nnz
            file, checksum, nbytes, claim = storage.write_segment(self.snap.path, segment_id, data)
        else:
            file, claim = None, storage.SegmentClaim()
        # As in write: from the write to the end of the commit, an exception
        # removes the new file unless the commit landed.
        try:
            if file is not None:
                # Mapped from the file from here on, as in write.
                data = storage.read_segment(self.snap.path, file, len(self.snap.roots))
                segment_row = {"id": segment_id, "file": file, "rows": data.rows,
                               "nnz": nnz, "bytes": nbytes, "checksum": checksum,
                               "created_at": storage.utc_now()}
                new_segment = Segment(segment_row, data, np.ones(data.rows, dtype=bool))
                moved = list(zip(data.doc_ids.tolist(), range(data.rows)))
            else:
                segment_row, moved = None, []
            self.snap.catalog.replace_segments(old_ids, segment_row, moved, dropped, next_ids)
        except BaseException:
            self.after_failed_commit(segment_id, [] if file is None else [file],
                                     landed_if_gone=old_ids)
            raise
        finally:
            claim.release()
        self.snap.meta.update(next_ids)
        keep = [s for s in self.snap.segments if s.id not in set(old_ids)]
        for seg_id in old_ids:
            self.snap.segment_by_id.pop(seg_id, None)
        if new_segment is not None:
            keep.append(new_segment)
            self.snap.segment_by_id[new_segment.id] = new_segment
        self.snap.segments = keep
        self.snap.changed()
        self.delete_retired([segment.file for segment in segments])

    def delete_retired(self, merged=()):
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
        retired = self.snap.catalog.retired_files()
        if not retired:
            self.retire_marks = []
            return
        state = self.snap.catalog.checkpoint()
        if state is None:
            return
        log, done = state
        marks = self.retire_marks
        if merged:
            marks.append((list(merged), log))
        # A log shorter than a mark was started again, which SQLite does
        # only once every frame of the old one was copied.
        safe = {name for files, mark in marks if log < mark or done >= mark for name in files}
        if log == done:
            safe |= set(retired)
        self.retire_marks = [(files, mark) for files, mark in marks
                             if not set(files) <= safe]
        doomed = [name for name in retired if name in safe]
        if not doomed:
            return
        try:
            storage.remove_files(self.snap.path, doomed)
            self.forget_retired(retired)
        except OSError as exc:
            warnings.warn(f"could not remove merged segment files: {exc}", RuntimeWarning,
                          stacklevel=3)


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
