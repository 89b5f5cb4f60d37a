"""What :meth:`SobolevIndex.verify` checks: an index's files against its
catalog, reporting problems instead of raising.

The catalog is checked by SQLite's integrity check, for text that does not
decode, and for agreement between its own tables; the graph file and every
committed segment against their checksums; each document against the row
its catalog entry points at, and each segment row against the catalog; and
a sample of each segment's rows by rebuilding their features from the
stored measures, bit for bit. Files that no commit refers to are orphans.
"""
import os
import sqlite3

import numpy as np

from ..errors import CorruptIndexError
from ..measures import as_measure_batch
from . import storage
from .csr import gather_rows

# Rows per segment whose features are rebuilt from the raw measures.
VERIFY_SAMPLE = 64


def verify_index(path, catalog, trees, n_nodes, sample=VERIFY_SAMPLE, seed=0, repair=False):
    """The report of :meth:`SobolevIndex.verify` for the index at ``path``
    (its ``catalog``, its ``trees``, its graph's ``n_nodes``); ``repair``
    removes orphan files (the caller holds the writer lock)."""
    problems, repaired = [], []
    graph_path = os.path.join(path, storage.GRAPH_FILE)
    expected = catalog.meta_value("graph_checksum")
    if not os.path.exists(graph_path):
        problems.append(f"{graph_path} is missing")
    elif expected and storage.file_checksum(graph_path) != expected:
        problems.append(f"{graph_path} fails its checksum")
    problems += [f"catalog: {problem}" for problem in catalog.integrity_problems()]
    try:
        snapshot = catalog.snapshot()
    except (sqlite3.DatabaseError, CorruptIndexError, ValueError) as exc:
        problems.append(f"catalog: its tables cannot be read ({exc})")
        return {"ok": False, "problems": problems, "orphans": [], "repaired": [],
                "segments": None, "documents": None, "deleted": None, "checked_rows": 0}
    problems += _catalog_consistency(snapshot)
    rng = np.random.default_rng(seed)
    checked = 0
    for row in snapshot.segments:
        data = _read_committed(path, catalog, row, len(trees), problems)
        if data is None:
            continue
        sampled = _check_sample(row["file"], data, trees, n_nodes, sample, rng, problems)
        if sampled is None:
            continue
        checked += sampled
        in_segment = snapshot.segment_of == row["id"]
        for doc_id, doc_row in zip(snapshot.doc_ids[in_segment], snapshot.row_of[in_segment]):
            if doc_row >= data.rows or data.doc_ids[doc_row] != doc_id:
                problems.append(f"document {doc_id} points at row {doc_row} of "
                                f"{row['file']}, which holds another document")
        # And the other way: every row of the segment is a document of the catalog.
        unlisted = np.setdiff1d(np.asarray(data.doc_ids), snapshot.doc_ids[in_segment])
        if len(unlisted):
            problems.append(f"segment {row['file']} holds {len(unlisted)} document(s) the "
                            f"catalog does not list there (ids {unlisted[:5].tolist()})")
    orphans = storage.orphan_files(path, [r["file"] for r in snapshot.segments])
    if repair and orphans:
        storage.remove_files(path, orphans)
        repaired = orphans
    return {
        "ok": not problems, "problems": problems, "orphans": orphans, "repaired": repaired,
        "segments": len(snapshot.segments), "documents": int((~snapshot.deleted).sum()),
        "deleted": int(snapshot.deleted.sum()), "checked_rows": checked,
    }


def _catalog_consistency(snapshot):
    """Problems between the catalog's own tables: documents pointing at
    segments it does not list, row counts, and id counters behind the ids
    in use (the next add would reuse an id)."""
    problems = []
    rows_of = {row["id"]: row["rows"] for row in snapshot.segments}
    listed = np.isin(snapshot.segment_of, list(rows_of))
    for doc_id, seg in zip(snapshot.doc_ids[~listed][:5], snapshot.segment_of[~listed][:5]):
        problems.append(f"documents: document {doc_id} points at segment {seg}, which the "
                        "segments table does not list")
    for seg_id, n_rows in rows_of.items():
        n_docs = int(np.count_nonzero(snapshot.segment_of == seg_id))
        if n_docs != n_rows:
            problems.append(f"segments: segment {seg_id} has {n_rows} rows but {n_docs} "
                            "documents point at it")
    meta = snapshot.meta
    if len(snapshot.doc_ids) and int(meta.get("next_doc_id", 0)) <= int(snapshot.doc_ids.max()):
        problems.append(f"meta: next_doc_id {meta.get('next_doc_id')} is not above the largest "
                        f"document id {int(snapshot.doc_ids.max())}")
    if rows_of and int(meta.get("next_segment_id", 0)) <= max(rows_of):
        problems.append(f"meta: next_segment_id {meta.get('next_segment_id')} is not above the "
                        f"largest segment id {max(rows_of)}")
    return problems


def _read_committed(path, catalog, row, n_roots, problems):
    """The segment of catalog ``row``, read and checked against its checksum
    and row count; None (with the problem noted) if that fails."""
    name = row["file"]
    if not os.path.exists(os.path.join(path, storage.SEGMENT_DIR, name)):
        problems.append(f"segment {name} is missing")
        return None
    try:
        data = storage.read_segment(path, name, n_roots, row["checksum"])
    except FileNotFoundError:
        # Merged away after our snapshot: only a problem if still committed.
        if catalog.existing_segments([row["id"]]):
            problems.append(f"segment {name} is missing")
        return None
    except CorruptIndexError as exc:
        problems.append(str(exc))
        return None
    if data.rows != row["rows"]:
        problems.append(f"segment {name} has {data.rows} rows; the catalog says {row['rows']}")
        return None
    return data


def _check_sample(name, data, trees, n_nodes, sample, rng, problems):
    """Rebuild the features of up to ``sample`` rows of a segment from its
    measures and compare them with the stored ones. Returns the number of
    rows checked, or None if the measures themselves are invalid."""
    picks = np.sort(rng.choice(data.rows, min(sample, data.rows), replace=False))
    try:
        indptr, nodes, masses = gather_rows(data.indptr, (data.nodes, data.masses), picks)
        batch = as_measure_batch(indptr=indptr, nodes=nodes, masses=masses, n_nodes=n_nodes)
    except (ValueError, IndexError) as exc:
        # InvalidMeasureError, row pointers out of order (ValueError) or
        # pointing past the stored nodes (IndexError).
        problems.append(f"segment {name} stores an invalid measure: {exc}")
        return None
    for r, tree in enumerate(trees):
        fresh = tree.features_of_batch(batch)
        stored_indptr, stored_indices, stored_data = data.features[r]
        for j, i in enumerate(picks):
            a = slice(fresh.indptr[j], fresh.indptr[j + 1])
            b = slice(stored_indptr[i], stored_indptr[i + 1])
            if not (np.array_equal(fresh.indices[a], stored_indices[b])
                    and np.array_equal(fresh.data[a], stored_data[b])):
                problems.append(
                    f"segment {name} row {i}: stored features for root {r} differ "
                    "from features rebuilt from its measure")
    return len(picks)
