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

#: The kinds of point sets an index holds: JSON Lines point clouds or
#: persistence diagrams.
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
    r"""Read point sets from files, as a list.

    ``kind="clouds"`` reads JSON Lines point clouds
    (:func:`~sobolev_index.ingest.pointsets.read_point_clouds`);
    ``kind="diagrams"`` reads one persistence diagram per CSV, text or
    ``.npy`` file (:func:`~sobolev_index.ingest.pointsets.read_diagrams`,
    coordinates (birth, death), the points that never die dropped).

    Parameters
    ----------
    sources : str, path-like or iterable of them
        The files. For clouds, JSON Lines files or ``"-"`` for standard
        input. For diagrams, diagram files or directories, which are searched
        (sub-directories too) for ``.csv``, ``.tsv``, ``.txt`` and ``.npy``
        files, taken in sorted order. A single path is one source.
    kind : {"clouds", "diagrams"}, default="clouds"
        What the files hold.
    diagram_weights : {"uniform", "persistence"} or None, default=None
        How the points of a diagram are weighted (see
        :func:`~sobolev_index.ingest.pointsets.read_diagrams`); None is the
        recipes' choice, ``"persistence"``. Not used for clouds.
    label_from_dir : bool, default=False
        Label each diagram with the name of the folder holding it
        (``root/<class>/<sample>.csv``). Not used for clouds, which carry
        their labels in the file.

    Returns
    -------
    list of PointSet
        Every point set of every source, in order.

    Raises
    ------
    ValueError
        If ``kind`` is not one of :data:`POINT_KINDS`, or
        ``diagram_weights`` not one of its values.
    PointsFileError
        A :class:`~sobolev_index.errors.CorpusError`, for malformed input,
        naming the file and line.
    CorpusError
        If a directory holds no diagram files.
    FileNotFoundError
        If a file does not exist.

    See Also
    --------
    build_point_index : An index of point sets.

    Examples
    --------
    >>> import os
    >>> from sobolev_index.ingest.pointindex import read_pointsets
    >>> with open("clouds.jsonl", "w", encoding="utf-8") as f:
    ...     _ = f.write('{"key": "a", "points": [[0, 0], [1, 0]], "label": "x"}\n')
    ...     _ = f.write('{"key": "b", "points": [[0, 1], [1, 1], [2, 1]]}\n')
    >>> [(cloud.key, len(cloud), cloud.label) for cloud in read_pointsets("clouds.jsonl")]
    [('a', 2, 'x'), ('b', 3, None)]

    Diagrams in class folders, weighted by persistence:

    >>> os.makedirs("diagrams/circle")
    >>> os.makedirs("diagrams/torus")
    >>> with open("diagrams/circle/one.csv", "w", encoding="utf-8") as f:
    ...     _ = f.write("0.0,1.0\n0.5,0.75\n")
    >>> with open("diagrams/torus/two.csv", "w", encoding="utf-8") as f:
    ...     _ = f.write("0.0,0.5\n0.1,0.9\n")
    >>> diagrams = read_pointsets("diagrams", kind="diagrams", label_from_dir=True)
    >>> [(d.key, d.label, d.weights.round(4).tolist()) for d in diagrams]
    [('one', 'circle', [1.0, 0.25]), ('two', 'torus', [0.5, 0.8])]
    """
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
    """Build an index at ``path`` from point sets.

    The graph is made from the points of all the sets (farthest-point
    clustering into at most ``nodes`` nodes), and each set becomes a measure
    by sending its points to their nearest node. ``kind`` and, for diagrams,
    the weighting the diagrams were read with (``diagram_weights``) are
    recorded in the catalog so that later input is read the same way:
    diagrams must be read with :func:`read_pointsets` and the same
    ``diagram_weights``, or a ValueError says they were not. ``nodes``,
    ``edges``, ``k`` and ``roots`` are as in
    :func:`~sobolev_index.ingest.documents.build_index`; each one left as
    None is chosen by ``recipe`` (see :mod:`~sobolev_index.ingest.recipes`),
    and what was chosen is recorded in the catalog. A build that fails
    leaves nothing behind.

    Parameters
    ----------
    path : str or path-like
        Where the index is made: a path that does not exist yet, or an
        empty folder.
    pointsets : iterable of PointSet
        At least one :class:`~sobolev_index.ingest.pointsets.PointSet`, all of
        one dimension, with unique keys.
    recipe : {"quality", "fast"}, default="quality"
        What fills in the graph and root options left as None: every distinct
        point a node (at most 10,000), edges to the 5 nearest nodes, and 10
        roots (``"quality"``) or one (``"fast"``).
    nodes : int or None, default=None
        The most nodes the graph may have (identical points collapse, so it
        may have fewer); None is the recipe's choice.
    edges : {"log", "sqrt", "knn"} or None, default=None
        How the nodes are joined (see :meth:`Graph.from_points
        <sobolev_index.graph.Graph.from_points>`); None is ``"knn"``.
    k : int or None, default=None
        The number of nearest nodes each node is joined to with
        ``edges="knn"`` (at most the nodes less one); None is 5. Refused with
        other edges.
    roots : int, list of int or None, default=None
        A count of roots (1: the graph's most central node; more: that many
        random nodes) or a list of nodes. None is the recipe's count, cut to
        the graph's nodes.
    p : float or "inf", default=1
        The index's default order of S_p for searches, in [1, inf].
    seed : int, default=0
        Seed of the graph's clustering, the random roots and any
        perturbation of edge lengths.
    kind : {"clouds", "diagrams"}, default="clouds"
        What the point sets are.
    diagram_weights : {"uniform", "persistence"} or None, default=None
        For diagrams, the weighting they were read with (and later diagrams
        must be); None is the recipes' choice, ``"persistence"``. Not used
        for clouds.
    batch_size : int, default=1000
        Point sets per committed batch.
    progress : callable or None, default=None
        Called as ``progress(stage, done, total)`` as work advances (stages
        ``"graph"`` and ``"adding"``); None reports nothing.
    on_violation : {"perturb", "raise"}, default="perturb"
        What a root whose shortest paths are not unique does (see
        :meth:`Graph.tree <sobolev_index.graph.Graph.tree>`): break the ties
        by perturbing the edge lengths, or raise.

    Returns
    -------
    index : SobolevIndex
        The new index, open for writing.
    report : dict
        ``added`` (keys), ``replaced``, ``existing``, ``skipped``, the
        graph's ``nodes`` and ``edges``, the index's ``roots``, ``kind``, the
        number of ``points``, their ``dim``, and ``recipe`` (what was chosen).

    Raises
    ------
    FileExistsError
        If ``path`` exists and is not an empty folder.
    CorpusError
        If no point sets are given, an item is not a PointSet, a key is
        given twice, or ``diagram_weights`` is not one of its values.
    ValueError
        If ``recipe``, ``kind``, ``nodes``, ``edges``, ``k`` or ``roots`` is
        not one of its values, or diagrams do not carry the weighting
        ``diagram_weights`` names.

    See Also
    --------
    read_pointsets : Point sets from files.
    add_pointsets : More point sets, later.
    sobolev_index.ingest.pipelines.build_from_files : A build from files of either kind.

    Examples
    --------
    >>> import numpy as np
    >>> from sobolev_index.ingest.pointsets import PointSet
    >>> from sobolev_index.ingest.pointindex import build_point_index
    >>> rng = np.random.default_rng(0)
    >>> clouds = [PointSet(f"c{i}", rng.normal(i % 2, size=(6, 2)), label="ab"[i % 2])
    ...           for i in range(4)]
    >>> index, report = build_point_index("clouds.idx", clouds, nodes=8, seed=0)
    >>> report["kind"], report["points"], report["dim"], report["nodes"], report["added"]
    ('clouds', 24, 2, 8, ['c0', 'c1', 'c2', 'c3'])
    >>> report["recipe"]["roots"], report["recipe"]["given"]
    (8, ['nodes'])
    >>> found = index.search("c0", k=2)
    >>> found.keys
    [['c0', 'c2']]
    >>> index.close()
    """
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
    """Measures of point sets on the graph of a point index.

    Each point goes to its nearest node of the index's graph and the
    weights per node add up, as when the sets are added
    (:func:`~sobolev_index.ingest.pointsets.pointsets_to_measures`): these
    are the measures to search with. Nothing is written.

    Parameters
    ----------
    index : SobolevIndex
        An index whose graph has node coordinates (one built by
        :func:`build_point_index`), open for reading or writing.
    pointsets : iterable of PointSet
        The point sets, of the graph's dimension.

    Returns
    -------
    list of (nodes, masses)
        One pair per point set, in order: sorted int64 node ids and the
        float64 sums of weights on them (not normalised).

    Raises
    ------
    CorpusError
        If the graph has no node coordinates, or a point set's dimension
        differs from the graph's.

    Examples
    --------
    >>> import numpy as np
    >>> from sobolev_index.ingest.pointsets import PointSet
    >>> from sobolev_index.ingest.pointindex import build_point_index, point_measures
    >>> rng = np.random.default_rng(0)
    >>> clouds = [PointSet(f"c{i}", rng.normal(i % 2, size=(6, 2))) for i in range(4)]
    >>> index, _ = build_point_index("measured.idx", clouds, nodes=8, seed=0)
    >>> query = PointSet("q", rng.normal(size=(6, 2)))
    >>> nodes, masses = point_measures(index, [query])[0]
    >>> nodes.tolist(), masses.round(4).tolist()
    ([1, 4, 6, 7], [0.3333, 0.1667, 0.1667, 0.3333])
    >>> found = index.search([(nodes, masses)], k=2)
    >>> found.keys, found.distances.round(4).tolist()
    ([['c1', 'c2']], [[1.2884, 2.2129]])
    >>> index.close()
    """
    if index.graph.coords is None:
        raise CorpusError(f"the index at {index.path} has no node coordinates to place points")
    return pointsets_to_measures(list(pointsets), index.graph)


