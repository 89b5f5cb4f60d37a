"""Export an index as JSON lines, and build an identical index from such a file.

An export is the documented backup and migration path: every live document
with everything a rebuild needs, in a text file any tool can read. Line 1
is a header (a JSON object) describing the source index: the export's
format and version, the package version, the kind of index, the number of
documents, the graph (node and edge counts, the checksum of its file and
its parameters), p, the roots and their weights eta, the meta values the
ingest layer keeps (text settings, build recipe, point-set kind) and, for a
text index, the words table (word, node, document frequency). Every other
line is one live document, in insertion order::

    {"key": ..., "label": ..., "fields": {...}, "text": ..., "nodes": [...],
     "masses": [...], "added_at": ...}

``text`` is there for a text index whose documents kept their text (it is
the stored ``fields["text"]``, taken out of the fields). ``masses`` are the
masses as the index stores them (not normalised; the index normalises), so
that they come back bit for bit: JSON numbers written by Python's ``repr``
of a float read back to the same float. ``added_at`` is informational: a
rebuilt index records its own time.

The graph file is not exported (it holds the node coordinates and the
shortest-path trees, which JSON would not keep exactly); a rebuild takes it
from an index of the same graph (``graph_from``: the source itself, or a
copy of it), whose ``graph.h5`` must have the checksum the header records.
Documents are added in the order of the file, so the rebuilt index breaks
ties in search as the source did, and its graph, roots, eta and p are the
source's: searches give identical keys and distances.
"""
import contextlib
import io
import json
import math
import os
import sys

import numpy as np

from .._version import __version__
from ..errors import ADVICE, CorruptIndexError, SobolevIndexError
from ..index import SobolevIndex, storage
from ..measures import as_measure_batch
from .fill import (
    TEXT_META,
    add_in_batches,
    check_fields,
    check_new_output,
    create_and_fill,
    index_kind,
    label_text,
)
from .words import add_words, read_words

__all__ = ["EXPORT_FORMAT", "EXPORT_VERSION", "StoredMeasures", "build_from_export",
           "export_header", "export_index", "live_documents", "read_export_header"]

#: The header's ``"format"``: a file with another format is not an export.
EXPORT_FORMAT = "sobolev-index-export"
#: The header's ``"format_version"``: a higher version was written by a
#: newer release, and is refused.
EXPORT_VERSION = 1
# The meta names the index layer writes for itself (SobolevIndex.create, the
# commit protocol); every other meta value belongs to a layer above and is
# exported as it is, so that nothing a build recorded is lost.
INDEX_META = frozenset({
    "format", "format_version", "created_at", "p", "n_nodes", "n_edges", "dim", "graph",
    "graph_checksum", "next_doc_id", "next_segment_id", "retired_files",
})
# Documents read from the catalog per query while exporting.
EXPORT_CHUNK = 10_000
# The names a document line may have.
RECORD_NAMES = frozenset({"key", "label", "fields", "text", "nodes", "masses", "added_at"})
HEADER_NAMES = ("format", "format_version", "package_version", "kind", "documents", "graph",
                "p", "roots", "eta", "meta", "words")


def _silent(stage, done, total):
    pass


# ------------------------------------------------------------------ export
def check_export_output(out):
    """``out`` as a path for :func:`export_index`, checked before any work:
    a name that does not exist yet, in a folder that does, or ``"-"`` for
    standard output."""
    out = os.fspath(out)
    if out == "-":
        return out
    return check_new_output(out, "an export")


def _p_json(p):
    return "inf" if math.isinf(p) else float(p)


def _graph_checksum(index):
    """The SHA-256 of the index's graph file as recorded when it was written
    (of the file itself, for a catalog that does not record it)."""
    recorded = index.catalog.meta_value("graph_checksum")
    if isinstance(recorded, str):
        return recorded
    return storage.file_checksum(os.path.join(index.path, storage.GRAPH_FILE))


