"""Parsing point-set files: lines and JSON values of a point-cloud file,
the rows of a persistence-diagram file (text or ``.npy``), each value
checked, every error a :class:`~sobolev_index.errors.PointsFileError`
naming the file, the line or row, the field and what was expected.

``pointsets.py`` builds :class:`~sobolev_index.ingest.pointsets.PointSet`
objects from what is read here; this module knows nothing of them.
"""
import os
import sys

import numpy as np

from ..errors import CorpusError, PointsFileError
from ..measures import TOTAL_MAX, TOTAL_MIN
from .fill import check_storable, describe_json
from .inputs import regular_file
from .parsing import is_number

# Header names recognised for the dimension column of a diagram file.
DIMENSION_NAMES = ("dimension", "dim", "homology_dimension")

# Numbers as json.loads returns them; bool is excluded on purpose, because
# isinstance(True, int) would let `true` pass as the coordinate 1.
JSON_NUMBER = (int, float)


# The largest coordinate (in absolute value) a point may have: squares of
# differences of such coordinates, summed over many dimensions, stay finite
# in float64 (see the module's docstring).
COORDINATE_MAX = 1e150


COORDINATE_RANGE = (f"between {-COORDINATE_MAX:g} and {COORDINATE_MAX:g} (larger ones would "
                     "overflow when squared to find the nearest node; rescale the points)")


def first_too_large(array):
    """Index (a tuple) of the first value of ``array`` beyond COORDINATE_MAX
    in absolute value, or None."""
    big = np.argwhere(np.abs(array) > COORDINATE_MAX)
    return tuple(int(i) for i in big[0]) if len(big) else None


def check_utf8(text, what, key):
    """ValueError for a key or label with a lone surrogate, which the
    index's catalog cannot store (the readers say so earlier, with the file
    and line)."""
    try:
        check_storable(text, what, f"point set {key!r}")
    except CorpusError as exc:
        raise ValueError(str(exc)) from None


def source_name(source):
    if source == "-":
        return "<stdin>"
    if isinstance(source, (str, os.PathLike)):
        return os.fspath(source)
    name = getattr(source, "name", None)
    return name if isinstance(name, str) else "<stream>"


def check_source(source):
    """Fail at call time, not at the first next(), for a missing file."""
    if isinstance(source, (str, os.PathLike)):
        if source == "-":
            return
        if not os.path.exists(source):
            raise FileNotFoundError(2, "No such file or directory", os.fspath(source))
        if os.path.isdir(source):
            raise IsADirectoryError(21, "Is a directory", os.fspath(source))
    elif not hasattr(source, "__iter__"):
        raise TypeError(
            f"source is {type(source).__name__}; expected a path, '-' for stdin, or a file object"
        )


def decoded_lines(handle, name):
    """(line number, text) pairs; decoding per line so that a bad byte is
    reported on its own line instead of somewhere in a buffer."""
    for number, line in enumerate(handle, 1):
        if isinstance(line, bytes):
            try:
                line = line.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise PointsFileError(
                    f"{name} line {number}: byte {exc.start + 1} is not UTF-8; expected UTF-8 text"
                ) from None
        if number == 1:
            line = line.removeprefix("\ufeff")  # editors on Windows add a BOM
        yield number, line


def lines_of(source):
    """Generator of (number, text) for a path, '-' or an open file object.

    Files opened here are closed when the generator finishes or is closed;
    streams given by the caller are left open.
    """
    name = source_name(source)
    if source == "-":
        # Looked up at read time so that a replaced sys.stdin is honoured.
        stream = getattr(sys.stdin, "buffer", sys.stdin)
        yield from decoded_lines(stream, name)
    elif isinstance(source, (str, os.PathLike)):
        with open(source, "rb") as handle:
            yield from decoded_lines(handle, name)
    else:
        yield from decoded_lines(source, name)


# ---------------------------------------------------------- point cloud JSONL
class DuplicateName(Exception):
    pass


