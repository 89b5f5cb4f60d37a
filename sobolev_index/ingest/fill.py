"""What the text and point pipelines share: which kind an index is, making
its graph, creating an index and filling it, and adding measures in
committed batches.

Both pipelines import this module and neither imports the other; the kind of
an index is recorded in its catalog's ``meta`` under :data:`TEXT_META` or
:data:`POINTS_META` when it is built.
"""
import json
import os
import shutil

from ..errors import CorpusError, CorpusKeyError, DiskFullError
from ..graph import Graph
from ..index import SobolevIndex

__all__ = ["TEXT_META", "POINTS_META", "index_kind", "build_graph", "create_and_fill",
           "check_can_add", "check_new_keys", "count_live", "drop_existing", "add_in_batches"]

# The meta names under which a text index keeps its TextSettings, and a
# point index the kind ("clouds" or "diagrams") and dimension of its sets.
TEXT_META = "text"
POINTS_META = "points"


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
def build_graph(points, *, nodes, edges, seed, progress=None):
    """The graph of a build: farthest-point clustering of ``points`` (word
    vectors, or the points of every set) into at most ``nodes`` nodes, with
    ``progress("graph", done, total)`` as centres are found."""
    progress = progress or _silent
    n_centres = min(nodes, len(points))
    progress("graph", 0, n_centres)
    return Graph.from_points(points, n_nodes=nodes, edges=edges, seed=seed,
                             progress=lambda done: progress("graph", done, n_centres))


def create_and_fill(path, graph, fill, **create_options):
    """Create an index at ``path`` (options as :meth:`SobolevIndex.create`)
    and run ``fill(index)``, which returns a report dict. Returns (index open
    for writing, that report with the graph's ``nodes`` and ``edges`` and the
    index's ``roots``).

    A build is not incremental: if it fails, nothing is left behind (an
    empty folder the caller gave stays, empty).
    """
    existed = os.path.isdir(path)
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
def check_can_add(index, batch_size):
    """Refuse, before any input is read, an index open for reading or a
    batch size that is not a positive int."""
    if not index.writable:
        raise CorpusError(f"the index at {index.path} is open for reading; open it with mode='a'")
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
            raise CorpusKeyError(f"key {key!r} appears twice in the input; keys must be unique")
        seen.add(key)
        if key in existing:
            raise CorpusKeyError(f"key {key!r} is already in the index; delete it first, upsert "
                                 "it, or leave it out with skip_existing")


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


def add_in_batches(index, measures, keys, labels, fields, *, batch_size=1000, upsert=False,
                   progress=None):
    """Write ``measures`` with their ``keys`` (a list, or None for the index
    to name them), ``labels`` and ``fields`` in batches of ``batch_size``,
    each committed on its own (:meth:`SobolevIndex.add`, or ``upsert``).
    Returns the keys written.

    The batches before an interruption stay committed, and the
    KeyboardInterrupt carries their keys as ``added``.
    """
    progress = progress or _silent
    # Every batch is checked before the first is written; fields are checked
    # here too, or a bad one would stop the add after earlier batches.
    for i, item in enumerate(fields):
        try:
            json.dumps(item, allow_nan=False)
        except (TypeError, ValueError) as exc:
            name = keys[i] if keys is not None else f"item {i}"
            raise CorpusError(f"{name}: its fields cannot be stored as JSON ({exc})") from None
    write = index.upsert if upsert else index.add
    added = []
    batch_keys = None
    progress("adding", 0, len(measures))
    try:
        for start in range(0, len(measures), batch_size):
            stop = start + batch_size
            batch_keys = None if keys is None else keys[start:stop]
            added.extend(write(measures[start:stop], keys=batch_keys, labels=labels[start:stop],
                               fields=fields[start:stop]))
            batch_keys = None
            progress("adding", len(added), len(measures))
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


