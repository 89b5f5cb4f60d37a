"""What the text and point pipelines share: which kind an index is, making
its graph, creating an index and filling it, adding measures in committed
batches, and the checks both kinds of reader make on keys, labels and
fields.

Both pipelines import this module and neither imports the other; the kind of
an index is recorded in its catalog's ``meta`` under :data:`TEXT_META` or
:data:`POINTS_META` when it is built.
"""
import json
import math
import numbers
import os
import shutil

from ..errors import ADVICE, CorpusError, CorpusKeyError, DiskFullError
from ..graph import Graph
from ..index import SobolevIndex
from ..measures import MeasureBatch, as_measure_batch

__all__ = ["TEXT_META", "POINTS_META", "FIELDS_MAX_DEPTH", "index_kind", "build_graph",
           "create_and_fill", "check_can_add", "check_new_keys", "count_live", "drop_existing",
           "check_input", "add_in_batches", "describe_json", "label_text", "check_storable",
           "check_fields_depth", "check_fields"]

# The meta names under which a text index keeps its TextSettings, and a
# point index the kind ("clouds" or "diagrams") and dimension of its sets.
TEXT_META = "text"
POINTS_META = "points"
# How deep the fields of one document may nest objects and lists (the
# fields object itself is level 1). Deeper values overflow the recursion of
# json (a line nested ~1,000 deep cannot even be parsed) and of SQLite's
# JSON functions; no real record needs more.
FIELDS_MAX_DEPTH = 100


def _silent(stage, done, total):
    pass


def index_kind(index):
    """What an index was built from: ``"text"``, ``"clouds"``,
    ``"diagrams"``, or None for an index of plain measures."""
    if index.catalog.meta_value(TEXT_META) is not None:
        return "text"
    points = index.catalog.meta_value(POINTS_META)
    return None if points is None else points["kind"]


# ------------------------------------------------------------------- build
def build_graph(points, *, nodes, edges, seed, k=None, progress=None):
    """The graph of a build: farthest-point clustering of ``points`` (word
    vectors, or the points of every set) into at most ``nodes`` nodes (each
    distinct point its own node when there is room for all) and
    ``edges`` (``k`` nearest nodes for "knn"), with
    ``progress("graph", done, total)`` as centres are found."""
    progress = progress or _silent
    n_centres = min(nodes, len(points))
    progress("graph", 0, n_centres)
    options = {} if k is None else {"k": k}
    return Graph.from_points(points, n_nodes=nodes, edges=edges, seed=seed,
                             progress=lambda done: progress("graph", done, n_centres), **options)


def create_and_fill(path, graph, fill, like=None, **create_options):
    """Create an index at ``path`` (options as :meth:`SobolevIndex.create`;
    or, with ``like``, an open index, :meth:`SobolevIndex.create_like`) and
    run ``fill(index)``, which returns a report dict. Returns (index open
    for writing, that report with the graph's ``nodes`` and ``edges`` and the
    index's ``roots``).

    A build is not incremental: if it fails, nothing is left behind (an
    empty folder the caller gave stays, empty).
    """
    existed = os.path.isdir(path)
    if like is not None:
        index = SobolevIndex.create_like(path, like)
    else:
        index = SobolevIndex.create(path, graph, **create_options)
    try:
        report = fill(index)
    except BaseException:
        index.close()
        shutil.rmtree(path, ignore_errors=True)
        if existed:
            os.makedirs(path, exist_ok=True)
        raise
    report.update({"nodes": graph.n_nodes, "edges": graph.n_edges, "roots": index.roots.tolist()})
    return index, report


# --------------------------------------------------------------------- add
def check_new_output(path, what):
    """``path`` as the name of a new output file, checked before any work: it
    does not exist yet (an output is never written over a file; ``what``
    says which), and its folder does. Returns it as a str."""
    path = os.fspath(path)
    if os.path.lexists(path):
        raise ValueError(f"output {path!r} exists; choose a new file name ({what} never "
                         "overwrites a file)")
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise ValueError(f"output is {path!r}, but the folder {folder} does not exist")
    return path


def check_can_add(index, batch_size):
    """Refuse, before any input is read, an index open for reading or a
    batch size that is not a positive int."""
    if not index.writable:
        raise CorpusError(f"the index at {index.path} is open for reading; {ADVICE['open_for_writing']}")
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size is {batch_size!r}; expected an integer >= 1")


