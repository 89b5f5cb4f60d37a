"""Weighted point sets as measures: point clouds and persistence diagrams.

A point set is a finite set of points in R^d with non-negative weights. It
becomes a measure on a graph's nodes by sending every point to its nearest
node and adding up the weights per node (:func:`pointsets_to_measures`). The
graph is usually built from the points of all the sets together with
:meth:`Graph.from_points <sobolev_index.graph.Graph.from_points>`.

Two readers produce point sets:

* :func:`read_point_clouds` reads JSON Lines, one point set per line::

      {"key": "a", "points": [[0, 1], [2, 3]], "weights": [1, 3], "label": "x"}

* :func:`read_diagrams` reads persistence diagrams, one per file, as CSV or
  text (``birth, death`` rows) or ``.npy`` arrays (:func:`read_diagram`).

Every malformed input raises :class:`~sobolev_index.errors.PointsFileError`
(a CorpusError) naming the file, the line (1-based) or array row (0-based),
the field and what was expected.

Coordinates must be finite and at most :data:`COORDINATE_MAX` (1e150) in
absolute value. Finding a point's nearest node squares coordinates (and
their differences): beyond about 1e154 the squares are not finite in
float64, every node is "infinitely far" and the point would land on an
arbitrary node, so larger values are refused rather than placed wrongly. No
measurement needs them; a value near the float64 limit (1.8e308) is usually a
stand-in for infinity, which a diagram writes as ``inf`` (see ``max_death``).
Rescale data that really is that large.
"""
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..errors import CorpusError, PointsFileError
from .fill import (
    FIELDS_MAX_DEPTH,
    check_fields_depth,
    check_storable,
    describe_json,
    key_text,
    label_text,
)
from .pointfiles import (
    COORDINATE_MAX,
    COORDINATE_RANGE,
    DuplicateName,
    check_source,
    check_total,
    check_utf8,
    first_too_large,
    is_real,
    json_points,
    json_weights,
    lines_of,
    npy_diagram,
    source_name,
    text_diagram,
    unique_names,
)

__all__ = [
    "COORDINATE_MAX",
    "PointSet",
    "pointsets_to_measures",
    "read_diagram",
    "read_diagrams",
    "read_point_clouds",
]

DIAGRAM_WEIGHTS = ("uniform", "persistence")
DIAGRAM_COORDINATES = ("birth_death", "birth_persistence")


