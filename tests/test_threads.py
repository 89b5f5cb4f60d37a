"""Results must not depend on the number of threads, also when the parallel
loops really run.

Small inputs stay serial below the one serial threshold of the compiled loops
(``sobolev_index._openmp_helpers``), so the in-process tests take the
``parallel_everywhere`` fixture, which lowers it and skips, with the reason,
where 2 threads cannot run. The child processes lower it through
SOBOLEV_TEST_SERIAL_THRESHOLD and report how many threads they had; the test
skips when the 2-thread child did not have 2.

The index's search with 1 and 2 threads is checked in test_index_search.py
and test_index_inverted.py, with the same fixture.
"""
import json

import numpy as np
import pytest
from _support.graphs import pick_roots, random_graph
from _support.measures import assert_csr_identical, random_measures
from _support.processes import SERIAL_THRESHOLD_ENV, child_env, child_script, run_python

from sobolev_index import Graph, pairwise_sobolev, sobolev_kernel

PS = (1, 1.5, 2, 3, np.inf)


def test_graph_from_points_does_not_depend_on_threads(parallel_everywhere):
    X = np.random.default_rng(3).normal(size=(600, 5))
    one = Graph.from_points(X, n_nodes=120, seed=4, n_threads=1)
    two = Graph.from_points(X, n_nodes=120, seed=4, n_threads=2)
    for name in ("edges", "lengths", "coords", "assignment"):
        assert np.array_equal(getattr(one, name), getattr(two, name)), name


def test_features_and_matrices_do_not_depend_on_threads(parallel_everywhere):
    rng = np.random.default_rng(3)
    graph = Graph.from_points(rng.normal(size=(600, 5)), n_nodes=120, seed=4)
    tree = graph.tree(0)
    measures = [(rng.integers(0, 120, rng.integers(1, 25)), None) for _ in range(150)]
    one = tree.features_of(measures, n_threads=1)
    two = tree.features_of(measures, n_threads=2)
    assert_csr_identical(one, two, "features")
    for p in PS:
        a = pairwise_sobolev(one[:40], one, trees=tree, p=p, n_threads=1)
        b = pairwise_sobolev(one[:40], one, trees=tree, p=p, n_threads=2)
        assert np.array_equal(a, b), p
        s1 = pairwise_sobolev(one, trees=tree, p=p, n_threads=1)
        s2 = pairwise_sobolev(one, trees=tree, p=p, n_threads=2)
        assert np.array_equal(s1, s2), p
        # and the rectangular and symmetric paths agree with each other
        np.testing.assert_allclose(s1[:40], a, rtol=1e-12, atol=1e-15)


def test_sliced_matrices_and_kernels_do_not_depend_on_threads(parallel_everywhere):
    spec = random_graph(5, 60, extra=60)
    trees = spec.lib().trees(pick_roots(spec, 3, seed=5))
    X = random_measures(np.random.default_rng(5), spec.n, 300)
    Fs = [t.features_of(X, n_threads=1) for t in trees]
    for t, F in zip(trees, Fs):
        assert_csr_identical(F, t.features_of(X, n_threads=2), "features")
    FY = [F[:37] for F in Fs]
    for p in PS:
        for FX, FYY, tt in ((Fs[0], None, trees[0]), (Fs[0], FY[0], trees[0]), (Fs, None, trees),
                            (Fs, FY, trees)):
            a = pairwise_sobolev(FX, FYY, trees=tt, p=p, n_threads=1)
            b = pairwise_sobolev(FX, FYY, trees=tt, p=p, n_threads=2)
            assert np.array_equal(a, b), f"p={p}"
    for p in (1, 2):
        for power in (False, True):
            a = sobolev_kernel(Fs[0], trees=trees[0], p=p, power=power, n_threads=1)
            b = sobolev_kernel(Fs[0], trees=trees[0], p=p, power=power, n_threads=2)
            assert np.array_equal(a, b), (p, power)


def _digests(threads, tmp_path):
    done = run_python(child_script("thread_digest.py"), script=True, cwd=str(tmp_path),
                      timeout=300, env=child_env(OMP_NUM_THREADS=threads,
                                                 **{SERIAL_THRESHOLD_ENV: 1}))
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_omp_num_threads_in_child_processes(tmp_path):
    one = _digests(1, tmp_path)
    two = _digests(2, tmp_path)
    assert one.pop("threads") == 1
    if two.pop("threads") < 2:
        pytest.skip("a child with OMP_NUM_THREADS=2 has fewer than 2 threads (a build "
                    "without OpenMP): nothing to compare")
    assert one == two
