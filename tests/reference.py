"""Slow, obvious reference implementation of Sobolev transport on graphs.

Written directly from Le, Nguyen, Phung, Nguyen, "Sobolev Transport" (AISTATS 2022):

* Cor. 3.3:  S_p(mu, nu)^p = sum_e lambda(e) |mu(gamma_e) - nu(gamma_e)|^p, where
  gamma_e is the set of nodes whose (unique) shortest path to the root z0 uses e.
  Only edges of the shortest-path tree have a non-empty gamma_e, and an edge of the
  tree is named by its child node v, i.e. e = (v, parent[v]).
* S_inf(mu, nu) = max_e |mu(gamma_e) - nu(gamma_e)| (over edges with lambda(e) > 0).
* Def. 4.6:  sliced S_p = sum_r eta_r S_p^{(r)} (one root per r).
* Prop. 4.4: inverse feature map alpha -> rho.

This module shares NO code with ``sobolev_index``: it only uses the Python standard
library and NumPy.  Everything is plain loops on purpose; use it for small graphs.
"""

from __future__ import annotations

import heapq
import math

import numpy as np

__all__ = [
    "RefTree",
    "dense_measure",
    "dijkstra",
    "ref_tree",
    "ref_features",
    "ref_inverse",
    "ref_sobolev_pp",
    "ref_sobolev",
    "ref_sliced",
    "ref_pairwise",
    "ref_dist_from_alpha",
    "ref_support_edges",
    "ref_tree_metric",
    "ref_graph_metric",
    "tie_nodes",
]


# --------------------------------------------------------------------------- measures
def dense_measure(nodes, masses, n_nodes, normalize=True):
    """(nodes, masses) -> dense vector of length n_nodes; duplicates summed."""
    rho = [0.0] * n_nodes
    nodes = [int(v) for v in np.asarray(nodes).ravel()]
    masses = [float(m) for m in np.asarray(masses, dtype=float).ravel()]
    if len(nodes) != len(masses):
        raise ValueError("nodes and masses differ in length")
    for v, m in zip(nodes, masses):
        rho[v] += m
    rho = np.array(rho, dtype=np.float64)
    if normalize:
        total = math.fsum(rho.tolist())
        rho = rho / total
    return rho


# --------------------------------------------------------------------------- graphs
def adjacency(n_nodes, edges, lengths):
    adj = [[] for _ in range(n_nodes)]
    for (a, b), w in zip(np.asarray(edges).tolist(), np.asarray(lengths, float).tolist()):
        adj[int(a)].append((int(b), float(w)))
        adj[int(b)].append((int(a), float(w)))
    return adj


def dijkstra(n_nodes, edges, lengths, root):
    """Plain heapq Dijkstra. Returns (dist list, parent list, parent-edge length list)."""
    adj = adjacency(n_nodes, edges, lengths)
    dist = [math.inf] * n_nodes
    parent = [-1] * n_nodes
    plen = [0.0] * n_nodes
    done = [False] * n_nodes
    dist[root] = 0.0
    heap = [(0.0, root)]
    while heap:
        d, u = heapq.heappop(heap)
        if done[u]:
            continue
        done[u] = True
        for v, w in adj[u]:
            nd = d + w
            if nd < dist[v]:
                dist[v] = nd
                parent[v] = u
                plen[v] = w
                heapq.heappush(heap, (nd, v))
    return dist, parent, plen


def tie_nodes(n_nodes, edges, lengths, root, rtol=1e-9):
    """Nodes that have more than one shortest path to ``root`` (within rtol).

    A node v has a second shortest path iff some neighbour u other than parent[v]
    satisfies dist[u] + w(u, v) == dist[v].  Nodes "downstream" of such a node also
    have several shortest paths; they are included.
    """
    dist, parent, _ = dijkstra(n_nodes, edges, lengths, root)
    direct = set()
    for (a, b), w in zip(np.asarray(edges).tolist(), np.asarray(lengths, float).tolist()):
        for u, v in ((a, b), (b, a)):
            if v == root or parent[v] == u:
                continue
            if abs(dist[u] + w - dist[v]) <= rtol * max(dist[v], 1e-300):
                direct.add(v)
    out = set()
    for v in range(n_nodes):
        x = v
        while x != -1:
            if x in direct:
                out.add(v)
                break
            x = parent[x]
    return out


class RefTree:
    """A shortest-path tree computed by :func:`dijkstra`, with explicit gamma sets."""

    def __init__(self, n_nodes, edges, lengths, root):
        if not (0 <= root < n_nodes):
            raise ValueError("root out of range")
        self.n_nodes = int(n_nodes)
        self.root = int(root)
        dist, parent, plen = dijkstra(n_nodes, edges, lengths, root)
        if any(math.isinf(d) for d in dist):
            raise ValueError("graph is disconnected")
        self.dist = np.array(dist, dtype=np.float64)
        self.parent = np.array(parent, dtype=np.int64)
        self.w = np.array(plen, dtype=np.float64)  # w[v] = length of edge (v, parent[v])
        # depth (hop count) and explicit root paths
        self.paths = []  # paths[u] = [u, parent[u], ..., root]
        for u in range(n_nodes):
            path = [u]
            while path[-1] != root:
                path.append(parent[path[-1]])
                if len(path) > n_nodes:
                    raise AssertionError("parent array has a cycle")
            self.paths.append(path)
        self.depth = np.array([len(p) - 1 for p in self.paths], dtype=np.int64)
        # gamma[v] = set of nodes u whose root path uses edge (v, parent[v])
        self.gamma = {v: set() for v in range(n_nodes) if v != root}
        for u, path in enumerate(self.paths):
            for x in path[:-1]:  # every node but the root names the edge to its parent
                self.gamma[x].add(u)
        self.children = {v: [] for v in range(n_nodes)}
        for v in range(n_nodes):
            if v != root:
                self.children[parent[v]].append(v)

    def edge_nodes(self):
        """Non-root nodes = names of the tree edges, in increasing order."""
        return [v for v in range(self.n_nodes) if v != self.root]


