"""Point clouds and persistence diagrams in an index.

The graph is built from the points of all the sets given at build time
(farthest-point clustering into at most ``nodes`` nodes), and every point
set becomes a measure by sending its points to their nearest node
(:func:`sobolev_index.pointsets.pointsets_to_measures`). Sets added later,
and queries, use the same nearest-node rule, so they need nothing stored
beyond the graph's node coordinates. The catalog's ``meta`` records the
kind of sets (``points``) so that the CLI reads later input the same way.
"""
import os

import numpy as np

from .documents import create_and_fill
from ..errors import CorpusError
from ..graph import Graph
from .pointsets import PointSet, pointsets_to_measures, read_diagrams, read_point_clouds

__all__ = ["POINT_KINDS", "read_pointsets", "build_point_index", "add_pointsets", "point_measures",
           "index_kind"]

POINTS_META = "points"
POINT_KINDS = ("clouds", "diagrams")
_DIAGRAM_SUFFIXES = (".csv", ".tsv", ".txt", ".npy")


def _diagram_files(path):
    if os.path.isdir(path):
        found = sorted(os.path.join(d, f) for d, _, files in os.walk(path) for f in files
                       if f.endswith(_DIAGRAM_SUFFIXES))
        if not found:
            raise CorpusError(f"{path} holds no diagram files ({', '.join(_DIAGRAM_SUFFIXES)})")
        return found
    return [path]


def read_pointsets(sources, kind="clouds", diagram_weights="uniform", label_from_dir=False):
    """Point sets from files: ``kind="clouds"`` reads JSON Lines point
    clouds (``-`` for stdin); ``kind="diagrams"`` reads one persistence
    diagram per CSV/text/.npy file (directories are searched, and with
    ``label_from_dir`` a diagram's label is its folder's name)."""
    if kind not in POINT_KINDS:
        raise ValueError(f"kind is {kind!r}; expected one of {', '.join(POINT_KINDS)}")
    sources = [sources] if isinstance(sources, (str, os.PathLike)) else list(sources)
    if kind == "clouds":
        return [s for source in sources for s in read_point_clouds(source)]
    files = [f for source in sources for f in _diagram_files(os.fspath(source))]
    return list(read_diagrams(files, weights=diagram_weights, label_from_dir=label_from_dir))


def index_kind(index):
    """"text", "points" or None (an index of plain measures)."""
    from .documents import TEXT_META

    if index.catalog.meta_value(TEXT_META) is not None:
        return "text"
    if index.catalog.meta_value(POINTS_META) is not None:
        return "points"
    return None


def build_point_index(path, pointsets, *, nodes=1000, edges="log", roots=None, p=1, seed=0,
                      kind="clouds", batch_size=1000, progress=None, on_violation="perturb"):
    """Build an index at ``path`` from point sets (a list of
    :class:`~sobolev_index.pointsets.PointSet`). Returns (index open for
    writing, report dict)."""
    path = os.fspath(path)
    if os.path.exists(path) and (not os.path.isdir(path) or os.listdir(path)):
        raise FileExistsError(f"{path} exists and is not an empty directory; choose a new path")
    pointsets = list(pointsets)
    if not pointsets:
        raise CorpusError("no point sets were given")
    _check_pointsets(pointsets)
    _progress = progress or (lambda stage, done, total: None)
    points = np.vstack([s.points for s in pointsets])
    n_centres = min(nodes, len(points))
    _progress("graph", 0, n_centres)
    graph = Graph.from_points(points, n_nodes=nodes, edges=edges, seed=seed,
                              progress=lambda done: _progress("graph", done, n_centres))
    def fill(index):
        index.catalog.set_meta({POINTS_META: {"kind": kind, "dim": int(points.shape[1])}})
        return add_pointsets(index, pointsets, batch_size=batch_size, progress=progress)

    index, report = create_and_fill(path, graph, fill, roots=roots, p=p, seed=seed,
                                    on_violation=on_violation)
    report.update({"points": int(len(points)), "dim": int(points.shape[1]),
                   "nodes": graph.n_nodes, "edges": graph.n_edges, "roots": index.roots.tolist()})
    return index, report


def _check_pointsets(pointsets):
    seen = {}
    for i, item in enumerate(pointsets):
        if not isinstance(item, PointSet):
            raise CorpusError(f"point set {i} is {type(item).__name__}; expected a PointSet")
        if item.key in seen:
            raise CorpusError(f"key {item.key!r} appears twice (point sets {seen[item.key]} and {i})")
        seen[item.key] = i


def point_measures(index, pointsets):
    """(nodes, masses) measures of point sets on this index's graph."""
    if index.graph.coords is None:
        raise CorpusError(f"the index at {index.path} has no node coordinates to place points")
    return pointsets_to_measures(list(pointsets), index.graph)


def add_pointsets(index, pointsets, *, batch_size=1000, progress=None, upsert=False):
    """Add point sets in committed batches; every key is checked before the
    first batch is written. Returns {"added": keys}."""
    if not index.writable:
        raise CorpusError(f"the index at {index.path} is open for reading; open it with mode='a'")
    pointsets = list(pointsets)
    _check_pointsets(pointsets)
    if not upsert:
        taken = [s.key for s in pointsets if s.key in index]
        if taken:
            raise CorpusError(f"key {taken[0]!r} is already in the index; delete it first, or upsert")
    measures = point_measures(index, pointsets)
    _progress = progress or (lambda stage, done, total: None)
    write = index.upsert if upsert else index.add
    added = []
    _progress("adding", 0, len(measures))
    try:
        for start in range(0, len(measures), batch_size):
            chunk = pointsets[start:start + batch_size]
            added.extend(write(measures[start:start + batch_size], keys=[s.key for s in chunk],
                               labels=[s.label for s in chunk],
                               fields=[s.fields or None for s in chunk]))
            _progress("adding", len(added), len(measures))
    except KeyboardInterrupt as exc:
        exc.added = added + [s.key for s in pointsets[len(added):len(added) + batch_size]
                             if s.key in index]
        raise
    return {"added": added, "skipped": []}