# ---------------------------------------------------------------- record type
@dataclass(eq=False)  # arrays make the generated __eq__ ambiguous
class PointSet:
    """A finite weighted point set in R^d: one future measure.

    The constructor checks its arguments and stores ``points`` and
    ``weights`` as C-contiguous float64 arrays; ``len(pointset)`` is the
    number of points n.

    Parameters
    ----------
    key : str
        Non-empty name of the point set; it becomes the document's key, so
        it must be unique within a file and an index.
    points : array-like of shape (n, d)
        Finite coordinates of at most :data:`COORDINATE_MAX` (1e150) in
        absolute value, n >= 1 and d >= 1. Stored as C-contiguous float64.
    weights : array-like of shape (n,), default=None
        Finite, non-negative weights, not all zero. ``None`` means the
        uniform weights 1 / n.
    label : str or None, default=None
        Optional class label. Key and label must be text UTF-8 can store (no
        lone surrogates).
    fields : dict, default={}
        Any other JSON-serialisable data kept with the point set; ``None``
        is taken as an empty dict.

    Raises
    ------
    ValueError
        If the key, shapes or values are invalid (a non-finite or too large
        coordinate, a negative weight, weights that add up to zero, a label
        or fields of the wrong type). The readers check their input first,
        with file and line in the message, so they never get here with bad
        values.

    See Also
    --------
    read_point_clouds : Point sets from JSON Lines.
    read_diagrams : Point sets from persistence diagram files.
    pointsets_to_measures : Point sets as measures on a graph's nodes.

    Examples
    --------
    >>> from sobolev_index.ingest.pointsets import PointSet
    >>> cloud = PointSet("a", [[0.0, 1.0], [2.0, 3.0], [4.0, 5.0]], label="x")
    >>> len(cloud), cloud.dim
    (3, 2)
    >>> cloud.weights.round(4).tolist()
    [0.3333, 0.3333, 0.3333]
    >>> PointSet("b", [[0.0, 1.0]], weights=[-1.0])
    Traceback (most recent call last):
        ...
    ValueError: point set 'b' has weights ...; expected finite values >= 0 with a positive, finite sum
    """

    key: str
    points: np.ndarray
    weights: np.ndarray = None
    label: str = None
    fields: dict = field(default_factory=dict)

    def __post_init__(self):
        if not isinstance(self.key, str) or not self.key:
            raise ValueError(f"key is {self.key!r}; expected a non-empty str")
        check_utf8(self.key, "key", self.key)
        points = np.ascontiguousarray(self.points, dtype=np.float64)
        if points.ndim != 2 or points.shape[0] < 1 or points.shape[1] < 1:
            raise ValueError(
                f"point set {self.key!r} has points of shape {points.shape}; "
                "expected (n, d) with n >= 1 and d >= 1"
            )
        if not np.isfinite(points).all():
            row = int(np.flatnonzero(~np.isfinite(points).all(axis=1))[0])
            raise ValueError(f"point set {self.key!r} has a non-finite coordinate in row {row}")
        big = first_too_large(points)
        if big is not None:
            raise ValueError(f"point set {self.key!r} has the coordinate {points[big]:g} in row "
                             f"{big[0]}; expected coordinates {COORDINATE_RANGE}")
        n = points.shape[0]
        if self.weights is None:
            weights = np.full(n, 1.0 / n)
        else:
            weights = np.ascontiguousarray(self.weights, dtype=np.float64)
        if weights.shape != (n,):
            raise ValueError(
                f"point set {self.key!r} has weights of shape {weights.shape}; expected ({n},), one per point"
            )
        with np.errstate(over="ignore"):  # a sum that overflows is refused below
            total = weights.sum()
        if not np.isfinite(weights).all() or (weights < 0).any() or not 0 < total < np.inf:
            raise ValueError(
                f"point set {self.key!r} has weights {weights!r:.80}; "
                "expected finite values >= 0 with a positive, finite sum"
            )
        if self.label is not None and not isinstance(self.label, str):
            raise ValueError(f"point set {self.key!r} has label {self.label!r}; expected a str or None")
        if self.label is not None:
            check_utf8(self.label, "label", self.key)
        if self.fields is None:
            self.fields = {}
        elif not isinstance(self.fields, dict):
            raise ValueError(f"point set {self.key!r} has fields {self.fields!r:.60}; expected a dict")
        self.points = points
        self.weights = weights

    def __len__(self):
        return self.points.shape[0]

    @property
    def dim(self):
        """int: Dimension d of the points."""
        return self.points.shape[1]


