"""Shared random generators (graphs, trees, measures) for the test-suite.

Everything here is deterministic given a seed, so failures are reproducible: the seed
is part of every test id / hypothesis example.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass

import numpy as np
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

# make ``import reference`` work whatever pytest import mode is configured
_HERE = os.path.dirname(os.path.abspath(__file__))
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)

import reference as ref  # noqa: E402

settings.register_profile(
    "default",
    deadline=None,
    max_examples=25,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))


def examples(n):
    """Hypothesis example count, scaled by SOBOLEV_TEST_SCALE (e.g. 10 for a long soak)."""
    return max(1, int(n * float(os.environ.get("SOBOLEV_TEST_SCALE", "1"))))


@dataclass
class GraphSpec:
    n: int
    edges: np.ndarray  # (E, 2) int64
    lengths: np.ndarray  # (E,) float64
    coords: np.ndarray | None = None

    def lib(self):
        from sobolev_index import Graph

        return Graph.from_edges(self.n, self.edges, self.lengths, coords=self.coords)

    def ref_tree(self, root):
        return ref.RefTree(self.n, self.edges, self.lengths, root)

    def unique_roots(self):
        """Roots for which every node has a unique shortest path (Assumption 2.1)."""
        return [
            r for r in range(self.n) if not ref.tie_nodes(self.n, self.edges, self.lengths, r)
        ]


def random_tree_edges(rng, n):
    """Uniform-ish random labelled tree: attach perm[i] to a random earlier node."""
    perm = rng.permutation(n)
    edges = []
    for i in range(1, n):
        j = int(rng.integers(i))
        edges.append((int(perm[i]), int(perm[j])))
    return edges


def random_graph(seed, n, extra=None, kind="euclidean", dim=2, tree=False):
    """Random connected graph on ``n`` nodes.

    kind="euclidean": nodes are random points in [0, 1]^dim, lengths = Euclidean edge length.
    kind="random": lengths uniform in [0.1, 5].
    tree=True gives a tree (n - 1 edges).  Otherwise ``extra`` random non-tree edges are
    added (default ~n).  Edge orientation and order are random.
    """
    rng = np.random.default_rng(seed)
    edges = random_tree_edges(rng, n)
    if not tree:
        if extra is None:
            extra = n
        have = {tuple(sorted(e)) for e in edges}
        max_e = n * (n - 1) // 2
        target = min(max_e, len(have) + extra)
        while len(have) < target:
            a, b = (int(x) for x in rng.integers(n, size=2))
            if a != b and tuple(sorted((a, b))) not in have:
                have.add(tuple(sorted((a, b))))
                edges.append((a, b))
    edges = np.array(edges, dtype=np.int64).reshape(-1, 2)
    # random orientation and order
    flip = rng.random(len(edges)) < 0.5
    edges[flip] = edges[flip][:, ::-1]
    edges = edges[rng.permutation(len(edges))]
    coords = rng.random((n, dim))
    if kind == "euclidean":
        lengths = np.linalg.norm(coords[edges[:, 0]] - coords[edges[:, 1]], axis=1)
    elif kind == "random":
        lengths = rng.uniform(0.1, 5.0, size=len(edges))
    else:
        raise ValueError(kind)
    return GraphSpec(n, edges, lengths.astype(np.float64), coords if kind == "euclidean" else None)


def random_measure(rng, n, k=None, dup=True, integer=False):
    """Random (nodes, masses) with k supports (duplicates allowed when dup)."""
    if k is None:
        k = int(rng.integers(1, min(n, 8) + 1))
    if dup:
        nodes = rng.integers(n, size=k)
    else:
        nodes = rng.choice(n, size=min(k, n), replace=False)
    if integer:
        masses = rng.integers(1, 10, size=len(nodes)).astype(np.float64)
    else:
        masses = rng.uniform(0.05, 1.0, size=len(nodes))
    return nodes.astype(np.int64), masses


def random_measures(rng, n, count, **kw):
    return [random_measure(rng, n, **kw) for _ in range(count)]


def to_csr_input(measures):
    """list of (nodes, masses) -> (indptr, nodes, masses) CSR batch arrays."""
    indptr = np.zeros(len(measures) + 1, dtype=np.int64)
    indptr[1:] = np.cumsum([len(m[0]) for m in measures])
    nodes = (
        np.concatenate([np.asarray(m[0], dtype=np.int64) for m in measures])
        if measures
        else np.zeros(0, np.int64)
    )
    masses = (
        np.concatenate([np.asarray(m[1], dtype=np.float64) for m in measures])
        if measures
        else np.zeros(0)
    )
    return indptr, nodes, masses


def pick_roots(spec: GraphSpec, k, seed=0):
    """k distinct roots that satisfy Assumption 2.1 (checked with the reference)."""
    rng = np.random.default_rng(seed)
    out = []
    for r in rng.permutation(spec.n):
        if not ref.tie_nodes(spec.n, spec.edges, spec.lengths, int(r)):
            out.append(int(r))
            if len(out) == k:
                return out
    raise RuntimeError("random graph has too few unique-path roots; change the seed")


# --------------------------------------------------------------------------- hypothesis
@st.composite
def graph_specs(draw, min_n=2, max_n=25, tree=None, kind=None):
    seed = draw(st.integers(0, 2**32 - 1))
    n = draw(st.integers(min_n, max_n))
    if tree is None:
        tree = draw(st.booleans())
    if kind is None:
        kind = draw(st.sampled_from(["euclidean", "random"]))
    extra = draw(st.integers(0, 2 * n))
    return random_graph(seed, n, extra=extra, kind=kind, tree=tree)


def measures_on(n, max_support=8):
    """Hypothesis strategy of (nodes, masses) with integer masses in [1, 20]."""
    return st.lists(
        st.tuples(st.integers(0, n - 1), st.integers(1, 20)), min_size=1, max_size=max_support
    ).map(
        lambda pairs: (
            np.array([a for a, _ in pairs], dtype=np.int64),
            np.array([b for _, b in pairs], dtype=np.float64),
        )
    )


# --------------------------------------------------------------------------- fixtures
@pytest.fixture(scope="session")
def euclid_graph():
    return random_graph(1234, 40, extra=50, kind="euclidean")


@pytest.fixture(scope="session")
def small_tree_spec():
    return random_graph(99, 25, tree=True, kind="random")


@pytest.fixture
def parallel_everywhere():
    """Lower the one serial threshold so that small inputs really take the
    parallel loops; skip where fewer than 2 threads are available."""
    from sobolev_index import _openmp_helpers

    if _openmp_helpers.effective_threads(2) < 2:
        pytest.skip("fewer than 2 CPUs (or a build without OpenMP): the parallel "
                    "loops cannot run with 2 threads here")
    old = _openmp_helpers.set_serial_threshold(1)
    yield
    _openmp_helpers.set_serial_threshold(old)