def check_new_keys(index, keys, upsert):
    """Every key problem is found before the first batch is written: a key
    given twice, or (unless ``upsert``) one the index already has. None
    keys (the index names those documents) are not checked."""
    seen = set()
    existing = set() if upsert else index.existing_keys([k for k in keys if k is not None])
    for key in keys:
        if key is None:
            continue
        if key in seen:
            raise CorpusKeyError(
                f"key {key!r} appears twice in the input; keys must be unique: if the key "
                "column (key, or else id) repeats values, name another one, or none, and the "
                f"index names the documents {ADVICE['no_key_column']}")
        seen.add(key)
        if key in existing:
            raise CorpusKeyError(f"key {key!r} is already in the index; "
                                 f"{ADVICE['skip_existing']}")


def drop_existing(index, items, key_of, upsert):
    """``items`` without those whose key (``key_of(item)``) is a live
    document, and the keys dropped: for resuming an interrupted add."""
    if upsert:
        raise ValueError("skip_existing and upsert exclude each other: an upsert replaces the "
                         "documents that exist (--skip-existing or --upsert, not both)")
    kept, existing = [], []
    live = index.existing_keys([key for key in map(key_of, items) if key is not None])
    for item in items:
        key = key_of(item)
        if key is not None and key in live:
            existing.append(key)
        else:
            kept.append(item)
    return kept, existing


def count_live(index, keys):
    """How many of ``keys`` are live documents of ``index`` (those an upsert
    replaces); None keys count as new."""
    return len(index.existing_keys([key for key in keys if key is not None]))


def check_input(index, measures, names, fields=()):
    """Check every measure of an add, and its ``fields`` values when given,
    before anything is written; return the measures as one
    :class:`~sobolev_index.measures.MeasureBatch` for ``index``'s graph. A
    problem raises :class:`~sobolev_index.errors.InvalidMeasureError` or
    :class:`CorpusError` naming the item by ``names[i]`` (a key, or where
    the item came from)."""
    for i, item in enumerate(fields):
        check_fields(item, names[i])
    return as_measure_batch(measures, n_nodes=index.graph.n_nodes, names=names)


def add_in_batches(index, measures, keys, labels, fields, *, batch_size=1000, upsert=False,
                   progress=None, names=None):
    """Write ``measures`` with their ``keys`` (a list, or None for the index
    to name them), ``labels`` and ``fields`` in batches of ``batch_size``,
    each committed on its own (:meth:`SobolevIndex.add`, or ``upsert``).
    Returns the keys written.

    ``measures`` is a list of (nodes, masses) pairs, checked here with the
    fields (:func:`check_input`; errors name item i by ``names[i]``, by
    default its key or position) before the first batch is written, so that
    bad input leaves the index as it was; or the
    :class:`~sobolev_index.measures.MeasureBatch` that :func:`check_input`
    returned for this same input, which is not checked again.

    The batches before an interruption stay committed, and the
    KeyboardInterrupt carries their keys as ``added``.
    """
    progress = progress or _silent
    batch = measures
    if not isinstance(batch, MeasureBatch):
        if names is None:
            names = [f"item {i}" if keys is None or keys[i] is None else f"item {keys[i]!r}"
                     for i in range(len(fields))]
        batch = check_input(index, measures, names, fields)
    write = index.upsert if upsert else index.add
    added = []
    batch_keys = None
    progress("adding", 0, len(batch))
    try:
        for start in range(0, len(batch), batch_size):
            stop = start + batch_size
            batch_keys = None if keys is None else keys[start:stop]
            added.extend(write(batch.rows(start, stop), keys=batch_keys,
                               labels=labels[start:stop], fields=fields[start:stop]))
            batch_keys = None
            progress("adding", len(added), len(batch))
    except (KeyboardInterrupt, DiskFullError) as exc:
        # The batch in flight may have committed before the interrupt (for
        # instance during the merge that follows a commit).
        if batch_keys is not None:
            landed = index.existing_keys(batch_keys)
            added.extend(k for k in batch_keys if k in landed)
        exc.added = added
        # Without keys of its own, a document added again is a new document:
        # resuming with skip_existing is then not possible.
        exc.resumable = keys is not None
        raise
    return added