def export_header(index, kind):
    """Describe an index as the first line of its export does.

    The header holds what a rebuild checks its ``graph_from`` against (the
    graph's node and edge counts, its checksum and parameters, p, the roots
    and eta), the number of live documents, and the ingest layer's meta
    values and words table (see :func:`export_index`).

    Parameters
    ----------
    index : SobolevIndex
        The index, open for reading or writing.
    kind : {"text", "clouds", "diagrams"} or None
        What the index was built from (None for plain measures), as the
        catalog records it; ``"text"`` exports the words table.

    Returns
    -------
    dict
        ``format``, ``format_version``, ``package_version``, ``kind``,
        ``documents``, ``graph`` (``n_nodes``, ``n_edges``, ``checksum``,
        ``params``), ``p`` (a number or ``"inf"``), ``roots``, ``eta``,
        ``meta`` and ``words`` (``[word, node, df]`` rows for a text index,
        else None).

    Examples
    --------
    >>> import numpy as np
    >>> from sobolev_index.ingest.pointsets import PointSet
    >>> from sobolev_index.ingest.pointindex import build_point_index
    >>> rng = np.random.default_rng(0)
    >>> clouds = [PointSet(f"c{i}", rng.normal(i % 2, size=(6, 2)), label="ab"[i % 2])
    ...           for i in range(4)]
    >>> from sobolev_index.ingest.export import export_header
    >>> index, _ = build_point_index("header.idx", clouds, nodes=8, seed=0)
    >>> header = export_header(index, "clouds")
    >>> header["format"], header["kind"], header["documents"], header["graph"]["n_nodes"]
    ('sobolev-index-export', 'clouds', 4, 8)
    >>> header["p"], header["meta"]["points"], header["words"]
    (1.0, {'kind': 'clouds', 'dim': 2}, None)
    >>> index.close()
    """
    catalog = index.catalog
    meta = {name: value for name, value in catalog.query("SELECT name, value FROM meta")
            if name not in INDEX_META}
    meta = {name: json.loads(value) for name, value in sorted(meta.items())}
    words = None
    if kind == "text":
        words = [[word, int(node), int(df)] for word, (node, df) in read_words(catalog).items()]
    return {
        "format": EXPORT_FORMAT,
        "format_version": EXPORT_VERSION,
        "package_version": __version__,
        "kind": kind,
        "documents": len(index),
        "graph": {"n_nodes": int(index.graph.n_nodes), "n_edges": int(index.graph.n_edges),
                  "checksum": _graph_checksum(index), "params": index.graph.params},
        "p": _p_json(index.p),
        "roots": [int(r) for r in index.roots],
        "eta": [float(e) for e in index.eta],
        "meta": meta,
        "words": words,
    }


class StoredMeasures:
    """The stored measures of an index's committed segments, for an export.

    Each segment file is read (memory-mapped) when a document first needs
    it. An export reads every segment whole, so each file is checked
    against its checksum first: a damaged one is a
    :class:`~sobolev_index.errors.CorruptIndexError`, not a copy of the
    damage. The segments are those the catalog lists when the object is
    made.

    Parameters
    ----------
    index : SobolevIndex
        The index, open for reading or writing.

    Attributes
    ----------
    path : str
        The index's directory.
    n_roots : int
        The number of the index's roots.
    files : dict
        Segment id to segment file name.
    checksums : dict
        Segment id to the checksum the catalog records for its file.
    loaded : dict
        Segment id to the segment data read so far.

    See Also
    --------
    live_documents : Where the documents' segments and rows come from.

    Examples
    --------
    >>> import numpy as np
    >>> from sobolev_index.ingest.pointsets import PointSet
    >>> from sobolev_index.ingest.pointindex import build_point_index
    >>> rng = np.random.default_rng(0)
    >>> clouds = [PointSet(f"c{i}", rng.normal(i % 2, size=(6, 2)), label="ab"[i % 2])
    ...           for i in range(4)]
    >>> from sobolev_index.ingest.export import StoredMeasures, live_documents
    >>> index, _ = build_point_index("stored.idx", clouds, nodes=8, seed=0)
    >>> measures = StoredMeasures(index)
    >>> doc_id, key, segment, row = next(live_documents(index.catalog))[:4]
    >>> nodes, masses = measures.measure(doc_id, segment, row)
    >>> key, nodes, [round(m, 4) for m in masses]
    ('c0', [1, 3, 5], [0.1667, 0.1667, 0.6667])
    >>> index.close()
    """

    def __init__(self, index):
        self.path = index.path
        self.n_roots = len(index.roots)
        rows = index.catalog.query("SELECT id, file, checksum FROM segments")
        self.files = {seg_id: file for seg_id, file, _ in rows}
        self.checksums = {seg_id: checksum for seg_id, _, checksum in rows}
        self.loaded = {}

    def measure(self, doc_id, segment_id, row):
        """Read one document's stored measure.

        Parameters
        ----------
        doc_id : int
            The document's id in the catalog.
        segment_id : int
            The id of the segment that holds it.
        row : int
            Its row in that segment.

        Returns
        -------
        nodes : list of int
            The node ids, as stored.
        masses : list of float
            The masses on them, as stored (not normalised), as Python floats
            whose JSON text reads back to the same float64.

        Raises
        ------
        CorruptIndexError
            If the catalog does not list the segment, its file fails its
            checksum, or the segment does not hold the document at ``row``.
        SobolevIndexError
            If the segment file is gone: a writer merged it away after the
            catalog was read.
        """
        data = self.loaded.get(segment_id)
        if data is None:
            if segment_id not in self.files:
                raise CorruptIndexError(
                    f"{self.path}: document {doc_id} is in segment {segment_id}, which the "
                    f"catalog does not list; {ADVICE['verify']} restore from a backup")
            try:
                data = storage.read_segment(self.path, self.files[segment_id], self.n_roots,
                                            self.checksums[segment_id])
            except FileNotFoundError:
                raise SobolevIndexError(
                    f"{self.path}: segment file {self.files[segment_id]} is gone: a writer "
                    "merged it away after this export read the catalog; run the export "
                    "again") from None
            self.loaded[segment_id] = data
        if not (0 <= row < data.rows and int(data.doc_ids[row]) == doc_id):
            raise CorruptIndexError(
                f"{self.path}: segment {self.files[segment_id]} does not hold document "
                f"{doc_id} at row {row}, where the catalog puts it; {ADVICE['verify']} restore "
                "from a backup")
        start, stop = int(data.indptr[row]), int(data.indptr[row + 1])
        # Python ints and floats: json writes a float as its shortest repr,
        # which reads back to the same float64.
        return (np.asarray(data.nodes[start:stop], dtype=np.int64).tolist(),
                np.asarray(data.masses[start:stop], dtype=np.float64).tolist())


