"""Bad input that must give one clear error and leave the index as it was:
measures the API is given (ragged, boolean, text or complex values, an
argument that is not a sequence), measures checked as a whole before the
first batch of an add is written, point coordinates whose squares overflow,
labels and keys the readers cannot store, and fields nested too deeply."""
import json
import os
import shutil

import numpy as np
import pytest
import scipy.sparse as sp
from _support import corpus as tc
from _support.cli import run
from _support.index import assert_unchanged, snapshot

from sobolev_index import Graph, SobolevIndex
from sobolev_index.errors import CorpusError, InvalidMeasureError
from sobolev_index.ingest.documents import add_documents, read_corpus
from sobolev_index.ingest.fill import FIELDS_MAX_DEPTH, add_in_batches
from sobolev_index.ingest.pointindex import add_pointsets
from sobolev_index.ingest.pointsets import (
    COORDINATE_MAX,
    PointSet,
    pointsets_to_measures,
    read_diagrams,
    read_point_clouds,
)
from sobolev_index.measures import as_measure_batch

N = 12
GOOD = [(np.array([1, 2]), np.array([0.5, 0.5])), (np.array([3]), None)]


def clouds(keys, seed, dim=2):
    rng = np.random.default_rng(seed)
    return [json.dumps({"key": key, "points": (rng.normal(size=(4, dim)) + 3 * (i % 3)).tolist(),
                        "label": f"c{i % 3}"}) for i, key in enumerate(keys)]


@pytest.fixture(scope="module")
def templates(tmp_path_factory):
    """A point-cloud index and a text index, built once (copy before writing)."""
    directory = tmp_path_factory.mktemp("inputs")
    points = directory / "clouds.jsonl"
    points.write_text("\n".join(clouds([f"c{i}" for i in range(12)], seed=0)) + "\n")
    run("build", directory / "points", "--points", points, "--nodes", 8, "--roots", 2, "--silent")
    corpus_path, vectors_path = tc.make_files(str(directory))
    run("build", directory / "text", "--corpus", corpus_path, "--vectors", vectors_path,
        "--nodes", 8, "--roots", 2, "--silent")
    return {"points": directory / "points", "text": directory / "text"}


@pytest.fixture
def points_index(templates, tmp_path):
    return shutil.copytree(templates["points"], tmp_path / "points")


@pytest.fixture
def text_index(templates, tmp_path):
    return shutil.copytree(templates["text"], tmp_path / "text")


def error_lines(result):
    return [line for line in result.output.splitlines() if line.startswith("Error:")]


def add_two_lines(index, tmp_path, first, second, *extra):
    """``add INDEX FILE --batch-size 1`` of a good first line and a bad
    second one: one Error line, exit status 1, and the index unchanged (the
    good line is not added either). Returns the error line."""
    path = tmp_path / "input.jsonl"
    path.write_bytes(first.encode() + b"\n" + (second if isinstance(second, bytes)
                                               else second.encode()) + b"\n")
    before = snapshot(str(index))
    result = run("add", index, path, "--batch-size", 1, "--silent", *extra, ok=False)
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output and result.exception.__class__ is SystemExit
    lines = error_lines(result)
    assert len(lines) == 1, result.output
    assert_unchanged(before, str(index), f"add of {second!r}")
    return lines[0]


# ------------------------------------------------------------ measures (API)
BAD_ITEMS = {
    "ragged nodes": (([1, [2, 3]], None), r"measure 2 has nodes \[1, \[2, 3\]\], which is not a flat"),
    "ragged masses": (([1, 2], [1.0, [2.0, 3.0]]), "measure 2 has masses .* not a flat"),
    "nodes all booleans": ((np.array([True, False]), None), "measure 2 has node True, a boolean"),
    "a list mixing booleans and ints": (([1, True], None), "measure 2 has node True, a boolean"),
    "a list mixing booleans and floats": (([1.0, False], None), "measure 2 has node False, a boolean"),
    "a NumPy bool in a list": (([1, np.True_], None), "measure 2 has node True, a boolean"),
    "masses booleans": ((np.array([1, 2]), np.array([True, True])), "measure 2 has mass True, a boolean"),
    "a list of masses mixing booleans": (([1, 2], [0.5, True]), "measure 2 has mass True, a boolean"),
    "masses as text": ((np.array([1, 2]), np.array(["a", "b"])), "measure 2 has mass 'a', not a real"),
    "masses as objects": ((np.array([1, 2]), [None, 1.0]), "measure 2 has mass None, not a real"),
    "masses complex": ((np.array([1, 2]), np.array([1 + 1j, 2])), r"measure 2 has mass \(1\+1j\)"),
    "nodes as text": ((np.array(["1", "2"]), None), "measure 2 has node '1', not an integer"),
    "nodes complex": ((np.array([1 + 0j, 2]), None), r"measure 2 has node \(1\+0j\), not an integer"),
    "nodes with a fraction": ((np.array([1.5, 2.0]), None), "measure 2 has node 1.5, not an integer"),
    "nodes 2-D": ((np.array([[1, 2]]), None), r"measure 2 has nodes of shape \(1, 2\)"),
    "a node beyond int64": (([1, 2**70], None), f"measure 2 has node {2**70}, but the graph"),
    "a dict instead of a pair": ({"nodes": [1], "masses": [1.0]}, "measure 2 is dict"),
    "a str of two characters": ("ab", "measure 2 is str 'ab'; expected a"),
}


