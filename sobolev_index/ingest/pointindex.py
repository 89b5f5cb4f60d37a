"""Point clouds and persistence diagrams in an index.

The graph is built from the points of all the sets given at build time
(farthest-point clustering into at most ``nodes`` nodes), and every point
set becomes a measure by sending its points to their nearest node
(:func:`sobolev_index.ingest.pointsets.pointsets_to_measures`). Sets added
later, and queries, use the same nearest-node rule, so they need nothing
stored beyond the graph's node coordinates. The catalog's ``meta`` records
the kind of sets (``clouds`` or ``diagrams``) so that later input is read
the same way.
"""
import os

import numpy as np

from ..errors import CorpusError
from ..index.storage import require_new_directory
from .fill import (
    POINTS_META,
    add_in_batches,
    build_graph,
    check_can_add,
    check_new_keys,
    count_live,
    create_and_fill,
    drop_existing,
    index_kind,
)
from .pointsets import PointSet, pointsets_to_measures, read_diagrams, read_point_clouds
from .recipes import (
    DEFAULT_DIAGRAM_WEIGHTS,
    DEFAULT_RECIPE,
    RECIPE_META,
    check_recipe,
    create_roots,
    fit_to_graph,
    resolve,
)

__all__ = ["POINT_KINDS", "read_pointsets", "build_point_index", "add_pointsets", "point_measures"]

POINT_KINDS = ("clouds", "diagrams")
DIAGRAM_WEIGHTS = ("uniform", "persistence")
_DIAGRAM_SUFFIXES = (".csv", ".tsv", ".txt", ".npy")


def _check_kind(kind):
    if kind not in POINT_KINDS:
        raise ValueError(f"kind is {kind!r}; expected one of {', '.join(POINT_KINDS)}")


def _diagram_files(path):
    if os.path.isdir(path):
        found = sorted(os.path.join(d, f) for d, _, files in os.walk(path) for f in files
                       if f.endswith(_DIAGRAM_SUFFIXES))
        if not found:
            raise CorpusError(f"{path} holds no diagram files ({', '.join(_DIAGRAM_SUFFIXES)})")
        return found
    return [path]


def read_pointsets(sources, kind="clouds", diagram_weights=None, label_from_dir=False):
    """Point sets from files: ``kind="clouds"`` reads JSON Lines point
    clouds (``-`` for stdin); ``kind="diagrams"`` reads one persistence
    diagram per CSV/text/.npy file (directories are searched, and with
    ``label_from_dir`` a diagram's label is its folder's name), its points
    weighted by ``diagram_weights`` ("uniform" or "persistence"; None is
    the recipes' choice, persistence)."""
    _check_kind(kind)
    if diagram_weights is None:
        diagram_weights = DEFAULT_DIAGRAM_WEIGHTS
    sources = [sources] if isinstance(sources, (str, os.PathLike)) else list(sources)
    if kind == "clouds":
        return [s for source in sources for s in read_point_clouds(source)]
    files = [f for source in sources for f in _diagram_files(os.fspath(source))]
    return list(read_diagrams(files, weights=diagram_weights, label_from_dir=label_from_dir))