def live_documents(catalog):
    """Go through the live documents of a catalog in insertion order.

    The rows are read ``EXPORT_CHUNK`` (10,000) at a time, so memory does
    not grow with the index.

    Parameters
    ----------
    catalog : Catalog
        An index's catalog (:attr:`SobolevIndex.catalog
        <sobolev_index.SobolevIndex.catalog>`).

    Yields
    ------
    tuple
        ``(id, key, segment, row, label, fields, added_at)`` of each live
        document, in id (insertion) order; ``fields`` is the stored JSON
        text, or None.

    Examples
    --------
    >>> import numpy as np
    >>> from sobolev_index.ingest.pointsets import PointSet
    >>> from sobolev_index.ingest.pointindex import build_point_index
    >>> rng = np.random.default_rng(0)
    >>> clouds = [PointSet(f"c{i}", rng.normal(i % 2, size=(6, 2)), label="ab"[i % 2])
    ...           for i in range(4)]
    >>> from sobolev_index.ingest.export import live_documents
    >>> index, _ = build_point_index("live.idx", clouds, nodes=8, seed=0)
    >>> index.delete(["c1"])
    1
    >>> [(doc_id, key, label) for doc_id, key, _, _, label, _, _ in live_documents(index.catalog)]
    [(1, 'c0', 'a'), (3, 'c2', 'a'), (4, 'c3', 'b')]
    >>> index.close()
    """
    last = 0
    while True:
        rows = catalog.query(
            "SELECT id, key, segment, row, label, fields, added_at FROM documents "
            "WHERE deleted = 0 AND id > ? ORDER BY id LIMIT ?", (last, EXPORT_CHUNK))
        yield from rows
        if len(rows) < EXPORT_CHUNK:
            return
        last = rows[-1][0]


def _record(doc, measures, kind):
    doc_id, key, segment_id, row, label, fields, added_at = doc
    nodes, masses = measures.measure(int(doc_id), int(segment_id), int(row))
    fields = json.loads(fields) if fields else None
    record = {"key": key, "label": label, "fields": fields}
    if kind == "text" and isinstance(fields, dict) and isinstance(fields.get("text"), str):
        record["text"] = fields.pop("text")
        record["fields"] = fields or None
    record.update(nodes=nodes, masses=masses, added_at=added_at)
    return record


def _line(value):
    return json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":")) + "\n"