def read_point_clouds(source):
    r"""Read weighted point clouds from JSON Lines.

    Each non-blank line is one JSON object, for example
    ``{"key": "a", "points": [[0, 1], [2, 3]], "weights": [1, 3], "label": "x"}``:

    - ``"key"`` (required): a non-empty string, or an integer (kept as its
      decimal text, as the text readers keep it), unique within the file.
    - ``"points"`` (required): a list of n >= 1 points, each a list of d >= 1
      finite numbers; d is the same on every line of the file.
    - ``"weights"`` (optional): n finite numbers >= 0, not all zero. Missing
      or ``null`` means the uniform weights 1 / n.
    - ``"label"`` (optional): a string or a finite number (kept as its JSON
      text, "3" or "1.5"); missing or ``null`` means no label. ``true``,
      ``false``, objects and lists are refused, as the text reader refuses
      them.
    - any other name goes, unchanged, to :attr:`PointSet.fields`; they may
      nest objects and lists at most ``FIELDS_MAX_DEPTH`` (100) levels.

    Coordinates are at most :data:`COORDINATE_MAX` (1e150) in absolute value,
    and the weights add up to between 1e-300 and 1e300. Keys and labels are
    text UTF-8 can store (a JSON escape such as ``"\udcff"``, a lone
    surrogate, is refused).

    Parameters
    ----------
    source : str, path-like or file object
        A path to a UTF-8 file, ``"-"`` for standard input, or an open file
        object (text or binary) yielding lines. A file object is read from its
        current position and not closed.

    Returns
    -------
    iterator of PointSet
        Lazily, one per non-blank line, in file order. A malformed line raises
        when it is reached; the lines before it have been yielded.

    Raises
    ------
    PointsFileError
        A :class:`~sobolev_index.errors.CorpusError`, on malformed input,
        when the reading reaches it, e.g. ``"points.jsonl line 7: 'weights'
        has 3 values; expected 4 (one per point)"``.
    FileNotFoundError
        At call time, if ``source`` is a path that does not exist
        (:class:`IsADirectoryError` if it is a directory).
    TypeError
        At call time, if ``source`` is neither a path nor a file object.

    See Also
    --------
    read_diagrams : Point sets from persistence diagram files.
    sobolev_index.ingest.pointindex.read_pointsets : Point sets from files of either kind.

    Examples
    --------
    >>> from sobolev_index.ingest.pointsets import read_point_clouds
    >>> with open("clouds.jsonl", "w", encoding="utf-8") as f:
    ...     _ = f.write('{"key": "a", "points": [[0, 0], [1, 0]], "label": "x"}\n')
    ...     _ = f.write('{"key": "b", "points": [[0, 1], [1, 1], [2, 1]], '
    ...                 '"weights": [1, 2, 1], "colour": "red"}\n')
    >>> for cloud in read_point_clouds("clouds.jsonl"):
    ...     print(cloud.key, len(cloud), cloud.weights.tolist(), cloud.label, cloud.fields)
    a 2 [0.5, 0.5] x {}
    b 3 [1.0, 2.0, 1.0] None {'colour': 'red'}

    A malformed line is an error that names it:

    >>> with open("bad.jsonl", "w", encoding="utf-8") as f:
    ...     _ = f.write('{"key": "a", "points": [[0, 0], [1, 0]], "weights": [1]}\n')
    >>> list(read_point_clouds("bad.jsonl"))
    Traceback (most recent call last):
        ...
    sobolev_index.errors.PointsFileError: bad.jsonl line 1: 'weights' has 1 values; expected 2 (one per point)
    """
    check_source(source)
    return _iter_point_clouds(source)


def _iter_point_clouds(source):
    name = source_name(source)
    first_dim = None  # (dimension, line) of the first point set
    key_lines = {}
    for number, line in lines_of(source):
        if not line.strip():
            continue
        where = f"{name} line {number}"
        try:
            record = json.loads(line, object_pairs_hook=unique_names)
        except DuplicateName as exc:
            raise PointsFileError(
                f"{where}: the name {exc.args[0]!r} appears twice in one object; expected each name once"
            ) from None
        except json.JSONDecodeError as exc:
            raise PointsFileError(
                f"{where}: not valid JSON ({exc.msg} at column {exc.colno}); "
                "expected one JSON object per line"
            ) from None
        except RecursionError:
            # json.loads recurses once per level of nesting.
            raise PointsFileError(
                f"{where}: objects and lists nest too deeply to be read; expected fields "
                f"nested at most {FIELDS_MAX_DEPTH} levels"
            ) from None
        if not isinstance(record, dict):
            raise PointsFileError(
                f"{where}: the line holds {describe_json(record)}; expected a JSON object with "
                "'key' and 'points'"
            )

        if "key" not in record:
            raise PointsFileError(f"{where}: 'key' is missing; expected a non-empty string or an "
                                  "integer")
        try:
            key = key_text(record.pop("key"), where)
        except CorpusError as exc:
            raise PointsFileError(str(exc)) from None
        if key in key_lines:
            raise PointsFileError(
                f"{where}: 'key' {key!r} was already used on line {key_lines[key]}; expected unique keys"
            )

        if "points" not in record:
            raise PointsFileError(f"{where}: 'points' is missing; expected a list of points")
        points = json_points(record.pop("points"), where)
        if first_dim is None:
            first_dim = (points.shape[1], number)
        elif points.shape[1] != first_dim[0]:
            raise PointsFileError(
                f"{where}: 'points' have dimension {points.shape[1]}, but line {first_dim[1]} has "
                f"dimension {first_dim[0]}; expected one dimension for the whole file"
            )
        weights = json_weights(record.pop("weights", None), len(points), where)
        # The text reader keeps labels by the same rule (label_text).
        label = label_text(record.pop("label", None), where)
        check_fields_depth(record, where)
        key_lines[key] = number
        yield PointSet(key=key, points=points, weights=weights, label=label, fields=record)


