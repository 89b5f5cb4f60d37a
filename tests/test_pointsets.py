"""Point clouds (JSONL) and persistence diagrams (CSV / .npy) as measures."""

import io
import json
import warnings

import numpy as np
import pytest
from scipy.spatial.distance import cdist

from sobolev_index import Graph
from sobolev_index.errors import CorpusError
from sobolev_index.ingest.pointsets import (
    PointSet,
    pointsets_to_measures,
    read_diagram,
    read_diagrams,
    read_point_clouds,
)
from sobolev_index.measures import as_measure_batch


def _write(path, text):
    path.write_text(text, encoding="utf-8")
    return path


GOOD = '{"key": "a", "points": [[0, 1], [2, 3]]}'


# --------------------------------------------------------------------- JSONL
def test_point_clouds_round_trip(tmp_path):
    lines = [
        {"key": "a", "points": [[0, 1], [2.5, -3]], "weights": [1, 3], "label": "cat"},
        {"key": "b", "points": [[4, 5]], "label": 7, "source": "scan-1", "meta": {"t": [1, 2]}},
        {"key": "c", "points": [[1, 1], [2, 2], [3, 3]], "weights": None, "label": None},
    ]
    text = json.dumps(lines[0]) + "\n\n   \n" + json.dumps(lines[1]) + "\n" + json.dumps(lines[2])
    path = _write(tmp_path / "points.jsonl", text)

    sets = list(read_point_clouds(path))

    assert [s.key for s in sets] == ["a", "b", "c"]
    a, b, c = sets
    np.testing.assert_array_equal(a.points, [[0.0, 1.0], [2.5, -3.0]])
    assert a.points.dtype == np.float64 and a.points.flags.c_contiguous
    np.testing.assert_array_equal(a.weights, [1.0, 3.0])
    assert a.label == "cat" and a.fields == {}
    # a number label keeps its string form; other names are kept as fields
    assert b.label == "7"
    assert b.fields == {"source": "scan-1", "meta": {"t": [1, 2]}}
    np.testing.assert_array_equal(b.weights, [1.0])
    # missing or null weights are uniform
    np.testing.assert_allclose(c.weights, [1 / 3] * 3)
    assert c.label is None
    assert len(c) == 3 and c.dim == 2


def test_point_clouds_from_string_path_and_bytes_stream(tmp_path):
    path = _write(tmp_path / "p.jsonl", "\ufeff" + GOOD + "\n")  # with a BOM
    from_str = list(read_point_clouds(str(path)))
    from_bytes = list(read_point_clouds(io.BytesIO(path.read_bytes())))
    assert [s.key for s in from_str] == [s.key for s in from_bytes] == ["a"]
    np.testing.assert_array_equal(from_str[0].points, from_bytes[0].points)


def test_point_clouds_from_text_stream_is_left_open():
    stream = io.StringIO(GOOD + "\n" + '{"key": "b", "points": [[9, 9]], "weights": [2]}\n')
    sets = list(read_point_clouds(stream))
    assert [s.key for s in sets] == ["a", "b"]
    np.testing.assert_array_equal(sets[1].weights, [2.0])
    assert not stream.closed


def test_point_clouds_from_stdin(monkeypatch):
    monkeypatch.setattr("sys.stdin", io.StringIO(GOOD + "\n"))
    (only,) = read_point_clouds("-")
    np.testing.assert_array_equal(only.points, [[0.0, 1.0], [2.0, 3.0]])


def test_point_clouds_stream_error_names_stream():
    with pytest.raises(CorpusError, match=r"^<stream> line 2: 'points' is missing"):
        list(read_point_clouds(io.StringIO(GOOD + '\n{"key": "b"}\n')))


def test_point_clouds_are_lazy_and_yield_lines_before_an_error(tmp_path):
    path = _write(tmp_path / "p.jsonl", GOOD + '\n{"key": "b", "points": []}\n')
    it = read_point_clouds(path)
    assert next(it).key == "a"
    with pytest.raises(CorpusError, match="line 2"):
        next(it)


def test_point_clouds_missing_file_raises_at_call(tmp_path):
    with pytest.raises(FileNotFoundError):
        read_point_clouds(tmp_path / "nope.jsonl")  # no iteration needed