def add_pointsets(index, pointsets, *, batch_size=1000, progress=None, upsert=False,
                  skip_existing=False):
    """Add point sets to a point index, in committed batches.

    Every point set becomes a measure on the index's graph (each point to
    its nearest node). All input is checked before the first batch is
    written: the keys, and for a diagram index the weighting the build
    recorded. The batches before an interruption stay committed (a
    KeyboardInterrupt carries their keys as ``added``), so the same call
    with ``skip_existing`` resumes it.

    Parameters
    ----------
    index : SobolevIndex
        A point index (from :func:`build_point_index`), open for writing.
    pointsets : iterable of PointSet
        The point sets, of the graph's dimension, with unique keys.
    batch_size : int, default=1000
        Point sets per committed batch.
    progress : callable or None, default=None
        Called as ``progress("adding", done, total)`` as batches are
        written; None reports nothing.
    upsert : bool, default=False
        Replace the live point sets that have the keys given, instead of
        refusing those keys.
    skip_existing : bool, default=False
        Leave out the point sets whose keys are live already (reported as
        ``existing``). Exclusive with ``upsert``.

    Returns
    -------
    dict
        ``added`` (the keys written, in order), ``replaced`` (how many live
        point sets were replaced), ``existing`` (the keys left out by
        ``skip_existing``) and ``skipped`` (always empty: a point set is
        never empty).

    Raises
    ------
    CorpusError
        If the index is open for reading, an item is not a PointSet, a
        point set's dimension differs from the graph's, or the graph has no
        node coordinates.
    CorpusKeyError
        If a key is given twice, or (without ``upsert`` or
        ``skip_existing``) is in the index already.
    ValueError
        If ``batch_size`` is not an integer >= 1, ``upsert`` and
        ``skip_existing`` are both true, or diagrams do not carry the
        weighting the index records.

    Examples
    --------
    >>> import numpy as np
    >>> from sobolev_index.ingest.pointsets import PointSet
    >>> from sobolev_index.ingest.pointindex import add_pointsets, build_point_index
    >>> rng = np.random.default_rng(0)
    >>> clouds = [PointSet(f"c{i}", rng.normal(i % 2, size=(6, 2))) for i in range(4)]
    >>> index, _ = build_point_index("added.idx", clouds, nodes=8, seed=0)
    >>> new = [PointSet("c4", rng.normal(size=(6, 2)), label="a")]
    >>> add_pointsets(index, new)
    {'added': ['c4'], 'replaced': 0, 'existing': [], 'skipped': []}
    >>> add_pointsets(index, new, skip_existing=True)
    {'added': [], 'replaced': 0, 'existing': ['c4'], 'skipped': []}
    >>> len(index)
    5
    >>> index.close()
    """
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