def _check_diagram_options(dimension, max_death):
    if dimension is not None and not (is_real(dimension, (int, np.integer)) and dimension >= 0):
        raise ValueError(f"dimension is {dimension!r}; expected an integer >= 0 or None")
    if max_death is not None and not (
        is_real(max_death, (int, float, np.integer, np.floating)) and np.isfinite(max_death)
    ):
        raise ValueError(f"max_death is {max_death!r}; expected a finite number or None")


def _load_diagram(path, dimension, max_death):
    name = source_name(path)
    if Path(path).suffix.lower() == ".npy":
        birth, death, dims, positions, unit = npy_diagram(path, name)
    else:
        birth, death, dims, positions, unit = text_diagram(path, name)

    def at(i):
        return f"{name} {unit} {int(positions[i])}"

    bad = np.flatnonzero(~np.isfinite(birth))
    if len(bad):
        i = bad[0]
        raise PointsFileError(f"{at(i)}: 'birth' is {birth[i]}; expected a finite number")
    bad = np.flatnonzero(np.isnan(death) | (death == -np.inf))
    if len(bad):
        i = bad[0]
        raise PointsFileError(f"{at(i)}: 'death' is {death[i]}; expected a finite number or inf")
    bad = np.flatnonzero(death < birth)
    if len(bad):
        i = bad[0]
        raise PointsFileError(
            f"{at(i)}: 'death' {death[i]} is less than 'birth' {birth[i]}; expected death >= birth"
        )

    if dims is not None:
        bad = np.flatnonzero(~np.isfinite(dims) | (dims != np.round(dims)) | (dims < 0))
        if len(bad):
            i = bad[0]
            raise PointsFileError(f"{at(i)}: 'dimension' is {dims[i]}; expected a whole number >= 0")
        if dimension is None:
            present = np.unique(dims).astype(np.int64)
            if len(present) > 1:
                # Mixing homology dimensions in one measure is almost always
                # a mistake, so the caller must choose.
                raise PointsFileError(
                    f"{name}: points of dimensions {', '.join(map(str, present))}; "
                    "pass dimension= to choose one"
                )
        else:
            keep = dims == dimension
            birth, death, positions = birth[keep], death[keep], positions[keep]
    elif dimension is not None:
        raise PointsFileError(
            f"{name}: no dimension column, but dimension={dimension} was given; "
            "expected a third column (or a header naming 'dimension')"
        )

    infinite = death == np.inf
    n_infinite = int(infinite.sum())
    if max_death is None:
        birth, death = birth[~infinite], death[~infinite]
    else:
        bad = np.flatnonzero(infinite & (birth > max_death))
        if len(bad):
            i = bad[0]
            raise PointsFileError(
                f"{at(i)}: 'birth' {birth[i]} is above max_death={max_death}, so its infinite "
                "death cannot be clipped; expected max_death >= every birth"
            )
        death = np.where(infinite, float(max_death), death)
    for column, values in (("birth", birth), ("death", death)):
        bad = np.flatnonzero(np.abs(values) > COORDINATE_MAX)
        if len(bad):
            i = bad[0]
            raise PointsFileError(f"{at(i)}: '{column}' is {values[i]:g}; expected a number "
                              f"{COORDINATE_RANGE}, or inf for a death that never comes")
    return np.column_stack([birth, death]), n_infinite