def unique_names(pairs):
    # json.loads would silently keep the last of two equal names, which hides
    # a broken export; refuse instead.
    obj = {}
    for name, value in pairs:
        if name in obj:
            raise DuplicateName(name)
        obj[name] = value
    return obj


def finite_array(values, where, field_name, shape_hint):
    try:
        array = np.array(values, dtype=np.float64)
    except OverflowError:
        # Integers beyond float64's range are the only way json can get here.
        raise PointsFileError(
            f"{where}: {field_name} holds an integer too large for a float64; expected finite numbers"
        ) from None
    bad = np.argwhere(~np.isfinite(array))
    if len(bad):
        index = "".join(f"[{int(i)}]" for i in bad[0])
        raise PointsFileError(
            f"{where}: {field_name}{index} is {array[tuple(bad[0])]}; expected a finite number{shape_hint}"
        )
    return array


def json_points(value, where):
    if not isinstance(value, list):
        raise PointsFileError(
            f"{where}: 'points' is {describe_json(value)}; expected a list of points, each a list of numbers"
        )
    if not value:
        raise PointsFileError(f"{where}: 'points' is empty; expected at least one point")
    dim = None
    for i, row in enumerate(value):
        if not isinstance(row, list):
            raise PointsFileError(
                f"{where}: 'points'[{i}] is {describe_json(row)}; expected a list of coordinates"
            )
        if dim is None:
            dim = len(row)
            if dim == 0:
                raise PointsFileError(f"{where}: 'points'[0] has no coordinates; expected at least one")
        elif len(row) != dim:
            raise PointsFileError(
                f"{where}: 'points'[{i}] has {len(row)} coordinates; expected {dim} like 'points'[0]"
            )
        if not all(type(v) in JSON_NUMBER for v in row):
            j = next(j for j, v in enumerate(row) if type(v) not in JSON_NUMBER)
            raise PointsFileError(
                f"{where}: 'points'[{i}][{j}] is {describe_json(row[j])}; expected a number"
            )
    points = finite_array(value, where, "'points'", "")
    big = first_too_large(points)
    if big is not None:
        raise PointsFileError(f"{where}: 'points'[{big[0]}][{big[1]}] is {points[big]:g}; expected a "
                          f"number {COORDINATE_RANGE}")
    return points


def json_weights(value, n, where):
    if value is None:
        return np.full(n, 1.0 / n)
    if not isinstance(value, list):
        raise PointsFileError(
            f"{where}: 'weights' is {describe_json(value)}; expected a list of {n} numbers (one per point)"
        )
    if len(value) != n:
        raise PointsFileError(
            f"{where}: 'weights' has {len(value)} values; expected {n} (one per point)"
        )
    for i, v in enumerate(value):
        if type(v) not in JSON_NUMBER:
            raise PointsFileError(f"{where}: 'weights'[{i}] is {describe_json(v)}; expected a number")
    weights = finite_array(value, where, "'weights'", " >= 0")
    negative = np.flatnonzero(weights < 0)
    if len(negative):
        i = int(negative[0])
        raise PointsFileError(f"{where}: 'weights'[{i}] is {weights[i]}; expected a number >= 0")
    with np.errstate(over="ignore"):  # an infinite total is reported below
        total = weights.sum()
    if total == 0:
        raise PointsFileError(f"{where}: 'weights' are all zero; expected at least one positive weight")
    if not np.isfinite(total):
        raise PointsFileError(f"{where}: 'weights' add up to {total}; expected a finite total")
    check_total(total, where, "'weights' add")
    return weights


def check_total(total, where, what):
    """Refuse a total weight that the point set's measure could not be
    normalised from (see :func:`~sobolev_index.measures.as_measure_batch`):
    here, the error can still name the line or file."""
    if total < TOTAL_MIN:
        raise PointsFileError(f"{where}: {what} up to {total:g}, below {TOTAL_MIN:g}, too small to "
                          "normalise exactly; expected a larger total (multiply the weights by a "
                          "common factor)")
    if total > TOTAL_MAX:
        raise PointsFileError(f"{where}: {what} up to {total:g}, above {TOTAL_MAX:g}; expected a "
                          "smaller total (divide the weights by a common factor)")