@pytest.mark.parametrize("case", sorted(BAD_ITEMS))
def test_a_bad_measure_is_named_by_its_number(case):
    item, message = BAD_ITEMS[case]
    with pytest.raises(InvalidMeasureError, match=message):
        as_measure_batch(GOOD + [item], n_nodes=N)


@pytest.mark.parametrize("case", ["ragged nodes", "nodes all booleans",
                                  "a list mixing booleans and ints", "masses booleans",
                                  "masses as objects", "nodes as text"])
@pytest.mark.parametrize("entry", ["add", "search"])
def test_a_bad_measure_is_refused_by_the_index_and_nothing_is_written(points_index, case, entry):
    item, message = BAD_ITEMS[case]
    with SobolevIndex.open(points_index, "a") as index:
        before = snapshot(str(points_index))
        with pytest.raises(InvalidMeasureError, match=message):
            if entry == "add":
                index.add(GOOD + [item], keys=["n0", "n1", "n2"])
            else:
                index.search(GOOD + [item], k=2)
        assert_unchanged(before, str(points_index), case)


def test_booleans_among_numpy_ints_cannot_be_seen():
    # np.array([True, 2]) is already the int64 array [1, 2]: nothing is left
    # to refuse, and it is read as the nodes 1 and 2.
    batch = as_measure_batch([(np.array([True, 2]), None)], n_nodes=N)
    assert batch.nodes.tolist() == [1, 2]


@pytest.mark.parametrize("measures, cls, message", [
    (5, TypeError, "measures is int 5; expected a sequence of"),
    (2.5, TypeError, "measures is float 2.5; expected"),
    (None, TypeError, "measures is None; expected a sequence of"),
    ({"a": 1}, TypeError, "measures is dict"),
    ("abc", TypeError, "measures is str 'abc'"),
    ({(1, 2)}, TypeError, "measures is set"),
    (np.ones((2, N, 1)), InvalidMeasureError, r"measures is an array of shape \(2, 12, 1\)"),
    (np.arange(3), InvalidMeasureError, r"measures is an array of shape \(3,\)"),
    (np.array([["a"] * N]), InvalidMeasureError, "the mass matrix has dtype <U1; expected real"),
    (np.ones((1, N), dtype=bool), InvalidMeasureError, "the mass matrix has dtype bool"),
    (sp.csr_matrix(np.ones((1, N), dtype=bool)), InvalidMeasureError, "mass matrix has dtype bool"),
])
def test_measures_that_are_not_a_sequence_or_matrix(measures, cls, message):
    with pytest.raises(cls, match=message):
        as_measure_batch(measures, n_nodes=N)


def test_names_replace_measure_numbers_in_messages():
    with pytest.raises(InvalidMeasureError, match=r"^point set 'z' has masses that sum to 1.99998e-320"):
        as_measure_batch(GOOD + [(np.array([1, 2]), np.array([1e-320, 1e-320]))], n_nodes=N,
                         names=["point set 'x'", "point set 'y'", "point set 'z'"])


