"""Bad measures given to the API must give one clear error naming the
measure and the value, and leave the index as it was: ragged sequences,
booleans, text, objects or complex numbers where node ids or masses belong,
and a ``measures`` argument that is not a sequence or a matrix."""
import json
import shutil

import numpy as np
import pytest
import scipy.sparse as sp
from _support.cli import run
from _support.index import assert_unchanged, snapshot

from sobolev_index import SobolevIndex
from sobolev_index.errors import InvalidMeasureError
from sobolev_index.measures import as_measure_batch

N = 12
GOOD = [(np.array([1, 2]), np.array([0.5, 0.5])), (np.array([3]), None)]


def clouds(keys, seed, dim=2):
    rng = np.random.default_rng(seed)
    return [json.dumps({"key": key, "points": (rng.normal(size=(4, dim)) + 3 * (i % 3)).tolist(),
                        "label": f"c{i % 3}"}) for i, key in enumerate(keys)]


@pytest.fixture(scope="module")
def points_template(tmp_path_factory):
    """A point-cloud index, built once (copy before writing)."""
    directory = tmp_path_factory.mktemp("inputs")
    points = directory / "clouds.jsonl"
    points.write_text("\n".join(clouds([f"c{i}" for i in range(12)], seed=0)) + "\n")
    run("build", directory / "points", "--points", points, "--nodes", 8, "--roots", 2, "--silent")
    return directory / "points"


@pytest.fixture
def points_index(points_template, tmp_path):
    return shutil.copytree(points_template, tmp_path / "points")


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