# ------------------------------------------------- checks shared by readers
def describe_json(value):
    """A JSON value as a user would name it in their own file."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return f"the string {value!r:.40}"
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, (list, tuple)):
        return f"a list of {len(value)} items"
    return repr(value)


def check_storable(text, what, where):
    """Refuse a key or label that UTF-8 cannot store: a lone surrogate, as a
    JSON escape like "\\udcff" or a file name that is not UTF-8 gives (the
    catalog would refuse it only after a segment was written); and a NUL
    character, which SQLite stores but C strings, shells and the SQL
    functions' key arguments cut short."""
    if "\x00" in text:
        raise CorpusError(f"{where}: {what} {text!r:.60} holds a NUL character at character "
                          f"{text.index(chr(0)) + 1}; expected text without NUL")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise CorpusError(
            f"{where}: {what} {text!r:.60} holds {text[exc.start]!r} at character "
            f"{exc.start + 1}, a lone surrogate (from a JSON escape, or a file name that is not "
            "UTF-8); expected text that UTF-8 can store"
        ) from None
    return text


def key_text(value, where, name="key"):
    """A key as the readers of both kinds store it: a non-empty string as
    it is, a JSON integer as its decimal text (``42`` -> "42"). Other
    numbers (``1.5``, ``NaN``, ``1e3``) are refused: their text depends on
    how they were parsed, so a key given as one would not be found by the
    text the user sees in the file. Booleans, null, objects and lists are
    refused too. :class:`CorpusError` names ``where`` and the field
    (``name``)."""
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        return str(int(value))
    if not isinstance(value, str) or not value:
        hint = (" (write a number that is not an integer as a string, e.g. \"1.5\")"
                if isinstance(value, numbers.Real) and not isinstance(value, bool) else "")
        shown = ("NaN" if value != value else "Infinity" if value > 0 else "-Infinity") \
            if isinstance(value, float) and not math.isfinite(value) else describe_json(value)
        raise CorpusError(f"{where}: the key ({name!r}) is {shown}; expected a non-empty string "
                          f"or an integer{hint}")
    return check_storable(value, repr(name), where)


def label_text(value, where):
    """A label as the readers of both kinds store it: a string as it is, a
    finite number as its JSON text ("3", "1.5", "1e+20"), null (None) as no
    label. Booleans, objects, lists, NaN and infinities are refused with a
    :class:`CorpusError` naming ``where``."""
    if value is None:
        return None
    if isinstance(value, str):
        return check_storable(value, "'label'", where)
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        pass  # refused below; bool is an int to Python, not a number in JSON
    elif isinstance(value, numbers.Integral):
        return json.dumps(int(value))
    elif math.isfinite(value):
        return json.dumps(float(value))
    raise CorpusError(f"{where}: 'label' is {describe_json(value)}; expected a string or a "
                      "number (a finite one; null for no label)")


def _nested_deeper(value, limit):
    """Whether objects and lists nest more than ``limit`` levels in
    ``value`` (itself level 1). A loop over a stack rather than recursion,
    which is what fails on deep values; depth first, so a deep branch is
    found without walking the rest (or around a cycle for ever)."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        children = item.values() if isinstance(item, dict) else item
        if depth > limit:
            return True
        stack.extend((c, depth + 1) for c in children if isinstance(c, (dict, list, tuple)))
    return False


def check_fields_depth(fields, where):
    """Refuse fields nested deeper than :data:`FIELDS_MAX_DEPTH`."""
    if isinstance(fields, (dict, list, tuple)) and _nested_deeper(fields, FIELDS_MAX_DEPTH):
        raise CorpusError(f"{where}: its fields nest objects and lists more than "
                          f"{FIELDS_MAX_DEPTH} levels deep; expected at most {FIELDS_MAX_DEPTH}")


def check_fields(fields, where):
    """Refuse fields the index cannot store: nested too deeply, or not JSON
    (NaN, infinities, objects JSON does not know)."""
    check_fields_depth(fields, where)
    try:
        json.dumps(fields, sort_keys=True, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise CorpusError(f"{where}: its fields cannot be stored as JSON ({exc})") from None
