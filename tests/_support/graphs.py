"""Random graphs for the tests, deterministic given a seed (the seed is part of
every test id or hypothesis example, so failures are reproducible)."""
from dataclasses import dataclass

import numpy as np
import reference as ref
from hypothesis import strategies as st


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


@st.composite
def graph_specs(draw, min_n=2, max_n=25, tree=None, kind=None):
    """Hypothesis strategy of random GraphSpecs (trees or not, both kinds of lengths)."""
    seed = draw(st.integers(0, 2**32 - 1))
    n = draw(st.integers(min_n, max_n))
    if tree is None:
        tree = draw(st.booleans())
    if kind is None:
        kind = draw(st.sampled_from(["euclidean", "random"]))
    extra = draw(st.integers(0, 2 * n))
    return random_graph(seed, n, extra=extra, kind=kind, tree=tree)
