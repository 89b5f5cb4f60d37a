"""Farthest-point clustering (the compiled ``_cluster`` module) against a plain
NumPy Gonzalez: the same centres in the same order, the same assignment and
the same distances, for float32 and float64 points, with duplicates and
exact ties, on every kernel and with 1 or 2 threads.

The reference breaks ties the documented way: the next centre is the first
row among equally far points, and a point moves to a new centre only when
strictly nearer, so it keeps the earliest of its equally near centres.
"""
import numpy as np
import pytest

from sobolev_index import Graph, _cluster, _openmp_helpers


def gonzalez(X, n_centres, first):
    """Plain Gonzalez in float64: one distance pass over all points per centre."""
    X = np.asarray(X, dtype=np.float64)
    sq = np.sum((X - X[first]) ** 2, axis=1)
    assignment = np.zeros(len(X), dtype=np.int64)
    centres = [first]
    while len(centres) < n_centres:
        farthest = int(np.argmax(sq))  # the first row among equally far ones
        if sq[farthest] == 0.0:
            break
        new_sq = np.sum((X - X[farthest]) ** 2, axis=1)
        nearer = new_sq < sq
        sq[nearer] = new_sq[nearer]
        assignment[nearer] = len(centres)
        centres.append(farthest)
    return np.array(centres, dtype=np.int64), assignment, np.sqrt(sq)


def cluster(X, n_centres, first=0, n_threads=None):
    return _cluster.farthest_point_clustering(np.ascontiguousarray(X), n_centres, first,
                                              n_threads=n_threads)


def assert_same_as_reference(X, n_centres, first=0, n_threads=None):
    centres, assignment, dist, radius = cluster(X, n_centres, first, n_threads)
    ref_centres, ref_assignment, ref_dist = gonzalez(X, n_centres, first)
    np.testing.assert_array_equal(centres, ref_centres, "centres")
    np.testing.assert_array_equal(assignment, ref_assignment, "assignment")
    # the two sum the squares in different orders
    np.testing.assert_allclose(dist, ref_dist, rtol=1e-12, atol=0)
    assert radius == dist.max()
    assert centres.dtype == np.int64 and assignment.dtype == np.int64 and dist.dtype == np.float64
    return centres, assignment, dist


def _normal(seed, n, d, dtype):
    return np.random.default_rng(seed).normal(size=(n, d)).astype(dtype)


def _grid(seed, n, d, values, dtype):
    """Integer coordinates: many exactly equal distances, summed exactly."""
    return np.random.default_rng(seed).integers(0, values, size=(n, d)).astype(dtype)


def _word_like(seed, n, d, dtype):
    """Points around a few hundred centres, plus low-rank and isotropic noise."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(max(1, n // 40), d)) * 2.0
    basis = rng.normal(size=(4, d))
    X = (centres[rng.integers(0, len(centres), n)] + rng.normal(size=(n, 4)) @ basis * 0.3
         + rng.normal(size=(n, d)) * 0.1)
    return X.astype(dtype)


def _far_blob(seed, n, d, dtype):
    """A tight blob of points far from the rest: the first candidates are all in it."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    X[: n // 2] = 100.0 + 1e-3 * rng.normal(size=(n // 2, d))
    return X.astype(dtype)


DATASETS = {
    # name: (points, centres, first row)
    "normal 400x3 -> 60": (lambda dt: _normal(1, 400, 3, dt), 60, 7),
    "normal 1500x17 -> 300": (lambda dt: _normal(2, 1500, 17, dt), 300, 0),
    "normal 3000x64 -> 700": (lambda dt: _normal(3, 3000, 64, dt), 700, 2999),
    "normal 2500x300 -> 120": (lambda dt: _normal(4, 2500, 300, dt), 120, 11),
    "word-like 6000x50 -> 600": (lambda dt: _word_like(5, 6000, 50, dt), 600, 3),
    "far blob 5000x8 -> 400": (lambda dt: _far_blob(6, 5000, 8, dt), 400, 4999),
    "grid 2000x3 -> all": (lambda dt: _grid(7, 2000, 3, 4, dt), 100, 0),
    "grid 3000x6 -> 500": (lambda dt: _grid(8, 3000, 6, 5, dt), 500, 17),
    "offset 3000x20 -> 300": (lambda dt: _normal(9, 3000, 20, dt) + dt(1e4), 300, 5),
    "tiny 2000x12 -> 200": (lambda dt: _normal(10, 2000, 12, dt) * dt(1e-30), 200, 0),
    "huge 2000x12 -> 200": (lambda dt: _normal(11, 2000, 12, dt) * dt(1e15), 200, 0),
    "mixed scales 2000x8 -> 300": (
        lambda dt: np.vstack([_normal(12, 1000, 8, dt) * dt(1e-6), _normal(13, 1000, 8, dt) * dt(1e6)]),
        300, 0),
}


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["float32", "float64"])
@pytest.mark.parametrize("name", list(DATASETS))
@pytest.mark.slow
def test_same_as_plain_gonzalez(name, dtype):
    make, n_centres, first = DATASETS[name]
    X = make(dtype)
    assert X.dtype == dtype
    assert_same_as_reference(X, n_centres, first)