BAD_LINES = [
    ('{"key": "b", "points": [[1, 2]', "not valid JSON"),
    ('[1, 2]', "the line holds a list of 2 items; expected a JSON object"),
    ('{"points": [[1, 2]]}', "'key' is missing"),
    ('{"key": 5.5, "points": [[1, 2]]}',
     r"the key \('key'\) is 5.5; expected a non-empty string or an integer"),
    ('{"key": "", "points": [[1, 2]]}', r"the key \('key'\) is the string ''"),
    ('{"key": "a", "points": [[1, 2]]}', "'key' 'a' was already used on line 1"),
    ('{"key": "b", "points": [[1, 2]], "key": "c"}', "the name 'key' appears twice"),
    ('{"key": "b"}', "'points' is missing"),
    ('{"key": "b", "points": "1 2"}', "'points' is the string '1 2'; expected a list of points"),
    ('{"key": "b", "points": []}', "'points' is empty; expected at least one point"),
    ('{"key": "b", "points": [1, 2]}', r"'points'\[0\] is 1; expected a list of coordinates"),
    ('{"key": "b", "points": [[]]}', r"'points'\[0\] has no coordinates"),
    ('{"key": "b", "points": [[1, 2], [3]]}', r"'points'\[1\] has 1 coordinates; expected 2"),
    ('{"key": "b", "points": [[1, 2], [3, "4"]]}',
     r"'points'\[1\]\[1\] is the string '4'; expected a number"),
    ('{"key": "b", "points": [[1, true]]}', r"'points'\[0\]\[1\] is true; expected a number"),
    ('{"key": "b", "points": [[1, null]]}', r"'points'\[0\]\[1\] is null; expected a number"),
    ('{"key": "b", "points": [[1, 2], [NaN, 0]]}', r"'points'\[1\]\[0\] is nan; expected a finite number"),
    ('{"key": "b", "points": [[1, -Infinity]]}', r"'points'\[0\]\[1\] is -inf; expected a finite number"),
    ('{"key": "b", "points": [[1, 1e999]]}', r"'points'\[0\]\[1\] is inf"),
    ('{"key": "b", "points": [[1, 1' + "0" * 400 + ']]}', "'points' holds an integer too large"),
    ('{"key": "b", "points": [[1, 2]], "weights": 1}', "'weights' is 1; expected a list of 1 numbers"),
    ('{"key": "b", "points": [[1, 2], [3, 4], [5, 6], [7, 8]], "weights": [1, 2, 3]}',
     r"'weights' has 3 values; expected 4 \(one per point\)"),
    ('{"key": "b", "points": [[1, 2], [3, 4]], "weights": [1, "2"]}', r"'weights'\[1\] is the string '2'"),
    ('{"key": "b", "points": [[1, 2], [3, 4]], "weights": [1, NaN]}',
     r"'weights'\[1\] is nan; expected a finite"),
    ('{"key": "b", "points": [[1, 2], [3, 4]], "weights": [1, -0.5]}',
     r"'weights'\[1\] is -0.5; expected a number >= 0"),
    ('{"key": "b", "points": [[1, 2], [3, 4]], "weights": [0, 0]}', "'weights' are all zero"),
    ('{"key": "b", "points": [[1, 2], [3, 4]], "weights": [1e308, 1e308]}', "'weights' add up to inf"),
    ('{"key": "b", "points": [[1, 2]], "label": true}', "'label' is true; expected a string or a number"),
    ('{"key": "b", "points": [[1, 2]], "label": {"x": 1}}', "'label' is an object"),
    ('{"key": "b", "points": [[1, 2, 3]]}',
     "'points' have dimension 3, but line 1 has dimension 2; expected one dimension"),
]


@pytest.mark.parametrize("bad, message", BAD_LINES, ids=[m[:40] for _, m in BAD_LINES])
def test_point_clouds_error_names_file_line_and_field(tmp_path, bad, message):
    # a blank line first, so the reported number must count physical lines
    path = _write(tmp_path / "points.jsonl", GOOD + "\n\n" + bad + "\n" + GOOD.replace('"a"', '"z"'))
    with pytest.raises(CorpusError, match=r"^points\.jsonl line 3: " + message) as info:
        # messages carry the path as given; relative here to check the name exactly
        list(read_point_clouds(_Relative(path)))
    assert isinstance(info.value, ValueError)


class _Relative:
    """A file object whose name is the bare file name, like a relative path."""

    def __init__(self, path):
        self._handle = open(path, "rb")
        self.name = path.name

    def __iter__(self):
        try:
            yield from self._handle
        finally:
            self._handle.close()