def export_index(index_or_path, out, progress=None):
    """Write every live document of an index to a file as JSON lines.

    Line 1 is a header describing the index (graph checksum, p, roots, eta,
    text settings and recipe, the words table of a text index, see
    :func:`export_header`), then one line per document in insertion order
    with its key, label, fields, stored text, and its measure as ``nodes``
    and ``masses`` exactly as stored (see the module's docstring).
    :func:`build_from_export` rebuilds an identical index from it.

    A file is written under a temporary name beside it and renamed into
    place once complete and flushed to disk, so a failed or interrupted
    export leaves nothing. A stream gets its lines as they are made: a
    reader such as ``build --from-export -`` sees a failed export as an
    incomplete file, which it refuses.

    Parameters
    ----------
    index_or_path : SobolevIndex, str or path-like
        The index (open for reading or writing; a reader exports its
        snapshot), or the path of one (opened for reading and closed again).
    out : str, path-like or file object
        A file name that does not exist yet, in a folder that does; ``"-"``
        for standard output (written as UTF-8); or an open text file.
    progress : callable or None, default=None
        Called as ``progress("exporting", done, total)`` as documents are
        written; None reports nothing.

    Returns
    -------
    dict
        ``path`` (the file's absolute path; None for a stream),
        ``documents`` (how many were written), ``bytes`` (the file's size,
        or the characters written to a stream), ``kind`` and ``words`` (the
        size of a text index's words table, else None).

    Raises
    ------
    ValueError
        If ``out`` exists, or its folder does not.
    CorruptIndexError
        If a segment file fails its checksum, or the catalog and the
        segments disagree (the export is then not written).
    NotAnIndexError
        If ``index_or_path`` is a path that holds no index.

    See Also
    --------
    build_from_export : The index back from its export.
    read_export_header : The header of an export file.

    Examples
    --------
    >>> import numpy as np
    >>> from sobolev_index.ingest.pointsets import PointSet
    >>> from sobolev_index.ingest.pointindex import build_point_index
    >>> rng = np.random.default_rng(0)
    >>> clouds = [PointSet(f"c{i}", rng.normal(i % 2, size=(6, 2)), label="ab"[i % 2])
    ...           for i in range(4)]
    >>> from sobolev_index.ingest.export import export_index
    >>> index, _ = build_point_index("exported.idx", clouds, nodes=8, seed=0)
    >>> index.close()
    >>> report = export_index("exported.idx", "exported.jsonl")
    >>> report["documents"], report["kind"], report["words"]
    (4, 'clouds', None)
    >>> import json
    >>> with open("exported.jsonl", encoding="utf-8") as f:
    ...     lines = [json.loads(line) for line in f]
    >>> lines[0]["format"], lines[0]["documents"]
    ('sobolev-index-export', 4)
    >>> lines[1]["key"], lines[1]["label"], lines[1]["nodes"]
    ('c0', 'a', [1, 3, 5])
    """
    if not hasattr(out, "write"):
        out = check_export_output(out)
    progress = progress or _silent
    if isinstance(index_or_path, SobolevIndex):
        return _export(index_or_path, out, progress)
    with SobolevIndex.open(index_or_path, mode="r") as index:
        return _export(index, out, progress)


def _write_export(index, kind, header, handle, progress):
    """Every line of the export to ``handle``; returns the documents written."""
    total = header["documents"]
    written = 0
    progress("exporting", 0, total)
    size = handle.write(_line(header))
    measures = StoredMeasures(index)
    # Pinned: no writer deletes a segment file of the latest commit while
    # its measures are read (as a reader loading a snapshot).
    with storage.files_pinned(index.path):
        for doc in live_documents(index.catalog):
            size += handle.write(_line(_record(doc, measures, kind)))
            written += 1
            if written % 1000 == 0:
                progress("exporting", written, total)
    if written != total:
        raise CorruptIndexError(
            f"{index.path}: the catalog lists {written} live documents but the index "
            f"counts {total}; run verify()")
    progress("exporting", written, total)
    return written, size


def _export(index, out, progress):
    kind = index_kind(index)
    header = export_header(index, kind)
    words = None if header["words"] is None else len(header["words"])
    if out == "-":
        # UTF-8 whatever the locale says (build_from_export reads UTF-8),
        # through stdout's own bytes; stdout itself stays open.
        sys.stdout.flush()
        raw = getattr(sys.stdout, "buffer", None)
        if raw is None:  # a text stream with no bytes below it (StringIO)
            return _export(index, sys.stdout, progress)
        handle = io.TextIOWrapper(raw, encoding="utf-8", newline="\n")
        try:
            return _export(index, handle, progress)
        finally:
            handle.flush()
            handle.detach()
    if hasattr(out, "write"):
        written, size = _write_export(index, kind, header, out, progress)
        out.flush()
        return {"path": None, "documents": written, "bytes": size, "kind": kind, "words": words}
    partial = os.path.join(os.path.dirname(os.path.abspath(out)),
                           f".{os.path.basename(out)}.partial-{os.getpid()}")
    try:
        with open(partial, "x", encoding="utf-8") as handle:
            written, _ = _write_export(index, kind, header, handle, progress)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(partial, out)
        storage.fsync_path(os.path.dirname(os.path.abspath(out)), directory=True)
    except BaseException:
        if os.path.exists(partial):
            os.remove(partial)
        raise
    return {"path": os.path.abspath(out), "documents": written, "bytes": os.path.getsize(out),
            "kind": kind, "words": words}


