"""What :meth:`SobolevIndex.verify` checks: an index's files against its
catalog, reporting problems instead of raising.

The catalog is checked by SQLite's integrity check, for text that does not
decode, and for agreement between its own tables; the graph file and every
committed segment against their checksums; each document against the row
its catalog entry points at, and each segment row against the catalog; and
a sample of each segment's rows by rebuilding their features from the
stored measures and comparing them with the inverted file and the stored
row norms (and, in format 2, with the stored features, bit for bit).
Temporary files and the files of segments a merge replaced are orphans,
which repair removes; other segment files no commit lists may hold
documents of commits the catalog lost, and repair moves them to
lost+found/ instead.
"""
import contextlib
import os
import sqlite3

import numpy as np

from ..errors import ADVICE, CorruptIndexError
from ..measures import as_measure_batch, normalising_factors
from . import storage
from .catalog import Catalog
from .catalog_sql import checked_heads
from .csr import gather_rows
from .segment import Segment

# Rows per segment whose features are rebuilt from the raw measures.
VERIFY_SAMPLE = 64


def verify_index(path, catalog, trees, n_nodes, sample=VERIFY_SAMPLE, seed=0, repair=False,
                 problems=()):
    """The report of :meth:`SobolevIndex.verify` for the index at ``path``
    (its ``catalog``, its ``trees``, its graph's ``n_nodes``; ``trees`` is
    None when the graph file cannot be read, and ``problems`` says why).
    ``repair`` (the caller holds the writer lock) removes files nothing
    refers to and moves segment files no commit lists to lost+found/."""
    problems, repaired, moved = list(problems), [], []
    graph_path = os.path.join(path, storage.GRAPH_FILE)
    expected = catalog.meta_value("graph_checksum")
    if not os.path.exists(graph_path):
        if not any(graph_path in problem for problem in problems):
            problems.append(f"{graph_path} is missing")
    elif expected:
        found = storage.file_checksum(graph_path)
        if found != expected:
            problems.append(f"{graph_path} fails its checksum (the catalog records sha256 "
                            f"{storage.short_digest(expected)}, the file has "
                            f"{storage.short_digest(found)})")
    problems += [f"catalog: {problem}" for problem in catalog.integrity_problems()]
    try:
        snapshot = catalog.snapshot(lenient=True)
        retired = catalog.retired_files()
    except (sqlite3.DatabaseError, CorruptIndexError, ValueError) as exc:
        problems.append(f"catalog: its tables cannot be read ({exc})")
        return {"ok": False, "problems": problems, "orphans": [], "repaired": [],
                "unlisted": [], "moved": [], "segments": None, "documents": None,
                "deleted": None, "checked_rows": 0}
    problems += _catalog_consistency(snapshot)
    try:
        checked_heads(path, snapshot.meta, snapshot.roots)
    except CorruptIndexError as exc:
        problems.append(f"catalog: {exc}")
    try:
        problems += catalog.content_problems()
    except (sqlite3.DatabaseError, UnicodeDecodeError) as exc:
        problems.append(f"catalog: its documents cannot be read ({exc})")
    rng = np.random.default_rng(seed)
    checked = 0
    weight = None if trees is None else \
        np.concatenate([t.length for t in trees]).astype(np.float64)
    for row in snapshot.segments:
        data = _read_committed(path, catalog, row, len(snapshot.roots), problems)
        if data is None:
            continue
        if trees is not None:
            sampled = _check_sample(row["file"], data, trees, n_nodes, sample, rng, problems)
            if sampled is None:
                continue
            picks, fresh = sampled
            checked += len(picks)
            # Every array a search or a merge reads, checked as they check it
            # (the sample above compares values; this checks all of them).
            try:
                segment = Segment(row, data, np.ones(data.rows, dtype=bool))
                segment.measure_rows(n_nodes)
                inverted_file = segment.inverted_file(trees, weight)
                # Searches check the lists they read; verify checks them all.
                inverted_file.check_lists()
                inverted_file.check_dense()
            except CorruptIndexError as exc:
                problems.append(str(exc))
                continue
            problems += _inverted_problems(row["file"], segment, inverted_file, trees, picks,
                                           fresh)
        in_segment = snapshot.segment_of == row["id"]
        for doc_id, doc_row in zip(snapshot.doc_ids[in_segment], snapshot.row_of[in_segment]):
            if not 0 <= doc_row < data.rows or data.doc_ids[doc_row] != doc_id:
                problems.append(f"documents: document {doc_id} points at row {doc_row} of "
                                f"{row['file']}, which holds another document")
        # Each document's count of supports, as the catalog records it
        # (when the pointers are a plain list of integers; else they are
        # reported above).
        indptr = np.asarray(data.indptr)
        sizes = (np.diff(indptr.astype(np.int64)) if indptr.ndim == 1 and indptr.dtype.kind in "iu"
                 else np.zeros(0, dtype=np.int64))
        try:
            counts = catalog.query("SELECT id, row, n_supports FROM documents WHERE segment = ?",
                                   (row["id"],))
        except sqlite3.DatabaseError as exc:
            problems.append(f"catalog: the documents of {row['file']} cannot be read ({exc})")
            counts = []
        # At once when every value is an integer; one by one otherwise.
        table = np.asarray(counts) if counts else np.zeros((0, 3), dtype=np.int64)
        if table.dtype.kind == "i" and table.shape[1:] == (3,):
            inside = (table[:, 1] >= 0) & (table[:, 1] < len(sizes))
            wrong = inside.copy()
            wrong[inside] = table[inside, 2] != sizes[table[inside, 1]]
            counts = [counts[t] for t in np.flatnonzero(wrong)]
        for doc_id, doc_row, n_supports in counts:
            if isinstance(doc_row, int) and 0 <= doc_row < len(sizes) \
                    and n_supports != sizes[doc_row]:
                problems.append(f"documents: document {doc_id} has n_supports = "
                                f"{n_supports!r}; its measure in {row['file']} has "
                                f"{sizes[doc_row]}")
        # And the other way: every row of the segment is a document of the catalog.
        unlisted = np.setdiff1d(np.asarray(data.doc_ids), snapshot.doc_ids[in_segment])
        if len(unlisted):
            problems.append(f"segment {row['file']} holds {len(unlisted)} document(s) the "
                            f"catalog does not list there (ids {unlisted[:5].tolist()})")
    removable, unlisted = storage.stray_files(
        path, [r["file"] for r in snapshot.segments], retired)
    if unlisted and catalog.readonly:
        # A writer may be committing one of them, or have committed it after
        # this snapshot: look again, at the latest commit, while no commit
        # is under way.
        with storage.commits_paused(path):
            latest, latest_retired = catalog.latest_files()
            unlisted = [name for name in storage.stray_files(path, latest, latest_retired)[1]
                        if name in unlisted]
    if problems:
        # The catalog is in doubt: its list of retired files is too.
        removable = [name for name in removable if name.startswith(storage.TMP_PREFIX)]
    found = [storage.describe_segment_file(path, name) for name in unlisted]
    if repair:
        repaired = storage.remove_files(path, removable)
        moved = storage.move_to_lost_found(path, unlisted)
        for entry, where in zip(found, moved):
            entry["moved_to"] = where
    else:
        problems += [_unlisted_problem(entry) for entry in found]
    return {
        "ok": not problems, "problems": problems, "orphans": removable, "repaired": repaired,
        "unlisted": found, "moved": moved,
        "segments": len(snapshot.segments), "documents": int((~snapshot.deleted).sum()),
        "deleted": int(snapshot.deleted.sum()), "checked_rows": checked,
    }