def test_rows_of_a_batch_equal_the_batch_of_those_rows():
    rng = np.random.default_rng(4)
    measures = [(rng.integers(0, N, size=int(rng.integers(1, 5))), rng.random(4)[:0] + 1.0)
                for _ in range(9)]
    measures = [(nodes, np.full(len(nodes), 1.0 + i)) for i, (nodes, _) in enumerate(measures)]
    whole = as_measure_batch(measures, n_nodes=N)
    for start, stop in ((0, 4), (4, 8), (8, 12), (3, 3)):
        part, alone = whole.rows(start, stop), as_measure_batch(measures[start:stop], n_nodes=N)
        assert len(part) == len(alone)
        for name in ("indptr", "nodes", "masses", "row_scale"):
            np.testing.assert_array_equal(getattr(part, name), getattr(alone, name))


# ----------------------------------- every measure checked before the first batch
def test_cli_add_refuses_a_second_line_that_cannot_be_normalised(points_index, tmp_path):
    good, _ = clouds(["new0", "x"], seed=5)
    bad = json.dumps({"key": "tiny", "points": [[0.1, 0.2], [1, 1]], "weights": [1e-320, 1e-320]})
    line = add_two_lines(points_index, tmp_path, good, bad)
    assert "input.jsonl line 2: 'weights' add up to 1.99998e-320, below 1e-300" in line


def test_add_pointsets_checks_every_measure_before_the_first_batch(points_index):
    # A PointSet made in Python (no reader checked its total): the index's
    # own check names it by key, before batch 1 of 1 point set is written.
    sets = [PointSet("new0", [[0.1, 0.2]]),
            PointSet("tiny", [[0.1, 0.2], [1.0, 1.0]], weights=[3e-301, 3e-301])]
    with SobolevIndex.open(points_index, "a") as index:
        before = snapshot(str(points_index))
        with pytest.raises(InvalidMeasureError, match=r"^point set 'tiny' has masses that sum "
                                                      r"to 6e-301, below 1e-300"):
            add_pointsets(index, sets, batch_size=1)
        assert_unchanged(before, str(points_index), "add_pointsets")
        assert "new0" not in index


def test_add_in_batches_names_items_by_key_or_position(points_index):
    bad = (np.array([1, 2]), np.array([0.5, -1.0]))
    with SobolevIndex.open(points_index, "a") as index:
        before = snapshot(str(points_index))
        with pytest.raises(InvalidMeasureError, match=r"^item 'k2' has mass -1.0 at node 2"):
            add_in_batches(index, GOOD + [bad], ["k0", "k1", "k2"], [None] * 3, [None] * 3,
                           batch_size=1)
        with pytest.raises(InvalidMeasureError, match=r"^item 2 has mass -1.0"):
            add_in_batches(index, GOOD + [bad], None, [None] * 3, [None] * 3, batch_size=1)
        assert_unchanged(before, str(points_index), "add_in_batches")


def test_add_in_batches_writes_every_batch_of_one_checked_batch(points_index):
    keys = [f"m{i}" for i in range(7)]
    with SobolevIndex.open(points_index, "a") as index:
        n = index.graph.n_nodes
        measures = [(np.array([i % n, (i + 3) % n]), np.array([1.0, i + 1.0])) for i in range(7)]
        assert add_in_batches(index, measures, keys, [None] * 7, [None] * 7, batch_size=3) == keys
        for (nodes, masses), key in zip(measures, keys):
            stored = index.get(key)
            assert stored["nodes"].tolist() == nodes.tolist()
            np.testing.assert_allclose(stored["masses"], masses / masses.sum(), rtol=1e-15)


# --------------------------------------------------- coordinates that overflow
def far_point(index):
    """A point at +-1e308 in both coordinates whose nearest node is not
    node 0 (an overflow sends every point to node 0)."""
    with SobolevIndex.open(index) as opened:
        coords = opened.graph.coords
    for signs in ((1, 1), (1, -1), (-1, 1), (-1, -1)):
        direction = np.array(signs, dtype=float)
        if int(np.argmax(coords @ direction)) != 0:
            return (1e308 * direction).tolist()
    return [1e308, 1e308]


def test_cli_add_refuses_a_coordinate_whose_square_overflows(points_index, tmp_path):
    good, _ = clouds(["new0", "x"], seed=5)
    far = far_point(points_index)
    bad = json.dumps({"key": "far", "points": [[0.0, 0.0], far]})
    line = add_two_lines(points_index, tmp_path, good, bad)
    assert f"input.jsonl line 2: 'points'[1][0] is {far[0]:g}; expected a number between -1e+150 " \
           "and 1e+150" in line