# ------------------------------------------------------------------ import
def _bad(path, lineno, message):
    """A ValueError naming the export file's line: "FILE line N is ...",
    or "FILE line N: 'name' is ..." for what a part of the line holds."""
    joint = " " if message.startswith(("is ", "has ", "nests ")) else ": "
    return ValueError(f"{path} line {lineno}{joint}{message}")


def _is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _is_node(value):
    # An int64 (JSON integers have no bound; the range is checked with the
    # graph's, with the measures).
    return _is_int(value) and abs(value) < 2**63


def _is_mass(value):
    # A number a float64 holds (JSON integers have no bound).
    return _is_number(value) and (isinstance(value, float) or abs(value) <= 1e308)


def _parse_line(line, path, lineno):
    try:
        value = json.loads(line)
    except json.JSONDecodeError as exc:
        raise _bad(path, lineno, f"is not JSON ({exc.msg} at column {exc.colno}); expected one "
                   "JSON object per line, as `export` writes") from None
    except RecursionError:
        raise _bad(path, lineno, "nests objects and lists too deeply to be read") from None
    if not isinstance(value, dict):
        raise _bad(path, lineno, f"is a JSON {type(value).__name__}; expected an object")
    return value


def _check_header(header, path):
    """The header line, checked: what it must hold, in the types a rebuild
    uses. A ValueError names what is wrong on line 1."""
    def bad(message):
        return _bad(path, 1, message)

    if header.get("format") != EXPORT_FORMAT:
        raise bad(f"is not a sobolev-index export header (its 'format' is "
                  f"{header.get('format')!r:.60}; expected {EXPORT_FORMAT!r}); write the file "
                  "with `sobolev-index export`")
    version = header.get("format_version")
    if not _is_int(version) or version < 1:
        raise bad(f"'format_version' is {version!r}; expected an integer >= 1")
    if version > EXPORT_VERSION:
        raise bad(f"the export has format version {version}, written by a newer release "
                  f"(sobolev-index {header.get('package_version')}); this release reads version "
                  f"{EXPORT_VERSION}")
    missing = [name for name in HEADER_NAMES if name not in header]
    if missing:
        raise bad(f"the header has no {', '.join(map(repr, missing))}; expected {HEADER_NAMES}")
    graph = header["graph"]
    if not (isinstance(graph, dict) and _is_int(graph.get("n_nodes"))
            and isinstance(graph.get("checksum"), str)):
        raise bad(f"'graph' is {graph!r:.80}; expected an object with 'n_nodes' (an integer) "
                  "and 'checksum' (text)")
    if not _is_int(header["documents"]) or header["documents"] < 0:
        raise bad(f"'documents' is {header['documents']!r}; expected an integer >= 0")
    p = header["p"]
    if not (p == "inf" or (_is_number(p) and p >= 1)):
        raise bad(f"'p' is {p!r}; expected a number >= 1 or 'inf'")
    roots, eta = header["roots"], header["eta"]
    if not (isinstance(roots, list) and roots and all(_is_int(r) for r in roots)):
        raise bad(f"'roots' is {roots!r:.80}; expected a non-empty list of node ids")
    if not (isinstance(eta, list) and len(eta) == len(roots) and all(map(_is_number, eta))):
        raise bad(f"'eta' is {eta!r:.80}; expected one number per root ({len(roots)})")
    if not isinstance(header["meta"], dict):
        raise bad(f"'meta' is {header['meta']!r:.60}; expected an object")
    kind = header["kind"]
    words = header["words"]
    if kind == "text":
        if TEXT_META not in header["meta"]:
            raise bad(f"the export is of a text index but 'meta' has no {TEXT_META!r} settings")
        if not isinstance(words, list):
            raise bad(f"'words' is {words!r:.60}; a text index's export needs its words table "
                      "as a list of [word, node, df]")
        for i, row in enumerate(words):
            if not (isinstance(row, list) and len(row) == 3 and isinstance(row[0], str)
                    and _is_int(row[1]) and 0 <= row[1] < graph["n_nodes"] and _is_int(row[2])
                    and row[2] >= 0):
                raise bad(f"words[{i}] is {row!r:.60}; expected [word, node, df] with a node "
                          f"in 0..{graph['n_nodes'] - 1} and a count df >= 0")
    elif words is not None:
        raise bad(f"'words' is given, but the export is of a {kind or 'plain measures'} index; "
                  "only a text index has a words table")
    return header