def _unlisted_problem(entry):
    if entry["documents"] is None:
        held = entry["error"]
    elif entry["documents"]:
        held = (f"holds {entry['documents']} document(s), ids {entry['first_id']} to "
                f"{entry['last_id']}")
    else:
        held = "holds no documents"
    return (f"segment {entry['file']} is not in the catalog ({held}): a writer was killed "
            "before committing it, or the catalog lost commits (a deleted catalog.sqlite-wal "
            f"file), and then these are acknowledged documents. {ADVICE['repair']} "
            f"to {storage.LOST_DIR}/")


def verify_path(path, repair=False, sample=VERIFY_SAMPLE, seed=0, timeout=None):
    """The report of :meth:`SobolevIndex.verify_path`: verify the index at
    ``path`` without loading it, so that an index too damaged to open is
    reported on too."""
    damaged = None
    try:
        # The format, checked before the writer lock makes a file here.
        Catalog(path, readonly=True).close()
    except CorruptIndexError as exc:
        damaged = exc
    lock = storage.WriterLock(path, timeout) if repair and damaged is None else None
    catalog = None
    try:
        try:
            if damaged is not None:
                raise damaged
            catalog = Catalog(path, readonly=not repair)
        except CorruptIndexError as exc:
            return {"ok": False, "problems": [f"catalog: {exc}"], "orphans": [], "repaired": [],
                    "unlisted": [], "moved": [], "segments": None, "documents": None,
                    "deleted": None, "checked_rows": 0}
        problems, trees, n_nodes = [], None, None
        try:
            n_roots = len(catalog.heads().roots)
        except (CorruptIndexError, sqlite3.DatabaseError, ValueError):
            n_roots = None  # verify_index reports the catalog's own problems
        if n_roots is not None:
            try:
                graph, trees = storage.read_graph(path, n_roots)
                n_nodes = graph.n_nodes
            except CorruptIndexError as exc:
                problems.append(str(exc))
        # A reader pins the files of the commit it checks (see files_pinned).
        with contextlib.nullcontext() if repair else storage.files_pinned(path):
            return verify_index(path, catalog, trees, n_nodes, sample=sample, seed=seed,
                                repair=repair, problems=problems)
    finally:
        if catalog is not None:
            catalog.close()
        if lock is not None:
            lock.release()


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
    if not all(isinstance(meta.get(name), int)
               for name in ("next_doc_id", "next_segment_id")):
        return problems  # checked_heads names the bad value
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
        found = storage.file_checksum(os.path.join(path, storage.SEGMENT_DIR, name))
        if found != row["checksum"]:
            problems.append(f"segment {name} fails its checksum (the catalog records sha256 "
                            f"{storage.short_digest(row['checksum'])}, the file has "
                            f"{storage.short_digest(found)})")
            return None
        data = storage.read_segment(path, name, n_roots)
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
    measures and compare them with the stored ones. Returns the rows
    checked and their rebuilt features (a CSR matrix per root), or None if
    the measures themselves are invalid."""
    picks = np.sort(rng.choice(data.rows, min(sample, data.rows), replace=False))
    try:
        indptr, nodes, masses = gather_rows(data.indptr, (data.nodes, data.masses), picks)
        batch = as_measure_batch(indptr=indptr, nodes=nodes, masses=masses, n_nodes=n_nodes)
    except (ValueError, IndexError) as exc:
        # InvalidMeasureError, row pointers out of order (ValueError) or
        # pointing past the stored nodes (IndexError).
        problems.append(f"segment {name} stores an invalid measure: {exc}")
        return None
    rebuilt = []
    for r, tree in enumerate(trees):
        fresh = tree.features_of_batch(batch)
        rebuilt.append(fresh)
        if not data.features:
            continue  # formats 3 and 4: the features are not stored
        stored_indptr, stored_indices, stored_data = data.features[r]
        for j, i in enumerate(picks):
            a = slice(fresh.indptr[j], fresh.indptr[j + 1])
            b = slice(stored_indptr[i], stored_indptr[i + 1])
            if not (np.array_equal(fresh.indices[a], stored_indices[b])
                    and np.array_equal(fresh.data[a], stored_data[b])):
                problems.append(
                    f"segment {name} row {i}: stored features for root {r} differ "
                    "from features rebuilt from its measure")
    return picks, rebuilt


# Rows per pass when every row's features are rebuilt (to count postings).
VERIFY_CHUNK = 65536


def _inverted_problems(name, segment, inverted_file, trees, picks, fresh):
    """Compare a segment's (checked) inverted file with its measures. For
    every row: the stored normalising factors are 1 / the sum of the row's
    masses, each root has as many postings as the rows have posted
    features, and the stored row norms are those of the stored values. For
    rows ``picks``, whose features rebuilt from their measures are
    ``fresh`` (a CSR matrix per root): each feature is in its column's
    postings or in the dense block as its float32 value, and the dense
    block holds nothing else for them. What the structural checks cannot
    see: plausible values that are wrong."""
    inv = inverted_file
    problems = []
    n_nodes = trees[0].n_nodes
    if segment.data.row_scale is not None and segment.rows:
        indptr, _, masses = segment.measure_rows(n_nodes)
        stored = segment.row_scale(n_nodes)
        wrong = np.flatnonzero(stored != normalising_factors(indptr, masses))
        if len(wrong):
            problems.append(f"segment {name}: {len(wrong)} row(s) (the first: row {wrong[0]}) "
                            "have a stored normalising factor that is not 1 / the sum of "
                            "their masses")
    if inv.stored_groups_differ:
        problems.append(f"segment {name}: its stored dense-column groups are not those of the "
                        "index's trees (searches compute the group norms instead)")
    if inv.stored_group_norms is not None:
        for what, stored, again in zip(("coarse", "group"), inv.stored_group_norms,
                                       inv.group_norms(inv.norm_p)[::-1]):
            # Within one float32 step: pow may round differently elsewhere.
            step = np.spacing(np.maximum(np.abs(stored), np.abs(again)).astype(np.float32))
            if not (np.abs(stored.astype(np.float64) - again) <= step).all():
                problems.append(f"segment {name}: stored {what} row norms differ from those "
                                "of the dense block")
    if np.isfinite(inv.norm_p):
        expected = inv.power_sums(inv.norm_p)
        for what, stored, again in zip(("posted", "dense"), inv.stored_norms, expected):
            wrong = np.argwhere(~np.isclose(stored, again, rtol=1e-12, atol=0.0))
            if len(wrong):
                problems.append(f"segment {name}: {len(wrong)} stored {what} row norm(s) "
                                f"(the first: root {wrong[0][0]}, row {wrong[0][1]}) differ "
                                "from those of the stored values")
    nnz = 0
    for r, rows in enumerate(fresh):
        slots = r * inv.n_cols + np.arange(inv.n_cols)
        posted = 0
        for start in range(0, segment.rows, VERIFY_CHUNK):
            chunk = np.arange(start, min(segment.rows, start + VERIFY_CHUNK))
            _, indices, _ = segment.features_of_rows(chunk, trees[r])
            nnz += len(indices)
            posted += int(np.count_nonzero(inv.col_slot[r * inv.n_cols + indices] < 0))
        lists = inv.slot_list[slots]
        n_postings = int((inv.ptr[lists + 1] - inv.ptr[lists]).sum())
        if posted != n_postings:
            problems.append(f"segment {name}: root {r} has {n_postings} postings for "
                            f"{posted} posted features")
        dense_slots = np.arange(inv.dense_ptr[r], inv.dense_ptr[r + 1])
        for j, i in enumerate(picks):
            columns = rows.indices[rows.indptr[j]:rows.indptr[j + 1]]
            values = rows.data[rows.indptr[j]:rows.indptr[j + 1]]
            slot_of = inv.col_slot[slots[columns]]
            dense_row = np.zeros(len(dense_slots), dtype=np.float32)
            dense_row[slot_of[slot_of >= 0] - inv.dense_ptr[r]] = values[slot_of >= 0]
            ok = np.array_equal(np.asarray(inv.dense[i, dense_slots]), dense_row)
            for c, x in zip(columns[slot_of < 0], values[slot_of < 0]):
                ok = ok and _posting_of(inv, slots[c], int(i)) == np.float32(x)
            if not ok:
                problems.append(f"segment {name} row {i}: its inverted file for root {r} does "
                                "not hold the features rebuilt from its measure")
    if nnz != segment.nnz:
        problems.append(f"segment {name}: the catalog counts {segment.nnz} nonzero features, "
                        f"its measures give {nnz}")
    return problems


def _posting_of(inv, slot, row):
    """The float32 value of ``row`` in the posting list of ``slot``, or None."""
    lst = int(inv.slot_list[slot])
    lo, hi = int(inv.ptr[lst]), int(inv.ptr[lst + 1])
    starts = inv.block_start
    if starts is not None:
        block = row // inv.block_rows
        lo, hi = int(starts[lst, block]), int(starts[lst, block + 1])
    offsets = inv.post_rows[lo:hi]
    at = int(np.searchsorted(offsets, row & 0xFFFF))
    if at < len(offsets) and offsets[at] == (row & 0xFFFF):
        return inv.post_values[lo + at]
    return None