def build_point_index(path, pointsets, *, recipe=DEFAULT_RECIPE, nodes=None, edges=None, k=None,
                      roots=None, p=1, seed=0, kind="clouds", diagram_weights=None,
                      batch_size=1000, progress=None, on_violation="perturb"):
    """Build an index at ``path`` from point sets (a list of
    :class:`~sobolev_index.ingest.pointsets.PointSet`); ``kind`` ("clouds" or
    "diagrams") and, for diagrams, the weighting the diagrams were read with
    (``diagram_weights``; None is the recipes' choice, "persistence") are
    recorded so that later input is read the same way: diagrams read with
    :func:`read_pointsets` and the same ``diagram_weights``, or a
    ValueError says they were not. The graph is made from the points of all the sets; ``nodes``,
    ``edges``, ``k`` and ``roots`` as in
    :func:`~sobolev_index.ingest.documents.build_index`, each left as None
    chosen by ``recipe`` (see :mod:`~sobolev_index.ingest.recipes`) and
    recorded in the catalog. Returns (index open for writing, report dict)."""
    check_recipe(recipe)
    _check_kind(kind)
    if diagram_weights is None:
        diagram_weights = DEFAULT_DIAGRAM_WEIGHTS
    if kind == "diagrams" and diagram_weights not in DIAGRAM_WEIGHTS:
        raise CorpusError(f"diagram weights {diagram_weights!r} are not one of "
                          f"{', '.join(DIAGRAM_WEIGHTS)}")
    path = os.fspath(path)
    require_new_directory(path)
    pointsets = list(pointsets)
    if not pointsets:
        raise CorpusError("no point sets were given")
    _check_pointsets(pointsets)
    if kind == "diagrams":
        _check_diagram_weights(pointsets, diagram_weights)
    points = np.vstack([s.points for s in pointsets])
    chosen = resolve(recipe, len(points), nodes=nodes, edges=edges, k=k, roots=roots)
    graph = build_graph(points, nodes=chosen["nodes"], edges=chosen["edges"], k=chosen["k"],
                        seed=seed, progress=progress)
    fit_to_graph(chosen, graph)

    def fill(index):
        meta = {"kind": kind, "dim": int(points.shape[1])}
        if kind == "diagrams":
            meta["weights"] = chosen["diagram_weights"] = diagram_weights
        index.catalog.set_meta({POINTS_META: meta, RECIPE_META: chosen})
        return add_pointsets(index, pointsets, batch_size=batch_size, progress=progress)

    index, report = create_and_fill(path, graph, fill, roots=create_roots(chosen["roots"]), p=p,
                                    seed=seed, on_violation=on_violation)
    report.update({"kind": kind, "points": int(len(points)), "dim": int(points.shape[1]),
                   "recipe": chosen})
    return index, report


def _check_diagram_weights(pointsets, diagram_weights):
    """Diagrams must carry the weighting their index records. A point set
    always has weights (1 / n when read uniformly), so: equal weights for
    "uniform"; for "persistence", not equal weights on points whose
    persistence differs (read as (birth, death) or as (birth,
    persistence), so either way)."""
    for s in pointsets:
        w, points = s.weights, s.points
        equal = bool(np.all(w == w[0]))
        if diagram_weights == "uniform" and not equal:
            raise ValueError(
                f"diagram {s.key!r} has unequal weights, but the index weights diagram points "
                "uniformly; read them with read_pointsets(files, 'diagrams', 'uniform')")
        if diagram_weights == "persistence" and equal and points.shape[1] == 2:
            death_minus_birth = points[:, 1] - points[:, 0]
            if (not np.all(death_minus_birth == death_minus_birth[0])
                    and not np.all(points[:, 1] == points[0, 1])):
                raise ValueError(
                    f"diagram {s.key!r} has equal weights on points of different persistence, "
                    "but the index weights diagrams by persistence; read them with "
                    "read_pointsets(files, 'diagrams', 'persistence') (or read_diagrams(files, "
                    "weights='persistence'))")


def stored_diagram_weights(index):
    """The weighting a diagram index was built with ("uniform" for indexes
    built before it was recorded, which were read that way)."""
    meta = index.catalog.meta_value(POINTS_META) or {}
    return meta.get("weights", "uniform")


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


def add_pointsets(index, pointsets, *, batch_size=1000, progress=None, upsert=False,
                  skip_existing=False):
    """Add point sets in committed batches; every key is checked before the
    first batch is written. The batches before an interruption stay
    committed (a KeyboardInterrupt carries their keys as ``added``);
    ``skip_existing`` leaves out point sets whose keys are live already.
    Returns {"added": keys, "replaced": count, "existing": keys, "skipped": []}."""
    check_can_add(index, batch_size)
    pointsets = list(pointsets)
    _check_pointsets(pointsets)
    if index_kind(index) == "diagrams":
        _check_diagram_weights(pointsets, stored_diagram_weights(index))
    existing = []
    if skip_existing:
        pointsets, existing = drop_existing(index, pointsets, lambda s: s.key, upsert)
    keys = [s.key for s in pointsets]
    check_new_keys(index, keys, upsert)
    measures = point_measures(index, pointsets)
    replaced = count_live(index, keys) if upsert else 0
    # Every measure and fields value is checked before the first batch is
    # written; an error names the point set by its key.
    added = add_in_batches(index, measures, keys, [s.label for s in pointsets],
                           [s.fields or None for s in pointsets], batch_size=batch_size,
                           upsert=upsert, progress=progress,
                           names=[f"point set {key!r}" for key in keys])
    return {"added": added, "replaced": replaced, "existing": existing, "skipped": []}