def test_cli_search_refuses_a_coordinate_whose_square_overflows(points_index, tmp_path):
    good, _ = clouds(["q0", "x"], seed=5)
    path = tmp_path / "queries.jsonl"
    path.write_text(good + "\n" + json.dumps({"key": "far", "points": [far_point(points_index)]})
                    + "\n")
    before = snapshot(str(points_index))
    result = run("search", points_index, "--file", path, ok=False)
    assert result.exit_code == 1
    # One line: the error, and no numpy warning about an overflow.
    assert error_lines(result) == [line for line in result.output.splitlines() if line.strip()]
    assert "queries.jsonl line 2: 'points'[0][0] is" in result.output
    assert "warning" not in result.output.lower()
    assert_unchanged(before, str(points_index), "search --file")


@pytest.mark.parametrize("value, ok", [(COORDINATE_MAX, True), (-COORDINATE_MAX, True),
                                       (1.0000001e150, False), (-1e200, False), (1e308, False)])
def test_point_clouds_accept_coordinates_up_to_the_limit(tmp_path, value, ok):
    path = tmp_path / "p.jsonl"
    path.write_text(json.dumps({"key": "a", "points": [[0, 1], [2, value]]}) + "\n")
    if ok:
        (pointset,) = read_point_clouds(str(path))
        assert pointset.points[1, 1] == value
    else:
        with pytest.raises(CorpusError, match=r"line 1: 'points'\[1\]\[1\] is .*; expected a "
                                              "number between -1e\\+150 and 1e\\+150"):
            list(read_point_clouds(str(path)))


def test_pointset_refuses_coordinates_beyond_the_limit_and_non_finite_ones():
    with pytest.raises(ValueError, match="point set 'a' has the coordinate 1e\\+200 in row 1"):
        PointSet("a", [[0.0, 0.0], [1e200, 0.0]])
    for value in (np.nan, np.inf, -np.inf):
        with pytest.raises(ValueError, match="non-finite coordinate in row 0"):
            PointSet("a", [[value, 0.0]])


def test_diagrams_refuse_births_and_deaths_beyond_the_limit(tmp_path):
    path = tmp_path / "d.csv"
    path.write_text("birth,death\n0,1\n0.5,1e200\n")
    with pytest.raises(CorpusError, match=r"d.csv line 3: 'death' is 1e\+200; expected a number "
                                          r"between .* or inf for a death that never comes"):
        list(read_diagrams([path]))
    path.write_text("birth,death\n0,1\n0.5,inf\n")
    (diagram,) = read_diagrams([path])  # inf still means never dies, and is dropped
    assert diagram.points.tolist() == [[0.0, 1.0]]
    with pytest.raises(CorpusError, match=r"line 3: 'death' is 1e\+200"):
        list(read_diagrams([path], max_death=1e200))
    path.write_text("birth,death\n-1e150,1e150\n")
    with pytest.raises(CorpusError, match="persistence 2e\\+150"):
        list(read_diagrams([path], coordinates="birth_persistence"))


def test_diagram_persistence_weights_too_small_to_normalise(tmp_path):
    path = tmp_path / "d.csv"
    path.write_text("0,1e-305\n0,2e-305\n")
    with pytest.raises(CorpusError, match="d.csv: the persistence weights add up to 3e-305, "
                                          "below 1e-300"):
        list(read_diagrams([path], weights="persistence"))


def test_a_graph_with_huge_coordinates_is_an_error_not_node_0():
    # The squares of node 1's and 2's coordinates overflow: every point
    # would go to node 0, though [-1e150, 0] is nearest to node 2.
    coords = np.array([[0.0, 0.0], [1e160, 0.0], [-1e155, 0.0]])
    graph = Graph.from_edges(3, [[0, 1], [0, 2]], [1.0, 1.0], coords=coords)
    with pytest.raises(CorpusError, match="the graph's node coordinates reach 1e\\+160; expected "
                                          "coordinates between"):
        pointsets_to_measures([PointSet("a", [[-1e150, 0.0]])], graph)


# ------------------------------------------------------------------ labels
LABELS = [
    ("x", "x"), (3, "3"), (1.5, "1.5"), (1e20, "1e+20"), (-0.0, "-0.0"), (None, None),
    (True, "'label' is true"), (False, "'label' is false"), ({"a": 1}, "'label' is an object"),
    ([1, 2], "'label' is a list of 2 items"),
]