def ref_tree(n_nodes, edges, lengths, root):
    return RefTree(n_nodes, edges, lengths, root)


# --------------------------------------------------------------------------- features
def ref_features(tree: RefTree, nodes, masses, normalize=True):
    """alpha[v] = mu(gamma_v) for every v (alpha[root] = 0), dense float64."""
    rho = dense_measure(nodes, masses, tree.n_nodes, normalize=normalize)
    alpha = np.zeros(tree.n_nodes, dtype=np.float64)
    for v, g in tree.gamma.items():
        alpha[v] = math.fsum(rho[u] for u in g)
    return alpha


def ref_inverse(tree: RefTree, alpha, total=1.0):
    """Prop. 4.4: rho[v] = alpha[v] - sum_{children c} alpha[c]; rho[root] = total - sum."""
    alpha = np.asarray(alpha, dtype=np.float64)
    rho = np.zeros(tree.n_nodes, dtype=np.float64)
    for v in range(tree.n_nodes):
        own = total if v == tree.root else alpha[v]
        rho[v] = own - math.fsum(alpha[c] for c in tree.children[v])
    return rho


def ref_support_edges(tree: RefTree, nodes, masses):
    """Distinct tree edges (named by child) on the root paths of the support."""
    out = set()
    for v, m in zip(np.asarray(nodes).tolist(), np.asarray(masses, float).tolist()):
        if m > 0:
            out.update(tree.paths[int(v)][:-1])
    return out


# --------------------------------------------------------------------------- distances
def ref_dist_from_alpha(tree: RefTree, a, b, p, power=False):
    """Cor. 3.3 given the two feature vectors: (sum_v w_v |a_v - b_v|^p)^(1/p), or the max."""
    terms = [(tree.w[v], abs(float(a[v]) - float(b[v]))) for v in tree.edge_nodes()]
    if math.isinf(p):
        if power:
            raise ValueError("S_inf has no p-th power")
        return max([d for w, d in terms if w > 0], default=0.0)
    if power:
        return math.fsum(w * d**p for w, d in terms)
    # Relative to the largest difference: the same sum, but no term
    # underflows for large p, and the result tends to the max as p grows.
    largest = max([d for w, d in terms if w > 0], default=0.0)
    if largest == 0.0:
        return 0.0
    return largest * math.fsum(w * (d / largest) ** p for w, d in terms) ** (1.0 / p)


def ref_sobolev_pp(mu, nu, tree: RefTree, p):
    """S_p(mu, nu)^p (Cor. 3.3) for finite p."""
    return ref_dist_from_alpha(tree, ref_features(tree, *mu), ref_features(tree, *nu), p, True)


def ref_sobolev(mu, nu, tree: RefTree, p):
    """S_p(mu, nu), p in [1, inf]."""
    return ref_dist_from_alpha(tree, ref_features(tree, *mu), ref_features(tree, *nu), p)


def ref_sliced(mu, nu, trees, p, eta=None):
    """Def. 4.6: sum_r eta_r S_p^{(r)}; eta uniform by default."""
    if isinstance(trees, RefTree):
        trees = [trees]
    if eta is None:
        eta = [1.0 / len(trees)] * len(trees)
    return math.fsum(e * ref_sobolev(mu, nu, t, p) for e, t in zip(eta, trees))


def ref_pairwise(X, Y, trees, p, eta=None, power=False):
    """Matrix of (sliced) S_p between measure lists X and Y (Y=None: X vs X).

    power=True gives S_p^p (single tree only).
    """
    if isinstance(trees, RefTree):
        trees = [trees]
    if eta is None:
        eta = [1.0 / len(trees)] * len(trees)
    if power and len(trees) != 1:
        raise ValueError("power only for one tree")
    Y = X if Y is None else Y
    D = np.zeros((len(X), len(Y)))
    for e, t in zip(eta, trees):
        AX = [ref_features(t, *m) for m in X]
        AY = [ref_features(t, *m) for m in Y]
        for i, a in enumerate(AX):
            for j, b in enumerate(AY):
                D[i, j] += e * ref_dist_from_alpha(t, a, b, p, power)
    return D


# --------------------------------------------------------------------------- metrics for POT
def ref_tree_metric(tree: RefTree):
    """d_T(u, v) along the tree: sum of w over the symmetric difference of root paths."""
    n = tree.n_nodes
    D = np.zeros((n, n))
    edge_sets = [set(p[:-1]) for p in tree.paths]
    for u in range(n):
        for v in range(n):
            D[u, v] = math.fsum(tree.w[x] for x in edge_sets[u] ^ edge_sets[v])
    return D


def ref_graph_metric(n_nodes, edges, lengths):
    """All-pairs shortest paths by Floyd-Warshall (NumPy)."""
    D = np.full((n_nodes, n_nodes), np.inf)
    np.fill_diagonal(D, 0.0)
    for (a, b), w in zip(np.asarray(edges).tolist(), np.asarray(lengths, float).tolist()):
        D[a, b] = min(D[a, b], w)
        D[b, a] = min(D[b, a], w)
    for k in range(n_nodes):
        D = np.minimum(D, D[:, k : k + 1] + D[k : k + 1, :])
    return D