def read_diagram(path, *, dimension=None, max_death=None, return_n_infinite=False):
    r"""Read one persistence diagram as an (n, 2) array of (birth, death).

    Formats, chosen by the file suffix:

    - ``.npy``: an (n, 2) array of (birth, death), or (n, 3) with the
      homology dimension in the third column. Errors name 0-based rows.
    - anything else: text, one point per line, fields separated by commas
      (spaces around them allowed) or by spaces/tabs. Blank lines and lines
      starting with ``#`` are skipped. The first other line is a header if
      none of its fields is a number. A header naming ``birth`` and ``death``
      (any case, any order; ``dimension``/``dim`` optional) locates the
      columns by name; otherwise the columns are positional: ``birth,
      death`` or ``birth, death, dimension``. ``inf`` is read as infinity.
      Errors name 1-based line numbers.

    Parameters
    ----------
    path : str or path-like
        The diagram file.
    dimension : int or None, default=None
        Keep only the points of this homology dimension; the file must then
        have a dimension column. With ``None`` a dimension column is allowed
        only if it holds a single value.
    max_death : float or None, default=None
        What to do with points that never die (death = inf): ``None`` drops
        them; a number replaces their death by ``max_death`` (finite deaths
        are left as they are).
    return_n_infinite : bool, default=False
        Also return how many points (in the chosen dimension) had death = inf.

    Returns
    -------
    diagram : ndarray of shape (n, 2), float64
        The (birth, death) rows in file order; n may be 0.
    n_infinite : int
        Only if ``return_n_infinite``: the number of infinite points dropped
        or clipped.

    Raises
    ------
    PointsFileError
        A :class:`~sobolev_index.errors.CorpusError`: if a value is not a
        number, a birth is not finite, a death is NaN or below its birth, the
        columns are inconsistent, the dimension column does not fit
        ``dimension`` (or holds several dimensions and ``dimension`` is
        None), a birth is above ``max_death`` on a point that never dies, or
        a value is beyond :data:`COORDINATE_MAX`.
    ValueError
        If ``dimension`` is not an integer >= 0 or ``max_death`` not a
        finite number.
    FileNotFoundError
        If ``path`` does not exist.
    TypeError
        If ``path`` is not a file path (``"-"`` included).

    See Also
    --------
    read_diagrams : Diagram files as point sets.

    Examples
    --------
    >>> from sobolev_index.ingest.pointsets import read_diagram
    >>> with open("diagram.csv", "w", encoding="utf-8") as f:
    ...     _ = f.write("birth,death\n0.0,1.0\n0.5,0.75\n0.2,inf\n")
    >>> read_diagram("diagram.csv").tolist()
    [[0.0, 1.0], [0.5, 0.75]]
    >>> read_diagram("diagram.csv", max_death=2.0).tolist()
    [[0.0, 1.0], [0.5, 0.75], [0.2, 2.0]]
    >>> diagram, n_infinite = read_diagram("diagram.csv", return_n_infinite=True)
    >>> diagram.shape, n_infinite
    ((2, 2), 1)

    A ``.npy`` array with a dimension column, one dimension chosen:

    >>> import numpy as np
    >>> np.save("diagram.npy", np.array([[0.0, 2.0, 0], [0.1, 0.3, 1], [0.2, 0.6, 1]]))
    >>> read_diagram("diagram.npy", dimension=1).tolist()
    [[0.1, 0.3], [0.2, 0.6]]
    >>> read_diagram("diagram.npy")
    Traceback (most recent call last):
        ...
    sobolev_index.errors.PointsFileError: diagram.npy: points of dimensions 0, 1; pass dimension= ...
    """
    _check_diagram_options(dimension, max_death)
    if not isinstance(path, (str, os.PathLike)) or path == "-":
        raise TypeError(f"path is {path!r:.60}; expected a file path")
    check_source(path)
    diagram, n_infinite = _load_diagram(path, dimension, max_death)
    return (diagram, n_infinite) if return_n_infinite else diagram