def read_export_header(export_path):
    """Read the header (line 1) of an export file, checked.

    Parameters
    ----------
    export_path : str or path-like
        The export file (see :func:`export_index`), or ``"-"`` for standard
        input (only its first line is read).

    Returns
    -------
    dict
        The header, as :func:`export_header` made it.

    Raises
    ------
    ValueError
        If the file does not exist or is a directory, its first line is
        empty or not JSON, or the header is not an export's (another
        ``format``, a ``format_version`` above :data:`EXPORT_VERSION`, a
        name missing or of the wrong type); the message names line 1 and
        what was expected.

    Examples
    --------
    >>> import numpy as np
    >>> from sobolev_index.ingest.pointsets import PointSet
    >>> from sobolev_index.ingest.pointindex import build_point_index
    >>> rng = np.random.default_rng(0)
    >>> clouds = [PointSet(f"c{i}", rng.normal(i % 2, size=(6, 2)), label="ab"[i % 2])
    ...           for i in range(4)]
    >>> from sobolev_index.ingest.export import export_index, read_export_header
    >>> index, _ = build_point_index("headed.idx", clouds, nodes=8, seed=0)
    >>> _ = export_index(index, "headed.jsonl")
    >>> index.close()
    >>> header = read_export_header("headed.jsonl")
    >>> header["kind"], header["documents"], header["graph"]["n_nodes"], header["p"]
    ('clouds', 4, 8, 1.0)
    >>> with open("not-an-export.jsonl", "w", encoding="utf-8") as f:
    ...     print('{"key": "a"}', file=f)
    >>> read_export_header("not-an-export.jsonl")
    Traceback (most recent call last):
        ...
    ValueError: not-an-export.jsonl line 1 is not a sobolev-index export header ...
    """
    export_path = os.fspath(export_path)
    with _open_export(export_path) as handle:
        first = handle.readline()
    if not first.strip():
        raise _bad(export_path, 1, "is empty; expected the export's header line")
    return _check_header(_parse_line(first, export_path, 1), export_path)


def _open_export(path):
    if path == "-":
        # Standard input's bytes, decoded here whatever the locale says; not
        # closed afterwards (it is not ours).
        raw = getattr(sys.stdin, "buffer", None)
        if raw is None:
            return contextlib.nullcontext(sys.stdin)
        return contextlib.closing(_Unclosed(io.TextIOWrapper(raw, encoding="utf-8",
                                                              errors="strict", newline="")))
    if os.path.isdir(path):
        raise ValueError(f"export file {path} is a directory; expected a file written by "
                         "`sobolev-index export`")
    if not os.path.exists(path):
        raise ValueError(f"export file {path} does not exist")
    # A pipe or FIFO is read once, as a file is.
    return open(path, encoding="utf-8", errors="strict", newline="")


class _Unclosed:
    """A text wrapper of stdin whose close() leaves stdin open."""

    def __init__(self, wrapper):
        self.wrapper = wrapper

    def __getattr__(self, name):
        return getattr(self.wrapper, name)

    def __iter__(self):
        return iter(self.wrapper)

    def close(self):
        self.wrapper.detach()