def test_point_clouds_bad_utf8_names_line(tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_bytes(GOOD.encode() + b'\n{"key": "\xff", "points": [[1, 2]]}\n')
    with pytest.raises(CorpusError, match=r"p\.jsonl line 2: byte 10 is not UTF-8"):
        list(read_point_clouds(path))


# ------------------------------------------------------------------ PointSet
def test_pointset_defaults_and_validation():
    ps = PointSet("k", [[0, 0], [1, 1], [2, 2], [3, 3]])
    np.testing.assert_allclose(ps.weights, 0.25)
    assert ps.fields == {} and ps.label is None
    with pytest.raises(ValueError, match=r"weights of shape \(3,\); expected \(4,\)"):
        PointSet("k", np.zeros((4, 2)), weights=[1, 1, 1])
    with pytest.raises(ValueError, match="non-finite coordinate in row 1"):
        PointSet("k", [[0, 0], [np.nan, 1]])
    with pytest.raises(ValueError, match="positive, finite sum"):
        PointSet("k", [[0, 0]], weights=[0.0])
    # finite weights whose sum overflows: refused here, without a NumPy warning
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(ValueError, match="positive, finite sum"):
            PointSet("k", [[0, 0], [1, 1]], weights=[1e308, 1e308])


# ------------------------------------------------------------------ diagrams
def test_diagram_csv_with_header_and_inf_dropped(tmp_path):
    path = _write(tmp_path / "d.csv", "birth,death\n0.0,1.5\n0.25, inf\n\n# note\n1,2\n")
    diagram, n_inf = read_diagram(path, return_n_infinite=True)
    np.testing.assert_array_equal(diagram, [[0.0, 1.5], [1.0, 2.0]])
    assert diagram.dtype == np.float64 and n_inf == 1
    np.testing.assert_array_equal(read_diagram(path), diagram)


def test_diagram_header_columns_found_by_name(tmp_path):
    path = _write(tmp_path / "d.csv", "Death,Dim,Birth\n3,1,1\n5,0,2\n9,1,4\n")
    np.testing.assert_array_equal(read_diagram(path, dimension=1), [[1.0, 3.0], [4.0, 9.0]])


@pytest.mark.parametrize("sep", [" ", "\t", "  \t ", ",", " , "])
def test_diagram_without_header_any_separator(tmp_path, sep):
    path = _write(tmp_path / "d.txt", f"0{sep}1\n0.5{sep}Infinity\n2{sep}2\n")
    np.testing.assert_array_equal(read_diagram(path), [[0.0, 1.0], [2.0, 2.0]])


def test_diagram_max_death_clips_only_infinite_deaths(tmp_path):
    path = _write(tmp_path / "d.csv", "0,1\n0.5,inf\n2,7\n")
    diagram, n_inf = read_diagram(path, max_death=5.0, return_n_infinite=True)
    np.testing.assert_array_equal(diagram, [[0.0, 1.0], [0.5, 5.0], [2.0, 7.0]])
    assert n_inf == 1


def test_diagram_max_death_below_birth_is_error(tmp_path):
    path = _write(tmp_path / "d.csv", "0,1\n6,inf\n")
    with pytest.raises(CorpusError, match=r"d\.csv line 2: 'birth' 6.0 is above max_death=5"):
        read_diagram(path, max_death=5)


def test_diagram_npy(tmp_path):
    path = tmp_path / "d.npy"
    np.save(path, np.array([[0, 1], [1, np.inf], [0.5, 3]]))
    diagram, n_inf = read_diagram(path, return_n_infinite=True)
    np.testing.assert_array_equal(diagram, [[0.0, 1.0], [0.5, 3.0]])
    assert n_inf == 1
    np.save(tmp_path / "i.npy", np.array([[0, 1], [2, 3]], dtype=np.int32))
    np.testing.assert_array_equal(read_diagram(tmp_path / "i.npy"), [[0.0, 1.0], [2.0, 3.0]])


def test_diagram_npy_with_dimension_column(tmp_path):
    path = tmp_path / "d.npy"
    np.save(path, np.array([[0, 1, 0], [1, 2, 1], [0.5, 3, 1]]))
    np.testing.assert_array_equal(read_diagram(path, dimension=1), [[1.0, 2.0], [0.5, 3.0]])
    with pytest.raises(CorpusError, match="points of dimensions 0, 1; pass dimension="):
        read_diagram(path)


def test_diagram_single_dimension_column_needs_no_filter(tmp_path):
    path = _write(tmp_path / "d.csv", "0,1,1\n2,3,1\n")
    np.testing.assert_array_equal(read_diagram(path), [[0.0, 1.0], [2.0, 3.0]])
    assert read_diagram(path, dimension=0).shape == (0, 2)


BAD_DIAGRAMS = [
    ("birth,death\n0,1\n2,1.5\n", r"d\.csv line 3: 'death' 1.5 is less than 'birth' 2.0"),
    ("0,1\nnan,2\n", r"d\.csv line 2: 'birth' is nan; expected a finite number"),
    ("0,1\ninf,inf\n", r"d\.csv line 2: 'birth' is inf"),
    ("0,1\n1,nan\n", r"d\.csv line 2: 'death' is nan; expected a finite number or inf"),
    ("0,1\n1,-inf\n", r"d\.csv line 2: 'death' is -inf"),
    ("0,1\n1,x\n", r"d\.csv line 2: 'death' \(column 2\) is 'x'; expected a number"),
    ("0,1\n1,,2\n", r"d\.csv line 2: 3 fields; expected 2 like line 1"),
    ("birth,death\n0,1\n1,2,3\n", r"d\.csv line 3: 3 fields; expected 2 like the header on line 1"),
    ("0,1,2,3\n", r"d\.csv line 1: 4 columns; expected 2 \(birth, death\)"),
    ("0,1,0\n1,2,0.5\n", r"d\.csv line 2: 'dimension' is 0.5; expected a whole number"),
    ("0,1,0\n1,2,1\n", r"d\.csv: points of dimensions 0, 1; pass dimension="),
]


@pytest.mark.parametrize("text, message", BAD_DIAGRAMS, ids=[m[:40] for _, m in BAD_DIAGRAMS])
def test_diagram_errors_name_line_and_field(tmp_path, text, message):
    path = _write(tmp_path / "d.csv", text)
    with pytest.raises(CorpusError, match=message):
        read_diagram(path)


def test_diagram_dimension_without_column_is_error(tmp_path):
    path = _write(tmp_path / "d.csv", "0,1\n")
    with pytest.raises(CorpusError, match="no dimension column, but dimension=1 was given"):
        read_diagram(path, dimension=1)


def test_diagram_npy_errors(tmp_path):
    np.save(tmp_path / "flat.npy", np.array([0.0, 1.0]))
    with pytest.raises(CorpusError, match=r"flat\.npy: array of shape \(2,\); expected \(n, 2\)"):
        read_diagram(tmp_path / "flat.npy")
    np.save(tmp_path / "bad.npy", np.array([[0.0, 1.0], [3.0, 2.0]]))
    with pytest.raises(CorpusError, match=r"bad\.npy row 1: 'death' 2.0 is less than 'birth' 3.0"):
        read_diagram(tmp_path / "bad.npy")
    (tmp_path / "junk.npy").write_bytes(b"not an array")
    with pytest.raises(CorpusError, match=r"junk\.npy: cannot be read as a \.npy array"):
        read_diagram(tmp_path / "junk.npy")


def test_diagram_option_errors(tmp_path):
    path = _write(tmp_path / "d.csv", "0,1\n")
    with pytest.raises(ValueError, match="max_death is inf"):
        read_diagram(path, max_death=float("inf"))
    with pytest.raises(ValueError, match="dimension is -1"):
        read_diagram(path, dimension=-1)
    with pytest.raises(ValueError, match="weights is 'mass'"):
        read_diagrams([path], weights="mass")


def test_read_diagrams_keys_weights_and_labels_from_dir(tmp_path):
    (tmp_path / "circle").mkdir()
    (tmp_path / "blob").mkdir()
    p1 = _write(tmp_path / "circle" / "s1.csv", "birth,death\n0,1\n0.5,2.5\n0,inf\n")
    p2 = tmp_path / "blob" / "s2.npy"
    np.save(p2, np.array([[1.0, 1.0], [1.0, 4.0]]))

    sets = list(read_diagrams([p1, p2], weights="persistence", label_from_dir=True))

    assert [(s.key, s.label) for s in sets] == [("s1", "circle"), ("s2", "blob")]
    np.testing.assert_array_equal(sets[0].points, [[0.0, 1.0], [0.5, 2.5]])
    np.testing.assert_array_equal(sets[0].weights, [1.0, 2.0])  # death - birth
    np.testing.assert_array_equal(sets[1].weights, [0.0, 3.0])
    assert sets[0].fields == {"path": str(p1), "n_infinite": 1}
    assert sets[1].fields["n_infinite"] == 0


def test_read_diagrams_birth_persistence_uniform_and_label_mapping(tmp_path):
    p = _write(tmp_path / "x.csv", "1,3\n2,2.5\n0,inf\n")
    (ps,) = read_diagrams(p, coordinates="birth_persistence", labels={"x": 4}, max_death=10)
    np.testing.assert_array_equal(ps.points, [[1.0, 2.0], [2.0, 0.5], [0.0, 10.0]])
    np.testing.assert_allclose(ps.weights, [1 / 3] * 3)
    assert ps.label == "4" and ps.fields["n_infinite"] == 1
    (unlabelled,) = read_diagrams([p], labels={"other": "y"})
    assert unlabelled.label is None


def test_read_diagrams_errors(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    p1 = _write(tmp_path / "a" / "s.csv", "0,1\n")
    p2 = _write(tmp_path / "b" / "s.csv", "0,2\n")
    it = read_diagrams([p1, p2])
    assert next(it).key == "s"
    with pytest.raises(CorpusError, match="its key 's' .* is also the key of .*a.s\\.csv"):
        next(it)

    only_inf = _write(tmp_path / "inf.csv", "0,inf\n")
    with pytest.raises(CorpusError, match=r"inf\.csv: no points after dropping 1 with death = inf"):
        list(read_diagrams([only_inf]))
    diagonal = _write(tmp_path / "diag.csv", "1,1\n2,2\n")
    with pytest.raises(CorpusError, match=r"diag\.csv: every point has death = birth"):
        list(read_diagrams([diagonal], weights="persistence"))
    with pytest.raises(ValueError, match="not both"):
        read_diagrams([diagonal], labels={}, label_from_dir=True)


# ------------------------------------------------------------------ measures
def test_pointsets_to_measures_matches_brute_force_nearest_node():
    rng = np.random.default_rng(3)
    sets = []
    for i in range(6):
        n = int(rng.integers(1, 40))
        # every other set gets uneven weights, some exactly zero
        weights = None if i % 2 else np.where(rng.random(n) < 0.2, 0.0, rng.uniform(0.1, 2.0, n))
        if weights is not None and not weights.any():
            weights[0] = 1.0
        sets.append(PointSet(f"s{i}", rng.normal(size=(n, 3)), weights=weights))
    graph = Graph.from_points(np.vstack([s.points for s in sets]), n_nodes=12, seed=1)
    assert graph.n_nodes == 12

    measures = pointsets_to_measures(iter(sets), graph)  # any iterable

    assert len(measures) == len(sets)
    for s, (nodes, masses) in zip(sets, measures):
        distances = cdist(s.points, graph.coords)
        nearest = np.argmin(distances, axis=1)
        # the mapping must not hinge on near-ties, else argmin is ambiguous
        ordered = np.sort(distances, axis=1)
        assert (ordered[:, 1] - ordered[:, 0] > 1e-9).all()
        expected = np.zeros(graph.n_nodes)
        np.add.at(expected, nearest, s.weights)
        assert np.all(np.diff(nodes) > 0)  # sorted and distinct
        np.testing.assert_array_equal(nodes, np.unique(nearest))
        np.testing.assert_allclose(masses, expected[nodes], rtol=1e-12)
        assert masses.sum() == pytest.approx(s.weights.sum(), rel=1e-12)
    # and the result is a valid batch for the index
    batch = as_measure_batch(measures, n_nodes=graph.n_nodes, normalize=False)
    assert len(batch) == len(sets)


def test_pointsets_to_measures_dimension_mismatch():
    graph = Graph.from_points(np.random.default_rng(0).normal(size=(20, 2)), n_nodes=5)
    message = "'q' has points of dimension 3; the graph's nodes have dimension 2"
    with pytest.raises(CorpusError, match=message):
        pointsets_to_measures([PointSet("q", np.zeros((2, 3)))], graph)


def test_point_clouds_end_to_end(tmp_path):
    rng = np.random.default_rng(5)
    records = [{"key": f"k{i}", "points": rng.normal(size=(5, 2)).tolist(),
                "weights": rng.uniform(0.1, 1, size=5).tolist()} for i in range(4)]
    path = _write(tmp_path / "c.jsonl", "\n".join(json.dumps(r) for r in records))
    sets = list(read_point_clouds(path))
    graph = Graph.from_points(np.vstack([s.points for s in sets]), n_nodes=20, seed=0)
    # 20 nodes for 20 distinct points: every point is its own node
    measures = pointsets_to_measures(sets, graph)
    for record, (nodes, masses) in zip(records, measures):
        assert len(nodes) == 5
        np.testing.assert_allclose(np.sort(masses), np.sort(record["weights"]))