def read_diagrams(paths, *, dimension=None, max_death=None, weights="uniform",
                  coordinates="birth_death", labels=None, label_from_dir=False):
    r"""Read persistence diagrams, one :class:`PointSet` per file.

    Parameters
    ----------
    paths : str, path-like or iterable of them
        Diagram files, in the formats of :func:`read_diagram`. A single path
        is one file (not an iterable of characters).
    dimension : int or None, default=None
        As in :func:`read_diagram`: keep only the points of this homology
        dimension.
    max_death : float or None, default=None
        As in :func:`read_diagram`: ``None`` drops the points that never
        die, a number becomes their death.
    weights : {"uniform", "persistence"}, default="uniform"
        ``"uniform"`` gives every point weight 1 / n; ``"persistence"`` gives
        weight death - birth, so points near the diagonal (noise) count less.
        Index builds weight diagrams by persistence unless told otherwise
        (``read_pointsets`` and ``build_point_index`` default to it, and the
        build refuses diagrams read with other weights), so pass
        ``weights="persistence"`` for diagrams that go into such an index.
    coordinates : {"birth_death", "birth_persistence"}, default="birth_death"
        The point coordinates: (birth, death) or (birth, death - birth).
    labels : mapping or None, default=None
        Label per key (file stem); keys not in it get no label. Values are
        turned into str.
    label_from_dir : bool, default=False
        Label each diagram with the name of the directory holding it, as in a
        ``root/<class>/<sample>.csv`` layout. Exclusive with ``labels``.

    Returns
    -------
    iterator of PointSet
        Lazily, in the order of ``paths``. ``key`` is the file stem;
        ``fields`` holds ``"path"`` and ``"n_infinite"`` (points with death =
        inf that were dropped, or clipped when ``max_death`` is given).

    Raises
    ------
    PointsFileError
        A :class:`~sobolev_index.errors.CorpusError`, when the reading
        reaches the file: as :func:`read_diagram`; also if a diagram has no
        point left after filtering, if ``weights="persistence"`` and every
        point has zero persistence, or if two files share a stem (their keys
        would clash).
    ValueError
        At call time, if an option is not one of its values, or both
        ``labels`` and ``label_from_dir`` are given.

    See Also
    --------
    read_diagram : One diagram as an array.
    sobolev_index.ingest.pointindex.read_pointsets : Diagrams from files and folders.

    Examples
    --------
    >>> import os
    >>> from sobolev_index.ingest.pointsets import read_diagrams
    >>> os.makedirs("diagrams/circle")
    >>> with open("diagrams/circle/one.csv", "w", encoding="utf-8") as f:
    ...     _ = f.write("0.0,1.0\n0.5,0.75\n0.2,inf\n")
    >>> with open("diagrams/circle/two.csv", "w", encoding="utf-8") as f:
    ...     _ = f.write("0.0,0.5\n0.1,0.9\n")
    >>> paths = ["diagrams/circle/one.csv", "diagrams/circle/two.csv"]
    >>> for diagram in read_diagrams(paths, weights="persistence", label_from_dir=True):
    ...     print(diagram.key, diagram.label, diagram.points.tolist(),
    ...           diagram.weights.round(4).tolist(), diagram.fields["n_infinite"])
    one circle [[0.0, 1.0], [0.5, 0.75]] [1.0, 0.25] 1
    two circle [[0.0, 0.5], [0.1, 0.9]] [0.5, 0.8] 0
    """
    _check_diagram_options(dimension, max_death)
    if weights not in DIAGRAM_WEIGHTS:
        raise ValueError(f"weights is {weights!r}; expected one of {', '.join(map(repr, DIAGRAM_WEIGHTS))}")
    if coordinates not in DIAGRAM_COORDINATES:
        raise ValueError(
            f"coordinates is {coordinates!r}; expected one of {', '.join(map(repr, DIAGRAM_COORDINATES))}"
        )
    if labels is not None and label_from_dir:
        raise ValueError("give labels or label_from_dir=True, not both")
    if labels is not None and not hasattr(labels, "get"):
        raise ValueError(f"labels is {type(labels).__name__}; expected a mapping from key to label")
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    return _iter_diagrams(paths, dimension, max_death, weights, coordinates, labels, label_from_dir)


def _iter_diagrams(paths, dimension, max_death, weights, coordinates, labels, label_from_dir):
    seen = {}
    for path in paths:
        name = source_name(path)
        key = Path(path).stem
        check_storable(key, "its key (the file stem)", name)
        if key in seen:
            raise PointsFileError(
                f"{name}: its key {key!r} (the file stem) is also the key of {seen[key]}; "
                "expected unique file stems"
            )
        diagram, n_infinite = read_diagram(
            path, dimension=dimension, max_death=max_death, return_n_infinite=True
        )
        seen[key] = name
        if len(diagram) == 0:
            chosen = "" if dimension is None else f" in dimension {dimension}"
            dropped = "" if max_death is not None or not n_infinite else \
                f" after dropping {n_infinite} with death = inf (max_death= would keep them)"
            raise PointsFileError(
                f"{name}: no points{chosen}{dropped}; expected at least one point per diagram"
            )
        birth, death = diagram[:, 0], diagram[:, 1]
        persistence = death - birth
        if weights == "uniform":
            w = np.full(len(diagram), 1.0 / len(diagram))
        else:
            w = persistence
            if not w.sum() > 0:
                raise PointsFileError(
                    f"{name}: every point has death = birth, so weights='persistence' gives no mass; "
                    "expected at least one point off the diagonal"
                )
            check_total(w.sum(), name, "the persistence weights add")
        if coordinates == "birth_death":
            points = diagram
        else:
            points = np.column_stack([birth, persistence])
            big = np.flatnonzero(persistence > COORDINATE_MAX)
            if len(big):
                raise PointsFileError(
                    f"{name}: a point has persistence {persistence[big[0]]:g} (death - birth); "
                    f"expected coordinates {COORDINATE_RANGE}")
        if label_from_dir:
            label = Path(path).absolute().parent.name
        elif labels is not None:
            label = labels.get(key)
            label = None if label is None else str(label)
        else:
            label = None
        if label is not None:
            check_storable(label, "its label", name)
        yield PointSet(key=key, points=points, weights=w, label=label,
                       fields={"path": name, "n_infinite": n_infinite})