def _read_documents(handle, path, kind, progress, total):
    """Every document line after the header, checked; returns (keys,
    labels, fields, line numbers, indptr, nodes, masses)."""
    keys, labels, fields, lines, lengths = [], [], [], [], []
    node_parts, mass_parts = [], []
    seen = {}
    for lineno, line in enumerate(handle, 2):
        if not line.strip():
            continue
        record = _parse_line(line, path, lineno)
        unknown = sorted(set(record) - RECORD_NAMES)
        if unknown:
            raise _bad(path, lineno, f"has {', '.join(map(repr, unknown))}; expected only "
                       f"{', '.join(sorted(RECORD_NAMES))}")
        key = record.get("key")
        if not isinstance(key, str) or not key:
            raise _bad(path, lineno, f"'key' is {key!r:.60}; expected a non-empty string")
        if key in seen:
            raise _bad(path, lineno, f"key {key!r} appears twice (first on line {seen[key]}); "
                       "keys are unique")
        seen[key] = lineno
        where = f"{path} line {lineno}"
        label = record.get("label")
        if label is not None and not isinstance(label, str):
            raise _bad(path, lineno, f"'label' is {label!r:.60}; expected a string or null")
        label = label_text(label, where)
        item = record.get("fields")
        if item is not None and not isinstance(item, dict):
            raise _bad(path, lineno, f"'fields' is {item!r:.60}; expected an object or null")
        if "text" in record:
            text = record["text"]
            if kind != "text":
                raise _bad(path, lineno, "has 'text', but the export is of a "
                           f"{kind or 'plain measures'} index; only a text index keeps texts")
            if not isinstance(text, str):
                raise _bad(path, lineno, f"'text' is {text!r:.60}; expected a string")
            if item is not None and "text" in item:
                raise _bad(path, lineno, "has 'text' both on its own and in 'fields'; expected "
                           "one of them")
            item = {**(item or {}), "text": text}
        check_fields(item, where)
        nodes, masses = record.get("nodes"), record.get("masses")
        if not (isinstance(nodes, list) and nodes and all(map(_is_node, nodes))):
            raise _bad(path, lineno, f"'nodes' is {nodes!r:.60}; expected a non-empty list of "
                       "node ids")
        if not (isinstance(masses, list) and len(masses) == len(nodes)
                and all(map(_is_mass, masses))):
            raise _bad(path, lineno, f"'masses' is {masses!r:.60}; expected one number per "
                       f"node ({len(nodes)}), each within float64's range")
        keys.append(key)
        labels.append(label)
        fields.append(item)
        lines.append(lineno)
        lengths.append(len(nodes))
        node_parts.append(nodes)
        mass_parts.append(masses)
        if len(keys) % 1000 == 0:
            progress("reading", len(keys), total)
    if len(keys) != total:
        raise ValueError(f"{path} holds {len(keys)} documents, but its header says {total}; "
                         "the file is incomplete or was edited; export the index again")
    indptr = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=indptr[1:])
    nodes = np.fromiter((n for part in node_parts for n in part), dtype=np.int64,
                        count=int(indptr[-1]))
    masses = np.fromiter((float(m) for part in mass_parts for m in part), dtype=np.float64,
                         count=int(indptr[-1]))
    return keys, labels, fields, lines, indptr, nodes, masses


class _LineNames:
    """What measure errors call document i: the export file and its line."""

    def __init__(self, path, lines, keys):
        self.path, self.lines, self.keys = path, lines, keys

    def __getitem__(self, i):
        return f"{self.path} line {self.lines[i]} (key {self.keys[i]!r})"


def _check_graph_from(source, header, export_path):
    """ValueError unless the index ``source`` has the export's graph (its
    graph.h5 has the checksum the header records: the same nodes, edges,
    lengths, coordinates and trees), roots, eta and p."""
    graph = header["graph"]
    where = f"--graph-from {source.path}"
    if source.graph.n_nodes != graph["n_nodes"]:
        raise ValueError(f"{where} has a graph of {source.graph.n_nodes:,} nodes, but the export "
                         f"{export_path} was made on one of {graph['n_nodes']:,}; give the index "
                         "the export was made from (or a copy of it)")
    checksum = storage.file_checksum(os.path.join(source.path, storage.GRAPH_FILE))
    if checksum != graph["checksum"]:
        raise ValueError(f"{where} has another graph than the export {export_path} (graph.h5 "
                         f"sha256 {checksum[:12]}..., the export's {graph['checksum'][:12]}...); "
                         "give the index the export was made from (or a copy of it)")
    found = {"roots": [int(r) for r in source.roots], "eta": [float(e) for e in source.eta],
             "p": _p_json(source.p)}
    for name, value in found.items():
        if value != header[name]:
            raise ValueError(f"{where} has {name} {value}, but the export {export_path} was made "
                             f"with {header[name]}; give the index the export was made from")


