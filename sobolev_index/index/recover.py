"""What :meth:`SobolevIndex.recover` does: bring back the documents of
segment files that no commit lists.

Such files hold acknowledged documents when the catalog lost commits (its
``-wal`` file deleted or not copied), and unacknowledged ones when a writer
died between writing a segment and committing it. ``verify(repair=True)``
moves them to ``INDEX/lost+found/``; recovery adds their documents again,
under the write lock, as new documents (new ids: the lost ids may have been
given again since). A segment keeps each document's key, label, fields and
the time it was added beside its measure (``stored/``), and recovery goes
by them:

- a document the catalog still has (its id with its key, live or deleted:
  the file of a merge that never committed, or a document deleted since)
  is left out;
- a key that is live is left out, unless the lost version was added later
  than the live one and ``replace_newer`` is given (it then replaces it);
- where a key is in several lost files, the version added last wins;
- a document of a segment written before segments kept keys has no key to
  come back under: it is reported by id.

The lost files are read without trusting them: a file that cannot be read,
or whose measures are not valid on this index's graph, is reported and left
out. After a recovery (not a dry run), the files read move to
``lost+found/recovered/``, so that a later recovery does not bring back
documents deleted in between; nothing is removed.
"""
import json
import os
import re

import h5py
import numpy as np

from ..errors import CorruptIndexError
from ..measures import as_measure_batch
from . import storage

RECORDS = storage.RECORDS


# Where recover() moves the lost files it has read.
RECOVERED_DIR = "recovered"
_LOST_NAME = re.compile(r"[0-9]{6,}\.h5(\.[0-9]+)?")


def lost_files(index_path):
    """The segment files of ``INDEX/lost+found/`` (as move_to_lost_found
    names them), sorted by name; other files there are not ours."""
    folder = os.path.join(index_path, storage.LOST_DIR)
    try:
        names = os.listdir(folder)
    except FileNotFoundError:
        return []
    return sorted(name for name in names if _LOST_NAME.fullmatch(name)
                  and os.path.isfile(os.path.join(folder, name)))


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
               "fields": None, "added_at": None}
        if records is not None:
            try:
                record = json.loads(records[row])
            except ValueError as exc:
                raise CorruptIndexError(f"{path}: the record of row {row} is not JSON "
                                        f"({exc})") from None
            if not isinstance(record, dict) or not isinstance(record.get("key"), str):
                raise CorruptIndexError(f"{path}: the record of row {row} has no key")
            doc.update(key=record["key"], label=record.get("label"),
                       fields=record.get("fields"), added_at=record.get("added_at"))
        out.append(doc)
    return out


def _later(doc, than):
    """Whether ``doc`` was added after ``than`` (both dicts with ``added_at``
    and ``id``; ISO times compare as text)."""
    return (doc["added_at"] or "", doc["id"]) > (than["added_at"] or "", than["id"])


def _left_out(doc, reason):
    return {"key": doc["key"], "id": doc["id"], "file": doc["file"], "reason": reason}


def recover_lost(index, dry_run=False, replace_newer=False):
    """The report of :meth:`SobolevIndex.recover` (``index`` open for
    writing): segment files no commit lists are moved to lost+found/ (with
    ``dry_run``, only read where they are), then the documents there are
    added as the module's docstring says."""
    unlisted = storage.stray_files(index.path, index._catalog.segment_files(),
                                   index._catalog.retired_files())[1]
    moved = [] if dry_run else storage.move_to_lost_found(index.path, unlisted)
    sources = [f"{storage.LOST_DIR}/{name}" for name in lost_files(index.path)]
    if dry_run:
        sources += [f"{storage.SEGMENT_DIR}/{name}" for name in unlisted]
    newest, skipped, unreadable, read = {}, [], [], []
    for source in sources:
        try:
            docs = read_lost_file(os.path.join(index.path, source), index.graph.n_nodes)
        except CorruptIndexError as exc:
            unreadable.append({"file": source, "reason": str(exc)})
            continue
        read.append(source)
        known = index._catalog.documents_of([doc["id"] for doc in docs]) if docs else {}
        for doc in docs:
            doc["file"] = source
            if doc["key"] is None:
                skipped.append(_left_out(doc, "its segment was written before segments kept "
                                              "keys: there is no key to restore it under"))
            elif doc["id"] in known and known[doc["id"]][0] == doc["key"]:
                deleted = known[doc["id"]][1]
                skipped.append(_left_out(doc, "deleted since (the catalog keeps its tombstone)"
                                         if deleted else "the catalog has this document"))
            elif doc["key"] not in newest or _later(doc, newest[doc["key"]]):
                if doc["key"] in newest:
                    skipped.append(_left_out(newest[doc["key"]], "an older version of a key "
                                                                 "restored from another file"))
                newest[doc["key"]] = doc
            else:
                skipped.append(_left_out(doc, "an older version of a key restored from "
                                              "another file"))
    live = index._catalog.live_documents(list(newest)) if newest else {}
    live_docs = index._catalog.documents_of([place[0] for place in live.values()])
    add, replace = [], []
    for key, doc in sorted(newest.items(), key=lambda item: item[1]["id"]):
        if key not in live:
            add.append(doc)
            continue
        current = {"id": live[key][0], "added_at": live_docs.get(live[key][0], (0, 0, None))[2]}
        if doc["added_at"] and current["added_at"] and _later(doc, current):
            if replace_newer:
                replace.append(doc)
            else:
                skipped.append(_left_out(doc, f"a live document has this key, added "
                                              f"{current['added_at']}; the lost version is newer "
                                              f"({doc['added_at']}): replace_newer "
                                              "(--replace-newer) restores it"))
        else:
            skipped.append(_left_out(doc, "a live document has this key"))
    if not dry_run:
        for docs, write in ((add, index.add), (replace, index.upsert)):
            if docs:
                write([(doc["nodes"], doc["masses"]) for doc in docs],
                      keys=[doc["key"] for doc in docs], labels=[doc["label"] for doc in docs],
                      fields=[doc["fields"] for doc in docs])
        _set_aside(index.path, read)
    return {"files": sources, "moved": moved, "dry_run": bool(dry_run),
            "restored": [{"key": doc["key"], "id": doc["id"], "file": doc["file"],
                          "replaced": replaced} for docs, replaced in ((add, False),
                                                                       (replace, True))
                         for doc in docs],
            "skipped": skipped, "unreadable": unreadable}


def _set_aside(index_path, sources):
    """Move the lost files read to lost+found/recovered/ (never over a file)."""
    if not sources:
        return
    target = os.path.join(index_path, storage.LOST_DIR, RECOVERED_DIR)
    os.makedirs(target, exist_ok=True)
    for source in sources:
        name = os.path.basename(source)
        final, suffix = name, 1
        while os.path.exists(os.path.join(target, final)):
            final, suffix = f"{name}.{suffix}", suffix + 1
        os.rename(os.path.join(index_path, source), os.path.join(target, final))
    storage.fsync_path(target, directory=True)
    storage.fsync_path(os.path.join(index_path, storage.LOST_DIR), directory=True)