# ------------------------------------------------------------------- measures
def pointsets_to_measures(pointsets, graph):
    """Map point sets to measures on the nodes of ``graph``.

    Every point goes to its nearest node coordinate
    (:meth:`Graph.nearest_nodes <sobolev_index.graph.Graph.nearest_nodes>`),
    and the weights of the points that share a node add up. Masses are left
    unnormalised: the index normalises them when asked to.

    Parameters
    ----------
    pointsets : iterable of PointSet
        The point sets, all of the graph's dimension.
    graph : Graph
        A graph with node coordinates of the same dimension as the points,
        e.g. from :meth:`Graph.from_points
        <sobolev_index.graph.Graph.from_points>` on all the points.

    Returns
    -------
    list of (nodes, masses)
        One pair per point set, in order: ``nodes`` is a sorted int64 array of
        distinct node ids, ``masses`` the float64 sums of weights per node. The
        masses of a point set add up to the sum of its weights.

    Raises
    ------
    CorpusError
        If a point set's dimension differs from the graph's, or the graph's
        node coordinates go beyond :data:`COORDINATE_MAX` (distances to them
        could overflow, and the nearest node would not be known).
    ValueError
        If the graph has no node coordinates.
    TypeError
        If an item of ``pointsets`` is not a :class:`PointSet`.

    Examples
    --------
    >>> import numpy as np
    >>> from sobolev_index import Graph
    >>> from sobolev_index.ingest.pointsets import PointSet, pointsets_to_measures
    >>> rng = np.random.default_rng(0)
    >>> sets = [PointSet(f"s{i}", rng.normal(size=(5, 2))) for i in range(3)]
    >>> graph = Graph.from_points(np.vstack([s.points for s in sets]), n_nodes=6,
    ...                           edges="knn", k=3, seed=0)
    >>> nodes, masses = pointsets_to_measures(sets, graph)[0]
    >>> nodes.tolist(), masses.round(4).tolist()
    ([0, 2, 4, 5], [0.2, 0.2, 0.4, 0.2])
    >>> pointsets_to_measures([PointSet("x", [[0.0, 0.0, 0.0]])], graph)
    Traceback (most recent call last):
        ...
    sobolev_index.errors.PointsFileError: point set 'x' has points of dimension 3; the graph's nodes ... 2
    """
    if graph.coords is None:
        raise ValueError("the graph has no node coordinates; build it with Graph.from_points")
    graph_dim = graph.coords.shape[1]
    # The points are within COORDINATE_MAX; a graph made elsewhere might not
    # be, and squared distances that overflow would send every point to an
    # arbitrary node (node 0), silently.
    largest = float(np.abs(graph.coords).max()) if graph.coords.size else 0.0
    if not largest <= COORDINATE_MAX:
        raise PointsFileError(
            f"the graph's node coordinates reach {largest:g}; expected coordinates "
            f"{COORDINATE_RANGE}"
        )
    measures = []
    for i, pointset in enumerate(pointsets):
        if not isinstance(pointset, PointSet):
            raise TypeError(f"pointsets[{i}] is {type(pointset).__name__}; expected a PointSet")
        if pointset.dim != graph_dim:
            raise PointsFileError(
                f"point set {pointset.key!r} has points of dimension {pointset.dim}; "
                f"the graph's nodes have dimension {graph_dim}"
            )
        nearest = graph.nearest_nodes(pointset.points)
        nodes, inverse = np.unique(nearest, return_inverse=True)
        masses = np.bincount(inverse.ravel(), weights=pointset.weights, minlength=len(nodes))
        measures.append((nodes.astype(np.int64, copy=False), masses))
    return measures