def build_from_export(index_path, export_path, graph_from, progress=None, batch_size=1000):
    """Build a new index from an export file, on the graph of another index.

    ``graph_from`` must hold the graph the export was made on: its
    ``graph.h5`` must have the SHA-256 recorded in the export's header (the
    same nodes, edges, lengths, coordinates and shortest-path trees), and
    its roots, eta and p must be the header's; the source index itself or a
    copy of it does. The rebuilt index takes that graph, roots, eta and p,
    the export's meta values (text settings, recipe, point-set kind) and,
    for a text index, its words table with document frequencies, so that
    ``add`` and queries read text as on the source. The documents are added
    in the file's order, with their keys, labels, fields (a line's
    ``text`` back in ``fields["text"]``) and measures as stored, in
    committed batches of ``batch_size``.

    Everything is checked before anything is written: ``index_path`` must
    be new (or an empty folder), the file well formed (a ValueError names
    the line and what was expected, and a file with fewer or more documents
    than its header says is refused), every measure valid on the graph, and
    the graph the export's. A build that fails later leaves nothing.

    Parameters
    ----------
    index_path : str or path-like
        Where the index is made: a path that does not exist yet, or an
        empty folder.
    export_path : str or path-like
        The export file (see :func:`export_index`), or ``"-"`` for standard
        input (as ``export_index(index, "-")`` writes it).
    graph_from : SobolevIndex, str or path-like
        The index whose graph the export was made on (the source itself, or
        a copy of it), open or by its path (then opened for reading and
        closed again).
    progress : callable or None, default=None
        Called as ``progress(stage, done, total)`` with the stages
        ``"reading"`` and ``"adding"``; None reports nothing.
    batch_size : int, default=1000
        Documents per committed batch.

    Returns
    -------
    index : SobolevIndex
        The new index, open for writing.
    report : dict
        ``documents`` (how many were added), ``kind``, ``words`` (the size
        of the words table; None unless text), the graph's ``nodes`` and
        ``edges``, ``roots``, ``graph_checksum`` and ``source_documents``
        (the count the header gives).

    Raises
    ------
    ValueError
        If ``batch_size`` is not an integer >= 1, the export file is
        missing, not UTF-8 or malformed (the message names the line), or
        ``graph_from`` has another graph, roots, eta or p than the export.
    FileExistsError
        If ``index_path`` exists and is not an empty folder.
    InvalidMeasureError
        If a measure is not valid on the graph (the message names the line
        and key).

    See Also
    --------
    export_index : The export this reads.

    Examples
    --------
    >>> import numpy as np
    >>> from sobolev_index.ingest.pointsets import PointSet
    >>> from sobolev_index.ingest.pointindex import build_point_index
    >>> rng = np.random.default_rng(0)
    >>> clouds = [PointSet(f"c{i}", rng.normal(i % 2, size=(6, 2)), label="ab"[i % 2])
    ...           for i in range(4)]
    >>> from sobolev_index.ingest.export import build_from_export, export_index
    >>> source, _ = build_point_index("source.idx", clouds, nodes=8, seed=0)
    >>> _ = export_index(source, "source.jsonl")
    >>> copy, report = build_from_export("copy.idx", "source.jsonl", graph_from=source)
    >>> report["documents"], report["kind"], report["nodes"]
    (4, 'clouds', 8)
    >>> a, b = source.search("c0", k=3), copy.search("c0", k=3)
    >>> a.keys == b.keys, a.distances.tolist() == b.distances.tolist()
    (True, True)
    >>> source.close()
    >>> copy.close()
    """
    index_path = os.fspath(index_path)
    export_path = os.fspath(export_path)
    progress = progress or _silent
    if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)) \
            or batch_size < 1:
        raise ValueError(f"batch_size is {batch_size!r}; expected an integer >= 1")
    storage.require_new_directory(index_path)
    if isinstance(graph_from, SobolevIndex):
        return _build(index_path, export_path, graph_from, progress, batch_size)
    with SobolevIndex.open(graph_from, mode="r") as source:
        return _build(index_path, export_path, source, progress, batch_size)


def _build(index_path, export_path, source, progress, batch_size):
    opened = export_path
    # What messages call the file.
    export_path = "<stdin>" if export_path == "-" else export_path
    with _open_export(opened) as handle:
        try:
            first = handle.readline()
            if not first.strip():
                raise _bad(export_path, 1, "is empty; expected the export's header line")
            header = _check_header(_parse_line(first, export_path, 1), export_path)
            _check_graph_from(source, header, export_path)
            kind, total = header["kind"], header["documents"]
            progress("reading", 0, total)
            keys, labels, fields, lines, indptr, nodes, masses = _read_documents(
                handle, export_path, kind, progress, total)
        except UnicodeDecodeError as exc:
            raise ValueError(f"{export_path} is not UTF-8 text ({exc.reason} at byte "
                             f"{exc.start} of a line); expected a file written by "
                             "`sobolev-index export`") from None
    progress("reading", total, total)
    batch = as_measure_batch(indptr=indptr, nodes=nodes, masses=masses,
                             n_nodes=source.graph.n_nodes,
                             names=_LineNames(export_path, lines, keys))
    words = header["words"]
    graph = source.graph
    checksum = header["graph"]["checksum"]

    def fill(index):
        meta = header["meta"]
        if words is not None:
            add_words(index.catalog, words, meta=meta)
        elif meta:
            index.catalog.set_meta(meta)
        added = add_in_batches(index, batch, keys, labels, fields, batch_size=batch_size,
                               progress=progress)
        return {"documents": len(added)}

    # The graph file, trees included, is graph_from's (checked against the
    # header's checksum above): trees rebuilt from the graph would break
    # ties in shortest paths with another seed than the source did.
    index, report = create_and_fill(index_path, graph, fill, like=source)
    report.update({"kind": header["kind"], "words": None if words is None else len(words),
                   "graph_checksum": checksum, "source_documents": header["documents"]})
    return index, report