@pytest.mark.parametrize("label, expected", LABELS, ids=[repr(v) for v, _ in LABELS])
def test_text_and_point_readers_keep_or_refuse_a_label_alike(tmp_path, label, expected):
    text = tmp_path / "docs.jsonl"
    text.write_text(json.dumps({"key": "k", "text": "words", "label": label}) + "\n")
    points = tmp_path / "points.jsonl"
    points.write_text(json.dumps({"key": "k", "points": [[1, 2]], "label": label}) + "\n")
    if expected is None or not expected.startswith("'label'"):
        assert [d["label"] for d in read_corpus(str(text))] == [expected]
        assert [s.label for s in read_point_clouds(str(points))] == [expected]
        return
    errors = []
    for read, path in ((read_corpus, text), (read_point_clouds, points)):
        with pytest.raises(CorpusError) as info:
            list(read(str(path)))
        errors.append(str(info.value).split(": ", 1)[1])
    assert errors[0] == errors[1]
    assert errors[0].startswith(expected + "; expected a string or a number")


@pytest.mark.parametrize("value", ["NaN", "Infinity"])
def test_a_label_nan_or_infinity_is_refused_by_both_readers(tmp_path, value):
    text = tmp_path / "docs.jsonl"
    text.write_text('{"key": "k", "text": "words", "label": ' + value + "}\n")
    points = tmp_path / "points.jsonl"
    points.write_text('{"key": "k", "points": [[1, 2]], "label": ' + value + "}\n")
    for read, path in ((read_corpus, text), (read_point_clouds, points)):
        with pytest.raises(CorpusError, match="line 1: 'label' is (nan|inf); expected a string"):
            list(read(str(path)))


def test_cli_add_refuses_a_label_that_is_an_object(text_index, tmp_path):
    line = add_two_lines(text_index, tmp_path, '{"key": "new1", "text": "space1 space2"}',
                         '{"key": "new2", "text": "space1", "label": {"a": 1}}',
                         "--vectors", "none")
    assert "input.jsonl line 2: 'label' is an object; expected a string or a number" in line


def test_add_documents_refuses_a_label_that_is_a_list(text_index):
    with SobolevIndex.open(text_index, "a") as index:
        before = snapshot(str(text_index))
        with pytest.raises(CorpusError, match="document 1: 'label' is a list of 1 items"):
            add_documents(index, [{"key": "n1", "text": "space1"},
                                  {"key": "n2", "text": "space2", "label": ["x"]}], batch_size=1)
        assert_unchanged(before, str(text_index), "add_documents")


# ------------------------------------------------------------ lone surrogates
@pytest.mark.parametrize("name, line", [
    ("key", '{"key": "k\\udcff", "text": "space1"}'),
    ("label", '{"key": "new2", "text": "space1", "label": "\\ud800x"}'),
])
def test_cli_add_refuses_a_lone_surrogate_in_a_text_corpus(text_index, tmp_path, name, line):
    error = add_two_lines(text_index, tmp_path, '{"key": "new1", "text": "space1 space2"}', line,
                          "--vectors", "none")
    assert f"input.jsonl line 2: '{name}'" in error and "a lone surrogate" in error


@pytest.mark.parametrize("name, line", [
    ("key", '{"key": "k\\udcff", "points": [[0.1, 0.2]]}'),
    ("label", '{"key": "new2", "points": [[0.1, 0.2]], "label": "\\udcff"}'),
])
def test_cli_add_refuses_a_lone_surrogate_in_point_clouds(points_index, tmp_path, name, line):
    good, _ = clouds(["new0", "x"], seed=5)
    error = add_two_lines(points_index, tmp_path, good, line)
    assert f"input.jsonl line 2: '{name}'" in error and "a lone surrogate" in error


def test_a_file_name_that_is_not_utf8_is_refused_as_a_key(tmp_path):
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "fine.txt").write_text("space1")
    try:
        with open(os.path.join(os.fsencode(folder), b"bad\xff.txt"), "w") as handle:
            handle.write("space2")
    except OSError:
        pytest.skip("this file system refuses file names that are not UTF-8")
    with pytest.raises(CorpusError, match=r"'key' 'bad\\udcff' holds '\\udcff' at character 4, "
                                          "a lone surrogate"):
        list(read_corpus(str(folder)))
    diagrams = tmp_path / "diagrams"
    diagrams.mkdir()
    with open(os.path.join(os.fsencode(diagrams), b"d\xff.csv"), "w") as handle:
        handle.write("0,1\n")
    with pytest.raises(CorpusError, match="its key \\(the file stem\\) 'd\\\\udcff' holds"):
        list(read_diagrams([os.path.join(str(diagrams), os.fsdecode(b"d\xff.csv"))]))


