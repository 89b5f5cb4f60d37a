"""What :meth:`SobolevIndex.recover` does: bring back the documents of
segment files that no commit lists.

Such files hold acknowledged documents when the catalog lost commits (its
``-wal`` file deleted or not copied), and unacknowledged ones when a writer
died between writing a segment and committing it. ``verify(repair=True)``
moves them to ``INDEX/lost+found/``; recovery adds their documents again,
under the write lock, as new documents (new ids: the lost ids may have been
given again since). A segment names its documents by id only in its arrays;
it keeps each document's key, label and fields beside them (``stored/``),
and recovery needs that key: a document whose key is live now is left out
(the live one wins), and so is a document of a segment written before
segments kept keys. Where a key is in several lost files (a batch and the
merge that rewrote it), the document with the highest id, the last written,
is the one restored.

The lost files are read without trusting them: a file that cannot be read,
or whose measures are not valid on this index's graph, is reported and left
out. Nothing in ``lost+found/`` is changed or removed.
"""
import json
import os

import h5py
import numpy as np

from ..errors import CorruptIndexError
from ..measures import as_measure_batch
from . import storage

RECORDS = storage.RECORDS


def lost_files(index_path):
    """The files of ``INDEX/lost+found/``, sorted by name."""
    folder = os.path.join(index_path, storage.LOST_DIR)
    try:
        names = os.listdir(folder)
    except FileNotFoundError:
        return []
    return sorted(name for name in names if os.path.isfile(os.path.join(folder, name)))


def read_lost_file(path, n_nodes):
    """The documents of a segment file at ``path``: a list of dicts ``id``,
    ``nodes``, ``masses``, ``key`` (None when the file keeps no keys),
    ``label`` and ``fields``. Raises CorruptIndexError when the file cannot
    be read or its arrays do not make valid measures on ``n_nodes`` nodes."""
    try:
        with h5py.File(path, "r") as f:
            ids = np.asarray(f["doc_ids"][...], dtype=np.int64).reshape(-1)
            indptr = np.asarray(f["measures/indptr"][...], dtype=np.int64).reshape(-1)
            nodes = np.asarray(f["measures/nodes"][...]).reshape(-1)
            masses = np.asarray(f["measures/masses"][...], dtype=np.float64).reshape(-1)
            records = None
            if RECORDS in f:
                records = [value.decode("utf-8") if isinstance(value, bytes) else value
                           for value in f[RECORDS][...].tolist()]
    except (OSError, KeyError, ValueError, TypeError, UnicodeDecodeError) as exc:
        raise CorruptIndexError(f"{path} cannot be read as a segment file ({exc})") from None
    if len(indptr) != len(ids) + 1 or (records is not None and len(records) != len(ids)):
        raise CorruptIndexError(f"{path}: {len(ids)} document ids, {len(indptr)} row pointers"
                                + ("" if records is None else f" and {len(records)} records")
                                + "; expected one row and record per id")
    try:
        batch = as_measure_batch(indptr=indptr, nodes=nodes, masses=masses, n_nodes=n_nodes)
    except (ValueError, TypeError) as exc:
        raise CorruptIndexError(f"{path}: its measures are not valid on this index's graph "
                                f"({exc})") from None
    out = []
    for row in range(len(ids)):
        start, end = batch.indptr[row], batch.indptr[row + 1]
        doc = {"id": int(ids[row]), "nodes": batch.nodes[start:end].copy(),
               "masses": batch.masses[start:end].copy(), "key": None, "label": None,
               "fields": None}
        if records is not None:
            try:
                record = json.loads(records[row])
            except ValueError as exc:
                raise CorruptIndexError(f"{path}: the record of row {row} is not JSON "
                                        f"({exc})") from None
            if not isinstance(record, dict) or not isinstance(record.get("key"), str):
                raise CorruptIndexError(f"{path}: the record of row {row} has no key")
            doc.update(key=record["key"], label=record.get("label"),
                       fields=record.get("fields"))
        out.append(doc)
    return out


def recover_lost(index, dry_run=False):
    """The report of :meth:`SobolevIndex.recover` (``index`` open for
    writing): segment files no commit lists are moved to lost+found/ (with
    ``dry_run``, only read where they are), then the documents of every
    file there whose keys are not live are added."""
    unlisted = storage.stray_files(index.path, index._catalog.segment_files(),
                                   index._catalog.retired_files())[1]
    moved = [] if dry_run else storage.move_to_lost_found(index.path, unlisted)
    sources = [f"{storage.LOST_DIR}/{name}" for name in lost_files(index.path)]
    if dry_run:
        sources += [f"{storage.SEGMENT_DIR}/{name}" for name in unlisted]
    newest, skipped, unreadable = {}, [], []
    for source in sources:
        try:
            docs = read_lost_file(os.path.join(index.path, source), index.graph.n_nodes)
        except CorruptIndexError as exc:
            unreadable.append({"file": source, "reason": str(exc)})
            continue
        for doc in docs:
            doc["file"] = source
            if doc["key"] is None:
                skipped.append({"key": None, "id": doc["id"], "file": source,
                                "reason": "its segment was written before segments kept "
                                          "keys: there is no key to restore it under"})
            elif doc["key"] not in newest or doc["id"] > newest[doc["key"]]["id"]:
                newest[doc["key"]] = doc
    live = index._catalog.live_documents(list(newest)) if newest else {}
    restore = []
    for key, doc in sorted(newest.items(), key=lambda item: item[1]["id"]):
        if key in live:
            skipped.append({"key": key, "id": doc["id"], "file": doc["file"],
                            "reason": "a live document has this key"})
        else:
            restore.append(doc)
    if restore and not dry_run:
        index.add([(doc["nodes"], doc["masses"]) for doc in restore],
                  keys=[doc["key"] for doc in restore],
                  labels=[doc["label"] for doc in restore],
                  fields=[doc["fields"] for doc in restore])
    return {"files": sources, "moved": moved, "dry_run": bool(dry_run),
            "restored": [{"key": doc["key"], "id": doc["id"], "file": doc["file"]}
                         for doc in restore],
            "skipped": skipped, "unreadable": unreadable}