@pytest.mark.slow
def test_float32_points_take_the_float32_path_and_keep_float64_distances():
    """float32 word-vector-like points, more than one batch and one candidate
    set: the result is exact Gonzalez on the float32 values."""
    X = _word_like(14, 5000, 200, np.float32)
    centres, assignment, dist = assert_same_as_reference(X, 600, 123)
    assert len(centres) == 600 == len(np.unique(centres))
    # distances are float64 sums over the float32 coordinates (a float32 sum
    # would be off by about 1e-7)
    X64 = X.astype(np.float64)
    np.testing.assert_allclose(dist, np.linalg.norm(X64 - X64[centres[assignment]], axis=1),
                               rtol=1e-12)


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["float32", "float64"])
def test_duplicates_collapse_and_ties_go_to_the_first_row(dtype):
    rng = np.random.default_rng(15)
    distinct = rng.normal(size=(40, 5)).astype(dtype)
    X = distinct[rng.permutation(np.repeat(np.arange(40), 9))]
    centres, assignment, dist = assert_same_as_reference(X, 100, 0)
    assert len(centres) == 40
    assert np.all(dist == 0.0)
    # each centre is the first row of its copies that was chosen: the first
    # of the equally far copies when it was chosen
    for c in centres[1:]:
        copies = np.flatnonzero(np.all(X == X[c], axis=1))
        assert c == copies[0]


def test_equidistant_points_are_taken_in_row_order():
    # the corners of a simplex are all at the same distance from each other
    X = np.eye(30) * 3.0
    centres, _, _ = assert_same_as_reference(X, 30, 4)
    assert centres.tolist() == [4] + [i for i in range(30) if i != 4]


def test_underflow():
    """Coordinates whose squares (or products) leave the normal range: float32
    subnormal coordinates, and float64 points whose squared distances are
    subnormal (their float64 sums are exact in any order)."""
    rng = np.random.default_rng(25)
    assert_same_as_reference((rng.normal(size=(500, 5)) * 1e-40).astype(np.float32), 100, 0)
    assert_same_as_reference(rng.normal(size=(2000, 6)) * 1e-160, 300, 0)


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["float32", "float64"])
def test_tiny_inputs(dtype):
    one = np.array([[1.5, -2.0, 0.25]], dtype=dtype)
    centres, assignment, dist, radius = cluster(one, 1)
    assert centres.tolist() == [0] and assignment.tolist() == [0]
    assert dist.tolist() == [0.0] and radius == 0.0
    # more centres asked for than points
    centres, assignment, dist, radius = cluster(one, 5)
    assert centres.tolist() == [0] and radius == 0.0

    X = _normal(16, 50, 2, dtype)
    centres, assignment, dist, radius = cluster(X, 1, 9)
    assert centres.tolist() == [9] and np.all(assignment == 0)
    np.testing.assert_allclose(dist, np.linalg.norm(X.astype(np.float64) - X[9], axis=1), rtol=1e-12)
    assert radius == dist.max()
    # every point a centre
    centres, assignment, dist = assert_same_as_reference(X, 50, 9)
    assert sorted(centres.tolist()) == list(range(50))
    assert np.array_equal(centres[assignment], np.arange(50)) and np.all(dist == 0.0)

    same = np.full((64, 4), 2.5, dtype=dtype)
    centres, assignment, dist, radius = cluster(same, 10, 3)
    assert centres.tolist() == [3] and np.all(assignment == 0) and radius == 0.0

    column = _normal(17, 300, 1, dtype)
    assert_same_as_reference(column, 40, 0)


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["float32", "float64"])
def test_results_do_not_depend_on_threads(parallel_everywhere, dtype):
    X = _word_like(18, 4000, 40, dtype)
    one = cluster(X, 500, 1, n_threads=1)
    two = cluster(X, 500, 1, n_threads=2)
    for a, b in zip(one[:3], two[:3]):
        assert np.array_equal(a, b)
    assert one[3] == two[3]
    assert_same_as_reference(X, 500, 1, n_threads=2)


def test_some_steps_parallel_others_serial():
    """An input just under the serial threshold: the first passes run on one
    thread, later steps on two."""
    if _openmp_helpers.effective_threads(2) < 2:
        pytest.skip("fewer than 2 threads available")
    X = np.vstack([_normal(19, 1000, 8, np.float32) * np.float32(1e-6),
                   _normal(20, 1000, 8, np.float32) * np.float32(1e6)])
    assert X.size < 1 << 14
    assert_same_as_reference(X, 300, 0, n_threads=2)


@pytest.mark.parametrize("level", [0, 1, 2], ids=["generic", "avx2", "avx512"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["float32", "float64"])
def test_every_kernel_gives_the_same_result(level, dtype):
    if level > _cluster.simd_level():
        pytest.skip(f"this CPU has no kernel level {level}")
    X = _word_like(21, 3000, 37, dtype)
    old = _cluster.set_simd_level(level)
    try:
        assert _cluster.simd_level() == level
        assert_same_as_reference(X, 400, 2)
        assert_same_as_reference(_grid(22, 2000, 5, 3, dtype), 150, 0)
    finally:
        _cluster.set_simd_level(old)


def test_progress_is_called_with_growing_counts():
    X = _normal(23, 3000, 10, np.float64)
    seen = []
    centres, _, _, _ = _cluster.farthest_point_clustering(X, 800, 0, progress=seen.append)
    assert seen and seen == sorted(set(seen)) and seen[-1] <= len(centres) == 800


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["float32", "float64"])
def test_from_points_uses_exact_gonzalez(dtype):
    X = _word_like(24, 3000, 30, dtype)
    graph = Graph.from_points(X, n_nodes=250, edges="log", seed=5)
    first = int(np.random.default_rng(5).integers(len(X)))
    ref_centres, ref_assignment, ref_dist = gonzalez(X, 250, first)
    np.testing.assert_array_equal(graph.coords, X[ref_centres].astype(np.float64))
    np.testing.assert_array_equal(graph.assignment, ref_assignment)
    assert graph.params["covering_radius"] == pytest.approx(ref_dist.max(), rel=1e-12)