def test_pointset_refuses_a_lone_surrogate():
    with pytest.raises(ValueError, match="a lone surrogate"):
        PointSet("k\udcff", [[0.0]])
    with pytest.raises(ValueError, match="a lone surrogate"):
        PointSet("k", [[0.0]], label="\ud800")


# ------------------------------------------------------------ nested fields
def nested(depth):
    """Fields whose objects and lists nest ``depth`` levels (the fields
    object is level 1)."""
    value = 1
    for _ in range(depth - 1):
        value = [value]
    return {"x": value} if depth > 1 else {"x": 1}


@pytest.mark.parametrize("kind", ["text", "points"])
def test_fields_nest_at_most_the_limit(tmp_path, kind):
    head = '{"key": "k", "text": "words"' if kind == "text" else '{"key": "k", "points": [[1, 2]]'
    read = read_corpus if kind == "text" else read_point_clouds
    path = tmp_path / "in.jsonl"
    path.write_text(head + ', "x": ' + json.dumps(nested(FIELDS_MAX_DEPTH)["x"]) + "}\n")
    assert len(list(read(str(path)))) == 1
    path.write_text(head + ', "x": ' + json.dumps(nested(FIELDS_MAX_DEPTH + 1)["x"]) + "}\n")
    with pytest.raises(CorpusError, match=f"line 1: its fields nest objects and lists more than "
                                          f"{FIELDS_MAX_DEPTH} levels deep"):
        list(read(str(path)))


@pytest.mark.parametrize("kind", ["text", "points"])
def test_a_line_nested_5000_deep_is_an_error_naming_the_line(tmp_path, kind):
    head = '{"key": "k", "text": "words"' if kind == "text" else '{"key": "k", "points": [[1, 2]]'
    read = read_corpus if kind == "text" else read_point_clouds
    path = tmp_path / "in.jsonl"
    path.write_text('{"key": "a", "text": "w", "points": [[1, 2]]}\n'
                    + head + ', "x": ' + "[" * 5000 + "]" * 5000 + "}\n")
    with pytest.raises(CorpusError, match="in.jsonl line 2.* too deeply to be read"):
        list(read(str(path)))


@pytest.mark.parametrize("kind", ["text", "points"])
def test_cli_add_refuses_a_line_nested_5000_deep(templates, tmp_path, kind):
    index = shutil.copytree(templates[kind], tmp_path / kind)
    deep = ', "x": ' + "[" * 5000 + "]" * 5000 + "}"
    if kind == "text":
        error = add_two_lines(index, tmp_path, '{"key": "new1", "text": "space1"}',
                              '{"key": "new2", "text": "space1"' + deep, "--vectors", "none")
    else:
        good, _ = clouds(["new0", "x"], seed=5)
        error = add_two_lines(index, tmp_path, good, '{"key": "new2", "points": [[0, 1]]' + deep)
    assert "input.jsonl line 2" in error and "too deeply" in error


def test_add_documents_refuses_fields_nested_5000_deep(text_index):
    with SobolevIndex.open(text_index, "a") as index:
        before = snapshot(str(text_index))
        deep = nested(5000)
        with pytest.raises(CorpusError, match=f"document 1: its fields nest objects and lists "
                                              f"more than {FIELDS_MAX_DEPTH} levels deep"):
            add_documents(index, [{"key": "n1", "text": "space1"},
                                  {"key": "n2", "text": "space2", "fields": deep}], batch_size=1)
        assert_unchanged(before, str(text_index), "add_documents")


def test_add_pointsets_refuses_fields_nested_5000_deep(points_index):
    sets = [PointSet("n1", [[0.1, 0.2]]), PointSet("n2", [[0.1, 0.2]], fields=nested(5000))]
    with SobolevIndex.open(points_index, "a") as index:
        before = snapshot(str(points_index))
        with pytest.raises(CorpusError, match="point set 'n2': its fields nest"):
            add_pointsets(index, sets, batch_size=1)
        assert_unchanged(before, str(points_index), "add_pointsets")