# -------------------------------------------------------- persistence diagrams
def is_real(value, kinds):
    return isinstance(value, kinds) and not isinstance(value, (bool, np.bool_))


def split_fields(line):
    # A comma anywhere makes the line comma-separated (spaces around the
    # commas allowed); otherwise any run of spaces or tabs separates.
    if "," in line:
        return [part.strip() for part in line.split(",")]
    return line.split()


def text_diagram(path, name):
    """Columns (birth, death, dimension or None) and 1-based line numbers."""
    header, header_line = None, None
    rows, lines = [], []
    for number, line in lines_of(path):
        text = line.strip()
        if not text or text.startswith("#"):
            continue
        fields = split_fields(text)
        if header is None and not rows and not any(is_number(f) for f in fields):
            header, header_line = [f.lower() for f in fields], number
            continue
        rows.append(fields)
        lines.append(number)

    if header is not None and "birth" in header and "death" in header:
        n_cols = len(header)
        columns = {"birth": header.index("birth"), "death": header.index("death")}
        dim_name = next((d for d in DIMENSION_NAMES if d in header), None)
        if dim_name is not None:
            columns["dimension"] = header.index(dim_name)
        reference = f"the header on line {header_line}"
    else:
        # Without names the columns are positional: birth, death[, dimension].
        if header is not None:
            n_cols, reference = len(header), f"the header on line {header_line}"
        elif rows:
            n_cols, reference = len(rows[0]), f"line {lines[0]}"
        else:
            n_cols, reference = 2, None
        if n_cols not in (2, 3):
            where = f"line {header_line}" if header is not None else f"line {lines[0]}"
            raise PointsFileError(
                f"{name} {where}: {n_cols} columns; expected 2 (birth, death) or "
                "3 (birth, death, dimension), or a header naming 'birth' and 'death'"
            )
        columns = {"birth": 0, "death": 1}
        if n_cols == 3:
            columns["dimension"] = 2

    values = np.empty((len(rows), len(columns)), dtype=np.float64)
    order = list(columns.items())
    for r, (fields, number) in enumerate(zip(rows, lines)):
        if len(fields) != n_cols:
            raise PointsFileError(
                f"{name} line {number}: {len(fields)} fields; expected {n_cols} like {reference}"
            )
        for c, (column, position) in enumerate(order):
            try:
                values[r, c] = float(fields[position])
            except ValueError:
                raise PointsFileError(
                    f"{name} line {number}: '{column}' (column {position + 1}) is "
                    f"{fields[position]!r:.40}; expected a number"
                ) from None
    dims = values[:, 2] if "dimension" in columns else None
    return values[:, 0], values[:, 1], dims, np.asarray(lines, dtype=np.int64), "line"


def npy_diagram(path, name):
    """Columns (birth, death, dimension or None) and 0-based row indices."""
    try:
        with regular_file(path) as local:  # np.load seeks: a pipe is copied first
            array = np.load(local, allow_pickle=False)
    except (ValueError, OSError, EOFError) as exc:
        raise PointsFileError(f"{name}: cannot be read as a .npy array ({exc})") from None
    if not isinstance(array, np.ndarray):  # an .npz archive
        raise PointsFileError(f"{name}: holds several arrays; expected one (n, 2) array")
    if array.ndim != 2 or array.shape[1] not in (2, 3):
        raise PointsFileError(
            f"{name}: array of shape {array.shape}; expected (n, 2) rows of (birth, death) "
            "or (n, 3) rows of (birth, death, dimension)"
        )
    if array.dtype.kind not in "iuf":
        raise PointsFileError(f"{name}: array of dtype {array.dtype}; expected real numbers")
    array = array.astype(np.float64)
    dims = array[:, 2] if array.shape[1] == 3 else None
    return array[:, 0], array[:, 1], dims, np.arange(len(array)), "row"
